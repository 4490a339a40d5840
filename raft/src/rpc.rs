//! The server side of node-to-node traffic: an axum router for the node's Raft address.
//!
//! Each handler is a thin adapter around one `Raft` call. The member check ([`PeerAuth`]: the
//! secret header over plain HTTP, the listener's verified certificate under mutual TLS) runs
//! as middleware before any body is read, so an unauthenticated request cannot reach openraft.
//! One route needs neither: the membership proof ([`crate::proof`]), which a leader asks of a
//! node before it trusts the node's address, and which answers with a MAC only.

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest,
};
use openraft::{LogId, Vote};
use serde::Serialize;
use tickd_domain::Command;
use tracing::{Span, field};

use crate::leader_loss::Silence;
use crate::membership::{self, MembershipChange, Step};
use crate::network::{
    APPEND_PATH, LEADER_SILENCE_PATH, MEMBERSHIP_PATH, READ_INDEX_PATH, SNAPSHOT_PATH, STATUS_PATH,
    VOTE_PATH, WRITE_PATH,
};
use crate::peer_auth::{PeerAuth, VerifiedPeer};
use crate::proof::{Challenge, PROOF_PATH, Proof};
use crate::secret::{ClusterSecret, SECRET_HEADER};
use crate::status::NodeStatus;
use crate::unsupported::{self, Unsupported};
use crate::view::ClusterView;
use crate::{MembershipAnswer, NodeId, Raft, Replica, TypeConfig};

/// Largest request body accepted from a peer: a batch of log entries or one snapshot chunk
/// (1 MiB, see [`crate::timing`]), with generous room for JSON overhead.
pub const MAX_RPC_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The most bytes of a membership challenge: a few dozen, with room for JSON.
const MAX_CHALLENGE_BYTES: usize = 1024;

/// The router of a node's Raft address. `auth` says how callers prove they are members;
/// `secret` keys this node's membership proof; `raft_address` is this node's advertised Raft
/// address, which its membership proof binds. The `replica` lends the routes this node's
/// openraft instance, its transport (the leader reaches a node it is asked to add before that
/// node is a member), its clock (which stamps the status and refuses forwarded writes while
/// this node hands over its leadership) and its status.
pub fn router(
    replica: &Replica,
    auth: PeerAuth,
    secret: ClusterSecret,
    raft_address: String,
) -> Router {
    let raft = replica.raft().clone();
    let proof = Router::new()
        .route(PROOF_PATH, post(prove))
        .layer(DefaultBodyLimit::max(MAX_CHALLENGE_BYTES))
        .with_state((raft.clone(), secret, raft_address));
    Router::new()
        .route(
            MEMBERSHIP_PATH,
            post(change_membership).with_state(replica.clone()),
        )
        .route(APPEND_PATH, post(append).with_state(replica.clone()))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(WRITE_PATH, post(write).with_state(replica.clone()))
        .route(
            READ_INDEX_PATH,
            post(read_index).with_state(replica.clone()),
        )
        .route(STATUS_PATH, get(status).with_state(replica.clone()))
        .route(
            LEADER_SILENCE_PATH,
            get(leader_silence).with_state(replica.clone()),
        )
        .layer(DefaultBodyLimit::max(MAX_RPC_BODY_BYTES))
        .layer(middleware::from_fn_with_state(auth, require_member))
        .with_state(raft)
        .merge(proof)
}

async fn require_member(State(auth): State<PeerAuth>, request: Request, next: Next) -> Response {
    match &auth {
        PeerAuth::Secret(secret) => {
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
        PeerAuth::Certificate => match request.extensions().get::<VerifiedPeer>() {
            Some(_) => next.run(request).await,
            None => Refusal {
                status: StatusCode::FORBIDDEN,
                message: "node-to-node requests must come from a member's certificate".into(),
            }
            .into_response(),
        },
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

/// The largest term or log index a real peer can send. A term grows by one per election
/// round (at most a few per second), an index by one per entry: neither reaches 2^62 in the
/// life of any cluster. A larger one comes from a forged or corrupted request, and honouring
/// it would leave the cluster at a term where `term + 1` overflows.
pub const MAX_PLAUSIBLE: u64 = 1 << 62;

/// Refuses a vote, or a log position, that no real peer could send.
fn plausible<'a>(
    vote: &Vote<NodeId>,
    log_ids: impl IntoIterator<Item = &'a LogId<NodeId>>,
) -> Result<(), Refusal> {
    let largest = log_ids
        .into_iter()
        .flat_map(|log_id| [log_id.index, log_id.leader_id.term])
        .fold(vote.leader_id().get_term(), u64::max);
    match largest {
        largest if largest >= MAX_PLAUSIBLE => Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            message: format!(
                "term or log index {largest} is beyond what any peer can reach ({MAX_PLAUSIBLE})"
            ),
        }),
        _ => Ok(()),
    }
}

