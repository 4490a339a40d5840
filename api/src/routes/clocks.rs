//! `/api/v1/clocks`: register, list, read, and the pause / resume / tick actions (SPEC §2).

use std::time::Instant;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tickd_domain::{
    Channel, ClockFilter, ClockId, Command, Excerpt, Level, Outcome, Schedule, Selection,
    calendar_needs_level, validate_name, webhooks_need_level,
};
use utoipa::ToSchema;

use crate::AppState;
use crate::base_url::BaseUrl;
use crate::channel_choice::{self, RequestedChannel};
use crate::error::{ApiError, BodyShape, ErrorBody};
use crate::ids;
use crate::level_wait;
use crate::list_body;
use crate::overlap_choice;
use crate::view::{ChannelContext, ClockView, clock_url};

/// The registration body. Unknown fields are ignored (Ticktok's clients send only these two,
/// but other tools may send more).
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = Registration)]
pub struct RegisterBody {
    /// Any UTF-8 of 1 to 200 bytes (so that the RabbitMQ queue name stays within 255 bytes).
    #[schema(value_type = String, required = true, min_length = 1, max_length = 200)]
    name: Option<String>,
    /// Ticktok's `every.<N>.<unit>` with a unit of seconds, minutes, hours or days (singular
    /// too) and an interval of at most 366 days, or `@never`; or one of tickd's calendar
    /// forms (`every.MON|FRI.at.09:30`, cron, `@daily`, `@at <instant>`, each optionally
    /// after `TZ=<zone> `; docs/SCHEDULES.md), at most 256 bytes. The schema (its pattern and
    /// length) spells out Ticktok's forms exactly, as the parser reads them (a unit test
    /// holds it against `Schedule::parse`); no pattern can state the calendar grammar.
    #[schema(value_type = String, required = true, max_length = 46, pattern = r"^(@never|every\.0*([1-9][0-9]{0,6}|[12][0-9]{7}|30[0-9]{6}|31[0-5][0-9]{5}|316[01][0-9]{4}|3162[01][0-9]{3}|31622[0-3][0-9]{2}|3162240{2})\.seconds?|every\.0*([1-9][0-9]{0,4}|[1-4][0-9]{5}|5[01][0-9]{4}|52[0-6][0-9]{3}|5270[0-3][0-9]|527040)\.minutes?|every\.0*([1-9][0-9]{0,2}|[1-7][0-9]{3}|8[0-6][0-9]{2}|87[0-7][0-9]|878[0-4])\.hours?|every\.0*([1-9][0-9]?|[12][0-9]{2}|3[0-5][0-9]|36[0-6])\.days?)$")]
    schedule: Option<String>,
    /// tickd's: the channel the ticks should take, when not the cluster's default (`rabbit`
    /// with a broker, `http` otherwise). Ticktok's clients never send it.
    #[serde(default)]
    channel: Option<RequestedChannel>,
    /// tickd's (SPEC §5a), for http and webhook clocks: what happens to an instant that
    /// falls due while the clock's previous tick is still unacknowledged (leased and not
    /// acked, or waiting to be popped; sent and not answered 2xx). `allow` (the default)
    /// delivers every instant; `skip` skips it and counts it in the next tick's `skipped`;
    /// `buffer_one` keeps the newest such instant waiting behind the unacknowledged tick and
    /// skips the older ones. With `skip` or `buffer_one` a lease or a pop takes one tick at a
    /// time, and a webhook receiver gets one at a time.
    #[schema(value_type = Option<String>, pattern = "^(allow|skip|buffer_one)$")]
    #[serde(default)]
    overlap: Option<String>,
}

/// What a registration body looks like, for the errors that reject one.
const REGISTRATION: BodyShape = BodyShape {
    what: "registration",
    example: r#"{"name": "…", "schedule": "…"}"#,
    limit_bytes: crate::MAX_BODY_BYTES,
};

/// The longest RabbitMQ queue name (RabbitMQ's limit, in bytes).
const MAX_QUEUE_NAME_BYTES: usize = 255;

/// The queue of a RabbitMQ clock, `ticktok-<name>;<schedule>`, which RabbitMQ refuses beyond
/// 255 bytes: a long name with a long calendar schedule is a 400 that says so.
fn rabbit_queue(name: &str, schedule: &Schedule) -> Result<String, ApiError> {
    let queue = Channel::rabbit_queue_name(name, schedule);
    if queue.len() > MAX_QUEUE_NAME_BYTES {
        return Err(ApiError::bad_request(format!(
            "the clock's RabbitMQ queue, ticktok-<name>;<schedule>, would have {} bytes and \
             RabbitMQ allows {MAX_QUEUE_NAME_BYTES}; shorten the name or the schedule",
            queue.len()
        )));
    }
    Ok(queue)
}

