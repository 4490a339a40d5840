//! Leases and acks of http-queue ticks (`crate::leases`): hidden until the deadline, handed
//! out again with one more delivery, removed by an ack, bounded, and kept by snapshots.

use super::*;
use crate::leases::{
    AckRefusal, LeasedTick, MAX_ACK_RECEIPTS, MAX_OPEN_LEASES, Receipt, RefusedReceipt,
};

/// One every-second http clock with the ticks of seconds 1 to 5 filed.
fn ticking() -> (Registry, QueueId) {
    let mut registry = Registry::new();
    let clock = create(&mut registry, "leased", "every.1.seconds", "lc");
    registry.apply(intent(5_000, 5_000));
    let Channel::Http { queue_id } = clock.channel else {
        panic!("an http clock");
    };
    (registry, queue_id)
}

/// A lease token as a node draws it, distinct per `n`.
pub(super) fn token(n: u8) -> String {
    format!("{n:032x}")
}

pub(super) fn lease(queue: &QueueId, now_ms: u64, until_ms: u64, max: u32, n: u8) -> Command {
    Command::Lease {
        queue: queue.clone(),
        now_ms,
        until_ms,
        max,
        token: token(n),
        max_deliveries: 3,
    }
}

pub(super) fn leased(outcome: Outcome) -> Vec<LeasedTick> {
    match outcome {
        Outcome::Leased(ticks) => ticks,
        other => panic!("expected a lease, got {other:?}"),
    }
}

pub(super) fn ack(queue: &QueueId, receipts: &[Receipt], now_ms: u64) -> Command {
    Command::Ack {
        queue: queue.clone(),
        receipts: receipts.to_vec(),
        now_ms,
    }
}

/// How many acked receipts of `queue` the ledger remembers.
fn remembered(registry: &Registry, queue: &QueueId) -> usize {
    registry
        .ledger()
        .acked_receipts()
        .get(queue)
        .map_or(0, |acked| acked.len())
}

pub(super) fn ids(ticks: &[LeasedTick]) -> Vec<String> {
    ticks.iter().map(|tick| tick.tick.id.to_string()).collect()
}

#[test]
fn a_lease_hides_its_ticks_until_the_deadline_then_hands_them_out_again() {
    let (mut registry, queue) = ticking();
    let first = leased(registry.apply(lease(&queue, 3_000, 13_000, 10, 1)));
    assert_eq!(ids(&first), ["lc-1000", "lc-2000", "lc-3000"]);
    assert!(first.iter().all(|tick| tick.deliveries == 1));
    assert_eq!(first[0].receipt.as_str(), format!("{}.0", token(1)));
    // Before the deadline: hidden from a lease and from a pop alike; the due tick of second 4
    // is the only one available.
    let second = leased(registry.apply(lease(&queue, 12_999, 22_999, 10, 2)));
    assert_eq!(ids(&second), ["lc-4000", "lc-5000"]);
    let popped = registry.apply(Command::Pop {
        queue: queue.clone(),
        now_ms: 12_999,
        request: "p1".into(),
    });
    assert_eq!(popped, Outcome::Popped(vec![]));
    // At the deadline, the first lease's ticks come back, same ids, one more delivery.
    let again = leased(registry.apply(lease(&queue, 13_000, 23_000, 2, 3)));
    assert_eq!(ids(&again), ["lc-1000", "lc-2000"]);
    assert!(again.iter().all(|tick| tick.deliveries == 2));
    // The one not taken is still available to a pop, which removes it for good.
    let Outcome::Popped(popped) = registry.apply(Command::Pop {
        queue: queue.clone(),
        now_ms: 13_000,
        request: "p2".into(),
    }) else {
        panic!("a pop");
    };
    let popped: Vec<String> = popped.iter().map(|tick| tick.id.to_string()).collect();
    assert_eq!(popped, ["lc-3000"]);
    let counters = &registry.ledger().counters;
    assert_eq!((counters.leased, counters.redelivered), (7, 2));
}

