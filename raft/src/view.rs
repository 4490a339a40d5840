//! What the rest of the node sees of consensus: [`ClusterView`], one reading of this node's
//! role, term, leader, membership and applied index, and [`ClusterWatch`], which wakes on
//! every change of any of them (every applied entry included).
//!
//! The API and the engine see openraft only through these and [`crate::Replica`]: its
//! metrics type, its server states and its log ids stay inside this crate, so that an
//! openraft upgrade, or a change of what tickd reads from it, touches one crate.

use std::collections::{BTreeMap, BTreeSet};

use openraft::error::Fatal;
use openraft::{RaftMetrics, ServerState};
use tokio::sync::watch;

use crate::{NodeAddr, NodeId};

/// openraft's own reading, which [`ClusterView`] and [`ClusterWatch`] translate.
type Metrics = RaftMetrics<NodeId, NodeAddr>;

/// This node's part in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// It leads: it proposes, and it fires ticks.
    Leader,
    /// A voter following a leader (or waiting for one).
    Follower,
    /// A voter campaigning to lead.
    Candidate,
    /// A member that replicates but does not vote (a node being added).
    Learner,
    /// Its consensus core has stopped (shutdown, a halt or a storage failure).
    Shutdown,
}

impl Role {
    /// The lower-case name the cluster status shows.
    pub fn name(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Learner => "learner",
            Role::Shutdown => "shutdown",
        }
    }
}

impl From<ServerState> for Role {
    fn from(state: ServerState) -> Self {
        match state {
            ServerState::Leader => Role::Leader,
            ServerState::Follower => Role::Follower,
            ServerState::Candidate => Role::Candidate,
            ServerState::Learner => Role::Learner,
            ServerState::Shutdown => Role::Shutdown,
        }
    }
}

/// Where an entry sits in the log: the term that wrote it and its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPosition {
    /// The term of the leader that wrote the entry.
    pub term: u64,
    /// The entry's index.
    pub index: u64,
}

/// This node's view of the cluster at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    /// This node's id.
    pub id: NodeId,
    /// This node's role.
    pub role: Role,
    /// This node's current term.
    pub term: u64,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// The members in force (voters and learners) and their addresses; empty until the
    /// cluster has formed.
    pub members: BTreeMap<NodeId, NodeAddr>,
    /// The voters among them.
    pub voters: BTreeSet<NodeId>,
    /// Where the membership in force was written: a change of membership is a new position.
    pub membership_at: Option<LogPosition>,
    /// The index of the last entry this node applied.
    pub last_applied: Option<u64>,
    /// Whether the consensus core runs: false once it has stopped, in an orderly way (a
    /// halted node, a shutdown) or on an error.
    pub running: bool,
    /// Why this node is failing: its consensus core stopped on an error (a storage fault), or
    /// a task of the node died (see `Replica::mark_failed`); it is about to exit. `None`
    /// while it runs and after an orderly shutdown.
    pub failure: Option<String>,
}

impl ClusterView {
    pub(crate) fn of(metrics: &Metrics) -> Self {
        let membership = metrics.membership_config.membership();
        Self {
            id: metrics.id,
            role: metrics.state.into(),
            term: metrics.current_term,
            leader: metrics.current_leader,
            members: membership
                .nodes()
                .map(|(id, node)| (*id, node.clone()))
                .collect(),
            voters: membership.voter_ids().collect(),
            membership_at: metrics
                .membership_config
                .log_id()
                .map(|log_id| LogPosition {
                    term: log_id.leader_id.term,
                    index: log_id.index,
                }),
            last_applied: metrics.last_applied.map(|log_id| log_id.index),
            running: metrics.running_state.is_ok(),
            failure: failure_of(&metrics.running_state).map(|fatal| fatal.to_string()),
        }
    }

    /// Whether this node belongs to the membership in force.
    pub fn is_member(&self) -> bool {
        self.members.contains_key(&self.id)
    }
}

/// The consensus core has stopped for good: no view will change again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("this node's consensus core has stopped")]
pub struct CoreStopped;

/// Wakes on every change of this node's [`ClusterView`]: a role, a term, a leader, a
/// membership or an applied entry.
pub struct ClusterWatch {
    metrics: watch::Receiver<Metrics>,
}

impl ClusterWatch {
    pub(crate) fn new(metrics: watch::Receiver<Metrics>) -> Self {
        Self { metrics }
    }

    /// The term in which this node leads, if it does, read without copying the membership
    /// (a loop that runs on every applied entry asks it); [`Self::changed`] then waits for the
    /// next change after this look.
    pub fn leading_term(&mut self) -> Option<u64> {
        let metrics = self.metrics.borrow_and_update();
        (metrics.state == ServerState::Leader).then_some(metrics.current_term)
    }

    /// Waits for the next change since the last look.
    pub async fn changed(&mut self) -> Result<(), CoreStopped> {
        self.metrics.changed().await.map_err(|_| CoreStopped)
    }
}

/// The core's failure in a running state: an error other than an orderly stop.
pub(crate) fn failure_of(running: &Result<(), Fatal<NodeId>>) -> Option<Fatal<NodeId>> {
    match running {
        Ok(()) | Err(Fatal::Stopped) => None,
        Err(fatal) => Some(fatal.clone()),
    }
}
