//! The namespace journal: directory entries created, renamed or removed since their directory's
//! last fsync, and how to take them back.
//!
//! A new, renamed or removed name lives in its directory, and a power loss may lose it until
//! that directory is fsynced (POSIX promises no more; ext4 in `data=ordered` mode usually keeps
//! it sooner, through its journal, but not always). The journal keeps each such change with the
//! directories that must be fsynced before it is durable — the parent of a created or removed
//! name, both parents of a rename. Removing or replacing a file must stay undoable, so the file
//! is not deleted but moved into a hidden graveyard directory of the backing tree, from which a
//! power loss brings it back and where a durable removal finally deletes it.
//!
//! Undone newest first, the changes restore the namespace of the last directory fsyncs. A change
//! made durable out of order (its directory fsynced while an older change in another directory
//! is not) can leave a later undo with nothing to act on; such an undo is skipped and counted,
//! which errs toward keeping a name, never toward inventing one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The backing tree's hidden directory for removed and replaced files.
pub const GRAVEYARD: &str = ".powerloss-graveyard";

/// At most this many changes wait for their directory's fsync; past it the oldest becomes
/// durable (as a journaling filesystem commits old metadata by itself), and is counted.
pub const MAX_PENDING: usize = 100_000;

/// One change to a directory, with what undoing it needs. Paths are relative to the backing
/// directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A file was created at `path`, which did not exist.
    Created {
        /// The new name.
        path: PathBuf,
    },
    /// `from` was renamed to `to`; what `to` held before lies in the graveyard at `replaced`.
    Renamed {
        /// The old name.
        from: PathBuf,
        /// The new name.
        to: PathBuf,
        /// The replaced file, if the rename replaced one.
        replaced: Option<PathBuf>,
    },
    /// `path` was removed; the file lies in the graveyard at `buried`.
    Removed {
        /// The removed name.
        path: PathBuf,
        /// Where the file lies meanwhile.
        buried: PathBuf,
    },
}

#[derive(Debug)]
struct Pending {
    change: Change,
    /// Inode numbers of the directories still to be fsynced before the change is durable.
    directories: Vec<u64>,
}

/// What a power loss did to the namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Undone {
    /// Changes taken back.
    pub changes: u64,
    /// Undos skipped because the entry they act on was not there (see the module docs).
    pub skipped: u64,
}

/// The journal over one backing directory.
#[derive(Debug)]
pub struct Namespace {
    root: PathBuf,
    pending: Vec<Pending>,
    next_grave: u64,
    /// Changes made durable because the journal was full.
    pub overflowed: u64,
}

impl Namespace {
    /// The journal of the backing directory `root`; empties its graveyard, whose files belong
    /// to changes no journal remembers any more.
    pub fn open(root: &Path) -> io::Result<Self> {
        let graveyard = root.join(GRAVEYARD);
        match fs::remove_dir_all(&graveyard) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        fs::create_dir_all(&graveyard)?;
        Ok(Self {
            root: root.to_path_buf(),
            pending: Vec::new(),
            next_grave: 0,
            overflowed: 0,
        })
    }

    /// Moves the file at `path` into the graveyard instead of deleting it; returns where it lies.
    pub fn bury(&mut self, path: &Path) -> io::Result<PathBuf> {
        let buried = Path::new(GRAVEYARD).join(self.next_grave.to_string());
        self.next_grave = self.next_grave.saturating_add(1);
        fs::rename(self.root.join(path), self.root.join(&buried))?;
        Ok(buried)
    }

    /// Remembers `change` until every directory in `directories` is fsynced. Returns the
    /// graveyard files of a change that the full journal made durable, which are deleted.
    pub fn record(&mut self, change: Change, mut directories: Vec<u64>) -> Vec<PathBuf> {
        directories.sort_unstable();
        directories.dedup();
        self.pending.push(Pending {
            change,
            directories,
        });
        if self.pending.len() > MAX_PENDING {
            self.overflowed = self.overflowed.saturating_add(1);
            let oldest = self.pending.remove(0);
            return self.make_durable(oldest.change);
        }
        Vec::new()
    }

    /// The directory `directory` was fsynced. Returns the graveyard files that are now gone for
    /// good (deleted here), so that the caller forgets their unsynced data.
    pub fn synced(&mut self, directory: u64) -> Vec<PathBuf> {
        let mut durable = Vec::new();
        self.pending.retain_mut(|pending| {
            pending.directories.retain(|&waiting| waiting != directory);
            if pending.directories.is_empty() {
                durable.push(pending.change.clone());
                false
            } else {
                true
            }
        });
        durable
            .into_iter()
            .flat_map(|change| self.make_durable(change))
            .collect()
    }