#[test]
fn an_ack_removes_for_good_and_refuses_stale_foreign_and_repeated_receipts() {
    let (mut registry, queue) = ticking();
    let first = leased(registry.apply(lease(&queue, 5_000, 15_000, 2, 1)));
    let foreign = Receipt::new(format!("{}.0", token(9)));
    let receipts = [
        first[0].receipt.clone(),
        first[0].receipt.clone(),
        foreign.clone(),
    ];
    assert_eq!(
        registry.apply(ack(&queue, &receipts, 6_000)),
        Outcome::Acked {
            acked: 1,
            refused: vec![
                RefusedReceipt {
                    receipt: first[0].receipt.clone(),
                    reason: AckRefusal::Repeated
                },
                RefusedReceipt {
                    receipt: foreign,
                    reason: AckRefusal::Unknown
                },
            ],
        }
    );
    // Acked again before its deadline (a retry): acked again, and nothing changes.
    let before = registry.clone();
    let again = registry.apply(ack(&queue, &receipts[..1], 6_000));
    assert_eq!(
        again,
        Outcome::Acked {
            acked: 1,
            refused: vec![]
        }
    );
    assert_eq!(registry, before);
    // A receipt whose lease ran out is refused as expired, and its tick comes back.
    let expired = registry.apply(ack(&queue, &[first[1].receipt.clone()], 15_000));
    assert!(
        matches!(&expired, Outcome::Acked { acked: 0, refused } if refused[0].reason == AckRefusal::Expired),
        "{expired:?}"
    );
    let later = leased(registry.apply(lease(&queue, 15_000, 25_000, 10, 2)));
    assert_eq!(ids(&later), ["lc-2000", "lc-3000", "lc-4000", "lc-5000"]);
    assert_eq!(later[0].deliveries, 2);
    // The old receipt of a tick handed out again is stale: unknown.
    let stale = registry.apply(ack(&queue, &[first[1].receipt.clone()], 16_000));
    assert!(
        matches!(&stale, Outcome::Acked { acked: 0, refused } if refused[0].reason == AckRefusal::Unknown),
        "{stale:?}"
    );
    // The acked tick never comes back, however long one waits.
    let receipts: Vec<Receipt> = later.iter().map(|tick| tick.receipt.clone()).collect();
    assert!(matches!(
        registry.apply(ack(&queue, &receipts, 16_000)),
        Outcome::Acked { acked: 4, .. }
    ));
    let none = leased(registry.apply(lease(&queue, 100_000, 110_000, 10, 3)));
    assert_eq!(ids(&none), Vec::<String>::new());
    assert!(registry.ledger().leases_of(&queue).is_none());
    assert_eq!(stats_of(&registry, "lc").acked, 5);
}

#[test]
fn an_ack_of_another_queues_receipt_is_unknown() {
    let (mut registry, queue) = ticking();
    let other = create(&mut registry, "other", "every.1.seconds", "oc");
    let Channel::Http { queue_id: other } = other.channel else {
        panic!("an http clock");
    };
    let first = leased(registry.apply(lease(&queue, 5_000, 15_000, 1, 1)));
    let outcome = registry.apply(ack(&other, &[first[0].receipt.clone()], 6_000));
    assert!(
        matches!(&outcome, Outcome::Acked { acked: 0, refused } if refused[0].reason == AckRefusal::Unknown),
        "{outcome:?}"
    );
    assert_eq!(registry.ledger().leased_in_queue(&queue), 1);
}

#[test]
fn a_tick_handed_out_max_deliveries_times_is_given_up_and_counted() {
    let (mut registry, queue) = ticking();
    let mut now = 5_000;
    for delivery in 1..=3u32 {
        let ticks =
            leased(registry.apply(lease(&queue, now, now + 10_000, 1, 10 + delivery as u8)));
        assert_eq!(ids(&ticks), ["lc-1000"]);
        assert_eq!(ticks[0].deliveries, delivery);
        now += 10_000;
    }
    // The third lease ran out: max_deliveries (3) reached, so the tick is given up and the
    // next one is handed out instead.
    let next = leased(registry.apply(lease(&queue, now, now + 10_000, 1, 20)));
    assert_eq!(ids(&next), ["lc-2000"]);
    assert_eq!(registry.ledger().counters.given_up, 1);
    let stats = stats_of(&registry, "lc");
    assert_eq!((stats.given_up, stats.redelivered), (1, 2));
}

