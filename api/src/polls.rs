//! Liveness of http consumers, for the purge of abandoned clocks (SPEC §6).
//!
//! A poll that finds ticks pops them through Raft, which records the activity. A poll that
//! finds nothing must not cost a Raft write, so this node only remembers the queue locally and
//! [`report`] sends all such queues in one `Touch` command every [`REPORT_EVERY`]. The
//! memory is bounded by the number of distinct queues polled between two reports.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tickd_domain::{Command, QueueId};
use tickd_raft::{Replica, wall_clock};
use tokio::sync::watch;

/// How often polls that found nothing are reported: often enough for a clock TTL of a few
/// seconds in tests, rarely enough to cost nothing in production.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

/// The queues polled since the last report.
#[derive(Clone, Debug, Default)]
pub struct PollTracker(Arc<Mutex<BTreeSet<QueueId>>>);

impl PollTracker {
    /// Remembers that `queue` was polled.
    pub fn polled(&self, queue: &QueueId) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(queue.clone());
    }

    fn take(&self) -> Vec<QueueId> {
        let mut queues = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::take(&mut *queues).into_iter().collect()
    }
}

/// Reports polled queues until `stop` turns true.
pub async fn report(tracker: PollTracker, replica: Replica, mut stop: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(REPORT_EVERY);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = every.tick() => {}
        }
        let queues = tracker.take();
        if queues.is_empty() {
            continue;
        }
        let touch = Command::Touch {
            queues,
            now_ms: wall_clock::now_ms(),
        };
        if let Err(error) = replica.write(touch).await {
            tracing::debug!(%error, "poll report not committed");
        }
    }
}