/// A webhook clock needs a cluster whose every voter can decode its channel (waiting a
/// moment for a new cluster's level).
async fn check_webhook_level(app: &AppState, channel: &Channel) -> Result<(), ApiError> {
    if !matches!(channel, Channel::Webhook(_))
        || level_wait::reached(app, Level::has_webhooks).await
    {
        return Ok(());
    }
    let level = app.replica.state().read().cluster_level;
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        webhooks_need_level(level),
    ))
}

/// A calendar schedule needs a cluster whose every voter can parse it (waiting a moment for
/// a new cluster's level), and an `@at` instant must still be ahead.
async fn check_calendar(app: &AppState, schedule: &Schedule) -> Result<(), ApiError> {
    if !schedule.is_calendar() {
        return Ok(());
    }
    if !level_wait::reached(app, Level::has_calendar_schedules).await {
        let level = app.replica.state().read().cluster_level;
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            calendar_needs_level(level),
        ));
    }
    let now_ms = app.replica.clock().now_ms();
    if schedule.next_instant_after(now_ms).is_none() {
        return Err(ApiError::bad_request(format!(
            "invalid schedule {:?}: it never fires after now ({}); an @at instant must lie \
             ahead",
            schedule.as_str(),
            tickd_domain::rfc3339_millis(now_ms)
        )));
    }
    Ok(())
}

/// `POST /api/v1/clocks`: create the clock of a (name, schedule) pair, or join it.
#[utoipa::path(
    post,
    path = "/api/v1/clocks",
    tag = "clocks",
    summary = "Register a clock, or join the existing clock of the same name and schedule",
    description = "Answers 201 for a new clock and for an existing one (Ticktok compat), with \
        the clock's channel, which is ready when the answer arrives. The same pair always \
        gets the same clock, also under concurrent registrations on different nodes.",
    request_body = RegisterBody,
    responses(
        (status = 201, description = "The clock, with its channel", body = ClockView,
            headers(("Location" = String,
                description = "The clock's URL with `?access_token=` (Ticktok compat)"))),
        (status = 400, description = "Invalid name, schedule, channel, overlap or JSON; a \
            webhook URL whose host is not public; an overlap the channel cannot take",
            body = ErrorBody),
        (status = 403, description = "Missing or wrong access token", body = ErrorBody),
        (status = 409, description = "The clock of this name and schedule exists with another \
            channel (or webhook URL), or another overlap, than the one asked for",
            body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "Body not declared as JSON", body = ErrorBody),
        (status = 429, description = "The cluster holds `max_clocks` clocks", body = ErrorBody),
        (status = 503, description = "No leader reachable, or the RabbitMQ queue could not \
            be declared; retry after `Retry-After` seconds", body = ErrorBody),
        (status = 507, description = "The node's data directory is below its free-space \
            reserve (`disk_reserve_mb`)", body = ErrorBody),
    ),
)]
pub async fn register(
    State(app): State<AppState>,
    base: BaseUrl,
    body: Result<Json<RegisterBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body.map_err(|rejection| REGISTRATION.reject(rejection))?;
    let name = body.name.ok_or_else(|| missing_field("name"))?;
    let schedule = body.schedule.ok_or_else(|| missing_field("schedule"))?;
    validate_name(&name).map_err(|error| ApiError::bad_request(error.to_string()))?;
    let schedule =
        Schedule::parse(&schedule).map_err(|error| ApiError::bad_request(error.to_string()))?;
    check_calendar(&app, &schedule).await?;
    let overlap = overlap_choice::read(body.overlap.as_deref())?;
    let requested = body.channel.as_ref();
    let channel = channel_choice::choose(
        requested,
        app.config.rabbit_uri.is_some(),
        app.config.webhook_allow_private,
    )
    .await?;
    check_webhook_level(&app, &channel).await?;
    overlap_choice::check(&app, &channel, overlap).await?;
    let rabbit_queue = match channel {
        Channel::Rabbit => Some(rabbit_queue(&name, &schedule)?),
        Channel::Http { .. } | Channel::Webhook(_) => None,
    };
    // A new clock grows every node's log and snapshot; refused while this node's disk is
    // below its reserve, before the disk fills and stops its consensus core.
    (app.space)().map_err(|reason| ApiError::new(StatusCode::INSUFFICIENT_STORAGE, reason))?;
    // The queue exists before the clock does: the clock's first tick may be published within
    // a second of the commit, and a publish to a missing queue marks the clock abandoned.
    prepare_queue(&app, rabbit_queue.as_deref()).await?;
    let command = Command::Register {
        name,
        schedule,
        id: ids::clock_id(),
        channel,
        max_clocks: app.config.max_clocks,
        now_ms: app.replica.clock().now_ms(),
        overlap,
    };
    let (clock, created) = match app.replica.write(command).await? {
        Outcome::Registered { clock, created } => (clock, created),
        Outcome::LimitReached { max_clocks } => {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "the cluster holds its maximum of {max_clocks} clocks (max_clocks in the \
                     cluster file); remove unused clocks or raise the limit"
                ),
            ));
        }
        Outcome::Rejected { reason } => return Err(ApiError::bad_request(reason)),
        other => return Err(unexpected(&other)),
    };
    if !created {
        let conflict = channel_choice::conflict(&clock, requested)
            .or_else(|| overlap_choice::conflict(&clock, body.overlap.as_deref()));
        if let Some(conflict) = conflict {
            return Err(conflict);
        }
    }
    // A new clock shows PENDING in this response, as Ticktok's server did; its stored status
    // is already ACTIVE, since registration is one atomic command.
    let context = ChannelContext {
        rabbit_uri: app.config.rabbit_uri.as_deref(),
    };
    let now_ms = app.replica.clock().now_ms();
    let view = ClockView::registered(&clock, created, &base, &context, now_ms);
    let location = format!(
        "{}?access_token={}",
        clock_url(&base, &clock.id.text()),
        form_urlencoded::byte_serialize(app.config.token.expose().as_bytes()).collect::<String>()
    );
    let mut response = (StatusCode::CREATED, Json(view)).into_response();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `GET /api/v1/clocks`: the clocks that match every filter of the query.