    fn make_durable(&mut self, change: Change) -> Vec<PathBuf> {
        let gone = match change {
            Change::Created { .. } => None,
            Change::Renamed { replaced, .. } => replaced,
            Change::Removed { buried, .. } => Some(buried),
        };
        // A graveyard file that cannot be deleted only takes space until the next start.
        gone.inspect(|path| drop(fs::remove_file(self.root.join(path))))
            .into_iter()
            .collect()
    }

    /// How many changes wait for a directory fsync.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Takes back every change not yet durable, newest first.
    pub fn roll_back(&mut self) -> Undone {
        let mut undone = Undone::default();
        while let Some(pending) = self.pending.pop() {
            let result = match &pending.change {
                Change::Created { path } => self.remove(path),
                Change::Renamed { from, to, replaced } => {
                    self.rename(to, from).and_then(|()| match replaced {
                        Some(replaced) => self.rename(replaced, to),
                        None => Ok(()),
                    })
                }
                Change::Removed { path, buried } => self.rename(buried, path),
            };
            match result {
                Ok(()) => undone.changes = undone.changes.saturating_add(1),
                Err(_) => undone.skipped = undone.skipped.saturating_add(1),
            }
        }
        undone
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let full = self.root.join(path);
        if fs::symlink_metadata(&full)?.is_dir() {
            fs::remove_dir_all(full)
        } else {
            fs::remove_file(full)
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(self.root.join(from), self.root.join(to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: u64 = 10;
    const OTHER: u64 = 11;

    fn backing() -> (tempfile::TempDir, Namespace) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let names = Namespace::open(dir.path()).expect("journal opened");
        (dir, names)
    }

    fn read(dir: &tempfile::TempDir, name: &str) -> Option<String> {
        fs::read_to_string(dir.path().join(name)).ok()
    }

    #[test]
    fn a_creation_is_lost_until_its_directory_is_fsynced() {
        let (dir, mut names) = backing();
        fs::write(dir.path().join("a"), "a").expect("written");
        names.record(Change::Created { path: "a".into() }, vec![DIR]);
        fs::write(dir.path().join("b"), "b").expect("written");
        names.record(Change::Created { path: "b".into() }, vec![OTHER]);
        names.synced(DIR);
        assert_eq!(names.pending(), 1);
        let undone = names.roll_back();
        assert_eq!(
            undone,
            Undone {
                changes: 1,
                skipped: 0
            }
        );
        assert_eq!(read(&dir, "a").as_deref(), Some("a"));
        assert_eq!(read(&dir, "b"), None);
    }

    #[test]
    fn a_rename_over_a_file_is_taken_back_whole() {
        let (dir, mut names) = backing();
        fs::write(dir.path().join("current"), "old").expect("written");
        fs::write(dir.path().join("new.tmp"), "new").expect("written");
        let replaced = names.bury(Path::new("current")).expect("buried");
        fs::rename(dir.path().join("new.tmp"), dir.path().join("current")).expect("renamed");
        names.record(
            Change::Renamed {
                from: "new.tmp".into(),
                to: "current".into(),
                replaced: Some(replaced),
            },
            vec![DIR],
        );
        names.roll_back();
        assert_eq!(read(&dir, "current").as_deref(), Some("old"));
        assert_eq!(read(&dir, "new.tmp").as_deref(), Some("new"));
    }

    #[test]
    fn a_durable_removal_deletes_the_buried_file() {
        let (dir, mut names) = backing();
        fs::write(dir.path().join("gone"), "x").expect("written");
        let buried = names.bury(Path::new("gone")).expect("buried");
        names.record(
            Change::Removed {
                path: "gone".into(),
                buried: buried.clone(),
            },
            vec![DIR],
        );
        assert_eq!(names.synced(DIR), vec![buried.clone()]);
        assert!(!dir.path().join(buried).exists());
        assert_eq!(names.roll_back(), Undone::default());
        assert_eq!(read(&dir, "gone"), None);
    }

    #[test]
    fn an_unsynced_removal_comes_back() {
        let (dir, mut names) = backing();
        fs::write(dir.path().join("kept"), "x").expect("written");
        let buried = names.bury(Path::new("kept")).expect("buried");
        names.record(
            Change::Removed {
                path: "kept".into(),
                buried,
            },
            vec![DIR],
        );
        names.roll_back();
        assert_eq!(read(&dir, "kept").as_deref(), Some("x"));
    }
}
