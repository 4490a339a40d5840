//! Overlap control of http clocks (SPEC §5a, `crate::overlap`): one tick at a time, the
//! instants that fall due behind an unacknowledged tick skipped (or the newest of them
//! buffered) and counted in the next tick and in the clock's statistics.

use super::leases::{ack, ids, lease, leased};
use super::*;
use crate::Overlap;
use crate::leases::{LeasedTick, Receipt};

/// An every-second http clock `oc` with `overlap`, and the ticks of seconds 1 to
/// `filed_through_s` filed.
fn ticking(overlap: Overlap, filed_through_s: u64) -> (Registry, QueueId) {
    let mut registry = Registry::new();
    let mut command = register("overlapping", "every.1.seconds", "oc", NO_LIMIT);
    if let Command::Register { overlap: asked, .. } = &mut command {
        *asked = overlap;
    }
    let Outcome::Registered { clock, .. } = registry.apply(command) else {
        panic!("a registration");
    };
    assert_eq!(clock.overlap, overlap);
    registry.apply(intent(filed_through_s * 1_000, 0));
    let Channel::Http { queue_id } = clock.channel else {
        panic!("an http clock");
    };
    (registry, queue_id)
}

fn skipped(ticks: &[LeasedTick]) -> Vec<u32> {
    ticks.iter().map(|tick| tick.tick.skipped).collect()
}

fn receipts(ticks: &[LeasedTick]) -> Vec<Receipt> {
    ticks.iter().map(|tick| tick.receipt.clone()).collect()
}

#[test]
fn with_skip_a_consumer_holds_one_tick_and_the_instants_due_meanwhile_are_counted_in_the_next() {
    let (mut registry, queue) = ticking(Overlap::Skip, 10);
    // One at a time, however many the lease asks for.
    let first = leased(registry.apply(lease(&queue, 1_000, 4_000, 10, 1)));
    assert_eq!(ids(&first), ["oc-1000"]);
    // Nothing while it is held; the instant of 2 s falls due meanwhile.
    assert_eq!(
        leased(registry.apply(lease(&queue, 2_500, 5_500, 10, 2))),
        []
    );
    // Acked at 3.5 s: 2 s and 3 s fell due while it was held, and the tick of 4 s counts them.
    registry.apply(ack(&queue, &receipts(&first), 3_500));
    let next = leased(registry.apply(lease(&queue, 4_200, 7_200, 10, 3)));
    assert_eq!(ids(&next), ["oc-4000"]);
    assert_eq!(skipped(&next), [2]);
    assert_eq!(stats_of(&registry, "oc").skipped, 2);
    assert_eq!(registry.ledger().counters().skipped, 2);
}

#[test]
fn with_buffer_one_the_newest_instant_waits_behind_the_held_tick_and_counts_the_older() {
    let (mut registry, queue) = ticking(Overlap::BufferOne, 10);
    // Nobody leased for 3.5 s: 1 s is the head and 3 s waits behind it, counting 2 s; a lease
    // takes one at a time, however many it asks for.
    let first = leased(registry.apply(lease(&queue, 3_500, 6_500, 10, 1)));
    assert_eq!(ids(&first), ["oc-1000"]);
    assert_eq!(
        leased(registry.apply(lease(&queue, 5_500, 8_500, 10, 2))),
        []
    );
    registry.apply(ack(&queue, &receipts(&first), 5_600));
    // Never more than one behind: the tick of 5 s, counting 2, 3 and 4 s.
    let next = leased(registry.apply(lease(&queue, 5_700, 8_700, 10, 3)));
    assert_eq!(ids(&next), ["oc-5000"]);
    assert_eq!(skipped(&next), [3]);
    assert_eq!(stats_of(&registry, "oc").skipped, 3);
}

#[test]
fn a_lease_that_runs_out_keeps_its_tick_at_the_head_and_the_instants_behind_it_skipped() {
    let (mut registry, queue) = ticking(Overlap::Skip, 10);
    let first = leased(registry.apply(lease(&queue, 1_000, 2_000, 10, 1)));
    assert_eq!(ids(&first), ["oc-1000"]);
    // Its lease ran out at 2 s, not acked: it is handed out again, and 2 s fell due while it
    // was held.
    let again = leased(registry.apply(lease(&queue, 2_500, 3_500, 10, 2)));
    assert_eq!(ids(&again), ["oc-1000"]);
    assert_eq!(again[0].deliveries, 2);
    registry.apply(ack(&queue, &receipts(&again), 3_100));
    let next = leased(registry.apply(lease(&queue, 4_000, 5_000, 10, 3)));
    assert_eq!(ids(&next), ["oc-4000"]);
    assert_eq!(skipped(&next), [2]);
}

#[test]
fn instants_skipped_before_the_next_tick_is_filed_are_carried_into_it() {
    let (mut registry, queue) = ticking(Overlap::Skip, 3);
    let first = leased(registry.apply(lease(&queue, 1_000, 9_000, 10, 1)));
    registry.apply(ack(&queue, &receipts(&first), 3_500));
    assert_eq!(
        registry.ledger().queues().get(&queue),
        None,
        "2 s and 3 s skipped"
    );
    // The carry survives a snapshot, and the next intent's first tick counts it.
    let snapshot = serde_json::to_value(&registry).unwrap_or_default();
    let mut registry: Registry =
        serde_json::from_value(snapshot).unwrap_or_else(|error| panic!("a snapshot: {error}"));
    registry.apply(intent(5_000, 3_600));
    let next = leased(registry.apply(lease(&queue, 4_000, 9_000, 10, 2)));
    assert_eq!(ids(&next), ["oc-4000"]);
    assert_eq!(skipped(&next), [2]);
}

