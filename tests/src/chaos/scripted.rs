//! One scripted fault under the chaos workload, judged by the chaos checkers.
//!
//! A chaos run draws its faults from a seed; a test about one scenario (the leader killed, the
//! leader cut off, every node restarted, the membership grown and shrunk) scripts its fault
//! and wants the same verdict. [`under_fault`] runs the workload of a chaos run around it —
//! registry clients on every node, RabbitMQ or http consumers of watched clocks ticking every
//! second — and hands the history to the same checkers: no acknowledged write lost
//! ([`durability`]), the registry linearizable ([`linearizable`]), no tick lost or renamed
//! ([`ticks`]), leader and ticks back soon after the heal ([`liveness`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::TestCluster;
use crate::chaos::check::{durability, linearizable, liveness, ticks};
use crate::chaos::history::{Op, OpResult, Violation, WatchedClock};
use crate::chaos::nemesis::{self, LEADER_BOUND};
use crate::chaos::rng::Rng;
use crate::chaos::run::{CATCH_UP_MS, LIVENESS_BOUND, final_state, register_with_retries};
use crate::chaos::time::now_ms;
use crate::chaos::workload::{self, Consumer, Records};
use crate::unique_name;

/// Registry clients running at once: enough that some keep writing while others wait out a
/// node that does not answer (a client gives up after [`workload::CLIENT_TIMEOUT`]).
const CLIENTS: usize = 4;
/// Names the registry clients share: few, so that they collide on the same clocks.
const NAMES: usize = 6;
/// Clocks whose every tick is checked.
const WATCHED: usize = 2;
/// How long every watched clock may take to deliver its first tick.
const FIRST_TICK_WITHIN: Duration = Duration::from_secs(10);
/// The workload's run-up before the fault: ticks and writes on a healthy cluster first, so
/// that the checkers compare the fault with something.
const RUN_UP: Duration = Duration::from_secs(2);
/// The last stretch of deliveries left out of the tick check: ticks due then may be on their
/// way when the consumers stop.
const IN_FLIGHT_MS: u64 = 2_000;

/// What the workload saw around one scripted fault, and what the checkers found.
#[derive(Clone)]
pub struct Verdict {
    /// Client operations recorded.
    pub operations: usize,
    /// Registrations acknowledged while the fault was in force (sent after it began, answered
    /// before it was healed): writes the durability check holds the cluster to.
    pub registered_during_fault: usize,
    /// When each acknowledged write (a registration's 201, a pause's or a resume's 200) was
    /// answered, in milliseconds since the epoch, in order: how available writes were.
    pub writes_acknowledged_ms: Vec<u64>,
    /// Tick figures of the watched clocks.
    pub ticks: ticks::TickReport,
    /// Every broken guarantee.
    pub violations: Vec<Violation>,
}

/// Every field but the acknowledged writes' times, which are counted: a failing test prints
/// the verdict, and hundreds of timestamps would bury the rest.
impl std::fmt::Debug for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verdict")
            .field("operations", &self.operations)
            .field("registered_during_fault", &self.registered_during_fault)
            .field("writes_acknowledged", &self.writes_acknowledged_ms.len())
            .field("ticks", &self.ticks)
            .field("violations", &self.violations)
            .finish()
    }
}

impl Verdict {
    /// The longest time in `(from_ms, to_ms)` without an acknowledged write, counting from
    /// `from_ms` to the first one and from the last one to `to_ms`.
    pub fn longest_write_gap_ms(&self, from_ms: u64, to_ms: u64) -> u64 {
        let inside = self
            .writes_acknowledged_ms
            .iter()
            .copied()
            .filter(|at| (from_ms..=to_ms).contains(at));
        let mut previous = from_ms;
        let mut longest = 0;
        for at in inside.chain([to_ms]) {
            longest = longest.max(at.saturating_sub(previous));
            previous = at;
        }
        longest
    }

    /// Panics unless the checkers found nothing and the run did enough to judge: operations,
    /// expected and delivered ticks.
    pub fn assert_held(&self, scenario: &str) {
        let listed: Vec<String> = self
            .violations
            .iter()
            .map(|violation| format!("[{}] {}", violation.checker, violation.detail))
            .collect();
        assert!(
            listed.is_empty(),
            "{scenario}: {} violation(s):\n{}\n{self:?}",
            listed.len(),
            listed.join("\n")
        );
        assert!(self.operations > 0, "{scenario}: no operation: {self:?}");
        assert!(
            self.ticks.expected > 0 && self.ticks.delivered > 0,
            "{scenario}: no tick to judge: {self:?}"
        );
    }
}

