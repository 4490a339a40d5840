//! The cluster description (`cluster.toml`) and the single-node default, resolved into the
//! [`NodeConfig`] one process runs with.

use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tickd_raft::{NodeAddr, NodeId};

/// Default API address of the embedded single node (SPEC §8).
pub const DEFAULT_API: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9643));
/// Default Raft address of the embedded single node.
pub const DEFAULT_RAFT: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9743));
/// Default data directory of the embedded single node, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "data";
/// Default cap on the number of clocks in a cluster.
pub const DEFAULT_MAX_CLOCKS: u64 = 1_000_000;
/// Default bound on how long a write waits for a leader before the client gets a 503.
pub const DEFAULT_FORWARD_DEADLINE: Duration = Duration::from_secs(5);
/// Default time an active clock may go unconsumed before it is removed (SPEC §6).
pub const DEFAULT_CLOCK_TTL: Duration = Duration::from_secs(120);
/// Default catch-up window for ticks missed while no leader existed (SPEC §7).
pub const DEFAULT_CATCH_UP: Duration = Duration::from_secs(60);
/// Default bound of an http queue, in ticks.
pub const DEFAULT_HTTP_QUEUE_LIMIT: u64 = 1_000;

/// `cluster.toml` as written by people and tools.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    token: Option<String>,
    secret: String,
    rabbit_uri: Option<String>,
    snapshot_every: Option<u64>,
    max_clocks: Option<u64>,
    max_long_polls: Option<usize>,
    forward_deadline_ms: Option<u64>,
    clock_ttl_ms: Option<u64>,
    catch_up_ms: Option<u64>,
    http_queue_limit: Option<u64>,
    metrics_require_token: Option<bool>,
    #[serde(default)]
    node: Vec<NodeEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    id: NodeId,
    api: String,
    raft: String,
    data_dir: PathBuf,
    public_url: Option<String>,
    #[serde(default)]
    join: bool,
    #[serde(default)]
    dial: BTreeMap<String, String>,
}

/// Everything one node needs to run, after defaults and validation.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id.
    pub id: NodeId,
    /// Address the REST API listens on.
    pub api: SocketAddr,
    /// Address the Raft RPCs listen on.
    pub raft: SocketAddr,
    /// This node's data directory.
    pub data_dir: PathBuf,
    /// The externally visible base URL, when links must not be derived from the request.
    pub public_url: Option<String>,
    /// The founding members: the nodes of the file without `join = true`, which form the
    /// cluster by themselves. This node is among them unless it joins.
    pub members: BTreeMap<NodeId, NodeAddr>,
    /// Whether this node joins a running cluster (`join = true`): it never initialises one,
    /// and waits for an operator to add it (`tickd cluster add-node`).
    pub join: bool,
    /// Per peer, the address this node dials instead of the peer's advertised Raft address.
    pub dial: BTreeMap<NodeId, String>,
    /// The configured API token; `None` means "from the environment or generated".
    pub token: Option<String>,
    /// The node-to-node secret; `None` means "generated" (single node only).
    pub secret: Option<String>,
    /// The RabbitMQ URI for the rabbit channel; `None` selects the http channel.
    pub rabbit_uri: Option<String>,
    /// Log entries between snapshots.
    pub snapshot_every: u64,
    /// Cap on clocks per cluster.
    pub max_clocks: u64,
    /// Cap on this node's concurrent long polls; polls over it are answered at once.
    pub max_long_polls: usize,
    /// How long a write may wait for a leader.
    pub forward_deadline: Duration,
    /// Whether `GET /metrics` needs the access token.
    pub metrics_require_token: bool,
    /// The tick engine's settings.
    pub engine: tickd_engine::EngineConfig,
}

/// The engine settings when the cluster file does not set them.
fn default_engine() -> tickd_engine::EngineConfig {
    tickd_engine::EngineConfig {
        clock_ttl: DEFAULT_CLOCK_TTL,
        catch_up: DEFAULT_CATCH_UP,
        http_queue_limit: DEFAULT_HTTP_QUEUE_LIMIT,
    }
}

/// A configuration that cannot be run. Every message names the file and what to change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the cluster file {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("the cluster file {path} is malformed: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The parser's explanation, with line and column.
        message: String,
    },
    /// The file parsed but describes an impossible cluster.
    #[error("the cluster file {path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `--node` names no node of the file.
    #[error("node {id} is not in {path}; the nodes there are {known}")]
    UnknownNode {
        /// The requested id.
        id: NodeId,
        /// The file.
        path: PathBuf,
        /// The ids the file lists.
        known: String,
    },
}

