//! The .deb installed into a fresh Debian root starts a node from its own cluster file
//! (issue 43).
//!
//! What it proves: on a bookworm `minbase` system (mmdebstrap's smallest: the Essential
//! packages and apt, no `ca-certificates`) plus `adduser`, the one package of the .deb's
//! Depends that minbase lacks,
//! - `apt-get install --no-install-recommends /tmp/tickd.deb` (the debug build, packaged as
//!   the other test packages it) installs the package and nothing else, with no network (it
//!   runs in an empty network namespace), and leaves its Recommends, ca-certificates, out:
//!   the system has no root certificates at all;
//! - the maintainer scripts ran for real: the `tickd` system user and group exist in the
//!   root's /etc/passwd and /etc/group, /etc/tickd/cluster.toml carries a generated secret
//!   instead of the placeholder (nothing else in it changed) and belongs to root:tickd, mode
//!   0640, through a dpkg statoverride;
//! - the node starts from that installed cluster file, unchanged, with the unit's command
//!   line and environment (read from the installed unit and /etc/default/tickd), as the
//!   unit's user and group, under its `UMask=`, with no new privileges and no capabilities,
//!   in the state directory systemd would make (`StateDirectory=`, which this test creates
//!   as systemd does, owner tickd, mode 0700): it answers `GET /mgmt/health` with 200, writes
//!   its generated access token there (owned by tickd, mode 0600), and takes a registration
//!   with it; and it exits cleanly on SIGTERM.
//!
//! What it does not prove: systemd's own part. The unit is not run by systemd (there is none
//! in a chroot), so its sandboxing (`ProtectSystem=`, `PrivateDevices=`, the system-call
//! filter, …) and `Restart=` are not exercised here; the test in package.rs checks that the
//! unit sets them.
//!
//! How: the root is built by `mmdebstrap --variant=minbase --include=adduser bookworm`, from
//! mmdebstrap's default mirror (deb.debian.org, with bookworm-updates and
//! bookworm-security), once, and kept as a tarball in
//! `~/.cache/tickd/debian-roots/bookworm-minbase+adduser-<arch>.tar.gz` (about 60 MB; a
//! download of about 40 MB, under a minute or two to build). Every run extracts a fresh copy
//! into a temporary directory; delete the tarball to build it again (for newer packages of
//! bookworm, say). The node runs in a network namespace of its own, with only its loopback,
//! so it listens on the shipped 127.0.0.1:9643 without meeting anything else on this
//! machine's loopback; the test reaches it through a relay on a free port of this machine's
//! loopback, each connection forwarded by a `bash` `/dev/tcp` inside that namespace
//! (`nsenter`). `/proc` is mounted into the root only inside private mount namespaces of the
//! install and of the node (`unshare --mount`), so nothing stays mounted when they end, test
//! failure or not; the node is killed when the test ends.
//!
//! It needs root (chroot, namespaces, mounts), mmdebstrap (`scripts/test` installs it), the
//! network to Debian's mirror the first time, and util-linux's unshare and nsenter,
//! coreutils' chroot, tar, bash and iproute2's ip. Without them it fails, it never skips.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::common::{
    BINARY, CLUSTER_FILE, Node, UNIT_DIRS, UNIT_NAME, UnitService, client, generated_secret,
    generated_token, in_root, kill_group, package, read, register_a_clock, require, require_tools,
    run, run_bounded, wait_until_up,
};

/// The Debian release the root is made of: the one the project's machines run.
const SUITE: &str = "bookworm";
/// mmdebstrap's smallest variant: the Essential packages and apt.
const VARIANT: &str = "minbase";
/// What the root gets besides the variant: the package's Depends that minbase lacks, so that
/// installing the .deb downloads nothing.
const INCLUDE: &[&str] = &["adduser"];

