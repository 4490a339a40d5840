//! openraft's log storage over the simulated [`Disk`], with production's durability rules:
//! an append is acknowledged after the fsync that covers it, the vote is fsynced before
//! `save_vote` returns and is read back never committed (`storage/src/log_store.rs` says why),
//! and truncations, purges and the committed index wait for the next fsync.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    Entry, LogId, LogState, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote,
};
use tickd_raft::NodeId;

use crate::disk::{Crashed, Disk};
use crate::runtime::SimConfig;

type StoreResult<T> = Result<T, StorageError<NodeId>>;

/// Locks a mutex of the simulation; a panic elsewhere already failed the seed, so a poisoned
/// lock's data is used as it is.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn crashed(_: Crashed) -> StorageError<NodeId> {
    StorageIOError::write_logs(&std::io::Error::other("the node crashed")).into()
}

/// One incarnation's handle on its node's disk.
#[derive(Clone)]
pub struct LogStore {
    disk: Arc<Mutex<Disk>>,
    generation: u64,
}

impl LogStore {
    /// The log of the incarnation that writes under `disk`'s current generation.
    pub fn new(disk: Arc<Mutex<Disk>>) -> Self {
        let generation = lock(&disk).generation();
        LogStore { disk, generation }
    }

    /// Runs an fsync after its latency, and tells the appends it covered.
    fn schedule_sync(&self) {
        let disk = self.disk.clone();
        let generation = self.generation;
        let latency = lock(&disk).fsync_latency();
        tokio::spawn(async move {
            tokio::time::sleep(latency).await;
            let flushed = lock(&disk).sync(generation);
            for append in flushed {
                append.log_io_completed(Ok(()));
            }
        });
    }
}

impl RaftLogReader<SimConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry<SimConfig>>> {
        // openraft may ask for an empty range whose start lies past its end (after a crash
        // lost entries it had applied); a `BTreeMap` panics on one, RocksDB's iterator
        // returns nothing.
        let start = match range.start_bound() {
            Bound::Included(start) => *start,
            Bound::Excluded(start) => start.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(end) => end.saturating_add(1),
            Bound::Excluded(end) => *end,
            Bound::Unbounded => u64::MAX,
        };
        if start >= end {
            return Ok(Vec::new());
        }
        let disk = lock(&self.disk);
        let stored = disk.written(self.generation).map_err(crashed)?;
        Ok(stored
            .log
            .range(start..end)
            .map(|(_, entry)| entry.clone())
            .collect())
    }
}

impl RaftLogStorage<SimConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StoreResult<LogState<SimConfig>> {
        let disk = lock(&self.disk);
        let stored = disk.written(self.generation).map_err(crashed)?;
        let last = stored.log.values().next_back().map(|entry| entry.log_id);
        Ok(LogState {
            last_purged_log_id: stored.last_purged,
            last_log_id: last.or(stored.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StoreResult<()> {
        let latency = {
            let mut disk = lock(&self.disk);
            disk.save_vote(self.generation, *vote).map_err(crashed)?;
            disk.fsync_latency()
        };
        tokio::time::sleep(latency).await;
        let flushed = lock(&self.disk).sync(self.generation);
        for append in flushed {
            append.log_io_completed(Ok(()));
        }
        Ok(())
    }

    async fn read_vote(&mut self) -> StoreResult<Option<Vote<NodeId>>> {
        let disk = lock(&self.disk);
        let stored = disk.written(self.generation).map_err(crashed)?;
        Ok(stored.vote.map(|vote| Vote {
            committed: false,
            ..vote
        }))
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StoreResult<()> {
        lock(&self.disk)
            .save_committed(self.generation, committed)
            .map_err(crashed)
    }

    async fn read_committed(&mut self) -> StoreResult<Option<LogId<NodeId>>> {
        let disk = lock(&self.disk);
        Ok(disk.written(self.generation).map_err(crashed)?.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<SimConfig>) -> StoreResult<()>
    where
        I: IntoIterator<Item = Entry<SimConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let schedule = lock(&self.disk)
            .append(self.generation, entries.into_iter().collect(), callback)
            .map_err(crashed)?;
        if schedule {
            self.schedule_sync();
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StoreResult<()> {
        lock(&self.disk)
            .truncate(self.generation, log_id.index)
            .map_err(crashed)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StoreResult<()> {
        lock(&self.disk)
            .purge(self.generation, log_id)
            .map_err(crashed)
    }
}
