//! What the webhook publisher knows about each receiver (a host and port): how many of its
//! ticks are admitted, how many attempts may run at once, and its circuit.
//!
//! Isolation is per receiver: each has its own bound on concurrent attempts and on ticks
//! admitted (running or waiting for a slot), so a receiver that never answers holds its own
//! ticks and slots, never another's. A receiver that has failed [`CIRCUIT_FAILURES`] attempts
//! in a row is backed off as a whole: its circuit opens for [`CIRCUIT_OPEN`] (doubling with
//! each failed probe, up to [`CIRCUIT_OPEN_MAX`]), its ticks wait without an attempt, and once
//! the time has passed one attempt probes it; a success closes the circuit.
//!
//! The receivers that fail are reported ([`Receivers::failing`]) for the cluster's status and
//! the dashboard.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tickd_domain::webhook::{FailingReceiver, FailingReceivers};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Failed attempts in a row that open a receiver's circuit.
pub const CIRCUIT_FAILURES: u32 = 10;
/// How long a circuit first stays open.
pub const CIRCUIT_OPEN: Duration = Duration::from_secs(10);
/// The longest a circuit stays open before the next probe.
pub const CIRCUIT_OPEN_MAX: Duration = Duration::from_secs(300);

/// What one finished attempt changed about its receiver, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing worth a line.
    None,
    /// Its first failure after a success (or ever): it starts failing.
    StartedFailing,
    /// This failure opened its circuit.
    Opened,
}

/// Whether a tick may go to its receiver now.
#[derive(Debug)]
pub enum Admission {
    /// Yes: the attempt waits for one of the receiver's slots.
    Go(Arc<Semaphore>),
    /// Not before `after`: the receiver's circuit is open, or it has as many ticks admitted
    /// as it may.
    Wait {
        /// How long to wait.
        after: Duration,
        /// Why.
        reason: &'static str,
    },
}

/// One receiver's state.
#[derive(Debug)]
struct Receiver {
    /// Its attempts at once.
    slots: Arc<Semaphore>,
    /// Ticks admitted and not yet finished.
    admitted: usize,
    /// Failed attempts since the last success.
    failures: u32,
    /// The first of those failures, and why the last one failed.
    failing: Option<Failing>,
    /// While open, no attempt before this instant (then one probe).
    open_until: Option<Instant>,
    /// How long the circuit opens next time.
    next_open: Duration,
    /// A probe is running: the others wait for its answer.
    probing: bool,
}

/// Since when a receiver fails, and when and why it failed last.
#[derive(Debug)]
struct Failing {
    since: Instant,
    last: Instant,
    last_error: String,
}

/// How long after its last failed attempt a receiver with no tick admitted is forgotten: its
/// clocks are gone or paused, and it no longer holds anything back. Twice the longest circuit,
/// so a receiver that still has ticks is probed, and remembered, well within it.
pub const FORGET_AFTER: Duration = Duration::from_secs(600);

/// Every receiver that has ticks admitted or a circuit that is not closed.
#[derive(Debug)]
pub struct Receivers {
    per_receiver: usize,
    admitted_max: usize,
    receivers: HashMap<String, Receiver>,
}

/// How long a tick that finds its receiver full waits before it asks again.
pub const BUSY_WAIT: Duration = Duration::from_secs(1);

impl Receivers {
    /// Receivers allowed `per_receiver` attempts at once and `admitted_max` ticks admitted.
    pub fn new(per_receiver: usize, admitted_max: usize) -> Self {
        Receivers {
            per_receiver: per_receiver.max(1),
            admitted_max: admitted_max.max(1),
            receivers: HashMap::new(),
        }
    }

    /// Whether a tick to `receiver` may go at `now`; if so, it is admitted until
    /// [`Receivers::finished`].
    pub fn admit(&mut self, receiver: &str, now: Instant) -> Admission {
        let per_receiver = self.per_receiver;
        let state = self
            .receivers
            .entry(receiver.to_owned())
            .or_insert_with(|| Receiver {
                slots: Arc::new(Semaphore::new(per_receiver)),
                admitted: 0,
                failures: 0,
                failing: None,
                open_until: None,
                next_open: CIRCUIT_OPEN,
                probing: false,
            });
        if let Some(open_until) = state.open_until
            && (now < open_until || state.probing)
        {
            let after = open_until.saturating_duration_since(now).max(BUSY_WAIT);
            return Admission::Wait {
                after,
                reason: "its receiver keeps failing: backed off (circuit open)",
            };
        }
        if state.admitted >= self.admitted_max {
            return Admission::Wait {
                after: BUSY_WAIT,
                reason: "its receiver has the most ticks in flight it may have",
            };
        }
        // Past an open circuit's time, this tick is the probe.
        state.probing = state.open_until.is_some();
        state.admitted = state.admitted.saturating_add(1);
        Admission::Go(state.slots.clone())
    }

