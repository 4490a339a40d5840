//! [`TestCluster`]: N real `tickd` processes on 127.0.0.1, and their lifecycle.
//!
//! The cluster owns a temporary directory holding `cluster.toml`, one data
//! directory per node (`node<ID>/`) and one log per node (`node<ID>.log`,
//! stdout and stderr, appended across restarts). Ports are allocated once and
//! kept, so a node restarts on the addresses its peers know.
//!
//! Each node is in one of three states ([`NodeState`]): `Running`, `Stopped`
//! (SIGSTOP: alive, holding its sockets, answering nothing — the way a long GC
//! pause or a hung VM looks to its peers) or `Down` (killed, terminated or
//! exited on its own). Lifecycle methods check the state they expect and panic
//! otherwise, so a test that kills a node that has already crashed learns it.
//!
//! Queries go through one shared HTTP client with a 10 s timeout and no proxy;
//! the harness's own probes use a shorter timeout so that waits keep polling.
//!
//! Dropping the cluster kills every node (no process outlives its test) and,
//! when the test is panicking, prints the tail of every node's log. Set
//! `TICKD_TEST_KEEP_DIR` to keep the directory for inspection.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::Value;
use tempfile::TempDir;

use crate::config::{ClusterConfig, TEST_TOKEN};
use crate::pki::Pki;
use crate::ports;
use crate::proxy::{LinkMode, LinkProxy};
use crate::skew::SkewedClock;
use crate::wait::{eventually, poll_until};

/// A node id, as written in `cluster.toml`.
pub type NodeId = u64;

/// The highest cluster level of the build under test (`Levels::THIS_BINARY.highest`): what a
/// new cluster rises to within seconds, and an upgraded one once every voter runs this build.
/// Level 3 brought calendar schedules.
pub const THIS_LEVEL: u64 = 3;

/// How long [`TestCluster::start`] waits for every node to be up under one leader.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`TestCluster::terminate`] waits for a node to exit after SIGTERM.
pub const TERMINATE_TIMEOUT: Duration = Duration::from_secs(10);

/// The timeout of every request made through [`TestCluster::client`].
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the harness's waits poll.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The timeout of the harness's own health and leader probes: shorter than
/// [`REQUEST_TIMEOUT`] so that a wait polls again soon after a slow answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a signalled process may take to show the state SIGSTOP or SIGCONT
/// put it in (the signal is asynchronous).
const SIGNAL_SETTLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Lines of each node log printed when a test panics.
const LOG_TAIL_LINES: usize = 60;

/// The environment variable that keeps the cluster directory after the test.
const KEEP_DIR_VAR: &str = "TICKD_TEST_KEEP_DIR";

/// Environment variables that would override `cluster.toml` in the node
/// (SPEC §8); they are removed so the developer's shell cannot change a test.
const OVERRIDE_VARS: [&str; 2] = ["ACCESS_TOKEN", "RABBIT_URI"];

/// The API port of a node that has an address of its own ([`NodeHost`]): every host has its
/// own address, so every node can use the port an operator's cluster file would.
pub const HOST_API_PORT: u16 = 9643;

/// The Raft port of a node that has an address of its own ([`NodeHost`]).
pub const HOST_RAFT_PORT: u16 = 9743;

/// Where a node runs when it is not on this machine's loopback: the multi-host rig
/// ([`crate::rig`]) puts each node in a network namespace of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHost {
    /// The host's address: the node's API listens on it at [`HOST_API_PORT`], its Raft
    /// listener at [`HOST_RAFT_PORT`], and the cluster file names it.
    pub address: IpAddr,
    /// The command that runs the node there, followed by the node's own command line
    /// (`ip netns exec NAME`). It must exec the node, so that the child's pid is the node's
    /// and SIGKILL and SIGSTOP reach it.
    pub command_prefix: Vec<String>,
}

/// The lifecycle state of one node process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// The process is alive and scheduled.
    Running,
    /// The process is alive but halted by SIGSTOP.
    Stopped,
    /// There is no process: never started, killed, terminated or crashed.
    Down,
}

/// Finds the `tickd` binary under test.
///
/// `TICKD_BIN` if set; otherwise `tickd` in the directory above the running
/// test executable (`target/<profile>/deps/..`), where `cargo test --workspace`
/// builds it, or beside it (the `chaos` binary lives in `target/<profile>/`).
///
/// # Panics
///
/// When no file exists at that path.
pub fn tickd_binary() -> PathBuf {
    let path = match std::env::var_os("TICKD_BIN") {
        Some(path) => PathBuf::from(path),
        None => {
            let exe = std::env::current_exe().expect("the path of the running test executable");
            let dir = exe
                .parent()
                .expect("the test executable lives in a directory");
            let above = dir.join("..").join("tickd");
            if above.is_file() {
                above
            } else {
                dir.join("tickd")
            }
        }
    };
    assert!(
        path.is_file(),
        "tickd binary not found at {}; run the suite with `cargo test --workspace` \
         (it builds the binary) or set TICKD_BIN",
        path.display()
    );
    path
}

/// Options for a [`TestCluster`]; see [`TestCluster::builder`].
#[derive(Debug, Clone)]
pub struct TestClusterBuilder {
    nodes: usize,
    token: String,
    rabbit_uri: Option<String>,
    snapshot_every: Option<u64>,
    max_clocks: Option<u64>,
    clock_ttl_ms: Option<u64>,
    metrics_require_token: Option<bool>,
    settings: Vec<(String, String)>,
    env: Vec<(String, String)>,
    node_env: BTreeMap<NodeId, Vec<(String, String)>>,
    /// `Some` when every node runs on a clock of its own (libfaketime), with these initial
    /// offsets in seconds (0 for a node not named).
    clock_offsets: Option<BTreeMap<NodeId, i64>>,
    initially_down: BTreeSet<NodeId>,
    joining: BTreeSet<NodeId>,
    wait_ready: bool,
    link_proxies: bool,
    data_root: Option<PathBuf>,
    tls: bool,
    hosts: Vec<NodeHost>,
    /// The binary every node starts from; `None`: [`tickd_binary`].
    binary: Option<PathBuf>,
    operator_token: bool,
}

