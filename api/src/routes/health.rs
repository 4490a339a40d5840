//! `GET /mgmt/health` (SPEC §2): UP when this node is a member of a cluster with a known leader
//! and its consensus core runs, and, on the leader, while it commits ([`tickd_raft::progress`]).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::OwnBody;

/// Whether this node can serve (Ticktok compat: Spring Boot's health shape).
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    status: HealthStatus,
}

/// UP or DOWN.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
enum HealthStatus {
    /// A member of a cluster with a known leader.
    Up,
    /// Not a member, no leader known, a leader that has committed nothing for 10 s while
    /// entries wait, or the consensus core stopped on an error or a task of the node died
    /// (the node is about to exit).
    Down,
}

/// 200 `{"status":"UP"}` or 503 `{"status":"DOWN"}`. No token: load balancers call it.
#[utoipa::path(
    get,
    path = "/mgmt/health",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "This node is a member of a cluster with a known leader",
            body = Health, example = json!({"status": "UP"})),
        (status = 503, description = "This node is not a member, knows no leader, leads but \
            has committed nothing for 10 s while entries wait, or its consensus core stopped \
            on a storage error or a task of the node died (it is about to exit)",
            body = Health, example = json!({"status": "DOWN"})),
    ),
)]
pub async fn health(State(app): State<AppState>) -> Response {
    let view = app.replica.cluster();
    // A core that stopped (a halt, a storage error) still leaves its last leader in the view,
    // and a node whose task died still leads until it exits.
    let running = view.running && view.failure.is_none();
    // A leader that has committed nothing for a while serves nothing that writes.
    let committing = app.replica.progress().commit_stalled.is_none();
    let (code, status) = if running && view.is_member() && committing && view.leader.is_some() {
        (StatusCode::OK, HealthStatus::Up)
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, HealthStatus::Down)
    };
    // The DOWN answer keeps its own body: the JSON error shape would hide `"status":"DOWN"`.
    (code, Extension(OwnBody), Json(Health { status })).into_response()
}
