//! Changing who belongs to the cluster at runtime: add a node, remove a node.
//!
//! Both run on the leader, because only the leader can propose a membership entry; a follower
//! forwards the request to the leader's [`MEMBERSHIP_PATH`](crate::network::MEMBERSHIP_PATH)
//! route (see [`Replica::change_membership`](crate::Replica::change_membership)).
//!
//! * **Add** follows the learner-first rule: the new node is added as a learner and the leader
//!   waits, bounded by [`CATCH_UP_TIMEOUT`], until it has replicated the log (or received a
//!   snapshot); only then does openraft's `change_membership` make it a voter, through a
//!   joint configuration. A node that has not caught up never counts toward a quorum, so a
//!   slow newcomer cannot stall commits. The node must be running before it is added: the
//!   leader asks it who it is first, so that a typo in an address fails at once, and that
//!   question is a challenge the node must answer with a proof of the cluster secret
//!   ([`crate::proof`]): nothing secret is sent to an address before it has proven itself.
//! * **Remove** takes a voter out through a joint configuration as well (openraft's
//!   `change_membership` commits `C(old, new)` and then `C(new)`). Removing the leader is
//!   allowed: it keeps leading until `C(new)` commits, then steps down, and the remaining
//!   voters elect a new leader. A learner is simply dropped.
//!
//! Every refusal is decided before anything is proposed, so a refused change changes nothing.
//! Both changes are idempotent where a retry may repeat them: adding a voter that is already
//! a voter at the same addresses succeeds without a new entry, and adding a learner again
//! resumes the wait for it to catch up.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::error::{ClientWriteError, ForwardToLeader, RaftError};
use openraft::{ChangeMembers, Membership, ServerState};
use serde::{Deserialize, Serialize};

use crate::network::PeerTransport;
use crate::proof::Challenge;
use crate::{NodeAddr, NodeId, Raft};

/// How long the leader waits for a new learner to catch up before giving up on promoting it.
/// A snapshot of a large registry over a slow link takes seconds, not minutes.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the new node may take to say who it is.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A requested change of the membership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipChange {
    /// Make node `id`, reachable at `node`, a voter.
    Add {
        /// The new node's id.
        id: NodeId,
        /// Its API and Raft addresses.
        node: NodeAddr,
    },
    /// Take node `id` out of the cluster.
    Remove {
        /// The node to remove.
        id: NodeId,
    },
}

/// The membership after a change, as the leader committed it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Members {
    /// The nodes that vote.
    pub voters: BTreeMap<NodeId, NodeAddr>,
    /// The nodes that receive the log without voting (a node being added).
    pub learners: BTreeMap<NodeId, NodeAddr>,
}

impl Members {
    /// The members of an openraft membership config.
    pub fn of(membership: &Membership<NodeId, NodeAddr>) -> Self {
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let (voters, learners) = membership
            .nodes()
            .map(|(id, node)| (*id, node.clone()))
            .partition(|(id, _)| voters.contains(id));
        Self { voters, learners }
    }
}

/// Why the leader refused a change. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum MembershipError {
    /// The id is taken by a member with other addresses.
    #[error(
        "node id {id} is already a member at {existing}; pick an unused id, or remove node {id} \
         first if it is being replaced"
    )]
    IdTaken {
        /// The requested id.
        id: NodeId,
        /// The member's addresses.
        existing: NodeAddr,
    },
    /// One of the new node's addresses belongs to another member.
    #[error("address {address} already belongs to node {owner}")]
    AddressTaken {
        /// The address in conflict.
        address: String,
        /// The member that has it.
        owner: NodeId,
    },
    /// The node to remove is not a member.
    #[error("node {id} is not a member of the cluster; the members are {members}")]
    UnknownNode {
        /// The requested id.
        id: NodeId,
        /// The members' ids, comma-separated.
        members: String,
    },
    /// Removing the node would leave no voter.
    #[error("node {id} is the last voter; a cluster needs at least one, so it cannot be removed")]
    LastVoter {
        /// The requested id.
        id: NodeId,
    },
    /// The new node does not answer on its Raft address.
    #[error(
        "node {id} does not answer on its Raft address {address} ({reason}); start it first \
         (a node that is to join has `join = true` in its cluster file), then add it"
    )]
    Unreachable {
        /// The requested id.
        id: NodeId,
        /// The Raft address that was tried.
        address: String,
        /// What the transport reported.
        reason: String,
    },
    /// What answers on the new node's Raft address does not prove it holds the cluster secret.
    #[error(
        "the node at {address} did not prove it belongs to this cluster: {reason}; nothing was \
         sent to it. Check that node {id} runs with this cluster's `secret` and advertises \
         this Raft address"
    )]
    Unproven {
        /// The requested id.
        id: NodeId,
        /// The Raft address that was tried.
        address: String,
        /// Why the proof failed.
        reason: String,
    },
    /// Another node answers on the new node's Raft address.
    #[error("the node at {address} is node {actual}, not node {id}; check the id and the address")]
    WrongNode {
        /// The requested id.
        id: NodeId,
        /// The Raft address that was tried.
        address: String,
        /// The id the node there reports.
        actual: NodeId,
    },
    /// The new node was added as a learner but did not catch up in time.
    #[error(
        "node {id} was added as a learner but did not catch up with the log within {} s; check \
         its log, then add it again to resume, or remove it",
        CATCH_UP_TIMEOUT.as_secs()
    )]
    NotCaughtUp {
        /// The requested id.
        id: NodeId,
    },
    /// openraft refused the change (typically: the previous change is still being committed).
    #[error("the membership cannot change now: {reason}; retry in a moment")]
    NotNow {
        /// openraft's explanation.
        reason: String,
    },
}

