//! The Raft log in RocksDB.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;
use std::time::Instant;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogId, StorageError, StorageIOError, Vote};
use rocksdb::{Cache, ColumnFamily, DB, Direction, IteratorMode, WriteBatch};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tickd_raft::unsupported;
use tickd_raft::{NodeId, TypeConfig};

use crate::keys::{self, COMMITTED, LAST_PURGED, LOG_CF, META_CF, VOTE};
use crate::wal_sync::{Waiter, WalSync};
use crate::{LogMemory, OpenError, telemetry};

type StoreResult<T> = Result<T, StorageError<NodeId>>;

/// The log store: entries, vote and log pointers. See the crate docs for what is durable when.
pub struct LogStore {
    db: Arc<DB>,
    wal: WalSync,
    memory: LogMemory,
}

/// A read-only view of the log for openraft's replication tasks.
#[derive(Clone)]
pub struct LogReader {
    db: Arc<DB>,
}

impl LogStore {
    pub(crate) fn new(db: Arc<DB>, block_cache: Cache) -> Result<Self, OpenError> {
        let wal = WalSync::start(db.clone()).map_err(|source| OpenError::Directory {
            path: db.path().to_path_buf(),
            source,
        })?;
        let memory = LogMemory::new(db.clone(), block_cache);
        Ok(Self { db, wal, memory })
    }

    /// What the log's database holds in memory, measured when the metrics are read.
    pub fn memory(&self) -> LogMemory {
        self.memory.clone()
    }

    fn meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StorageIOError<NodeId>> {
        read_json(&self.db, cf(&self.db, META_CF)?, key)
    }

    fn put_meta<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StorageIOError<NodeId>> {
        let bytes = serde_json::to_vec(value).map_err(|e| StorageIOError::write(&e))?;
        self.db
            .put_cf(cf(&self.db, META_CF)?, key, bytes)
            .map_err(|e| StorageIOError::write(&e))
    }

    fn last_purged(&self) -> Result<Option<LogId<NodeId>>, StorageIOError<NodeId>> {
        self.meta(LAST_PURGED)
    }
}

fn cf<'a>(db: &'a DB, name: &str) -> Result<&'a ColumnFamily, StorageIOError<NodeId>> {
    db.cf_handle(name).ok_or_else(|| {
        StorageIOError::read(&std::io::Error::other(format!(
            "column family {name} is missing"
        )))
    })
}

fn read_json<T: DeserializeOwned>(
    db: &DB,
    family: &ColumnFamily,
    key: &[u8],
) -> Result<Option<T>, StorageIOError<NodeId>> {
    let Some(bytes) = db
        .get_cf(family, key)
        .map_err(|e| StorageIOError::read(&e))?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| StorageIOError::read(&e))
}

/// Decodes a stored entry. One written by a newer binary (this node's binary was downgraded
/// under its log) is named as such, so that the core's failure says which release it needs.
fn decode_entry(bytes: &[u8]) -> Result<Entry<TypeConfig>, StorageIOError<NodeId>> {
    serde_json::from_slice(bytes).map_err(|error| match unsupported::in_json(bytes) {
        Some(why) => StorageIOError::read_logs(&why),
        None => StorageIOError::read_logs(&error),
    })
}

