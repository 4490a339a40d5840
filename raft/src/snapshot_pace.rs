//! When a node builds its next snapshot: once `snapshot_every` entries were applied since the
//! last one, and no sooner than [`QUIET_FACTOR`] times the last build's duration after it.
//!
//! A snapshot costs the whole state (a pass over every clock, a core for 1.5 s at a million),
//! whatever the number of entries it replaces. With a fixed entry count alone,
//! a large registry under a steady stream of writes spent most of its time snapshotting: at a
//! million clocks, 1 000 entries came every 12 s and each build took 1.8 s, and the cluster
//! fell behind its heartbeats. Paced by the last build, a node spends at most one part in
//! [`QUIET_FACTOR`] of its time building snapshots, and a small registry, whose snapshots take
//! milliseconds, still snapshots after `snapshot_every` entries. The price is a longer log to
//! replay after a restart at large sizes, which is bounded the same way.
//!
//! openraft's own policy is off ([`crate::timing::raft_config`]); this task asks it for a
//! snapshot ([`openraft::raft::trigger::Trigger::snapshot`]), which openraft ignores while one
//! is being built. Every node runs it: each compacts its own log.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, interval};

use crate::Raft;

/// A node spends at most one part in this many of its time building snapshots.
pub const QUIET_FACTOR: u32 = 20;

/// How often the applied and snapshotted positions are compared.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// How long a requested snapshot may take to appear before it is requested again (openraft
/// logs a failed build and forgets it).
const RETRY_AFTER: Duration = Duration::from_secs(120);

/// The pacing state: when the last build was asked for and how long builds take.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    every: u64,
    /// A build asked for and not yet seen: when, and the snapshot index it should pass.
    pending: Option<(Instant, Option<u64>)>,
    /// No build is asked for before this instant.
    quiet_until: Option<Instant>,
}

impl Pace {
    /// Pacing for `every` entries between snapshots (at least one).
    pub fn new(every: u64) -> Self {
        Self {
            every: every.max(1),
            pending: None,
            quiet_until: None,
        }
    }

    /// Whether to ask for a snapshot now, given the last applied index and the last snapshot's
    /// index; notes the request when it says yes, and the build's duration when a requested
    /// snapshot has appeared.
    pub fn check(&mut self, now: Instant, applied: Option<u64>, snapshot: Option<u64>) -> bool {
        if let Some((asked, before)) = self.pending {
            if snapshot > before {
                let took = now.saturating_duration_since(asked);
                self.quiet_until = now.checked_add(took.saturating_mul(QUIET_FACTOR));
                self.pending = None;
            } else if now.saturating_duration_since(asked) < RETRY_AFTER {
                return false;
            }
        }
        let since = applied
            .unwrap_or_default()
            .saturating_sub(snapshot.unwrap_or_default());
        let quiet = self.quiet_until.is_some_and(|until| now < until);
        if since < self.every || quiet {
            return false;
        }
        self.pending = Some((now, snapshot));
        true
    }
}

/// Asks `raft` for snapshots at the pace of [`Pace`] until `stop` turns true.
pub async fn run(raft: Raft, every: u64, mut stop: watch::Receiver<bool>) {
    let mut pace = Pace::new(every);
    let mut checks = interval(CHECK_EVERY);
    checks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = checks.tick() => {}
            _ = stop.changed() => return,
        }
        let (applied, snapshot) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            (
                metrics.last_applied.map(|id| id.index),
                metrics.snapshot.map(|id| id.index),
            )
        };
        if pace.check(Instant::now(), applied, snapshot)
            && let Err(fatal) = raft.trigger().snapshot().await
        {
            tracing::debug!(%fatal, "no snapshot: the consensus core stopped");
            return crate::failure::idle_until_stop(&mut stop).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn asks_after_every_entries_and_not_again_while_building() {
        let start = Instant::now();
        let mut pace = Pace::new(10);
        assert!(!pace.check(start, Some(9), None));
        assert!(pace.check(at(start, 1), Some(10), None));
        assert!(
            !pace.check(at(start, 2), Some(30), None),
            "one build at a time"
        );
    }

    #[test]
    fn waits_twenty_builds_after_a_slow_build() {
        let start = Instant::now();
        let mut pace = Pace::new(10);
        assert!(pace.check(start, Some(10), None));
        // The snapshot appears 2 s later: the next one waits 40 s, whatever the log did.
        assert!(!pace.check(at(start, 2_000), Some(50), Some(10)));
        assert!(!pace.check(at(start, 41_999), Some(5_000), Some(10)));
        assert!(pace.check(at(start, 42_000), Some(5_000), Some(10)));
    }

    #[test]
    fn a_fast_build_leaves_the_entry_count_in_charge() {
        let start = Instant::now();
        let mut pace = Pace::new(10);
        assert!(pace.check(start, Some(10), None));
        assert!(!pace.check(at(start, 5), Some(15), Some(10)));
        assert!(pace.check(at(start, 200), Some(20), Some(10)));
    }

    #[test]
    fn asks_again_when_a_requested_snapshot_never_appears() {
        let start = Instant::now();
        let mut pace = Pace::new(10);
        assert!(pace.check(start, Some(10), None));
        assert!(!pace.check(at(start, 119_999), Some(10), None));
        assert!(pace.check(at(start, 120_000), Some(10), None));
    }

    #[test]
    fn an_installed_snapshot_counts_as_the_last_one() {
        let start = Instant::now();
        let mut pace = Pace::new(10);
        // A follower that installed its leader's snapshot at 100 has nothing to compact yet.
        assert!(!pace.check(start, Some(105), Some(100)));
        assert!(pace.check(at(start, 1), Some(110), Some(100)));
    }
}