#[utoipa::path(
    get,
    path = "/api/v1/clocks",
    tag = "clocks",
    summary = "List clocks",
    description = "Every filter is optional; they combine with AND, and a value starting \
        with `!` negates it. PENDING clocks are left out unless `status` is given (Ticktok \
        compat). Clocks come in id order. For a large cluster, `limit` answers one page and a \
        `Link: <…>; rel=\"next\"` header gives the next one (`after` = the last id of this \
        page); the body keeps its shape, a plain array. Without `limit` the whole list is \
        sent as the client reads it, from the clocks as they were when it began: a node sends \
        at most 4 such lists at once and cuts one not read to its end within 600 s (or that \
        the client stops reading, after the listener's write timeout) before its closing \
        `]`. Any other query key but `access_token` is a 400. Linearizable on every node.",
    params(
        ("name" = Option<String>, Query, description = "The exact name, or `!name`"),
        ("schedule" = Option<String>, Query, description = "The exact schedule, or `!schedule`"),
        ("status" = Option<String>, Query, pattern = "^!?(PENDING|ACTIVE|PAUSED)$",
            description = "PENDING, ACTIVE or PAUSED, or one of them after `!`"),
        ("id" = Option<String>, Query, description = "The exact id, or `!id`"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 10000,
            description = "At most this many clocks (1 to 10 000); without it, every match"),
        ("after" = Option<String>, Query,
            description = "Only clocks whose id sorts after this one: the last id of the \
                previous page"),
    ),
    responses(
        (status = 200, description = "The matching clocks, without channels",
            body = Vec<ClockView>,
            headers(("Link" = String, description = "With `limit`, when more clocks \
                match: the next page's URL, `rel=\"next\"`"))),
        (status = 400, description = "An unknown filter key or status", body = ErrorBody),
        (status = 403, description = "Missing or wrong access token", body = ErrorBody),
        (status = 503, description = "No leader reachable to confirm the read, or (without \
            `limit`) the node sends its most unpaged lists already", body = ErrorBody),
    ),
)]
pub async fn list(
    State(app): State<AppState>,
    base: BaseUrl,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let query = query.unwrap_or_default();
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let (page, filters) = Page::take(&pairs)?;
    let filter = ClockFilter::from_pairs(filters).map_err(|error| {
        ApiError::bad_request(format!("{error}; the list also takes limit and after"))
    })?;
    let Some(limit) = page.limit else {
        // The place first: a list the node would refuse costs no read round.
        let slot = app.unpaged_lists.take()?;
        let selection = linearized_selection(&app, filter).await?;
        let deadline = Instant::now() + list_body::UNPAGED_LIST_DEADLINE;
        let now_ms = app.replica.clock().now_ms();
        let body = list_body::streamed(selection, base, now_ms, page.after, slot, deadline);
        return Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response());
    };
    let selection = linearized_selection(&app, filter).await?;
    let now_ms = app.replica.clock().now_ms();
    let (body, last) = list_body::page(selection, base.clone(), now_ms, page.after, limit).await?;
    let mut response = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    if let Some(last) = last {
        let next = Page::next_link(&base, &pairs, &last.text());
        if let Ok(link) = HeaderValue::from_str(&next) {
            response.headers_mut().insert(header::LINK, link);
        }
    }
    Ok(response)
}

