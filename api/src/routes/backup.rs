//! `GET /api/v1/backup` and `POST /api/v1/restore`: the cluster's state out to a file, and
//! back into an empty cluster.
//!
//! A backup is a linearizable read: it reflects every write acknowledged before it was asked
//! for, and it is copied under one lock, so it is one consistent point of the log. A restore is
//! one replicated `Restore` command, so every node gets the same registry at the same log
//! position, and the registry refuses it unless it holds no clock.
//!
//! A backup is a document from outside the cluster, so it is checked before it is proposed
//! (`RegistrySnapshot::validate_for_restore`: ids, names, channels, filed ticks and watermarks,
//! as registrations and intents could have produced them; `Backup::from_json`: the RabbitMQ
//! queue names as written), and a bad one is a 400 that names the clock and field. The registry runs the same check again when it applies the restore.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use serde::Serialize;
use serde_json::Value;
use tickd_domain::{Command, Level, Outcome, RegistrySnapshot, RestoreDocument};

use crate::AppState;
use crate::backup::Backup;
use crate::error::{ApiError, BodyShape, ErrorBody};
use crate::level_wait;
use crate::routes::clocks::{prepare_queue, unexpected};

/// The largest backup `POST /api/v1/restore` accepts. The restore travels as one Raft log
/// entry, which must stay well under the 64 MiB Raft RPC limit.
pub const MAX_RESTORE_BYTES: usize = 32 * 1024 * 1024;

/// What a restore body looks like.
const BACKUP_BODY: BodyShape = BodyShape {
    what: "backup",
    example: "the JSON document written by `tickd backup`",
    limit_bytes: MAX_RESTORE_BYTES,
};

/// The answer to a restore.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Restored {
    /// How many clocks the cluster now holds.
    restored: u64,
}

/// `GET /api/v1/backup`.
#[utoipa::path(
    get,
    path = "/api/v1/backup",
    tag = "operations",
    summary = "A consistent copy of the whole registry",
    description = "A linearizable read: it holds every write acknowledged before it was \
        asked for, as one consistent point of the log.",
    responses(
        (status = 200, description = "The backup document", body = Backup),
        (status = 403, description = "Missing or wrong operator token (the access token is not enough)", body = ErrorBody),
        (status = 503, description = "No leader reachable to confirm the read",
            body = ErrorBody),
    ),
)]
pub async fn backup(State(app): State<AppState>) -> Result<Json<Backup>, ApiError> {
    app.replica.linearize().await?;
    // An image under the lock (O(1)); the copy into the backup's form is made outside it.
    let (image, last_applied) = {
        let state = app.replica.state().read();
        let image = state.registry.image();
        (image, state.last_applied.map(|log_id| log_id.index))
    };
    Ok(Json(Backup::new(
        RegistrySnapshot::from(image),
        last_applied,
    )))
}