fn read_range<RB: RangeBounds<u64>>(db: &DB, range: RB) -> StoreResult<Vec<Entry<TypeConfig>>> {
    let start = match range.start_bound() {
        Bound::Included(&index) => index,
        Bound::Excluded(&index) => index.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let family = cf(db, LOG_CF)?;
    let from = keys::log_key(start);
    let mut entries = Vec::new();
    for item in db.iterator_cf(family, IteratorMode::From(&from, Direction::Forward)) {
        let (key, value) = item.map_err(|e| StorageIOError::read_logs(&e))?;
        let index = keys::log_index(&key).ok_or_else(|| {
            StorageIOError::read_logs(&std::io::Error::other("a log key is not 8 bytes"))
        })?;
        if !range.contains(&index) {
            break;
        }
        entries.push(decode_entry(&value)?);
    }
    Ok(entries)
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry<TypeConfig>>> {
        read_range(&self.db, range)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry<TypeConfig>>> {
        read_range(&self.db, range)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> StoreResult<LogState<TypeConfig>> {
        let last_purged_log_id = self.last_purged()?;
        let family = cf(&self.db, LOG_CF)?;
        let last_entry = match self.db.iterator_cf(family, IteratorMode::End).next() {
            Some(item) => {
                let (_, value) = item.map_err(|e| StorageIOError::read_logs(&e))?;
                Some(*decode_entry(&value)?.get_log_id())
            }
            None => None,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id: last_entry.or(last_purged_log_id),
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader {
            db: self.db.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StoreResult<()> {
        self.put_meta(VOTE, vote)?;
        self.wal
            .sync()
            .await
            .map_err(|e| StorageIOError::write_vote(&e))?;
        Ok(())
    }

    /// The saved vote, but never as *committed*. openraft 0.9 restores a node whose vote is
    /// committed for itself as leader at start-up, without an election (`Engine::startup`),
    /// and that is unsafe after a power loss of every node: an entry is committed once a
    /// quorum has it on disk, two followers are a quorum, so the leader can have acknowledged a
    /// write its own fsync had not yet covered. Restored as leader, it would write new entries
    /// at that index on every node, and the acknowledged write would be gone
    /// (tests/tests/power_loss.rs found it; docs/RELIABILITY.md, "Power loss"). Read as not
    /// committed — plain Raft's `currentTerm` and `votedFor` — the vote still refuses every other
    /// candidate of its term, and the node must win an election to lead, which a node missing
    /// committed entries cannot.
    async fn read_vote(&mut self) -> StoreResult<Option<Vote<NodeId>>> {
        let vote: Option<Vote<NodeId>> = self.meta(VOTE)?;
        Ok(vote.map(|vote| Vote {
            committed: false,
            ..vote
        }))
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StoreResult<()> {
        self.put_meta(COMMITTED, &committed)?;
        if let Some(committed) = committed {
            telemetry::record_committed(committed.index);
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> StoreResult<Option<LogId<NodeId>>> {
        Ok(self.meta::<Option<LogId<NodeId>>>(COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StoreResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = Instant::now();
        let family = cf(&self.db, LOG_CF)?;
        let mut batch = WriteBatch::default();
        for entry in entries {
            let bytes = serde_json::to_vec(&entry)
                .map_err(|e| StorageIOError::write_log_entry(*entry.get_log_id(), &e))?;
            batch.put_cf(family, keys::log_key(entry.get_log_id().index), bytes);
        }
        self.db
            .write(batch)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.wal.enqueue(Waiter::Append(callback, started));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StoreResult<()> {
        let family = cf(&self.db, LOG_CF)?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(family, keys::log_key(log_id.index), keys::log_key(u64::MAX));
        batch.delete_cf(family, keys::log_key(u64::MAX));
        self.db
            .write(batch)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StoreResult<()> {
        let bytes = serde_json::to_vec(&log_id).map_err(|e| StorageIOError::write(&e))?;
        let mut batch = WriteBatch::default();
        // The pointer first in the same atomic batch: a reader never sees a hole.
        batch.put_cf(cf(&self.db, META_CF)?, LAST_PURGED, bytes);
        batch.delete_range_cf(
            cf(&self.db, LOG_CF)?,
            keys::log_key(0),
            keys::log_key(log_id.index.saturating_add(1)),
        );
        self.db
            .write(batch)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use openraft::storage::RaftLogStorage;

    use super::*;

    #[tokio::test]
    async fn a_restarted_node_reads_its_vote_back_uncommitted_so_it_must_win_an_election() {
        let dir = tempfile::tempdir().expect("temporary directory");
        {
            let (mut log, _state_machine, _handle) = crate::open(dir.path()).expect("open");
            log.save_vote(&Vote::new_committed(3, 2))
                .await
                .expect("saved");
        }
        let (mut log, _state_machine, _handle) = crate::open(dir.path()).expect("reopen");
        let vote = log.read_vote().await.expect("read").expect("a vote");
        assert_eq!(
            vote,
            Vote::new(3, 2),
            "same term and candidate, not committed"
        );
        assert!(!vote.is_committed());
    }
}
