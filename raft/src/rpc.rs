//! The server side of node-to-node traffic: an axum router for the node's Raft address.
//!
//! Each handler is a thin adapter around one `Raft` call. The secret check runs as middleware
//! before any body is read, so an unauthenticated request cannot reach openraft.

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use serde::Serialize;
use tickd_domain::Command;
use tracing::{Span, field};

use crate::membership::{self, MembershipChange, Step};
use crate::network::{
    APPEND_PATH, MEMBERSHIP_PATH, PeerTransport, READ_INDEX_PATH, SNAPSHOT_PATH, STATUS_PATH,
    VOTE_PATH, WRITE_PATH,
};
use crate::secret::{ClusterSecret, SECRET_HEADER};
use crate::status::NodeStatus;
use crate::{MembershipAnswer, NodeId, Raft, TypeConfig};

/// Largest request body accepted from a peer: a batch of log entries or one snapshot chunk
/// (1 MiB, see [`crate::timing`]), with generous room for JSON overhead.
pub const MAX_RPC_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The router of a node's Raft address. `transport` lets the leader reach a node it is asked
/// to add before that node is a member.
pub fn router(raft: Raft, secret: ClusterSecret, transport: PeerTransport) -> Router {
    Router::new()
        .route(
            MEMBERSHIP_PATH,
            post(change_membership).with_state((raft.clone(), transport)),
        )
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(WRITE_PATH, post(write))
        .route(READ_INDEX_PATH, post(read_index))
        .route(STATUS_PATH, get(status))
        .layer(DefaultBodyLimit::max(MAX_RPC_BODY_BYTES))
        .layer(middleware::from_fn_with_state(secret, require_secret))
        .with_state(raft)
}

async fn require_secret(
    State(secret): State<ClusterSecret>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(SECRET_HEADER)
        .map(|value| value.as_bytes());
    match presented {
        Some(presented) if secret.matches(presented) => next.run(request).await,
        _ => Refusal {
            status: StatusCode::FORBIDDEN,
            message: format!(
                "node-to-node requests must carry the cluster secret in {SECRET_HEADER}"
            ),
        }
        .into_response(),
    }
}

/// A request refused before it reached openraft.
struct Refusal {
    status: StatusCode,
    message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "status": self.status.as_u16(), "message": self.message });
        (self.status, Json(body)).into_response()
    }
}

/// Turns a body that does not parse into a 400 that says why, instead of axum's plain text.
fn parsed<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, Refusal> {
    body.map(|Json(value)| value).map_err(|rejection| Refusal {
        status: StatusCode::BAD_REQUEST,
        message: rejection.body_text(),
    })
}

fn reply<T: Serialize>(value: T) -> Response {
    Json(value).into_response()
}

async fn append(
    State(raft): State<Raft>,
    body: Result<Json<AppendEntriesRequest<TypeConfig>>, JsonRejection>,
) -> Result<Response, Refusal> {
    Ok(reply(raft.append_entries(parsed(body)?).await))
}

async fn vote(
    State(raft): State<Raft>,
    body: Result<Json<VoteRequest<NodeId>>, JsonRejection>,
) -> Result<Response, Refusal> {
    Ok(reply(raft.vote(parsed(body)?).await))
}

async fn snapshot(
    State(raft): State<Raft>,
    body: Result<Json<InstallSnapshotRequest<TypeConfig>>, JsonRejection>,
) -> Result<Response, Refusal> {
    Ok(reply(raft.install_snapshot(parsed(body)?).await))
}

/// A command forwarded by a follower — often a `Command::Batch` of the writes that queued up
/// there (`crate::batching`), proposed here as one entry. It is never forwarded again: if this
/// node is not the leader, the follower gets the `ForwardToLeader` error and retries itself.
#[tracing::instrument(
    name = "forwarded_write",
    skip_all,
    fields(command = field::Empty, index = field::Empty)
)]
async fn write(
    State(raft): State<Raft>,
    body: Result<Json<Command>, JsonRejection>,
) -> Result<Response, Refusal> {
    let command = parsed(body)?;
    Span::current().record("command", command.kind());
    let written = raft.client_write(command).await;
    if let Ok(written) = &written {
        Span::current().record("index", written.log_id.index);
        tracing::debug!("committed for a follower");
    }
    Ok(reply(written.map(|written| written.data)))
}

/// A membership change forwarded by a follower. Like a forwarded write, it is applied here or
/// refused with a reason; it is never forwarded again.
async fn change_membership(
    State((raft, transport)): State<(Raft, PeerTransport)>,
    body: Result<Json<MembershipChange>, JsonRejection>,
) -> Result<Response, Refusal> {
    let answer: MembershipAnswer =
        match membership::change_here(&raft, &transport, parsed(body)?).await {
            Step::Done(result) => Ok(result),
            Step::Forward(forward) => Err(forward.to_string()),
            Step::Retry(reason) | Step::Stopped(reason) => Err(reason),
        };
    Ok(reply(answer))
}

/// Confirms leadership with a quorum and returns the index a follower must apply before it
/// may serve a linearizable read.
async fn read_index(State(raft): State<Raft>) -> Response {
    let answer = raft
        .get_read_log_id()
        .await
        .map(|(read_log_id, _applied)| read_log_id.map(|log_id| log_id.index));
    reply(answer)
}

async fn status(State(raft): State<Raft>) -> Response {
    reply(NodeStatus::from_metrics(&raft.metrics().borrow()))
}
