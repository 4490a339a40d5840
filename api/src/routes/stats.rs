//! `GET /api/v1/stats`: what became of the clocks' ticks, and the cluster's deliveries over the
//! last minutes (see `tickd_domain::stats`). The dashboard's table and plot read the same
//! body from the `stats` event of `/api/v1/events`.

use axum::Json;
use axum::extract::{RawQuery, State};
use serde::Serialize;
use tickd_domain::stats::{SERIES_BUCKET_MS, SERIES_BUCKETS};
use tickd_domain::{Channel, Clock, ClockFilter, RegistryImage, rfc3339_millis};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::long_pass::off_the_runtime;

/// The most clocks one answer describes; the rest are counted in `matched`. A filter on name
/// or id narrows a large cluster to the clocks wanted.
pub const MAX_CLOCKS: usize = 1_000;

/// The tick statistics of some clocks, and the cluster's recent deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub struct TickStats {
    /// The width of one window of `series`, in seconds.
    bucket_seconds: u64,
    /// The cluster's deliveries, one entry per window of the last 15 minutes that saw any
    /// (windows without deliveries, late, coalesced or dropped ticks are left out), oldest
    /// first.
    series: Vec<SeriesPoint>,
    /// How many clocks matched the query; `clocks` holds the first 1 000 of them.
    matched: usize,
    /// Each clock's figures.
    clocks: Vec<ClockTicks>,
}

/// One window of the cluster's deliveries.
#[derive(Debug, Serialize, ToSchema)]
struct SeriesPoint {
    /// The window's start, RFC 3339 UTC.
    #[schema(format = DateTime)]
    start: String,
    /// Ticks delivered in the window.
    delivered: u64,
    /// Their mean lateness, in milliseconds (0 without deliveries).
    lateness_mean_ms: u64,
    /// Their largest lateness, in milliseconds.
    lateness_max_ms: u64,
    /// Scheduled ticks filed after their instant in the window.
    late: u64,
    /// Missed ticks coalesced in the window.
    coalesced: u64,
    /// Ticks dropped from full http queues in the window.
    dropped: u64,
}

/// One clock's figures since it was registered.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClockTicks {
    /// The clock's id.
    id: String,
    /// Its name.
    name: String,
    /// Its schedule.
    schedule: String,
    /// Ticks delivered: confirmed by RabbitMQ, taken by a webhook receiver (2xx), or returned
    /// by a pop. Each count stops at 4 294 967 295.
    delivered: u32,
    /// Scheduled ticks filed after their instant (a leader change, a stall, an outage).
    late: u32,
    /// Missed ticks older than the catch-up window, folded into a later tick.
    coalesced: u32,
    /// Ticks dropped from the clock's full http queue.
    dropped: u32,
    /// Ticks that took more than one attempt (a webhook receiver that failed, then took it).
    retried: u32,
    /// Failed attempts of settled ticks (an error status, no answer, no connection).
    failed: u32,
    /// Ticks given up: a webhook tick refused by its receiver with a 4xx, or not taken within
    /// `webhook_retry_for_ms`; a leased tick handed out `max_deliveries` times without an ack.
    given_up: u32,
    /// Leased ticks handed out again after a lease ran out without an ack (a tick's first
    /// hand-out counts as `delivered`): a consumer that never acks shows here.
    redelivered: u32,
    /// Leased ticks acked.
    acked: u32,
    /// Instants skipped by overlap control (`skip` or `buffer_one`): they fell due while the
    /// clock's previous tick was unacknowledged, and the next tick's `skipped` counts them.
    skipped: u32,
    /// Ticks held by leases now (their lease may have run out since the last lease or pop).
    leased: u64,
    /// The last delivered tick; null before the first.
    last_tick: Option<LastTick>,
    /// How late the last few delivered ticks were, in milliseconds, oldest first (at most 8;
    /// a lateness beyond 65 535 ms shows as 65 535: `last_tick` has the exact one).
    recent_lateness_ms: Vec<u16>,
}

/// A clock's last delivered tick.
#[derive(Debug, Serialize, ToSchema)]
struct LastTick {
    /// The tick's instant.
    #[schema(format = DateTime)]
    scheduled_at: String,
    /// When it was delivered: handed to RabbitMQ, or returned by a pop.
    #[schema(format = DateTime)]
    delivered_at: String,
    /// `delivered_at` − `scheduled_at`, in milliseconds.
    lateness_ms: u64,
    /// Whether it came from the `tick` action.
    manual: bool,
}

/// How many of an http clock's ticks leases hold now.
fn leased_now(image: &RegistryImage, clock: &Clock) -> u64 {
    match &clock.channel {
        Channel::Http { queue_id } => {
            u64::try_from(image.ledger().leased_in_queue(queue_id)).unwrap_or(u64::MAX)
        }
        _ => 0,
    }
}