/// How long building the root may take: apt downloads about 40 MB.
const ROOT_BUILD_TIMEOUT: Duration = Duration::from_secs(20 * 60);
/// How long `apt-get install` of the .deb may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// How long the node's process may take to enter its network namespace.
const NAMESPACE_TIMEOUT: Duration = Duration::from_secs(10);

/// The search path of the commands this test runs, on this machine and in the root.
const SYSTEM_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// Where the .deb is copied in the root, to be installed from.
const DEB_IN_ROOT: &str = "/tmp/tickd.deb";

/// What the postinst says when it generated the secret.
const SECRET_MESSAGE: &str = "tickd: generated a random cluster secret in /etc/tickd/cluster.toml";

/// Installs the .deb in the root given as `$1`, as a user of a slim system does: apt resolves
/// its Depends from the installed packages and installs no Recommends. /proc is mounted for
/// apt and the maintainer scripts, in the private mount namespace this runs in.
const INSTALL_SCRIPT: &str = r#"set -e
mount -t proc proc "$1/proc"
exec chroot "$1" apt-get install --yes --no-install-recommends "$2""#;

/// Starts the unit's command line in the root `$1` as user `$2` and group `$3` with umask
/// `$4`: the rest of the arguments are the unit's environment (`NAME=value` words) and its
/// command line. It runs in a network and a mount namespace of its own, brings the
/// namespace's loopback up, mounts /proc into the root, and execs, so that the node's pid is
/// this process's.
const NODE_SCRIPT: &str = r#"set -e
root=$1 user=$2 group=$3 mask=$4
shift 4
ip link set lo up
mount -t proc proc "$root/proc"
umask "$mask"
exec chroot "$root" /usr/bin/setpriv --reuid="$user" --regid="$group" --init-groups \
    --no-new-privs --inh-caps=-all --bounding-set=-all -- /usr/bin/env -i "$@""#;

/// Relays standard input to `$1:$2` and the answer to standard output, from the network
/// namespace it runs in.
const FORWARD_SCRIPT: &str = r#"exec 3<>"/dev/tcp/$1/$2" || exit 1
cat <&3 &
cat >&3
wait"#;

