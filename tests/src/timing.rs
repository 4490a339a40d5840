//! The time bounds the tests hold tickd to, derived from its configuration rather than
//! guessed, so that every test that waits for a failover waits the same, explained, time.
//!
//! The figures come from `raft/src/timing.rs` (heartbeat 100 ms, election timeout 300–600 ms,
//! openraft's vote lease equal to the maximum election timeout, its tick every 150 ms) and
//! from the harness (`tests/src/cluster.rs`: a node that does not answer a probe costs 3 s).
//! The suite is black-box and links none of tickd's code, so they are restated here; a change
//! of tickd's timing must be carried over.

use std::time::Duration;

/// From a leader's failure to its successor's election, in the worst case the configuration
/// allows: a follower calls an election once the vote lease (600 ms) and its own election
/// timeout (at most 600 ms) have passed without a heartbeat, checked on openraft's tick every
/// 150 ms, so 1.35 s at most; a split vote costs one more timeout and tick (0.75 s); the
/// vote round trip and the first entry about 0.1 s: 2.2 s. The early campaign
/// (`raft/src/leader_loss.rs`, after the vote lease and 50–200 ms) usually elects well before
/// that; the bound stays that of openraft's timer, its fallback.
pub const ELECTION_WORST_CASE: Duration = Duration::from_millis(2_200);

/// From a leader's failure to its successor publishing, on a loaded two-core machine: twice
/// [`ELECTION_WORST_CASE`], rounded up to whole seconds. docs/BENCHMARKS.md measured 0.6–0.8 s
/// over ten kills on a quiet machine with the early campaign (0.97–1.31 s over 25 kills before
/// it); the dashboard's test recorded up to 3.7 s under the suite's load before it.
pub const FAILOVER: Duration = Duration::from_secs(5);

/// How long the harness may take to see one leader agreed on by the running nodes after a
/// fault: a [`FAILOVER`], plus the harness's polling, in which a node that does not answer
/// costs its 3 s probe timeout, plus 2 s of margin. docs/RELIABILITY.md recorded up to 4.4 s,
/// polling included.
pub const AGREED_LEADER_WITHIN: Duration = Duration::from_secs(10);

/// How long a freshly started cluster may take to elect its first leader: the nodes poll
/// each other every 300 ms until a majority answers, one initialises, and the election
/// follows (at most one [`ELECTION_WORST_CASE`] without a vote lease to wait out); processes
/// starting on a loaded machine add their own start-up. The same bound as after a fault.
pub const FIRST_LEADER_WITHIN: Duration = AGREED_LEADER_WITHIN;
