//! [`PowerCluster`]: a [`TestCluster`] whose nodes keep their data on power-loss filesystems,
//! one per node, so that one node, a minority or all of them can lose power.
//!
//! Each node's data directory is the mount point of its own `tickd-powerloss` filesystem
//! (`powerloss/`): writes reach a backing directory at once but stay undoable until fsynced,
//! and "lose power" rolls every file and directory back to its last fsync. SIGKILL alone never
//! loses a written byte (the page cache keeps it); this does.
//!
//! [`PowerCluster::lose_power`] first SIGKILLs the node, then drops its unsynced writes; the
//! node can then be restarted on the same filesystem. A freeze point
//! ([`PowerCluster::freeze`]) stops the next matching operation on a node's filesystem —
//! "between a write and its fsync", "in the middle of a snapshot" — until that node loses power.
//!
//! Dropping the cluster stops the filesystems first (which fails any frozen operation, so that
//! no node stays blocked in the kernel), then the nodes, then unmounts.
//!
//! The binary is `TICKD_POWERLOSS_BIN` if set, else `tickd-powerloss` beside `tickd` (see
//! [`powerloss_binary`]); `/dev/fuse` must exist. Neither is ever a reason to skip: a missing one
//! fails the test with how to provide it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::ops::Deref;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::cluster::{NodeId, TestCluster, TestClusterBuilder};

/// How long a filesystem may take to mount (milliseconds normally; a loaded machine).
const MOUNT_TIMEOUT: Duration = Duration::from_secs(15);

/// The read timeout of a control command other than `wait-frozen` (a rollback of a few
/// megabytes takes milliseconds).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the other threads of a killed node may take to exit while one of them is held by
/// a freeze point.
const KILL_SETTLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Finds the `tickd-powerloss` binary: `TICKD_POWERLOSS_BIN` if set, else beside `tickd`.
///
/// # Panics
///
/// When no file exists at that path.
pub fn powerloss_binary() -> PathBuf {
    let path = match std::env::var_os("TICKD_POWERLOSS_BIN") {
        Some(path) => PathBuf::from(path),
        None => crate::cluster::tickd_binary().with_file_name("tickd-powerloss"),
    };
    assert!(
        path.is_file(),
        "tickd-powerloss binary not found at {}; build it with `cargo build --bin tickd \
         --bin tickd-powerloss` (`cargo test --workspace` builds it too) or set \
         TICKD_POWERLOSS_BIN",
        path.display()
    );
    path
}

/// What one power loss dropped, as the filesystem reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loss {
    /// Files rolled back.
    pub files: u64,
    /// Unsynced bytes dropped.
    pub bytes: u64,
    /// Directory entries taken back.
    pub entries: u64,
    /// Of `bytes`, those dropped from the Raft log's write-ahead files (`raft/*.log`): the
    /// part of a power loss that can cost acknowledged writes, beside RocksDB's info log and
    /// other files no one syncs.
    pub log_bytes: u64,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "dropped {} unsynced bytes ({} of the Raft log) in {} files, {} directory entries",
            self.bytes, self.log_bytes, self.files, self.entries
        )
    }
}

/// The Raft log's write-ahead files, relative to a node's data directory (a glob for
/// [`PowerCluster::freeze`]).
pub const RAFT_LOG_FILES: &str = "raft/*.log";

/// One node's power-loss filesystem: its daemon, mount point and control socket.
#[derive(Debug)]
struct Disk {
    node: NodeId,
    mountpoint: PathBuf,
    control: PathBuf,
    log: PathBuf,
    daemon: Option<Child>,
}

