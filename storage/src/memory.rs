//! What the Raft log's RocksDB holds in memory, for the node's metrics.
//!
//! A node's resident memory is mostly the replicated state, but not only: RocksDB keeps each
//! column family's memtables (the entries written since its last flush: up to two of 1 MiB
//! for the log) and the 4 MiB block cache they share. Without these figures an operator
//! reading a node's memory could not tell the log's part from the state's.

use std::sync::Arc;

use rocksdb::{Cache, DB};

use crate::telemetry;

/// The log's database and its block cache, measured on demand.
#[derive(Clone)]
pub struct LogMemory {
    db: Arc<DB>,
    cache: Cache,
}

impl LogMemory {
    pub(crate) fn new(db: Arc<DB>, cache: Cache) -> Self {
        LogMemory { db, cache }
    }

    /// Reads RocksDB's own estimates and records them as gauges. The estimates are what
    /// RocksDB has allocated, not what the allocator holds for it.
    pub fn record(&self) {
        match rocksdb::perf::get_memory_usage_stats(Some(&[&self.db]), Some(&[&self.cache])) {
            Ok(usage) => telemetry::record_log_memory(&usage),
            Err(error) => {
                tracing::warn!(%error, "cannot read the Raft log's memory usage from RocksDB");
            }
        }
    }
}
