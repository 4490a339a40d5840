//! tickd's own dashboard: one HTML page, its script and its style sheet, compiled into the
//! binary (no Node.js toolchain to build or run it), served without a token. The page asks for
//! the access token itself and sends it in an `Authorization` header, never in a URL; it reads
//! `GET /api/v1/events` for the cluster and the clocks, and acts through the clock routes.
//!
//! `/` and `/index.html` are the page, `/dashboard/app.js` and `/dashboard/style.css` its
//! assets; any other path no API route takes is the API's JSON 404.

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// The page.
const INDEX: &str = include_str!("assets/index.html");
/// Its script, an ES module.
const SCRIPT: &str = include_str!("assets/app.js");
/// Its style sheet.
const STYLE: &str = include_str!("assets/style.css");

/// The page's content security policy: everything from this node, nothing inline, no frames.
/// A script injected into a clock's name cannot run, and no other site can frame the page.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
     form-action 'self'";

/// The fallback of a router without `dashboard_dir`: the page and its assets, else the JSON
/// 404 of `not_found`.
pub(crate) async fn serve(request: Request) -> Response {
    let asset = match request.uri().path() {
        "/" | "/index.html" => Some((INDEX, "text/html; charset=utf-8")),
        "/dashboard/app.js" => Some((SCRIPT, "text/javascript; charset=utf-8")),
        "/dashboard/style.css" => Some((STYLE, "text/css; charset=utf-8")),
        _ => None,
    };
    match asset {
        Some((body, content_type)) if is_read(&request) => {
            let mut response = body.into_response();
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(POLICY),
            );
            headers.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        Some(_) => crate::error::ApiError::new(
            axum::http::StatusCode::METHOD_NOT_ALLOWED,
            "the dashboard is read with GET",
        )
        .into_response(),
        None => crate::unknown_path(request.uri().clone())
            .await
            .into_response(),
    }
}

fn is_read(request: &Request) -> bool {
    matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    )
}