#[tokio::test]
async fn the_package_installed_into_a_fresh_debian_root_runs_a_node_from_its_cluster_file() {
    require_tools();
    require_root_tools();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let scratch = scratch.path();
    let tarball = debian_root().await;
    let deb = package().await;

    // A fresh root: no tickd user, no root certificates.
    let root = scratch.join("root");
    std::fs::create_dir(&root).expect("create the root's directory");
    run(Command::new("tar")
        .args(["--extract", "--numeric-owner", "--file"])
        .arg(&tarball)
        .arg("--directory")
        .arg(&root));
    assert!(
        account(&root, "/etc/passwd", "tickd").is_none(),
        "the fresh root from {} already has a tickd user",
        tarball.display()
    );
    assert_no_root_certificates(&root);

    // Installed the way a user does; the maintainer scripts ran.
    let shipped = shipped_file(deb, CLUSTER_FILE);
    let apt = install(&root, deb).await;
    let installed = check_installed(&root, &shipped, &apt);
    assert_no_root_certificates(&root);

    // The unit's command line and environment, from the installed files.
    let unit_path = UNIT_DIRS
        .iter()
        .map(|dir| format!("{dir}/{UNIT_NAME}"))
        .find(|path| in_root(&root, path).is_file())
        .unwrap_or_else(|| panic!("the installed package has no {UNIT_NAME} in {UNIT_DIRS:?}"));
    let service = UnitService::parse(&read(&in_root(&root, &unit_path)));
    let environment = service.environment(&root);
    let command_line = service.command_line(&environment);
    assert_eq!(
        command_line.first().map(String::as_str),
        Some(BINARY),
        "ExecStart= should run {BINARY}: {command_line:?}"
    );
    assert!(
        command_line
            .windows(2)
            .any(|pair| pair == ["--config", CLUSTER_FILE]),
        "ExecStart= should use {CLUSTER_FILE}: {command_line:?}"
    );
    let setting = |key: &str| {
        service
            .last(key)
            .unwrap_or_else(|| panic!("the installed unit sets no {key}="))
    };
    let (user, group) = (setting("User"), setting("Group"));
    let state_dir = format!("/var/lib/{}", setting("StateDirectory"));
    assert_eq!(
        setting_of(&installed, "data_dir"),
        state_dir,
        "the installed cluster file should keep the node's data in the unit's StateDirectory="
    );
    run(Command::new("chroot")
        .arg(&root)
        .args(["install", "-d", "-o", user, "-g", group, "-m"])
        .arg(setting("StateDirectoryMode"))
        .arg(&state_dir)
        .env("PATH", SYSTEM_PATH));

    // The node, in a network namespace of its own, on the installed file's own address.
    let api: SocketAddr = setting_of(&installed, "api")
        .parse()
        .expect("the installed cluster file's `api` is an ip:port");
    assert!(
        api.ip().is_loopback(),
        "the shipped node listens on loopback: {api}"
    );
    let umask = service.last("UMask").unwrap_or("0022");
    let argv = in_namespace_as(&root, [user, group, umask], &environment, command_line);
    let log_path = scratch.join("tickd.log");
    let path = BTreeMap::from([("PATH".to_owned(), SYSTEM_PATH.to_owned())]);
    let mut node = Node::spawn(&argv, &path, &log_path);
    let namespace = Namespace::of(&mut node, &log_path).await;
    let relay = Relay::start(namespace.path(), api).await;
    let base = format!("http://{}", relay.address());
    let client = client();
    wait_until_up(&client, &base, &mut node, &argv, &log_path).await;

    // Its token, generated into the state directory as the unit's user.
    let token_path = format!("{state_dir}/access-token");
    let token_file = in_root(&root, &token_path);
    let token = generated_token(&token_file, &token_path, &log_path);
    let (uid, _) = account(&root, "/etc/passwd", user).expect("the unit's user");
    let metadata = std::fs::metadata(&token_file).expect("the token file's metadata");
    assert_eq!(
        (metadata.uid(), metadata.mode() & 0o777),
        (uid, 0o600),
        "{token_path} should belong to {user} (uid {uid}) with mode 0600"
    );
    register_a_clock(&client, &base, &token).await;

    assert_eq!(
        read(&in_root(&root, CLUSTER_FILE)),
        installed,
        "the node ran from the installed cluster file, which nothing may change"
    );
    let status = node.terminate().await;
    assert!(
        status.success(),
        "tickd should exit cleanly on SIGTERM, not with {status}; log:\n{}",
        read(&log_path)
    );
}

/// `unshare`'s options for a network and a mount namespace of the command's own, with mounts
/// that do not propagate back: what the install and the node both run in.
const PRIVATE_NAMESPACES: [&str; 5] = ["--net", "--mount", "--propagation", "private", "--"];

/// The command that runs `command_line` with `environment` only, chrooted into `root`, as
/// `user` and `group` under `umask`, in a network and a mount namespace of its own
/// ([`NODE_SCRIPT`]).
fn in_namespace_as(
    root: &Path,
    [user, group, umask]: [&str; 3],
    environment: &BTreeMap<String, String>,
    command_line: Vec<String>,
) -> Vec<String> {
    let mut argv: Vec<String> = std::iter::once("unshare")
        .chain(PRIVATE_NAMESPACES)
        .chain(["sh", "-c", NODE_SCRIPT, "sh"])
        .map(String::from)
        .collect();
    argv.push(root.display().to_string());
    argv.extend([user, group, umask].map(String::from));
    argv.extend(
        environment
            .iter()
            .map(|(name, value)| format!("{name}={value}")),
    );
    argv.extend(command_line);
    argv
}

