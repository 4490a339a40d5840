//! The folder of `dashboard_dir`, served at `/` the way Ticktok served its dashboard's build
//! (SPEC, "GET / — the dashboard"): `/` is `index.html`, any other path that no API route
//! takes is the file of that name, and no token is needed. So an operator who drops Ticktok's
//! dashboard build there gets it working against the cluster, on every node.
//!
//! tower-http's `ServeDir` does the serving: it answers GET and HEAD only, refuses paths that
//! climb out of the folder (`..`), sets the content type from the file's extension and
//! answers ranges and conditional requests. A path with no file gets the API's JSON 404.
//! API routes always win: this is the router's fallback, reached only when no route matched.

use std::path::{Path, PathBuf};

use axum::Router;
use axum::handler::HandlerWithoutStateExt;
use tower_http::services::ServeDir;

/// The page a folder must hold to be served as a dashboard.
pub const INDEX: &str = "index.html";

/// Why a folder cannot be served as a dashboard.
#[derive(Debug, thiserror::Error)]
#[error(
    "`dashboard_dir` {} has no readable {INDEX} ({reason}): name the folder of a dashboard \
     build (Ticktok's `build/`), or remove the key",
    .dir.display()
)]
pub struct NotADashboard {
    dir: PathBuf,
    reason: String,
}

/// Checks that `dir` holds an `index.html` (at start-up, so that a wrong path is an error the
/// operator sees at once rather than a 404 in a browser later).
pub fn check(dir: &Path) -> Result<(), NotADashboard> {
    match std::fs::metadata(dir.join(INDEX)) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(NotADashboard {
            dir: dir.to_path_buf(),
            reason: format!("{INDEX} is not a file"),
        }),
        Err(error) => Err(NotADashboard {
            dir: dir.to_path_buf(),
            reason: error.to_string(),
        }),
    }
}

/// `router` with the folder `dir` as its fallback: a path that names no file there gets the
/// API's JSON 404.
pub(crate) fn serve_folder<S>(router: Router<S>, dir: &Path) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let not_found = crate::unknown_path.into_service();
    router.fallback_service(ServeDir::new(dir).not_found_service(not_found))
}
