//! `skipped` (SPEC §5): each tick counts its clock's instants since the previous delivered
//! tick that were coalesced into it, dropped from its full queue, or coalesced in the outbox
//! while the broker was away; from cluster level 3, and the same on every delivery.

use super::*;

/// The ticks of `clock`'s http queue as (instant, skipped).
fn queued(registry: &Registry, clock: &Clock) -> Vec<(u64, u32)> {
    let Channel::Http { queue_id } = &clock.channel else {
        panic!("an http clock");
    };
    registry
        .ledger()
        .queues()
        .get(queue_id)
        .map(|queue| {
            queue
                .iter()
                .map(|tick| (tick.due_at_ms, tick.skipped))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_outage_past_the_catch_up_window_yields_one_tick_counting_the_coalesced() {
    for (level, expected) in [(Level::V0_3, 48), (Level::V0_2, 0)] {
        let mut registry = Registry::new();
        let Outcome::Registered { clock, .. } =
            registry.apply_at(level, register("h", "every.1.seconds", "hc", NO_LIMIT))
        else {
            panic!("an http clock");
        };
        // Nothing intended for 60 s; a catch-up window of 10 s: the instants of seconds 1 to
        // 48 are coalesced into the one of second 49, the last eleven each filed on its own.
        registry.apply_at(
            level,
            Command::Intend(Intent {
                through_ms: 60_000,
                now_ms: 60_000,
                catch_up_ms: 10_000,
                queue_limit: NO_LIMIT,
                in_flight_from_ms: None,
            }),
        );
        let ticks = queued(&registry, &clock);
        assert_eq!(ticks.first(), Some(&(49_000, expected)), "{level:?}");
        assert!(
            ticks[1..].iter().all(|(_, skipped)| *skipped == 0),
            "{ticks:?}"
        );
        assert_eq!(ticks.len(), 12);
    }
}

#[test]
fn ticks_dropped_from_a_full_queue_are_counted_by_the_next_one_and_popped_with_it() {
    let mut registry = Registry::new();
    let clock = create(&mut registry, "h", "every.1.seconds", "hc");
    // A queue of three: seconds 1 to 5 filed, 1 and 2 dropped, 3 counts them.
    registry.apply(intent_keeping_three(5_000, 5_000));
    assert_eq!(
        queued(&registry, &clock),
        [(3_000, 2), (4_000, 0), (5_000, 0)]
    );
    // Three more: 3 (with its two) and 4 and 5 go, and 6 counts all five.
    registry.apply(intent_keeping_three(8_000, 8_000));
    assert_eq!(
        queued(&registry, &clock),
        [(6_000, 5), (7_000, 0), (8_000, 0)]
    );
    let Channel::Http { queue_id } = clock.channel.clone() else {
        panic!("an http clock");
    };
    let pop = || Command::Pop {
        queue: queue_id.clone(),
        now_ms: 8_000,
        request: "p".into(),
    };
    let Outcome::Popped(first) = registry.apply(pop()) else {
        panic!("a pop");
    };
    let messages: Vec<u32> = first.iter().map(|tick| tick.message().skipped).collect();
    assert_eq!(messages, [5, 0, 0]);
    // A retried pop replays the same count.
    assert_eq!(registry.apply(pop()), Outcome::Popped(first));
}

#[test]
fn outbox_ticks_coalesced_while_the_broker_is_away_are_counted_by_the_newest() {
    let mut registry = Registry::new();
    registry.apply(rabbit("r", "every.10.seconds", "ra", 0));
    registry.apply(intent(30_500, 30_000));
    // Nothing confirmed, no intent for 50 s, then one with a catch-up window of 25 s: it files
    // 50 s counting the missed 40 s, and coalesces the outbox's ticks older than 55 s (10, 20
    // and 30 s) into their newest, 50 s, which counts them too.
    registry.apply(late_intent(80_000, None));
    assert_eq!(
        outbox(&registry),
        [(50_000, 4), (60_000, 0), (70_000, 0), (80_000, 0)]
    );
    assert_eq!(stats_of(&registry, "ra").coalesced, 4);
}

/// The outbox as (instant, skipped).
fn outbox(registry: &Registry) -> Vec<(u64, u32)> {
    registry
        .ledger()
        .outbox()
        .values()
        .map(|tick| (tick.due_at_ms, tick.skipped))
        .collect()
}

/// An intent at `now_ms` after a long silence, with a catch-up window of 25 s and the
/// leader's ticks in flight from `in_flight_from_ms`.
fn late_intent(now_ms: u64, in_flight_from_ms: Option<u64>) -> Command {
    Command::Intend(Intent {
        through_ms: now_ms + 500,
        now_ms,
        catch_up_ms: 25_000,
        queue_limit: NO_LIMIT,
        in_flight_from_ms,
    })
}

#[test]
fn outbox_ticks_a_consumer_may_hold_are_not_coalesced() {
    for (level, expected, coalesced) in [
        // 10 s stays alone; 20 and 30 s are in flight, and a consumer that got them must not
        // find them counted in 50 s: only the missed 40 s is.
        (
            Level::V0_3,
            vec![(10_000, 0), (20_000, 0), (30_000, 0), (50_000, 1)],
            1,
        ),
        // Before level 3 every replica coalesces as older releases do.
        (Level::V0_2, vec![(50_000, 0)], 4),
    ] {
        let mut registry = Registry::new();
        registry.apply_at(level, rabbit("r", "every.10.seconds", "ra", 0));
        registry.apply_at(level, intent(30_500, 30_000));
        registry.apply_at(level, late_intent(80_000, Some(20_000)));
        let old: Vec<(u64, u32)> = outbox(&registry)
            .into_iter()
            .filter(|(due_at, _)| *due_at <= 50_000)
            .collect();
        assert_eq!(old, expected, "{level:?}");
        assert_eq!(stats_of(&registry, "ra").coalesced, coalesced, "{level:?}");
    }
}

#[test]
fn a_tick_in_flight_for_a_minute_past_the_catch_up_window_is_coalesced_anyway() {
    let mut registry = Registry::new();
    registry.apply(rabbit("r", "every.10.seconds", "ra", 0));
    registry.apply(intent(30_500, 30_000));
    // In flight since 10 s, and the window reaches back to 155 s: nothing older than 95 s is
    // spared, so 10 and 20 s go into 30 s, the newest of them, beside 150 s (which counts the
    // missed 40 to 140 s).
    registry.apply(late_intent(180_000, Some(10_000)));
    let old: Vec<(u64, u32)> = outbox(&registry)
        .into_iter()
        .filter(|(due_at, _)| *due_at < 155_000)
        .collect();
    assert_eq!(old, [(30_000, 2), (150_000, 11)]);
}
