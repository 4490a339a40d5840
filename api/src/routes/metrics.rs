//! `GET /metrics`: this node's metrics in the Prometheus text format.
//!
//! The binary owns the recorder and hands the API a [`RenderMetrics`](crate::RenderMetrics)
//! closure; this crate never sees the exporter. Whether the route needs the access token is
//! the cluster file's `metrics_require_token` (default: it does).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::AppState;

/// The content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The handler.
pub async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], (app.metrics)())
}
