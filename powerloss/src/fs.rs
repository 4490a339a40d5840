//! The FUSE filesystem: a passthrough to the backing directory that keeps every unsynced change
//! undoable on the [`Disk`].
//!
//! Each request is served on the one session thread, in order. A content change saves its undo
//! record and then goes straight to the backing file (so readers see it at once); an fsync drops
//! the file's records; a name change is made in the backing tree and journaled until its
//! directory is fsynced. Every open file is opened with direct I/O and every attribute and entry
//! is given a zero timeout, so the kernel keeps no copy that a power loss could make stale.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, DirBuilder, File, FileTimes, Metadata, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    FileAttr, FileType, Filesystem, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use libc::c_int;

use crate::disk::{Backing, Disk, Op, ROOT, State};
use crate::namespace::{Change, GRAVEYARD};

/// Attributes and entries are never cached by the kernel: a power loss changes them behind its
/// back.
const TTL: Duration = Duration::ZERO;

/// Zeros written at a time when a fallocate punches or zeroes a range.
const ZERO_CHUNK: u64 = 1 << 20;

/// `fallocate` modes (linux/falloc.h).
const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

/// The filesystem the session serves; see the module docs.
#[derive(Debug)]
pub struct PowerLossFs {
    disk: Arc<Disk>,
    /// Open backing files by handle.
    handles: HashMap<u64, File>,
    next_handle: u64,
}

/// What a request fails with: an errno.
type Failed = c_int;

fn errno(error: &io::Error) -> Failed {
    error.raw_os_error().unwrap_or(libc::EIO)
}

fn time(seconds: i64, nanos: i64) -> SystemTime {
    let seconds = u64::try_from(seconds).unwrap_or(0);
    let nanos = u32::try_from(nanos).unwrap_or(0);
    UNIX_EPOCH + Duration::new(seconds, nanos.min(999_999_999))
}

fn kind(meta: &Metadata) -> FileType {
    let kind = meta.file_type();
    if kind.is_dir() {
        FileType::Directory
    } else if kind.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    }
}

fn attr(ino: u64, meta: &Metadata) -> FileAttr {
    let mtime = time(meta.mtime(), meta.mtime_nsec());
    FileAttr {
        ino,
        size: meta.len(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime,
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: mtime,
        kind: kind(meta),
        perm: u16::try_from(meta.mode() & 0o7777).unwrap_or(0o600),
        nlink: u32::try_from(meta.nlink()).unwrap_or(u32::MAX),
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: u32::try_from(meta.rdev()).unwrap_or(0),
        blksize: u32::try_from(meta.blksize()).unwrap_or(4096),
        flags: 0,
    }
}

fn time_or_now(time: TimeOrNow) -> SystemTime {
    match time {
        TimeOrNow::SpecificTime(time) => time,
        TimeOrNow::Now => SystemTime::now(),
    }
}

/// Open options for the access mode in `flags`. A file is always opened readable as well, since
/// saving an undo record reads what a write overwrites.
fn open_options(flags: i32) -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true);
    if flags & libc::O_ACCMODE != libc::O_RDONLY {
        options.write(true);
    }
    options
}

impl PowerLossFs {
    /// The filesystem of `disk`.
    pub fn new(disk: Arc<Disk>) -> Self {
        Self {
            disk,
            handles: HashMap::new(),
            next_handle: 1,
        }
    }

    fn full(&self, path: &Path) -> PathBuf {
        self.disk.root().join(path)
    }

    fn path_of(state: &State, ino: u64) -> Result<PathBuf, Failed> {
        state.inodes.path(ino).ok_or(libc::ENOENT)
    }

    /// The path of `name` in directory `parent`; the graveyard is hidden.
    fn child(state: &State, parent: u64, name: &OsStr) -> Result<PathBuf, Failed> {
        if parent == ROOT && name == GRAVEYARD {
            return Err(libc::ENOENT);
        }
        Ok(Self::path_of(state, parent)?.join(name))
    }

    /// Looks `path` up in the backing tree, records the kernel's lookup, returns its attributes.
    fn entry(&self, state: &mut State, path: &Path) -> Result<FileAttr, Failed> {
        let meta = fs::symlink_metadata(self.full(path)).map_err(|error| errno(&error))?;
        let ino = state.inodes.number(meta.ino());
        state.inodes.remember(ino, path);
        Ok(attr(ino, &meta))
    }

