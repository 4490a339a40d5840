//! The undo log: for every file, the inverse of each change made to its content since its last
//! fsync, so that "lose power" can put the file back the way its last fsync left it.
//!
//! A change is a write of a byte range or a change of length (truncate, extend). Before it is
//! made, [`UndoLog::before_write`] or [`UndoLog::before_set_len`] saves a [`Record`]: the bytes of
//! the range that the file held (only the part inside the file: bytes past the end did not
//! exist) and the file's length. Undoing a record writes those bytes back and sets that length,
//! which restores exactly the state before the change; undoing a file's records newest first
//! therefore restores the state at its last fsync, which drops them all.
//!
//! Appends cost nothing but a record: the range lies past the old end, so no byte is saved, and
//! an append that follows an append is not even recorded (undoing the first truncates past both).
//! That is the common case for a write-ahead log and for a snapshot written to a fresh file.
//!
//! Memory is capped ([`UndoLog::new`]): a change whose record would take the log past the cap
//! makes its file *written back* instead — its records are dropped, as if the kernel had flushed
//! its dirty pages under memory pressure, so everything written to it so far survives a power
//! loss. That is something a real disk may do too (it is never wrong to persist more), but it
//! weakens the test, so it is counted ([`Stats::written_back`]) for a test to assert it is zero.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// What one saved record costs beyond its bytes, in the cap's accounting.
const RECORD_OVERHEAD: u64 = 48;

/// A file's content, as the log reads and restores it: a backing file, or a buffer in tests.
pub trait Content {
    /// The current length.
    fn length(&mut self) -> io::Result<u64>;
    /// Exactly `len` bytes from `offset`, which lie inside the file.
    fn read_at(&mut self, offset: u64, len: u64) -> io::Result<Vec<u8>>;
    /// Writes `bytes` at `offset`, extending the file if needed.
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// Truncates or extends (with zeros) to `len`.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// The inverse of one change: the bytes it overwrote, where, and the length before it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    offset: u64,
    old: Vec<u8>,
    old_len: u64,
}

impl Record {
    fn cost(&self) -> u64 {
        (self.old.len() as u64).saturating_add(RECORD_OVERHEAD)
    }

    /// A record that saved no byte: the change lay at or past the end of the file.
    fn is_extension(&self) -> bool {
        self.old.is_empty()
    }
}

/// The unsynced changes of one file.
#[derive(Debug)]
pub struct FileUndo {
    /// Where the file is now, relative to the backing directory (renames move it).
    pub path: PathBuf,
    records: Vec<Record>,
    /// Bytes written or cut since the last fsync: what a power loss drops.
    unsynced: u64,
    cost: u64,
}

impl FileUndo {
    /// Bytes written or cut since the last fsync.
    pub fn unsynced(&self) -> u64 {
        self.unsynced
    }

    /// Puts `content` back the way the last fsync left it (records undone newest first).
    pub fn roll_back(&self, content: &mut impl Content) -> io::Result<()> {
        for record in self.records.iter().rev() {
            if !record.old.is_empty() {
                content.write_at(record.offset, &record.old)?;
            }
            content.set_len(record.old_len)?;
        }
        Ok(())
    }
}

/// Counters of the log, for `stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Files with unsynced changes.
    pub files: u64,
    /// Bytes written or cut since their file's last fsync, over all files.
    pub unsynced_bytes: u64,
    /// Memory the records take, in the cap's accounting.
    pub held_bytes: u64,
    /// Files written back because the cap was reached (see the module docs).
    pub written_back: u64,
}

/// The unsynced changes of every file, keyed by the file's inode number (stable across renames).
#[derive(Debug)]
pub struct UndoLog {
    files: HashMap<u64, FileUndo>,
    held: u64,
    cap: u64,
    written_back: u64,
}

impl UndoLog {
    /// An empty log that holds at most `cap` bytes of records (see the module docs).
    pub fn new(cap: u64) -> Self {
        Self {
            files: HashMap::new(),
            held: 0,
            cap,
            written_back: 0,
        }
    }