impl Default for TestClusterBuilder {
    fn default() -> Self {
        TestClusterBuilder {
            nodes: 3,
            token: TEST_TOKEN.to_owned(),
            rabbit_uri: None,
            snapshot_every: None,
            max_clocks: None,
            clock_ttl_ms: None,
            metrics_require_token: None,
            settings: Vec::new(),
            link_proxies: false,
            env: Vec::new(),
            node_env: BTreeMap::new(),
            clock_offsets: None,
            initially_down: BTreeSet::new(),
            joining: BTreeSet::new(),
            wait_ready: true,
            data_root: None,
            tls: false,
            hosts: Vec::new(),
            binary: None,
            operator_token: true,
        }
    }
}

impl TestClusterBuilder {
    /// The number of nodes, with ids `1..=n` (default 3).
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }

    /// Log entries between snapshots (`snapshot_every`); unset keeps the node's default.
    pub fn snapshot_every(mut self, entries: u64) -> Self {
        self.snapshot_every = Some(entries);
        self
    }

    /// The RabbitMQ URI (`rabbit_uri`); `None` (the default) selects the http channel.
    pub fn rabbit_uri(mut self, uri: Option<String>) -> Self {
        self.rabbit_uri = uri;
        self
    }

    /// Routes every node-to-node link through its own fault-injecting proxy, so that tests can
    /// partition nodes ([`TestCluster::isolate`]).
    pub fn link_proxies(mut self) -> Self {
        self.link_proxies = true;
        self
    }

    /// How long an unconsumed clock lives (`clock_ttl_ms`); unset keeps the node's default.
    pub fn clock_ttl_ms(mut self, ttl: u64) -> Self {
        self.clock_ttl_ms = Some(ttl);
        self
    }

    /// Whether `/metrics` needs the access token (`metrics_require_token`); unset keeps the
    /// node's default (it does).
    pub fn metrics_require_token(mut self, required: bool) -> Self {
        self.metrics_require_token = Some(required);
        self
    }

    /// A top-level key of the cluster file without a builder method of its own, with its value
    /// in TOML syntax (`.setting("disk_reserve_mb", "4")`).
    pub fn setting(mut self, key: impl Into<String>, toml_value: impl Into<String>) -> Self {
        self.settings.push((key.into(), toml_value.into()));
        self
    }

    /// The cap on the number of clocks (`max_clocks`); unset keeps the node's default.
    pub fn max_clocks(mut self, max: u64) -> Self {
        self.max_clocks = Some(max);
        self
    }

    /// The access token (default `"test-token"`).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = token.into();
        self
    }

    /// An environment variable for every node process (e.g. `RUST_LOG`).
    /// Set here, `ACCESS_TOKEN` and `RABBIT_URI` do reach the nodes; inherited
    /// from the test's own environment they do not.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// An environment variable for one node's process only, on top of [`Self::env`] (the
    /// clock-skew tests preload libfaketime into one node).
    pub fn node_env(
        mut self,
        node: NodeId,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.node_env
            .entry(node)
            .or_default()
            .push((key.into(), value.into()));
        self
    }

    /// Every node on a wall clock of its own, which [`TestCluster::set_clock_offset`] steps
    /// while it runs (see [`crate::skew`]); all start on the machine's time.
    pub fn skewable_clocks(mut self) -> Self {
        self.clock_offsets.get_or_insert_with(BTreeMap::new);
        self
    }

    /// [`Self::skewable_clocks`], with `node`'s clock starting `seconds` off the machine's.
    pub fn clock_offset(mut self, node: NodeId, seconds: i64) -> Self {
        self.clock_offsets
            .get_or_insert_with(BTreeMap::new)
            .insert(node, seconds);
        self
    }

    /// Nodes that are written into `cluster.toml` but not started; start them
    /// later with [`TestCluster::restart`].
    pub fn initially_down(mut self, ids: impl IntoIterator<Item = NodeId>) -> Self {
        self.initially_down.extend(ids);
        self
    }

    /// Nodes that are written into `cluster.toml` with `join = true` and not started: they do
    /// not found the cluster. Start one with [`TestCluster::restart`] and add it through the
    /// membership API; it is not counted as ready before that.
    pub fn joining(mut self, ids: impl IntoIterator<Item = NodeId>) -> Self {
        let ids: Vec<NodeId> = ids.into_iter().collect();
        self.initially_down.extend(ids.iter().copied());
        self.joining.extend(ids);
        self
    }

    /// Puts node N's data directory at `<root>/node<N>` (default: `node<N>` in the cluster's
    /// temporary directory), e.g. on a filesystem mounted there (see [`crate::power`]).
    pub fn data_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.data_root = Some(root.into());
        self
    }

    /// Runs node `i` (from 1) on `hosts[i - 1]` instead of 127.0.0.1; there must be one host
    /// per node. The nodes' addresses are then fixed ([`HOST_API_PORT`], [`HOST_RAFT_PORT`]),
    /// and partitions are the hosts' business: such a cluster has no link proxies.
    pub fn hosts(mut self, hosts: Vec<NodeHost>) -> Self {
        self.hosts = hosts;
        self
    }

    /// Whether [`start`](Self::start) waits until the started nodes are healthy
    /// under one leader (default `true`). Turn it off when the started nodes
    /// are a minority, or when the test watches start-up itself.
    pub fn wait_ready(mut self, wait: bool) -> Self {
        self.wait_ready = wait;
        self
    }

    /// Turns TLS on: a CA and one certificate per node (for its address and `localhost`) made
    /// with `tickd certs` in the cluster's `pki/` folder, the API served over HTTPS and mutual
    /// TLS between nodes. [`TestCluster::api_url`] then says `https`, and
    /// [`TestCluster::client`] trusts the CA.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Starts every node from `binary` instead of the build under test (another release, say);
    /// [`TestCluster::set_binary`] changes one node's later starts.
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Leaves `operator_token` out of the file, as a release that does not know it needs.
    pub fn without_operator_token(mut self) -> Self {
        self.operator_token = false;
        self
    }

    /// Writes the cluster's files, spawns its nodes and (unless turned off)
    /// waits up to [`READY_TIMEOUT`] until they are ready.
    ///
    /// # Panics
    ///
    /// When the binary is missing, the directory or a process cannot be
    /// created, a node exits during start-up, or the cluster is not ready in time.
    pub async fn start(self) -> TestCluster {
        assert!(self.nodes > 0, "a test cluster needs at least one node");
        let binary = self.binary.unwrap_or_else(tickd_binary);
        let dir = tempfile::Builder::new()
            .prefix("tickd-test-")
            .tempdir()
            .expect("create the test cluster's temporary directory");
        let dir_path = dir.path().to_path_buf();

        let mut config = if self.hosts.is_empty() {
            ClusterConfig::local(self.nodes, &ports::allocate(2 * self.nodes))
        } else {
            assert_eq!(
                self.hosts.len(),
                self.nodes,
                "a cluster on hosts needs one host per node"
            );
            assert!(
                !self.link_proxies,
                "link proxies listen on loopback, which nodes on hosts of their own cannot \
                 reach; partition such a cluster through its hosts' links"
            );
            ClusterConfig::of_listeners(self.hosts.iter().map(|host| {
                (
                    SocketAddr::new(host.address, HOST_API_PORT),
                    SocketAddr::new(host.address, HOST_RAFT_PORT),
                )
            }))
        };
        config.token = self.token;
        if !self.operator_token {
            config.operator_token = None;
        }
        config.rabbit_uri = self.rabbit_uri;
        config.snapshot_every = self.snapshot_every;
        config.max_clocks = self.max_clocks;
        config.clock_ttl_ms = self.clock_ttl_ms;
        config.metrics_require_token = self.metrics_require_token;
        config.settings = self.settings;
        for node in &mut config.nodes {
            node.join = self.joining.contains(&node.id);
            if let Some(root) = &self.data_root {
                node.data_dir = root
                    .join(format!("node{}", node.id))
                    .to_string_lossy()
                    .into_owned();
            }
        }
        let pki = self.tls.then(|| {
            let pki = Pki::create(&dir_path.join("pki"));
            config.ca_file = Some(pki.ca());
            for node in &mut config.nodes {
                let host = node.raft.ip().to_string();
                node.tls = Some(pki.node(node.id, &[host.as_str(), "localhost"]));
            }
            pki
        });
        let links = if self.link_proxies {
            start_link_proxies(&mut config).await
        } else {
            BTreeMap::new()
        };
        let config_path = dir_path.join("cluster.toml");
        config.write(&config_path).expect("write cluster.toml");

        let clocks: BTreeMap<NodeId, SkewedClock> = match &self.clock_offsets {
            Some(offsets) => config
                .nodes
                .iter()
                .map(|node| {
                    let file = dir_path.join(format!("node{}.faketime", node.id));
                    let offset = offsets.get(&node.id).copied().unwrap_or(0);
                    (node.id, SkewedClock::new(&file, offset))
                })
                .collect(),
            None => BTreeMap::new(),
        };
        let nodes = config
            .nodes
            .iter()
            .zip(self.hosts.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(node, host)| {
                let process = Node {
                    api: node.api,
                    raft: node.raft,
                    command_prefix: host
                        .map(|host| host.command_prefix.clone())
                        .unwrap_or_default(),
                    env: self
                        .node_env
                        .get(&node.id)
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .chain(
                            clocks
                                .get(&node.id)
                                .map(SkewedClock::env)
                                .unwrap_or_default(),
                        )
                        .collect(),
                    data_dir: dir_path.join(&node.data_dir),
                    log_path: dir_path.join(format!("node{}.log", node.id)),
                    binary: Mutex::new(binary.clone()),
                    process: Mutex::new(Process::default()),
                };
                (node.id, process)
            })
            .collect();
        let mut client = crate::http::client_builder().timeout(REQUEST_TIMEOUT);
        if let Some(pki) = &pki {
            client = client.tls_backend_preconfigured(pki.client_config(None));
        }
        let client = client.build().expect("build the harness's HTTP client");

        // The cluster exists before any process does, so that a panic while
        // spawning still kills what was spawned (in `Drop`).
        let cluster = TestCluster {
            links,
            dir: Some(dir),
            dir_path,
            config_path,
            config,
            env: self.env,
            nodes,
            client,
            pki,
            clocks,
        };
        for id in cluster.node_ids() {
            if !self.initially_down.contains(&id) {
                cluster.restart(id);
            }
        }
        if self.wait_ready {
            cluster.wait_ready(READY_TIMEOUT).await;
        }
        cluster
    }
}

