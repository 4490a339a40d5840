//! The folder of `dashboard_dir`, served at `/` the way Ticktok served its dashboard's build
//! (SPEC, "GET / — the dashboard"): `/` is `index.html`, any other path that no API route
//! takes is the file of that name, and no token is needed. So an operator who drops Ticktok's
//! dashboard build there gets it working against the cluster, on every node.
//!
//! tower-http's `ServeDir` does the serving: it answers GET and HEAD only, refuses paths that
//! climb out of the folder (`..`), sets the content type from the file's extension and
//! answers ranges and conditional requests. A path with no file gets the API's JSON 404, and
//! so does a hidden file or a symlink that leads out of the folder ([`servable`]); every file
//! is sent with `X-Content-Type-Options: nosniff`.
//! API routes always win: this is the router's fallback, reached only when no route matched.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::handler::HandlerWithoutStateExt;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt as _;
use tower_http::services::ServeDir;
use tower_http::services::fs::ServeFileSystemResponseBody;

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

/// `router` with the folder `dir` as its fallback: a path that names no file there, or one
/// this module will not serve ([`servable`]), gets the API's JSON 404.
pub(crate) fn serve_folder<S>(router: Router<S>, dir: &Path) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let folder = Folder {
        // Checked at start-up (`check`); should it vanish since, nothing is servable.
        root: Arc::new(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())),
        files: ServeDir::new(dir).not_found_service(crate::unknown_path.into_service()),
    };
    router.fallback(move |request: Request| {
        let folder = folder.clone();
        async move { folder.serve(request).await }
    })
}

/// The folder and the service that reads it.
#[derive(Clone)]
struct Folder<F> {
    /// The folder, symlinks resolved.
    root: Arc<PathBuf>,
    files: ServeDir<F>,
}

impl<F> Folder<F>
where
    ServeDir<F>: tower::Service<Request, Response = Response<ServeFileSystemResponseBody>>,
    <ServeDir<F> as tower::Service<Request>>::Error: std::fmt::Display,
{
    async fn serve(self, request: Request) -> Response {
        let path = request.uri().path().to_owned();
        if !servable(&self.root, &path).await {
            return crate::unknown_path(request.uri().clone())
                .await
                .into_response();
        }
        let mut response = match self.files.oneshot(request).await {
            Ok(response) => response.map(Body::new),
            Err(error) => {
                return crate::error::ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the dashboard folder could not be read: {error}"),
                )
                .into_response();
            }
        };
        // A file's type is what its extension says, never what a browser guesses from its
        // bytes: an uploaded-looking `.txt` is not run as a script.
        response.headers_mut().insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        response
    }
}

/// Whether the request path `path` may be served from `root`: no segment is hidden (a
/// dotfile, `.git`, `.env`: an operator's folder may hold them, a dashboard build never links
/// them), and the file it names, symlinks followed, is inside the folder (a symlink that
/// leads out, to the cluster file and its secret say, is not followed). A path that names
/// nothing is servable here and answered 404 by the folder.
async fn servable(root: &Path, path: &str) -> bool {
    let Ok(decoded) = percent_encoding::percent_decode_str(path).decode_utf8() else {
        return false;
    };
    let segments: Vec<&str> = decoded
        .split('/')
        .filter(|segment| !segment.is_empty())
        .collect();
    if segments
        .iter()
        .any(|segment| segment.starts_with('.') || segment.contains('\\'))
    {
        return false;
    }
    let named = segments
        .iter()
        .fold(root.to_path_buf(), |path, segment| path.join(segment));
    match tokio::fs::canonicalize(&named).await {
        Ok(resolved) => resolved.starts_with(root),
        Err(error) => error.kind() == std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hostile probe's N10: a symlink out of the folder and a dotfile are not served.
    #[tokio::test]
    async fn hidden_files_and_symlinks_out_of_the_folder_are_not_servable() {
        let outside = tempfile::tempdir().expect("a directory");
        let secret = outside.path().join("cluster.toml");
        std::fs::write(&secret, "secret = \"hunter2\"").expect("a secret file");
        let build = tempfile::tempdir().expect("a directory");
        let root = std::fs::canonicalize(build.path()).expect("canonical");
        std::fs::write(root.join(INDEX), "<html>").expect("the page");
        std::fs::create_dir(root.join("static")).expect("a folder");
        std::fs::write(root.join("static/app.js"), "1").expect("a script");
        std::fs::write(root.join(".env"), "TOKEN=x").expect("a dotfile");
        std::os::unix::fs::symlink(&secret, root.join("leak.txt")).expect("a symlink out");
        std::os::unix::fs::symlink(root.join("static/app.js"), root.join("alias.js"))
            .expect("a symlink within");
        for (path, expected) in [
            ("/", true),
            ("/index.html", true),
            ("/static/app.js", true),
            ("/alias.js", true),
            ("/missing.js", true),
            ("/leak.txt", false),
            ("/.env", false),
            ("/%2eenv", false),
            ("/static/../.env", false),
            ("/.git/config", false),
        ] {
            assert_eq!(servable(&root, path).await, expected, "{path}");
        }
    }
}
