//! Waiting for the cluster level a write needs.
//!
//! Some writes may reach the log only once every voter can apply them as this release does
//! (a restore, with its bounds; a calendar schedule, which older binaries cannot parse). A new
//! cluster runs at level 1 for its first seconds, until its leader has heard every voter's
//! support for more; such a write waits a moment for the level instead of failing, and is
//! refused with a 503 when the level does not come (a node of an older release).

use std::time::Duration;

use axum::http::StatusCode;
use tickd_domain::Level;

use crate::AppState;
use crate::error::ApiError;

/// How long a write waits for the level it needs: a new cluster's level rises within about
/// two seconds.
pub const LEVEL_WAIT: Duration = Duration::from_secs(5);
/// How often the level is looked at while waiting.
const LEVEL_POLL: Duration = Duration::from_millis(100);

/// Whether the cluster's level satisfies `enough` within [`LEVEL_WAIT`].
pub async fn reached(app: &AppState, enough: impl Fn(Level) -> bool) -> bool {
    tokio::time::timeout(LEVEL_WAIT, async {
        while !enough(app.replica.state().read().cluster_level) {
            tokio::time::sleep(LEVEL_POLL).await;
        }
    })
    .await
    .is_ok()
}

/// [`reached`], or the 503 whose message `refusal` writes for the cluster's level.
pub async fn require(
    app: &AppState,
    enough: impl Fn(Level) -> bool,
    refusal: fn(Level) -> String,
) -> Result<(), ApiError> {
    if reached(app, enough).await {
        return Ok(());
    }
    let level = app.replica.state().read().cluster_level;
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        refusal(level),
    ))
}