/// Appends a leader's entries, and records the contact when this node accepts the sender as
/// its leader ([`crate::leader_loss`]). An entry this binary cannot apply halts the node
/// ([`crate::unsupported`]) instead of being refused as a malformed request, which the leader
/// would take for an unreachable node and retry without end.
async fn append(State(replica): State<Replica>, body: Bytes) -> Result<Response, Refusal> {
    let raft = replica.raft();
    let request = match serde_json::from_slice::<AppendEntriesRequest<TypeConfig>>(&body) {
        Ok(request) => request,
        Err(error) => {
            return Err(match unsupported::in_json(&body) {
                Some(why) => halted(raft, why).await,
                None => Refusal {
                    status: StatusCode::BAD_REQUEST,
                    message: format!("the append request does not decode: {error}"),
                },
            });
        }
    };
    if let Some(why) = unsupported::in_entries(&request.entries) {
        return Err(halted(raft, why).await);
    }
    let positions = [&request.prev_log_id, &request.leader_commit];
    let entries = request.entries.iter().map(|entry| &entry.log_id);
    plausible(
        &request.vote,
        positions.into_iter().flatten().chain(entries),
    )?;
    let appended = raft.append_entries(request).await;
    // A higher vote refuses the sender: it no longer leads. Anything else accepted it.
    if appended
        .as_ref()
        .is_ok_and(|answer| !matches!(answer, AppendEntriesResponse::HigherVote(_)))
    {
        replica.leader_contact().heard();
    }
    Ok(reply(appended))
}

/// Halts this node on `why` and tells the leader.
async fn halted(raft: &Raft, why: Unsupported) -> Refusal {
    unsupported::halt(raft, &why).await;
    Refusal {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: format!("node halted: {why}"),
    }
}

async fn vote(
    State(raft): State<Raft>,
    body: Result<Json<VoteRequest<NodeId>>, JsonRejection>,
) -> Result<Response, Refusal> {
    let request = parsed(body)?;
    plausible(&request.vote, &request.last_log_id)?;
    Ok(reply(raft.vote(request).await))
}

async fn snapshot(
    State(raft): State<Raft>,
    body: Result<Json<InstallSnapshotRequest<TypeConfig>>, JsonRejection>,
) -> Result<Response, Refusal> {
    let request = parsed(body)?;
    plausible(&request.vote, &request.meta.last_log_id)?;
    Ok(reply(raft.install_snapshot(request).await))
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
    State(replica): State<Replica>,
    body: Result<Json<Command>, JsonRejection>,
) -> Result<Response, Refusal> {
    let command = parsed(body)?;
    let raft = replica.raft();
    if let Some(reason) = replica.clock().stepping_down(raft) {
        return Err(Refusal {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: reason,
        });
    }
    Span::current().record("command", command.kind());
    if !forwardable(&command) {
        return Err(Refusal {
            status: StatusCode::FORBIDDEN,
            message: format!(
                "a {} command is proposed only by the leader's own duties, never forwarded",
                command.kind()
            ),
        });
    }
    let written = raft.client_write(command).await;
    if let Ok(written) = &written {
        Span::current().record("index", written.log_id.index);
        tracing::debug!("committed for a follower");
    }
    Ok(reply(written.map(|written| written.data)))
}

/// Whether a follower can have forwarded `command`: the writes of API clients, alone or as one
/// batch of them. Intents, confirmations and purges come only from the leader's engine, and
/// cluster levels from its level monitor, which propose them locally; accepting one here would
/// let a member that is not the leader file ticks, mark them delivered, delete clocks or raise
/// the level past what the voters support.
fn forwardable(command: &Command) -> bool {
    match command {
        Command::Register { .. }
        | Command::Pause { .. }
        | Command::Resume { .. }
        | Command::Tick { .. }
        | Command::Pop { .. }
        | Command::Lease { .. }
        | Command::Ack { .. }
        | Command::Touch { .. }
        | Command::Restore { .. } => true,
        Command::Intend(_)
        | Command::Confirm { .. }
        | Command::Purge { .. }
        | Command::SetLevel { .. } => false,
        Command::Batch(commands) => commands
            .iter()
            .all(|command| !matches!(command, Command::Batch(_)) && forwardable(command)),
    }
}

