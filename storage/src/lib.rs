//! Durable storage for a tickd node: the Raft log in RocksDB and the state machine.
//!
//! # Layout on disk
//!
//! Under a node's data directory:
//!
//! * `raft/` — one RocksDB database with two column families: `log` (entries keyed by their
//!   big-endian index, so iteration order is log order) and `meta` (the vote, the last purged
//!   log id and the committed log id).
//! * `snapshot/current` — the latest state machine snapshot, replaced atomically.
//!
//! # Durability, stated per operation
//!
//! * [`LogStore::append`](openraft::storage::RaftLogStorage::append) writes the entries to
//!   RocksDB (readable at once) and hands openraft's flush callback to the [`wal_sync`]
//!   thread, which calls it only after the write-ahead log has been fsynced. Appends that
//!   arrive while an fsync runs share the next one: under load, one fsync covers many
//!   entries, and no fsync ever blocks an async worker thread.
//! * `save_vote` returns only after the vote is fsynced, through the same thread.
//! * `truncate`, `purge` and `save_committed` are written but not fsynced by themselves. The
//!   write-ahead log is sequential, so the next fsync covers them and a crash can only lose a
//!   suffix of them, which Raft tolerates: a truncation that is lost leaves uncommitted entries
//!   the leader will truncate again; a lost purge leaves entries that are already in the
//!   snapshot; a lost committed index is learnt again from the leader.
//!
//! # State machine persistence: rebuilt from a persisted snapshot
//!
//! The state machine lives in memory ([`tickd_raft::StateHandle`]); `apply` never touches the
//! disk, which keeps it fast and deterministic. What makes it durable is the pair of
//! (a) the snapshot file, written with write-to-temporary, fsync, rename, fsync-directory
//! before openraft may purge the log behind it, and (b) the log itself, fsynced on append.
//! On start-up the node loads the snapshot and openraft re-applies the log entries after it
//! up to the saved committed index (and the rest once a leader confirms them). So a restart
//! recovers every applied entry, because each is either in the snapshot or in the durable log
//! behind it, and nothing more, because only committed entries are ever applied.
//!
//! Snapshots are encoded from an image of the state taken under its read lock in O(1): the
//! replicated maps are persistent (`tickd_domain::SharedMap`), so the image shares the state's
//! nodes and applies go on while it is encoded, copying only the nodes they change (a copy of
//! the whole state would double the node's peak memory). They are encoded straight into a
//! temporary file rather than a buffer; they are fsynced off the lock, sent to followers from
//! the file in 1 MiB chunks by openraft, and installed by making the received file the
//! snapshot file first and swapping the in-memory state second. A snapshot is never in memory
//! as a whole (see `snapshot_file`).
//!
//! # What operators see
//!
//! [`telemetry`] records how long appends take to become durable, each fsync, the committed
//! index and the snapshots, through the `metrics` facade.

#![allow(
    clippy::result_large_err,
    reason = "openraft's storage traits fix StorageError as the error type; the helpers return it \
              as is rather than boxing it only to unbox it at every trait method"
)]

mod keys;
mod log_store;
mod memory;
mod snapshot_file;
mod space;
mod state_machine;
pub mod telemetry;
pub mod wal_sync;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, Options};
use tickd_raft::StateHandle;

pub use log_store::{LogReader, LogStore};
pub use memory::LogMemory;
pub use space::{DiskReserve, SpaceError};
pub use state_machine::{SnapshotBuilder, StateMachine};

/// Why the storage could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// RocksDB refused to open the database.
    #[error("cannot open the Raft log at {path}: {source}")]
    Log {
        /// The database directory.
        path: PathBuf,
        /// RocksDB's reason.
        source: rocksdb::Error,
    },
    /// The snapshot on disk could not be read or decoded.
    #[error("cannot load the snapshot at {path}: {reason}")]
    Snapshot {
        /// The snapshot file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A directory could not be created, or its creation could not be made durable.
    #[error("cannot create {path} durably: {source}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Opens (or creates) a node's storage under `data_dir` and returns the log store, the state
/// machine, and the handle through which the rest of the node reads the applied state.
pub fn open(data_dir: &Path) -> Result<(LogStore, StateMachine, StateHandle), OpenError> {
    let raft_dir = data_dir.join("raft");
    let snapshot_dir = data_dir.join("snapshot");
    for dir in [&raft_dir, &snapshot_dir] {
        create_durable_dir(dir).map_err(|source| OpenError::Directory {
            path: dir.clone(),
            source,
        })?;
    }
    let (db, block_cache) = open_db(&raft_dir)?;
    let log = LogStore::new(db, block_cache)?;
    let state_machine = StateMachine::open(snapshot_dir)?;
    let handle = state_machine.handle();
    Ok((log, state_machine, handle))
}

/// Creates `dir` and its missing ancestors, each made durable by an fsync of the directory
/// that holds it. RocksDB and the snapshot writer fsync the directories they write in, but not
/// those directories' own entries: without this, a node that lost power in its first seconds
/// could come back without the directory that held its vote and its log, and vote again.
///
/// New directories are the owner's alone (0700): a node's files hold every http queue id, which
/// is the capability to pop that queue's ticks.
pub fn create_durable_dir(dir: &Path) -> std::io::Result<()> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|path| !path.exists()).collect();
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    for parent in missing.into_iter().rev().filter_map(Path::parent) {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Makes the entries of `dir` (files created, renamed or removed in it) durable: an fsync of a
/// file covers its content, not its name. An empty path is the current directory (the parent
/// of a bare file name).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::fs::File::open(dir)?.sync_all()
}