    fn keep(&mut self, file: File) -> u64 {
        let handle = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        self.handles.insert(handle, file);
        handle
    }

    /// The open file `handle`, or the file of `ino` opened for writing.
    fn file_for(&self, state: &State, ino: u64, handle: Option<u64>) -> Result<File, Failed> {
        if let Some(file) = handle.and_then(|handle| self.handles.get(&handle)) {
            return file.try_clone().map_err(|error| errno(&error));
        }
        let path = Self::path_of(state, ino)?;
        open_options(libc::O_RDWR)
            .open(self.full(&path))
            .map_err(|error| errno(&error))
    }

    /// The attributes of inode `ino` read through one of its open handles. A file replaced or
    /// removed while open keeps its data and attributes until the last handle closes (POSIX),
    /// but once its removal is durable its graveyard name is gone: `fstat` on such a handle
    /// (a snapshot being sent while a newer one replaced it) must still answer.
    fn open_metadata(&self, ino: u64) -> Option<Metadata> {
        self.handles
            .values()
            .filter_map(|file| file.metadata().ok())
            .find(|meta| meta.ino() == ino)
    }

    /// Sets the length of `file` (inode `ino` at `path`), keeping the change undoable.
    fn set_len(state: &mut State, ino: u64, path: &Path, file: &File, len: u64) -> io::Result<()> {
        state
            .undo
            .before_set_len(ino, path, &mut Backing(file), len)?;
        file.set_len(len)
    }

    /// Writes `bytes` at `offset`, keeping the change undoable.
    fn write_at(
        state: &mut State,
        ino: u64,
        path: &Path,
        file: &File,
        offset: u64,
        bytes: &[u8],
    ) -> io::Result<()> {
        state
            .undo
            .before_write(ino, path, &mut Backing(file), offset, bytes.len() as u64)?;
        state.counters.writes = state.counters.writes.saturating_add(1);
        file.write_all_at(bytes, offset)
    }

    #[allow(clippy::too_many_arguments, reason = "the shape of fuser's setattr")]
    fn setattr_inner(
        &mut self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        handle: Option<u64>,
    ) -> Result<FileAttr, Failed> {
        let path = Self::path_of(&self.disk.lock(), ino)?;
        let full = self.full(&path);
        if let Some(len) = size {
            if !self.disk.proceed(Op::Truncate, &path) {
                return Err(libc::EIO);
            }
            let mut state = self.disk.lock();
            let file = self.file_for(&state, ino, handle)?;
            Self::set_len(&mut state, ino, &path, &file, len).map_err(|error| errno(&error))?;
        }
        if let Some(mode) = mode {
            fs::set_permissions(&full, Permissions::from_mode(mode & 0o7777))
                .map_err(|error| errno(&error))?;
        }
        if uid.is_some() || gid.is_some() {
            std::os::unix::fs::lchown(&full, uid, gid).map_err(|error| errno(&error))?;
        }
        if atime.is_some() || mtime.is_some() {
            let mut times = FileTimes::new();
            if let Some(atime) = atime {
                times = times.set_accessed(time_or_now(atime));
            }
            if let Some(mtime) = mtime {
                times = times.set_modified(time_or_now(mtime));
            }
            File::open(&full)
                .and_then(|file| file.set_times(times))
                .map_err(|error| errno(&error))?;
        }
        let meta = fs::symlink_metadata(&full).map_err(|error| errno(&error))?;
        Ok(attr(ino, &meta))
    }

