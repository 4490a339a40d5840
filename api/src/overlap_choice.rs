//! The overlap control a registration asks for (SPEC §5a): read, checked against the
//! channel and the cluster's level before anything is proposed, and compared with the
//! existing clock's when the registration joins one.

use axum::http::StatusCode;
use tickd_domain::{Channel, Clock, Level, Overlap, overlap_fits, overlap_needs_level};

use crate::AppState;
use crate::error::ApiError;
use crate::level_wait;

/// The overlap a registration's `overlap` names, [`Overlap::Allow`] when it names none.
pub fn read(requested: Option<&str>) -> Result<Overlap, ApiError> {
    requested.map_or(Ok(Overlap::Allow), |literal| {
        Overlap::parse(literal).map_err(|error| ApiError::bad_request(error.to_string()))
    })
}

/// Whether a clock of `channel` may have `overlap`: a 400 for a channel that cannot take it,
/// a 503 when the cluster's level does not come (waiting a moment for a new cluster's).
pub async fn check(app: &AppState, channel: &Channel, overlap: Overlap) -> Result<(), ApiError> {
    if overlap.is_allow() {
        return Ok(());
    }
    overlap_fits(channel, overlap).map_err(ApiError::bad_request)?;
    level_wait::require(app, Level::has_overlap, overlap_needs_level).await
}

/// The 409 of a registration that names another overlap than `existing`'s, the clock of its
/// (name, schedule) pair; `None` when it names none or the same one.
pub fn conflict(existing: &Clock, requested: Option<&str>) -> Option<ApiError> {
    let requested = Overlap::parse(requested?).ok()?;
    (requested != existing.overlap).then(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "the clock of this name and schedule exists with overlap {}; this registration \
                 asks for {requested}. Register without \"overlap\" (or with the clock's) to \
                 join it, or use another name",
                existing.overlap
            ),
        )
    })
}
