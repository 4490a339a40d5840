//! The leader's lease: permission to publish, renewed by confirming leadership with a quorum.
//!
//! A tick is published only while the lease holds. The lease starts when a quorum
//! confirmation is *requested* and lasts [`LEASE`], shorter than openraft's vote lease (the
//! maximum election timeout): a follower that acknowledged this leader refuses every vote for
//! that long after hearing from it, and it heard from it no earlier than the confirmation, so
//! no other node can have been elected before the lease runs out. A leader that was stopped
//! (SIGSTOP) or cut off finds its lease expired by the monotonic clock and cannot publish
//! until it confirms again, which a deposed leader cannot do.

use std::time::Duration;

use tickd_raft::Raft;
use tokio::time::Instant;

/// How long one confirmation lets the leader publish: well under openraft's vote lease
/// (`tickd_raft::timing::ELECTION_TIMEOUT_MAX_MS`, 600 ms), leaving room for clock rate
/// differences and scheduling delays.
pub const LEASE: Duration = Duration::from_millis(350);

// The safety argument above, checked where both numbers meet.
const _: () = assert!(LEASE.as_millis() < tickd_raft::timing::ELECTION_TIMEOUT_MAX_MS as u128);

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