/// `POST /api/v1/restore`: seed a cluster without clocks from a backup.
#[utoipa::path(
    post,
    path = "/api/v1/restore",
    tag = "operations",
    summary = "Seed a cluster that holds no clock from a backup",
    description = "One replicated command: every node applies the same state at the same \
        log position. Refused unless the cluster holds no clock. Bodies up to 32 MiB.",
    request_body = Backup,
    responses(
        (status = 200, description = "How many clocks the cluster now holds", body = Restored),
        (status = 400, description = "Not a backup, another format version, or invalid: \
            the message names the clock and field (an id, name, channel, filed tick or \
            watermark that tickd could not have produced)", body = ErrorBody),
        (status = 403, description = "Missing or wrong operator token (the access token is not enough)", body = ErrorBody),
        (status = 409, description = "The cluster already holds clocks, holds too few \
            `max_clocks`, or has no broker for the backup's RabbitMQ clocks", body = ErrorBody),
        (status = 413, description = "Body over 32 MiB", body = ErrorBody),
        (status = 415, description = "Body not declared as JSON", body = ErrorBody),
        (status = 503, description = "No leader reachable, a RabbitMQ queue could not be \
            declared, or the cluster still runs at level 1 (its first seconds, or a node of \
            v0.1.0)", body = ErrorBody),
    ),
)]
pub async fn restore(
    State(app): State<AppState>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<Restored>, ApiError> {
    let Json(document) = body.map_err(|rejection| BACKUP_BODY.reject(rejection))?;
    let backup =
        Backup::from_json(document).map_err(|error| ApiError::bad_request(error.to_string()))?;
    if backup.needs_rabbit() && app.queues.is_none() {
        return Err(ApiError::conflict(
            "the backup holds RabbitMQ clocks but this cluster has no broker; set rabbit_uri in \
             the cluster file (or RABBIT_URI) and restart the nodes before restoring",
        ));
    }
    check_restorable(&app).await?;
    let calendar = backup
        .registry
        .clocks
        .iter()
        .any(|clock| clock.schedule.is_calendar());
    if calendar && !level_wait::reached(&app, Level::has_calendar_schedules).await {
        let level = app.replica.state().read().cluster_level;
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the backup holds calendar schedules: {}",
                tickd_domain::calendar_needs_level(level)
            ),
        ));
    }
    let now_ms = app.replica.clock().now_ms();
    backup
        .registry
        .validate_for_restore(now_ms)
        .map_err(|error| {
            ApiError::bad_request(format!("this backup cannot be restored: {error}"))
        })?;
    let document = RestoreDocument::of(&backup.registry).map_err(|error| {
        ApiError::bad_request(format!(
            "this backup cannot be encoded for the log: {error}"
        ))
    })?;
    let bytes = document.len();
    let command = Command::Restore {
        snapshot: document,
        now_ms,
        max_clocks: app.config.max_clocks,
    };
    match app.replica.write_large(command, bytes).await? {
        Outcome::Restored { clocks } => {
            // The broker may be a new one: declare every queue before answering, as a
            // registration does, so that no restored clock's first tick is unroutable.
            for clock in &backup.registry.clocks {
                prepare_queue(&app, clock.rabbit_queue().as_deref()).await?;
            }
            Ok(Json(Restored { restored: clocks }))
        }
        Outcome::NotEmpty { clocks } => Err(not_empty(clocks)),
        Outcome::LimitReached { max_clocks } => Err(ApiError::conflict(format!(
            "the backup holds {} clocks, more than this cluster's max_clocks of {max_clocks}; \
             raise max_clocks in the cluster file",
            backup.clocks()
        ))),
        Outcome::Rejected { reason } => Err(ApiError::bad_request(reason)),
        other => Err(unexpected(&other)),
    }
}

/// Refuses a restore into a cluster that holds clocks before anything is proposed: a restore
/// is the largest entry the log can carry, and a cluster that would only refuse it at apply
/// would still have to replicate it, with everything written after it waiting behind. The
/// check reads the committed state (a linearizable read); a registration that commits between
/// it and the restore's entry is still caught when the registry applies the restore.
///
/// A cluster at level 1 (its first seconds, or a rolling upgrade from v0.1.0) applies a
/// restore as v0.1.0 does, without the bounds on its queues: the restore waits up to
/// [`level_wait::LEVEL_WAIT`] for the level to rise (a new cluster's does within about two seconds), then
/// is refused.
async fn check_restorable(app: &AppState) -> Result<(), ApiError> {
    app.replica.linearize().await?;
    let clocks = app.replica.state().read().registry.len();
    if clocks != 0 {
        return Err(not_empty(clocks as u64));
    }
    if !level_wait::reached(app, Level::bounds_commands).await {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "this cluster still runs at level 1 (it formed a moment ago, or a node runs \
             v0.1.0), where a restore is applied without bounds on its queues; retry once \
             every node runs this release (a new cluster rises within seconds)",
        ));
    }
    Ok(())
}

fn not_empty(clocks: u64) -> ApiError {
    ApiError::conflict(format!(
        "this cluster already holds {clocks} clocks; a restore only seeds a cluster without \
         clocks, so restore into a freshly formed cluster"
    ))
}

#[cfg(test)]
mod tests {
    use crate::ids;

    #[test]
    fn the_ids_a_node_draws_pass_the_restore_check() {
        // A backup of a cluster holds ids drawn by `ids`; restore must accept every one.
        for _ in 0..100 {
            assert_eq!(ids::clock_id().validate(), Ok(()));
            assert_eq!(ids::queue_id().validate(), Ok(()));
        }
    }
}