/// The memtable of a column family: RocksDB's default (64 MiB, two of them) would hold a
/// hundred thousand log entries in memory until the next flush, although a snapshot made them
/// garbage long before. A memtable holds what was written since its last flush whether or not
/// anything reads it, so at rest a node carries half of it on average: 1 MiB (a few thousand
/// entries; at 2 000 registrations a second, a flush in the background every second or two)
/// keeps that to half a MiB, where 4 MiB cost 10 bytes a clock at 200 000 clocks. The newest
/// entries, the ones the leader reads back for its followers, are still in it.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// The block cache, shared by the column families. Left unset, RocksDB gives every column
/// family a cache of its own (32 MiB each), which a leader fills by reading back flushed
/// entries for a lagging follower; the log's readers want the newest entries, which the
/// memtable usually still holds, so a small cache serves them.
const BLOCK_CACHE_BYTES: usize = 4 << 20;

fn family_options(block_cache: &Cache) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(block_cache);
    let mut options = Options::default();
    options.set_write_buffer_size(WRITE_BUFFER_BYTES);
    options.set_block_based_table_factory(&table);
    options
}

/// Opens the log's database, with the block cache its column families share.
fn open_db(path: &Path) -> Result<(Arc<DB>, Cache), OpenError> {
    let mut options = Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    // The log is small and short-lived: each snapshot purges all but the last `snapshot_every`
    // entries before it.
    options.set_compression_type(rocksdb::DBCompressionType::Lz4);
    let block_cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
    let families = [keys::LOG_CF, keys::META_CF]
        .map(|name| ColumnFamilyDescriptor::new(name, family_options(&block_cache)));
    let db =
        DB::open_cf_descriptors(&options, path, families).map_err(|source| OpenError::Log {
            path: path.to_path_buf(),
            source,
        })?;
    Ok((Arc::new(db), block_cache))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_durable_directory_is_created_with_its_missing_ancestors() {
        let root = tempfile::tempdir().expect("temporary directory");
        let dir = root.path().join("a").join("b").join("raft");
        create_durable_dir(&dir).expect("created");
        assert!(dir.is_dir());
        #[cfg(unix)]
        for created in [root.path().join("a"), dir.clone()] {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&created)
                .expect("metadata")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{}", created.display());
        }
        // Again: nothing to create, nothing fails.
        create_durable_dir(&dir).expect("already there");
    }

    #[test]
    fn a_bare_file_name_has_the_current_directory_as_its_directory() {
        let parent = Path::new("token").parent().expect("a parent, empty");
        sync_dir(parent).expect("the current directory is synced");
    }

    /// The value of `option` in each column family's section of the newest OPTIONS file that
    /// RocksDB wrote in `db_dir`, by family name.
    fn persisted_option(db_dir: &Path, option: &str) -> Vec<(String, String)> {
        let number = |name: &str| name.strip_prefix("OPTIONS-")?.parse::<u64>().ok();
        let newest = std::fs::read_dir(db_dir)
            .expect("the database directory")
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter_map(|name| Some((number(&name)?, name)))
            .max()
            .map(|(_, name)| name)
            .expect("an OPTIONS file");
        let text = std::fs::read_to_string(db_dir.join(newest)).expect("readable");
        let mut family = None;
        let mut values = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                family = line
                    .strip_prefix("[CFOptions \"")
                    .and_then(|rest| rest.strip_suffix("\"]"))
                    .map(str::to_owned);
            } else if let (Some(family), Some(value)) = (
                &family,
                line.strip_prefix(option)
                    .and_then(|rest| rest.strip_prefix('=')),
            ) {
                values.push((family.clone(), value.to_owned()));
            }
        }
        values
    }

    #[test]
    fn each_column_family_keeps_1_mib_of_memtable_and_shares_a_4_mib_block_cache() {
        let root = tempfile::tempdir().expect("temporary directory");
        let path = root.path().join("raft");
        let (db, _) = open_db(&path).expect("opened");
        for name in [keys::LOG_CF, keys::META_CF] {
            let family = db.cf_handle(name).expect("the column family");
            let capacity = db
                .property_int_value_cf(family, "rocksdb.block-cache-capacity")
                .expect("readable");
            assert_eq!(capacity, Some(4_194_304), "block cache of {name}");
        }
        // RocksDB's own `default` family holds nothing of tickd's.
        let write_buffers: Vec<(String, String)> = persisted_option(&path, "write_buffer_size")
            .into_iter()
            .filter(|(family, _)| family != "default")
            .collect();
        let expected =
            [keys::LOG_CF, keys::META_CF].map(|family| (family.to_owned(), "1048576".to_owned()));
        assert_eq!(write_buffers, expected);
    }
}