/// Fails, naming what to do, when a tool of this test is missing or it does not run as root.
fn require_root_tools() {
    let uid = run(Command::new("id").arg("-u"));
    assert_eq!(
        uid.trim(),
        "0",
        "this test installs a package into a root of its own with chroot, network and mount \
         namespaces: run it as root"
    );
    for (tool, program, probe, hint) in [
        (
            "mmdebstrap",
            "mmdebstrap",
            "--version",
            "scripts/test installs it (apt-get install mmdebstrap)",
        ),
        (
            "unshare",
            "unshare",
            "--version",
            "it comes with util-linux (apt-get install util-linux)",
        ),
        (
            "nsenter",
            "nsenter",
            "--version",
            "it comes with util-linux (apt-get install util-linux)",
        ),
        ("chroot", "chroot", "--version", "it comes with coreutils"),
        ("tar", "tar", "--version", "apt-get install tar"),
        ("bash", "bash", "--version", "apt-get install bash"),
        (
            "ip",
            "ip",
            "-V",
            "scripts/test installs it (apt-get install iproute2)",
        ),
    ] {
        require(tool, program, &[probe], hint);
    }
}

/// The tarball of a fresh minbase root, from the cache, built into it first if missing.
async fn debian_root() -> PathBuf {
    let architecture = run(Command::new("dpkg").arg("--print-architecture"))
        .trim()
        .to_owned();
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    let cache = PathBuf::from(home).join(".cache/tickd/debian-roots");
    let name = format!(
        "{SUITE}-{VARIANT}+{}-{architecture}.tar.gz",
        INCLUDE.join("+")
    );
    let tarball = cache.join(&name);
    if tarball.is_file() {
        return tarball;
    }
    std::fs::create_dir_all(&cache)
        .unwrap_or_else(|error| panic!("create {}: {error}", cache.display()));
    // Built beside its final place, so that the rename is atomic and a concurrent run never
    // reads half a tarball; mmdebstrap's own temporary root goes there too, and all of it is
    // removed when this ends, built or not.
    let building = tempfile::Builder::new()
        .prefix(".building-")
        .tempdir_in(&cache)
        .expect("a temporary directory in the cache");
    let partial = building.path().join(&name);
    let mut command = tokio::process::Command::new("unshare");
    // In a mount namespace of its own: what mmdebstrap mounts while it builds is gone when
    // it ends, also when it is killed.
    command
        .args(["--mount", "--propagation", "private", "--", "mmdebstrap"])
        .arg(format!("--variant={VARIANT}"))
        .arg(format!("--include={}", INCLUDE.join(",")))
        .arg("--mode=root")
        .arg(SUITE)
        .arg(&partial)
        .env("TMPDIR", building.path());
    eprintln!(
        "package test: building a {SUITE} {VARIANT} root with mmdebstrap into {} (once)",
        tarball.display()
    );
    let output = run_bounded(command, ROOT_BUILD_TIMEOUT, "mmdebstrap").await;
    assert!(
        output.status.success() && partial.is_file(),
        "mmdebstrap failed with {} (it needs the network to Debian's mirror):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&partial, &tarball)
        .unwrap_or_else(|error| panic!("move the root to {}: {error}", tarball.display()));
    tarball
}

/// `path` as the package ships it.
fn shipped_file(deb: &Path, path: &str) -> String {
    run(Command::new("bash")
        .args([
            "-c",
            r#"set -o pipefail; dpkg-deb --fsys-tarfile "$1" | tar --extract --to-stdout --file - ".$2""#,
            "bash",
        ])
        .arg(deb)
        .arg(path))
}

/// Installs the .deb into `root` with apt, offline, and returns what apt printed.
async fn install(root: &Path, deb: &Path) -> String {
    std::fs::copy(deb, in_root(root, DEB_IN_ROOT)).expect("copy the .deb into the root");
    let mut command = tokio::process::Command::new("unshare");
    command
        .args(PRIVATE_NAMESPACES)
        .args(["sh", "-c"])
        .arg(INSTALL_SCRIPT)
        .arg("sh")
        .arg(root)
        .arg(DEB_IN_ROOT)
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .env("DEBIAN_FRONTEND", "noninteractive");
    let output = run_bounded(command, INSTALL_TIMEOUT, "apt-get install of the .deb").await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "apt-get install {DEB_IN_ROOT} failed in the fresh root with {}:\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Checks what installing did, from `apt`'s output and the root's files, and returns the
/// installed cluster file.
fn check_installed(root: &Path, shipped: &str, apt: &str) -> String {
    let new: Vec<&str> = apt
        .lines()
        .skip_while(|line| !line.starts_with("The following NEW packages will be installed"))
        .skip(1)
        .take_while(|line| line.starts_with(' '))
        .flat_map(str::split_whitespace)
        .collect();
    assert_eq!(
        new,
        ["tickd"],
        "apt should install the package alone:\n{apt}"
    );
    assert_eq!(package_status(root, "tickd").as_deref(), Some("installed"));
    assert!(
        apt.contains(SECRET_MESSAGE),
        "the postinst should have generated the secret:\n{apt}"
    );

    let (uid, gid) = account(root, "/etc/passwd", "tickd")
        .unwrap_or_else(|| panic!("the postinst made no tickd user:\n{apt}"));
    let passwd = read(&in_root(root, "/etc/passwd"));
    let entry = passwd
        .lines()
        .find(|line| line.starts_with("tickd:"))
        .unwrap_or_default();
    let fields: Vec<&str> = entry.split(':').collect();
    assert!(
        uid > 0
            && uid < 1000
            && fields.get(5..7) == Some(&["/var/lib/tickd", "/usr/sbin/nologin"][..]),
        "tickd should be a system user at home in /var/lib/tickd without a login shell: {entry}"
    );
    assert_eq!(
        account(root, "/etc/group", "tickd").map(|(group, _)| group),
        Some(gid),
        "the tickd user's primary group should be the tickd group"
    );

    let config_path = in_root(root, CLUSTER_FILE);
    let installed = read(&config_path);
    generated_secret(shipped, &installed);
    let metadata = std::fs::metadata(&config_path).expect("the cluster file's metadata");
    assert_eq!(
        (metadata.uid(), metadata.gid(), metadata.mode() & 0o777),
        (0, gid, 0o640),
        "{CLUSTER_FILE} should be root:tickd (gid {gid}), mode 0640"
    );
    let overrides = read(&in_root(root, "/var/lib/dpkg/statoverride"));
    assert!(
        overrides
            .lines()
            .any(|line| line == format!("root tickd 640 {CLUSTER_FILE}")),
        "the postinst should register a statoverride for {CLUSTER_FILE}:\n{overrides}"
    );
    installed
}

/// dpkg's status of `package` in `root` (`installed`, …), or `None` when it knows none.
fn package_status(root: &Path, package: &str) -> Option<String> {
    let output = Command::new("chroot")
        .arg(root)
        .args([
            "dpkg-query",
            "--show",
            "--showformat",
            "${db:Status-Status}",
        ])
        .arg(package)
        .env("PATH", SYSTEM_PATH)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("run dpkg-query in the root");
    let status = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    (output.status.success() && !status.is_empty()).then_some(status)
}

/// Asserts that `root` has no root certificates: ca-certificates is not installed and no
/// certificate is where TLS libraries look for the system's.
fn assert_no_root_certificates(root: &Path) {
    let status = package_status(root, "ca-certificates");
    assert!(
        status
            .as_deref()
            .is_none_or(|status| status == "not-installed"),
        "the root should not have ca-certificates, dpkg says {status:?}"
    );
    for dir in ["/etc/ssl/certs", "/usr/share/ca-certificates", "/etc/pki"] {
        let entries = std::fs::read_dir(in_root(root, dir))
            .map(|entries| entries.count())
            .unwrap_or(0);
        assert_eq!(entries, 0, "the root should have no certificates in {dir}");
    }
}

/// The ids of `name` in `root`'s `file` (/etc/passwd: uid and gid; /etc/group: gid and 0).
fn account(root: &Path, file: &str, name: &str) -> Option<(u32, u32)> {
    read(&in_root(root, file)).lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&name)).then(|| {
            let id = |index: usize| {
                fields
                    .get(index)
                    .and_then(|field| field.parse().ok())
                    .unwrap_or_else(|| panic!("{file}: a line without ids: {line}"))
            };
            let second = if file == "/etc/passwd" { id(3) } else { 0 };
            (id(2), second)
        })
    })
}

