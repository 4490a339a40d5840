//! `GET /api/v1/cluster`: who leads, and how every member is doing.
//!
//! The leader and term are this node's view; every member (this one included) is asked for
//! its own role and applied index with a short timeout, so an unreachable member shows as
//! `reachable: false` instead of delaying the answer.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use futures::future::join_all;
use serde::Serialize;
use tickd_raft::NodeId;
use tickd_raft::status::NodeStatus;

use crate::AppState;

/// How long one member may take to describe itself.
const MEMBER_TIMEOUT: Duration = Duration::from_millis(500);

/// The cluster as this node sees it.
#[derive(Debug, Serialize)]
pub struct ClusterStatus {
    leader: Option<NodeId>,
    term: u64,
    nodes: Vec<MemberStatus>,
}

#[derive(Debug, Serialize)]
struct MemberStatus {
    id: NodeId,
    api: String,
    raft: String,
    role: String,
    reachable: bool,
    last_applied: Option<u64>,
}

/// The handler.
pub async fn cluster(State(app): State<AppState>) -> Json<ClusterStatus> {
    let metrics = app.replica.raft().metrics().borrow().clone();
    let members: Vec<_> = metrics
        .membership_config
        .membership()
        .nodes()
        .map(|(id, node)| (*id, node.clone()))
        .collect();
    let polls = members.iter().map(|(id, node)| {
        let replica = &app.replica;
        let local = (*id == metrics.id).then(|| NodeStatus::from_metrics(&metrics));
        async move {
            match local {
                Some(status) => Some(status),
                None => replica.peer_status(*id, node, MEMBER_TIMEOUT).await.ok(),
            }
        }
    });
    let answers = join_all(polls).await;
    let nodes = members
        .into_iter()
        .zip(answers)
        .map(|((id, node), answer)| MemberStatus {
            id,
            api: node.api,
            raft: node.raft,
            reachable: answer.is_some(),
            role: answer
                .as_ref()
                .map_or("unknown".into(), |status| status.role.clone()),
            last_applied: answer.and_then(|status| status.last_applied),
        })
        .collect();
    Json(ClusterStatus {
        leader: metrics.current_leader,
        term: metrics.current_term,
        nodes,
    })
}
