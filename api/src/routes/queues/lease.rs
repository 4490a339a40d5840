//! `POST /api/v1/queues/{queue_id}/lease`: hand out waiting ticks under receipts, hidden from
//! other pollers for the visibility time (SPEC §2, lease and ack; `tickd_domain::leases`).
//!
//! The lease is one Raft write, stamped here: its `now_ms` is the earliest the majority's time
//! may be on this node, its deadline the latest plus the visibility time, so that whichever
//! node later judges the deadline, by the earliest it may be, the lease lasts at least the
//! time asked for. The token of its receipts is drawn here (128 random bits).

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::StatusCode;
use serde::Deserialize;
use tickd_domain::leases::{
    DEFAULT_LEASE_TICKS, DEFAULT_VISIBILITY_MS, MAX_DEADLINE_SLACK_MS, MAX_LEASE_TICKS,
    MAX_OPEN_LEASES, MAX_VISIBILITY_MS, MIN_VISIBILITY_MS,
};
use tickd_domain::{Command, LeasedMessage, Level, Outcome, leases_need_level};
use utoipa::ToSchema;

use super::{Take, known_queue, poll, unexpected, unserved, wait_from};
use crate::AppState;
use crate::error::{ApiError, BodyShape, ErrorBody};
use crate::{ids, level_wait, telemetry};

/// The lease body; both fields are optional, and so is the body.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[schema(as = LeaseRequest)]
pub struct LeaseBody {
    /// The most ticks to hand out, 1 to 100; 10 when absent.
    #[schema(minimum = 1, maximum = 100)]
    #[serde(default, deserialize_with = "crate::whole_number::optional")]
    max: Option<u32>,
    /// How long the ticks stay hidden from other pollers, in milliseconds, 1 000 to
    /// 3 600 000; 30 000 when absent.
    #[schema(minimum = 1000, maximum = 3600000)]
    #[serde(default, deserialize_with = "crate::whole_number::optional")]
    visibility_ms: Option<u64>,
}

/// What a lease body looks like, for the errors that reject one.
const LEASE: BodyShape = BodyShape {
    what: "lease",
    example: r#"{"max": 10, "visibility_ms": 30000}"#,
    limit_bytes: crate::MAX_BODY_BYTES,
};

/// A lease's terms, checked.
#[derive(Debug, PartialEq, Eq)]
struct Terms {
    max: u32,
    visibility: Duration,
}

impl LeaseBody {
    /// The terms asked for, or a 400 that says which bound one breaks.
    fn terms(&self) -> Result<Terms, ApiError> {
        let max = self.max.unwrap_or(DEFAULT_LEASE_TICKS);
        if !(1..=MAX_LEASE_TICKS).contains(&max) {
            return Err(ApiError::bad_request(format!(
                "max must be 1 to {MAX_LEASE_TICKS}, not {max}"
            )));
        }
        let visibility_ms = self.visibility_ms.unwrap_or(DEFAULT_VISIBILITY_MS);
        if !(MIN_VISIBILITY_MS..=MAX_VISIBILITY_MS).contains(&visibility_ms) {
            return Err(ApiError::bad_request(format!(
                "visibility_ms must be {MIN_VISIBILITY_MS} to {MAX_VISIBILITY_MS}, not \
                 {visibility_ms}"
            )));
        }
        Ok(Terms {
            max,
            visibility: Duration::from_millis(visibility_ms),
        })
    }
}

