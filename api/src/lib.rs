//! tickd's REST API: the Ticktok-compatible clock routes, the cluster status and health, on
//! every node.
//!
//! # Layers of a request
//!
//! 1. [`error::json_errors`] (outermost) renders every error, including axum's own 404, 405,
//!    413 and 415, in the JSON shape of SPEC §2.
//! 2. A 64 KiB body limit, enforced before any parsing.
//! 3. [`auth::require_token`] on everything under `/api/v1` (not on health).
//! 4. The route's handler, which talks to the cluster only through [`tickd_raft::Replica`]:
//!    writes are proposed (and forwarded to the leader when needed), reads are linearized
//!    first and then served from this node's applied state.
//!
//! Nothing here knows about RocksDB or openraft's storage; this crate sees the cluster as
//! "propose a command, read the registry".

pub mod auth;
mod base_url;
pub mod channels;
pub mod error;
mod ids;
pub mod polls;
pub mod routes;
mod view;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, put};
use axum::{Router, middleware};
use tickd_raft::Replica;

pub use auth::AccessToken;
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
}

/// Settings of the API, fixed at start-up.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// The access token.
    pub token: AccessToken,
    /// The base URL for links when it must not be taken from the request.
    pub public_url: Option<String>,
    /// This node's API address, the last resort for links when a request has no Host header.
    pub api_address: String,
    /// The AMQP URI handed to consumers; `Some` selects the rabbit channel for new clocks.
    pub rabbit_uri: Option<String>,
    /// The most clocks the cluster may hold.
    pub max_clocks: u64,
}

/// The router of a node's API address.
pub fn router(
    replica: Replica,
    config: ApiConfig,
    queues: Option<Arc<dyn QueueDeclarer>>,
    polls: PollTracker,
) -> Router {
    let token = config.token.clone();
    let state = AppState {
        replica,
        config: Arc::new(config),
        queues,
        polls,
    };
    let protected = Router::new()
        .route("/api/v1/cluster", get(routes::cluster::cluster))
        .route(
            "/api/v1/clocks",
            get(routes::clocks::list).post(routes::clocks::register),
        )
        .route("/api/v1/clocks/{id}", get(routes::clocks::get))
        .route("/api/v1/clocks/{id}/{action}", put(routes::clocks::act))
        .layer(middleware::from_fn_with_state(token, auth::require_token));
    Router::new()
        .route("/mgmt/health", get(routes::health::health))
        .route("/api/v1/queues/{queue_id}/pop", get(routes::queues::pop))
        .merge(protected)
        .fallback(unknown_path)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(error::json_errors))
        .with_state(state)
}

async fn unknown_path(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!(
        "there is no resource at {}: the API lives under /api/v1/clocks",
        uri.path()
    ))
}
