//! A node's disk: what it has written, what of that an fsync has made durable, and the
//! snapshot.
//!
//! Production writes the log to RocksDB and acknowledges an append to openraft only once the
//! WAL's fsync covers it (`storage/src/wal_sync.rs`, one fsync for every append queued
//! meanwhile); the vote is fsynced before `save_vote` returns; truncations, purges and the
//! committed index are written and made durable by the next fsync. The model keeps the writes
//! in order: those since the last fsync are *pending*, visible to reads but lost by a crash, as
//! a power loss loses a WAL's unsynced tail. A snapshot is durable once written (production
//! writes a file, fsyncs it and renames it into place).
//!
//! A crash starts a new *generation*: the storage handles of the crashed incarnation still
//! hold the old one, and everything they do after the crash is refused, so a dying node's late
//! writes cannot reach the disk its next incarnation reads.

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::storage::LogFlushed;
use openraft::{Entry, LogId, SnapshotMeta, Vote};
use tickd_raft::{NodeAddr, NodeId};
use tickd_tests::chaos::rng::Rng;

use crate::runtime::SimConfig;

/// The log, the vote and the committed index, as written or as durable.
#[derive(Clone, Debug, Default)]
pub struct Stored {
    /// The log's entries by index.
    pub log: BTreeMap<u64, Entry<SimConfig>>,
    /// The last vote saved.
    pub vote: Option<Vote<NodeId>>,
    /// The committed index openraft saved.
    pub committed: Option<LogId<NodeId>>,
    /// The last entry purged, kept as the log's floor.
    pub last_purged: Option<LogId<NodeId>>,
}

/// One write to the disk, in the order it was made.
#[derive(Clone, Debug)]
enum Write {
    Append(Vec<Entry<SimConfig>>),
    /// Removes the entries from this index on.
    Truncate(u64),
    /// Removes the entries up to this one, which becomes the floor.
    Purge(LogId<NodeId>),
    Vote(Vote<NodeId>),
    Committed(Option<LogId<NodeId>>),
}

impl Stored {
    fn apply(&mut self, write: &Write) {
        match write {
            Write::Append(entries) => {
                for entry in entries {
                    self.log.insert(entry.log_id.index, entry.clone());
                }
            }
            Write::Truncate(from) => {
                self.log.split_off(from);
            }
            Write::Purge(upto) => {
                self.log = self.log.split_off(&upto.index.saturating_add(1));
                self.last_purged = Some(*upto);
            }
            Write::Vote(vote) => self.vote = Some(*vote),
            Write::Committed(committed) => self.committed = *committed,
        }
    }
}

/// A snapshot as the disk holds it: its description and the encoded state.
#[derive(Clone, Debug)]
pub struct StoredSnapshot {
    /// The log position and membership it covers.
    pub meta: SnapshotMeta<NodeId, NodeAddr>,
    /// The encoded [`tickd_raft::ReplicatedState`].
    pub data: Vec<u8>,
}

/// The refusal a crashed incarnation's storage gets.
#[derive(Debug, Clone, Copy)]
pub struct Crashed;

/// One node's disk, which outlives its incarnations.
pub struct Disk {
    written: Stored,
    durable: Stored,
    pending: Vec<Write>,
    /// The appends waiting for the fsync that covers them.
    waiting: Vec<LogFlushed<SimConfig>>,
    /// Whether an fsync is on its way.
    syncing: bool,
    snapshot: Option<StoredSnapshot>,
    generation: u64,
    rng: Rng,
    /// How many fsyncs ran, and how many pending writes crashes lost, for the report.
    pub syncs: u64,
    /// See [`Disk::syncs`].
    pub writes_lost: u64,
}

impl Disk {
    /// An empty disk whose fsync latencies are drawn from `rng`.
    pub fn new(rng: Rng) -> Self {
        Disk {
            written: Stored::default(),
            durable: Stored::default(),
            pending: Vec::new(),
            waiting: Vec::new(),
            syncing: false,
            snapshot: None,
            generation: 0,
            rng,
            syncs: 0,
            writes_lost: 0,
        }
    }

