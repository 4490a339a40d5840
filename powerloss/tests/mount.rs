//! The real filesystem, mounted through /dev/fuse by the real binary: what survives a power loss.
//!
//! These tests fail, never skip, where FUSE is missing: a power-loss test that passes without a
//! filesystem to lose power on has tested nothing.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long the binary may take to mount (a few milliseconds normally; a loaded machine).
const MOUNT_TIMEOUT: Duration = Duration::from_secs(10);

/// The read timeout of a control command.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// One mounted filesystem, unmounted (lazily) and stopped on drop.
struct Mounted {
    dir: tempfile::TempDir,
    daemon: Child,
}

impl Mounted {
    fn start() -> Mounted {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: these tests need FUSE (Debian: apt-get install fuse3; in a \
             container, pass the device through)"
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let daemon = Command::new(env!("CARGO_BIN_EXE_tickd-powerloss"))
            .arg("mount")
            .arg("--backing")
            .arg(dir.path().join("backing"))
            .arg("--mountpoint")
            .arg(dir.path().join("mnt"))
            .arg("--control")
            .arg(dir.path().join("control.sock"))
            .stdin(Stdio::null())
            .spawn()
            .expect("start tickd-powerloss");
        let mut mounted = Mounted { dir, daemon };
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while !(mounted.socket().exists() && is_mounted(&mounted.mnt())) {
            if let Ok(Some(status)) = mounted.daemon.try_wait() {
                panic!("tickd-powerloss exited while mounting: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "tickd-powerloss did not mount within {MOUNT_TIMEOUT:?}"
            );
            thread::sleep(Duration::from_millis(20));
        }
        mounted
    }

    fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("control.sock")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.mnt().join(name)
    }

    fn command(&self, line: &str) -> String {
        let mut stream = UnixStream::connect(self.socket()).expect("connect to the control socket");
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .expect("a read timeout");
        writeln!(stream, "{line}").expect("send a command");
        let mut reply = String::new();
        BufReader::new(stream)
            .read_line(&mut reply)
            .expect("read the reply");
        reply.trim().to_owned()
    }

    fn lose_power(&self) -> String {
        self.lose_power_tallying("")
    }

    /// A power loss that also counts the bytes dropped from files matching `glob`.
    fn lose_power_tallying(&self, glob: &str) -> String {
        let reply = self.command(&format!("lose-power {glob}"));
        assert!(reply.starts_with("ok "), "lose-power answered {reply:?}");
        reply
    }

