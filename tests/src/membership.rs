//! Membership changes through the API, checked: add a node, remove one, wait until the
//! cluster sees exactly the voters it should. Shared by the membership tests on loopback and
//! the multi-host rig's.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::StatusCode;

use crate::api::{ClusterView, add_node, cluster_view, remove_node};
use crate::{NodeId, TestCluster, eventually};

/// How long a cluster may take to settle after a membership change (an election included).
pub const SETTLE: Duration = Duration::from_secs(20);

/// How long a removed node keeps running before it is stopped, so that the polls clients
/// already sent it (`?wait=1`, then a pop through the leader) are answered. A pop whose answer
/// dies with the node would take its ticks with it: an operator drains a node before
/// stopping it, as before any planned stop.
pub const DRAIN: Duration = Duration::from_secs(2);

/// The members that vote, in a cluster view.
pub fn voters(view: &ClusterView) -> BTreeSet<NodeId> {
    view.nodes
        .iter()
        .filter(|node| node.voter)
        .map(|node| node.id)
        .collect()
}

/// Waits until node `via` sees exactly `expected` as members, all voters, all reachable,
/// under one leader among them.
pub async fn wait_for_voters(cluster: &TestCluster, via: NodeId, expected: &[NodeId]) {
    let expected: BTreeSet<NodeId> = expected.iter().copied().collect();
    let what = format!("node {via} to see voters {expected:?}, all reachable, with a leader");
    eventually(&what, SETTLE, Duration::from_millis(200), || async {
        let view = cluster_view(cluster, via).await;
        let members: BTreeSet<NodeId> = view.nodes.iter().map(|node| node.id).collect();
        let settled = voters(&view) == expected
            && members == expected
            && view.nodes.iter().all(|node| node.reachable)
            && view.leader.is_some_and(|leader| expected.contains(&leader));
        if settled {
            Ok(())
        } else {
            Err(format!("{view:?}"))
        }
    })
    .await;
}

/// Adds `id` (already started) through node `via` and checks the answer.
pub async fn add_ok(cluster: &TestCluster, via: NodeId, id: NodeId) {
    let (status, _, body) = add_node(cluster, via, id).await;
    assert_eq!(status, StatusCode::OK, "adding node {id} via {via}: {body}");
    let voter_ids: Vec<u64> = body["voters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|node| node["id"].as_u64())
        .collect();
    assert!(voter_ids.contains(&id), "node {id} is no voter: {body}");
}

/// Removes `id` through node `via`, checks the answer, and kills the removed node once the
/// requests in flight to it are answered (an operator stops it).
pub async fn remove_ok(cluster: &TestCluster, via: NodeId, id: NodeId) {
    let (status, _, body) = remove_node(cluster, via, id).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "removing node {id} via {via}: {body}"
    );
    let ids: Vec<u64> = ["voters", "learners"]
        .iter()
        .flat_map(|key| body[key].as_array().cloned().unwrap_or_default())
        .filter_map(|node| node["id"].as_u64())
        .collect();
    assert!(!ids.contains(&id), "node {id} is still a member: {body}");
    tokio::time::sleep(DRAIN).await;
    cluster.kill(id);
}
