//! The persisted snapshot: one file, replaced atomically, and the form in which openraft moves
//! a snapshot around (its `SnapshotData` is an open file, never the whole snapshot in memory).
//!
//! Format: the snapshot's metadata as one line of JSON, a newline, then the snapshot data
//! (the serialized [`tickd_raft::ReplicatedState`]). Compact JSON has no raw newline, so the
//! first newline always ends the metadata. A snapshot travels to a follower as this whole
//! file, so the follower stores exactly what the leader stored.
//!
//! Why files and not buffers: a snapshot of a large registry is tens of megabytes. Held in one
//! buffer, it is one allocation that large, and glibc's allocator answers the free of such a
//! block by raising its mmap threshold, after which the next one is carved from the heap and
//! kept there. With 100 000 clocks that cost a node 14 MB (of 106 MB).

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use openraft::SnapshotMeta;
use serde::Serialize;
use tickd_raft::{NodeAddr, NodeId, ReplicatedState};

/// Snapshot metadata as openraft defines it for tickd.
pub type Meta = SnapshotMeta<NodeId, NodeAddr>;

/// The snapshot files of one node.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    dir: PathBuf,
    /// Held while a snapshot becomes the current one. openraft builds a snapshot in a task of
    /// its own, so a follower can install its leader's snapshot while an older one of its own
    /// is still being fsynced; the lock lets [`Self::commit`] see which one is newer.
    commits: Arc<Mutex<()>>,
}

/// A snapshot written to a temporary file, not yet the current one.
pub struct PendingSnapshot {
    file: File,
    path: PathBuf,
    /// What the snapshot holds.
    meta: Meta,
    /// The file's length: the metadata line and the data.
    pub bytes: u64,
}

impl SnapshotFile {
    /// The snapshot kept in `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            commits: Arc::default(),
        }
    }

    fn current(&self) -> PathBuf {
        self.dir.join("current")
    }

    /// Where a missing or unreadable snapshot is reported.
    pub fn path(&self) -> PathBuf {
        self.current()
    }

    /// Opens the current snapshot, if any: its metadata, and the file positioned at its start.
    pub fn open(&self) -> io::Result<Option<(Meta, File)>> {
        let mut file = match File::open(self.current()) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        let meta = read_meta(BufReader::new(&mut file))?;
        file.seek(SeekFrom::Start(0))?;
        Ok(Some((meta, file)))
    }

    /// Reads the current snapshot's state, if any, with the size of the file.
    pub fn load(&self) -> io::Result<Option<(ReplicatedState, u64)>> {
        match self.open()? {
            Some((_meta, file)) => decode(file).map(Some),
            None => Ok(None),
        }
    }

    /// Writes `meta` and `state` to the temporary file `<purpose>.tmp` (a received snapshot has
    /// its own, see [`Self::receive`]). Nothing is synced yet; [`Self::commit`] makes it
    /// current.
    pub fn write(
        &self,
        purpose: &str,
        meta: &Meta,
        state: &impl Serialize,
    ) -> io::Result<PendingSnapshot> {
        let path = self.dir.join(format!("{purpose}.tmp"));
        let file = temporary_file(&path)?;
        let mut writer = BufWriter::with_capacity(1 << 16, file);
        serde_json::to_writer(&mut writer, meta).map_err(io::Error::other)?;
        writer.write_all(b"\n")?;
        serde_json::to_writer(&mut writer, state).map_err(io::Error::other)?;
        let mut file = writer
            .into_inner()
            .map_err(io::IntoInnerError::into_error)?;
        let bytes = file.stream_position()?;
        Ok(PendingSnapshot {
            file,
            path,
            meta: meta.clone(),
            bytes,
        })
    }

    /// A fresh temporary file for a snapshot that is about to arrive from the leader in chunks.
    pub fn receiving(&self) -> io::Result<File> {
        temporary_file(&self.dir.join("receiving.tmp"))
    }

    /// Copies a snapshot received from the leader (a whole snapshot file, from its start, that
    /// holds `meta`) to a temporary file of its own.
    pub fn receive(&self, mut received: File, meta: &Meta) -> io::Result<PendingSnapshot> {
        let path = self.dir.join("received.tmp");
        let mut file = temporary_file(&path)?;
        received.seek(SeekFrom::Start(0))?;
        let bytes = io::copy(&mut received, &mut file)?;
        drop(received);
        // The chunks' file, if that is what arrived, is not needed any more.
        if let Err(error) = fs::remove_file(self.dir.join("receiving.tmp"))
            && error.kind() != io::ErrorKind::NotFound
        {
            return Err(error);
        }
        Ok(PendingSnapshot {
            file,
            path,
            meta: meta.clone(),
            bytes,
        })
    }

    /// Makes `pending` the current snapshot, unless the current one is newer (a snapshot
    /// installed from the leader while this one was being written): an older snapshot must
    /// never replace it, since the log before the newer one may be gone. When this returns,
    /// the current snapshot is on disk (file and directory entry fsynced); a crash at any point
    /// leaves either the old or the new one. Returns the current snapshot's metadata and file,
    /// positioned at its start.
    pub fn commit(&self, pending: PendingSnapshot) -> io::Result<(Meta, File)> {
        let PendingSnapshot {
            mut file,
            path,
            meta,
            ..
        } = pending;
        file.sync_all()?;
        let _committing = self.commits.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((current, current_file)) = self.open()?
            && current.last_log_id > meta.last_log_id
        {
            drop(file);
            fs::remove_file(&path)?;
            return Ok((current, current_file));
        }
        fs::rename(&path, self.current())?;
        crate::sync_dir(&self.dir)?;
        file.seek(SeekFrom::Start(0))?;
        Ok((meta, file))
    }
}

