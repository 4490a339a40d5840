//! Storage's metrics: how long the log takes to make appends durable, and the snapshots.
//!
//! Recorded through the `metrics` facade; the binary chooses the recorder and calls
//! [`describe`] once, which also registers every metric at zero so that a fresh node exports
//! them all.

use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};

/// From `append` being called to openraft being told the entries are durable.
pub const APPEND_DURATION: &str = "tickd_raft_append_duration_seconds";
/// One fsync of the write-ahead log, covering every append queued meanwhile.
pub const FSYNC_DURATION: &str = "tickd_raft_fsync_duration_seconds";
/// The highest log index known to be committed, as openraft saves it.
pub const COMMIT_INDEX: &str = "tickd_raft_commit_index";
/// Snapshots this node built or installed, by origin.
pub const SNAPSHOTS: &str = "tickd_raft_snapshots_total";
/// The size of the latest snapshot this node built or installed.
pub const SNAPSHOT_SIZE: &str = "tickd_raft_snapshot_size_bytes";

/// Where a snapshot came from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SnapshotOrigin {
    /// Built from this node's state.
    Built,
    /// Received from the leader.
    Installed,
}

impl SnapshotOrigin {
    /// Every origin, so that each one's counter exists from the start.
    const ALL: [SnapshotOrigin; 2] = [SnapshotOrigin::Built, SnapshotOrigin::Installed];

    /// The value of the `origin` label.
    fn label(self) -> &'static str {
        match self {
            SnapshotOrigin::Built => "built",
            SnapshotOrigin::Installed => "installed",
        }
    }
}

/// Registers the help text and unit of every storage metric with the installed recorder,
/// and registers each metric at zero.
pub fn describe() {
    describe_histogram!(
        APPEND_DURATION,
        Unit::Seconds,
        "From a Raft log append to its entries being fsynced"
    );
    describe_histogram!(
        FSYNC_DURATION,
        Unit::Seconds,
        "One fsync of the Raft write-ahead log (it covers every append queued meanwhile)"
    );
    describe_gauge!(
        COMMIT_INDEX,
        "The highest log index this node knows to be committed"
    );
    describe_counter!(
        SNAPSHOTS,
        "Snapshots this node built from its state or installed from the leader"
    );
    describe_gauge!(
        SNAPSHOT_SIZE,
        Unit::Bytes,
        "The size of the latest snapshot this node built or installed"
    );
    // The exporter renders a metric only once it has been recorded; a node that has not yet
    // appended, committed or snapshotted must still export these, so that dashboards and
    // alerts see zero rather than nothing. Incrementing by zero keeps a value recorded
    // earlier.
    let _ = histogram!(APPEND_DURATION);
    let _ = histogram!(FSYNC_DURATION);
    gauge!(COMMIT_INDEX).increment(0.0);
    gauge!(SNAPSHOT_SIZE).increment(0.0);
    for origin in SnapshotOrigin::ALL {
        counter!(SNAPSHOTS, "origin" => origin.label()).increment(0);
    }
}

/// Records how long one append took to become durable.
pub(crate) fn record_append(took: Duration) {
    histogram!(APPEND_DURATION).record(took.as_secs_f64());
}

/// Records how long one fsync of the write-ahead log took.
pub(crate) fn record_fsync(took: Duration) {
    histogram!(FSYNC_DURATION).record(took.as_secs_f64());
}

/// Records the committed index openraft saved.
pub(crate) fn record_committed(index: u64) {
    gauge!(COMMIT_INDEX).set(index as f64);
}

/// Counts one snapshot of `bytes` bytes.
pub(crate) fn record_snapshot(origin: SnapshotOrigin, bytes: u64) {
    counter!(SNAPSHOTS, "origin" => origin.label()).increment(1);
    record_snapshot_size(bytes);
}

/// Records the size of the latest snapshot, also the one found on disk at start-up.
pub(crate) fn record_snapshot_size(bytes: u64) {
    gauge!(SNAPSHOT_SIZE).set(bytes as f64);
}