impl TickStats {
    /// The figures of `clocks` (at most [`MAX_CLOCKS`] are taken), `matched` of them in all,
    /// and the series windows of the 15 minutes before `now_ms`.
    pub fn of<'a>(
        image: &RegistryImage,
        clocks: impl IntoIterator<Item = &'a Clock>,
        matched: usize,
        now_ms: u64,
    ) -> TickStats {
        let clocks = clocks
            .into_iter()
            .take(MAX_CLOCKS)
            .map(|clock| {
                let stats = image
                    .cursor(&clock.id)
                    .map(|cursor| cursor.stats.get())
                    .unwrap_or_default();
                ClockTicks {
                    id: clock.id.to_string(),
                    name: clock.name.to_string(),
                    schedule: clock.schedule.as_str().to_owned(),
                    delivered: stats.delivered,
                    late: stats.late,
                    coalesced: stats.coalesced,
                    dropped: stats.dropped,
                    retried: stats.retried,
                    failed: stats.failed,
                    given_up: stats.given_up,
                    redelivered: stats.redelivered,
                    acked: stats.acked,
                    skipped: stats.skipped,
                    leased: leased_now(image, clock),
                    last_tick: stats.last.map(|last| LastTick {
                        scheduled_at: rfc3339_millis(last.due_at_ms),
                        delivered_at: rfc3339_millis(last.delivered_at_ms()),
                        lateness_ms: u64::from(last.lateness_ms),
                        manual: last.manual,
                    }),
                    recent_lateness_ms: stats.recent.iter().collect(),
                }
            })
            .collect();
        let window = SERIES_BUCKET_MS.saturating_mul(SERIES_BUCKETS as u64);
        let since = now_ms.saturating_sub(window);
        let series = image
            .ledger()
            .series()
            .buckets()
            .filter(|bucket| bucket.start_ms >= since)
            .map(|bucket| SeriesPoint {
                start: rfc3339_millis(bucket.start_ms),
                delivered: bucket.delivered,
                lateness_mean_ms: bucket
                    .lateness_sum_ms
                    .checked_div(bucket.delivered)
                    .unwrap_or(0),
                lateness_max_ms: bucket.lateness_max_ms,
                late: bucket.late,
                coalesced: bucket.coalesced,
                dropped: bucket.dropped,
            })
            .collect();
        TickStats {
            bucket_seconds: SERIES_BUCKET_MS / 1_000,
            series,
            matched,
            clocks,
        }
    }
}

/// The handler.
#[utoipa::path(
    get,
    path = "/api/v1/stats",
    tag = "clocks",
    summary = "Tick statistics: per clock, and the cluster's deliveries over the last minutes",
    description = "For each clock matching the filters (those of `GET /api/v1/clocks`, first \
        1 000 by id; `matched` counts them all): ticks delivered, filed late, coalesced and \
        dropped since it was registered, its last delivered tick and how late its last 8 were. \
        And the cluster's deliveries in 10-second windows over the last 15 minutes. A tick's \
        lateness runs from its instant to its delivery: the leader handing it to RabbitMQ, or \
        the pop that returned it. Replicated: every node answers the same (kept from cluster \
        level 2). Linearizable on every node.",
    params(
        ("name" = Option<String>, Query, description = "The exact name, or `!name`"),
        ("schedule" = Option<String>, Query, description = "The exact schedule, or `!schedule`"),
        ("status" = Option<String>, Query, pattern = "^!?(PENDING|ACTIVE|PAUSED)$",
            description = "PENDING, ACTIVE or PAUSED, or one of them after `!`"),
        ("id" = Option<String>, Query, description = "The exact id, or `!id`"),
    ),
    responses(
        (status = 200, description = "The figures", body = TickStats),
        (status = 400, description = "An unknown filter key or status", body = ErrorBody),
        (status = 403, description = "Missing or wrong access token", body = ErrorBody),
        (status = 503, description = "No leader reachable to confirm the read",
            body = ErrorBody),
    ),
)]
pub async fn stats(
    State(app): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<TickStats>, ApiError> {
    let query = query.unwrap_or_default();
    let pairs = form_urlencoded::parse(query.as_bytes()).into_owned();
    let filter =
        ClockFilter::from_pairs(pairs).map_err(|error| ApiError::bad_request(error.to_string()))?;
    app.replica.linearize().await?;
    let now_ms = app.replica.clock().now_ms();
    // Taken under the lock, counted without it: an unfiltered count passes over every clock.
    let (selection, image) = {
        let state = app.replica.state().read();
        (state.registry.select(filter), state.registry.image())
    };
    let stats = off_the_runtime("counting the clocks' ticks", move || {
        // One pass: every match is counted, the first MAX_CLOCKS are described.
        let mut matched = 0;
        let mut described = Vec::new();
        for clock in selection.matching(None) {
            matched += 1;
            if described.len() < MAX_CLOCKS {
                described.push(clock);
            }
        }
        TickStats::of(&image, described, matched, now_ms)
    })
    .await?;
    Ok(Json(stats))
}
