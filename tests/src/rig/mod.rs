//! The multi-host rig: each `tickd` node on a host of its own, with its own address, on a
//! private Ethernet segment the test builds and tears down itself.
//!
//! A rig is made of Linux network namespaces joined by veth pairs:
//!
//! ```text
//!   root namespace (the test)        switch namespace              host namespaces
//!   tdrig<K> 10.213.K.254 ───── uplink ─┐
//!                                       br0 ─ h1 ───────────────── eth0 10.213.K.1  (node 1)
//!                                           ├ h2 ───────────────── eth0 10.213.K.2  (node 2)
//!                                           └ h3 ───────────────── eth0 10.213.K.3  (node 3)
//! ```
//!
//! Each node is started with `ip netns exec <host> tickd …` (ip execs, so the child's pid is
//! the node's and the harness's SIGKILL and SIGSTOP reach it) and listens on its host's
//! address; the cluster file names those addresses. The test process reaches every node's API
//! directly through its own link into the bridge. RabbitMQ listens on 127.0.0.1 of the root
//! namespace only, so the rig relays `10.213.K.254:5672` to it, and the nodes' broker URI names
//! the relay.
//!
//! Faults are real: [`Rig::unplug`] takes a host's switch port down (its cable pulled: the
//! host keeps its address, nothing reaches it and nothing leaves it), and [`Rig::cut`] drops
//! the packets between two hosts with nftables inside their namespaces, for partitions that
//! leave the rest of the segment alone. [`Rig::capture`] records everything the bridge
//! forwards.
//!
//! A rig never touches the machine's own network: its addresses are on a /24 of 10.213.0.0/16
//! that no address or route of the root namespace uses, claimed atomically by creating the
//! root link named after it, and `Drop` removes every namespace and link it made,
//! also when the test panics. A test binary killed before that leaves namespaces named after
//! its pid, which the next rig on the machine removes.
//!
//! Creating namespaces needs root and iproute2. Where that is missing, [`Rig::start`] fails
//! the test under `CI=true` and skips it, loudly, otherwise.

mod capture;
mod ip;
pub mod pcap;

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU32, Ordering};

pub use capture::Capture;

use crate::cluster::{NodeHost, NodeId, TestCluster, TestClusterBuilder};
use crate::config::toml_string;
use crate::proxy::LinkProxy;
use crate::{rabbit, tools};

/// The most hosts a rig has (their addresses end in 1 to 5).
pub const MAX_HOSTS: u8 = 5;

/// The last byte of the test process's own address on every rig.
const ROOT_HOST: u8 = 254;

/// The broker's port, on the relay and on the machine's loopback.
const BROKER_PORT: u16 = 5672;

/// Subnets this process has tried, so that two rigs of one test binary start their search at
/// different subnets.
static RIGS_MADE: AtomicU32 = AtomicU32::new(0);

/// One rig; see the module docs. Dropping it removes everything it made.
#[derive(Debug)]
pub struct Rig {
    /// The third byte of the rig's addresses: `10.213.<subnet>.0/24`.
    subnet: u8,
    /// The namespace holding the bridge.
    switch: String,
    /// The namespace of host `i` (from 1) at index `i - 1`.
    hosts: Vec<String>,
    /// The root namespace's link into the bridge.
    root_link: String,
    /// Forwards the rig's broker address to the machine's RabbitMQ; `None` only while the rig
    /// is being built.
    relay: Option<LinkProxy>,
}

/// Why a rig cannot exist on this machine.
#[derive(Debug)]
struct Unavailable(String);