#[test]
fn leased_ticks_count_against_the_queue_limit_and_are_never_dropped() {
    let mut registry = Registry::new();
    let clock = create(&mut registry, "full", "every.1.seconds", "fc");
    let Channel::Http { queue_id: queue } = clock.channel.clone() else {
        panic!("an http clock");
    };
    let keeping_three = |through_ms| {
        Command::Intend(Intent {
            through_ms,
            now_ms: through_ms,
            catch_up_ms: 60_000,
            queue_limit: 3,
            in_flight_from_ms: None,
        })
    };
    registry.apply(keeping_three(3_000));
    let held = leased(registry.apply(lease(&queue, 3_000, 60_000, 2, 1)));
    assert_eq!(ids(&held), ["fc-1000", "fc-2000"]);
    // Two leased and one waiting fill the limit of three: each new tick drops the oldest
    // waiting one, never a leased one.
    registry.apply(keeping_three(5_000));
    assert_eq!(queue_ids(&registry, &clock), ["fc-5000"]);
    assert_eq!(registry.ledger().leased_in_queue(&queue), 2);
    // With every place leased, a new tick is itself dropped.
    let rest = leased(registry.apply(lease(&queue, 5_000, 60_000, 5, 2)));
    assert_eq!(ids(&rest), ["fc-5000"]);
    registry.apply(keeping_three(6_000));
    assert_eq!(queue_ids(&registry, &clock), Vec::<String>::new());
    assert_eq!(registry.ledger().leased_in_queue(&queue), 3);
    assert_eq!(stats_of(&registry, "fc").dropped, 3);
}

#[test]
fn a_queue_holds_at_most_max_open_leases() {
    let mut registry = Registry::new();
    let clock = create(&mut registry, "many", "every.1.seconds", "mc");
    let Channel::Http { queue_id: queue } = clock.channel else {
        panic!("an http clock");
    };
    let limit = u64::try_from(MAX_OPEN_LEASES).expect("small") + 10;
    registry.apply(Command::Intend(Intent {
        through_ms: limit * 1_000,
        now_ms: limit * 1_000,
        catch_up_ms: 3_600_000,
        queue_limit: limit,
        in_flight_from_ms: None,
    }));
    let now = limit * 1_000;
    for n in 0..MAX_OPEN_LEASES {
        let token = format!("{n:032x}");
        let outcome = registry.apply(Command::Lease {
            queue: queue.clone(),
            now_ms: now,
            until_ms: now + 30_000,
            max: 1,
            token,
            max_deliveries: 3,
        });
        assert_eq!(leased(outcome).len(), 1);
    }
    let before = registry.clone();
    let over = registry.apply(lease(&queue, now, now + 30_000, 1, 255));
    assert_eq!(
        over,
        Outcome::LeasesFull {
            open: u64::try_from(MAX_OPEN_LEASES).expect("small")
        }
    );
    assert_eq!(registry, before, "a refused lease changed the registry");
    // Once they run out they no longer count.
    let later = registry.apply(lease(&queue, now + 30_000, now + 60_000, 1, 255));
    assert_eq!(leased(later).len(), 1);
}

#[test]
fn hostile_terms_and_unknown_queues_change_nothing() {
    let (mut registry, queue) = ticking();
    let before = registry.clone();
    let bad = |change: &dyn Fn(&mut Command)| {
        let mut command = lease(&queue, 5_000, 15_000, 10, 1);
        change(&mut command);
        command
    };
    let set = |field: &'static str, value: u64| {
        move |command: &mut Command| {
            if let Command::Lease {
                max,
                until_ms,
                max_deliveries,
                ..
            } = command
            {
                match field {
                    "max" => *max = u32::try_from(value).expect("small"),
                    "until" => *until_ms = value,
                    _ => *max_deliveries = u32::try_from(value).expect("small"),
                }
            }
        }
    };
    let hostile = [
        bad(&set("max", 0)),
        bad(&set("max", 101)),
        bad(&set("until", 5_999)),
        bad(&set("until", 4_000)),
        bad(&set("until", 5_000 + 3_600_000 + 60_001)),
        bad(&set("deliveries", 0)),
        bad(&|command: &mut Command| {
            if let Command::Lease { token, .. } = command {
                *token = "not-a-token".into();
            }
        }),
    ];
    for command in hostile {
        let outcome = registry.apply(command.clone());
        assert!(
            matches!(outcome, Outcome::Rejected { .. }),
            "{command:?} gave {outcome:?}"
        );
    }
    let too_many: Vec<Receipt> = (0..=MAX_ACK_RECEIPTS)
        .map(|n| Receipt::new(n.to_string()))
        .collect();
    assert!(matches!(
        registry.apply(ack(&queue, &too_many, 5_000)),
        Outcome::Rejected { .. }
    ));
    let nowhere = QueueId::new("n".repeat(32));
    assert_eq!(
        registry.apply(lease(&nowhere, 5_000, 15_000, 1, 1)),
        Outcome::NotFound
    );
    assert_eq!(registry.apply(ack(&nowhere, &[], 5_000)), Outcome::NotFound);
    assert_eq!(registry, before);
    // A token in use in the queue hands out nothing new, so that receipts stay single-use.
    let first = leased(registry.apply(lease(&queue, 5_000, 15_000, 1, 1)));
    let reused = leased(registry.apply(lease(&queue, 5_000, 15_000, 2, 1)));
    assert_eq!(reused, first);
    assert_eq!(registry.ledger().leased_in_queue(&queue), 1);
}

