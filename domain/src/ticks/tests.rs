use super::*;

fn schedule(literal: &str) -> Schedule {
    Schedule::parse(literal).unwrap_or_else(|err| panic!("{literal}: {err}"))
}

fn intent(through_ms: u64, now_ms: u64) -> Intent {
    Intent {
        through_ms,
        now_ms,
        catch_up_ms: 60_000,
        queue_limit: 3,
        in_flight_from_ms: None,
    }
}

#[test]
fn ids_are_deterministic() {
    let clock = ClockId::new("c".into());
    assert_eq!(TickId::scheduled(&clock, 5_000).as_str(), "c-5000");
    assert_eq!(TickId::manual(&clock, 7).as_str(), "c-m7");
}

#[test]
fn messages_carry_every_spec_field() {
    let tick = Tick {
        id: TickId::scheduled(&ClockId::new("c".into()), 1_700_000_000_000),
        clock: ClockId::new("c".into()),
        name: "n".into(),
        schedule: schedule("every.10.seconds"),
        due_at_ms: 1_700_000_000_000,
        manual: false,
        skipped: 0,
    };
    let message = tick.message();
    assert_eq!(message.scheduled_at, "2023-11-14T22:13:20.000Z");
    assert_eq!(message.tick_id, "c-1700000000000");
    assert_eq!(tick.expiry_ms(), Some(9_999));
    assert_eq!(
        Tick {
            manual: true,
            ..tick
        }
        .expiry_ms(),
        None
    );
}

#[test]
fn an_intent_files_the_instants_of_its_window() {
    let ledger = TickLedger {
        intended_through_ms: 10_000,
        ..TickLedger::default()
    };
    let cursor = Cursor::starting(0);
    let every_second = schedule("every.1.seconds");
    let (instants, coalesced) =
        ledger.due_instants(&every_second, &cursor, &intent(12_500, 12_000));
    assert_eq!((instants, coalesced), (vec![11_000, 12_000], 0));
    // A clock registered at 11 500 starts after it.
    let young = Cursor::starting(11_500);
    assert_eq!(
        ledger
            .due_instants(&every_second, &young, &intent(12_500, 12_000))
            .0,
        vec![12_000]
    );
    assert!(
        ledger
            .due_instants(&schedule("@never"), &cursor, &intent(99_000, 0))
            .0
            .is_empty()
    );
}

#[test]
fn a_long_outage_is_coalesced_beyond_the_catch_up_window() {
    let ledger = TickLedger {
        intended_through_ms: 0,
        ..TickLedger::default()
    };
    let cursor = Cursor::starting(0);
    // Down from 0 to 100 s, window 60 s: instants 1..=39 s are older than the cutoff (40 s);
    // 39 s stands for them all, 40..=100 s are delivered one by one.
    let (instants, coalesced) = ledger.due_instants(
        &schedule("every.1.seconds"),
        &cursor,
        &intent(100_000, 100_000),
    );
    assert_eq!(coalesced, 38);
    assert_eq!(instants.first(), Some(&39_000));
    assert_eq!(instants[1], 40_000);
    assert_eq!(instants.last(), Some(&100_000));
    assert_eq!(instants.len(), 62);
    let mut sorted = instants.clone();
    sorted.dedup();
    assert_eq!(sorted, instants, "no instant twice");
}

#[test]
fn an_outbox_waiting_for_the_broker_keeps_one_overdue_tick_per_clock() {
    let mut ledger = TickLedger::default();
    let (a, b) = (ClockId::new("a".into()), ClockId::new("b".into()));
    let tick = |clock: &ClockId, at: u64, manual: bool| Tick {
        id: if manual {
            TickId::manual(clock, at)
        } else {
            TickId::scheduled(clock, at)
        },
        clock: clock.clone(),
        name: "n".into(),
        schedule: schedule("every.1.seconds"),
        due_at_ms: at,
        manual,
        skipped: 0,
    };
    for at in [1_000, 2_000, 3_000, 70_000] {
        ledger.file(Level::V0_3, tick(&a, at, false), Destination::Outbox, 1);
    }
    ledger.file(Level::V0_3, tick(&b, 2_500, false), Destination::Outbox, 1);
    ledger.file(Level::V0_3, tick(&a, 1_500, true), Destination::Outbox, 1);
    assert_eq!(ledger.coalesce_outbox(Level::V0_3, 10_000).len(), 2);
    let left: Vec<&str> = ledger.outbox.values().map(|t| t.id.as_str()).collect();
    assert_eq!(left, ["a-m1500", "b-2500", "a-3000", "a-70000"]);
    assert_eq!(ledger.counters.coalesced, 2);
    assert_eq!(
        ledger.coalesce_outbox(Level::V0_3, 10_000).len(),
        0,
        "idempotent"
    );
}