/// The value of `key = "value"`, set once, outside comments, in a cluster file.
fn setting_of(config: &str, key: &str) -> String {
    let values: Vec<&str> = config
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once('=')?;
            (name.trim() == key).then(|| value.trim().trim_matches('"'))
        })
        .collect();
    match values.as_slice() {
        [value] => (*value).to_owned(),
        other => panic!("the cluster file should set `{key}` once, not {other:?}:\n{config}"),
    }
}

/// The network namespace of the node, held open by a descriptor of this process, so that it
/// is the same namespace for as long as the test runs, whatever becomes of the node's pid.
struct Namespace {
    file: File,
}

impl Namespace {
    /// Waits (bounded) until the node's process has left this process's network namespace,
    /// and holds the one it entered.
    async fn of(node: &mut Node, log_path: &Path) -> Self {
        let inode = |path: &str| std::fs::metadata(path).map(|metadata| metadata.ino());
        let own = inode("/proc/self/ns/net").expect("this process's network namespace");
        let theirs = format!("/proc/{}/ns/net", node.id());
        let deadline = tokio::time::Instant::now() + NAMESPACE_TIMEOUT;
        loop {
            if let Some(status) = node.exited() {
                panic!(
                    "the node's process exited with {status} before it started; log:\n{}",
                    read(log_path)
                );
            }
            if inode(&theirs).is_ok_and(|inode| inode != own) {
                let file =
                    File::open(&theirs).unwrap_or_else(|error| panic!("hold {theirs}: {error}"));
                return Namespace { file };
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the node's process did not enter a network namespace of its own within \
                 {NAMESPACE_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A path that names the namespace to another process.
    fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.file.as_raw_fd())
    }
}

/// Forwards each connection to a free port of this machine's loopback to `target` in a
/// network namespace, through a `bash` of its own in that namespace. Dropping it stops the
/// listener; each connection's `bash` is killed when the connection ends.
struct Relay {
    address: SocketAddr,
    accept: JoinHandle<()>,
}

impl Relay {
    async fn start(namespace: String, target: SocketAddr) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("a free port on loopback for the relay");
        let address = listener.local_addr().expect("the relay's address");
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(forward(stream, namespace.clone(), target));
            }
        });
        Relay { address, accept }
    }

    fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Relays one connection until either side closes it.
async fn forward(stream: TcpStream, namespace: String, target: SocketAddr) {
    let Ok(mut child) = tokio::process::Command::new("nsenter")
        .arg(format!("--net={namespace}"))
        .args(["--", "bash", "-c", FORWARD_SCRIPT, "bash"])
        .arg(target.ip().to_string())
        .arg(target.port().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
    else {
        return;
    };
    let _group = child.id().map(ProcessGroup);
    let (Some(mut to_target), Some(mut from_target)) = (child.stdin.take(), child.stdout.take())
    else {
        return;
    };
    let (mut from_client, mut to_client) = stream.into_split();
    tokio::select! {
        _ = tokio::io::copy(&mut from_client, &mut to_target) => {}
        _ = tokio::io::copy(&mut from_target, &mut to_client) => {}
    }
}

/// A process group, killed whole when this is dropped: the relay's `bash` and its `cat`s.
struct ProcessGroup(u32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}
