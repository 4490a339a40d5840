//! The disk: what the filesystem thread and the control channel share — the undo log, the
//! namespace journal, the inode table and the freeze point — behind one lock, and "lose power".

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::namespace::{GRAVEYARD, Namespace};
use crate::undo::{Content, UndoLog};

/// The FUSE inode number of the root directory.
pub const ROOT: u64 = 1;

/// An operation a freeze point can stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A write (or a fallocate that changes content) to a file.
    Write,
    /// A truncate or extend of a file.
    Truncate,
    /// An fsync or fdatasync of a file.
    Fsync,
    /// An fsync of a directory.
    Fsyncdir,
    /// A file creation.
    Create,
    /// A rename (the path is the old name).
    Rename,
    /// A file removal.
    Unlink,
}

impl Op {
    const ALL: [(Op, &'static str); 7] = [
        (Op::Write, "write"),
        (Op::Truncate, "truncate"),
        (Op::Fsync, "fsync"),
        (Op::Fsyncdir, "fsyncdir"),
        (Op::Create, "create"),
        (Op::Rename, "rename"),
        (Op::Unlink, "unlink"),
    ];

    /// The operation named `name` in the control protocol.
    pub fn parse(name: &str) -> Option<Op> {
        Self::ALL
            .iter()
            .find(|(_, known)| *known == name)
            .map(|(op, _)| *op)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = Self::ALL
            .iter()
            .find(|(op, _)| op == self)
            .map_or("?", |(_, name)| name);
        f.write_str(name)
    }
}

/// Stop the next `op` on a path that matches `glob` (relative to the mount's root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreezePoint {
    /// The operation.
    pub op: Op,
    /// `*` matches any run of characters (`/` included), `?` any one character.
    pub glob: String,
}

