//! Durability: an acknowledged registration or action survives (SPEC §7).
//!
//! The run ends with a power loss of every node (each drops what its disk had not fsynced) and
//! a restart; the runner then lists every clock and hands the result to [`check`]. The workload never lets a clock be purged (its clocks use `@never` and
//! a long TTL), so anything acknowledged that is missing or reverted was lost.

use std::collections::{BTreeMap, BTreeSet};

use super::describe;
use crate::chaos::history::{Event, Op, OpResult, Violation};

/// The name this checker reports under.
pub const CHECKER: &str = "durability";

/// Finds acknowledged writes that the final state of the cluster does not reflect.
///
/// `final_state` maps every clock id that exists after the final full-cluster restart to its
/// status (`ACTIVE`/`PAUSED`). Two kinds of loss are reported:
///
/// - an acknowledged registration (a [`OpResult::Registered`] result) whose id is missing;
/// - an acknowledged pause or resume whose effect is lost. For each clock, the last
///   pause/resume attempted on it (by start time, whatever its result) decides: if it was
///   acknowledged ([`OpResult::Status`]), the final status must be what it set (`PAUSED` for a
///   pause, `ACTIVE` for a resume). If another pause/resume of that clock overlaps it in time,
///   the order of the two is unknown and the clock is skipped. An indeterminate operation
///   counts as overlapping everything after its start, since it may still take effect after
///   the client gave up.
///
/// Indeterminate registrations are not required to survive: they may never have happened.
pub fn check(events: &[Event], final_state: &BTreeMap<String, String>) -> Vec<Violation> {
    let mut violations = Vec::new();

    // (a) acknowledged registrations.
    let mut registrations: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for event in events {
        if let (Op::Register { .. }, OpResult::Registered { id, .. }) = (&event.op, &event.result) {
            registrations.entry(id.as_str()).or_default().push(event);
        }
    }
    let mut lost_clocks = BTreeSet::new();
    for (id, acks) in &registrations {
        if !final_state.contains_key(*id) {
            lost_clocks.insert(*id);
            let evidence: Vec<String> = acks.iter().map(|event| describe(event)).collect();
            violations.push(Violation {
                checker: CHECKER,
                detail: format!(
                    "clock {id} was registered (acknowledged {} time(s)) but does not exist \
                     after the final restart; acknowledgements:\n  {}",
                    acks.len(),
                    evidence.join("\n  ")
                ),
            });
        }
    }

    // (b) acknowledged pause/resume.
    let mut actions: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for event in events {
        match &event.op {
            Op::Pause { id } | Op::Resume { id } => {
                actions.entry(id.as_str()).or_default().push(event);
            }
            _ => {}
        }
    }
    for (id, mut ops) in actions {
        ops.sort_by_key(|event| (event.start_ms, event.end_ms));
        let Some((last, earlier)) = ops.split_last() else {
            continue;
        };
        let set = match (&last.op, &last.result) {
            (Op::Pause { .. }, OpResult::Status(_)) => "PAUSED",
            (Op::Resume { .. }, OpResult::Status(_)) => "ACTIVE",
            _ => continue,
        };
        let overlaps = earlier
            .iter()
            .any(|event| effective_end(event) >= last.start_ms);
        if overlaps {
            continue;
        }
        let found = match final_state.get(id) {
            Some(status) if status == set => continue,
            Some(status) => format!("is {status}"),
            // Already reported as a lost registration.
            None if lost_clocks.contains(id) => continue,
            None => "does not exist".to_string(),
        };
        let history: Vec<String> = ops.iter().map(|event| describe(event)).collect();
        violations.push(Violation {
            checker: CHECKER,
            detail: format!(
                "clock {id} {found} after the final restart, but the last pause/resume on it \
                 was acknowledged and set it {set}: {}\nevery pause/resume on {id}:\n  {}",
                describe(last),
                history.join("\n  ")
            ),
        });
    }

    violations
}

