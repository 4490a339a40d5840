//! Forming the cluster without a manual step.
//!
//! A node whose log is empty waits until a majority of the members listed in the cluster file
//! answers (itself included), then initialises Raft with the full membership. Several nodes
//! may do so at once: openraft writes the same first entry on each, so that is safe. A node
//! that finds a peer already initialised does nothing and lets the leader replicate to it,
//! which is also how a node with a wiped data directory rejoins. A node with existing data
//! never initialises again.
//!
//! A node marked `join = true` in the cluster file is not a founding member: it never
//! initialises and is not counted in the majority above. It serves its Raft address and waits
//! until an operator adds it to the running cluster (`tickd cluster add-node`), after which the
//! leader replicates the log (or a snapshot) to it. This is how a cluster grows and how a dead
//! node is replaced by a fresh one.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use openraft::error::{InitializeError, RaftError};
use tickd_raft::{NodeAddr, NodeId, Raft, Replica};
use tokio::time::sleep;

/// Pause between two polls of the peers.
const POLL_INTERVAL: Duration = Duration::from_millis(300);
/// How long one peer may take to answer a poll.
const POLL_TIMEOUT: Duration = Duration::from_millis(500);

/// Runs until the cluster is formed from this node's point of view. A joining node only says
/// how to add it. `raft` is the replica's own instance: initialising is the one thing the
/// node does to openraft that no client of the replica may.
pub async fn form_cluster(
    raft: Raft,
    replica: Replica,
    members: BTreeMap<NodeId, NodeAddr>,
    join: bool,
) {
    if join {
        if let Ok(false) = raft.is_initialized().await {
            tracing::info!(
                node = replica.id(),
                "waiting to be added to the running cluster: run `tickd cluster add-node` \
                 with this node's id and addresses against any member"
            );
        }
        return;
    }
    let mut announced = false;
    loop {
        match raft.is_initialized().await {
            Ok(true) => return,
            Ok(false) => {}
            Err(fatal) => {
                tracing::error!(%fatal, "cannot form the cluster: Raft has stopped");
                return;
            }
        }
        let peers = members.iter().filter(|(id, _)| **id != replica.id());
        let polls = peers.map(|(id, node)| replica.peer_status(*id, node, POLL_TIMEOUT));
        let answers: Vec<_> = join_all(polls).await.into_iter().flatten().collect();
        if answers.iter().any(|status| status.initialized) {
            // The cluster exists; its leader will bring this node up to date.
            return;
        }
        let reachable = answers.len() + 1;
        if reachable * 2 > members.len() {
            initialize(&raft, &members).await;
            return;
        }
        if !announced {
            tracing::info!(
                reachable,
                members = members.len(),
                "waiting for a majority of the cluster's nodes to start"
            );
            announced = true;
        }
        sleep(POLL_INTERVAL).await;
    }
}

async fn initialize(raft: &Raft, members: &BTreeMap<NodeId, NodeAddr>) {
    match raft.initialize(members.clone()).await {
        Ok(()) => tracing::info!(members = members.len(), "cluster initialised"),
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
            tracing::debug!("the cluster was initialised already");
        }
        Err(error) => tracing::error!(%error, "cannot initialise the cluster"),
    }
}