/// The handler.
#[utoipa::path(
    post,
    path = "/api/v1/queues/{queue_id}/lease",
    tag = "queues",
    security(()),
    summary = "Lease waiting ticks of an http channel, to ack once handled",
    description = "tickd's, beside the pop, with the same capability (no token). Hands out up \
        to `max` available ticks, each with a `receipt` and a `deliveries` count, and hides \
        them from other pollers for `visibility_ms`. A tick not acked in time is handed out \
        again with the same `tick_id` and `deliveries` + 1, up to the cluster's \
        `max_deliveries`, after which it is given up and counted. The body is optional.",
    params(
        ("queue_id" = String, Path, description = "The queue id from the channel's URL"),
        ("wait" = Option<u64>, Query, minimum = 0, maximum = 30,
            description = "Seconds to hold the request until a tick is available"),
    ),
    request_body(content = Option<LeaseBody>, content_type = "application/json",
        description = "Optional; both fields optional"),
    responses(
        (status = 200, description = "The leased ticks, oldest first; `[]` when none",
            body = Vec<LeasedMessage>),
        (status = 400, description = "`max`, `visibility_ms` or `wait` out of bounds, or a \
            malformed body", body = ErrorBody),
        (status = 404, description = "No such queue, or its clock was removed",
            body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "A body not declared as JSON", body = ErrorBody),
        (status = 429, description = "The queue holds 100 leases that have not run out; ack \
            or let some run out", body = ErrorBody),
        (status = 503, description = "No leader reachable, or a node of the cluster runs a \
            release without leases", body = ErrorBody),
    ),
)]
pub async fn lease(
    State(app): State<AppState>,
    Path(queue): Path<String>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Result<Json<Vec<LeasedMessage>>, ApiError> {
    let wait = wait_from(query.as_deref())?;
    let body: LeaseBody = LEASE.optional(request).await?.unwrap_or_default();
    let terms = body.terms()?;
    let queue = known_queue(&app, queue).await?;
    level_wait::require(&app, Level::has_leases, leases_need_level).await?;
    let visibility_ms = u64::try_from(terms.visibility.as_millis()).unwrap_or(MAX_VISIBILITY_MS);
    let max_deliveries = app.config.max_deliveries;
    let leased = poll(&app, &queue, wait, |now_ms| {
        let (app, queue) = (app.clone(), queue.clone());
        // From the latest the majority's time may be, within what apply accepts.
        let until_ms = app
            .replica
            .clock()
            .latest_now_ms()
            .max(now_ms)
            .saturating_add(visibility_ms)
            .min(now_ms.saturating_add(visibility_ms + MAX_DEADLINE_SLACK_MS));
        async move {
            let outcome = app
                .replica
                .write(Command::Lease {
                    queue,
                    now_ms,
                    until_ms,
                    max: terms.max,
                    token: ids::lease_token(),
                    max_deliveries,
                })
                .await
                .map_err(unserved)?;
            match outcome {
                Outcome::Leased(ticks) if !ticks.is_empty() => {
                    telemetry::record_leased(&ticks);
                    Ok(Take::Got(ticks.iter().map(|tick| tick.message()).collect()))
                }
                Outcome::Leased(_) => Ok(Take::Missed),
                Outcome::NotFound => Ok(Take::Gone),
                Outcome::LeasesFull { open } => Err(ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "the queue holds {open} leases that have not run out (at most \
                         {MAX_OPEN_LEASES}): ack their ticks, or wait for some to run out"
                    ),
                )),
                Outcome::Rejected { reason } => {
                    Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, reason))
                }
                other => Err(unexpected(&other)),
            }
        }
    })
    .await?;
    Ok(Json(leased.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(max: Option<u32>, visibility_ms: Option<u64>) -> LeaseBody {
        LeaseBody { max, visibility_ms }
    }

    #[test]
    fn terms_default_and_are_bounded() {
        assert_eq!(
            body(None, None).terms().map_err(|error| error.status()),
            Ok(Terms {
                max: 10,
                visibility: Duration::from_secs(30)
            })
        );
        assert_eq!(
            body(Some(100), Some(3_600_000))
                .terms()
                .map_err(|error| error.status()),
            Ok(Terms {
                max: 100,
                visibility: Duration::from_secs(3_600)
            })
        );
        assert!(body(Some(1), Some(1_000)).terms().is_ok());
        for bad in [
            body(Some(0), None),
            body(Some(101), None),
            body(None, Some(999)),
            body(None, Some(3_600_001)),
        ] {
            let error = bad.terms().expect_err("out of bounds");
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{bad:?}");
        }
    }
}