/// A membership change forwarded by a follower. Like a forwarded write, it is applied here or
/// refused with a reason; it is never forwarded again.
async fn change_membership(
    State(replica): State<Replica>,
    body: Result<Json<MembershipChange>, JsonRejection>,
) -> Result<Response, Refusal> {
    let change = parsed(body)?;
    let answer: MembershipAnswer =
        match membership::change_here(replica.raft(), replica.transport(), change).await {
            Step::Done(result) => Ok(result),
            Step::Forward(forward) => Err(forward.to_string()),
            Step::Retry(reason) | Step::Stopped(reason) => Err(reason),
        };
    Ok(reply(answer))
}

/// Confirms leadership with a quorum and returns the index a follower must apply before it
/// may serve a linearizable read.
async fn read_index(State(replica): State<Replica>) -> Response {
    // A read index confirms leadership with a round of heartbeats, which would keep the
    // followers from electing the successor of a leader that is handing over.
    let raft = replica.raft();
    if let Some(reason) = replica.clock().stepping_down(raft) {
        return Refusal {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: reason,
        }
        .into_response();
    }
    let answer = raft
        .get_read_log_id()
        .await
        .map(|(read_log_id, _applied)| read_log_id.map(|log_id| log_id.index));
    reply(answer)
}

/// Answers a leader's challenge with this node's status and proof of the secret. Asked
/// without credentials: the answer reveals nothing a listener could reuse (see
/// [`crate::proof`]).
async fn prove(
    State((raft, secret, raft_address)): State<(Raft, ClusterSecret, String)>,
    body: Result<Json<Challenge>, JsonRejection>,
) -> Result<Response, Refusal> {
    let challenge = parsed(body)?;
    if !challenge.is_well_formed() {
        return Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            message: "a challenge is 64 hexadecimal digits".to_owned(),
        });
    }
    let status = NodeStatus::of(&ClusterView::of(&raft.metrics().borrow()));
    Ok(reply(Proof::answer(
        &secret,
        &challenge,
        status,
        raft_address,
    )))
}

async fn status(State(replica): State<Replica>) -> Response {
    reply(replica.own_status())
}

async fn leader_silence(State(replica): State<Replica>) -> Response {
    reply(Silence::of(&replica))
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn log_id(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    #[test]
    fn a_term_or_index_no_peer_can_reach_is_refused() {
        let vote = |term| Vote::new(term, 1);
        assert!(plausible(&vote(7), &log_id(7, 1_000_000)).is_ok());
        assert!(plausible(&vote(MAX_PLAUSIBLE - 1), &None).is_ok());
        for (vote, log) in [
            (vote(MAX_PLAUSIBLE), None),
            (vote(u64::MAX), None),
            (vote(3), log_id(3, u64::MAX)),
            (vote(3), log_id(MAX_PLAUSIBLE, 5)),
        ] {
            let refusal = plausible(&vote, &log).expect_err("refused");
            assert_eq!(refusal.status, StatusCode::BAD_REQUEST);
            assert!(refusal.message.contains("beyond"), "{}", refusal.message);
        }
    }

    #[test]
    fn only_client_writes_are_accepted_from_a_follower() {
        let client: Command = serde_json::from_value(serde_json::json!({
            "Tick": { "id": "abc", "now_ms": 1 }
        }))
        .expect("a tick command");
        let engine = [
            serde_json::json!({ "Confirm": { "ticks": [] } }),
            serde_json::json!({ "Purge": { "clocks": [] } }),
            serde_json::json!({ "Intend": {
                "through_ms": 1, "now_ms": 1, "catch_up_ms": 1, "queue_limit": 1
            } }),
            serde_json::json!({ "SetLevel": { "level": 2 } }),
        ]
        .map(|value| serde_json::from_value::<Command>(value).expect("a leader's own command"));
        assert!(forwardable(&client));
        assert!(forwardable(&Command::Batch(vec![
            client.clone(),
            client.clone()
        ])));
        for command in engine {
            assert!(!forwardable(&command), "{command:?}");
            assert!(!forwardable(&Command::Batch(vec![client.clone(), command])));
        }
        let nested = Command::Batch(vec![Command::Batch(vec![client.clone()])]);
        assert!(!forwardable(&nested));
    }
}
