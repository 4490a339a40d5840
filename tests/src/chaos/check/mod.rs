//! The checkers of the chaos suite: pure functions from a recorded history to a verdict.
//!
//! A chaos run records what its clients did ([`Event`]s), what its consumers received
//! ([`Delivery`](crate::chaos::history::Delivery)s) and what the cluster holds at the end.
//! Each checker below guards one guarantee of SPEC §7 and returns the
//! [`Violation`](crate::chaos::history::Violation)s it found, each with the evidence (ids,
//! times, the operations involved) a person needs to debug the run. An empty list is a pass.
//!
//! - [`durability`]: an acknowledged write survives. Every clock whose registration was
//!   acknowledged still exists after the final full-cluster restart, and the last
//!   acknowledged pause or resume of a clock is still in force. Guards against lost writes
//!   (a write acknowledged before it was fsynced on a quorum, a log truncated on failover).
//! - [`linearizable`]: the registry behaves like one copy of a map, operation by operation.
//!   A Wing–Gong search (with memoization, as in Knossos and porcupine) per clock name looks
//!   for an order of the operations that respects real time and a sequential model of the
//!   registry. Guards against stale reads, split-brain writes, two clocks for one pair.
//! - [`ticks`]: no scheduled tick is lost, none is delivered under a new id, none fires while
//!   its clock is paused, every one falls on an instant of its schedule. Redelivery under the
//!   same id is allowed (SPEC §7) and only counted. The webhook clocks, whose receiver no
//!   fault touches, are held to a strict rule: every instant within the liveness bound of the
//!   last heal.
//! - [`leases`]: every instant of a lease clock, whose consumer acks whatever it is handed,
//!   is handed out and acked exactly once, whatever became of the leader with leases open;
//!   redelivery after a lease ran out keeps the `tick_id` and counts one more delivery.
//! - [`liveness`]: once the last fault is healed the cluster has a leader and every running
//!   watched clock ticks again, within a bound. Guards against a cluster that stays safe by
//!   doing nothing.
//!
//! Everything here is deterministic: no I/O, no clock, no randomness, so a failing history can
//! be replayed through the checker in a unit test.

use crate::chaos::history::{Event, Op, OpResult};

pub mod durability;
pub mod leases;
pub mod linearizable;
pub mod liveness;
pub mod ticks;

/// One operation as a line of evidence: `[start..end] client C node N: op -> result`.
///
/// Shared by the checkers so that every report prints operations the same way.
pub(crate) fn describe(event: &Event) -> String {
    let end = match event.result {
        OpResult::Indeterminate(_) => format!("{} (gave up)", event.end_ms),
        _ => event.end_ms.to_string(),
    };
    format!(
        "[{}..{}] client {} node {}: {} -> {}",
        event.start_ms,
        end,
        event.client,
        event.node,
        describe_op(&event.op),
        describe_result(&event.result)
    )
}

/// An operation in a few words: `pause(id)`, `register(name)`.
pub(crate) fn describe_op(op: &Op) -> String {
    match op {
        Op::Register { name } => format!("register({name:?})"),
        Op::Pause { id } => format!("pause({id})"),
        Op::Resume { id } => format!("resume({id})"),
        Op::Get { id } => format!("get({id})"),
        Op::ListByName { name } => format!("list(name={name:?})"),
    }
}

/// A result in a few words: `registered id status`, `[(id, status)]`, `not found`.
pub(crate) fn describe_result(result: &OpResult) -> String {
    match result {
        OpResult::Registered { id, status } => format!("registered {id} {status}"),
        OpResult::Status(status) => status.clone(),
        OpResult::Listed(clocks) => {
            let items: Vec<String> = clocks
                .iter()
                .map(|(id, status)| format!("{id} {status}"))
                .collect();
            format!("[{}]", items.join(", "))
        }
        OpResult::NotFound => "not found".to_string(),
        OpResult::Indeterminate(why) => format!("indeterminate ({why})"),
    }
}

/// Test support: asserts a checker's verdict on one table case.
#[cfg(test)]
pub(crate) fn assert_verdict(
    what: &str,
    violations: &[crate::chaos::history::Violation],
    checker: &str,
    expected: usize,
    mentions: &str,
) {
    assert_eq!(violations.len(), expected, "{what}: {violations:#?}");
    for violation in violations {
        assert_eq!(violation.checker, checker);
        assert!(
            violation.detail.contains(mentions),
            "{what}: {:?} should mention {mentions:?}",
            violation.detail
        );
    }
}
