//! `GET /metrics`: this node's metrics in the Prometheus text format.
//!
//! The binary owns the recorder and hands the API a [`RenderMetrics`](crate::RenderMetrics)
//! closure; this crate never sees the exporter. Whether the route needs the access token is
//! the cluster file's `metrics_require_token` (default: it does).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::AppState;
use crate::error::ApiError;
use crate::long_pass::off_the_runtime;

/// The content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The handler.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    summary = "This node's metrics in the Prometheus text format",
    description = "Needs the operator token unless the cluster file sets \
        `metrics_require_token = false`.",
    responses(
        (status = 200, description = "The Prometheus text exposition format, version 0.0.4",
            body = String, content_type = "text/plain"),
        (status = 403, description = "Missing or wrong operator token (unless `metrics_require_token = false`)", body = crate::error::ErrorBody),
    ),
)]
pub async fn metrics(State(app): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    // Measuring the replicated state passes over every clock (a tenth of a second at a
    // million): on a blocking thread, not on one the other requests are served from.
    let render = app.metrics.clone();
    let text = off_the_runtime("rendering the metrics", move || render()).await?;
    Ok(([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text))
}