    fn create_inner(
        &mut self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(FileAttr, u64), Failed> {
        let path = Self::child(&self.disk.lock(), parent, name)?;
        if !self.disk.proceed(Op::Create, &path) {
            return Err(libc::EIO);
        }
        let full = self.full(&path);
        let disk = Arc::clone(&self.disk);
        let mut state = disk.lock();
        let existed = fs::symlink_metadata(&full).is_ok();
        if existed && flags & libc::O_EXCL != 0 {
            return Err(libc::EEXIST);
        }
        let file = open_options(libc::O_RDWR)
            .create(true)
            .mode(mode & !umask & 0o7777)
            .open(&full)
            .map_err(|error| errno(&error))?;
        let attr = self.entry(&mut state, &path)?;
        if existed {
            if flags & libc::O_TRUNC != 0 {
                Self::set_len(&mut state, attr.ino, &path, &file, 0)
                    .map_err(|error| errno(&error))?;
            }
        } else {
            let gone = state
                .names
                .record(Change::Created { path: path.clone() }, vec![parent]);
            for path in gone {
                state.undo.forget_path(&path);
            }
        }
        let handle = self.keep(file);
        Ok((attr, handle))
    }

    fn open_inner(&mut self, ino: u64, flags: i32) -> Result<u64, Failed> {
        let path = Self::path_of(&self.disk.lock(), ino)?;
        if flags & libc::O_TRUNC != 0 && !self.disk.proceed(Op::Truncate, &path) {
            return Err(libc::EIO);
        }
        let disk = Arc::clone(&self.disk);
        let mut state = disk.lock();
        let file = open_options(flags)
            .open(self.full(&path))
            .map_err(|error| errno(&error))?;
        if flags & libc::O_TRUNC != 0 {
            Self::set_len(&mut state, ino, &path, &file, 0).map_err(|error| errno(&error))?;
        }
        Ok(self.keep(file))
    }

    fn write_inner(
        &mut self,
        ino: u64,
        handle: u64,
        offset: i64,
        data: &[u8],
    ) -> Result<(), Failed> {
        let offset = u64::try_from(offset).map_err(|_| libc::EINVAL)?;
        let path = Self::path_of(&self.disk.lock(), ino)?;
        if !self.disk.proceed(Op::Write, &path) {
            return Err(libc::EIO);
        }
        let mut state = self.disk.lock();
        let file = self.handles.get(&handle).ok_or(libc::EBADF)?;
        Self::write_at(&mut state, ino, &path, file, offset, data).map_err(|error| errno(&error))
    }

    fn fallocate_inner(
        &mut self,
        ino: u64,
        handle: u64,
        offset: i64,
        length: i64,
        mode: i32,
    ) -> Result<(), Failed> {
        let offset = u64::try_from(offset).map_err(|_| libc::EINVAL)?;
        let length = u64::try_from(length).map_err(|_| libc::EINVAL)?;
        let end = offset.checked_add(length).ok_or(libc::EFBIG)?;
        let keep_size = mode & FALLOC_FL_KEEP_SIZE != 0;
        let zero = mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0;
        if mode & !(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let path = Self::path_of(&self.disk.lock(), ino)?;
        if (zero || !keep_size) && !self.disk.proceed(Op::Write, &path) {
            return Err(libc::EIO);
        }
        let mut state = self.disk.lock();
        let file = self.handles.get(&handle).ok_or(libc::EBADF)?;
        let len = file.metadata().map_err(|error| errno(&error))?.len();
        // Allocation is not content: only the zeroed range and a new length are modelled.
        if zero {
            let mut at = offset;
            let stop = end.min(len);
            while at < stop {
                let chunk = (stop - at).min(ZERO_CHUNK);
                let zeros = vec![0; usize::try_from(chunk).map_err(|_| libc::EFBIG)?];
                Self::write_at(&mut state, ino, &path, file, at, &zeros)
                    .map_err(|error| errno(&error))?;
                at += chunk;
            }
        }
        if !keep_size && end > len {
            Self::set_len(&mut state, ino, &path, file, end).map_err(|error| errno(&error))?;
        }
        Ok(())
    }

    fn unlink_inner(&mut self, parent: u64, name: &OsStr) -> Result<(), Failed> {
        let path = Self::child(&self.disk.lock(), parent, name)?;
        if !self.disk.proceed(Op::Unlink, &path) {
            return Err(libc::EIO);
        }
        let mut state = self.disk.lock();
        let meta = fs::symlink_metadata(self.full(&path)).map_err(|error| errno(&error))?;
        if meta.is_dir() {
            return Err(libc::EISDIR);
        }
        let ino = state.inodes.number(meta.ino());
        let buried = state.names.bury(&path).map_err(|error| errno(&error))?;
        state.undo.moved(ino, &buried);
        state.inodes.moved(ino, &buried);
        let gone = state
            .names
            .record(Change::Removed { path, buried }, vec![parent]);
        for path in gone {
            state.undo.forget_path(&path);
        }
        Ok(())
    }

    fn rename_inner(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: u32,
    ) -> Result<(), Failed> {
        // RENAME_NOREPLACE and RENAME_EXCHANGE are not modelled.
        if flags != 0 {
            return Err(libc::EINVAL);
        }
        let (from, to) = {
            let state = self.disk.lock();
            (
                Self::child(&state, parent, name)?,
                Self::child(&state, new_parent, new_name)?,
            )
        };
        if !self.disk.proceed(Op::Rename, &from) {
            return Err(libc::EIO);
        }
        let mut state = self.disk.lock();
        let moving = fs::symlink_metadata(self.full(&from)).map_err(|error| errno(&error))?;
        let replaced = match fs::symlink_metadata(self.full(&to)) {
            Ok(target) if target.is_dir() => return Err(libc::EISDIR),
            Ok(target) => {
                let buried = state.names.bury(&to).map_err(|error| errno(&error))?;
                let target_ino = state.inodes.number(target.ino());
                state.undo.moved(target_ino, &buried);
                state.inodes.moved(target_ino, &buried);
                Some(buried)
            }
            Err(_) => None,
        };
        fs::rename(self.full(&from), self.full(&to)).map_err(|error| errno(&error))?;
        let ino = state.inodes.number(moving.ino());
        if moving.is_dir() {
            state.undo.moved_under(&from, &to);
            state.inodes.moved_under(&from, &to);
        }
        state.undo.moved(ino, &to);
        state.inodes.moved(ino, &to);
        let gone = state.names.record(
            Change::Renamed { from, to, replaced },
            vec![parent, new_parent],
        );
        for path in gone {
            state.undo.forget_path(&path);
        }
        Ok(())
    }

    /// Answers a sync, after the disk's fsync delay when one is set: on a thread of its own,
    /// so that the filesystem serves other operations meanwhile, as a slow disk does.
    fn answer_sync(&self, synced: Result<(), Failed>, reply: ReplyEmpty) {
        let delay = self.disk.fsync_delay();
        let answer = move || match synced {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        };
        if delay.is_zero() {
            return answer();
        }
        let held = std::thread::Builder::new()
            .name("powerloss-slow-sync".into())
            .spawn(move || {
                std::thread::sleep(delay);
                answer();
            });
        if let Err(error) = held {
            eprintln!("tickd-powerloss: cannot hold a sync back, so it fails: {error}");
        }
    }

    fn fsync_inner(&mut self, ino: u64, directory: bool) -> Result<(), Failed> {
        let path = Self::path_of(&self.disk.lock(), ino)?;
        let op = if directory { Op::Fsyncdir } else { Op::Fsync };
        if !self.disk.proceed(op, &path) {
            return Err(libc::EIO);
        }
        // The backing file is not fsynced: what survives a power loss is decided by the model,
        // not by the disk under it.
        let mut state = self.disk.lock();
        if directory {
            state.counters.fsyncdirs = state.counters.fsyncdirs.saturating_add(1);
            for path in state.names.synced(ino) {
                state.undo.forget_path(&path);
            }
        } else {
            state.counters.fsyncs = state.counters.fsyncs.saturating_add(1);
            state.undo.sync(ino);
        }
        Ok(())
    }

    fn read_dir(&self, ino: u64) -> Result<Vec<(u64, FileType, std::ffi::OsString)>, Failed> {
        let state = self.disk.lock();
        let path = Self::path_of(&state, ino)?;
        let full = self.full(&path);
        let mut entries = vec![
            (ino, FileType::Directory, ".".into()),
            (ino, FileType::Directory, "..".into()),
        ];
        let mut children = Vec::new();
        for entry in fs::read_dir(&full).map_err(|error| errno(&error))? {
            let entry = entry.map_err(|error| errno(&error))?;
            let name = entry.file_name();
            if ino == ROOT && name == GRAVEYARD {
                continue;
            }
            let Ok(meta) = entry.metadata() else {
                // Removed between the listing and now.
                continue;
            };
            children.push((state.inodes.number(meta.ino()), kind(&meta), name));
        }
        // Sorted, so that an offset means the same entry on every call.
        children.sort_by(|a, b| a.2.cmp(&b.2));
        entries.extend(children);
        Ok(entries)
    }
}

impl Filesystem for PowerLossFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let mut state = self.disk.lock();
        match Self::child(&state, parent, name).and_then(|path| self.entry(&mut state, &path)) {
            Ok(attr) => reply.entry(&TTL, &attr, 0),
            Err(error) => reply.error(error),
        }
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, nlookup: u64) {
        self.disk.lock().inodes.forget(ino, nlookup);
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyAttr) {
        let path = Self::path_of(&self.disk.lock(), ino);
        match path
            .and_then(|path| fs::symlink_metadata(self.full(&path)).map_err(|error| errno(&error)))
            .or_else(|error| self.open_metadata(ino).ok_or(error))
        {
            Ok(meta) => reply.attr(&TTL, &attr(ino, &meta)),
            Err(error) => reply.error(error),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        match self.setattr_inner(ino, mode, uid, gid, size, atime, mtime, fh) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(error) => reply.error(error),
        }
    }

