//! Raft timings, chosen for a loaded two-core machine.
//!
//! * Heartbeat every 150 ms: frequent enough that a follower notices a dead leader quickly, rare
//!   enough that three nodes' heartbeats cost nothing next to real work.
//! * Election timeout drawn from 750–1500 ms: five to ten missed heartbeats. A busy two-core box
//!   can stall a process for a few hundred milliseconds (an fsync, a compaction, the test suite
//!   compiling beside it); a shorter timeout would turn such stalls into needless elections and
//!   a longer one would stretch failover. With it, a killed leader is replaced within about two
//!   seconds, inside the three seconds the cluster promises.
//! * Snapshot chunks of 1 MiB, under the RPC body limit with room to spare.

use openraft::{Config, SnapshotPolicy};

/// Milliseconds between leader heartbeats.
pub const HEARTBEAT_MS: u64 = 150;
/// Lower bound of the randomized election timeout.
pub const ELECTION_TIMEOUT_MIN_MS: u64 = 750;
/// Upper bound of the randomized election timeout.
pub const ELECTION_TIMEOUT_MAX_MS: u64 = 1500;
/// Size of one snapshot chunk on the wire.
pub const SNAPSHOT_CHUNK_BYTES: u64 = 1024 * 1024;
/// Default number of applied entries between two snapshots.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 10_000;

/// The openraft configuration of a tickd node. `snapshot_every` is the number of log entries
/// after which a snapshot is built and the log before it purged.
pub fn raft_config(snapshot_every: u64) -> Result<Config, Box<openraft::ConfigError>> {
    Config {
        cluster_name: "tickd".to_string(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: ELECTION_TIMEOUT_MIN_MS,
        election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_every.max(1)),
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        // Keep no log behind a snapshot: a lagging follower gets the snapshot instead.
        max_in_snapshot_log_to_keep: 0,
        ..Config::default()
    }
    .validate()
    .map_err(Box::new)
}