impl NodeConfig {
    /// The embedded default: one node on 127.0.0.1:9643 with its data in `./data`.
    pub fn single_node() -> Self {
        let (api, raft) = (DEFAULT_API, DEFAULT_RAFT);
        let members = BTreeMap::from([(
            1,
            NodeAddr {
                api: api.to_string(),
                raft: raft.to_string(),
            },
        )]);
        Self {
            id: 1,
            api,
            raft,
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            public_url: None,
            members,
            join: false,
            dial: BTreeMap::new(),
            token: None,
            secret: None,
            rabbit_uri: None,
            snapshot_every: tickd_raft::timing::DEFAULT_SNAPSHOT_EVERY,
            max_clocks: DEFAULT_MAX_CLOCKS,
            max_long_polls: tickd_api::polls::DEFAULT_MAX_LONG_POLLS,
            forward_deadline: DEFAULT_FORWARD_DEADLINE,
            metrics_require_token: true,
            engine: default_engine(),
        }
    }

    /// Node `id` of the cluster described in the file at `path`.
    pub fn from_file(path: &Path, id: NodeId) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Unreadable {
            path: path.to_path_buf(),
            source,
        })?;
        let file: ClusterFile = toml::from_str(&text).map_err(|error| ConfigError::Malformed {
            path: path.to_path_buf(),
            message: error.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        resolve(file, id, base).map_err(|problem| match problem {
            Problem::Invalid(message) => ConfigError::Invalid {
                path: path.to_path_buf(),
                message,
            },
            Problem::UnknownNode(known) => ConfigError::UnknownNode {
                id,
                path: path.to_path_buf(),
                known,
            },
        })
    }
}

enum Problem {
    Invalid(String),
    UnknownNode(String),
}

