//! Pops whose answer never reached the poller, remembered so that the next pop replays them.
//!
//! A pop removes ticks through one Raft write. When this node cannot tell whether that write
//! committed (the forward to the leader timed out, the leader changed mid-write), or the poller
//! went away before the answer (its request was cancelled, which drops the handler), the ticks
//! may have left the queue without reaching anyone. The request id of such a pop is kept here;
//! the next pop of the same queue on this node proposes it again. The replicated ledger
//! answers a repeated id with the batch that id popped, and a first attempt that never
//! committed simply pops afresh under it (`TickLedger::pop_due`). So a poller that retries on
//! the same node gets the batch it missed, with the same tick ids.
//!
//! Another pop of the same queue in between is covered from cluster level 3, within the
//! earlier pops the ledger keeps (`tickd_domain::EARLIER_POPS_KEPT`). What this does not
//! cover: a poller that retries on another node, or a node that restarts. HTTP pop stays at most
//! once on the wire in those cases, as the Ticktok protocol makes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tickd_domain::QueueId;

use crate::ids;

/// The most queues remembered at once; beyond it a failed pop is not remembered (its batch may
/// be lost, as without this module). Far above the queues one node's pollers use.
const MAX_REMEMBERED: usize = 100_000;

/// The request ids of this node's unanswered pops, by queue.
#[derive(Clone, Debug, Default)]
pub struct UnansweredPops(Arc<Mutex<HashMap<QueueId, String>>>);

impl UnansweredPops {
    /// Starts a pop of `queue`: under the request id of its unanswered pop if there is one,
    /// else under a new id.
    pub fn begin(&self, queue: &QueueId) -> PopAttempt {
        let remembered = self.lock().remove(queue);
        PopAttempt {
            pops: self.clone(),
            queue: queue.clone(),
            request: remembered.unwrap_or_else(ids::pop_request),
            answered: false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<QueueId, String>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One pop in progress. Unless [`PopAttempt::answered`] is called, dropping it (an error, or
/// the poller going away) remembers its request id for the queue's next pop.
#[derive(Debug)]
pub struct PopAttempt {
    pops: UnansweredPops,
    queue: QueueId,
    request: String,
    answered: bool,
}

impl PopAttempt {
    /// The request id to propose.
    pub fn request(&self) -> String {
        self.request.clone()
    }

    /// The write returned its outcome, which this node now hands to the poller.
    pub fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for PopAttempt {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let mut remembered = self.pops.lock();
        if remembered.len() < MAX_REMEMBERED {
            remembered.insert(self.queue.clone(), std::mem::take(&mut self.request));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unanswered_pop_is_retried_under_its_id_and_an_answered_one_is_not() {
        let pops = UnansweredPops::default();
        let queue = QueueId::new("q1".to_string());

        let failed = pops.begin(&queue);
        let failed_id = failed.request();
        drop(failed);
        let retry = pops.begin(&queue);
        assert_eq!(retry.request(), failed_id, "the retry replays the lost pop");
        retry.answered();

        let next = pops.begin(&queue);
        assert_ne!(next.request(), failed_id, "an answered pop is not replayed");
        next.answered();
    }

    #[test]
    fn queues_are_remembered_apart() {
        let pops = UnansweredPops::default();
        let (q1, q2) = (
            QueueId::new("q1".to_string()),
            QueueId::new("q2".to_string()),
        );
        let lost = pops.begin(&q1);
        let lost_id = lost.request();
        drop(lost);
        let other = pops.begin(&q2);
        assert_ne!(other.request(), lost_id);
        other.answered();
        assert_eq!(pops.begin(&q1).request(), lost_id);
    }
}
