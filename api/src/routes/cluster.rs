//! `/api/v1/cluster`: who leads and how every member is doing; adding and removing members.
//!
//! In the status, the leader and term are this node's view; every member (this one included)
//! is asked for its own role and applied index with a short timeout, so an unreachable member
//! shows as `reachable: false` instead of delaying the answer. The leader's answer also names
//! the webhook receivers it sees failing.
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
use tickd_domain::webhook::FailingReceivers;
use tickd_raft::cluster_clock::{PeerOffset, Verdict};
use tickd_raft::membership::{Members, MembershipChange, MembershipError};
use tickd_raft::{NodeAddr, NodeId};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, BodyShape, ErrorBody};

/// The release of a member that does not say which it runs: the only one that did not.
const UNADVERTISED_VERSION: &str = "0.1.0";

/// How long one member may take to describe itself.
const MEMBER_TIMEOUT: Duration = Duration::from_millis(500);

/// The cluster as this node sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterStatus {
    /// The leader this node knows of, if any.
    leader: Option<NodeId>,
    /// This node's current Raft term.
    term: u64,
    /// The cluster level this node has applied: which command kinds the log may carry. The
    /// leader raises it once every voter's binary supports the next one.
    cluster_level: u32,
    /// Every member, voters and learners.
    nodes: Vec<MemberStatus>,
    /// The webhook receivers whose last attempt failed, as the leader reports them: absent
    /// when none fails or the leader did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    failing_receivers: Option<FailingReceivers>,
}

/// One member and how it answered.
#[derive(Debug, Serialize, ToSchema)]
struct MemberStatus {
    /// The member's node id.
    id: NodeId,
    /// `host:port` of its API.
    api: String,
    /// `host:port` of its Raft listener.
    raft: String,
    /// Whether the member votes; `false` for a learner that is still catching up.
    voter: bool,
    /// `Leader`, `Follower`, `Candidate`, `Learner`, or `unknown` when it did not answer.
    role: String,
    /// Whether it answered within 500 ms.
    reachable: bool,
    /// The last log index it applied, when it answered.
    last_applied: Option<u64>,
    /// Its wall clock minus the answering node's, in milliseconds, as the answering node last
    /// measured it (0 for the answering node itself); absent until measured.
    clock_offset_ms: Option<i64>,
    /// The error of that measurement: half its round trip, in milliseconds.
    clock_offset_uncertainty_ms: Option<u64>,
    /// Its own verdict: `true` while its clock is within `max_clock_offset_ms` of the
    /// majority's, `false` while it is beyond (it neither campaigns nor fires ticks); absent
    /// when it did not answer or has not measured yet.
    clock_within_bound: Option<bool>,
    /// Its binary's release (`0.1.0` for a node that predates versions, which does not say),
    /// when it answered.
    version: Option<String>,
    /// The cluster levels its binary supports, as `lowest..=highest`, when it answered.
    levels: Option<String>,
    /// The version of the zone database its binary computes calendar schedules with (e.g.
    /// `2025b`), when it answered and has one.
    zone_database: Option<String>,
    /// How long, in milliseconds, it has taken no entry while entries wait for it, once that is
    /// at least 10 s: it cannot keep up (a slow or full disk, a cut link). Known only to the
    /// leader, so present only in the leader's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    stalled_ms: Option<u64>,
}

/// The handler.
#[utoipa::path(
    get,
    path = "/api/v1/cluster",
    tag = "cluster",
    summary = "Who leads, and how every member is doing",
    description = "The leader and term are this node's view; every member is asked for its \
        role and applied index with a 500 ms timeout, so an unreachable one shows \
        `reachable: false` instead of delaying the answer.",
    responses(
        (status = 200, description = "The cluster's status", body = ClusterStatus),
        (status = 403, description = "Missing or wrong access token", body = ErrorBody),
    ),
)]
pub async fn cluster(State(app): State<AppState>) -> Json<ClusterStatus> {
    Json(status(&app).await)
}

/// The cluster as this node sees it: the body of `GET /api/v1/cluster` and of the `cluster`
/// event.
pub(crate) async fn status(app: &AppState) -> ClusterStatus {
    let view = app.replica.cluster();
    let own_id = view.id;
    let polls = view.members.iter().map(|(id, node)| {
        let replica = &app.replica;
        async move {
            if *id == own_id {
                Some(replica.own_status())
            } else {
                replica.peer_status(*id, node, MEMBER_TIMEOUT).await.ok()
            }
        }
    });
    let answers = join_all(polls).await;
    let failing_receivers = view
        .members
        .keys()
        .zip(&answers)
        .find(|(id, _)| Some(**id) == view.leader)
        .and_then(|(_, answer)| answer.as_ref()?.failing_receivers.clone());
    let stalled = app.replica.progress().stalled_followers;
    let mut offsets = app.replica.clock().offsets();
    offsets.insert(
        view.id,
        PeerOffset {
            offset_ms: 0,
            uncertainty_ms: 0,
        },
    );
    let nodes = view
        .members
        .iter()
        .zip(answers)
        .map(|((id, node), answer)| {
            let offset = offsets.get(id);
            MemberStatus {
                id: *id,
                api: node.api.clone(),
                raft: node.raft.clone(),
                voter: view.voters.contains(id),
                reachable: answer.is_some(),
                role: answer
                    .as_ref()
                    .map_or("unknown".into(), |status| status.role.clone()),
                last_applied: answer.as_ref().and_then(|status| status.last_applied),
                clock_offset_ms: offset.map(|offset| offset.offset_ms),
                clock_offset_uncertainty_ms: offset.map(|offset| offset.uncertainty_ms),
                version: answer.as_ref().map(|status| {
                    status
                        .version
                        .clone()
                        .unwrap_or_else(|| UNADVERTISED_VERSION.to_owned())
                }),
                levels: answer
                    .as_ref()
                    .map(|status| status.supported_levels().to_string()),
                zone_database: answer
                    .as_ref()
                    .and_then(|status| status.zone_database.clone()),
                stalled_ms: stalled
                    .get(id)
                    .map(|stuck| u64::try_from(stuck.as_millis()).unwrap_or(u64::MAX)),
                clock_within_bound: answer.and_then(|status| status.clock).and_then(|verdict| {
                    match verdict {
                        Verdict::Within => Some(true),
                        Verdict::Beyond { .. } => Some(false),
                        Verdict::Unmeasured => None,
                    }
                }),
            }
        })
        .collect();
    let cluster_level = app.replica.state().read().cluster_level.0;
    ClusterStatus {
        leader: view.leader,
        term: view.term,
        cluster_level,
        nodes,
        failing_receivers,
    }
}

