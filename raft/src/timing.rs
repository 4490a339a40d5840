//! Raft timings, chosen for a loaded two-core machine.
//!
//! * Heartbeat every 100 ms: frequent enough that a follower notices a dead leader quickly, rare
//!   enough that three nodes' heartbeats cost nothing next to real work.
//! * Election timeout drawn from 300–600 ms. openraft 0.9 adds its vote lease (the maximum
//!   election timeout) to it while a follower knows a leader, so a follower calls an election
//!   900–1200 ms after the last heartbeat it heard: nine missed heartbeats at least, which
//!   tolerates the stalls a busy two-core box inflicts on a process (an fsync, a compaction, a
//!   compiler beside it) without needless elections. The upper bound is set by failover: a
//!   killed leader's clocks tick again about 1.3 s later (detection, one vote round trip, one
//!   lease confirmation), inside the 2 s the benchmarks hold tickd to. With the old 500–1000 ms
//!   range detection alone took 1.5–2 s.
//! * That timer is now the fallback. A follower campaigns once the vote lease and 50 ms have
//!   passed, plus 150 ms per follower ranked before it, if a majority of the voters says it has
//!   not heard the leader for the vote lease either ([`crate::leader_loss`]): a dead leader is
//!   replaced about 700 ms after it died. The rest of the timer's job (spreading the followers'
//!   campaigns, sparing a live leader from a stalled follower) is done there by the stagger and
//!   the majority's answer, so the timer keeps its wide margin against needless elections.
//! * The leader's publishing lease (`tickd-engine`) must stay shorter than openraft's vote
//!   lease (the maximum election timeout): a follower that acknowledged the leader refuses to
//!   vote for anyone else for that long, so no new leader exists while the lease holds.
//! * Snapshot chunks of 1 MiB, under the RPC body limit with room to spare.
//! * A follower may take 10 s to answer a snapshot's last chunk: it fsyncs the file, renames
//!   it, decodes the whole state and swaps it in before it answers. openraft's default (200 ms)
//!   counts all of that, and a follower slower than it (a large registry, a loaded disk) was
//!   sent the snapshot again and again without ever catching up: the power-loss profile saw a
//!   restarted node stall for good, its leader logging "InstallSnapshot RPC timed out" every
//!   200 ms.
//! * The last `snapshot_every` entries stay in the log behind each snapshot. A follower that
//!   missed fewer than that (a restart, an upgrade, a short partition) catches up from the log
//!   instead of being sent the whole state: at a million clocks a 300 MB transfer, and a
//!   second registry in the follower's memory while it installs (the likely cause of a follower
//!   restart of 23 s that settled at 770 MB, twice the usual, seen once in the scale
//!   benchmark). The log holds those entries plus the ones since the last snapshot, a few
//!   megabytes at the default.

use openraft::{Config, SnapshotPolicy};

/// Milliseconds between leader heartbeats.
pub const HEARTBEAT_MS: u64 = 100;
/// Lower bound of the randomized election timeout.
pub const ELECTION_TIMEOUT_MIN_MS: u64 = 300;
/// Upper bound of the randomized election timeout.
pub const ELECTION_TIMEOUT_MAX_MS: u64 = 600;
/// How long sending a snapshot chunk may take, the last one including its installation.
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 10_000;
/// Size of one snapshot chunk on the wire.
pub const SNAPSHOT_CHUNK_BYTES: u64 = 1024 * 1024;
/// Default number of applied entries between two snapshots (at least; see
/// [`crate::snapshot_pace`]).
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 10_000;

/// The openraft configuration of a node that snapshots every `snapshot_every` entries.
/// openraft builds no snapshot on its own: the node asks for them at the pace of
/// [`crate::snapshot_pace`], and each one purges the log up to `snapshot_every` entries before
/// it.
pub fn raft_config(snapshot_every: u64) -> Result<Config, Box<openraft::ConfigError>> {
    Config {
        cluster_name: "tickd".to_string(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: ELECTION_TIMEOUT_MIN_MS,
        election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
        snapshot_policy: SnapshotPolicy::Never,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
        max_in_snapshot_log_to_keep: snapshot_every,
        ..Config::default()
    }
    .validate()
    .map_err(Box::new)
}