impl FreezePoint {
    fn matches(&self, op: Op, path: &Path) -> bool {
        op == self.op && glob_matches(&self.glob, &path.to_string_lossy())
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters and `?` one.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it has consumed up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == '?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((star_p, star_t)) => {
                    p = star_p + 1;
                    t = star_t + 1;
                    star = Some((star_p, star_t + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// What a power loss dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loss {
    /// Files whose unsynced changes were rolled back.
    pub files: u64,
    /// Bytes written or cut since their file's last fsync, now dropped.
    pub bytes: u64,
    /// Directory changes taken back.
    pub entries: u64,
    /// Rollbacks that found nothing to act on (see the namespace journal's docs).
    pub skipped: u64,
    /// Of [`Self::bytes`], those dropped from files whose path matches the glob the power loss
    /// was asked to tally (none without one): what a caller cares about, apart from logs and
    /// temporary files that no one syncs.
    pub matching_bytes: u64,
}

/// Counters since the mount, for `stats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// Writes to files.
    pub writes: u64,
    /// Fsyncs of files.
    pub fsyncs: u64,
    /// Fsyncs of directories.
    pub fsyncdirs: u64,
    /// Power losses.
    pub power_losses: u64,
    /// Bytes dropped by power losses, in total.
    pub lost_bytes: u64,
}

/// A path the kernel knows an inode by, and how many lookups it holds.
#[derive(Debug)]
struct Inode {
    path: PathBuf,
    lookups: u64,
}

/// The kernel's inode numbers and where they are in the backing tree. An inode's number is its
/// backing inode number (stable across renames), except the root's, which FUSE fixes at 1.
#[derive(Debug)]
pub struct Inodes {
    root_backing: u64,
    table: HashMap<u64, Inode>,
}

impl Inodes {
    fn new(root_backing: u64) -> Self {
        let mut table = HashMap::new();
        table.insert(
            ROOT,
            Inode {
                path: PathBuf::new(),
                lookups: 1,
            },
        );
        Self {
            root_backing,
            table,
        }
    }

    /// The FUSE inode number of a backing inode number.
    pub fn number(&self, backing: u64) -> u64 {
        if backing == self.root_backing {
            ROOT
        } else {
            backing
        }
    }

    /// Where inode `ino` is, relative to the backing directory.
    pub fn path(&self, ino: u64) -> Option<PathBuf> {
        self.table.get(&ino).map(|inode| inode.path.clone())
    }

    /// The kernel looked `ino` up at `path`.
    pub fn remember(&mut self, ino: u64, path: &Path) {
        let inode = self.table.entry(ino).or_insert_with(|| Inode {
            path: path.to_path_buf(),
            lookups: 0,
        });
        inode.path = path.to_path_buf();
        inode.lookups = inode.lookups.saturating_add(1);
    }

    /// The kernel dropped `count` lookups of `ino`.
    pub fn forget(&mut self, ino: u64, count: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(inode) = self.table.get_mut(&ino) {
            inode.lookups = inode.lookups.saturating_sub(count);
            if inode.lookups == 0 {
                self.table.remove(&ino);
            }
        }
    }

    /// Inode `ino` now lives at `path`.
    pub fn moved(&mut self, ino: u64, path: &Path) {
        if let Some(inode) = self.table.get_mut(&ino) {
            inode.path = path.to_path_buf();
        }
    }

    /// A directory moved from `from` to `to`, and everything under it.
    pub fn moved_under(&mut self, from: &Path, to: &Path) {
        for inode in self.table.values_mut() {
            if let Ok(rest) = inode.path.strip_prefix(from)
                && !rest.as_os_str().is_empty()
            {
                inode.path = to.join(rest);
            }
        }
    }

    /// After a power loss moved names around: finds every known inode again in the backing
    /// tree, and drops those that no longer exist (the kernel will look them up anew).
    fn rescan(&mut self, root: &Path) -> io::Result<()> {
        let mut found = HashMap::new();
        let mut stack = vec![PathBuf::new()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(root.join(&dir))? {
                let entry = entry?;
                let path = dir.join(entry.file_name());
                if path.as_os_str() == GRAVEYARD {
                    continue;
                }
                let meta = entry.metadata()?;
                if meta.is_dir() {
                    stack.push(path.clone());
                }
                found.insert(self.number(meta.ino()), path);
            }
        }
        self.table.retain(|ino, inode| {
            if *ino == ROOT {
                return true;
            }
            match found.remove(ino) {
                Some(path) => {
                    inode.path = path;
                    true
                }
                None => false,
            }
        });
        Ok(())
    }
}

/// A backing file, as the undo log reads and restores it.
pub struct Backing<'a>(pub &'a File);

impl Content for Backing<'_> {
    fn length(&mut self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_at(&mut self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let mut bytes = vec![0; usize::try_from(len).map_err(io::Error::other)?];
        self.0.read_exact_at(&mut bytes, offset)?;
        Ok(bytes)
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all_at(bytes, offset)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

/// Everything behind the disk's lock.
#[derive(Debug)]
pub struct State {
    /// Unsynced file content.
    pub undo: UndoLog,
    /// Unsynced directory entries.
    pub names: Namespace,
    /// The kernel's inodes.
    pub inodes: Inodes,
    /// Counters since the mount.
    pub counters: Counters,
    freeze: Option<FreezePoint>,
    /// The operation now held by the freeze point, as `<op> <path>`.
    frozen: Option<String>,
    /// Set by [`Disk::thaw`]: the frozen operation goes on.
    thaw: bool,
}

/// The shared disk; see the module docs.
#[derive(Debug)]
pub struct Disk {
    root: PathBuf,
    state: Mutex<State>,
    changed: Condvar,
    /// How long each fsync's answer is held back, in milliseconds: a slow disk (a busy network
    /// volume) whose syncs take that long.
    fsync_delay_ms: AtomicU64,
}

impl Disk {
    /// The disk over the backing directory `root`, with at most `max_undo_bytes` of unsynced
    /// content kept undoable.
    pub fn open(root: &Path, max_undo_bytes: u64) -> io::Result<Self> {
        let root = root.canonicalize()?;
        let root_backing = fs::metadata(&root)?.ino();
        let state = State {
            undo: UndoLog::new(max_undo_bytes),
            names: Namespace::open(&root)?,
            inodes: Inodes::new(root_backing),
            counters: Counters::default(),
            freeze: None,
            frozen: None,
            thaw: false,
        };
        Ok(Self {
            root,
            state: Mutex::new(state),
            changed: Condvar::new(),
            fsync_delay_ms: AtomicU64::new(0),
        })
    }

    /// The backing directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Locks the state. A poisoned lock is used anyway: every change to the state is complete
    /// before anything that can panic, and a test filesystem that stops answering is worse.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called before every operation a freeze point can stop. Returns `true` to go on; when the
    /// armed freeze point matches, it is disarmed, the operation is reported as frozen, and this
    /// blocks until the next power loss and returns `false` — the operation never happens and
    /// fails with EIO, like a request the dead machine never completed — or until
    /// [`thaw`](Self::thaw) and returns `true`.
    pub fn proceed(&self, op: Op, path: &Path) -> bool {
        let mut state = self.lock();
        if !state
            .freeze
            .as_ref()
            .is_some_and(|point| point.matches(op, path))
        {
            return true;
        }
        state.freeze = None;
        state.frozen = Some(format!("{op} {}", path.display()));
        let epoch = state.counters.power_losses;
        self.changed.notify_all();
        while state.counters.power_losses == epoch && !state.thaw {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let lost = state.counters.power_losses != epoch;
        state.thaw = false;
        state.frozen = None;
        !lost
    }

    /// Lets the frozen operation go on, as if nothing had happened; `false` when none is frozen.
    pub fn thaw(&self) -> bool {
        let mut state = self.lock();
        if state.frozen.is_none() {
            return false;
        }
        state.thaw = true;
        // Cleared here already, so that a `wait-frozen` right after sees the next freeze only.
        state.frozen = None;
        self.changed.notify_all();
        true
    }

    /// Arms a freeze point (replacing any armed one).
    pub fn freeze_on(&self, point: FreezePoint) {
        self.lock().freeze = Some(point);
    }

    /// Holds every later fsync's answer back by `delay` (zero: answered at once).
    pub fn set_fsync_delay(&self, delay: Duration) {
        let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.fsync_delay_ms.store(millis, Ordering::Relaxed);
    }

    /// How long an fsync's answer is held back.
    pub fn fsync_delay(&self) -> Duration {
        Duration::from_millis(self.fsync_delay_ms.load(Ordering::Relaxed))
    }

    /// Disarms the freeze point; an operation already frozen stays frozen until power is lost.
    pub fn freeze_off(&self) {
        self.lock().freeze = None;
    }

    /// Waits up to `timeout` for an operation to be frozen; returns it as `<op> <path>`.
    pub fn wait_frozen(&self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if let Some(frozen) = &state.frozen {
                return Some(frozen.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Loses power: every file goes back to its last fsync and every directory to its last
    /// fsync, and a frozen operation is released (failing). The kernel never caches data for
    /// this filesystem (direct I/O, zero attribute and entry timeouts), so the next reader sees
    /// the rolled-back tree.
    ///
    /// `tally`, a glob, picks the files whose dropped bytes [`Loss::matching_bytes`] counts.
    pub fn lose_power(&self, tally: Option<&str>) -> io::Result<Loss> {
        let mut state = self.lock();
        let mut loss = Loss::default();
        let mut first_error = None;
        for file in state.undo.take_all() {
            loss.files = loss.files.saturating_add(1);
            loss.bytes = loss.bytes.saturating_add(file.unsynced());
            let matches =
                tally.is_some_and(|glob| glob_matches(glob, &file.path.to_string_lossy()));
            if matches {
                loss.matching_bytes = loss.matching_bytes.saturating_add(file.unsynced());
            }
            let opened = File::options()
                .read(true)
                .write(true)
                .open(self.root.join(&file.path));
            let rolled = match opened {
                Ok(backing) => file.roll_back(&mut Backing(&backing)),
                // The file's removal was durable: nothing of it survives to roll back.
                Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(error) => Err(error),
            };
            if let Err(error) = rolled {
                first_error.get_or_insert(io::Error::new(
                    error.kind(),
                    format!("rolling back {}: {error}", file.path.display()),
                ));
            }
        }
        let undone = state.names.roll_back();
        loss.entries = undone.changes;
        loss.skipped = undone.skipped;
        let rescanned = state.inodes.rescan(&self.root);
        state.counters.power_losses = state.counters.power_losses.saturating_add(1);
        state.counters.lost_bytes = state.counters.lost_bytes.saturating_add(loss.bytes);
        self.changed.notify_all();
        drop(state);
        match first_error {
            Some(error) => Err(error),
            None => rescanned.map(|()| loss),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_and_single_characters() {
        assert!(glob_matches("raft/*.log", "raft/000012.log"));
        assert!(glob_matches("*", "snapshot/built.tmp"));
        assert!(glob_matches("snapshot/*", "snapshot/built.tmp"));
        assert!(glob_matches("a?c", "abc"));
        assert!(glob_matches("*.log", "raft/x.log"));
        assert!(!glob_matches("raft/*.log", "raft/MANIFEST-000005"));
        assert!(!glob_matches("snapshot/*", "raft/x"));
        assert!(!glob_matches("a?c", "ac"));
    }

    #[test]
    fn ops_parse_their_own_names() {
        for (op, name) in Op::ALL {
            assert_eq!(Op::parse(name), Some(op));
            assert_eq!(op.to_string(), name);
        }
        assert_eq!(Op::parse("read"), None);
    }
}
