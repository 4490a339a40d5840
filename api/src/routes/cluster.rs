//! `/api/v1/cluster`: who leads and how every member is doing; adding and removing members.
//!
//! In the status, the leader and term are this node's view; every member (this one included)
//! is asked for its own role and applied index with a short timeout, so an unreachable member
//! shows as `reachable: false` instead of delaying the answer.
//!
//! `POST /api/v1/cluster/nodes` and `DELETE /api/v1/cluster/nodes/{id}` change the membership
//! through the leader (`tickd_raft::membership`), wherever they arrive. Both answer with the
//! membership the leader committed.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use futures::future::join_all;
use serde::{Deserialize, Serialize};
use tickd_domain::Excerpt;
use tickd_raft::membership::{Members, MembershipChange, MembershipError};
use tickd_raft::status::NodeStatus;
use tickd_raft::{NodeAddr, NodeId};

use crate::AppState;
use crate::error::{ApiError, BodyShape};

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
    /// Whether the member votes; `false` for a learner that is still catching up.
    voter: bool,
    role: String,
    reachable: bool,
    last_applied: Option<u64>,
}

/// The handler.
pub async fn cluster(State(app): State<AppState>) -> Json<ClusterStatus> {
    let metrics = app.replica.raft().metrics().borrow().clone();
    let membership = metrics.membership_config.membership();
    let voters: Vec<NodeId> = membership.voter_ids().collect();
    let members: Vec<_> = membership
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
            voter: voters.contains(&id),
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

/// The body of `POST /api/v1/cluster/nodes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewNode {
    id: NodeId,
    api: String,
    raft: String,
}

/// What a body of `POST /api/v1/cluster/nodes` looks like.
const NEW_NODE: BodyShape = BodyShape {
    what: "node",
    example: r#"{"id": 4, "api": "127.0.0.1:9646", "raft": "127.0.0.1:9746"}"#,
    limit_bytes: crate::MAX_BODY_BYTES,
};

/// The membership as the leader committed it.
#[derive(Debug, Serialize)]
pub struct MembersView {
    voters: Vec<MemberView>,
    learners: Vec<MemberView>,
}

#[derive(Debug, Serialize)]
struct MemberView {
    id: NodeId,
    api: String,
    raft: String,
}

impl From<Members> for MembersView {
    fn from(members: Members) -> Self {
        let view = |(id, node): (NodeId, NodeAddr)| MemberView {
            id,
            api: node.api,
            raft: node.raft,
        };
        Self {
            voters: members.voters.into_iter().map(view).collect(),
            learners: members.learners.into_iter().map(view).collect(),
        }
    }
}

/// `POST /api/v1/cluster/nodes`: add a running node as a voter (learner first).
pub async fn add_node(
    State(app): State<AppState>,
    body: Result<Json<NewNode>, JsonRejection>,
) -> Result<Json<MembersView>, ApiError> {
    let Json(new) = body.map_err(|rejection| NEW_NODE.reject(rejection))?;
    for (field, address) in [("api", &new.api), ("raft", &new.raft)] {
        if address.parse::<SocketAddr>().is_err() {
            return Err(ApiError::bad_request(format!(
                "\"{field}\" must be an ip:port address such as 127.0.0.1:9646, not {}",
                Excerpt::of(address)
            )));
        }
    }
    if new.api == new.raft {
        return Err(ApiError::bad_request(
            "\"api\" and \"raft\" must be different addresses",
        ));
    }
    let change = MembershipChange::Add {
        id: new.id,
        node: NodeAddr {
            api: new.api,
            raft: new.raft,
        },
    };
    change_membership(&app, change).await
}

/// `DELETE /api/v1/cluster/nodes/{id}`: take a member out of the cluster.
pub async fn remove_node(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<MembersView>, ApiError> {
    let id = id.parse::<NodeId>().map_err(|_| {
        ApiError::bad_request(format!(
            "node ids are whole numbers, not {}",
            Excerpt::of(&id)
        ))
    })?;
    change_membership(&app, MembershipChange::Remove { id }).await
}

async fn change_membership(
    app: &AppState,
    change: MembershipChange,
) -> Result<Json<MembersView>, ApiError> {
    match app.replica.change_membership(change).await? {
        Ok(members) => Ok(Json(members.into())),
        Err(refusal) => Err(refused(refusal)),
    }
}

/// The HTTP status of a refused change: 404 for a member that does not exist, 504 for a node
/// that did not catch up, 409 for a change the cluster's state does not allow.
fn refused(refusal: MembershipError) -> ApiError {
    let status = match refusal {
        MembershipError::UnknownNode { .. } => StatusCode::NOT_FOUND,
        MembershipError::NotCaughtUp { .. } => StatusCode::GATEWAY_TIMEOUT,
        MembershipError::IdTaken { .. }
        | MembershipError::AddressTaken { .. }
        | MembershipError::LastVoter { .. }
        | MembershipError::Unreachable { .. }
        | MembershipError::WrongNode { .. }
        | MembershipError::NotNow { .. } => StatusCode::CONFLICT,
    };
    ApiError::new(status, refusal.to_string())
}