/// A forwarded lease or ack whose answer was lost is sent again by the node that proposed it
/// (`tickd_raft::Replica::write`), and both attempts may commit: the second must answer as the
/// first did and change nothing.
#[test]
fn a_retried_lease_or_ack_answers_as_the_first_attempt_did() {
    let mut registry = Registry::new();
    let clock = create(&mut registry, "retried", "every.1.seconds", "rc");
    let Channel::Http { queue_id: queue } = clock.channel else {
        panic!("an http clock");
    };
    registry.apply(intent(12_000, 12_000));
    // Twelve ticks, so that receipts ".10" and ".11" sort before ".2" as text.
    let first = leased(registry.apply(lease(&queue, 12_000, 22_000, 12, 1)));
    assert_eq!(first.len(), 12);
    let before = registry.clone();
    let retried = leased(registry.apply(lease(&queue, 12_000, 22_000, 12, 1)));
    assert_eq!(
        retried, first,
        "a retried lease hands out what the first did, in order"
    );
    assert_eq!(registry, before, "a retried lease changed the registry");
    // An ack, its retry, and a client's retry after a lost answer, each acked.
    let receipts: Vec<Receipt> = first[..3].iter().map(|tick| tick.receipt.clone()).collect();
    let acked = Outcome::Acked {
        acked: 3,
        refused: vec![],
    };
    assert_eq!(registry.apply(ack(&queue, &receipts, 13_000)), acked);
    let after_first = registry.clone();
    assert_eq!(registry.apply(ack(&queue, &receipts, 13_000)), acked);
    assert_eq!(registry, after_first, "a retried ack changed the registry");
    assert_eq!(registry.apply(ack(&queue, &receipts, 21_999)), acked);
    assert_eq!(stats_of(&registry, "rc").acked, 3);
    assert_eq!(registry.ledger().counters.acked, 3);
    // Remembered receipts travel in snapshots, as the leases do.
    let json = serde_json::to_string(&RegistrySnapshot::from(registry.clone()))
        .expect("a snapshot encodes");
    let loaded = Registry::try_from(
        serde_json::from_str::<RegistrySnapshot>(&json).expect("a snapshot decodes"),
    )
    .expect("a snapshot loads");
    assert_eq!(loaded, registry);
    // From the deadline on, the receipts are forgotten: unknown.
    let late = registry.apply(ack(&queue, &receipts[..1], 22_000));
    assert!(
        matches!(&late, Outcome::Acked { acked: 0, refused } if refused[0].reason == AckRefusal::Unknown),
        "{late:?}"
    );
    assert_eq!(remembered(&registry, &queue), 0);
}