impl Disk {
    fn mount(root: &Path, node: NodeId) -> Disk {
        let mountpoint = root.join("mnt").join(format!("node{node}"));
        let control = root.join(format!("node{node}-fs.sock"));
        let log = root.join(format!("node{node}-fs.log"));
        let log_file = std::fs::File::create(&log).expect("create the filesystem's log");
        let stderr = log_file
            .try_clone()
            .expect("duplicate the filesystem's log handle");
        let daemon = Command::new(powerloss_binary())
            .arg("mount")
            .arg("--backing")
            .arg(root.join("backing").join(format!("node{node}")))
            .arg("--mountpoint")
            .arg(&mountpoint)
            .arg("--control")
            .arg(&control)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|error| panic!("start tickd-powerloss for node {node}: {error}"));
        let mut disk = Disk {
            node,
            mountpoint,
            control,
            log,
            daemon: Some(daemon),
        };
        disk.wait_mounted();
        disk
    }

    fn wait_mounted(&mut self) {
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while !(self.control.exists() && is_mounted(&self.mountpoint)) {
            if let Some(Ok(Some(status))) = self.daemon.as_mut().map(Child::try_wait) {
                panic!(
                    "tickd-powerloss for node {} exited while mounting ({status}): {}",
                    self.node,
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "node {}'s filesystem not mounted at {} within {MOUNT_TIMEOUT:?}",
                self.node,
                self.mountpoint.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends one command and returns the reply line, waiting up to `timeout` for it.
    fn command(&self, line: &str, timeout: Duration) -> String {
        let node = self.node;
        let reply = UnixStream::connect(&self.control).and_then(|mut stream| {
            stream.set_read_timeout(Some(timeout))?;
            writeln!(stream, "{line}")?;
            let mut reply = String::new();
            BufReader::new(stream).read_line(&mut reply)?;
            Ok(reply)
        });
        match reply {
            Ok(reply) => reply.trim().to_owned(),
            Err(error) => panic!("node {node}'s filesystem: `{line}`: {error}"),
        }
    }

    fn expect_ok(&self, line: &str) -> String {
        let reply = self.command(line, COMMAND_TIMEOUT);
        assert!(
            reply == "ok" || reply.starts_with("ok "),
            "node {}'s filesystem answered `{line}` with {reply:?}",
            self.node
        );
        reply
    }

    /// Kills the daemon: the kernel then fails every pending request on the mount.
    fn stop(&mut self) {
        if let Some(mut daemon) = self.daemon.take() {
            let _ = daemon.kill();
            let _ = daemon.wait();
        }
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        self.stop();
        // Lazy: detaches even while something still holds a file open.
        let unmounted = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&self.mountpoint)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !unmounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn is_mounted(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let wanted = path.to_string_lossy();
    mounts
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(wanted.as_ref()))
}

fn field(reply: &str, key: &str) -> u64 {
    reply
        .split_whitespace()
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in the filesystem's reply {reply:?}"))
}

/// A test cluster on power-loss filesystems; see the module docs. Derefs to the [`TestCluster`].
#[derive(Debug)]
pub struct PowerCluster {
    /// `None` only while dropping.
    cluster: Option<TestCluster>,
    disks: BTreeMap<NodeId, Disk>,
    /// Holds the backing directories, mount points, sockets and filesystem logs; declared last
    /// so that it is removed after the unmounts.
    _root: TempDir,
}

impl PowerCluster {
    /// Mounts one filesystem per node, then starts the cluster described by `builder` (its node
    /// count decides how many) with each node's data directory on its filesystem.
    ///
    /// # Panics
    ///
    /// When `/dev/fuse` or the binary is missing, a mount fails, or the cluster does not start.
    pub async fn start(builder: TestClusterBuilder, nodes: usize) -> PowerCluster {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: power-loss tests need FUSE (scripts/test installs fuse3; in a \
             container the device must be passed through)"
        );
        let root = tempfile::Builder::new()
            .prefix("tickd-power-")
            .tempdir()
            .expect("create the power-loss directory");
        let disks: BTreeMap<NodeId, Disk> = (1..=nodes as NodeId)
            .map(|node| (node, Disk::mount(root.path(), node)))
            .collect();
        let mut power = PowerCluster {
            cluster: None,
            disks,
            _root: root,
        };
        let data_root = power._root.path().join("mnt");
        power.cluster = Some(builder.nodes(nodes).data_root(data_root).start().await);
        power
    }

    fn disk(&self, node: NodeId) -> &Disk {
        self.disks
            .get(&node)
            .unwrap_or_else(|| panic!("no filesystem for node {node}"))
    }

    /// Power loss on `node`: SIGKILL, then every write not fsynced on its filesystem is dropped.
    /// The node is down afterwards; [`TestCluster::restart`] starts it on the same filesystem.
    ///
    /// When an operation of the node is held by a freeze point, the node cannot exit until it is
    /// released, so the kill is sent first, the other threads are given time to die, and only
    /// then is the power lost (which fails the held operation) and the process reaped.
    ///
    /// # Panics
    ///
    /// When the node is not alive or the filesystem refuses.
    pub fn lose_power(&self, node: NodeId) -> Loss {
        self.lose_power_of(&[node])
    }

    /// Power loss on several nodes at once: all are killed before any loses its writes.
    ///
    /// # Panics
    ///
    /// As [`lose_power`](Self::lose_power).
    pub fn lose_power_of(&self, nodes: &[NodeId]) -> Loss {
        let pids: Vec<(NodeId, u32)> = nodes
            .iter()
            .map(|&node| match self.pid(node) {
                Some(pid) => (node, pid),
                None => panic!("cannot cut node {node}'s power: it is not running"),
            })
            .collect();
        std::thread::scope(|scope| {
            // Each kill waits for its process to exit, which a node held by a freeze point does
            // only once its power is lost below: the kills run beside.
            let killers: Vec<_> = pids
                .iter()
                .map(|&(node, _)| scope.spawn(move || self.kill(node)))
                .collect();
            for &(_, pid) in &pids {
                wait_for_one_thread(pid);
            }
            let mut total = Loss::default();
            for &(node, _) in &pids {
                let reply = self
                    .disk(node)
                    .expect_ok(&format!("lose-power {RAFT_LOG_FILES}"));
                total.files += field(&reply, "files");
                total.bytes += field(&reply, "bytes");
                total.entries += field(&reply, "entries");
                total.log_bytes += field(&reply, "matching");
            }
            for killer in killers {
                if let Err(panic) = killer.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            total
        })
    }

    /// Arms a freeze point on `node`'s filesystem: the next `op` (`write`, `fsync`, `fsyncdir`,
    /// `rename`, …) on a path matching `glob` (relative to the data directory, `*` spans `/`)
    /// blocks until the node loses power.
    pub fn freeze(&self, node: NodeId, op: &str, glob: &str) {
        self.disk(node).expect_ok(&format!("freeze-on {op} {glob}"));
    }

    /// Makes every later fsync on `node`'s disk take `delay` longer, as a busy network volume's
    /// do.
    pub fn slow_fsyncs(&self, node: NodeId, delay: Duration) {
        self.disk(node)
            .expect_ok(&format!("fsync-delay {}", delay.as_millis()));
    }

    /// Disarms `node`'s freeze point if it has not been hit.
    pub fn unfreeze(&self, node: NodeId) {
        self.disk(node).expect_ok("freeze-off");
    }

    /// Lets the operation held on `node` go on.
    pub fn thaw(&self, node: NodeId) {
        self.disk(node).expect_ok("thaw");
    }

    /// Waits up to `timeout` for `node`'s freeze point to be hit; returns the held operation as
    /// `<op> <path>`, or `None` if nothing was frozen in time.
    pub fn wait_frozen(&self, node: NodeId, timeout: Duration) -> Option<String> {
        let reply = self.disk(node).command(
            &format!("wait-frozen {}", timeout.as_millis()),
            timeout + COMMAND_TIMEOUT,
        );
        reply.strip_prefix("frozen ").map(str::to_owned)
    }

    /// `node`'s filesystem counters, as `key=value` words (see `tickd-powerloss`'s `stats`).
    pub fn fs_stats(&self, node: NodeId) -> String {
        self.disk(node).expect_ok("stats")
    }

    /// One counter of `node`'s filesystem, e.g. `written_back` or `fsyncs`.
    pub fn fs_stat(&self, node: NodeId, key: &str) -> u64 {
        field(&self.fs_stats(node), key)
    }
}

/// Waits (bounded) until a process being killed has at most one thread left: the one a freeze
/// point holds in the kernel, or none. Returns at once when the process is gone.
fn wait_for_one_thread(pid: u32) {
    let deadline = Instant::now() + KILL_SETTLE_TIMEOUT;
    while Instant::now() < deadline {
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count);
        if threads <= 1 {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Deref for PowerCluster {
    type Target = TestCluster;

    fn deref(&self) -> &TestCluster {
        match &self.cluster {
            Some(cluster) => cluster,
            None => unreachable!("the cluster exists from start until drop"),
        }
    }
}

impl Drop for PowerCluster {
    fn drop(&mut self) {
        // Filesystems first: a node held by a freeze point is released (its request fails), so
        // that killing it below cannot block.
        for disk in self.disks.values_mut() {
            disk.stop();
        }
        // The nodes next (printing their logs if the test failed), then the unmounts.
        self.cluster.take();
        self.disks.clear();
    }
}