/// What one attempt on this node came to.
pub(crate) enum Step {
    /// The change was made or refused.
    Done(Result<Members, MembershipError>),
    /// This node does not lead; the named node might.
    Forward(ForwardToLeader<NodeId, NodeAddr>),
    /// The attempt failed for a reason that may pass (leadership changed mid-way).
    Retry(String),
    /// The local Raft node has stopped.
    Stopped(String),
}

/// Applies `change` if this node leads; never forwards.
pub(crate) async fn change_here(
    raft: &Raft,
    transport: &PeerTransport,
    change: MembershipChange,
) -> Step {
    let (membership, forward) = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership().clone();
        let leading = metrics.state == ServerState::Leader;
        let forward = (!leading).then(|| {
            let leader = metrics.current_leader;
            let node = leader.and_then(|id| membership.get_node(&id).cloned());
            ForwardToLeader {
                leader_id: leader,
                leader_node: node,
            }
        });
        (membership, forward)
    };
    if let Some(forward) = forward {
        return Step::Forward(forward);
    }
    match change {
        MembershipChange::Add { id, node } => add(raft, transport, &membership, id, node).await,
        MembershipChange::Remove { id } => remove(raft, &membership, id).await,
    }
}

async fn add(
    raft: &Raft,
    transport: &PeerTransport,
    membership: &Membership<NodeId, NodeAddr>,
    id: NodeId,
    node: NodeAddr,
) -> Step {
    if let Some(existing) = membership.get_node(&id) {
        if *existing != node {
            return refused(MembershipError::IdTaken {
                id,
                existing: existing.clone(),
            });
        }
        if membership.voter_ids().any(|voter| voter == id) {
            return Step::Done(Ok(Members::of(membership)));
        }
    }
    let taken = membership.nodes().find_map(|(owner, other)| {
        let clash = [&node.api, &node.raft]
            .into_iter()
            .find(|address| [&other.api, &other.raft].contains(address));
        clash
            .filter(|_| *owner != id)
            .map(|address| (*owner, address.clone()))
    });
    if let Some((owner, address)) = taken {
        return refused(MembershipError::AddressTaken { address, owner });
    }
    let address = transport.address_of(id, &node).to_string();
    // The first contact carries no credential: the node proves it holds the secret before
    // any request that carries it (or the log) goes to its address.
    let challenge = Challenge::new();
    let status = match transport
        .challenge(id, &address, &challenge, PROBE_TIMEOUT)
        .await
    {
        Err(error) => {
            // The caller learns what kind of failure it was, never what the address sent.
            tracing::warn!(node = id, %address, error = %with_causes(&error), "a node to add did not answer its challenge");
            return refused(MembershipError::Unreachable {
                id,
                address,
                reason: error.summary(),
            });
        }
        Ok(proof) => match proof.verify(transport.secret(), &challenge, &node.raft) {
            Ok(()) => proof.status,
            Err(error) => {
                tracing::warn!(node = id, %address, %error, "a node to add failed its proof");
                return refused(MembershipError::Unproven {
                    id,
                    address,
                    reason: error.to_string(),
                });
            }
        },
    };
    if status.id != id {
        return refused(MembershipError::WrongNode {
            id,
            address,
            actual: status.id,
        });
    }
    tracing::info!(node = id, %node, "adding a learner");
    match tokio::time::timeout(CATCH_UP_TIMEOUT, raft.add_learner(id, node, true)).await {
        Err(_) => return refused(MembershipError::NotCaughtUp { id }),
        Ok(Err(error)) => return from_write_error(error),
        Ok(Ok(_)) => {}
    }
    tracing::info!(node = id, "the learner caught up; making it a voter");
    let promote = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
    match raft.change_membership(promote, false).await {
        Ok(written) => committed(written.membership),
        Err(error) => from_write_error(error),
    }
}

async fn remove(raft: &Raft, membership: &Membership<NodeId, NodeAddr>, id: NodeId) -> Step {
    if membership.get_node(&id).is_none() {
        let members: Vec<String> = membership.nodes().map(|(id, _)| id.to_string()).collect();
        return refused(MembershipError::UnknownNode {
            id,
            members: members.join(", "),
        });
    }
    let ids = BTreeSet::from([id]);
    let change = if membership.voter_ids().any(|voter| voter == id) {
        if membership.voter_ids().all(|voter| voter == id) {
            return refused(MembershipError::LastVoter { id });
        }
        ChangeMembers::RemoveVoters(ids)
    } else {
        ChangeMembers::RemoveNodes(ids)
    };
    tracing::info!(node = id, "removing a member");
    match raft.change_membership(change, false).await {
        Ok(written) => committed(written.membership),
        Err(error) => from_write_error(error),
    }
}

/// An error and its chain of causes on one line ("… : Connection refused"), so that the
/// operator sees the root cause, not only "error sending request".
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text = format!("{text}: {inner_text}");
        }
        cause = inner.source();
    }
    text
}

fn refused(error: MembershipError) -> Step {
    tracing::info!(%error, "membership change refused");
    Step::Done(Err(error))
}

fn committed(membership: Option<Membership<NodeId, NodeAddr>>) -> Step {
    match membership {
        Some(membership) => Step::Done(Ok(Members::of(&membership))),
        None => Step::Retry("the membership entry carried no configuration".into()),
    }
}

fn from_write_error(error: RaftError<NodeId, ClientWriteError<NodeId, NodeAddr>>) -> Step {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => Step::Forward(forward),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(error)) => {
            refused(MembershipError::NotNow {
                reason: error.to_string(),
            })
        }
        RaftError::Fatal(fatal) => Step::Stopped(fatal.to_string()),
    }
}