/// The clocks that match `filter`, read after a linearized read round. Taken under the lock,
/// walked without it: an unpaged list of a million clocks passes over every one of them, which
/// the state machine must not wait for.
async fn linearized_selection(app: &AppState, filter: ClockFilter) -> Result<Selection, ApiError> {
    app.replica.linearize().await?;
    Ok(app.replica.state().read().registry.select(filter))
}

/// The most clocks one page of `GET /api/v1/clocks` holds.
pub const MAX_PAGE: usize = 10_000;

/// The paging keys of a list query: `limit` and `after`.
struct Page {
    /// At most this many clocks; every match when not given.
    limit: Option<usize>,
    after: Option<ClockId>,
}

impl Page {
    /// Takes `limit` and `after` out of the query pairs; the rest are filters.
    fn take(pairs: &[(String, String)]) -> Result<(Page, Vec<(String, String)>), ApiError> {
        let mut page = Page {
            limit: None,
            after: None,
        };
        let mut filters = Vec::new();
        for (key, value) in pairs {
            match key.as_str() {
                "limit" => {
                    let limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|limit| (1..=MAX_PAGE).contains(limit))
                        .ok_or_else(|| {
                            ApiError::bad_request(format!(
                                "limit must be a whole number from 1 to {MAX_PAGE}, not {}",
                                Excerpt::of(value)
                            ))
                        })?;
                    page.limit = Some(limit);
                }
                "after" => page.after = Some(ClockId::new(value.clone())),
                _ => filters.push((key.clone(), value.clone())),
            }
        }
        Ok((page, filters))
    }

    /// The URL of the page after the one that ended at `last`: the same query, with `after`.
    fn next_link(base: &BaseUrl, pairs: &[(String, String)], last: &str) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (key, value) in pairs.iter().filter(|(key, _)| key != "after") {
            query.append_pair(key, value);
        }
        query.append_pair("after", last);
        format!(
            "<{}/api/v1/clocks?{}>; rel=\"next\"",
            base.0,
            query.finish()
        )
    }
}

/// `GET /api/v1/clocks/{id}`.
#[utoipa::path(
    get,
    path = "/api/v1/clocks/{id}",
    tag = "clocks",
    summary = "Read one clock",
    params(("id" = String, Path, description = "The clock's id")),
    responses(
        (status = 200, description = "The clock, without its channel", body = ClockView),
        (status = 403, description = "Missing or wrong access token", body = ErrorBody),
        (status = 404, description = "No clock has this id", body = ErrorBody),
        (status = 503, description = "No leader reachable to confirm the read",
            body = ErrorBody),
    ),
)]
pub async fn get(
    State(app): State<AppState>,
    base: BaseUrl,
    Path(id): Path<String>,
) -> Result<Json<ClockView>, ApiError> {
    app.replica.linearize().await?;
    let state = app.replica.state().read();
    let clock = state
        .registry
        .get(&ClockId::new(id.clone()))
        .ok_or_else(|| unknown_clock(&id))?;
    Ok(Json(ClockView::of(
        clock,
        &base,
        app.replica.clock().now_ms(),
    )))
}

