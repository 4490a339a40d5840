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
/// Serializing an image of the state into a snapshot file; applies go on meanwhile.
pub const SNAPSHOT_WRITE_DURATION: &str = "tickd_raft_snapshot_write_duration_seconds";
/// The bytes still free for tickd in the data directory's filesystem.
pub const FREE_BYTES: &str = "tickd_data_dir_free_bytes";
/// What the Raft log's RocksDB holds in memory, by part (`memtables`, `table_readers`,
/// `block_cache`), as RocksDB estimates it.
pub const LOG_MEMORY: &str = "tickd_raft_log_memory_bytes";

/// The parts of [`LOG_MEMORY`].
const LOG_MEMORY_PARTS: [&str; 3] = ["memtables", "table_readers", "block_cache"];

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
    describe_histogram!(
        SNAPSHOT_WRITE_DURATION,
        Unit::Seconds,
        "Serializing an image of the state into a snapshot file (about a second per 200 MB of \
         snapshot); the state machine goes on applying meanwhile"
    );
    describe_gauge!(
        FREE_BYTES,
        Unit::Bytes,
        "The bytes still free for tickd in the filesystem of the data directory"
    );
    describe_gauge!(
        LOG_MEMORY,
        Unit::Bytes,
        "What the Raft log's RocksDB holds in memory, by part, as RocksDB estimates it: the \
         memtables of entries not yet flushed, the readers of its files, the block cache"
    );
    // The exporter renders a metric only once it has been recorded; a node that has not yet
    // appended, committed or snapshotted must still export these, so that dashboards and
    // alerts see zero rather than nothing. Incrementing by zero keeps a value recorded
    // earlier.
    let _ = histogram!(APPEND_DURATION);
    let _ = histogram!(FSYNC_DURATION);
    let _ = histogram!(SNAPSHOT_WRITE_DURATION);
    gauge!(COMMIT_INDEX).increment(0.0);
    gauge!(SNAPSHOT_SIZE).increment(0.0);
    for part in LOG_MEMORY_PARTS {
        gauge!(LOG_MEMORY, "part" => part).increment(0.0);
    }
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

