//! `GET /api/v1/schedules/preview`: the next instants of a schedule, exactly as a clock of it
//! would fire them (SPEC §2), so that a person can check a cron expression and its zone
//! before registering a clock.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use tickd_domain::{Dst, Schedule, rfc3339_millis};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, ErrorBody};

/// The most instants one preview lists.
pub const MAX_PREVIEW: usize = 1_000;
/// How many instants a preview lists without `count`.
const DEFAULT_PREVIEW: usize = 10;

/// What to preview.
#[derive(Debug, Deserialize)]
pub struct PreviewQuery {
    /// The schedule, as a registration would name it.
    schedule: Option<String>,
    /// How many instants, 1 to 1 000 (default 10).
    count: Option<usize>,
}

/// A schedule's next instants.
#[derive(Debug, Serialize, ToSchema)]
pub struct Preview {
    /// The schedule, as given.
    schedule: String,
    /// The zone of its local times: its `TZ=` zone, else UTC.
    zone: String,
    /// From now on, in order; fewer than asked when the schedule stops (`@at`, `@never`).
    instants: Vec<PreviewInstant>,
}

/// One instant of a preview.
#[derive(Debug, Serialize, ToSchema)]
struct PreviewInstant {
    /// RFC 3339 UTC with milliseconds, as a tick's `scheduled_at`.
    #[schema(example = "2027-03-28T01:00:00.000Z")]
    at: String,
    /// The same instant in the schedule's zone, with its offset.
    #[schema(example = "2027-03-28T03:00:00.000+02:00")]
    local: String,
    /// `gap`: the local time was skipped by a daylight-saving change and the tick fires at
    /// the change; `repeat`: the local time occurs twice; null otherwise.
    #[schema(value_type = Option<String>, example = "gap")]
    dst: Option<&'static str>,
}

/// The handler.
#[utoipa::path(
    get,
    path = "/api/v1/schedules/preview",
    tag = "clocks",
    summary = "The next instants of a schedule",
    description = "The next `count` instants (default 10, at most 1 000) of `schedule` from \
        now, exactly as a clock of that schedule would fire them, in UTC and in the \
        schedule's zone, with instants moved by a skipped local hour (`gap`) or falling in a \
        repeated one (`repeat`) marked. An invalid schedule is a 400 that says which part is \
        wrong and where.",
    params(
        ("schedule" = String, Query, min_length = 1, max_length = 256,
            description = "The schedule, as a registration names it (docs/SCHEDULES.md)"),
        ("count" = Option<u32>, Query, minimum = 1, maximum = 1000,
            description = "How many instants, 1 to 1 000 (default 10)"),
    ),
    responses(
        (status = 200, description = "The instants", body = Preview),
        (status = 400, description = "No schedule, an invalid one, or a count out of 1..=1000", body = ErrorBody),
        (status = 403, description = "Missing or wrong token", body = ErrorBody),
    ),
)]
pub async fn preview(
    State(app): State<AppState>,
    query: Result<Query<PreviewQuery>, QueryRejection>,
) -> Result<Json<Preview>, ApiError> {
    let Query(query) = query.map_err(|rejection| {
        ApiError::bad_request(format!(
            "{rejection}; the preview takes schedule=<schedule> and count=<1 to {MAX_PREVIEW}>"
        ))
    })?;
    let literal = query.schedule.ok_or_else(|| {
        ApiError::bad_request("the preview needs schedule=<the schedule to preview>")
    })?;
    let count = query.count.unwrap_or(DEFAULT_PREVIEW);
    if !(1..=MAX_PREVIEW).contains(&count) {
        return Err(ApiError::bad_request(format!(
            "count must be from 1 to {MAX_PREVIEW}, not {count}"
        )));
    }
    let schedule =
        Schedule::parse(&literal).map_err(|error| ApiError::bad_request(error.to_string()))?;
    let mut after = app.replica.clock().now_ms();
    let mut instants = Vec::with_capacity(count);
    while instants.len() < count {
        let Some((at, dst)) = schedule.next_fire(after) else {
            break;
        };
        instants.push(PreviewInstant {
            at: rfc3339_millis(at),
            local: schedule.local_time(at).unwrap_or_default(),
            dst: dst.map(|dst| match dst {
                Dst::Gap => "gap",
                Dst::Repeat => "repeat",
            }),
        });
        after = at;
    }
    Ok(Json(Preview {
        zone: schedule.zone_name().to_owned(),
        schedule: literal,
        instants,
    }))
}