#[test]
fn a_pop_takes_one_tick_and_a_waiting_tick_is_unacknowledged_too() {
    let (mut registry, queue) = ticking(Overlap::Skip, 10);
    let pop = |registry: &mut Registry, now_ms: u64, request: &str| {
        let Outcome::Popped(ticks) = registry.apply(Command::Pop {
            queue: queue.clone(),
            now_ms,
            request: request.into(),
        }) else {
            panic!("a pop");
        };
        ticks
            .iter()
            .map(|tick| (tick.id.to_string(), tick.skipped))
            .collect::<Vec<_>>()
    };
    assert_eq!(pop(&mut registry, 1_000, "a"), [("oc-1000".to_owned(), 0)]);
    // 2 s waited, unacknowledged, when 3 s fell due: 3 s is skipped, 4 s counts it.
    assert_eq!(pop(&mut registry, 3_500, "b"), [("oc-2000".to_owned(), 0)]);
    assert_eq!(
        pop(&mut registry, 3_500, "b"),
        [("oc-2000".to_owned(), 0)],
        "a retry"
    );
    assert_eq!(pop(&mut registry, 4_000, "c"), [("oc-4000".to_owned(), 1)]);
}

#[test]
fn manual_ticks_take_their_turn_and_are_never_skipped() {
    let (mut registry, queue) = ticking(Overlap::Skip, 10);
    let first = leased(registry.apply(lease(&queue, 1_000, 9_000, 10, 1)));
    registry.apply(Command::Tick {
        id: id("oc"),
        now_ms: 1_500,
        request: None,
    });
    registry.apply(ack(&queue, &receipts(&first), 2_500));
    let manual = leased(registry.apply(lease(&queue, 2_600, 9_000, 10, 2)));
    assert_eq!(manual.len(), 1);
    assert!(manual[0].tick.manual, "{manual:?}");
    // 2 s fell due behind the held tick and went; the manual tick, also held, skipped 3 s.
    registry.apply(ack(&queue, &receipts(&manual), 3_100));
    let next = leased(registry.apply(lease(&queue, 4_000, 9_000, 10, 3)));
    assert_eq!(ids(&next), ["oc-4000"]);
    assert_eq!(skipped(&next), [2]);
}

#[test]
fn overlap_is_refused_below_level_3_and_for_rabbitmq_clocks() {
    let with = |mut command: Command| {
        if let Command::Register { overlap, .. } = &mut command {
            *overlap = Overlap::BufferOne;
        }
        command
    };
    let mut registry = Registry::new();
    let old = registry.apply_at(Level::V0_2, with(register("o", "every.1.seconds", "o1", 9)));
    assert!(
        matches!(&old, Outcome::Rejected { reason } if reason.contains("cluster level 3")),
        "{old:?}"
    );
    let broker = registry.apply(with(rabbit("r", "every.1.seconds", "r1", 0)));
    assert!(
        matches!(&broker, Outcome::Rejected { reason } if reason.contains("http queue")),
        "{broker:?}"
    );
    assert_eq!(registry.clocks().count(), 0);
}

#[test]
fn a_backup_with_overlap_control_restores_from_level_3_and_an_impossible_one_is_refused() {
    let (mut source, queue) = ticking(Overlap::Skip, 3);
    let first = leased(source.apply(lease(&queue, 1_000, 9_000, 10, 1)));
    source.apply(ack(&queue, &receipts(&first), 3_500));
    let snapshot: RegistrySnapshot = source.into();
    assert_eq!(snapshot.validate_for_restore(3_600), Ok(()));
    let mut old = Registry::new();
    let refused = old.apply_at(Level::V0_2, restore(snapshot.clone(), 3_600));
    assert!(
        matches!(&refused, Outcome::Rejected { reason } if reason.contains("cluster level 3")),
        "{refused:?}"
    );
    let mut target = Registry::new();
    let restored = target.apply(restore(snapshot.clone(), 3_600));
    assert!(matches!(restored, Outcome::Restored { .. }), "{restored:?}");
    assert_eq!(target.ledger().overlap_carry.get(&id("oc")), Some(&2));

    // A carry for a clock without overlap control, and overlap on a RabbitMQ clock, could not
    // have been written by tickd.
    let mut elsewhere = snapshot.clone();
    elsewhere
        .ledger
        .ticks
        .overlap_carry
        .insert(id("elsewhere"), 1);
    let mut allowing = snapshot.clone();
    allowing.clocks[0].overlap = Overlap::Allow;
    for stray in [elsewhere, allowing] {
        let refused = stray
            .validate_for_restore(3_600)
            .err()
            .map(|error| error.to_string());
        assert!(
            refused
                .as_deref()
                .is_some_and(|error| error.contains("overlap_carry")),
            "{refused:?}"
        );
    }
    let mut rabbit_with_overlap = Registry::new();
    rabbit_with_overlap.apply(rabbit("r", "every.1.seconds", "ra", 0));
    let mut snapshot: RegistrySnapshot = rabbit_with_overlap.into();
    snapshot.clocks[0].overlap = Overlap::BufferOne;
    let refused = snapshot
        .validate_for_restore(0)
        .err()
        .map(|error| error.to_string());
    assert!(
        refused
            .as_deref()
            .is_some_and(|error| error.contains("overlap buffer_one needs")),
        "{refused:?}"
    );
}