#[test]
fn a_queue_remembers_at_most_its_queue_limit_of_acked_receipts() {
    let mut registry = Registry::new();
    let clock = create(&mut registry, "bounded", "every.1.seconds", "bc");
    let Channel::Http { queue_id: queue } = clock.channel else {
        panic!("an http clock");
    };
    registry.apply(Command::Intend(Intent {
        through_ms: 8_000,
        now_ms: 8_000,
        catch_up_ms: 60_000,
        queue_limit: 4,
        in_flight_from_ms: None,
    }));
    // Two leases of two ticks each, the earlier with the earlier deadline, all acked; then two
    // more ticks filed, leased and acked: six acked receipts for a limit of four.
    let early = leased(registry.apply(lease(&queue, 8_000, 20_000, 2, 1)));
    let late = leased(registry.apply(lease(&queue, 8_000, 30_000, 2, 2)));
    let receipts = |ticks: &[LeasedTick]| -> Vec<Receipt> {
        ticks.iter().map(|tick| tick.receipt.clone()).collect()
    };
    let everything: Vec<Receipt> = receipts(&early)
        .into_iter()
        .chain(receipts(&late))
        .collect();
    registry.apply(ack(&queue, &everything, 9_000));
    registry.apply(Command::Intend(Intent {
        through_ms: 12_000,
        now_ms: 12_000,
        catch_up_ms: 60_000,
        queue_limit: 4,
        in_flight_from_ms: None,
    }));
    let last = leased(registry.apply(lease(&queue, 12_000, 40_000, 2, 3)));
    assert_eq!(last.len(), 2);
    registry.apply(ack(&queue, &receipts(&last), 12_000));
    assert_eq!(remembered(&registry, &queue), 4);
    // The two with the earliest deadline were forgotten early; the others are still acked.
    let outcome = registry.apply(ack(&queue, &everything, 13_000));
    let Outcome::Acked { acked, refused } = outcome else {
        panic!("an ack: {outcome:?}");
    };
    assert_eq!(acked, 2);
    let forgotten: Vec<&Receipt> = refused.iter().map(|refused| &refused.receipt).collect();
    assert_eq!(forgotten, receipts(&early).iter().collect::<Vec<_>>());
    // A purged clock's queue forgets them all.
    registry.apply(Command::Purge {
        clocks: vec![id("bc")],
    });
    assert_eq!(remembered(&registry, &queue), 0);
}

#[test]
fn leases_need_level_3_and_survive_a_snapshot_and_a_restore() {
    let (mut registry, queue) = ticking();
    for level in [Level::V0_1, Level::V0_2] {
        let before = registry.clone();
        let outcome = registry.apply_at(level, lease(&queue, 5_000, 15_000, 1, 1));
        assert!(
            matches!(&outcome, Outcome::Rejected { reason } if reason.contains("level 3")),
            "{outcome:?}"
        );
        assert!(matches!(
            registry.apply_at(level, ack(&queue, &[], 5_000)),
            Outcome::Rejected { .. }
        ));
        assert_eq!(registry, before);
    }
    let held = leased(registry.apply(lease(&queue, 5_000, 15_000, 2, 1)));
    let snapshot = RegistrySnapshot::from(registry.clone());
    let json = serde_json::to_string(&snapshot).expect("a snapshot encodes");
    assert!(json.contains("\"leases\""), "{json}");
    let loaded = Registry::try_from(
        serde_json::from_str::<RegistrySnapshot>(&json).expect("a snapshot decodes"),
    )
    .expect("a snapshot loads");
    assert_eq!(loaded, registry);
    // A restored lease keeps its receipt and deadline; below level 3 it is refused.
    let mut target = Registry::new();
    let outcome = target.apply_at(Level::V0_2, restore(snapshot.clone(), 6_000));
    assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
    assert!(target.is_empty());
    assert_eq!(
        target.apply(restore(snapshot, 6_000)),
        Outcome::Restored { clocks: 1 }
    );
    let acked = target.apply(ack(&queue, &[held[0].receipt.clone()], 7_000));
    assert!(
        matches!(acked, Outcome::Acked { acked: 1, .. }),
        "{acked:?}"
    );
}

#[test]
fn a_restore_refuses_a_lease_no_node_could_have_granted() {
    let (mut registry, queue) = ticking();
    leased(registry.apply(lease(&queue, 5_000, 15_000, 1, 1)));
    let good = RegistrySnapshot::from(registry);
    let crafted = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut value = serde_json::to_value(&good).expect("encodes");
        change(&mut value["ledger"]["leases"][queue.to_string()]);
        serde_json::from_value::<RegistrySnapshot>(value).expect("decodes")
    };
    let receipt = format!("{}.0", token(1));
    let hostile = [
        crafted(&|leases| leases[&receipt]["until_ms"] = (10u64 * 3_600_000).into()),
        crafted(&|leases| leases[&receipt]["deliveries"] = 0.into()),
        crafted(&|leases| {
            let lease = leases[&receipt].take();
            *leases = serde_json::json!({ "forged": lease });
        }),
    ];
    for snapshot in hostile {
        let error = snapshot.validate_for_restore(6_000);
        assert!(
            matches!(error, Err(crate::RestoreError::Lease { .. })),
            "{error:?}"
        );
    }
    assert_eq!(good.validate_for_restore(6_000), Ok(()));
}