    /// A tick admitted for `receiver` finished at `now`: `Some(true)` if its attempt
    /// succeeded, `Some(false)` if the receiver failed it (for `reason`), `None` if the attempt
    /// says nothing about the receiver's health (it refused the tick for good, or it was never
    /// sent).
    pub fn finished(
        &mut self,
        receiver: &str,
        healthy: Option<bool>,
        reason: &str,
        now: Instant,
    ) -> Change {
        let Some(state) = self.receivers.get_mut(receiver) else {
            return Change::None;
        };
        state.admitted = state.admitted.saturating_sub(1);
        let mut change = Change::None;
        match healthy {
            Some(true) => {
                state.failures = 0;
                state.failing = None;
                state.open_until = None;
                state.next_open = CIRCUIT_OPEN;
                state.probing = false;
            }
            Some(false) => {
                state.failures = state.failures.saturating_add(1);
                if state.failures == 1 {
                    change = Change::StartedFailing;
                }
                let since = state.failing.as_ref().map_or(now, |failing| failing.since);
                state.failing = Some(Failing {
                    since,
                    last: now,
                    last_error: reason.to_owned(),
                });
                let probe_failed = state.probing;
                if probe_failed
                    || (state.open_until.is_none() && state.failures >= CIRCUIT_FAILURES)
                {
                    if state.open_until.is_none() {
                        change = Change::Opened;
                    }
                    state.open_until = Some(now + state.next_open);
                    state.next_open = (state.next_open * 2).min(CIRCUIT_OPEN_MAX);
                    state.probing = false;
                }
            }
            None => state.probing = false,
        }
        if state.admitted == 0 && state.open_until.is_none() && state.failures == 0 {
            self.receivers.remove(receiver);
        }
        change
    }

    /// How many receivers have an open circuit.
    pub fn open_circuits(&self) -> usize {
        self.receivers
            .values()
            .filter(|state| state.open_until.is_some())
            .count()
    }