fn resolve(file: ClusterFile, id: NodeId, base: &Path) -> Result<NodeConfig, Problem> {
    if file.node.is_empty() {
        return Err(Problem::Invalid("it lists no [[node]]".into()));
    }
    if file.secret.is_empty() {
        return Err(Problem::Invalid(
            "`secret` is empty; set a node-to-node secret".into(),
        ));
    }
    if file.token.as_deref() == Some("") {
        return Err(Problem::Invalid(
            "`token` is empty; remove it or set a value".into(),
        ));
    }
    let mut ids = HashSet::new();
    let mut addresses = HashSet::new();
    let mut members = BTreeMap::new();
    let mut known = HashSet::new();
    for node in &file.node {
        if !ids.insert(node.id) {
            return Err(Problem::Invalid(format!(
                "node id {} appears twice",
                node.id
            )));
        }
        for (role, address) in [("api", &node.api), ("raft", &node.raft)] {
            let parsed: SocketAddr = address.parse().map_err(|_| {
                Problem::Invalid(format!(
                    "node {}: `{role}` = {address:?} is not an ip:port address",
                    node.id
                ))
            })?;
            if !addresses.insert(parsed) {
                return Err(Problem::Invalid(format!("address {address} is used twice")));
            }
        }
        known.insert(node.id);
        if !node.join {
            members.insert(
                node.id,
                NodeAddr {
                    api: node.api.clone(),
                    raft: node.raft.clone(),
                },
            );
        }
    }
    if members.is_empty() {
        return Err(Problem::Invalid(
            "every [[node]] has `join = true`; the nodes that form the cluster must not".into(),
        ));
    }
    let Some(me) = file.node.iter().find(|node| node.id == id) else {
        let known: Vec<String> = file.node.iter().map(|node| node.id.to_string()).collect();
        return Err(Problem::UnknownNode(known.join(", ")));
    };
    let invalid_address = |what: &str| Problem::Invalid(format!("node {id}: bad {what} address"));
    let mut dial = BTreeMap::new();
    for (peer, address) in &me.dial {
        let listed = peer
            .parse::<NodeId>()
            .ok()
            .filter(|peer| known.contains(peer));
        let Some(peer) = listed else {
            return Err(Problem::Invalid(format!(
                "node {id}: `dial` names {peer:?}, which is not a node id of the file"
            )));
        };
        if address.parse::<SocketAddr>().is_err() {
            return Err(Problem::Invalid(format!(
                "node {id}: `dial` address {address:?} for node {peer} is not an ip:port address"
            )));
        }
        dial.insert(peer, address.clone());
    }
    Ok(NodeConfig {
        id,
        api: me.api.parse().map_err(|_| invalid_address("api"))?,
        raft: me.raft.parse().map_err(|_| invalid_address("raft"))?,
        data_dir: base.join(&me.data_dir),
        public_url: me.public_url.clone(),
        members,
        join: me.join,
        dial,
        token: file.token,
        secret: Some(file.secret),
        rabbit_uri: file.rabbit_uri,
        snapshot_every: file
            .snapshot_every
            .unwrap_or(tickd_raft::timing::DEFAULT_SNAPSHOT_EVERY),
        max_clocks: file.max_clocks.unwrap_or(DEFAULT_MAX_CLOCKS),
        max_long_polls: file
            .max_long_polls
            .unwrap_or(tickd_api::polls::DEFAULT_MAX_LONG_POLLS),
        forward_deadline: file
            .forward_deadline_ms
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_FORWARD_DEADLINE),
        metrics_require_token: file.metrics_require_token.unwrap_or(true),
        engine: tickd_engine::EngineConfig {
            clock_ttl: file
                .clock_ttl_ms
                .map_or(DEFAULT_CLOCK_TTL, Duration::from_millis),
            catch_up: file
                .catch_up_ms
                .map_or(DEFAULT_CATCH_UP, Duration::from_millis),
            http_queue_limit: file.http_queue_limit.unwrap_or(DEFAULT_HTTP_QUEUE_LIMIT),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE_NODES: &str = r#"
        token = "ticktok-zY3wpR"
        secret = "change-me"
        [[node]]
        id = 1
        api = "127.0.0.1:9643"
        raft = "127.0.0.1:9743"
        data_dir = "data/node1"
        [[node]]
        id = 2
        api = "127.0.0.1:9644"
        raft = "127.0.0.1:9744"
        data_dir = "data/node2"
        [[node]]
        id = 3
        api = "127.0.0.1:9645"
        raft = "127.0.0.1:9745"
        data_dir = "data/node3"
    "#;

    fn load(text: &str, id: NodeId) -> Result<NodeConfig, ConfigError> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, text).expect("write the file");
        NodeConfig::from_file(&path, id)
    }

    #[test]
    fn resolves_a_node_of_a_three_node_cluster() {
        let config = load(THREE_NODES, 2).expect("a valid file");
        assert_eq!(config.id, 2);
        assert_eq!(config.api.to_string(), "127.0.0.1:9644");
        assert_eq!(config.members.len(), 3);
        assert!(config.data_dir.ends_with("data/node2"));
        assert!(
            config.data_dir.is_absolute(),
            "relative to the file's directory"
        );
        assert_eq!(config.max_clocks, DEFAULT_MAX_CLOCKS);
        assert!(
            config.metrics_require_token,
            "metrics need the token by default"
        );
        let open = load(
            &THREE_NODES.replace("secret =", "metrics_require_token = false\nsecret ="),
            1,
        )
        .expect("a valid file");
        assert!(!open.metrics_require_token);
    }

    #[test]
    fn refuses_what_cannot_run() {
        let cases = [
            (THREE_NODES.replace("id = 3", "id = 2"), "appears twice"),
            (THREE_NODES.replace("9745", "9744"), "used twice"),
            (
                THREE_NODES.replace("127.0.0.1:9645", "localhost"),
                "not an ip:port",
            ),
            (THREE_NODES.replace("\"change-me\"", "\"\""), "secret"),
            (
                THREE_NODES.replace("data_dir = \"data/node3\"", ""),
                "malformed",
            ),
            (THREE_NODES.replace("token =", "tokne ="), "malformed"),
            ("this is [not toml".to_string(), "malformed"),
        ];
        for (text, expected) in cases {
            let error = load(&text, 1).expect_err(expected).to_string();
            assert!(
                error.contains(expected),
                "{error:?} should mention {expected:?}"
            );
        }
    }

    #[test]
    fn dial_overrides_name_known_peers_and_real_addresses() {
        let with_dial = |table: &str| format!("{THREE_NODES}\n[node.dial]\n{table}\n");
        let config = load(&with_dial("\"1\" = \"127.0.0.1:7001\""), 3).expect("valid");
        assert_eq!(
            config.dial.get(&1).map(String::as_str),
            Some("127.0.0.1:7001")
        );
        let unknown = load(&with_dial("\"9\" = \"127.0.0.1:7001\""), 3).expect_err("node 9");
        assert!(unknown.to_string().contains("not a node id"), "{unknown}");
        let bad = load(&with_dial("\"1\" = \"nowhere\""), 3).expect_err("bad address");
        assert!(bad.to_string().contains("not an ip:port"), "{bad}");
    }

    #[test]
    fn joining_nodes_are_not_founding_members() {
        let four = "\n[[node]]\nid = 4\napi = \"127.0.0.1:9646\"\nraft = \"127.0.0.1:9746\"\n\
                    data_dir = \"data/node4\"\njoin = true\n";
        let text = format!("{THREE_NODES}{four}");
        let joiner = load(&text, 4).expect("node 4 may join");
        assert!(joiner.join);
        assert_eq!(
            joiner.members.keys().copied().collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let founder = load(&text, 1).expect("node 1 founds");
        assert!(!founder.join && !founder.members.contains_key(&4));
        let nobody = THREE_NODES.replace("data_dir = ", "join = true\n        data_dir = ");
        let error = load(&nobody, 1).expect_err("no founding member");
        assert!(error.to_string().contains("join = true"), "{error}");
    }

    #[test]
    fn names_the_known_nodes_for_an_unknown_id() {
        let error = load(THREE_NODES, 7)
            .expect_err("node 7 is not listed")
            .to_string();
        assert!(
            error.contains("node 7") && error.contains("1, 2, 3"),
            "{error}"
        );
    }
}
