//! `/api/v1/clocks`: register, list, read, and the pause / resume / tick actions (SPEC §2).

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tickd_domain::{
    Channel, ClockFilter, ClockId, ClockStatus, Command, Excerpt, Outcome, Schedule, validate_name,
};

use tickd_raft::wall_clock;

use crate::AppState;
use crate::base_url::BaseUrl;
use crate::error::{ApiError, BodyShape};
use crate::ids;
use crate::view::{ChannelContext, ClockView, clock_url};

/// The registration body. Unknown fields are ignored (Ticktok's clients send only these two,
/// but other tools may send more).
#[derive(Debug, Deserialize)]
pub struct RegisterBody {
    name: Option<String>,
    schedule: Option<String>,
}

/// What a registration body looks like, for the errors that reject one.
const REGISTRATION: BodyShape = BodyShape {
    what: "registration",
    example: r#"{"name": "…", "schedule": "…"}"#,
    limit_bytes: crate::MAX_BODY_BYTES,
};

/// `POST /api/v1/clocks`: create the clock of a (name, schedule) pair, or join it.
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
    let channel = match &app.config.rabbit_uri {
        Some(_) => Channel::Rabbit {
            queue: Channel::rabbit_queue_name(&name, &schedule),
        },
        None => Channel::Http {
            queue_id: ids::queue_id(),
        },
    };
    // The queue exists before the clock does: the clock's first tick may be published within
    // a second of the commit, and a publish to a missing queue marks the clock abandoned.
    prepare_channel(&app, &channel).await?;
    let command = Command::Register {
        name,
        schedule,
        id: ids::clock_id(),
        channel,
        max_clocks: app.config.max_clocks,
        now_ms: wall_clock::now_ms(),
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
    // A new clock shows PENDING in this response, as Ticktok's server did; its stored status
    // is already ACTIVE, since registration is one atomic command.
    let shown_status = if created {
        ClockStatus::Pending
    } else {
        clock.status
    };
    let context = ChannelContext {
        rabbit_uri: app.config.rabbit_uri.as_deref(),
    };
    let view = ClockView::registered(&clock, shown_status, &base, &context);
    let location = format!(
        "{}?access_token={}",
        clock_url(&base, clock.id.as_str()),
        form_urlencoded::byte_serialize(app.config.token.expose().as_bytes()).collect::<String>()
    );
    let mut response = (StatusCode::CREATED, Json(view)).into_response();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `GET /api/v1/clocks`: the clocks that match every filter of the query.
pub async fn list(
    State(app): State<AppState>,
    base: BaseUrl,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<ClockView>>, ApiError> {
    let query = query.unwrap_or_default();
    let pairs = form_urlencoded::parse(query.as_bytes()).into_owned();
    let filter =
        ClockFilter::from_pairs(pairs).map_err(|error| ApiError::bad_request(error.to_string()))?;
    app.replica.linearize().await?;
    let state = app.replica.state().read();
    let clocks = state.registry.list(&filter);
    Ok(Json(
        clocks
            .iter()
            .map(|clock| ClockView::of(clock, &base))
            .collect(),
    ))
}

/// `GET /api/v1/clocks/{id}`.
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
    Ok(Json(ClockView::of(clock, &base)))
}

/// `PUT /api/v1/clocks/{id}/{action}` with `action` one of pause, resume, tick.
pub async fn act(
    State(app): State<AppState>,
    base: BaseUrl,
    Path((id, action)): Path<(String, String)>,
) -> Result<Json<ClockView>, ApiError> {
    let clock_id = ClockId::new(id.clone());
    let now_ms = wall_clock::now_ms();
    let command = match action.as_str() {
        "pause" => Command::Pause {
            id: clock_id,
            now_ms,
        },
        "resume" => Command::Resume {
            id: clock_id,
            now_ms,
        },
        "tick" => Command::Tick {
            id: clock_id,
            now_ms,
        },
        _ => {
            return Err(ApiError::not_found(format!(
                "unknown action {}: the actions are pause, resume and tick",
                Excerpt::of(&action)
            )));
        }
    };
    let resumed = matches!(command, Command::Resume { .. });
    match app.replica.write(command).await? {
        Outcome::Updated(clock) => {
            // A queue may have expired while its clock was paused.
            if resumed {
                prepare_channel(&app, &clock.channel).await?;
            }
            Ok(Json(ClockView::of(&clock, &base)))
        }
        Outcome::NotFound => Err(unknown_clock(&id)),
        other => Err(unexpected(&other)),
    }
}

/// Makes sure a RabbitMQ clock's queue exists on the broker before the client is answered.
pub(crate) async fn prepare_channel(app: &AppState, channel: &Channel) -> Result<(), ApiError> {
    let (Channel::Rabbit { queue }, Some(queues)) = (channel, &app.queues) else {
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
