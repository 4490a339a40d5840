//! The leader's lease: permission to publish, renewed by confirming leadership with a quorum.
//!
//! A tick is published only while the lease holds. The lease starts when a quorum
//! confirmation is *requested* and lasts [`LEASE`], shorter than the minimum election
//! timeout: no other node can have been elected before it runs out, because the followers
//! heard from this leader no earlier than the confirmation. A leader that was stopped
//! (SIGSTOP) or cut off finds its lease expired by the monotonic clock and cannot publish
//! until it confirms again, which a deposed leader cannot do.

use std::time::Duration;

use tickd_raft::Raft;
use tokio::time::Instant;

/// How long one confirmation lets the leader publish: well under the minimum election timeout
/// (`tickd_raft::timing::ELECTION_TIMEOUT_MIN_MS`, 500 ms), leaving room for clock rate
/// differences and scheduling delays.
pub const LEASE: Duration = Duration::from_millis(350);

/// The lease of this node, if it leads.
#[derive(Debug, Default)]
pub struct Lease {
    valid_until: Option<Instant>,
}

impl Lease {
    /// Confirms leadership with a quorum and extends the lease; on failure the lease is
    /// dropped at once.
    pub async fn renew(&mut self, raft: &Raft) -> bool {
        let asked_at = Instant::now();
        match raft.get_read_log_id().await {
            Ok(_) => {
                self.valid_until = Some(asked_at + LEASE);
                true
            }
            Err(error) => {
                tracing::debug!(%error, "leadership not confirmed; the lease is dropped");
                self.valid_until = None;
                false
            }
        }
    }

    /// Whether publishing is allowed now.
    pub fn holds(&self) -> bool {
        self.valid_until.is_some_and(|until| Instant::now() < until)
    }
}