    fn sync_dir(&self, name: &str) {
        File::open(self.path(name))
            .and_then(|dir| dir.sync_all())
            .expect("fsync the directory");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Lazy, so that it succeeds even while a test's file is still open.
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(self.mnt())
            .status();
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

fn is_mounted(path: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let wanted = path.to_string_lossy();
    mounts
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(wanted.as_ref()))
}

fn stat(reply: &str, key: &str) -> u64 {
    reply
        .split_whitespace()
        .find_map(|pair| pair.strip_prefix(&format!("{key}=")))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {reply:?}"))
}

#[test]
fn a_power_loss_keeps_exactly_what_was_fsynced() {
    let fs = Mounted::start();
    let path = fs.path("log");
    let mut file = File::create(&path).expect("create");
    file.write_all(b"synced line\n").expect("write");
    file.sync_all().expect("fsync");
    fs.sync_dir("");

    file.write_all(b"unsynced line\n").expect("write");
    file.write_all_at(b"S", 0).expect("overwrite");
    assert_eq!(
        fs::read(&path).expect("read"),
        b"Synced line\nunsynced line\n",
        "readers see unsynced writes at once"
    );
    let stats = fs.command("stats");
    assert_eq!(stat(&stats, "unsynced_bytes"), 15, "{stats}");
    drop(file);

    let loss = fs.lose_power();
    assert_eq!(stat(&loss, "files"), 1, "{loss}");
    assert_eq!(stat(&loss, "bytes"), 15, "{loss}");
    assert_eq!(fs::read(&path).expect("read"), b"synced line\n");
    assert_eq!(stat(&fs.command("stats"), "written_back"), 0);
}

#[test]
fn a_power_loss_tallies_the_bytes_of_the_files_asked_about() {
    let fs = Mounted::start();
    fs::create_dir(fs.path("raft")).expect("mkdir");
    fs::write(fs.path("raft/000012.log"), b"0123456789").expect("write");
    fs::write(fs.path("raft/LOG"), b"0123").expect("write");
    fs::write(fs.path("other.log"), b"01").expect("write");
    let loss = fs.lose_power_tallying("raft/*.log");
    assert_eq!(stat(&loss, "bytes"), 16, "{loss}");
    assert_eq!(stat(&loss, "matching"), 10, "only raft/000012.log: {loss}");
    assert_eq!(stat(&fs.lose_power(), "matching"), 0, "nothing asked about");
}

#[test]
fn a_truncation_not_fsynced_is_undone() {
    let fs = Mounted::start();
    let path = fs.path("file");
    fs::write(&path, b"0123456789").expect("write");
    File::open(&path)
        .and_then(|file| file.sync_all())
        .expect("fsync");
    fs.sync_dir("");
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .expect("open with O_TRUNC");
    assert_eq!(fs::read(&path).expect("read"), b"");
    fs.lose_power();
    assert_eq!(fs::read(&path).expect("read"), b"0123456789");
}

#[test]
fn names_are_lost_until_their_directory_is_fsynced() {
    let fs = Mounted::start();
    fs::create_dir(fs.path("snapshot")).expect("mkdir");
    // The current snapshot, durable.
    fs::write(fs.path("snapshot/current"), b"old").expect("write");
    File::open(fs.path("snapshot/current"))
        .and_then(|file| file.sync_all())
        .expect("fsync");
    fs.sync_dir("snapshot");

    // A new one: written and fsynced, renamed over the old one, directory not fsynced.
    fs::write(fs.path("snapshot/new.tmp"), b"new").expect("write");
    File::open(fs.path("snapshot/new.tmp"))
        .and_then(|file| file.sync_all())
        .expect("fsync");
    fs::rename(fs.path("snapshot/new.tmp"), fs.path("snapshot/current")).expect("rename");
    // A file created and fsynced whose directory never is.
    fs::write(fs.path("snapshot/orphan"), b"x").expect("write");
    File::open(fs.path("snapshot/orphan"))
        .and_then(|file| file.sync_all())
        .expect("fsync");
    assert_eq!(fs::read(fs.path("snapshot/current")).expect("read"), b"new");

    let loss = fs.lose_power();
    assert_eq!(stat(&loss, "entries"), 3, "{loss}");
    assert_eq!(fs::read(fs.path("snapshot/current")).expect("read"), b"old");
    assert!(
        !fs.path("snapshot/new.tmp").exists(),
        "its creation was never made durable either"
    );
    assert!(!fs.path("snapshot/orphan").exists());

    // The same steps with the directory fsynced survive.
    fs::write(fs.path("snapshot/new.tmp"), b"new").expect("write");
    File::open(fs.path("snapshot/new.tmp"))
        .and_then(|file| file.sync_all())
        .expect("fsync");
    fs::rename(fs.path("snapshot/new.tmp"), fs.path("snapshot/current")).expect("rename");
    fs.sync_dir("snapshot");
    fs.lose_power();
    assert_eq!(fs::read(fs.path("snapshot/current")).expect("read"), b"new");
    assert!(!fs.path("snapshot/new.tmp").exists());

    // A removal not fsynced comes back.
    fs::remove_file(fs.path("snapshot/current")).expect("unlink");
    fs.lose_power();
    assert_eq!(fs::read(fs.path("snapshot/current")).expect("read"), b"new");
    let listed: Vec<_> = fs::read_dir(fs.mnt())
        .expect("list the root")
        .map(|entry| entry.expect("an entry").file_name())
        .collect();
    assert_eq!(listed, ["snapshot"], "the graveyard stays hidden");
}

#[test]
fn a_file_replaced_while_open_still_answers_through_its_handle() {
    // A node sends its snapshot to a follower from an open handle while a newer snapshot is
    // renamed over it and the directory fsynced. POSIX keeps the old file, data and
    // attributes, until its last handle closes; seeking to its end asks for its size.
    let fs = Mounted::start();
    fs::write(fs.path("current"), b"old snapshot").expect("write");
    let mut old = File::open(fs.path("current")).expect("open the current file");
    fs::write(fs.path("new.tmp"), b"new").expect("write");
    fs::rename(fs.path("new.tmp"), fs.path("current")).expect("rename over it");
    fs.sync_dir("");

    let meta = old.metadata().expect("fstat of the replaced file");
    assert_eq!(meta.len(), 12);
    assert_eq!(old.seek(SeekFrom::End(0)).expect("seek to its end"), 12);
    let mut data = Vec::new();
    old.seek(SeekFrom::Start(0)).expect("seek to its start");
    old.read_to_end(&mut data).expect("read the replaced file");
    assert_eq!(data, b"old snapshot");
    assert_eq!(fs::read(fs.path("current")).expect("read"), b"new");
}

#[test]
fn a_frozen_fsync_never_completes_and_its_write_is_lost() {
    let fs = Mounted::start();
    let path = fs.path("wal.log");
    let mut file = File::create(&path).expect("create");
    file.write_all(b"entry 1\n").expect("write");
    file.sync_data().expect("fdatasync");
    fs.sync_dir("");

    assert_eq!(fs.command("freeze-on fsync *.log"), "ok");
    let writer = thread::spawn(move || {
        file.write_all(b"entry 2\n").expect("write");
        file.sync_data()
    });
    assert_eq!(fs.command("wait-frozen 10000"), "frozen fsync wal.log");
    assert!(!writer.is_finished(), "the fsync is held");
    fs.lose_power();
    let synced = writer.join().expect("the writer thread");
    assert!(synced.is_err(), "a frozen fsync fails once power is lost");
    assert_eq!(fs::read(&path).expect("read"), b"entry 1\n");
}

#[test]
fn a_thawed_operation_goes_on() {
    let fs = Mounted::start();
    let path = fs.path("file");
    assert_eq!(fs.command("freeze-on write file"), "ok");
    let writer = thread::spawn(move || fs::write(path, b"x"));
    assert_eq!(fs.command("wait-frozen 10000"), "frozen write file");
    assert_eq!(fs.command("thaw"), "ok");
    writer
        .join()
        .expect("the writer thread")
        .expect("the write goes on");
    assert_eq!(
        fs.command("wait-frozen 10"),
        "err nothing frozen within 10 ms"
    );
    assert_eq!(fs::read(fs.path("file")).expect("read"), b"x");
}