    fn mkdir(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        // Directory creation is durable at once; see the crate docs for why.
        let mut state = self.disk.lock();
        let created = Self::child(&state, parent, name).and_then(|path| {
            DirBuilder::new()
                .mode(mode & !umask & 0o7777)
                .create(self.full(&path))
                .map_err(|error| errno(&error))?;
            self.entry(&mut state, &path)
        });
        match created {
            Ok(attr) => reply.entry(&TTL, &attr, 0),
            Err(error) => reply.error(error),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        match self.unlink_inner(parent, name) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        // Directory removal is durable at once, like creation.
        let path = Self::child(&self.disk.lock(), parent, name);
        match path.and_then(|path| fs::remove_dir(self.full(&path)).map_err(|error| errno(&error)))
        {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        match self.rename_inner(parent, name, newparent, newname, flags) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        match self.open_inner(ino, flags) {
            Ok(handle) => reply.opened(handle, fuser::consts::FOPEN_DIRECT_IO),
            Err(error) => reply.error(error),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let Some(file) = self.handles.get(&fh) else {
            return reply.error(libc::EBADF);
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(libc::EINVAL);
        };
        let mut buffer = vec![0; size as usize];
        let mut filled = 0;
        while filled < buffer.len() {
            let at = offset.saturating_add(filled as u64);
            match file.read_at(&mut buffer[filled..], at) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return reply.error(errno(&error)),
            }
        }
        reply.data(&buffer[..filled]);
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let Ok(written) = u32::try_from(data.len()) else {
            return reply.error(libc::EINVAL);
        };
        match self.write_inner(ino, fh, offset, data) {
            Ok(()) => reply.written(written),
            Err(error) => reply.error(error),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _owner: u64, reply: ReplyEmpty) {
        // Closing a file makes nothing durable.
        reply.ok();
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.handles.remove(&fh);
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _data: bool, reply: ReplyEmpty) {
        let synced = self.fsync_inner(ino, false);
        self.answer_sync(synced, reply);
    }

    fn opendir(&mut self, _req: &Request<'_>, _ino: u64, _flags: i32, reply: ReplyOpen) {
        reply.opened(0, 0);
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.read_dir(ino) {
            Ok(entries) => entries,
            Err(error) => return reply.error(error),
        };
        let skip = usize::try_from(offset).unwrap_or(0);
        for (index, (ino, kind, name)) in entries.into_iter().enumerate().skip(skip) {
            let next = i64::try_from(index).unwrap_or(i64::MAX).saturating_add(1);
            if reply.add(ino, next, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _data: bool, reply: ReplyEmpty) {
        let synced = self.fsync_inner(ino, true);
        self.answer_sync(synced, reply);
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        // Free space is not modelled: a fixed, ample answer (1 TiB in 4 KiB blocks).
        const BLOCKS: u64 = 1 << 28;
        reply.statfs(BLOCKS, BLOCKS, BLOCKS, 1 << 20, 1 << 20, 4096, 255, 4096);
    }

    fn access(&mut self, _req: &Request<'_>, ino: u64, _mask: i32, reply: ReplyEmpty) {
        let path = Self::path_of(&self.disk.lock(), ino);
        match path
            .and_then(|path| fs::symlink_metadata(self.full(&path)).map_err(|error| errno(&error)))
        {
            Ok(_) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.create_inner(parent, name, mode, umask, flags) {
            Ok((attr, handle)) => {
                reply.created(&TTL, &attr, 0, handle, fuser::consts::FOPEN_DIRECT_IO);
            }
            Err(error) => reply.error(error),
        }
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.fallocate_inner(ino, fh, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }
}
