//! The free space of a node's data directory, and the reserve below which the node stops
//! taking on new data.
//!
//! A node that runs out of disk mid-write loses its Raft core: RocksDB or the snapshot writer
//! fails with ENOSPC and openraft stops (the node then exits, see the binary). Refusing growth
//! while some space is left keeps the node serving reads, pops and deletions instead, the way
//! etcd's NOSPACE alarm does. The reserve must leave room for what the node writes without
//! being asked: intents, confirmations, and a snapshot of the whole state.

use std::io;
use std::path::{Path, PathBuf};

use crate::telemetry;

/// The data directory's space, checked against a reserve.
#[derive(Debug, Clone)]
pub struct DiskReserve {
    dir: PathBuf,
    reserve_bytes: u64,
}

/// Why new data is refused.
#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    /// Less than the reserve is free.
    #[error(
        "the data directory {dir} has {free} bytes free, below its reserve of {reserve} bytes \
         (disk_reserve_mb in the cluster file): free space on that filesystem, or delete clocks"
    )]
    Low {
        /// The data directory.
        dir: PathBuf,
        /// Bytes available to tickd.
        free: u64,
        /// The configured reserve.
        reserve: u64,
    },
    /// The filesystem could not be asked.
    #[error("cannot read the free space of {dir}: {source}")]
    Unknown {
        /// The data directory.
        dir: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

impl DiskReserve {
    /// Keeps `reserve_bytes` free in the filesystem of `dir`.
    pub fn new(dir: PathBuf, reserve_bytes: u64) -> Self {
        Self { dir, reserve_bytes }
    }

    /// The bytes free for tickd now, also recorded as a metric.
    pub fn free_bytes(&self) -> Result<u64, SpaceError> {
        let free = free_bytes(&self.dir).map_err(|source| SpaceError::Unknown {
            dir: self.dir.clone(),
            source,
        })?;
        telemetry::record_free_bytes(free);
        Ok(free)
    }

    /// Whether new data may be accepted: at least the reserve is free.
    pub fn check(&self) -> Result<(), SpaceError> {
        let free = self.free_bytes()?;
        if free < self.reserve_bytes {
            return Err(SpaceError::Low {
                dir: self.dir.clone(),
                free,
                reserve: self.reserve_bytes,
            });
        }
        Ok(())
    }
}

/// The bytes an unprivileged writer may still use in the filesystem of `dir` (`f_bavail`).
fn free_bytes(dir: &Path) -> io::Result<u64> {
    let stat = rustix::fs::statvfs(dir)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_larger_than_the_disk_refuses_and_says_why() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let free = DiskReserve::new(dir.path().to_path_buf(), 0)
            .free_bytes()
            .expect("readable");
        assert!(free > 0, "a temporary directory has some space");
        DiskReserve::new(dir.path().to_path_buf(), 0)
            .check()
            .expect("no reserve, accepted");
        DiskReserve::new(dir.path().to_path_buf(), free / 2)
            .check()
            .expect("half the free space is free");
        let error = DiskReserve::new(dir.path().to_path_buf(), u64::MAX)
            .check()
            .expect_err("refused");
        let message = error.to_string();
        assert!(message.contains("disk_reserve_mb"), "{message}");
        assert!(message.contains("below its reserve"), "{message}");
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_full_disk() {
        let error = DiskReserve::new(PathBuf::from("/nonexistent/tickd"), 0)
            .check()
            .expect_err("refused");
        assert!(matches!(error, SpaceError::Unknown { .. }), "{error}");
    }
}
