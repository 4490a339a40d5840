//! What one node says about itself to its peers.

use serde::{Deserialize, Serialize};

use crate::NodeId;

/// One node's own view, served on its internal status route and gathered by any node that
/// answers `GET /api/v1/cluster` or that is deciding whether to initialise the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The node's id.
    pub id: NodeId,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: String,
    /// The node's current term.
    pub term: u64,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// The index of the last entry the node applied.
    pub last_applied: Option<u64>,
    /// Whether the node's log holds a membership, i.e. the cluster has been formed.
    pub initialized: bool,
}

impl NodeStatus {
    /// The status of the local node, read off openraft's metrics.
    pub fn from_metrics(metrics: &openraft::RaftMetrics<NodeId, crate::NodeAddr>) -> Self {
        Self {
            id: metrics.id,
            role: role_name(metrics.state).to_string(),
            term: metrics.current_term,
            leader: metrics.current_leader,
            last_applied: metrics.last_applied.map(|log_id| log_id.index),
            initialized: metrics
                .membership_config
                .membership()
                .nodes()
                .next()
                .is_some(),
        }
    }
}

/// The lower-case name of a Raft role, as the cluster status shows it.
pub fn role_name(state: openraft::ServerState) -> &'static str {
    match state {
        openraft::ServerState::Leader => "leader",
        openraft::ServerState::Follower => "follower",
        openraft::ServerState::Candidate => "candidate",
        openraft::ServerState::Learner => "learner",
        openraft::ServerState::Shutdown => "shutdown",
    }
}
