//! Every error the API returns, in the one JSON shape of SPEC §2.
//!
//! Handlers return [`ApiError`]. Errors that axum produces itself (unknown path, wrong method,
//! a body that is too large, not JSON, or malformed) arrive as plain text; the [`json_errors`]
//! middleware, the outermost layer, rewrites every error response into the JSON shape, keeping
//! axum's explanation as the message. So there is one place that renders errors, and no route
//! can leak a plain-text default.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tickd_raft::ReplicaError;

/// Seconds a client should wait before retrying when no leader is reachable: about one
/// election.
const RETRY_AFTER_SECONDS: &str = "1";

/// The longest plain-text error body the middleware reads to reuse as a message.
const MAX_REWRITTEN_BODY: usize = 16 * 1024;

/// An error with its HTTP status and a message for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

/// The message of an [`ApiError`], carried to [`json_errors`] in the response's extensions.
#[derive(Debug, Clone)]
struct ErrorMessage(String);

/// Marks an error response whose body is its own contract and must reach the client as the
/// handler wrote it: `/mgmt/health`'s 503 `{"status":"DOWN"}` (Ticktok compat), which load
/// balancers read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnBody;

impl ApiError {
    /// An error with an explicit status.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// 400: the request is invalid; the message says how.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 409: the request conflicts with the cluster's state; nothing changed.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// 404: the thing named does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 403: the access token is missing or wrong.
    pub fn forbidden() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "a valid access token is required: pass it as the access_token query parameter \
             or in an `Authorization: token <token>` or `Authorization: Bearer <token>` header",
        )
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<ReplicaError> for ApiError {
    fn from(error: ReplicaError) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = self.status.into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
        }
        response.extensions_mut().insert(ErrorMessage(self.message));
        response
    }
}

/// What a route's JSON body must look like, so that a body axum rejects gets a message that
/// says what to send.
#[derive(Debug, Clone, Copy)]
pub struct BodyShape {
    /// What the body is, in words ("registration").
    pub what: &'static str,
    /// A minimal valid body.
    pub example: &'static str,
    /// The route's body limit in bytes.
    pub limit_bytes: usize,
}

impl BodyShape {
    /// Maps axum's JSON rejections onto SPEC §2: 415 when the body is not declared as JSON,
    /// 413 when it is too large, 400 for anything malformed (axum says 422 for a wrong type).
    pub fn reject(&self, rejection: JsonRejection) -> ApiError {
        match rejection.status() {
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "the body must be JSON, sent with `Content-Type: application/json`",
            ),
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the body is larger than the {} KiB limit",
                    self.limit_bytes / 1024
                ),
            ),
            _ => self.malformed(&rejection.body_text()),
        }
    }

    /// Reads an optional JSON body: `None` when the request has none, else the body as the
    /// JSON extractor reads it, with its rejections mapped by [`reject`](Self::reject) (a body
    /// without `Content-Type: application/json` is a 415, never silently ignored). The body
    /// must be a JSON object, or `null` for none: serde would also read a struct from an array
    /// of its fields in order (`[null, null]`), which no schema of an object allows.
    pub async fn optional<T: DeserializeOwned>(
        &self,
        request: Request,
    ) -> Result<Option<T>, ApiError> {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, self.limit_bytes)
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "the body is larger than the {} KiB limit",
                        self.limit_bytes / 1024
                    ),
                )
            })?;
        if bytes.is_empty() {
            return Ok(None);
        }
        let request = Request::from_parts(parts, Body::from(bytes));
        let value = match Json::<serde_json::Value>::from_request(request, &()).await {
            // `null` says as little as no body, and the document allows it.
            Ok(Json(serde_json::Value::Null)) => return Ok(None),
            Ok(Json(value)) if value.is_object() => value,
            Ok(_) => return Err(self.malformed("it is not a JSON object")),
            Err(rejection) => return Err(self.reject(rejection)),
        };
        serde_json::from_value(value)
            .map(Some)
            .map_err(|error| self.malformed(&error.to_string()))
    }

    /// The 400 of a body that is JSON but not this one.
    fn malformed(&self, why: &str) -> ApiError {
        ApiError::bad_request(format!(
            "the body is not a valid {} ({why}); send {}",
            self.what, self.example
        ))
    }
}

/// The body of every error response (SPEC §2; Ticktok compat, the shape of Spring's errors).
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorBody<'a> {
    /// When the error was answered, RFC 3339 UTC with milliseconds.
    #[schema(format = DateTime)]
    timestamp: String,
    /// The HTTP status code, repeated.
    #[schema(minimum = 400, maximum = 599)]
    status: u16,
    /// The status's reason phrase ("Not Found").
    error: &'a str,
    /// What went wrong, for a person: never empty, never the token.
    #[schema(min_length = 1)]
    message: String,
    /// The request's path, without its query (which may hold the token).
    path: &'a str,
}

/// Middleware: renders every error response (status ≥ 400) as the JSON error shape.
pub async fn json_errors(request: Request, next: Next) -> Response {
    // The path only, never the query: the query may hold the access token.
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    let status = response.status();
    let is_error = status.is_client_error() || status.is_server_error();
    if !is_error || response.extensions().get::<OwnBody>().is_some() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let message = match parts.extensions.remove::<ErrorMessage>() {
        Some(ErrorMessage(message)) => message,
        None => {
            let text = axum::body::to_bytes(body, MAX_REWRITTEN_BODY)
                .await
                .unwrap_or_default();
            default_message(status, String::from_utf8_lossy(&text).trim())
        }
    };
    let body = ErrorBody {
        timestamp: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        status: status.as_u16(),
        error: status.canonical_reason().unwrap_or("Error"),
        message,
        path: &path,
    };
    let json = serde_json::to_vec(&body).unwrap_or_default();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(json))
}

/// A message for an error axum produced, from its own text when it has one.
fn default_message(status: StatusCode, axum_text: &str) -> String {
    let fallback = match status {
        StatusCode::NOT_FOUND => "no such resource: see the API's routes under /api/v1",
        StatusCode::METHOD_NOT_ALLOWED => "this path does not accept that HTTP method",
        StatusCode::PAYLOAD_TOO_LARGE => "the request body is larger than the 64 KiB limit",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            "the request body must be JSON, declared with `Content-Type: application/json`"
        }
        _ => "the request could not be served",
    };
    match (status, axum_text) {
        (StatusCode::PAYLOAD_TOO_LARGE, _) | (_, "") => fallback.to_string(),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, text) => format!("{fallback} ({text})"),
        (_, text) => text.to_string(),
    }
}