/// The body of `POST /api/v1/cluster/nodes`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewNode {
    /// A node id no member has, now or before.
    #[serde(deserialize_with = "crate::whole_number::required")]
    id: NodeId,
    /// `ip:port` of the new node's API. The pattern describes IPv4 addresses; a bracketed
    /// IPv6 address is taken too.
    #[schema(
        pattern = r"^((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9]):(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)$"
    )]
    api: String,
    /// `ip:port` of the new node's Raft listener, different from `api`; the same form.
    #[schema(
        pattern = r"^((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9]):(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)$"
    )]
    raft: String,
}

/// What a body of `POST /api/v1/cluster/nodes` looks like.
const NEW_NODE: BodyShape = BodyShape {
    what: "node",
    example: r#"{"id": 4, "api": "127.0.0.1:9646", "raft": "127.0.0.1:9746"}"#,
    limit_bytes: crate::MAX_BODY_BYTES,
};

/// The membership as the leader committed it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Members)]
pub struct MembersView {
    /// The voting members.
    voters: Vec<MemberView>,
    /// Members that receive the log but do not vote.
    learners: Vec<MemberView>,
}

/// A member's id and addresses.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Member)]
struct MemberView {
    /// The node id.
    id: NodeId,
    /// `host:port` of its API.
    api: String,
    /// `host:port` of its Raft listener.
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
#[utoipa::path(
    post,
    path = "/api/v1/cluster/nodes",
    tag = "cluster",
    summary = "Add a running node to the cluster",
    description = "The leader checks that the node answers under that id, adds it as a \
        learner, waits (at most 30 s) until it has caught up, then makes it a voter.",
    request_body = NewNode,
    responses(
        (status = 200, description = "The membership after the change", body = MembersView),
        (status = 400, description = "A malformed body or address", body = ErrorBody),
        (status = 403, description = "Missing or wrong operator token (the access token is not enough)", body = ErrorBody),
        (status = 409, description = "The id or an address is taken, the node does not \
            answer as that id, or another change is still committing", body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "Body not declared as JSON", body = ErrorBody),
        (status = 503, description = "No leader reachable", body = ErrorBody),
        (status = 504, description = "The node did not catch up in time; it stays a learner",
            body = ErrorBody),
    ),
)]
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
#[utoipa::path(
    delete,
    path = "/api/v1/cluster/nodes/{id}",
    tag = "cluster",
    summary = "Remove a member from the cluster",
    params(("id" = u64, Path, description = "The member's node id")),
    responses(
        (status = 200, description = "The membership after the change", body = MembersView),
        (status = 400, description = "The id is not a whole number", body = ErrorBody),
        (status = 403, description = "Missing or wrong operator token (the access token is not enough)", body = ErrorBody),
        (status = 404, description = "No member has this id", body = ErrorBody),
        (status = 409, description = "It is the last voter, or another change is still \
            committing", body = ErrorBody),
        (status = 503, description = "No leader reachable", body = ErrorBody),
    ),
)]
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
        | MembershipError::Unproven { .. }
        | MembershipError::WrongNode { .. }
        | MembershipError::NotNow { .. } => StatusCode::CONFLICT,
    };
    ApiError::new(status, refusal.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(body: &str) -> Result<NodeId, String> {
        serde_json::from_str::<NewNode>(body)
            .map(|node| node.id)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn a_node_id_is_any_whole_json_number() {
        let body =
            |id: &str| format!(r#"{{"id": {id}, "api": "127.0.0.1:1", "raft": "127.0.0.1:2"}}"#);
        assert_eq!(id_of(&body("4")), Ok(4));
        assert_eq!(id_of(&body("12446.0")), Ok(12_446));
        assert_eq!(id_of(&body("1e3")), Ok(1_000));
        assert_eq!(id_of(&body("18446744073709551615")), Ok(u64::MAX));
        for refused in [
            "4.5",
            "-1",
            "-0.5",
            "18446744073709551616.0",
            "1e300",
            "\"4\"",
            "null",
        ] {
            assert!(id_of(&body(refused)).is_err(), "{refused}");
        }
    }
}
