//! The leader's lease: permission to publish, renewed by confirming leadership with a quorum.
//!
//! A tick is published only while the lease holds. The lease starts when a quorum
//! confirmation is *requested* and lasts [`LEASE`], shorter than openraft's vote lease (the
//! maximum election timeout): a follower that acknowledged this leader refuses every vote for
//! that long after hearing from it, and it heard from it no earlier than the confirmation, so
//! no other node can have been elected before the lease runs out. A leader that was stopped
//! (SIGSTOP) or cut off finds its lease expired by the monotonic clock and cannot publish
//! until it confirms again, which a deposed leader cannot do.
//!
//! This type only keeps the time; asking the quorum is the duties' I/O (`duties.rs`), so the
//! rule is tested by stepping instants rather than by running a cluster.

use std::time::Duration;

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
    /// A quorum confirmed leadership in answer to a request sent at `asked_at`: the lease
    /// lasts [`LEASE`] from the request, not from the answer, which may have been slow.
    pub fn confirmed(&mut self, asked_at: Instant) {
        self.valid_until = Some(asked_at + LEASE);
    }

    /// Leadership could not be confirmed: the lease ends at once.
    pub fn lost(&mut self) {
        self.valid_until = None;
    }

    /// Whether publishing is allowed at `now`.
    pub fn holds(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|until| now < until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_never_confirmed_does_not_hold() {
        assert!(!Lease::default().holds(Instant::now()));
    }

    #[test]
    fn the_lease_runs_from_the_request_not_from_the_answer() {
        let asked_at = Instant::now();
        let mut lease = Lease::default();
        lease.confirmed(asked_at);
        assert!(lease.holds(asked_at));
        assert!(lease.holds(asked_at + LEASE - Duration::from_millis(1)));
        assert!(
            !lease.holds(asked_at + LEASE),
            "the lease must end LEASE after the request"
        );
    }

    #[test]
    fn a_failed_confirmation_ends_the_lease_at_once() {
        let asked_at = Instant::now();
        let mut lease = Lease::default();
        lease.confirmed(asked_at);
        lease.lost();
        assert!(!lease.holds(asked_at));
    }
}