impl Rig {
    /// Builds a rig of `hosts` hosts (at most [`MAX_HOSTS`]) with a relay to the machine's
    /// RabbitMQ. `None` means the machine cannot make network namespaces and the test should
    /// return: that is allowed only when `CI` is not `true`, and said loudly.
    ///
    /// # Panics
    ///
    /// Under `CI=true` when namespaces cannot be made; anywhere when RabbitMQ is not running,
    /// or a step after the first namespace fails (that is a broken machine, not a missing
    /// permission).
    pub async fn start(hosts: u8) -> Option<Rig> {
        assert!(
            (1..=MAX_HOSTS).contains(&hosts),
            "a rig has 1 to {MAX_HOSTS} hosts, not {hosts}"
        );
        let mut rig = match Rig::claim_subnet() {
            Ok(rig) => rig,
            Err(Unavailable(why)) => {
                let message = format!(
                    "the multi-host rig cannot create network namespaces on this machine: {why}. \
                     It needs root and iproute2 (`ip netns`, veth and bridge links)"
                );
                if std::env::var("CI").is_ok_and(|value| value == "true") {
                    panic!("{message}; under CI=true the rig's tests must run");
                }
                // Written to the process's standard error itself, which the test harness does
                // not capture (`eprintln!` in a passing test would be swallowed).
                let _ = writeln!(
                    std::io::stderr(),
                    "\n!!!!! SKIPPED (CI is not true): {message} !!!!!\n"
                );
                return None;
            }
        };
        rig.build_switch();
        for index in 1..=hosts {
            rig.add_host(index);
        }
        rabbit::broker().await;
        let relay = LinkProxy::start(
            rig.root_address_on(BROKER_PORT),
            SocketAddr::from((Ipv4Addr::LOCALHOST, BROKER_PORT)),
        )
        .await
        .unwrap_or_else(|error| panic!("start the rig's relay to RabbitMQ: {error}"));
        rig.relay = Some(relay);
        Some(rig)
    }

    /// Finds a free subnet and claims it: the switch namespace, and the root link into it
    /// (whose name is unique on the machine per subnet, so two rigs can never both create it).
    fn claim_subnet() -> Result<Rig, Unavailable> {
        ip::sweep_leftovers();
        let pid = std::process::id();
        let made = RIGS_MADE.fetch_add(1, Ordering::Relaxed);
        let start = pid.wrapping_mul(31).wrapping_add(made.wrapping_mul(7));
        let mut first = true;
        for attempt in 0..254 {
            // 1 ..= 253: the subnets are 10.213.1.0/24 to 10.213.253.0/24.
            let subnet = u8::try_from(start.wrapping_add(attempt) % 253 + 1).unwrap_or(1);
            let prefix = format!("10.213.{subnet}.0/24");
            match ip::subnet_in_use(&prefix) {
                Ok(false) => {}
                Ok(true) => continue,
                Err(error) => return Err(Unavailable(error)),
            }
            let switch = ip::switch_namespace(pid, subnet);
            if let Err(error) = ip::ip(&["netns", "add", &switch]) {
                if first {
                    return Err(Unavailable(error));
                }
                continue;
            }
            first = false;
            let root_link = ip::root_link(subnet);
            let claimed = ip::ip(&[
                "link",
                "add",
                &root_link,
                "type",
                "veth",
                "peer",
                "name",
                ip::UPLINK,
                "netns",
                &switch,
            ]);
            if claimed.is_err() {
                // Another rig holds this subnet.
                let _ = ip::ip(&["netns", "del", &switch]);
                continue;
            }
            return Ok(Rig {
                subnet,
                switch,
                hosts: Vec::new(),
                root_link,
                relay: None,
            });
        }
        panic!("no free subnet in 10.213.0.0/16 for a rig: remove stale `tdrig*` links");
    }

    /// The bridge, its uplink, and the test's own address.
    fn build_switch(&self) {
        let root_address = format!("{}/24", self.root_address());
        for command in [
            vec!["-n", &self.switch, "link", "set", "lo", "up"],
            vec![
                "-n",
                &self.switch,
                "link",
                "add",
                ip::BRIDGE,
                "type",
                "bridge",
            ],
            vec!["-n", &self.switch, "link", "set", ip::BRIDGE, "up"],
            vec![
                "-n",
                &self.switch,
                "link",
                "set",
                ip::UPLINK,
                "master",
                ip::BRIDGE,
                "up",
            ],
            vec!["addr", "add", &root_address, "dev", &self.root_link],
            vec!["link", "set", &self.root_link, "up"],
        ] {
            must(&command);
        }
    }