/// When an operation stopped being able to take effect: its end, or never for an
/// indeterminate one.
fn effective_end(event: &Event) -> u64 {
    match event.result {
        OpResult::Indeterminate(_) => u64::MAX,
        _ => event.end_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(start_ms: u64, end_ms: u64, op: Op, result: OpResult) -> Event {
        Event {
            client: 0,
            node: 1,
            op,
            start_ms,
            end_ms,
            result,
        }
    }

    fn register(start: u64, name: &str, result: OpResult) -> Event {
        event(start, start + 5, Op::Register { name: name.into() }, result)
    }

    fn registered(id: &str, status: &str) -> OpResult {
        OpResult::Registered {
            id: id.into(),
            status: status.into(),
        }
    }

    fn pause(start: u64, end: u64, id: &str, result: OpResult) -> Event {
        event(start, end, Op::Pause { id: id.into() }, result)
    }

    fn resume(start: u64, end: u64, id: &str, result: OpResult) -> Event {
        event(start, end, Op::Resume { id: id.into() }, result)
    }

    fn status(s: &str) -> OpResult {
        OpResult::Status(s.into())
    }

    fn indeterminate() -> OpResult {
        OpResult::Indeterminate("timeout".into())
    }

    fn state(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(id, s)| (id.to_string(), s.to_string()))
            .collect()
    }

    #[test]
    fn verdicts() {
        struct Case {
            what: &'static str,
            events: Vec<Event>,
            final_state: BTreeMap<String, String>,
            violations: usize,
            mentions: &'static str,
        }
        let cases = vec![
            Case {
                what: "clean history",
                events: vec![
                    register(0, "a", registered("c1", "PENDING")),
                    register(10, "b", registered("c2", "PENDING")),
                    register(20, "a", registered("c1", "ACTIVE")),
                    pause(30, 40, "c1", status("PAUSED")),
                    pause(50, 60, "c2", status("PAUSED")),
                    resume(70, 80, "c2", status("ACTIVE")),
                ],
                final_state: state(&[("c1", "PAUSED"), ("c2", "ACTIVE")]),
                violations: 0,
                mentions: "",
            },
            Case {
                what: "lost acknowledged registration",
                events: vec![
                    register(0, "a", registered("c1", "PENDING")),
                    register(10, "b", registered("c2", "PENDING")),
                ],
                final_state: state(&[("c1", "ACTIVE")]),
                violations: 1,
                mentions: "clock c2 was registered",
            },
            Case {
                what: "lost acknowledged pause",
                events: vec![
                    register(0, "a", registered("c1", "PENDING")),
                    pause(30, 40, "c1", status("PAUSED")),
                ],
                final_state: state(&[("c1", "ACTIVE")]),
                violations: 1,
                mentions: "clock c1 is ACTIVE",
            },
            Case {
                what: "lost acknowledged resume",
                events: vec![
                    register(0, "a", registered("c1", "PENDING")),
                    pause(30, 40, "c1", status("PAUSED")),
                    resume(50, 60, "c1", status("ACTIVE")),
                ],
                final_state: state(&[("c1", "PAUSED")]),
                violations: 1,
                mentions: "set it ACTIVE",
            },
            Case {
                what: "indeterminate registration that vanished",
                events: vec![
                    register(0, "a", registered("c1", "PENDING")),
                    register(10, "b", indeterminate()),
                ],
                final_state: state(&[("c1", "ACTIVE")]),
                violations: 0,
                mentions: "",
            },
            Case {
                what: "last action indeterminate: either status is fine",
                events: vec![
                    register(0, "a", registered("c1", "PENDING")),
                    pause(30, 40, "c1", status("PAUSED")),
                    resume(50, 60, "c1", indeterminate()),
                ],
                final_state: state(&[("c1", "ACTIVE")]),
                violations: 0,
                mentions: "",
            },
            Case {
                what: "overlapping pause and resume: skipped",
                events: vec![
                    register(0, "a", registered("c1", "PENDING")),
                    pause(30, 60, "c1", status("PAUSED")),
                    resume(40, 50, "c1", status("ACTIVE")),
                ],
                final_state: state(&[("c1", "PAUSED")]),
                violations: 0,
                mentions: "",
            },
            Case {
                what: "earlier indeterminate action may land late: skipped",
                events: vec![
                    register(0, "a", registered("c1", "PENDING")),
                    pause(30, 35, "c1", indeterminate()),
                    resume(50, 60, "c1", status("ACTIVE")),
                ],
                final_state: state(&[("c1", "PAUSED")]),
                violations: 0,
                mentions: "",
            },
            Case {
                what: "a lost clock is reported once, not again for its pause",
                events: vec![
                    register(0, "a", registered("c1", "PENDING")),
                    pause(30, 40, "c1", status("PAUSED")),
                ],
                final_state: state(&[]),
                violations: 1,
                mentions: "clock c1 was registered",
            },
            Case {
                what: "acknowledged pause on a clock whose registration was indeterminate",
                events: vec![
                    register(0, "a", indeterminate()),
                    pause(30, 40, "c1", status("PAUSED")),
                ],
                final_state: state(&[]),
                violations: 1,
                mentions: "clock c1 does not exist",
            },
        ];
        for case in cases {
            let violations = check(&case.events, &case.final_state);
            super::super::assert_verdict(
                case.what,
                &violations,
                CHECKER,
                case.violations,
                case.mentions,
            );
        }
    }
}
