//! Overlap control of webhook clocks (SPEC §5a, `crate::overlap`): the receiver's 2xx is the
//! acknowledgement, reported by the leader's `Confirm` with the instant it came; the
//! instants that fell due behind the tick are skipped (or the newest buffered) and counted.

use super::*;
use crate::webhook::SECRET_BYTES;
use crate::{Overlap, Webhook, WebhookSecret, WebhookUrl};

/// An every-second webhook clock `wc` with `overlap`, and its ticks of seconds 1 to
/// `filed_through_s` filed in the outbox.
fn ticking(overlap: Overlap, filed_through_s: u64) -> Registry {
    let mut registry = Registry::new();
    let url = WebhookUrl::parse("https://receiver.example/t").expect("a valid url");
    let registered = registry.apply(Command::Register {
        name: "hooked".into(),
        schedule: schedule("every.1.seconds"),
        id: id("wc"),
        channel: Channel::Webhook(Box::new(Webhook {
            url,
            secret: WebhookSecret::from_bytes([3; SECRET_BYTES]),
        })),
        max_clocks: NO_LIMIT,
        now_ms: 0,
        overlap,
    });
    assert!(
        matches!(registered, Outcome::Registered { .. }),
        "{registered:?}"
    );
    registry.apply(intent(filed_through_s * 1_000, 0));
    registry
}

/// The leader's confirmation that the tick of `second` was delivered, settled at
/// `settled_ms` (`None`: a leader that does not report it).
fn confirm(second: u64, settled_ms: Option<u64>) -> Command {
    let due = second * 1_000;
    Command::Confirm {
        ticks: vec![(due, TickId::scheduled(&id("wc"), due))],
        published_ms: vec![Some(due)],
        attempts: Vec::new(),
        settled_ms: settled_ms.map(|at| vec![Some(at)]).unwrap_or_default(),
    }
}

/// The outbox's ticks with their `skipped`.
fn outbox(registry: &Registry) -> Vec<(String, u32)> {
    let ticks = registry.ledger().outbox.values();
    ticks
        .map(|tick| (tick.id.to_string(), tick.skipped))
        .collect()
}

#[test]
fn with_skip_the_instants_due_before_the_receiver_answered_are_counted_in_the_next() {
    let mut registry = ticking(Overlap::Skip, 6);
    // The receiver answered the tick of 1 s at 3.5 s: 2 s and 3 s fell due meanwhile.
    registry.apply(confirm(1, Some(3_500)));
    let expected = [("wc-4000", 2), ("wc-5000", 0), ("wc-6000", 0)];
    assert_eq!(
        outbox(&registry),
        expected.map(|(id, n)| (id.to_owned(), n))
    );
    assert_eq!(stats_of(&registry, "wc").skipped, 2);
    assert_eq!(registry.ledger().counters().skipped, 2);
}

#[test]
fn with_buffer_one_the_newest_instant_due_meanwhile_waits_and_counts_the_older() {
    let mut registry = ticking(Overlap::BufferOne, 6);
    registry.apply(confirm(1, Some(3_500)));
    let expected = [
        ("wc-3000", 1),
        ("wc-4000", 0),
        ("wc-5000", 0),
        ("wc-6000", 0),
    ];
    assert_eq!(
        outbox(&registry),
        expected.map(|(id, n)| (id.to_owned(), n))
    );
    assert_eq!(stats_of(&registry, "wc").skipped, 1);
}

#[test]
fn instants_skipped_before_the_next_tick_is_filed_are_carried_into_it() {
    let mut registry = ticking(Overlap::Skip, 3);
    registry.apply(confirm(1, Some(3_500)));
    assert_eq!(outbox(&registry), []);
    registry.apply(intent(5_000, 3_600));
    let expected = [("wc-4000", 2), ("wc-5000", 0)];
    assert_eq!(
        outbox(&registry),
        expected.map(|(id, n)| (id.to_owned(), n))
    );
}

#[test]
fn manual_ticks_wait_their_turn_and_are_never_skipped() {
    let mut registry = ticking(Overlap::Skip, 5);
    registry.apply(Command::Tick {
        id: id("wc"),
        now_ms: 1_500,
        request: None,
    });
    registry.apply(confirm(1, Some(3_500)));
    let left: Vec<String> = outbox(&registry).into_iter().map(|(id, _)| id).collect();
    assert_eq!(left, ["wc-m0", "wc-4000", "wc-5000"]);
    let skipped: Vec<u32> = outbox(&registry).into_iter().map(|(_, n)| n).collect();
    assert_eq!(skipped, [0, 2, 0]);
}

#[test]
fn a_confirmation_without_its_settlement_or_below_level_3_skips_nothing() {
    let everything = ["wc-2000", "wc-3000", "wc-4000"];
    let mut registry = ticking(Overlap::Skip, 4);
    registry.apply(confirm(1, None));
    let left: Vec<String> = outbox(&registry).into_iter().map(|(id, _)| id).collect();
    assert_eq!(left, everything);

    let mut registry = ticking(Overlap::Skip, 4);
    registry.apply_at(Level::V0_2, confirm(1, Some(3_500)));
    let left: Vec<String> = outbox(&registry).into_iter().map(|(id, _)| id).collect();
    assert_eq!(left, everything);
}

#[test]
fn a_clock_without_overlap_control_keeps_every_instant_whatever_the_confirmation_says() {
    let mut registry = ticking(Overlap::Allow, 4);
    registry.apply(confirm(1, Some(3_500)));
    let left: Vec<String> = outbox(&registry).into_iter().map(|(id, _)| id).collect();
    assert_eq!(left, ["wc-2000", "wc-3000", "wc-4000"]);
}
