//! The `cluster.toml` a test cluster runs from.
//!
//! The harness writes the file itself rather than depending on the node's
//! config types: it tests the file format the way an operator writes it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::cluster::NodeId;
use crate::pki::Identity;

/// The access token of every test cluster unless a test sets another.
pub const TEST_TOKEN: &str = "test-token";

/// The operator token of every test cluster: membership, backup, restore, metrics.
pub const TEST_OPERATOR_TOKEN: &str = "test-operator-token";

/// The node-to-node secret of every test cluster.
pub const TEST_SECRET: &str = "test-secret";

/// A whole `cluster.toml`: what every node of a cluster is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The client access token.
    pub token: String,
    /// The operator token; `None` leaves it out of the file.
    pub operator_token: Option<String>,
    /// The secret that authenticates Raft traffic between nodes.
    pub secret: String,
    /// The RabbitMQ URI; `None` selects the http channel.
    pub rabbit_uri: Option<String>,
    /// Log entries between snapshots; `None` keeps the node's default.
    pub snapshot_every: Option<u64>,
    /// The cap on the number of clocks; `None` keeps the node's default.
    pub max_clocks: Option<u64>,
    /// How long an unconsumed clock lives, in ms; `None` keeps the node's default.
    pub clock_ttl_ms: Option<u64>,
    /// Whether `/metrics` needs the token; `None` keeps the node's default (it does).
    pub metrics_require_token: Option<bool>,
    /// Further top-level keys, each with its value in TOML syntax, written as given.
    pub settings: Vec<(String, String)>,
    /// The cluster CA (`ca_file`); with it every node needs its [`NodeConfig::tls`].
    pub ca_file: Option<PathBuf>,
    /// The members, in the order they are written.
    pub nodes: Vec<NodeConfig>,
}

/// One `[[node]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// The node id, from 1.
    pub id: NodeId,
    /// The HTTP API address.
    pub api: SocketAddr,
    /// The Raft RPC address.
    pub raft: SocketAddr,
    /// The data directory, relative to the directory of the config file.
    pub data_dir: String,
    /// Whether the node joins a running cluster (`join = true`) instead of founding it.
    pub join: bool,
    /// Per peer, the address this node dials instead of the peer's Raft address (the link
    /// proxies of a cluster with network faults).
    pub dial: BTreeMap<NodeId, SocketAddr>,
    /// The node's certificate and key (`cert_file`, `key_file`), under TLS.
    pub tls: Option<Identity>,
}

impl ClusterConfig {
    /// The standard layout of an `n`-node test cluster on 127.0.0.1: node `i`
    /// (from 1) has API port `ports[2(i-1)]`, Raft port `ports[2(i-1)+1]` and
    /// data directory `node<i>`; token and secret are the test constants.
    ///
    /// # Panics
    ///
    /// When fewer than `2n` ports are given.
    pub fn local(n: usize, ports: &[u16]) -> ClusterConfig {
        assert!(
            ports.len() >= 2 * n,
            "{n} nodes need {} ports, got {}",
            2 * n,
            ports.len()
        );
        ClusterConfig::of_listeners(ports.chunks_exact(2).take(n).map(|pair| {
            (
                SocketAddr::from((Ipv4Addr::LOCALHOST, pair[0])),
                SocketAddr::from((Ipv4Addr::LOCALHOST, pair[1])),
            )
        }))
    }

    /// A cluster whose node `i` (from 1) listens on the `i`-th (API, Raft) pair of addresses,
    /// with data directory `node<i>` and the test constants for token and secrets. The
    /// multi-host rig gives each node an address of its own ([`crate::rig`]).
    pub fn of_listeners(
        listeners: impl IntoIterator<Item = (SocketAddr, SocketAddr)>,
    ) -> ClusterConfig {
        let nodes = (1..)
            .zip(listeners)
            .map(|(id, (api, raft))| NodeConfig {
                id,
                api,
                raft,
                data_dir: format!("node{id}"),
                join: false,
                dial: BTreeMap::new(),
                tls: None,
            })
            .collect();
        ClusterConfig {
            token: TEST_TOKEN.to_owned(),
            operator_token: Some(TEST_OPERATOR_TOKEN.to_owned()),
            secret: TEST_SECRET.to_owned(),
            rabbit_uri: None,
            snapshot_every: None,
            max_clocks: None,
            clock_ttl_ms: None,
            metrics_require_token: None,
            settings: Vec::new(),
            ca_file: None,
            nodes,
        }
    }

    /// Renders the file. Optional keys are written only when set.
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail, so the results are ignored.
        let _ = writeln!(out, "token = {}", toml_string(&self.token));
        if let Some(operator) = &self.operator_token {
            let _ = writeln!(out, "operator_token = {}", toml_string(operator));
        }
        let _ = writeln!(out, "secret = {}", toml_string(&self.secret));
        if let Some(uri) = &self.rabbit_uri {
            let _ = writeln!(out, "rabbit_uri = {}", toml_string(uri));
        }
        if let Some(every) = self.snapshot_every {
            let _ = writeln!(out, "snapshot_every = {every}");
        }
        if let Some(max) = self.max_clocks {
            let _ = writeln!(out, "max_clocks = {max}");
        }
        if let Some(ttl) = self.clock_ttl_ms {
            let _ = writeln!(out, "clock_ttl_ms = {ttl}");
        }
        if let Some(required) = self.metrics_require_token {
            let _ = writeln!(out, "metrics_require_token = {required}");
        }
        for (key, value) in &self.settings {
            let _ = writeln!(out, "{key} = {value}");
        }
        if let Some(ca) = &self.ca_file {
            let _ = writeln!(out, "ca_file = {}", toml_path(ca));
        }
        for node in &self.nodes {
            out.push('\n');
            let _ = writeln!(out, "[[node]]");
            let _ = writeln!(out, "id = {}", node.id);
            let _ = writeln!(out, "api = {}", toml_string(&node.api.to_string()));
            let _ = writeln!(out, "raft = {}", toml_string(&node.raft.to_string()));
            let _ = writeln!(out, "data_dir = {}", toml_string(&node.data_dir));
            if node.join {
                let _ = writeln!(out, "join = true");
            }
            if let Some(identity) = &node.tls {
                let _ = writeln!(out, "cert_file = {}", toml_path(&identity.cert));
                let _ = writeln!(out, "key_file = {}", toml_path(&identity.key));
            }
            if !node.dial.is_empty() {
                let _ = writeln!(out, "[node.dial]");
                for (peer, address) in &node.dial {
                    let _ = writeln!(
                        out,
                        "{} = {}",
                        toml_string(&peer.to_string()),
                        toml_string(&address.to_string())
                    );
                }
            }
        }
        out
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_toml())
    }

    /// The member with this id, if any.
    pub fn node(&self, id: NodeId) -> Option<&NodeConfig> {
        self.nodes.iter().find(|node| node.id == id)
    }
}

/// Quotes a path as a TOML string (lossily, for a path that is not UTF-8).
fn toml_path(path: &Path) -> String {
    toml_string(&path.to_string_lossy())
}

/// Quotes `value` as a TOML basic string, escaping what TOML requires.
pub fn toml_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
