//! The type configuration that binds openraft to tickd's domain.

use std::fmt;

use serde::{Deserialize, Serialize};
use tickd_domain::{Command, Outcome};

/// Node ids are the small integers of `cluster.toml`.
pub type NodeId = u64;

/// Where a member node can be reached.
///
/// Both addresses are part of the Raft membership, so the membership log entry is the single
/// source of truth for routing: a follower forwards writes to the leader's `raft` address and
/// the cluster status shows every node's `api` address, without a separate discovery service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddr {
    /// `host:port` of the REST API.
    pub api: String,
    /// `host:port` of the Raft RPC and internal routes.
    pub raft: String,
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "api={} raft={}", self.api, self.raft)
    }
}

/// What applying one log entry produced.
///
/// Blank and membership entries have no client waiting for them, so they produce no outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The registry's answer to a client command; `None` for Raft's own entries.
    pub outcome: Option<Outcome>,
    /// The log index of the entry, so that a node whose write was forwarded can name the entry
    /// in its trace. Absent in answers from a node that predates it.
    #[serde(default)]
    pub index: Option<u64>,
}

openraft::declare_raft_types!(
    /// tickd's Raft types: commands of the clock registry, replicated between nodes addressed
    /// by [`NodeAddr`], with snapshots as files (a large one is never in memory at once).
    pub TypeConfig:
        D = Command,
        R = Response,
        NodeId = NodeId,
        Node = NodeAddr,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);
