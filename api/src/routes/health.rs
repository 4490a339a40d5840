//! `GET /mgmt/health` (SPEC §2): UP when this node is a member of a cluster with a known leader
//! and its consensus core runs, and, on the leader, while it commits ([`tickd_raft::progress`]).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use tickd_raft::ClusterView;

use crate::AppState;
use crate::error::OwnBody;

/// Whether this node can serve (Ticktok compat: Spring Boot's health shape).
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    status: HealthStatus,
}

/// UP or DOWN.
#[derive(Debug, PartialEq, Eq, Serialize, ToSchema)]
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
    // A leader that has committed nothing for a while serves nothing that writes.
    let committing = app.replica.progress().commit_stalled.is_none();
    let status = status_of(&app.replica.cluster(), committing);
    let code = match status {
        HealthStatus::Up => StatusCode::OK,
        HealthStatus::Down => StatusCode::SERVICE_UNAVAILABLE,
    };
    // The DOWN answer keeps its own body: the JSON error shape would hide `"status":"DOWN"`.
    (code, Extension(OwnBody), Json(Health { status })).into_response()
}

/// What a node with this view of the cluster says of itself; `committing` is false on a
/// leader that has committed nothing for a while although entries wait.
fn status_of(view: &ClusterView, committing: bool) -> HealthStatus {
    // A core that stopped (a halt, a storage error) still leaves its last leader in the view,
    // and a node whose task died still leads until it exits.
    let running = view.running && view.failure.is_none();
    if running && view.is_member() && committing && view.leader.is_some() {
        HealthStatus::Up
    } else {
        HealthStatus::Down
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use tickd_raft::{NodeAddr, Role};

    use super::*;

    /// Node 1 of a three-node cluster led by node 2, running.
    fn healthy() -> ClusterView {
        let members: BTreeMap<_, _> = (1..=3)
            .map(|id| {
                let addr = NodeAddr {
                    api: format!("127.0.0.1:{id}"),
                    raft: format!("127.0.0.1:1{id}"),
                };
                (id, addr)
            })
            .collect();
        ClusterView {
            id: 1,
            role: Role::Follower,
            term: 4,
            leader: Some(2),
            voters: members.keys().copied().collect::<BTreeSet<_>>(),
            members,
            membership_at: None,
            last_applied: Some(9),
            running: true,
            failure: None,
        }
    }

    #[test]
    fn a_running_member_that_knows_its_leader_is_up() {
        assert_eq!(status_of(&healthy(), true), HealthStatus::Up);
    }

    #[test]
    fn a_node_whose_task_died_is_down_while_its_core_still_runs() {
        let dying = ClusterView {
            failure: Some("the `engine` task returned".to_owned()),
            ..healthy()
        };
        assert!(dying.running, "the core runs on until the process exits");
        assert_eq!(status_of(&dying, true), HealthStatus::Down);
    }

    #[test]
    fn a_stopped_core_no_leader_no_membership_or_a_stalled_commit_is_down() {
        let halted = ClusterView {
            running: false,
            ..healthy()
        };
        let leaderless = ClusterView {
            leader: None,
            ..healthy()
        };
        let stranger = ClusterView { id: 7, ..healthy() };
        for view in [halted, leaderless, stranger] {
            assert_eq!(status_of(&view, true), HealthStatus::Down, "{view:?}");
        }
        assert_eq!(status_of(&healthy(), false), HealthStatus::Down);
    }
}
