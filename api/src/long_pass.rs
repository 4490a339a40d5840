//! Passes over every clock, run where they hold up no other request.

use axum::http::StatusCode;

use crate::error::ApiError;

/// Runs `pass` on one of the runtime's blocking threads: a pass over a million clocks takes a
/// tenth of a second or more, which on a worker thread would stall every request and stream
/// scheduled beside it. `what` names the pass in the 500 that answers it should it panic.
pub(crate) async fn off_the_runtime<T: Send + 'static>(
    what: &str,
    pass: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(pass).await.map_err(|error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{what} failed: {error}"),
        )
    })
}