/// One member of the cluster: its fixed addresses and paths, and its process.
#[derive(Debug)]
struct Node {
    api: SocketAddr,
    raft: SocketAddr,
    /// What runs the node's command line where the node lives; empty: here.
    command_prefix: Vec<String>,
    /// Environment variables of this node's process alone.
    env: Vec<(String, String)>,
    data_dir: PathBuf,
    log_path: PathBuf,
    /// The binary the node's next start runs.
    binary: Mutex<PathBuf>,
    process: Mutex<Process>,
}

/// The process of one node, if it has one.
#[derive(Debug, Default)]
struct Process {
    /// The live (running or stopped) process; `None` when the node is down.
    child: Option<Child>,
    /// Whether the live process was halted with SIGSTOP.
    stopped: bool,
    /// How the last process ended, once one has.
    last_exit: Option<ExitStatus>,
    /// Whether the harness started the node and has not ended it since: a
    /// wanted node without a process has crashed.
    wanted: bool,
}

impl Process {
    /// Notices a process that has exited on its own and reaps it.
    fn refresh(&mut self) {
        if let Some(child) = &mut self.child
            && let Ok(Some(status)) = child.try_wait()
        {
            self.child = None;
            self.stopped = false;
            self.last_exit = Some(status);
        }
    }

    fn state(&self) -> NodeState {
        match (&self.child, self.stopped) {
            (None, _) => NodeState::Down,
            (Some(_), true) => NodeState::Stopped,
            (Some(_), false) => NodeState::Running,
        }
    }