impl PendingSnapshot {
    /// Decodes the state this snapshot holds (checking a transfer before it is installed).
    pub fn decode(&mut self) -> io::Result<ReplicatedState> {
        self.file.seek(SeekFrom::Start(0))?;
        let file = self.file.try_clone()?;
        decode(file).map(|(state, _bytes)| state)
    }
}

/// Reads a snapshot file from its start: skips the metadata line and decodes the state,
/// streaming (the file is never in memory at once). Returns the state and the file's size.
fn decode(file: File) -> io::Result<(ReplicatedState, u64)> {
    let bytes = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 16, file);
    read_meta(&mut reader)?;
    let state = serde_json::from_reader(reader)
        .map_err(|error| io::Error::other(format!("the snapshot does not decode: {error}")))?;
    Ok((state, bytes))
}

fn read_meta(mut reader: impl BufRead) -> io::Result<Meta> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if line.pop() != Some(b'\n') {
        return Err(io::Error::other("the snapshot file has no metadata line"));
    }
    serde_json::from_slice(&line).map_err(io::Error::other)
}

/// Creates (or empties) a temporary file, readable and writable.
fn temporary_file(path: &Path) -> io::Result<File> {
    File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId};

    use super::*;

    fn meta(index: u64) -> Meta {
        Meta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), index)),
            last_membership: Default::default(),
            snapshot_id: format!("snapshot-{index}"),
        }
    }

    fn state(index: u64) -> ReplicatedState {
        ReplicatedState {
            last_applied: meta(index).last_log_id,
            ..ReplicatedState::default()
        }
    }

    #[test]
    fn a_committed_snapshot_is_the_current_one_and_decodes_to_its_state() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let snapshots = SnapshotFile::new(dir.path().to_path_buf());
        assert!(
            snapshots
                .load()
                .expect("no snapshot is not an error")
                .is_none()
        );

        let pending = snapshots
            .write("built", &meta(7), &state(7))
            .expect("written");
        assert!(
            snapshots.open().expect("readable").is_none(),
            "not current before commit"
        );
        let (committed, _file) = snapshots.commit(pending).expect("committed");
        assert_eq!(committed, meta(7));

        let (current, _file) = snapshots.open().expect("readable").expect("a snapshot");
        assert_eq!(current, meta(7));
        let (loaded, bytes) = snapshots.load().expect("readable").expect("a snapshot");
        assert_eq!(loaded, state(7));
        assert_eq!(
            bytes,
            fs::metadata(snapshots.path()).expect("the file").len()
        );
    }

    #[test]
    fn a_received_snapshot_replaces_the_current_one_byte_for_byte() {
        let leader_dir = tempfile::tempdir().expect("a temporary directory");
        let leader = SnapshotFile::new(leader_dir.path().to_path_buf());
        let built = leader.write("built", &meta(9), &state(9)).expect("written");
        let (_, sent) = leader.commit(built).expect("committed");

        let follower_dir = tempfile::tempdir().expect("a temporary directory");
        let follower = SnapshotFile::new(follower_dir.path().to_path_buf());
        let old = follower
            .write("built", &meta(3), &state(3))
            .expect("written");
        follower.commit(old).expect("committed");
        let mut received = follower.receive(sent, &meta(9)).expect("received");
        assert_eq!(received.decode().expect("decodes"), state(9));
        follower.commit(received).expect("committed");

        assert_eq!(
            fs::read(follower.path()).expect("the follower's file"),
            fs::read(leader.path()).expect("the leader's file")
        );
    }

    #[test]
    fn an_older_snapshot_never_replaces_a_newer_one() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let snapshots = SnapshotFile::new(dir.path().to_path_buf());
        let older = snapshots
            .write("built", &meta(5), &state(5))
            .expect("written");
        let newer = snapshots
            .write("installed", &meta(8), &state(8))
            .expect("written");
        snapshots.commit(newer).expect("committed");

        let (current, _file) = snapshots.commit(older).expect("superseded, not an error");
        assert_eq!(current, meta(8), "the newer snapshot stays the current one");
        let (loaded, _bytes) = snapshots.load().expect("readable").expect("a snapshot");
        assert_eq!(loaded, state(8));
        assert!(
            !dir.path().join("built.tmp").exists(),
            "the older one is discarded"
        );
    }

    #[test]
    fn a_snapshot_of_the_current_position_replaces_the_current_one() {
        // Two snapshots of one log position: a rebuild with nothing applied in between, or the
        // leader's snapshot of the position this node snapshotted itself. The later one is
        // what the caller hands on, so it must become the current one.
        let dir = tempfile::tempdir().expect("a temporary directory");
        let snapshots = SnapshotFile::new(dir.path().to_path_buf());
        let first = snapshots
            .write("built", &meta(6), &state(6))
            .expect("written");
        snapshots.commit(first).expect("committed");
        let again = Meta {
            snapshot_id: "snapshot-6-again".to_owned(),
            ..meta(6)
        };
        let second = snapshots
            .write("installed", &again, &state(6))
            .expect("written");
        let (committed, _file) = snapshots.commit(second).expect("committed");
        assert_eq!(committed, again);
        let (current, _file) = snapshots.open().expect("readable").expect("a snapshot");
        assert_eq!(current, again);
    }

    #[test]
    fn a_snapshot_that_cannot_be_opened_is_an_error_not_an_empty_state() {
        // Only a missing snapshot means "start empty". Here the snapshot directory is a file,
        // so opening `current` fails for another reason: starting empty would lose the state.
        let root = tempfile::tempdir().expect("a temporary directory");
        let not_a_dir = root.path().join("snapshot");
        fs::write(&not_a_dir, b"").expect("a file");
        let snapshots = SnapshotFile::new(not_a_dir);
        let error = snapshots.load().expect_err("refused");
        assert_eq!(error.kind(), io::ErrorKind::NotADirectory);
    }

    #[test]
    fn a_file_without_its_metadata_line_is_refused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let snapshots = SnapshotFile::new(dir.path().to_path_buf());
        fs::write(snapshots.path(), b"{\"no\":\"newline\"}").expect("a broken file");
        let error = snapshots.load().expect_err("refused");
        assert!(error.to_string().contains("no metadata line"), "{error}");
    }
}