/// An http clock on queue `q`, for the pop tests.
fn http_clock() -> (Clock, QueueId) {
    let queue = QueueId::new("q".into());
    let clock = Clock {
        id: ClockId::new("c".into()),
        name: "n".into(),
        schedule: schedule("every.1.seconds"),
        status: crate::clock::ClockStatus::Active,
        channel: crate::clock::Channel::Http {
            queue_id: queue.clone(),
        },
        overlap: crate::Overlap::Allow,
    };
    (clock, queue)
}

fn scheduled_at(clock: &Clock, at: u64) -> Tick {
    Tick::scheduled(&clock.id, &clock.name, &clock.schedule, at)
}

#[test]
fn http_queues_are_bounded_and_pop_only_due_ticks() {
    let mut ledger = TickLedger::default();
    let (clock, queue) = http_clock();
    for at in [1_000, 2_000, 3_000, 4_000, 5_000] {
        ledger.file(
            Level::V0_3,
            scheduled_at(&clock, at),
            Destination::Queue(&queue),
            3,
        );
    }
    assert_eq!(ledger.counters.dropped, 2);
    assert_eq!(ledger.due_in_queue(&queue, 4_500), 2);
    let popped: Vec<u64> = ledger
        .pop_due(&clock, &queue, 4_500, "p1".into(), MAX_POP_TICKS, 0)
        .iter()
        .map(|t| t.due_at_ms)
        .collect();
    assert_eq!(popped, vec![3_000, 4_000]);
    assert_eq!(ledger.next_due_in_queue(&queue), Some(5_000));
    assert!(
        ledger
            .pop_due(&clock, &queue, 4_500, "p2".into(), MAX_POP_TICKS, 0)
            .is_empty()
    );
}

#[test]
fn a_pop_returns_at_most_the_maximum_and_its_replay_keeps_only_ids() {
    let mut ledger = TickLedger::default();
    let (clock, queue) = http_clock();
    let filed = MAX_POP_TICKS * 2 + 5;
    for at in 1..=filed {
        let at = u64::try_from(at).unwrap_or(u64::MAX) * 1_000;
        ledger.file(
            Level::V0_3,
            scheduled_at(&clock, at),
            Destination::Queue(&queue),
            10_000,
        );
    }
    let later = scheduled_at(&clock, 1_000_000_000);
    ledger.file(
        Level::V0_3,
        later.clone(),
        Destination::Queue(&queue),
        10_000,
    );
    let first = ledger.pop_due(&clock, &queue, 999_999_999, "p1".into(), MAX_POP_TICKS, 0);
    assert_eq!(first.len(), MAX_POP_TICKS);
    assert_eq!(
        first.first().map(|t| t.due_at_ms),
        Some(1_000),
        "oldest first"
    );
    // A retry gets the same ticks back, rebuilt whole from the replay record.
    assert_eq!(
        ledger.pop_due(&clock, &queue, 999_999_999, "p1".into(), MAX_POP_TICKS, 0),
        first
    );
    let replay = ledger.pop_replays.get(&queue).map(|r| r.ticks.len());
    assert_eq!(replay, Some(MAX_POP_TICKS));
    let second = ledger.pop_due(&clock, &queue, 999_999_999, "p2".into(), MAX_POP_TICKS, 0);
    assert_eq!(second.len(), MAX_POP_TICKS);
    assert!(first.last().map(|t| t.due_at_ms) < second.first().map(|t| t.due_at_ms));
    let third = ledger.pop_due(&clock, &queue, 999_999_999, "p3".into(), MAX_POP_TICKS, 0);
    assert_eq!(third.len(), 5);
    // The tick filed ahead of its instant stayed, in due order behind the others.
    assert_eq!(ledger.queues.get(&queue).map(|q| q.len()), Some(1));
    assert_eq!(ledger.next_due_in_queue(&queue), Some(later.due_at_ms));
}

#[test]
fn a_pop_at_level_1_removes_every_due_tick_as_v0_1_0_did() {
    let mut ledger = TickLedger::default();
    let (clock, queue) = http_clock();
    let filed = MAX_POP_TICKS * 3;
    for at in 1..=filed {
        let at = u64::try_from(at).unwrap_or(u64::MAX) * 1_000;
        ledger.file(
            Level::V0_3,
            scheduled_at(&clock, at),
            Destination::Queue(&queue),
            10_000,
        );
    }
    let max = Level::V0_1.max_pop_ticks();
    let popped = ledger.pop_due(&clock, &queue, 999_999_999, "p1".into(), max, 0);
    assert_eq!(popped.len(), filed);
    assert!(
        !ledger.queues.contains_key(&queue),
        "an emptied queue is no entry"
    );
    assert_eq!(Level::V0_2.max_pop_ticks(), MAX_POP_TICKS);
}

#[test]
fn an_intent_is_bounded_to_its_window_whatever_it_holds() {
    let wild = Intent {
        through_ms: u64::MAX,
        now_ms: 1_000,
        catch_up_ms: u64::MAX,
        queue_limit: 0,
        in_flight_from_ms: None,
    };
    assert_eq!(
        wild.bounded(),
        Intent {
            through_ms: 1_000 + MAX_LOOKAHEAD_MS,
            now_ms: 1_000,
            catch_up_ms: MAX_CATCH_UP_MS,
            queue_limit: 1,
            in_flight_from_ms: None,
        }
    );
    let sane = intent(12_500, 12_000);
    assert_eq!(sane.bounded(), sane, "a leader's intent is unchanged");
}

