//! The persisted snapshot: one file, replaced atomically.
//!
//! Format: the snapshot's metadata as one line of JSON, a newline, then the snapshot data
//! (the serialized [`tickd_raft::ReplicatedState`]). Compact JSON has no raw newline, so the
//! first newline always ends the metadata.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use openraft::SnapshotMeta;
use tickd_raft::{NodeAddr, NodeId};

/// Snapshot metadata as openraft defines it for tickd.
pub type Meta = SnapshotMeta<NodeId, NodeAddr>;

/// The snapshot file of one node.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    dir: PathBuf,
}

impl SnapshotFile {
    /// The snapshot kept in `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn current(&self) -> PathBuf {
        self.dir.join("current")
    }

    /// Where a missing or unreadable snapshot is reported.
    pub fn path(&self) -> PathBuf {
        self.current()
    }

    /// Reads the current snapshot, if any.
    pub fn load(&self) -> io::Result<Option<(Meta, Vec<u8>)>> {
        let mut bytes = match fs::read(self.current()) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        let newline = bytes
            .iter()
            .position(|&byte| byte == b'\n')
            .ok_or_else(|| io::Error::other("the snapshot file has no metadata line"))?;
        let meta = serde_json::from_slice(&bytes[..newline]).map_err(io::Error::other)?;
        let data = bytes.split_off(newline + 1);
        Ok(Some((meta, data)))
    }

    /// Replaces the current snapshot. When this returns, the new snapshot is on disk (file and
    /// directory entry fsynced); a crash at any point leaves either the old or the new one.
    pub fn store(&self, meta: &Meta, data: &[u8]) -> io::Result<()> {
        let temporary = self.dir.join("current.tmp");
        let mut file = File::create(&temporary)?;
        serde_json::to_writer(&mut file, meta).map_err(io::Error::other)?;
        file.write_all(b"\n")?;
        file.write_all(data)?;
        file.sync_all()?;
        fs::rename(&temporary, self.current())?;
        sync_dir(&self.dir)
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