    /// Saves what a write of `len` bytes at `offset` to the file `key` (at `path`) overwrites.
    /// Call it before the write.
    pub fn before_write(
        &mut self,
        key: u64,
        path: &Path,
        content: &mut impl Content,
        offset: u64,
        len: u64,
    ) -> io::Result<()> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        let old_len = content.length()?;
        let saved_end = end.min(old_len);
        let saved = saved_end.saturating_sub(offset);
        self.save(key, path, content, offset, saved, old_len, len)
    }

    /// Saves what setting the file's length to `new_len` changes. Call it before the change.
    pub fn before_set_len(
        &mut self,
        key: u64,
        path: &Path,
        content: &mut impl Content,
        new_len: u64,
    ) -> io::Result<()> {
        let old_len = content.length()?;
        if new_len == old_len {
            return Ok(());
        }
        let (offset, saved) = if new_len < old_len {
            (new_len, old_len - new_len)
        } else {
            (old_len, 0)
        };
        let changed = new_len.abs_diff(old_len);
        self.save(key, path, content, offset, saved, old_len, changed)
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one private step of two public ones"
    )]
    fn save(
        &mut self,
        key: u64,
        path: &Path,
        content: &mut impl Content,
        offset: u64,
        saved: u64,
        old_len: u64,
        changed: u64,
    ) -> io::Result<()> {
        let cost = saved.saturating_add(RECORD_OVERHEAD);
        if self.held.saturating_add(cost) > self.cap {
            self.write_back(key);
            return Ok(());
        }
        let old = if saved > 0 {
            content.read_at(offset, saved)?
        } else {
            Vec::new()
        };
        let record = Record {
            offset,
            old,
            old_len,
        };
        let file = self.files.entry(key).or_insert_with(|| FileUndo {
            path: path.to_path_buf(),
            records: Vec::new(),
            unsynced: 0,
            cost: 0,
        });
        file.unsynced = file.unsynced.saturating_add(changed);
        let redundant =
            record.is_extension() && file.records.last().is_some_and(Record::is_extension);
        if !redundant {
            let cost = record.cost();
            file.records.push(record);
            file.cost = file.cost.saturating_add(cost);
            self.held = self.held.saturating_add(cost);
        }
        Ok(())
    }

    fn write_back(&mut self, key: u64) {
        if let Some(file) = self.files.remove(&key) {
            self.held = self.held.saturating_sub(file.cost);
        }
        self.written_back = self.written_back.saturating_add(1);
    }

    /// The file was fsynced: its changes are durable. Returns the bytes that became durable.
    pub fn sync(&mut self, key: u64) -> u64 {
        match self.files.remove(&key) {
            Some(file) => {
                self.held = self.held.saturating_sub(file.cost);
                file.unsynced
            }
            None => 0,
        }
    }

    /// The file now lives at `path` (renamed, or moved to the graveyard).
    pub fn moved(&mut self, key: u64, path: &Path) {
        if let Some(file) = self.files.get_mut(&key) {
            file.path = path.to_path_buf();
        }
    }

    /// A directory moved from `from` to `to`: the files under it moved with it.
    pub fn moved_under(&mut self, from: &Path, to: &Path) {
        for file in self.files.values_mut() {
            if let Ok(rest) = file.path.strip_prefix(from) {
                file.path = to.join(rest);
            }
        }
    }

    /// The file is gone for good (its removal became durable): nothing of it is to be undone.
    pub fn forget_path(&mut self, path: &Path) {
        let gone: Vec<u64> = self
            .files
            .iter()
            .filter(|(_, file)| file.path == path)
            .map(|(key, _)| *key)
            .collect();
        for key in gone {
            self.sync(key);
        }
    }

    /// Empties the log and hands over every file's changes, to be rolled back.
    pub fn take_all(&mut self) -> Vec<FileUndo> {
        self.held = 0;
        self.files.drain().map(|(_, file)| file).collect()
    }

    /// The log's counters.
    pub fn stats(&self) -> Stats {
        Stats {
            files: self.files.len() as u64,
            unsynced_bytes: self.files.values().map(|file| file.unsynced).sum(),
            held_bytes: self.held,
            written_back: self.written_back,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file held in memory.
    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    struct Buffer(Vec<u8>);

    impl Content for Buffer {
        fn length(&mut self) -> io::Result<u64> {
            Ok(self.0.len() as u64)
        }

        fn read_at(&mut self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
            let start = usize::try_from(offset).map_err(io::Error::other)?;
            let end = start + usize::try_from(len).map_err(io::Error::other)?;
            Ok(self.0[start..end].to_vec())
        }

        fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
            let start = usize::try_from(offset).map_err(io::Error::other)?;
            if self.0.len() < start + bytes.len() {
                self.0.resize(start + bytes.len(), 0);
            }
            self.0[start..start + bytes.len()].copy_from_slice(bytes);
            Ok(())
        }

        fn set_len(&mut self, len: u64) -> io::Result<()> {
            self.0
                .resize(usize::try_from(len).map_err(io::Error::other)?, 0);
            Ok(())
        }
    }

    const KEY: u64 = 7;

    fn path() -> PathBuf {
        PathBuf::from("dir/file")
    }

    fn write(log: &mut UndoLog, file: &mut Buffer, offset: u64, bytes: &[u8]) {
        log.before_write(KEY, &path(), file, offset, bytes.len() as u64)
            .expect("recorded");
        file.write_at(offset, bytes).expect("written");
    }

    fn set_len(log: &mut UndoLog, file: &mut Buffer, len: u64) {
        log.before_set_len(KEY, &path(), file, len)
            .expect("recorded");
        file.set_len(len).expect("resized");
    }

    fn lose_power(log: &mut UndoLog, file: &mut Buffer) {
        for undo in log.take_all() {
            undo.roll_back(file).expect("rolled back");
        }
    }

    #[test]
    fn power_loss_restores_the_content_of_the_last_fsync() {
        let mut log = UndoLog::new(1 << 20);
        let mut file = Buffer::default();
        write(&mut log, &mut file, 0, b"hello ");
        write(&mut log, &mut file, 6, b"world");
        assert_eq!(log.sync(KEY), 11, "both writes become durable");
        let synced = file.clone();

        write(&mut log, &mut file, 6, b"WORLD, and more");
        write(&mut log, &mut file, 0, b"J");
        set_len(&mut log, &mut file, 3);
        write(&mut log, &mut file, 40, b"past a hole");
        assert_eq!(log.stats().files, 1);
        lose_power(&mut log, &mut file);

        assert_eq!(file, synced);
        assert_eq!(log.stats(), Stats::default());
    }

    #[test]
    fn a_file_never_synced_is_emptied() {
        let mut log = UndoLog::new(1 << 20);
        let mut file = Buffer::default();
        for chunk in 0..10u8 {
            write(&mut log, &mut file, u64::from(chunk) * 4, &[chunk; 4]);
        }
        assert_eq!(
            log.stats().held_bytes,
            RECORD_OVERHEAD,
            "a run of appends keeps one record"
        );
        lose_power(&mut log, &mut file);
        assert_eq!(file, Buffer::default());
    }

    #[test]
    fn a_truncation_keeps_the_bytes_it_cut() {
        let mut log = UndoLog::new(1 << 20);
        let mut file = Buffer(b"0123456789".to_vec());
        set_len(&mut log, &mut file, 2);
        set_len(&mut log, &mut file, 20);
        write(&mut log, &mut file, 4, b"xx");
        lose_power(&mut log, &mut file);
        assert_eq!(file, Buffer(b"0123456789".to_vec()));
    }

    #[test]
    fn an_overwrite_inside_an_append_run_is_undone_too() {
        let mut log = UndoLog::new(1 << 20);
        let mut file = Buffer(b"synced".to_vec());
        write(&mut log, &mut file, 6, b"aaaa");
        write(&mut log, &mut file, 10, b"bbbb");
        write(&mut log, &mut file, 0, b"S");
        write(&mut log, &mut file, 14, b"cc");
        lose_power(&mut log, &mut file);
        assert_eq!(file, Buffer(b"synced".to_vec()));
    }

    #[test]
    fn a_file_past_the_cap_is_written_back_and_counted() {
        let mut log = UndoLog::new(100);
        let mut file = Buffer(vec![1; 64]);
        write(&mut log, &mut file, 0, &[2; 64]);
        assert_eq!(
            log.stats().files,
            0,
            "64 saved bytes and a record exceed 100"
        );
        assert_eq!(log.stats().written_back, 1);
        lose_power(&mut log, &mut file);
        assert_eq!(file, Buffer(vec![2; 64]), "a written-back write survives");
    }

    #[test]
    fn a_renamed_file_keeps_its_records_under_its_new_path() {
        let mut log = UndoLog::new(1 << 20);
        let mut file = Buffer::default();
        write(&mut log, &mut file, 0, b"x");
        log.moved_under(Path::new("dir"), Path::new("moved"));
        let files = log.take_all();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, Path::new("moved/file"));
    }

    #[test]
    fn an_offset_that_overflows_is_refused() {
        let mut log = UndoLog::new(1 << 20);
        let mut file = Buffer::default();
        assert!(
            log.before_write(KEY, &path(), &mut file, u64::MAX, 2)
                .is_err()
        );
    }
}