/// Records how long serializing a snapshot took.
pub(crate) fn record_snapshot_write(took: Duration) {
    histogram!(SNAPSHOT_WRITE_DURATION).record(took.as_secs_f64());
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

/// Records RocksDB's estimates of the log's memory, by part.
pub(crate) fn record_log_memory(usage: &rocksdb::perf::MemoryUsageStats) {
    let figures = [
        usage.mem_table_total,
        usage.mem_table_readers_total,
        usage.cache_total,
    ];
    for (part, bytes) in LOG_MEMORY_PARTS.into_iter().zip(figures) {
        gauge!(LOG_MEMORY, "part" => part).set(bytes as f64);
    }
}

/// Records the free space of the data directory.
pub(crate) fn record_free_bytes(bytes: u64) {
    gauge!(FREE_BYTES).set(bytes as f64);
}

/// Records the size of the latest snapshot, also the one found on disk at start-up.
pub(crate) fn record_snapshot_size(bytes: u64) {
    gauge!(SNAPSHOT_SIZE).set(bytes as f64);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex, PoisonError};

    use metrics::{
        Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata,
        Recorder, SharedString, with_local_recorder,
    };

    use super::*;

    /// One metric as the code under test left it: a counter's total or a gauge's value, and
    /// for a histogram its samples.
    #[derive(Clone, Debug, Default, PartialEq)]
    struct Reading {
        value: f64,
        samples: Vec<f64>,
    }

    /// A recorder that keeps every metric registered on this thread, by `name{label=value}`.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<BTreeMap<String, Reading>>>);

    /// The handle of one metric: its key in the readings.
    struct Handle {
        key: String,
        readings: Recorded,
    }

    impl Recorded {
        /// Every metric registered so far and its reading.
        fn readings(&self) -> BTreeMap<String, Reading> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }

        /// The reading of the metric with this key, if it was registered.
        fn get(&self, key: &str) -> Option<Reading> {
            self.readings().get(key).cloned()
        }

        fn update(&self, key: &str, change: impl FnOnce(&mut Reading)) {
            let mut readings = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            change(readings.entry(key.to_owned()).or_default());
        }

        fn handle(&self, key: &Key) -> Arc<Handle> {
            let labels: Vec<String> = key
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            let key = if labels.is_empty() {
                key.name().to_owned()
            } else {
                format!("{}{{{}}}", key.name(), labels.join(","))
            };
            self.update(&key, |_| {});
            Arc::new(Handle {
                key,
                readings: self.clone(),
            })
        }
    }

    impl Recorder for Recorded {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(self.handle(key))
        }

        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(self.handle(key))
        }

        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(self.handle(key))
        }
    }

    impl CounterFn for Handle {
        fn increment(&self, value: u64) {
            self.readings
                .update(&self.key, |reading| reading.value += value as f64);
        }

        fn absolute(&self, value: u64) {
            self.readings.update(&self.key, |reading| {
                reading.value = reading.value.max(value as f64);
            });
        }
    }

    impl GaugeFn for Handle {
        fn increment(&self, value: f64) {
            self.readings
                .update(&self.key, |reading| reading.value += value);
        }

        fn decrement(&self, value: f64) {
            self.readings
                .update(&self.key, |reading| reading.value -= value);
        }

        fn set(&self, value: f64) {
            self.readings
                .update(&self.key, |reading| reading.value = value);
        }
    }

    impl HistogramFn for Handle {
        fn record(&self, value: f64) {
            self.readings
                .update(&self.key, |reading| reading.samples.push(value));
        }
    }

    fn value(value: f64) -> Reading {
        Reading {
            value,
            samples: Vec::new(),
        }
    }

    fn samples(samples: &[f64]) -> Reading {
        Reading {
            value: 0.0,
            samples: samples.to_vec(),
        }
    }

    #[test]
    fn describe_exports_every_metric_at_zero() {
        let recorded = Recorded::default();
        with_local_recorder(&recorded, describe);
        let expected: BTreeMap<String, Reading> = [
            (APPEND_DURATION.to_owned(), samples(&[])),
            (FSYNC_DURATION.to_owned(), samples(&[])),
            (SNAPSHOT_WRITE_DURATION.to_owned(), samples(&[])),
            (COMMIT_INDEX.to_owned(), value(0.0)),
            (SNAPSHOT_SIZE.to_owned(), value(0.0)),
            (format!("{SNAPSHOTS}{{origin=built}}"), value(0.0)),
            (format!("{SNAPSHOTS}{{origin=installed}}"), value(0.0)),
            (format!("{LOG_MEMORY}{{part=memtables}}"), value(0.0)),
            (format!("{LOG_MEMORY}{{part=table_readers}}"), value(0.0)),
            (format!("{LOG_MEMORY}{{part=block_cache}}"), value(0.0)),
        ]
        .into();
        assert_eq!(recorded.readings(), expected);
    }

    /// The log's memory is recorded from RocksDB's own figures, each under its part: entries
    /// written show in the memtables.
    #[test]
    fn the_log_memory_is_recorded_by_part_and_follows_what_is_written() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (db, cache) = crate::open_db(dir.path()).expect("open the database");
        let memory = crate::LogMemory::new(db.clone(), cache);
        let family = db
            .cf_handle(crate::keys::LOG_CF)
            .expect("the log column family");
        for index in 0u64..512 {
            db.put_cf(family, index.to_be_bytes(), [7u8; 1024])
                .expect("write an entry");
        }
        let recorded = Recorded::default();
        with_local_recorder(&recorded, || memory.record());
        let part = |part: &str| {
            recorded
                .get(&format!("{LOG_MEMORY}{{part={part}}}"))
                .map(|reading| reading.value)
        };
        let memtables = part("memtables").unwrap_or_default();
        assert!(
            memtables >= 512.0 * 1024.0,
            "512 KiB of entries written, {memtables} bytes of memtables recorded"
        );
        // The 4 MiB cache is empty (nothing was read back), the table readers nearly so.
        assert!(part("block_cache").is_some_and(|bytes| bytes < memtables));
        assert!(part("table_readers").is_some_and(|bytes| bytes < memtables));
    }

    #[test]
    fn snapshots_are_counted_by_origin_and_the_latest_size_is_kept() {
        let recorded = Recorded::default();
        with_local_recorder(&recorded, || {
            record_snapshot(SnapshotOrigin::Built, 100);
            record_snapshot(SnapshotOrigin::Installed, 250);
            record_snapshot(SnapshotOrigin::Built, 300);
        });
        assert_eq!(
            recorded.get(&format!("{SNAPSHOTS}{{origin=built}}")),
            Some(value(2.0))
        );
        assert_eq!(
            recorded.get(&format!("{SNAPSHOTS}{{origin=installed}}")),
            Some(value(1.0))
        );
        assert_eq!(recorded.get(SNAPSHOT_SIZE), Some(value(300.0)));
        // The snapshot found on disk at start-up sets the size without counting a snapshot.
        with_local_recorder(&recorded, || record_snapshot_size(42));
        assert_eq!(recorded.get(SNAPSHOT_SIZE), Some(value(42.0)));
        assert_eq!(
            recorded.get(&format!("{SNAPSHOTS}{{origin=built}}")),
            Some(value(2.0))
        );
    }

    #[test]
    fn durations_are_recorded_in_seconds_and_the_commit_index_and_free_space_as_read() {
        let recorded = Recorded::default();
        with_local_recorder(&recorded, || {
            record_append(Duration::from_millis(1_500));
            record_fsync(Duration::from_millis(250));
            record_snapshot_write(Duration::from_millis(1_250));
            record_committed(17);
            record_free_bytes(4_096);
        });
        assert_eq!(recorded.get(APPEND_DURATION), Some(samples(&[1.5])));
        assert_eq!(recorded.get(FSYNC_DURATION), Some(samples(&[0.25])));
        assert_eq!(
            recorded.get(SNAPSHOT_WRITE_DURATION),
            Some(samples(&[1.25]))
        );
        assert_eq!(recorded.get(COMMIT_INDEX), Some(value(17.0)));
        assert_eq!(recorded.get(FREE_BYTES), Some(value(4_096.0)));
    }
}
