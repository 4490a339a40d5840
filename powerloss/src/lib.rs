//! A filesystem for tests that can lose power: a FUSE passthrough over a backing directory that
//! keeps every change not yet fsynced undoable, and on the command "lose power" takes them all
//! back — the idea of Jepsen's LazyFS, written for tickd's tests.
//!
//! A SIGKILL loses nothing that a process wrote: the kernel's page cache still holds it. A power
//! loss loses whatever was not fsynced, which is what this filesystem models, so that a test can
//! check that what tickd acknowledged was on disk and not merely in memory.
//!
//! # What is modelled
//!
//! * **File content.** Every write, truncate and content-changing fallocate reaches the backing
//!   file at once (readers see it), but stays *unsynced* until an fsync or fdatasync of that
//!   file: before the change, the [`undo`] log saves what it overwrote and the old length. Lose
//!   power, and every file is rolled back, newest change first, to its last fsync. A file
//!   fsynced once and written since keeps exactly the fsynced bytes; a file never fsynced is
//!   emptied.
//! * **Directory entries.** A file created, renamed or removed since its directory's last fsync
//!   may be lost: the [`namespace`] journal takes such changes back (a created file disappears,
//!   a renamed one returns to its old name and the file it replaced comes back, a removed one
//!   reappears). RocksDB fsyncs its directory after creating or renaming its files, and tickd's
//!   snapshot writer fsyncs `snapshot/` after its rename; this model checks that they do.
//! * **A freeze point** ([`disk::FreezePoint`]): the next operation of a kind on a matching path
//!   blocks, unanswered, until the next power loss, and then fails; with the filesystem served
//!   by one thread, nothing else happens on it meanwhile. A test arms it, waits until it is hit,
//!   SIGKILLs the process and loses power: the machine died exactly between a write and its
//!   fsync, in the middle of a snapshot, or during a log purge.
//! * **A control channel** ([`control`]): a Unix socket outside the mount, line protocol.
//!
//! # What is not, and why
//!
//! * **Directory creation and removal** are durable at once. When this crate was written tickd
//!   created its data directories (`raft/`, `snapshot/`) without fsyncing their parent, so
//!   rolling a `mkdir` back would have wiped a node's whole disk at every power loss, whereas a
//!   real journaling filesystem commits it within seconds. tickd now fsyncs those parents;
//!   modelling directory creation is the next step, not taken yet.
//! * **Torn writes and reordering inside a file.** A power loss keeps a file's state at its last
//!   fsync exactly: no partly written sector, no later write that survives while an earlier one
//!   is lost. Both are possible on real disks; RocksDB's WAL checksums are meant to cope with
//!   them, and these tests do not exercise that.
//! * **The kernel's page cache is bypassed**: every file is opened with direct I/O and attributes
//!   and entries are never cached, so that a rollback is seen by the next reader at once. As a
//!   consequence shared writable `mmap` is refused (tickd and RocksDB, with its default options,
//!   use none), and performance is that of one FUSE round trip per request.
//! * **Hard links, symbolic links, special files, extended attributes, file locks across
//!   processes** (the kernel keeps locks locally), `RENAME_NOREPLACE`/`RENAME_EXCHANGE` and free
//!   space (`statfs` reports a fixed 1 TiB) are not modelled. `syncfs` does not reach a FUSE
//!   filesystem; only per-file and per-directory fsyncs count.
//! * **The backing directory is never fsynced**: the model, not the disk below, decides what
//!   survives. The model lives in the daemon's memory; if the daemon exits, what it held undoable
//!   stays, as after a clean shutdown.
//!
//! # Memory
//!
//! Undo records are capped (`--max-undo-bytes`, 256 MiB by default). Appends cost a few dozen
//! bytes, overwrites the bytes they overwrite. A change that would pass the cap makes its file
//! *written back* (its changes so far become durable, as if the kernel had flushed them), and is
//! counted in `stats` (`written_back`) so that a test can insist it never happened. The namespace
//! journal keeps at most [`namespace::MAX_PENDING`] changes (the oldest becomes durable past it,
//! counted as `journal_overflowed`), and the inode table one path per inode the kernel holds.

pub mod control;
pub mod disk;
pub mod fs;
pub mod namespace;
pub mod undo;

use std::io;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{MountOption, Session};

/// The default cap on undo records.
pub const DEFAULT_MAX_UNDO_BYTES: u64 = 256 << 20;

/// How to mount one filesystem.
#[derive(Debug, Clone)]
pub struct Mount {
    /// The directory whose files the filesystem shows.
    pub backing: PathBuf,
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// The control socket (outside the mount); replaced if it exists.
    pub control: PathBuf,
    /// The cap on undo records, in bytes.
    pub max_undo_bytes: u64,
}

/// Mounts the filesystem and serves it until it is unmounted (`unmount` on the control socket,
/// or `fusermount3 -u`). The control socket exists once the mount is in place, so a caller can
/// wait for the socket.
pub fn serve(mount: &Mount) -> io::Result<()> {
    std::fs::create_dir_all(&mount.backing)?;
    std::fs::create_dir_all(&mount.mountpoint)?;
    let disk = Arc::new(disk::Disk::open(&mount.backing, mount.max_undo_bytes)?);
    let options = [
        MountOption::FSName("tickd-powerloss".to_owned()),
        MountOption::Subtype("powerloss".to_owned()),
        MountOption::RW,
    ];
    let mut session = Session::new(
        fs::PowerLossFs::new(disk.clone()),
        &mount.mountpoint,
        &options,
    )?;
    let listener = bind(&mount.control)?;
    control::serve(listener, disk, session.unmount_callable())?;
    let served = session.run();
    drop(std::fs::remove_file(&mount.control));
    served
}

fn bind(path: &Path) -> io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    UnixListener::bind(path)
}