    /// The receivers whose last attempt failed, as of `now`; those with no tick admitted that
    /// have not failed for [`FORGET_AFTER`] are forgotten first.
    pub fn failing(&mut self, now: Instant) -> FailingReceivers {
        self.receivers.retain(|_, state| {
            state.admitted > 0
                || state.failing.as_ref().is_none_or(|failing| {
                    now.saturating_duration_since(failing.last) < FORGET_AFTER
                })
        });
        FailingReceivers::of(
            self.receivers
                .iter()
                .filter_map(|(receiver, state)| {
                    let failing = state.failing.as_ref()?;
                    Some(FailingReceiver {
                        receiver: receiver.clone(),
                        failures: state.failures,
                        failing_for_ms: u64::try_from(
                            now.saturating_duration_since(failing.since).as_millis(),
                        )
                        .unwrap_or(u64::MAX),
                        circuit_open: state.open_until.is_some(),
                        last_error: failing.last_error.clone(),
                    })
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "receiver.example:443";

    fn go(admission: Admission) -> Arc<Semaphore> {
        match admission {
            Admission::Go(slots) => slots,
            Admission::Wait { reason, .. } => panic!("expected to go, waited: {reason}"),
        }
    }

    #[test]
    fn a_receiver_takes_at_most_its_share_of_ticks_and_others_are_not_held() {
        let now = Instant::now();
        let mut receivers = Receivers::new(2, 3);
        let slots = go(receivers.admit(HOST, now));
        assert_eq!(slots.available_permits(), 2);
        go(receivers.admit(HOST, now));
        go(receivers.admit(HOST, now));
        assert!(matches!(
            receivers.admit(HOST, now),
            Admission::Wait {
                after: BUSY_WAIT,
                reason: "its receiver has the most ticks in flight it may have"
            }
        ));
        go(receivers.admit("other.example:443", now));
        receivers.finished(HOST, Some(true), "refused", now);
        go(receivers.admit(HOST, now));
    }

    #[test]
    fn failures_in_a_row_open_the_circuit_and_one_probe_closes_or_reopens_it() {
        let now = Instant::now();
        let mut receivers = Receivers::new(4, 100);
        for failure in 1..=CIRCUIT_FAILURES {
            go(receivers.admit(HOST, now));
            let expected = match failure {
                1 => Change::StartedFailing,
                CIRCUIT_FAILURES => Change::Opened,
                _ => Change::None,
            };
            assert_eq!(
                receivers.finished(HOST, Some(false), "refused", now),
                expected
            );
        }
        assert_eq!(receivers.open_circuits(), 1);
        let Admission::Wait { after, .. } = receivers.admit(HOST, now) else {
            panic!("an open circuit lets nothing through");
        };
        assert_eq!(after, CIRCUIT_OPEN);
        // Once the time has passed, one probe goes; the others wait for its answer.
        let later = now + CIRCUIT_OPEN;
        go(receivers.admit(HOST, later));
        assert!(matches!(
            receivers.admit(HOST, later),
            Admission::Wait { .. }
        ));
        // The probe fails: open again, for twice as long.
        assert_eq!(
            receivers.finished(HOST, Some(false), "refused", later),
            Change::None
        );
        let Admission::Wait { after, .. } = receivers.admit(HOST, later) else {
            panic!("a failed probe reopens the circuit");
        };
        assert_eq!(after, CIRCUIT_OPEN * 2);
        // The next probe succeeds: closed, and every tick goes.
        let after_reopen = later + CIRCUIT_OPEN * 2;
        go(receivers.admit(HOST, after_reopen));
        receivers.finished(HOST, Some(true), "refused", after_reopen);
        assert_eq!(receivers.open_circuits(), 0);
        go(receivers.admit(HOST, after_reopen));
        go(receivers.admit(HOST, after_reopen));
    }

    #[test]
    fn a_failing_receiver_is_reported_from_its_first_failure_until_a_success() {
        let now = Instant::now();
        let mut receivers = Receivers::new(4, 100);
        go(receivers.admit(HOST, now));
        receivers.finished(HOST, Some(false), "the receiver answered 503", now);
        go(receivers.admit("healthy.example:443", now));
        receivers.finished("healthy.example:443", Some(true), "", now);
        let later = now + Duration::from_secs(3);
        for _ in 1..CIRCUIT_FAILURES {
            go(receivers.admit(HOST, later));
            receivers.finished(HOST, Some(false), "connection refused", later);
        }
        let report = receivers.failing(later + Duration::from_secs(1));
        assert_eq!(report.count, 1);
        assert_eq!(
            report.longest,
            vec![FailingReceiver {
                receiver: HOST.to_owned(),
                failures: CIRCUIT_FAILURES,
                failing_for_ms: 4_000,
                circuit_open: true,
                last_error: "connection refused".to_owned(),
            }]
        );
        // A refusal says nothing about its health; a success ends the report.
        let reopened = later + CIRCUIT_OPEN;
        go(receivers.admit(HOST, reopened));
        receivers.finished(HOST, None, "", reopened);
        assert_eq!(receivers.failing(reopened).count, 1);
        go(receivers.admit(HOST, reopened));
        receivers.finished(HOST, Some(true), "", reopened);
        assert!(receivers.failing(reopened).is_empty());
    }

    #[test]
    fn a_failing_receiver_without_ticks_is_forgotten_after_a_while() {
        let now = Instant::now();
        let mut receivers = Receivers::new(4, 100);
        go(receivers.admit(HOST, now));
        receivers.finished(HOST, Some(false), "connection refused", now);
        go(receivers.admit("busy.example:443", now));
        receivers.finished("busy.example:443", Some(false), "timed out", now);
        // One tick of the busy receiver is still admitted: it stays, however long it takes.
        go(receivers.admit("busy.example:443", now));
        assert_eq!(
            receivers
                .failing(now + FORGET_AFTER - Duration::from_millis(1))
                .count,
            2
        );
        let report = receivers.failing(now + FORGET_AFTER);
        assert_eq!(report.count, 1);
        assert_eq!(report.longest[0].receiver, "busy.example:443");
        assert_eq!(receivers.receivers.len(), 1);
    }

    #[test]
    fn a_failure_between_successes_opens_nothing() {
        let now = Instant::now();
        let mut receivers = Receivers::new(4, 100);
        for _ in 0..3 {
            for _ in 1..CIRCUIT_FAILURES {
                go(receivers.admit(HOST, now));
                receivers.finished(HOST, Some(false), "refused", now);
            }
            go(receivers.admit(HOST, now));
            receivers.finished(HOST, Some(true), "refused", now);
        }
        assert_eq!(receivers.open_circuits(), 0);
        assert!(
            receivers.receivers.is_empty(),
            "a healthy idle receiver is forgotten"
        );
    }
}
