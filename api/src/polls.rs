//! Liveness of http consumers, for the purge of abandoned clocks (SPEC §6).
//!
//! A poll that finds ticks pops them through Raft, which records the activity. A poll that
//! finds nothing must not cost a Raft write, so this node only remembers the queue locally and
//! [`report`] sends all such queues in one `Touch` command every [`REPORT_EVERY`]. The
//! memory is bounded by the number of distinct queues polled between two reports.
//!
//! [`LongPolls`] caps how many polls may wait at once on this node.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tickd_domain::{Command, QueueId};
use tickd_raft::Replica;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

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
            now_ms: replica.clock().now_ms(),
        };
        if let Err(error) = replica.write(touch).await {
            tracing::debug!(%error, "poll report not committed");
        }
    }
}

/// The default cap on concurrent long polls per node (`max_long_polls`): half the API
/// listener's default connection cap, so that held polls never take every connection.
pub const DEFAULT_MAX_LONG_POLLS: usize = 256;

/// The cap on this node's concurrent long polls (`?wait=N` with N > 0).
///
/// A poll that finds the cap reached is not refused: it is answered at once, like a poll
/// without `wait` (the due ticks, or `[]`). That is the answer every Ticktok client already
/// handles; a 503 would read as an outage to a client that does not know `wait`.
#[derive(Clone, Debug)]
pub struct LongPolls(Arc<Semaphore>);

impl LongPolls {
    /// A cap of `max` concurrent long polls.
    pub fn new(max: usize) -> Self {
        Self(Arc::new(Semaphore::new(max)))
    }

    /// A place for one more long poll, held until the returned permit is dropped; `None` when
    /// the cap is reached.
    pub fn try_hold(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_polls_are_capped_and_a_finished_poll_frees_its_place() {
        let polls = LongPolls::new(2);
        let first = polls.try_hold();
        let second = polls.try_hold();
        assert!(first.is_some() && second.is_some());
        assert!(polls.try_hold().is_none(), "a third poll is over the cap");
        drop(first);
        assert!(
            polls.try_hold().is_some(),
            "a finished poll frees its place"
        );
    }
}