    /// Host `index`: its namespace, its cable into the bridge, its address.
    fn add_host(&mut self, index: u8) {
        let namespace = ip::host_namespace(std::process::id(), self.subnet, index);
        must(&["netns", "add", &namespace]);
        self.hosts.push(namespace.clone());
        let port = ip::switch_port(index);
        let address = format!("{}/24", self.address(index));
        for command in [
            vec![
                "-n",
                &self.switch,
                "link",
                "add",
                &port,
                "type",
                "veth",
                "peer",
                "name",
                ip::HOST_LINK,
                "netns",
                &namespace,
            ],
            vec![
                "-n",
                &self.switch,
                "link",
                "set",
                &port,
                "master",
                ip::BRIDGE,
                "up",
            ],
            vec!["-n", &namespace, "link", "set", "lo", "up"],
            vec![
                "-n",
                &namespace,
                "addr",
                "add",
                &address,
                "dev",
                ip::HOST_LINK,
            ],
            vec!["-n", &namespace, "link", "set", ip::HOST_LINK, "up"],
        ] {
            must(&command);
        }
    }

    /// The address of host `index` (from 1).
    pub fn address(&self, index: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, index)
    }

    /// The test process's own address on the rig.
    pub fn root_address(&self) -> Ipv4Addr {
        self.address(ROOT_HOST)
    }

    fn root_address_on(&self, port: u16) -> SocketAddr {
        SocketAddr::from((self.root_address(), port))
    }

    /// The RabbitMQ URI the nodes are given: the relay on the test's own address.
    pub fn broker_uri(&self) -> String {
        format!(
            "amqp://guest:guest@{}/%2f",
            self.root_address_on(BROKER_PORT)
        )
    }

    /// The namespace of node `node`'s host.
    ///
    /// # Panics
    ///
    /// When the rig has no such host.
    pub fn namespace(&self, node: NodeId) -> &str {
        usize::try_from(node)
            .ok()
            .and_then(|node| node.checked_sub(1))
            .and_then(|index| self.hosts.get(index))
            .unwrap_or_else(|| panic!("the rig has no host for node {node}"))
    }

    /// A cluster with one node per host of the rig, node `i` on host `i`, on the rig's broker,
    /// with TLS on: a CA made for the cluster by `tickd certs`, each node's certificate naming
    /// its host's address, HTTPS on the API and mutual TLS between the nodes — what a
    /// multi-machine cluster must run.
    pub fn cluster(&self) -> TestClusterBuilder {
        self.plain_cluster().tls()
    }

    /// The same cluster speaking plain HTTP, which a node off loopback accepts only because
    /// its file says `insecure = true`: the control that shows what TLS hides.
    pub fn plain_cluster(&self) -> TestClusterBuilder {
        let hosts = (1..=self.hosts.len())
            .map(|index| {
                let index = u8::try_from(index).unwrap_or(MAX_HOSTS);
                NodeHost {
                    address: IpAddr::V4(self.address(index)),
                    command_prefix: ["ip", "netns", "exec", self.namespace(index.into())]
                        .map(str::to_owned)
                        .to_vec(),
                }
            })
            .collect();
        TestCluster::builder()
            .nodes(self.hosts.len())
            .hosts(hosts)
            .rabbit_uri(Some(self.broker_uri()))
            // The rig's clients are tests of this machine: they may consume as the nodes do.
            .setting("rabbit_client_uri", toml_string(&self.broker_uri()))
            .setting("insecure", "true")
    }

    /// Whether process `pid` runs in node `node`'s host namespace.
    pub fn runs_on_host(&self, pid: u32, node: NodeId) -> bool {
        let identity = |path: String| std::fs::metadata(path).map(|meta| (meta.dev(), meta.ino()));
        match (
            identity(format!("/proc/{pid}/ns/net")),
            identity(format!("/run/netns/{}", self.namespace(node))),
        ) {
            (Ok(process), Ok(host)) => process == host,
            _ => false,
        }
    }

    /// Pulls node `node`'s cable: its switch port goes down. The host keeps its address and
    /// its sockets; whatever it sends is lost and nothing reaches it, the test included.
    pub fn unplug(&self, node: NodeId) {
        must(&["-n", &self.switch, "link", "set", &port_of(node), "down"]);
    }

    /// Plugs node `node`'s cable back in.
    pub fn plug(&self, node: NodeId) {
        must(&["-n", &self.switch, "link", "set", &port_of(node), "up"]);
    }

    /// Drops every packet between nodes `a` and `b`, both ways, with nftables on each host's
    /// input (so both see silence, not refusals); the rest of the segment is untouched.
    pub fn cut(&self, a: NodeId, b: NodeId) {
        self.drop_input_from(a, b);
        self.drop_input_from(b, a);
    }

    /// Removes every cut ([`cut`](Self::cut)) of every host.
    pub fn mend_cuts(&self) {
        for namespace in &self.hosts {
            // A host without cuts has no table; that is not an error worth reporting.
            let _ = nft(namespace, &["delete", "table", "inet", NFT_TABLE]);
        }
    }

    fn drop_input_from(&self, node: NodeId, from: NodeId) {
        let namespace = self.namespace(node);
        let source = self.address(u8::try_from(from).unwrap_or(0)).to_string();
        for command in [
            vec!["add", "table", "inet", NFT_TABLE],
            vec![
                "add",
                "chain",
                "inet",
                NFT_TABLE,
                "input",
                "{ type filter hook input priority 0 ; }",
            ],
            vec![
                "add", "rule", "inet", NFT_TABLE, "input", "ip", "saddr", &source, "drop",
            ],
        ] {
            if let Err(error) = nft(namespace, &command) {
                panic!("cut node {node} off from node {from}: {error}");
            }
        }
    }

    /// Starts capturing everything the bridge forwards; see [`Capture`].
    ///
    /// # Panics
    ///
    /// When tcpdump is missing or does not start.
    pub fn capture(&self) -> Capture {
        Capture::start(&self.switch, ip::BRIDGE)
    }
}