    /// The generation an incarnation starting now writes under.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn check(&self, generation: u64) -> Result<(), Crashed> {
        if generation == self.generation {
            Ok(())
        } else {
            Err(Crashed)
        }
    }

    /// What reads see: everything written, synced or not.
    pub fn written(&self, generation: u64) -> Result<&Stored, Crashed> {
        self.check(generation)?;
        Ok(&self.written)
    }

    fn write(&mut self, generation: u64, write: Write) -> Result<(), Crashed> {
        self.check(generation)?;
        self.written.apply(&write);
        self.pending.push(write);
        Ok(())
    }

    /// Writes entries; `flushed` is told once an fsync covers them. True if the caller must
    /// schedule that fsync ([`Disk::fsync_latency`], then [`Disk::sync`]).
    pub fn append(
        &mut self,
        generation: u64,
        entries: Vec<Entry<SimConfig>>,
        flushed: LogFlushed<SimConfig>,
    ) -> Result<bool, Crashed> {
        self.write(generation, Write::Append(entries))?;
        self.waiting.push(flushed);
        Ok(!std::mem::replace(&mut self.syncing, true))
    }

    /// Removes the entries from `from` on (unsynced until the next fsync).
    pub fn truncate(&mut self, generation: u64, from: u64) -> Result<(), Crashed> {
        self.write(generation, Write::Truncate(from))
    }

    /// Removes the entries up to `upto` (unsynced until the next fsync).
    pub fn purge(&mut self, generation: u64, upto: LogId<NodeId>) -> Result<(), Crashed> {
        self.write(generation, Write::Purge(upto))
    }

    /// Saves the vote; durable only after [`Disk::sync`], which `save_vote` waits for.
    pub fn save_vote(&mut self, generation: u64, vote: Vote<NodeId>) -> Result<(), Crashed> {
        self.write(generation, Write::Vote(vote))
    }

    /// Saves the committed index (unsynced until the next fsync).
    pub fn save_committed(
        &mut self,
        generation: u64,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), Crashed> {
        self.write(generation, Write::Committed(committed))
    }

    /// How long the next fsync takes: mostly a millisecond or two, now and then a stall.
    pub fn fsync_latency(&mut self) -> Duration {
        let millis = if self.rng.below(50) == 0 {
            20 + self.rng.below(200)
        } else {
            1 + self.rng.below(3)
        };
        Duration::from_millis(millis)
    }

    /// An fsync: everything written so far becomes durable. Returns the appends it covered,
    /// to be told so; nothing if the generation crashed meanwhile.
    pub fn sync(&mut self, generation: u64) -> Vec<LogFlushed<SimConfig>> {
        if self.check(generation).is_err() {
            return Vec::new();
        }
        for write in self.pending.drain(..) {
            self.durable.apply(&write);
        }
        self.syncs = self.syncs.saturating_add(1);
        self.syncing = false;
        std::mem::take(&mut self.waiting)
    }

    /// The durable snapshot, if any.
    pub fn snapshot(&self) -> Option<&StoredSnapshot> {
        self.snapshot.as_ref()
    }

    /// Stores a snapshot, durable at once.
    pub fn put_snapshot(
        &mut self,
        generation: u64,
        snapshot: StoredSnapshot,
    ) -> Result<(), Crashed> {
        self.check(generation)?;
        self.snapshot = Some(snapshot);
        Ok(())
    }

    /// Power is lost: the unsynced writes are gone, the appends waiting for an fsync are never
    /// told, and the crashed incarnation's handles are refused from now on.
    pub fn crash(&mut self) {
        self.writes_lost = self
            .writes_lost
            .saturating_add(u64::try_from(self.pending.len()).unwrap_or(u64::MAX));
        self.pending.clear();
        self.waiting.clear();
        self.syncing = false;
        self.written = self.durable.clone();
        self.generation = self.generation.saturating_add(1);
    }
}