/// `PUT /api/v1/clocks/{id}/{action}` with `action` one of pause, resume, tick.
#[utoipa::path(
    put,
    path = "/api/v1/clocks/{id}/{action}",
    tag = "clocks",
    summary = "Pause, resume, or tick a clock now",
    description = "`pause` stops scheduled ticks; `resume` restarts them at the next \
        scheduled instant; `tick` delivers one tick now whatever the clock's status or \
        schedule. No body. Answers 200 with the updated clock (Ticktok compat).",
    params(
        ("id" = String, Path, description = "The clock's id"),
        ("action" = inline(Action), Path, description = "What to do"),
    ),
    responses(
        (status = 200, description = "The clock after the action", body = ClockView),
        (status = 403, description = "Missing or wrong access token", body = ErrorBody),
        (status = 404, description = "No clock has this id, or no such action",
            body = ErrorBody),
        (status = 429, description = "A manual tick on a RabbitMQ clock that already has \
            `http_queue_limit` manual ticks waiting for the broker", body = ErrorBody),
        (status = 503, description = "No leader reachable, or a resumed clock's RabbitMQ \
            queue could not be declared", body = ErrorBody),
    ),
)]
pub async fn act(
    State(app): State<AppState>,
    base: BaseUrl,
    Path((id, action)): Path<(String, String)>,
) -> Result<Json<ClockView>, ApiError> {
    let clock_id = ClockId::new(id.clone());
    let now_ms = app.replica.clock().now_ms();
    let parsed = Action::parse(&action).ok_or_else(|| {
        ApiError::not_found(format!(
            "unknown action {}: the actions are pause, resume and tick",
            Excerpt::of(&action)
        ))
    })?;
    // A retry of the write carries the same request id, which the ledger applies once, from
    // the cluster level on which every replica does (`tickd_domain::Command::Pause`).
    let request = app
        .replica
        .state()
        .read()
        .cluster_level
        .replays_requests()
        .then(ids::request);
    let command = match parsed {
        Action::Pause => Command::Pause {
            id: clock_id,
            now_ms,
            request,
        },
        Action::Resume => Command::Resume {
            id: clock_id,
            now_ms,
            request,
        },
        Action::Tick => Command::Tick {
            id: clock_id,
            now_ms,
            request,
        },
    };
    let resumed = parsed == Action::Resume;
    match app.replica.write(command).await? {
        Outcome::Updated(clock) => {
            // A queue may have expired while its clock was paused.
            if resumed {
                prepare_queue(&app, clock.rabbit_queue().as_deref()).await?;
            }
            Ok(Json(ClockView::of(
                &clock,
                &base,
                app.replica.clock().now_ms(),
            )))
        }
        Outcome::NotFound => Err(unknown_clock(&id)),
        // Only a manual tick is refused: too many of its ticks are still waiting.
        Outcome::Rejected { reason } => Err(ApiError::new(StatusCode::TOO_MANY_REQUESTS, reason)),
        other => Err(unexpected(&other)),
    }
}

/// The actions of `PUT /api/v1/clocks/{id}/{action}`. The path segment is read as a string
/// and parsed here, so that an unknown action is a 404 with a message (SPEC §2), not a 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ToSchema)]
#[schema(rename_all = "lowercase")]
enum Action {
    /// Scheduled ticks stop; the status becomes PAUSED.
    Pause,
    /// The status becomes ACTIVE; ticks restart at the next scheduled instant.
    Resume,
    /// One tick is delivered now, whatever the status or schedule.
    Tick,
}

impl Action {
    fn parse(segment: &str) -> Option<Action> {
        match segment {
            "pause" => Some(Action::Pause),
            "resume" => Some(Action::Resume),
            "tick" => Some(Action::Tick),
            _ => None,
        }
    }
}

/// Makes sure a RabbitMQ clock's queue, `queue`, exists on the broker before the client is
/// answered; nothing to do for a clock of another channel (`None`).
pub(crate) async fn prepare_queue(app: &AppState, queue: Option<&str>) -> Result<(), ApiError> {
    let (Some(queue), Some(queues)) = (queue, &app.queues) else {
        return Ok(());
    };
    queues.declare(queue).await.map_err(|reason| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the clock's RabbitMQ queue could not be declared, so the clock was not \
                 registered: {reason}; retry shortly"
            ),
        )
    })
}

fn unknown_clock(id: &str) -> ApiError {
    ApiError::not_found(format!("there is no clock with id {}", Excerpt::of(id)))
}

fn missing_field(field: &str) -> ApiError {
    ApiError::bad_request(format!(
        "the body must be a JSON object with string fields \"name\" and \"schedule\"; \
         \"{field}\" is missing"
    ))
}

/// The error for an outcome the command cannot produce: a bug, logged and reported as a 500.
pub(crate) fn unexpected(outcome: &Outcome) -> ApiError {
    tracing::error!(
        ?outcome,
        "the registry answered a command with an unexpected outcome"
    );
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "the registry gave an unexpected answer; this is a bug in tickd, please report it",
    )
}