    /// Sends SIGKILL to the live process, if any, and reaps it.
    fn kill(&mut self) -> Option<ExitStatus> {
        self.wanted = false;
        let mut child = self.child.take()?;
        self.stopped = false;
        // An error means the process has already exited; `wait` reaps it either way.
        let _ = child.kill();
        let status = child.wait().ok();
        self.last_exit = status;
        status
    }
}

/// A running `tickd` cluster of real processes; see the module docs.
#[derive(Debug)]
pub struct TestCluster {
    /// The proxy of each directed link (from, to), when the cluster has them.
    links: BTreeMap<(NodeId, NodeId), LinkProxy>,
    /// The temporary directory; `None` only once `Drop` has decided to keep it.
    dir: Option<TempDir>,
    dir_path: PathBuf,
    config_path: PathBuf,
    config: ClusterConfig,
    env: Vec<(String, String)>,
    nodes: BTreeMap<NodeId, Node>,
    client: reqwest::Client,
    /// The certificates, when the cluster runs TLS.
    pki: Option<Pki>,
    /// Each node's own wall clock, when the cluster has them ([`TestClusterBuilder::skewable_clocks`]).
    clocks: BTreeMap<NodeId, SkewedClock>,
}

/// Starts one proxy per directed link and points each node's `dial` table at them.
async fn start_link_proxies(config: &mut ClusterConfig) -> BTreeMap<(NodeId, NodeId), LinkProxy> {
    let targets: BTreeMap<NodeId, SocketAddr> = config
        .nodes
        .iter()
        .map(|node| (node.id, node.raft))
        .collect();
    let pairs: Vec<(NodeId, NodeId)> = targets
        .keys()
        .flat_map(|from| {
            targets
                .keys()
                .filter(move |to| *to != from)
                .map(move |to| (*from, *to))
        })
        .collect();
    let ports = ports::allocate(pairs.len());
    let mut links = BTreeMap::new();
    for ((from, to), port) in pairs.into_iter().zip(ports) {
        let listen = SocketAddr::from(([127, 0, 0, 1], port));
        let proxy = LinkProxy::start(listen, targets[&to])
            .await
            .expect("start a link proxy");
        if let Some(node) = config.nodes.iter_mut().find(|node| node.id == from) {
            node.dial.insert(to, proxy.address());
        }
        links.insert((from, to), proxy);
    }
    links
}

impl TestCluster {
    /// Cuts every link from and to `node` (black holes: peers see timeouts).
    ///
    /// # Panics
    ///
    /// When the cluster was built without [`TestClusterBuilder::link_proxies`].
    pub fn isolate(&self, node: NodeId) {
        assert!(
            !self.links.is_empty(),
            "isolate needs a cluster built with link_proxies()"
        );
        for ((from, to), proxy) in &self.links {
            if *from == node || *to == node {
                proxy.set(LinkMode::Blackhole);
            }
        }
    }

    /// Sets one directed link's mode.
    pub fn set_link(&self, from: NodeId, to: NodeId, mode: LinkMode) {
        if let Some(proxy) = self.links.get(&(from, to)) {
            proxy.set(mode);
        }
    }

    /// Whether the cluster's links run through proxies that can partition it.
    pub fn has_link_proxies(&self) -> bool {
        !self.links.is_empty()
    }

    /// Restores every link.
    pub fn heal_links(&self) {
        for proxy in self.links.values() {
            proxy.set(LinkMode::Pass);
        }
    }

    /// Starts an `n`-node cluster with the default options and waits until it is ready.
    pub async fn start(n: usize) -> TestCluster {
        TestCluster::builder().nodes(n).start().await
    }

    /// Options for a cluster: node count, snapshot interval, RabbitMQ, limits.
    pub fn builder() -> TestClusterBuilder {
        TestClusterBuilder::default()
    }

    // ---- Where things are ------------------------------------------------

    /// The path of `cluster.toml`.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The configuration the nodes run with.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The cluster's directory (config, data directories, logs).
    pub fn dir(&self) -> &Path {
        &self.dir_path
    }

    /// The access token.
    pub fn token(&self) -> &str {
        &self.config.token
    }

    /// The operator token: membership changes, backup, restore and metrics need it.
    ///
    /// # Panics
    ///
    /// When the cluster file was written without one.
    pub fn operator_token(&self) -> &str {
        self.config
            .operator_token
            .as_deref()
            .expect("this test cluster has no operator token")
    }