#[test]
fn a_snapshot_from_before_pop_replays_still_loads() -> Result<(), serde_json::Error> {
    // Earlier versions kept the whole popped ticks under `last_pops`.
    let old = serde_json::json!({
        "intended_through_ms": 5,
        "last_pops": {"q": ["r", []]},
        "manual_sequence": 2,
    });
    let ledger: crate::LedgerSnapshot = serde_json::from_value(old)?;
    let ledger = ledger.ticks;
    assert_eq!(ledger.intended_through_ms, 5);
    assert!(ledger.pop_replays.is_empty());
    assert_eq!(ledger.queue_limit, DEFAULT_QUEUE_LIMIT);
    Ok(())
}

/// Files one due tick a second for `count` seconds into the queue of `clock`.
fn file_seconds(ledger: &mut TickLedger, clock: &Clock, queue: &QueueId, count: u64) {
    for second in 1..=count {
        ledger.file(
            Level::V0_3,
            scheduled_at(clock, second * 1_000),
            Destination::Queue(queue),
            10_000,
        );
    }
}

fn due_of(ticks: &[Tick]) -> Vec<u64> {
    ticks.iter().map(|tick| tick.due_at_ms).collect()
}

#[test]
fn earlier_pops_are_kept_for_their_retries_within_a_count_and_a_tick_budget() {
    let (clock, queue) = http_clock();
    // By count: eighteen pops of one tick each; the first is beyond the sixteen earlier ones.
    let mut ledger = TickLedger::default();
    file_seconds(&mut ledger, &clock, &queue, 20);
    for pop in 1..=18_u64 {
        let popped = ledger.pop_due(&clock, &queue, pop * 1_000, format!("p{pop}"), 1, 16);
        assert_eq!(due_of(&popped), [pop * 1_000]);
    }
    let second = ledger.pop_due(&clock, &queue, 2_000, "p2".into(), 1, 16);
    assert_eq!(due_of(&second), [2_000], "the oldest kept pop replays");
    let first = ledger.pop_due(&clock, &queue, 1_000, "p1".into(), 1, 16);
    assert!(first.is_empty(), "beyond the count a retry pops afresh");
    assert_eq!(ledger.queues.get(&queue).map(|q| q.len()), Some(2));

    // By ticks: two pops of sixty; the earlier two together hold more than a pop's maximum.
    let mut ledger = TickLedger::default();
    file_seconds(&mut ledger, &clock, &queue, 200);
    for (pop, now_ms) in [("a", 60_000), ("b", 120_000), ("c", 180_000)] {
        assert_eq!(
            ledger
                .pop_due(&clock, &queue, now_ms, pop.into(), 60, 16)
                .len(),
            60
        );
    }
    let b = ledger.pop_due(&clock, &queue, 120_000, "b".into(), 60, 16);
    assert_eq!(
        due_of(&b).first(),
        Some(&61_000),
        "the newest earlier pop replays"
    );
    let a = ledger.pop_due(&clock, &queue, 60_000, "a".into(), 60, 16);
    assert!(a.is_empty(), "beyond the tick budget a retry pops afresh");

    // None kept (below level 3): only the last pop replays, as v0.2.0 applied it.
    let mut ledger = TickLedger::default();
    file_seconds(&mut ledger, &clock, &queue, 3);
    ledger.pop_due(&clock, &queue, 1_000, "x".into(), 1, 0);
    ledger.pop_due(&clock, &queue, 2_000, "y".into(), 1, 0);
    assert!(
        ledger
            .pop_due(&clock, &queue, 1_000, "x".into(), 1, 0)
            .is_empty()
    );
}

#[test]
fn earlier_pops_survive_a_snapshot_and_are_absent_from_it_while_none()
-> Result<(), serde_json::Error> {
    let (clock, queue) = http_clock();
    let mut ledger = TickLedger::default();
    file_seconds(&mut ledger, &clock, &queue, 3);
    ledger.pop_due(&clock, &queue, 1_000, "x".into(), 1, 0);
    let alone = serde_json::to_value(&ledger)?;
    assert!(
        !alone.to_string().contains("earlier"),
        "a v0.2.0 replica reads what it wrote: {alone}"
    );
    ledger.pop_due(&clock, &queue, 2_000, "y".into(), 1, 16);
    let written = serde_json::to_string(&ledger)?;
    let read: crate::LedgerSnapshot = serde_json::from_str(&written)?;
    let mut read = read.ticks;
    assert_eq!(read.pop_replays, ledger.pop_replays);
    assert_eq!(
        due_of(&read.pop_due(&clock, &queue, 1_000, "x".into(), 1, 16)),
        [1_000]
    );
    Ok(())
}
