//! `cluster.toml` as written, and the environment's credentials over it: the shape the parser
//! accepts (every key of docs/configuration.md, which a test holds to it), before anything is
//! checked or defaulted.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use tickd_raft::NodeId;

use crate::credentials::Role;

/// `cluster.toml` as written by people and tools.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClusterFile {
    pub(super) token: Option<String>,
    pub(super) operator_token: Option<String>,
    pub(super) secret: Option<String>,
    pub(super) rabbit_uri: Option<String>,
    pub(super) rabbit_client_uri: Option<String>,
    pub(super) rabbit_ca_file: Option<PathBuf>,
    pub(super) api_hosts: Option<Vec<String>>,
    pub(super) snapshot_every: Option<u64>,
    pub(super) max_clocks: Option<u64>,
    pub(super) max_long_polls: Option<usize>,
    pub(super) unauthenticated_rate_per_second: Option<u32>,
    pub(super) unauthenticated_burst: Option<u32>,
    pub(super) forward_deadline_ms: Option<u64>,
    pub(super) max_clock_offset_ms: Option<u64>,
    pub(super) clock_ttl_ms: Option<u64>,
    pub(super) catch_up_ms: Option<u64>,
    pub(super) http_queue_limit: Option<u64>,
    pub(super) max_deliveries: Option<u32>,
    pub(super) metrics_require_token: Option<bool>,
    pub(super) header_read_timeout_ms: Option<u64>,
    pub(super) request_timeout_ms: Option<u64>,
    pub(super) body_timeout_ms: Option<u64>,
    pub(super) write_timeout_ms: Option<u64>,
    pub(super) api_max_connections: Option<usize>,
    pub(super) api_max_connections_per_address: Option<usize>,
    pub(super) raft_max_connections: Option<usize>,
    pub(super) raft_max_connections_per_address: Option<usize>,
    pub(super) raft_reserved_connections: Option<usize>,
    pub(super) disk_reserve_mb: Option<u64>,
    pub(super) ca_file: Option<PathBuf>,
    pub(super) api_require_client_cert: Option<bool>,
    pub(super) dashboard_dir: Option<PathBuf>,
    pub(super) insecure: Option<bool>,
    pub(super) webhook_allow_private: Option<bool>,
    pub(super) webhook_retry_for_ms: Option<u64>,
    pub(super) webhook_timeout_ms: Option<u64>,
    pub(super) webhook_max_concurrency: Option<usize>,
    pub(super) webhook_max_concurrency_per_receiver: Option<usize>,
    pub(super) webhook_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub(super) node: Vec<NodeEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NodeEntry {
    pub(super) id: NodeId,
    pub(super) api: String,
    pub(super) raft: String,
    pub(super) data_dir: PathBuf,
    pub(super) public_url: Option<String>,
    #[serde(default)]
    pub(super) join: bool,
    #[serde(default)]
    pub(super) dial: BTreeMap<String, String>,
    pub(super) cert_file: Option<PathBuf>,
    pub(super) key_file: Option<PathBuf>,
}

/// What the environment sets over the cluster file: the credentials, which a container
/// platform keeps in its store of secrets rather than in the file it mounts (a Kubernetes
/// Secret as environment variables, beside a ConfigMap holding `cluster.toml`). A variable
/// that is set and not empty wins over the file's key, and is checked as the key would be.
#[derive(Debug, Default, Clone)]
pub struct Environment {
    /// `TICKD_SECRET`, over `secret`.
    pub secret: Option<String>,
    /// `ACCESS_TOKEN`, over `token`.
    pub token: Option<String>,
    /// `OPERATOR_TOKEN`, over `operator_token`.
    pub operator_token: Option<String>,
}

/// The variable that sets the node-to-node secret.
pub(super) const SECRET_VARIABLE: &str = "TICKD_SECRET";

impl Environment {
    /// The variables of this process.
    pub fn read() -> Self {
        let variable = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        Self {
            secret: variable(SECRET_VARIABLE),
            token: variable(Role::Client.variable()),
            operator_token: variable(Role::Operator.variable()),
        }
    }

    /// `file` with the variables set here in place of its keys.
    pub(super) fn over(&self, mut file: ClusterFile) -> ClusterFile {
        let pick = |set: &Option<String>, key: Option<String>| set.clone().or(key);
        file.secret = pick(&self.secret, file.secret);
        file.token = pick(&self.token, file.token);
        file.operator_token = pick(&self.operator_token, file.operator_token);
        file
    }
}
