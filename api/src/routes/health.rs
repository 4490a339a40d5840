//! `GET /mgmt/health` (SPEC §2): UP when this node is a member of a cluster with a known leader.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::AppState;

/// 200 `{"status":"UP"}` or 503 `{"status":"DOWN"}`. No token: load balancers call it.
pub async fn health(State(app): State<AppState>) -> (StatusCode, Json<Value>) {
    let metrics = app.replica.raft().metrics().borrow().clone();
    let member = metrics
        .membership_config
        .membership()
        .get_node(&metrics.id)
        .is_some();
    if member && metrics.current_leader.is_some() {
        (StatusCode::OK, Json(json!({ "status": "UP" })))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "DOWN" })),
        )
    }
}