/// Runs the workload on `cluster` (every node of it, running or not), lets it run up, runs
/// `fault` — which must have healed whatever it broke when it returns — keeps the workload
/// going until the liveness bound has passed, and judges the history.
///
/// The durability check reads every clock through the first running node after the workload
/// has stopped, so acknowledged writes must have survived the fault and its heal.
pub async fn under_fault(
    cluster: &TestCluster,
    seed: u64,
    fault: impl Future<Output = ()>,
) -> Verdict {
    let mut rng = Rng::new(seed);
    let records = Records::default();
    let mut violations = Vec::new();

    let mut watched = Vec::new();
    let mut consumers = Vec::new();
    for index in 0..WATCHED {
        let name = unique_name(&format!("scripted-watched-{index}"));
        let Some(created) = register_with_retries(cluster, &name, &mut rng).await else {
            panic!("could not register the watched clock {name} on a healthy cluster");
        };
        consumers.push(Consumer::start(
            cluster,
            &created,
            None,
            rng.fork(),
            records.clone(),
        ));
        watched.push(WatchedClock::every_second(&created, now_ms()));
    }

    let names: Vec<String> = (0..NAMES)
        .map(|index| unique_name(&format!("scripted-{index}")))
        .collect();
    let ids = Mutex::new(BTreeMap::new());
    let until_ms = AtomicU64::new(u64::MAX);
    let clients = (0..CLIENTS).map(|client| {
        workload::registry_client(
            cluster,
            client,
            &names,
            &ids,
            rng.fork(),
            &until_ms,
            &records,
        )
    });
    let script = async {
        crate::eventually(
            "a first tick of every watched clock",
            FIRST_TICK_WITHIN,
            Duration::from_millis(50),
            || async {
                let deliveries = records.deliveries();
                watched
                    .iter()
                    .all(|clock| deliveries.iter().any(|tick| tick.clock == clock.id))
                    .then_some(())
            },
        )
        .await;
        tokio::time::sleep(RUN_UP).await;
        let fault_ms = now_ms();
        fault.await;
        let heal_ms = now_ms();
        let leader_at_ms = nemesis::await_leader(cluster, LEADER_BOUND)
            .await
            .map(|_| now_ms());
        let settled_ms = heal_ms + millis(LIVENESS_BOUND + Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(settled_ms.saturating_sub(now_ms()))).await;
        until_ms.store(now_ms(), Ordering::Relaxed);
        (fault_ms, heal_ms, leader_at_ms)
    };
    let ((fault_ms, heal_ms, leader_at_ms), _) =
        tokio::join!(script, futures::future::join_all(clients));
    let consumed_until_ms = now_ms();
    for consumer in consumers {
        consumer.stop();
    }

    let events = records.events();
    let deliveries = records.deliveries();
    match final_state(cluster).await {
        Some(state) => violations.extend(durability::check(&events, &state)),
        None => violations.push(Violation {
            checker: liveness::CHECKER,
            detail: "the cluster did not serve a list of its clocks after the fault".to_string(),
        }),
    }
    violations.extend(linearizable::check(&events));
    let first_registered_ms = watched.iter().map(|clock| clock.registered_ms).min();
    let window = (
        first_registered_ms.unwrap_or(fault_ms),
        consumed_until_ms - IN_FLIGHT_MS,
    );
    let tick_report = ticks::check(
        &watched,
        &deliveries,
        &records.unanswered_pops(),
        window,
        CATCH_UP_MS,
    );
    violations.extend(tick_report.violations.iter().cloned());
    violations.extend(liveness::check(
        heal_ms,
        leader_at_ms,
        &watched,
        &deliveries,
        millis(LIVENESS_BOUND),
    ));
    let registered_during_fault = events
        .iter()
        .filter(|event| {
            matches!(
                (&event.op, &event.result),
                (Op::Register { .. }, OpResult::Registered { .. })
            ) && event.start_ms >= fault_ms
                && event.end_ms <= heal_ms
        })
        .count();
    let mut writes_acknowledged_ms: Vec<u64> = events
        .iter()
        .filter(|event| {
            matches!(
                (&event.op, &event.result),
                (Op::Register { .. }, OpResult::Registered { .. })
                    | (Op::Pause { .. } | Op::Resume { .. }, OpResult::Status(_))
            )
        })
        .map(|event| event.end_ms)
        .collect();
    writes_acknowledged_ms.sort_unstable();
    Verdict {
        operations: events.len(),
        registered_during_fault,
        writes_acknowledged_ms,
        ticks: tick_report,
        violations,
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acknowledged_at(writes_acknowledged_ms: Vec<u64>) -> Verdict {
        Verdict {
            operations: writes_acknowledged_ms.len(),
            registered_during_fault: 0,
            writes_acknowledged_ms,
            ticks: ticks::TickReport::default(),
            violations: Vec::new(),
        }
    }

    #[test]
    fn the_longest_write_gap_counts_the_stretches_at_both_ends() {
        let verdict = acknowledged_at(vec![5, 12, 15, 40, 90]);
        assert_eq!(verdict.longest_write_gap_ms(10, 50), 25, "15 to 40");
        assert_eq!(verdict.longest_write_gap_ms(10, 80), 40, "40 to the end");
        assert_eq!(verdict.longest_write_gap_ms(0, 20), 7, "5 to 12");
        assert_eq!(
            verdict.longest_write_gap_ms(50, 85),
            35,
            "the start to the end"
        );
        assert_eq!(verdict.longest_write_gap_ms(20, 30), 10, "nothing inside");
    }
}
