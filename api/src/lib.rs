//! tickd's REST API: the Ticktok-compatible clock routes, the cluster status and health, on
//! every node.
//!
//! # Layers of a request
//!
//! 1. [`error::json_errors`] (outermost) renders every error, including axum's own 404, 405,
//!    413 and 415, in the JSON shape of SPEC §2.
//! 2. A 64 KiB body limit, enforced before any parsing.
//! 3. [`telemetry::observe`]: the request's span, and its count and latency by route.
//! 4. The credential check, by role (`auth`). The access token, which every Ticktok client
//!    holds, on the clocks and the cluster's status; the operator token on membership changes
//!    (`/api/v1/cluster/nodes`), `/api/v1/backup` and `/api/v1/restore` (the one route with a
//!    larger body limit, see [`routes::backup::MAX_RESTORE_BYTES`]), and on `/metrics` unless
//!    the cluster file opens it. None on the http channel's pop (the queue id is the
//!    capability), the OpenAPI document and health.
//! 5. A path no route takes gets tickd's dashboard (`/` and its assets), or, with
//!    `dashboard_dir` set, the file of that name in the folder ([`dashboard`]), without a
//!    token; else the JSON 404.
//! 6. The route's handler, which talks to the cluster only through [`tickd_raft::Replica`]:
//!    writes are proposed (and forwarded to the leader when needed), reads are linearized
//!    first and then served from this node's applied state.
//!
//! Every route is registered with `utoipa_axum::routes!`, which reads its path and method from
//! the handler's `#[utoipa::path]` description; [`openapi`] assembles those descriptions into
//! the OpenAPI document served at `/api/v1/openapi.json`. Registering a route with axum's
//! plain `.route` would leave it undescribed, and a test refuses that.
//!
//! Nothing here knows about RocksDB or openraft's storage; this crate sees the cluster as
//! "propose a command, read the registry". Nor does it know the metrics exporter: `/metrics`
//! serves whatever the binary's [`RenderMetrics`] returns.

mod address_shares;
pub mod auth;
pub mod backup;
mod base_url;
mod channel_choice;
pub mod channels;
pub mod dashboard;
pub mod error;
mod ids;
mod level_wait;
mod list_body;
pub mod log_limit;
mod long_pass;
pub mod openapi;
mod overlap_choice;
pub mod polls;
pub mod routes;
mod shared_view;
mod slots;
pub mod standing;
pub mod strangers;
pub mod telemetry;
mod unanswered_pops;
mod view;
mod whole_number;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::{Router, middleware};
use tickd_raft::Replica;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::AccessToken;
pub use base_url::LinkHosts;
pub use channels::QueueDeclarer;
pub use error::ApiError;
pub use polls::PollTracker;

/// The largest request body accepted (SPEC §2): larger bodies get a 413 before parsing.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What every handler needs.
#[derive(Clone)]
pub struct AppState {
    /// This node's handle on the cluster.
    pub replica: Replica,
    /// The API's settings.
    pub config: Arc<ApiConfig>,
    /// Declares RabbitMQ queues; `Some` exactly when `config.rabbit_uri` is.
    pub queues: Option<Arc<dyn QueueDeclarer>>,
    /// Polls that found nothing, reported in batches.
    pub polls: PollTracker,
    /// The cap on this node's concurrent long polls.
    long_polls: polls::LongPolls,
    /// Pops whose answer this node could not give, replayed by the queue's next pop here.
    pops: unanswered_pops::UnansweredPops,
    /// Renders this node's metrics for `GET /metrics`.
    pub metrics: RenderMetrics,
    /// Whether this node's disk may take a new clock.
    pub space: CheckSpace,
    /// The event streams this node may still open.
    event_streams: slots::Slots,
    /// The event streams each client address may still open.
    event_streams_per_address: address_shares::AddressShares,
    /// What this node's event streams show, built once for all of them.
    stream_views: Arc<routes::events::StreamViews>,
    /// The unpaged lists of the clocks this node may still send.
    unpaged_lists: slots::Slots,
}

