//! Liveness: once the faults stop, the cluster recovers (SPEC §7).
//!
//! Safety checkers pass for a cluster that does nothing at all. This one makes sure that after
//! the last fault is healed the cluster elects a leader and its watched clocks tick again,
//! each within a bound the run chooses (it must cover an election, the catch-up of missed
//! ticks and one interval of the slowest watched clock).

use crate::chaos::history::{Delivery, Violation, WatchedClock};

/// The name this checker reports under.
pub const CHECKER: &str = "liveness";

/// Checks that the cluster recovered within `bound_ms` of the last heal at `heal_ms`.
///
/// - `leader_at_ms` is when the runner first saw a leader after the heal: `None` (never) or a
///   time after `heal_ms + bound_ms` is a violation.
/// - Every watched clock that is not paused at the end (none of its pauses lacks a resume)
///   must have a scheduled (non-manual) delivery received in `(heal_ms, heal_ms + bound_ms]`.
pub fn check(
    heal_ms: u64,
    leader_at_ms: Option<u64>,
    clocks: &[WatchedClock],
    deliveries: &[Delivery],
    bound_ms: u64,
) -> Vec<Violation> {
    let deadline = heal_ms.saturating_add(bound_ms);
    let mut violations = Vec::new();
    match leader_at_ms {
        None => violations.push(Violation {
            checker: CHECKER,
            detail: format!(
                "no leader after the last fault was healed at {heal_ms} (bound {bound_ms} ms)"
            ),
        }),
        Some(at) if at > deadline => violations.push(Violation {
            checker: CHECKER,
            detail: format!(
                "the first leader after the heal at {heal_ms} was seen at {at}, {} ms later; \
                 the bound is {bound_ms} ms",
                at - heal_ms
            ),
        }),
        Some(_) => {}
    }
    for clock in clocks {
        if clock.paused.iter().any(|(_, resumed)| resumed.is_none()) {
            continue;
        }
        let mine = || {
            deliveries
                .iter()
                .filter(|delivery| delivery.clock == clock.id && !delivery.manual)
        };
        let ticked = mine()
            .any(|delivery| heal_ms < delivery.received_ms && delivery.received_ms <= deadline);
        if !ticked {
            let last_before = mine()
                .map(|delivery| delivery.received_ms)
                .filter(|&received| received <= heal_ms)
                .max();
            let first_after = mine()
                .map(|delivery| delivery.received_ms)
                .filter(|&received| received > deadline)
                .min();
            let show = |at: Option<u64>| at.map_or("none".to_string(), |at| at.to_string());
            violations.push(Violation {
                checker: CHECKER,
                detail: format!(
                    "clock {} (interval {} ms) did not tick within {bound_ms} ms of the heal at \
                     {heal_ms}: last delivery before the heal received at {}, first one after \
                     the bound at {}",
                    clock.id,
                    clock.interval_ms,
                    show(last_before),
                    show(first_after)
                ),
            });
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(id: &str, paused: Vec<(u64, Option<u64>)>) -> WatchedClock {
        WatchedClock {
            id: id.into(),
            interval_ms: 1_000,
            registered_ms: 0,
            paused,
            unsettled: Vec::new(),
        }
    }

    fn received(clock: &str, scheduled_ms: u64, received_ms: u64) -> Delivery {
        Delivery {
            clock: clock.into(),
            tick_id: format!("{clock}-{scheduled_ms}"),
            scheduled_ms,
            manual: false,
            received_ms,
        }
    }

    #[test]
    fn verdicts() {
        struct Case {
            what: &'static str,
            leader_at_ms: Option<u64>,
            clocks: Vec<WatchedClock>,
            deliveries: Vec<Delivery>,
            violations: &'static [&'static str],
        }
        let heal = 50_000;
        let bound = 10_000;
        let cases = vec![
            Case {
                what: "ticks after the heal",
                leader_at_ms: Some(52_000),
                clocks: vec![
                    watched("c1", vec![]),
                    watched("c2", vec![(1_000, Some(2_000))]),
                ],
                deliveries: vec![
                    received("c1", 45_000, 45_010),
                    received("c1", 53_000, 53_010),
                    received("c2", 59_000, 59_990),
                ],
                violations: &[],
            },
            Case {
                what: "no leader",
                leader_at_ms: None,
                clocks: vec![watched("c1", vec![])],
                deliveries: vec![received("c1", 53_000, 53_010)],
                violations: &["no leader"],
            },
            Case {
                what: "a leader too late",
                leader_at_ms: Some(61_000),
                clocks: vec![],
                deliveries: vec![],
                violations: &["seen at 61000, 11000 ms later"],
            },
            Case {
                what: "a clock silent after the heal",
                leader_at_ms: Some(52_000),
                clocks: vec![watched("c1", vec![]), watched("c2", vec![])],
                deliveries: vec![
                    received("c1", 53_000, 53_010),
                    received("c2", 49_000, 49_010),
                    received("c2", 60_000, 60_020),
                ],
                violations: &[
                    "clock c2 (interval 1000 ms) did not tick within 10000 ms of the heal at \
                     50000: last delivery before the heal received at 49010, first one after \
                     the bound at 60020",
                ],
            },
            Case {
                what: "a manual tick does not count",
                leader_at_ms: Some(52_000),
                clocks: vec![watched("c1", vec![])],
                deliveries: vec![Delivery {
                    manual: true,
                    tick_id: "c1-m1".into(),
                    ..received("c1", 53_000, 53_010)
                }],
                violations: &["clock c1"],
            },
            Case {
                what: "a clock paused at the end may stay silent",
                leader_at_ms: Some(52_000),
                clocks: vec![watched("c1", vec![(40_000, None)])],
                deliveries: vec![],
                violations: &[],
            },
        ];
        for case in cases {
            let violations = check(
                heal,
                case.leader_at_ms,
                &case.clocks,
                &case.deliveries,
                bound,
            );
            assert_eq!(
                violations.len(),
                case.violations.len(),
                "{}: {violations:#?}",
                case.what
            );
            for wanted in case.violations {
                assert!(
                    violations.iter().any(|v| v.detail.contains(wanted)),
                    "{}: no violation mentions {wanted:?}: {violations:#?}",
                    case.what
                );
            }
            assert!(violations.iter().all(|v| v.checker == CHECKER));
        }
    }
}
