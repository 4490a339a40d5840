//! What one node says about itself to its peers.

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use tickd_domain::Levels;
use tickd_domain::webhook::FailingReceivers;

use crate::NodeId;
use crate::cluster_clock::{ClusterClock, Verdict};
use crate::unsupported::BINARY_VERSION;
use crate::view::ClusterView;

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
    /// The node's own wall clock (not corrected) when it answered, in milliseconds since the
    /// Unix epoch: what its peers measure their offset from. Absent from a node that
    /// predates clock measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
    /// The node's verdict on its own clock against the majority's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<Verdict>,
    /// The node's binary release. Absent from a v0.1.0 node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The cluster levels the node's binary supports. Absent from a v0.1.0 node, which
    /// supports level 1 only ([`Levels::UNADVERTISED`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levels: Option<Levels>,
    /// The version of the zone database compiled into the node's binary, which calendar
    /// schedules are computed with. Absent from a node that predates them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_database: Option<String>,
    /// The webhook receivers the node's publisher sees failing while it leads. Absent when
    /// none fails, and from a node that predates webhooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_receivers: Option<FailingReceivers>,
}

impl NodeStatus {
    /// The status of the local node, from its view of the cluster.
    pub fn of(view: &ClusterView) -> Self {
        Self {
            id: view.id,
            role: view.role.name().to_string(),
            term: view.term,
            leader: view.leader,
            last_applied: view.last_applied,
            initialized: !view.members.is_empty(),
            wall_ms: None,
            clock: None,
            version: Some(BINARY_VERSION.to_owned()),
            levels: Some(Levels::THIS_BINARY),
            zone_database: Some(tickd_domain::zone_database_version().to_owned()),
            failing_receivers: None,
        }
    }

    /// The levels the node supports, counting one that advertises none as v0.1.0.
    pub fn supported_levels(&self) -> Levels {
        self.levels.unwrap_or(Levels::UNADVERTISED)
    }

    /// The status with the failing receivers of `report`, if any.
    pub fn with_failing_receivers(self, report: FailingReceivers) -> Self {
        Self {
            failing_receivers: (!report.is_empty()).then_some(report),
            ..self
        }
    }

    /// The status with this node's wall clock reading and its clock's verdict.
    pub fn with_clock(self, clock: &ClusterClock) -> Self {
        Self {
            wall_ms: Some(clock.wall_ms()),
            clock: Some(clock.verdict()),
            ..self
        }
    }
}

/// The webhook receivers the leader's engine last reported failing, shared by the replica
/// (which records them) and the node's status route (which serves them), so that any node's
/// cluster status can show them.
#[derive(Clone, Debug)]
pub struct ReceiverReports(watch::Sender<FailingReceivers>);

impl Default for ReceiverReports {
    fn default() -> Self {
        Self(watch::Sender::new(FailingReceivers::default()))
    }
}

impl ReceiverReports {
    /// Replaces the report.
    pub fn set(&self, report: FailingReceivers) {
        self.0.send_replace(report);
    }

    /// The latest report.
    pub fn get(&self) -> FailingReceivers {
        self.0.borrow().clone()
    }
}