/// Renders this node's metrics in the Prometheus text format. Supplied by the binary, which
/// installs the recorder, so that the API depends on the `metrics` facade alone.
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Whether this node may take on new data: `Err` says why not (its data directory is below
/// its free-space reserve). Supplied by the binary, which knows the data directory, so that
/// the API stays out of the filesystem.
pub type CheckSpace = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Settings of the API, fixed at start-up.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// The access token.
    pub token: AccessToken,
    /// The base URL for links when it must not be taken from the request.
    pub public_url: Option<String>,
    /// This node's API address, the last resort for links when a request has no Host header.
    pub api_address: String,
    /// The `Host` headers links may be built on when there is no public URL.
    pub link_hosts: LinkHosts,
    /// Whether this node's API listener speaks TLS: links and poll URLs then say `https`.
    pub tls: bool,
    /// The AMQP URI handed to consumers; `Some` selects the rabbit channel for new clocks.
    pub rabbit_uri: Option<String>,
    /// Whether webhook URLs may name loopback, private and other internal addresses
    /// (`webhook_allow_private`).
    pub webhook_allow_private: bool,
    /// The most clocks the cluster may hold.
    pub max_clocks: u64,
    /// The operator token: membership changes, backup, restore and (unless open) metrics.
    pub operator_token: AccessToken,
    /// Whether `GET /metrics` needs the operator token (the default), or is open to any
    /// scraper that can reach the API address.
    pub metrics_require_token: bool,
    /// The most long polls (`?wait=N`) that may wait at once on this node; more are answered
    /// at once (see [`polls::LongPolls`]).
    pub max_long_polls: usize,
    /// How many times a leased tick is handed out before it is given up (`max_deliveries`).
    pub max_deliveries: u32,
    /// How many requests without a valid token one client address may send (see
    /// [`strangers`]).
    pub strangers: strangers::StrangerQuota,
    /// A folder served at `/` in place of the API's 404 (Ticktok's dashboard build; see
    /// [`dashboard`]), checked with [`dashboard::check`] before.
    pub dashboard_dir: Option<std::path::PathBuf>,
}

/// The router of a node's API address.
pub fn router(
    replica: Replica,
    config: ApiConfig,
    queues: Option<Arc<dyn QueueDeclarer>>,
    polls: PollTracker,
    metrics: RenderMetrics,
    space: CheckSpace,
) -> Router {
    let token = config.token.clone();
    let operator_token = config.operator_token.clone();
    let dashboard_dir = config.dashboard_dir.clone();
    let strangers =
        strangers::Strangers::new(config.strangers, token.clone(), operator_token.clone());
    let (open_metrics, operator_metrics) = if config.metrics_require_token {
        (OpenApiRouter::new(), metrics_routes())
    } else {
        (metrics_routes(), OpenApiRouter::new())
    };
    let state = AppState {
        long_polls: polls::LongPolls::new(config.max_long_polls),
        replica,
        config: Arc::new(config),
        queues,
        polls,
        pops: unanswered_pops::UnansweredPops::default(),
        metrics,
        space,
        event_streams: routes::events::stream_slots(),
        event_streams_per_address: routes::events::stream_shares(),
        stream_views: Arc::default(),
        unpaged_lists: list_body::unpaged_slots(),
    };
    let clients = token_routes().layer(middleware::from_fn_with_state(token, auth::require_token));
    let gate = auth::OperatorGate {
        token: operator_token,
        strangers: strangers.clone(),
    };
    let operators =
        operator_routes()
            .merge(operator_metrics)
            .layer(middleware::from_fn_with_state(
                gate,
                auth::require_operator_token,
            ));
    let router: Router<AppState> = open_routes()
        .merge(open_metrics)
        .merge(clients)
        .merge(operators)
        .into();
    let router = match &dashboard_dir {
        Some(dir) => dashboard::folder::serve_folder(router, dir),
        None => router.fallback(dashboard::page::serve),
    };
    router
        .layer(middleware::from_fn_with_state(strangers, strangers::limit))
        .layer(middleware::from_fn(telemetry::observe))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(error::json_errors))
        .with_state(state)
}

/// Every route, with the document's info, security schemes and tags: the source of
/// [`openapi::document`].
fn all_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(open_routes())
        .merge(metrics_routes())
        .merge(token_routes())
        .merge(operator_routes())
}

/// Routes anyone may call: health for load balancers, the http channel's pop (the queue id is
/// the capability), and the API's description.
fn open_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(routes::health::health))
        .routes(routes!(routes::queues::pop))
        .routes(routes!(routes::queues::lease::lease))
        .routes(routes!(routes::queues::ack::ack))
        .routes(routes!(openapi::document_json))
}

/// `/metrics`, open or behind the operator token as the cluster file says.
fn metrics_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(routes::metrics::metrics))
}

/// Routes that need the access token, which every Ticktok client holds: the clocks and the
/// cluster's status.
fn token_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(routes::clocks::list, routes::clocks::register))
        .routes(routes!(routes::clocks::get))
        .routes(routes!(routes::clocks::act))
        .routes(routes!(routes::cluster::cluster))
        .routes(routes!(routes::events::events))
        .routes(routes!(routes::stats::stats))
        .routes(routes!(routes::schedules::preview))
}

/// Routes that need the operator token: membership changes, backup and restore (the one
/// route with a larger body limit, see [`routes::backup::MAX_RESTORE_BYTES`]). A client token
/// that leaks cannot take over the cluster or read every queue id at once.
fn operator_routes() -> OpenApiRouter<AppState> {
    let restore = OpenApiRouter::new()
        .routes(routes!(routes::backup::restore))
        .layer(DefaultBodyLimit::max(routes::backup::MAX_RESTORE_BYTES));
    OpenApiRouter::new()
        .routes(routes!(routes::cluster::add_node))
        .routes(routes!(routes::cluster::remove_node))
        .routes(routes!(routes::backup::backup))
        .merge(restore)
}

async fn unknown_path(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!(
        "there is no resource at {}: the API lives under /api/v1/clocks",
        uri.path()
    ))
}