    /// The ids of all members, running or not, in ascending order.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// The base URL of a node's API, `http://ADDRESS:PORT` (`https` under TLS; 127.0.0.1
    /// unless the node runs on a host of its own), without a trailing slash.
    pub fn api_url(&self, id: NodeId) -> String {
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.node(id).api)
    }

    /// Steps `node`'s wall clock to `seconds` off the machine's; the node sees it within a
    /// second. Its monotonic clock does not move.
    ///
    /// # Panics
    ///
    /// When the cluster was built without [`TestClusterBuilder::skewable_clocks`].
    pub fn set_clock_offset(&self, node: NodeId, seconds: i64) {
        self.set_clock_offset_ms(node, seconds.saturating_mul(1_000));
    }

    /// [`Self::set_clock_offset`] to the millisecond.
    ///
    /// # Panics
    ///
    /// As [`Self::set_clock_offset`].
    pub fn set_clock_offset_ms(&self, node: NodeId, offset_ms: i64) {
        self.clocks
            .get(&node)
            .unwrap_or_else(|| {
                panic!(
                    "node {node} has no clock of its own: build the cluster with skewable_clocks()"
                )
            })
            .set_ms(offset_ms);
    }

    /// Whether every node runs on a wall clock of its own.
    pub fn has_skewable_clocks(&self) -> bool {
        !self.clocks.is_empty()
    }

    /// The cluster's certificates, when it runs TLS.
    pub fn pki(&self) -> Option<&Pki> {
        self.pki.as_ref()
    }

    /// The address of a node's API.
    pub fn api_addr(&self, id: NodeId) -> SocketAddr {
        self.node(id).api
    }

    /// The address of a node's Raft RPC listener.
    pub fn raft_addr(&self, id: NodeId) -> SocketAddr {
        self.node(id).raft
    }

    /// A node's data directory.
    pub fn data_dir(&self, id: NodeId) -> PathBuf {
        self.node(id).data_dir.clone()
    }

    /// A node's log file (stdout and stderr of every run of the node).
    pub fn log_path(&self, id: NodeId) -> PathBuf {
        self.node(id).log_path.clone()
    }

    /// Everything a node has logged so far, over all its runs.
    pub fn log(&self, id: NodeId) -> String {
        match std::fs::read(&self.node(id).log_path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(_) => String::new(),
        }
    }

    /// The shared HTTP client: 10 s timeout, no proxy.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    // ---- Lifecycle ---------------------------------------------------------

    /// The state of a node's process.
    pub fn state(&self, id: NodeId) -> NodeState {
        self.process(id).state()
    }

    /// Whether a node has a live process that is not stopped.
    pub fn is_running(&self, id: NodeId) -> bool {
        self.state(id) == NodeState::Running
    }

    /// The ids of the running nodes, in ascending order.
    pub fn running_ids(&self) -> Vec<NodeId> {
        self.node_ids()
            .into_iter()
            .filter(|&id| self.is_running(id))
            .collect()
    }

    /// The OS process id of a node's live process.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        self.process(id).child.as_ref().map(Child::id)
    }

    /// The nodes that the harness started and that have exited on their own
    /// (not by [`kill`](Self::kill) or [`terminate`](Self::terminate)).
    pub fn crashed_nodes(&self) -> Vec<NodeId> {
        self.node_ids()
            .into_iter()
            .filter(|&id| {
                let process = self.process(id);
                process.wanted && process.child.is_none()
            })
            .collect()
    }

    /// How a node's last process ended, if one has.
    pub fn last_exit(&self, id: NodeId) -> Option<ExitStatus> {
        self.process(id).last_exit
    }

    /// The log of node `id`, whose last process must have exited with a failure status: what
    /// a crash-only node that met a fault (a storage error, a dead task) leaves to read.
    ///
    /// # Panics
    ///
    /// When no process of the node has exited, or the last one exited successfully.
    pub fn failure_log(&self, id: NodeId) -> String {
        let exit = self
            .last_exit(id)
            .unwrap_or_else(|| panic!("node {id} has not exited"));
        assert!(
            !exit.success(),
            "node {id} exited with {exit}, not a failure"
        );
        self.log(id)
    }

    /// Kills a node with SIGKILL (running or stopped) and waits for it to exit.
    ///
    /// # Panics
    ///
    /// When the node is already down.
    pub fn kill(&self, id: NodeId) {
        let mut process = self.process(id);
        self.expect_alive(id, &process, "kill");
        process.kill();
    }

    /// Halts a running node with SIGSTOP: it keeps its sockets but answers nothing.
    ///
    /// # Panics
    ///
    /// When the node is not running.
    pub fn stop(&self, id: NodeId) {
        let mut process = self.process(id);
        self.expect_state(id, &process, NodeState::Running, "stop");
        let pid = process.child.as_ref().map_or(0, Child::id);
        send_signal(pid, "STOP");
        wait_for_stopped(pid, true);
        process.stopped = true;
    }

    /// Resumes a stopped node with SIGCONT.
    ///
    /// # Panics
    ///
    /// When the node is not stopped.
    pub fn cont(&self, id: NodeId) {
        let mut process = self.process(id);
        self.expect_state(id, &process, NodeState::Stopped, "cont");
        let pid = process.child.as_ref().map_or(0, Child::id);
        send_signal(pid, "CONT");
        wait_for_stopped(pid, false);
        process.stopped = false;
    }

    /// Starts a node that is down, with the same config, addresses and data
    /// directory; its log is appended to. Does not wait for it to be healthy
    /// (see [`wait_healthy`](Self::wait_healthy)).
    ///
    /// # Panics
    ///
    /// When the node is running or stopped, or the process cannot be spawned.
    pub fn restart(&self, id: NodeId) {
        let node = self.node(id);
        let mut process = self.process(id);
        self.expect_state(id, &process, NodeState::Down, "start");

        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log_path)
            .expect("open the node log");
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        // The marker separates the runs of a node in its log; losing it is harmless.
        let _ = writeln!(
            log,
            "==== tickd-tests: starting node {id} at unix time {}.{:03} ====",
            since_epoch.as_secs(),
            since_epoch.subsec_millis()
        );
        let stderr = log.try_clone().expect("duplicate the node log handle");

        let binary = node
            .binary
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut command = match node.command_prefix.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        command
            .arg("--config")
            .arg(&self.config_path)
            .arg("--node")
            .arg(id.to_string())
            .current_dir(&self.dir_path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr);
        for var in OVERRIDE_VARS {
            command.env_remove(var);
        }
        command.envs(self.env.iter().map(|(key, value)| (key, value)));
        command.envs(node.env.iter().map(|(key, value)| (key, value)));
        let child = command.spawn().unwrap_or_else(|error| {
            panic!(
                "spawn node {id} from {} (through {:?}): {error}",
                binary.display(),
                node.command_prefix
            )
        });
        process.child = Some(child);
        process.stopped = false;
        process.wanted = true;
    }

    /// Sends SIGTERM to a running node and waits up to [`TERMINATE_TIMEOUT`]
    /// for it to exit; returns its exit status.
    ///
    /// # Panics
    ///
    /// When the node is not running, or has not exited in time (it is then
    /// killed, so the panic leaves no process behind).
    pub async fn terminate(&self, id: NodeId) -> ExitStatus {
        let pid = {
            let process = self.process(id);
            self.expect_state(id, &process, NodeState::Running, "terminate");
            process.child.as_ref().map_or(0, Child::id)
        };
        self.process(id).wanted = false;
        send_signal(pid, "TERM");
        let outcome = poll_until(TERMINATE_TIMEOUT, Duration::from_millis(20), || async {
            // `process` reaps the node once it has exited.
            let process = self.process(id);
            match (&process.child, process.last_exit) {
                (None, Some(status)) => Ok(status),
                _ => Err("still running"),
            }
        })
        .await;
        match outcome {
            Ok(status) => status,
            Err(_) => {
                self.process(id).kill();
                panic!(
                    "node {id} did not exit within {TERMINATE_TIMEOUT:?} of SIGTERM (killed it); \
                     see {}",
                    self.node(id).log_path.display()
                );
            }
        }
    }

    /// Makes node `id`'s next starts run `binary`: an upgrade (or downgrade) of the node once
    /// it is restarted.
    pub fn set_binary(&self, id: NodeId, binary: impl Into<PathBuf>) {
        *self
            .node(id)
            .binary
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = binary.into();
    }

    /// Deletes a down node's data directory, so it restarts empty.
    ///
    /// # Panics
    ///
    /// When the node is not down, or the directory cannot be removed.
    pub fn wipe(&self, id: NodeId) {
        let process = self.process(id);
        self.expect_state(id, &process, NodeState::Down, "wipe");
        let dir = &self.node(id).data_dir;
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => panic!("wipe {}: {error}", dir.display()),
        }
    }

    /// Kills every live node (running or stopped) with SIGKILL.
    pub fn kill_all(&self) {
        for id in self.node_ids() {
            self.process(id).kill();
        }
    }

    /// Starts every node that is down; running and stopped nodes are left alone.
    pub fn restart_all(&self) {
        for id in self.node_ids() {
            if self.state(id) == NodeState::Down {
                self.restart(id);
            }
        }
    }

    // ---- Cluster queries -----------------------------------------------------

    /// The leader on which a majority of the responding running nodes agree,
    /// asked via `/api/v1/cluster`. A reported leader that is not itself
    /// running (killed or stopped) is stale and never returned.
    pub async fn leader(&self) -> Option<NodeId> {
        self.agreed_leader().await.ok()
    }

    /// Waits until [`leader`](Self::leader) returns a node, and returns it.
    ///
    /// # Panics
    ///
    /// When `timeout` passes first.
    pub async fn wait_for_leader(&self, timeout: Duration) -> NodeId {
        eventually(
            "a leader agreed on by the running nodes",
            timeout,
            POLL_INTERVAL,
            || self.agreed_leader(),
        )
        .await
    }

    /// Waits for an agreed leader and returns the lowest-numbered other member.
    ///
    /// # Panics
    ///
    /// When `timeout` passes without a leader, or the cluster has a single member.
    pub async fn a_follower(&self, timeout: Duration) -> NodeId {
        let leader = self.wait_for_leader(timeout).await;
        self.node_ids()
            .into_iter()
            .find(|id| *id != leader)
            .expect("a cluster of more than one node has a follower")
    }

    /// Waits until [`leader`](Self::leader) returns a node other than `old`.
    ///
    /// # Panics
    ///
    /// When `timeout` passes first.
    pub async fn wait_for_new_leader(&self, old: NodeId, timeout: Duration) -> NodeId {
        let what = format!("a leader other than node {old}");
        eventually(&what, timeout, POLL_INTERVAL, || async {
            match self.agreed_leader().await {
                Ok(leader) if leader == old => Err(format!("node {old} is still the leader")),
                other => other,
            }
        })
        .await
    }

    /// Waits until a node reports `/mgmt/health` UP.
    ///
    /// # Panics
    ///
    /// When `timeout` passes first, or the node is down (it would never be healthy).
    pub async fn wait_healthy(&self, id: NodeId, timeout: Duration) {
        let what = format!("node {id} to be healthy");
        eventually(&what, timeout, POLL_INTERVAL, || async {
            self.expect_not_exited(id);
            self.health_of(id).await
        })
        .await;
    }

    /// Waits until a node's API answers at all (any status: a node waiting to be added to the
    /// cluster reports itself DOWN, but it is serving).
    ///
    /// # Panics
    ///
    /// When `timeout` passes first, or the node is down.
    pub async fn wait_serving(&self, id: NodeId, timeout: Duration) {
        let what = format!("node {id} to serve its API");
        eventually(&what, timeout, POLL_INTERVAL, || async {
            self.expect_not_exited(id);
            self.probe(id, "/mgmt/health", true).await.map(|_| ())
        })
        .await;
    }

    /// Waits until every node the harness has started (and not killed,
    /// terminated or stopped since) is healthy and all of them report the same
    /// running leader.
    ///
    /// # Panics
    ///
    /// When one of those nodes has exited on its own or exits meanwhile, or
    /// `timeout` passes first; the message names the node logs (and their
    /// tails are printed as the cluster drops).
    pub async fn wait_ready(&self, timeout: Duration) {
        let expected: Vec<NodeId> = self
            .node_ids()
            .into_iter()
            .filter(|&id| {
                let process = self.process(id);
                process.wanted && !process.stopped
            })
            .collect();
        let outcome = poll_until(timeout, POLL_INTERVAL, || async {
            for &id in &expected {
                self.expect_not_exited(id);
            }
            self.readiness(&expected).await
        })
        .await;
        if let Err(last) = outcome {
            let logs: Vec<String> = self
                .nodes
                .values()
                .map(|node| node.log_path.display().to_string())
                .collect();
            panic!(
                "cluster not ready within {timeout:?}: {last}; node logs: {}",
                logs.join(", ")
            );
        }
    }

    /// Waits until every running node reports cluster level `level` (`cluster_level` in
    /// `GET /api/v1/cluster`). A new cluster starts at level 1 and its leader raises the level
    /// within seconds; a test of what a level introduced waits for it first.
    ///
    /// # Panics
    ///
    /// When `timeout` passes first.
    pub async fn wait_for_cluster_level(&self, level: u64, timeout: Duration) {
        let outcome = poll_until(timeout, POLL_INTERVAL, || async {
            for id in self.running_ids() {
                let (_, body) = self.probe(id, "/api/v1/cluster", true).await?;
                let seen = body.get("cluster_level").and_then(Value::as_u64);
                if seen != Some(level) {
                    return Err(format!("node {id} reports cluster level {seen:?}"));
                }
            }
            Ok(())
        })
        .await;
        if let Err(last) = outcome {
            panic!("the cluster did not reach level {level} within {timeout:?}: {last}");
        }
    }

    /// Waits until `node` has applied everything the leader had applied when called.
    ///
    /// A restarted node reports the leader as soon as it hears a heartbeat, before the leader's
    /// replication (backed off while the node was down) has brought its log up to date. A
    /// leader killed in that window leaves a follower with a shorter log, whose bid for
    /// election can only fail and delay the others: callers that mean to measure a healthy
    /// cluster's failover wait for this first.
    ///
    /// # Panics
    ///
    /// When no leader is agreed on or the node has not caught up within `timeout`.
    pub async fn wait_caught_up(&self, node: NodeId, timeout: Duration) {
        let leader = self.wait_for_leader(timeout).await;
        let target = match self.own_last_applied(leader).await {
            Ok(applied) => applied,
            Err(reason) => panic!("reading leader {leader}'s applied index: {reason}"),
        };
        let caught_up = poll_until(timeout, POLL_INTERVAL, || async {
            let applied = self.own_last_applied(node).await?;
            if applied >= target {
                Ok(())
            } else {
                Err(format!("node {node} has applied {applied} of {target}"))
            }
        })
        .await;
        if let Err(last) = caught_up {
            panic!("node {node} did not catch up with leader {leader} within {timeout:?}: {last}");
        }
    }

    // ---- Internals ---------------------------------------------------------

    fn node(&self, id: NodeId) -> &Node {
        self.nodes.get(&id).unwrap_or_else(|| {
            panic!(
                "no node {id} in this cluster (its nodes are {:?})",
                self.node_ids()
            )
        })
    }

    /// Locks a node's process record, first noticing whether it has exited.
    /// A poisoned lock is still used: the record stays consistent, and `Drop`
    /// must be able to kill the process after a panic.
    fn process(&self, id: NodeId) -> MutexGuard<'_, Process> {
        let mut process = self
            .node(id)
            .process
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        process.refresh();
        process
    }

    fn expect_state(&self, id: NodeId, process: &Process, want: NodeState, action: &str) {
        let state = process.state();
        if state != want {
            let exit = process
                .last_exit
                .map(|status| format!(" (last exit: {status})"));
            panic!(
                "cannot {action} node {id}: it is {state:?}{}, expected {want:?}",
                exit.unwrap_or_default()
            );
        }
    }

    fn expect_alive(&self, id: NodeId, process: &Process, action: &str) {
        if process.state() == NodeState::Down {
            self.expect_state(id, process, NodeState::Running, action);
        }
    }

    /// Panics when a node is down, in particular when it was started and has
    /// exited on its own.
    fn expect_not_exited(&self, id: NodeId) {
        let process = self.process(id);
        if process.state() == NodeState::Down {
            let status = process
                .last_exit
                .map_or("never started".to_owned(), |s| s.to_string());
            panic!(
                "node {id} is down ({status}); see {}",
                self.node(id).log_path.display()
            );
        }
    }

    /// GETs `path` on a node with the probe timeout; returns status and JSON body. Health is
    /// probed with the token too (it needs none): a request with a valid token is never
    /// counted against the address, so a test that tightens `unauthenticated_rate_per_second`
    /// is not throttled by its own harness.
    async fn probe(
        &self,
        id: NodeId,
        path: &str,
        authed: bool,
    ) -> Result<(StatusCode, Value), String> {
        let mut request = self
            .client
            .get(format!("{}{path}", self.api_url(id)))
            .timeout(PROBE_TIMEOUT);
        if authed {
            request = request.bearer_auth(&self.config.token);
        }
        let response = request
            .send()
            .await
            .map_err(|error| format!("node {id}: GET {path}: {error}"))?;
        let status = response.status();
        let body = response.json::<Value>().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// The last index `id` has applied, from its own cluster view.
    async fn own_last_applied(&self, id: NodeId) -> Result<u64, String> {
        let (status, body) = self.probe(id, "/api/v1/cluster", true).await?;
        let members = body.get("nodes").and_then(Value::as_array);
        members
            .and_then(|members| {
                members
                    .iter()
                    .find(|member| member.get("id").and_then(Value::as_u64) == Some(id))
            })
            .map(|member| {
                member
                    .get("last_applied")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
            })
            .ok_or_else(|| format!("node {id}: cluster view {status} {body} does not list it"))
    }

    async fn health_of(&self, id: NodeId) -> Result<(), String> {
        match self.probe(id, "/mgmt/health", true).await? {
            (StatusCode::OK, _) => Ok(()),
            (status, body) => Err(format!("node {id}: health {status} {body}")),
        }
    }

    /// The leader a node reports; `Ok(None)` when it knows of none.
    async fn reported_leader(&self, id: NodeId) -> Result<Option<NodeId>, String> {
        match self.probe(id, "/api/v1/cluster", true).await? {
            (StatusCode::OK, body) => Ok(body.get("leader").and_then(Value::as_u64)),
            (status, body) => Err(format!("node {id}: cluster view {status} {body}")),
        }
    }

    async fn agreed_leader(&self) -> Result<NodeId, String> {
        let running = self.running_ids();
        let reports = join_all(running.iter().map(|&id| self.reported_leader(id))).await;
        let mut failures = Vec::new();
        let mut votes: BTreeMap<NodeId, usize> = BTreeMap::new();
        let mut responders = 0;
        for (id, report) in running.iter().zip(reports) {
            match report {
                Ok(leader) => {
                    responders += 1;
                    if let Some(leader) = leader.filter(|leader| running.contains(leader)) {
                        *votes.entry(leader).or_default() += 1;
                    } else {
                        failures.push(format!("node {id} knows no running leader ({leader:?})"));
                    }
                }
                Err(error) => failures.push(error),
            }
        }
        match votes.iter().find(|(_, count)| **count * 2 > responders) {
            Some((&leader, _)) => Ok(leader),
            None if responders == 0 => Err(format!("no running node answered: {failures:?}")),
            None => Err(format!(
                "no majority of {responders} answers: votes {votes:?}; {failures:?}"
            )),
        }
    }

    async fn readiness(&self, expected: &[NodeId]) -> Result<NodeId, String> {
        let checks = expected.iter().map(|&id| async move {
            self.health_of(id).await?;
            match self.reported_leader(id).await? {
                Some(leader) => Ok(leader),
                None => Err(format!("node {id} knows no leader")),
            }
        });
        if expected.is_empty() {
            return Err("no node is running".to_owned());
        }
        let leaders = join_all(checks)
            .await
            .into_iter()
            .collect::<Result<BTreeSet<_>, String>>()?;
        match leaders.first() {
            Some(&leader) if leaders.len() == 1 && expected.contains(&leader) => Ok(leader),
            Some(leader) if leaders.len() == 1 => Err(format!(
                "the nodes agree on leader {leader}, which is not running"
            )),
            _ => Err(format!("the nodes disagree on the leader: {leaders:?}")),
        }
    }

    fn print_log_tails(&self) {
        for (id, node) in &self.nodes {
            let log = self.log(*id);
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            eprintln!(
                "----- node {id}: last {} lines of {} -----",
                tail.len(),
                node.log_path.display()
            );
            for line in tail {
                eprintln!("{line}");
            }
        }
        eprintln!("----- end of node logs -----");
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        // Kill first, so that the printed logs are complete and no process
        // outlives the test, whatever happens below.
        for node in self.nodes.values() {
            node.process
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .kill();
        }
        if std::thread::panicking() {
            self.print_log_tails();
        }
        if std::env::var_os(KEEP_DIR_VAR).is_some()
            && let Some(dir) = self.dir.take()
        {
            eprintln!(
                "tickd-tests: kept cluster directory {}",
                dir.keep().display()
            );
        }
    }
}

/// Sends a signal by name (`STOP`, `CONT`, `TERM`) with the `kill` utility,
/// which needs no unsafe code and no extra dependency.
pub(crate) fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|error| panic!("run `kill -{signal} {pid}`: {error}"));
    assert!(status.success(), "`kill -{signal} {pid}` failed: {status}");
}

/// Waits (bounded) until `/proc` shows the process stopped (`true`) or not.
/// Signals are delivered asynchronously; without this, a test could act on a
/// node it believes halted while it is still running. Without `/proc`, or
/// once the process has died, it returns at once.
fn wait_for_stopped(pid: u32, stopped: bool) {
    let deadline = std::time::Instant::now() + SIGNAL_SETTLE_TIMEOUT;
    while std::time::Instant::now() < deadline {
        match process_state(pid) {
            Some('T' | 't') if stopped => return,
            Some('T' | 't') => {}
            Some('Z' | 'X') | None => return,
            Some(_) if !stopped => return,
            Some(_) => {}
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!(
        "process {pid} did not become {} in time",
        if stopped { "stopped" } else { "resumed" }
    );
}

/// The one-letter state of a process from `/proc/<pid>/stat`.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain them.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.trim_start().chars().next()
}