/// The nftables table the rig's cuts live in, inside a host's namespace.
const NFT_TABLE: &str = "tickd_rig";

/// Runs `nft ARGS` in `namespace`.
fn nft(namespace: &str, args: &[&str]) -> Result<String, String> {
    let nft = tools::require("nft").to_string_lossy().into_owned();
    let mut command = vec!["netns", "exec", namespace, &nft];
    command.extend_from_slice(args);
    ip::ip(&command)
}

/// The switch port of node `node`'s host.
fn port_of(node: NodeId) -> String {
    ip::switch_port(u8::try_from(node).unwrap_or(0))
}

/// Runs `ip ARGS` on a rig that exists; a failure is a broken machine, and panics.
fn must(args: &[&str]) {
    if let Err(error) = ip::ip(args) {
        panic!("building or changing the rig: {error}");
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.relay = None;
        // Deleting the root link deletes its peer; deleting a namespace deletes its links and
        // their peers. A namespace in which a process still runs lives on, unnamed, until the
        // process ends (the cluster kills its nodes before the rig is dropped).
        let mut failures = Vec::new();
        if let Err(error) = ip::ip(&["link", "del", &self.root_link]) {
            failures.push(error);
        }
        for namespace in self.hosts.iter().chain([&self.switch]) {
            if let Err(error) = ip::ip(&["netns", "del", namespace]) {
                failures.push(error);
            }
        }
        if !failures.is_empty() {
            eprintln!(
                "tickd-tests: the rig on 10.213.{}.0/24 left something behind: {failures:?}",
                self.subnet
            );
        }
    }
}
