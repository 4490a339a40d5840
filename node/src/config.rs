//! The cluster description (`cluster.toml`) and the single-node default, resolved into the
//! [`NodeConfig`] one process runs with.

use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tickd_api::strangers::StrangerQuota;
use tickd_domain::leases::DEFAULT_MAX_DELIVERIES;
use tickd_raft::cluster_clock::DEFAULT_MAX_CLOCK_OFFSET;
use tickd_raft::{NodeAddr, NodeId};

use crate::listener::{self, ListenerLimits};
use crate::tls::TlsFiles;

mod checks;
mod limits;
mod links;
mod schema;
pub mod webhook;

use checks::{
    check_credentials, check_exposure, check_host_port, check_operator_token, check_peer_exposure,
    max_clock_offset, max_deliveries,
};
use limits::{default_limits, listener_limits, stranger_quota};
pub use schema::Environment;
use schema::{ClusterFile, NodeEntry, SECRET_VARIABLE};
pub use webhook::WebhookConfig;

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
/// Default free space, in MiB, below which a node refuses new clocks: room for a snapshot of
/// a large registry and the log behind it.
pub const DEFAULT_DISK_RESERVE_MB: u64 = 128;
/// Bytes in a MiB.
const MIB: u64 = 1 << 20;

/// Everything one node needs to run, after defaults and validation.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id.
    pub id: NodeId,
    /// Address the REST API listens on: `api_address` resolved.
    pub api: SocketAddr,
    /// Address the Raft RPCs listen on: `raft_address` resolved.
    pub raft: SocketAddr,
    /// The API address as the file writes it (`host:port`, the host a name or an IP).
    pub api_address: String,
    /// The Raft address as the file writes it: what peers dial, what certificates name.
    pub raft_address: String,
    /// The TLS files of this node; `None` runs plain HTTP.
    pub tls: Option<TlsFiles>,
    /// This node's data directory.
    pub data_dir: PathBuf,
    /// The externally visible base URL, when links must not be derived from the request.
    pub public_url: Option<String>,
    /// The `Host` headers links may be built on when there is no public URL (see [`links`]).
    pub link_hosts: tickd_api::LinkHosts,
    /// The founding members: the nodes of the file without `join = true`, which form the
    /// cluster by themselves. This node is among them unless it joins.
    pub members: BTreeMap<NodeId, NodeAddr>,
    /// Every node of the cluster file, founders and joiners: whom a node that belongs to no
    /// membership yet accepts on its Raft port under mutual TLS.
    pub listed: BTreeMap<NodeId, NodeAddr>,
    /// Whether this node joins a running cluster (`join = true`): it never initialises one,
    /// and waits for an operator to add it (`tickd cluster add-node`).
    pub join: bool,
    /// Per peer, the address this node dials instead of the peer's advertised Raft address.
    pub dial: BTreeMap<NodeId, String>,
    /// The configured API token; `None` means "from the environment or generated".
    pub token: Option<String>,
    /// The configured operator token; `None` means "from the environment or generated".
    pub operator_token: Option<String>,
    /// The node-to-node secret; `None` means "generated" (single node only).
    pub secret: Option<String>,
    /// The RabbitMQ URI for the rabbit channel; `None` selects the http channel.
    pub rabbit_uri: Option<String>,
    /// The AMQP URI handed to clients in their channel, when it is not `rabbit_uri`: clients
    /// get credentials of their own instead of the node's (see [`crate::broker::client_uri`]).
    pub rabbit_client_uri: Option<String>,
    /// Certificates trusted for an `amqps://` broker beside the system's roots.
    pub rabbit_ca_file: Option<PathBuf>,
    /// Log entries between snapshots.
    pub snapshot_every: u64,
    /// Cap on clocks per cluster.
    pub max_clocks: u64,
    /// Cap on this node's concurrent long polls; polls over it are answered at once.
    pub max_long_polls: usize,
    /// How many times a leased tick is handed out before it is given up.
    pub max_deliveries: u32,
    /// How many requests without a valid token one client address may send.
    pub strangers: StrangerQuota,
    /// How long a write may wait for a leader.
    pub forward_deadline: Duration,
    /// How far this node's clock may be from the majority's before it stops campaigning and
    /// firing ticks (`tickd_raft::cluster_clock`).
    pub max_clock_offset: Duration,
    /// Whether `GET /metrics` needs the access token.
    pub metrics_require_token: bool,
    /// Timeouts and connection caps of the REST API listener.
    pub api_limits: ListenerLimits,
    /// Timeouts and connection caps of the Raft listener, with the members' reserve.
    pub raft_limits: ListenerLimits,
    /// Free bytes below which the node refuses new clocks.
    pub disk_reserve_bytes: u64,
    /// A folder served at `/` (Ticktok's dashboard build), holding an `index.html`.
    pub dashboard_dir: Option<PathBuf>,
    /// The tick engine's settings.
    pub engine: tickd_engine::EngineConfig,
    /// The webhook channel's settings.
    pub webhook: WebhookConfig,
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
            api_address: api.to_string(),
            raft_address: raft.to_string(),
            tls: None,
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            public_url: None,
            link_hosts: tickd_api::LinkHosts::Any,
            members: members.clone(),
            listed: members,
            join: false,
            dial: BTreeMap::new(),
            token: None,
            operator_token: None,
            secret: None,
            rabbit_uri: None,
            rabbit_client_uri: None,
            rabbit_ca_file: None,
            snapshot_every: tickd_raft::timing::DEFAULT_SNAPSHOT_EVERY,
            max_clocks: DEFAULT_MAX_CLOCKS,
            max_long_polls: tickd_api::polls::DEFAULT_MAX_LONG_POLLS,
            max_deliveries: DEFAULT_MAX_DELIVERIES,
            strangers: StrangerQuota::default(),
            forward_deadline: DEFAULT_FORWARD_DEADLINE,
            max_clock_offset: DEFAULT_MAX_CLOCK_OFFSET,
            metrics_require_token: true,
            api_limits: default_limits(
                listener::DEFAULT_API_MAX_CONNECTIONS,
                listener::DEFAULT_API_MAX_CONNECTIONS_PER_ADDRESS,
                0,
                HashSet::new(),
            ),
            raft_limits: default_limits(
                listener::DEFAULT_RAFT_MAX_CONNECTIONS,
                listener::DEFAULT_RAFT_MAX_CONNECTIONS_PER_ADDRESS,
                listener::DEFAULT_RAFT_RESERVED_FOR_MEMBERS,
                HashSet::from([raft.ip()]),
            ),
            disk_reserve_bytes: DEFAULT_DISK_RESERVE_MB * MIB,
            dashboard_dir: None,
            engine: default_engine(),
            webhook: WebhookConfig::default(),
        }
    }

    /// Node `id` of the cluster described in the file at `path`, with the credentials the
    /// environment sets in place of the file's.
    pub fn from_file(
        path: &Path,
        id: NodeId,
        environment: &Environment,
    ) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Unreadable {
            path: path.to_path_buf(),
            source,
        })?;
        let file: ClusterFile = toml::from_str(&text).map_err(|error| ConfigError::Malformed {
            path: path.to_path_buf(),
            message: error.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        resolve(environment.over(file), id, base).map_err(|problem| match problem {
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

/// The socket addresses `host:port` resolves to (a DNS lookup for a name).
fn lookup(address: &str) -> Result<Vec<SocketAddr>, Problem> {
    address
        .to_socket_addrs()
        .map(Iterator::collect)
        .map_err(|error| Problem::Invalid(format!("cannot resolve {address:?}: {error}")))
}

/// This node's TLS files: all of them when the file names a CA, none otherwise. Paths are
/// relative to the cluster file's directory.
fn tls_files(file: &ClusterFile, me: &NodeEntry, base: &Path) -> Result<Option<TlsFiles>, Problem> {
    let id = me.id;
    match (&file.ca_file, &me.cert_file, &me.key_file) {
        (Some(ca), Some(cert), Some(key)) => Ok(Some(TlsFiles {
            ca: base.join(ca),
            cert: base.join(cert),
            key: base.join(key),
            api_require_client_cert: file.api_require_client_cert.unwrap_or(false),
        })),
        (Some(_), _, _) => Err(Problem::Invalid(format!(
            "`ca_file` turns TLS on, but node {id} lacks `cert_file` or `key_file`: make them \
             with `tickd certs create-node --id {id} --host <its host>` and name them in its \
             [[node]] table"
        ))),
        (None, None, None) if file.api_require_client_cert == Some(true) => Err(Problem::Invalid(
            "`api_require_client_cert` needs TLS: set `ca_file` and each node's \
                 `cert_file` and `key_file`"
                .into(),
        )),
        (None, None, None) => Ok(None),
        (None, _, _) => Err(Problem::Invalid(format!(
            "node {id} names a certificate or key but the file sets no `ca_file`: TLS needs \
             the cluster CA too (`tickd certs create-ca`)"
        ))),
    }
}

/// Why a file cannot be run: what the error message says, or an id the file does not list.
enum Problem {
    Invalid(String),
    UnknownNode(String),
}

fn resolve(file: ClusterFile, id: NodeId, base: &Path) -> Result<NodeConfig, Problem> {
    if file.node.is_empty() {
        return Err(Problem::Invalid("it lists no [[node]]".into()));
    }
    let secret = match file.secret.as_deref() {
        None => {
            return Err(Problem::Invalid(format!(
                "it sets no `secret`: set a node-to-node secret, the same for every node, as \
                 `secret` or in the environment as {SECRET_VARIABLE}"
            )));
        }
        Some("") => {
            return Err(Problem::Invalid(
                "`secret` is empty; set a node-to-node secret".into(),
            ));
        }
        Some(secret) => secret.to_owned(),
    };
    if file.token.as_deref() == Some("") {
        return Err(Problem::Invalid(
            "`token` is empty; remove it or set a value".into(),
        ));
    }
    let mut ids = HashSet::new();
    let mut addresses = HashSet::new();
    // The first address of the file that is, or may be, off loopback.
    let mut exposed: Option<String> = None;
    let mut member_ips = HashSet::new();
    let mut members = BTreeMap::new();
    let mut listed = BTreeMap::new();
    let mut known = HashSet::new();
    for node in &file.node {
        if !ids.insert(node.id) {
            return Err(Problem::Invalid(format!(
                "node id {} appears twice",
                node.id
            )));
        }
        for (role, address) in [("api", &node.api), ("raft", &node.raft)] {
            check_host_port(address).map_err(|why| {
                Problem::Invalid(format!("node {}: `{role}` = {address:?} {why}", node.id))
            })?;
            if !addresses.insert(address.to_ascii_lowercase()) {
                return Err(Problem::Invalid(format!("address {address} is used twice")));
            }
            // A peer's name that does not resolve here yet (its DNS record comes later) only
            // keeps it out of the Raft listener's reserve; this node's own must resolve below.
            let resolved = lookup(address).unwrap_or_default();
            if resolved.is_empty() || resolved.iter().any(|ip| !ip.ip().is_loopback()) {
                exposed.get_or_insert_with(|| address.clone());
            }
            member_ips.extend(resolved.iter().map(|ip| ip.ip().to_canonical()));
        }
        known.insert(node.id);
        let address = NodeAddr {
            api: node.api.clone(),
            raft: node.raft.clone(),
        };
        if !node.join {
            members.insert(node.id, address.clone());
        }
        listed.insert(node.id, address);
    }
    check_credentials(&file, exposed.as_deref())?;
    check_operator_token(&file)?;
    if members.is_empty() {
        return Err(Problem::Invalid(
            "every [[node]] has `join = true`; the nodes that form the cluster must not".into(),
        ));
    }
    let Some(me) = file.node.iter().find(|node| node.id == id) else {
        let known: Vec<String> = file.node.iter().map(|node| node.id.to_string()).collect();
        return Err(Problem::UnknownNode(known.join(", ")));
    };
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
        check_host_port(address).map_err(|why| {
            Problem::Invalid(format!(
                "node {id}: `dial` address {address:?} for node {peer} {why}"
            ))
        })?;
        dial.insert(peer, address.clone());
    }
    let forward_deadline = file
        .forward_deadline_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_FORWARD_DEADLINE);
    let (api_limits, raft_limits) = listener_limits(&file, member_ips, forward_deadline)?;
    let bind = |role: &str, address: &str| {
        lookup(address)?.into_iter().next().ok_or_else(|| {
            Problem::Invalid(format!(
                "node {id}: `{role}` = {address:?} resolves to no address"
            ))
        })
    };
    let api = bind("api", &me.api)?;
    let raft = bind("raft", &me.raft)?;
    let tls = tls_files(&file, me, base)?;
    check_exposure(&file, id, &tls, [(&me.api, api), (&me.raft, raft)])?;
    let dialled = listed
        .iter()
        .filter(|(peer, _)| **peer != id)
        .map(|(peer, node)| (*peer, dial.get(peer).unwrap_or(&node.raft)));
    check_peer_exposure(&file, id, &tls, dialled)?;
    // With a public URL, links never use the Host header.
    let link_hosts = match &me.public_url {
        Some(_) => tickd_api::LinkHosts::Any,
        None => links::link_hosts(
            file.api_hosts.as_deref(),
            file.node.iter().map(|node| &node.api),
            api,
        )
        .map_err(|why| Problem::Invalid(format!("node {id}: {why}")))?,
    };
    let strangers = stranger_quota(&file)?;
    let max_clock_offset = max_clock_offset(&file)?;
    let max_deliveries = max_deliveries(&file)?;
    let webhook = webhook::settings(&file, base).map_err(Problem::Invalid)?;
    let dashboard_dir = file.dashboard_dir.as_ref().map(|dir| base.join(dir));
    if let Some(dir) = &dashboard_dir {
        tickd_api::dashboard::folder::check(dir)
            .map_err(|error| Problem::Invalid(error.to_string()))?;
    }
    Ok(NodeConfig {
        id,
        api,
        raft,
        api_address: me.api.clone(),
        raft_address: me.raft.clone(),
        tls,
        data_dir: base.join(&me.data_dir),
        public_url: me.public_url.clone(),
        link_hosts,
        members,
        listed,
        join: me.join,
        dial,
        token: file.token,
        operator_token: file.operator_token,
        secret: Some(secret),
        rabbit_uri: file.rabbit_uri,
        rabbit_client_uri: file.rabbit_client_uri,
        rabbit_ca_file: file.rabbit_ca_file.as_ref().map(|path| base.join(path)),
        dashboard_dir,
        snapshot_every: file
            .snapshot_every
            .unwrap_or(tickd_raft::timing::DEFAULT_SNAPSHOT_EVERY),
        max_clocks: file.max_clocks.unwrap_or(DEFAULT_MAX_CLOCKS),
        max_long_polls: file
            .max_long_polls
            .unwrap_or(tickd_api::polls::DEFAULT_MAX_LONG_POLLS),
        max_deliveries,
        strangers,
        forward_deadline,
        max_clock_offset,
        metrics_require_token: file.metrics_require_token.unwrap_or(true),
        api_limits,
        raft_limits,
        disk_reserve_bytes: file
            .disk_reserve_mb
            .unwrap_or(DEFAULT_DISK_RESERVE_MB)
            .checked_mul(MIB)
            .ok_or_else(|| {
                Problem::Invalid("`disk_reserve_mb` is larger than any disk".to_owned())
            })?,
        engine: tickd_engine::EngineConfig {
            clock_ttl: file
                .clock_ttl_ms
                .map_or(DEFAULT_CLOCK_TTL, Duration::from_millis),
            catch_up: file
                .catch_up_ms
                .map_or(DEFAULT_CATCH_UP, Duration::from_millis),
            http_queue_limit: file.http_queue_limit.unwrap_or(DEFAULT_HTTP_QUEUE_LIMIT),
        },
        webhook,
    })
}

#[cfg(test)]
mod tests;
