//! The API's tokens (SPEC §4): the access token of Ticktok clients, and the operator token
//! of the routes that change or copy the whole cluster.

use std::fmt;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tickd_raft::secret::CredentialDigest;

use crate::error::ApiError;

/// The cluster's API token. `Debug` is redacted: the token must never reach a log line.
#[derive(Clone)]
pub struct AccessToken {
    token: String,
    /// `None`: no token is set, and nothing is admitted.
    digest: Option<CredentialDigest>,
}

impl AccessToken {
    /// Wraps the token in force.
    pub fn new(token: impl Into<String>) -> Self {
        let token = token.into();
        let digest = Some(CredentialDigest::of(token.as_bytes()));
        Self { token, digest }
    }

    /// No token: the routes it guards refuse every request, saying that the cluster file sets
    /// none. A cluster file written for a release without operator tokens has none.
    pub fn unset() -> Self {
        Self {
            token: String::new(),
            digest: None,
        }
    }

    /// Whether a token is set.
    pub fn is_set(&self) -> bool {
        self.digest.is_some()
    }

    /// The token itself, for the one place the compat contract puts it on the wire: the
    /// `Location` header of a registration.
    pub fn expose(&self) -> &str {
        &self.token
    }

    /// Compares digests in constant time: response timing reveals neither the token's bytes
    /// nor its length.
    fn matches(&self, presented: &[u8]) -> bool {
        self.digest
            .as_ref()
            .is_some_and(|digest| digest.matches(presented))
    }

    /// Whether any credential the request presents is this token.
    pub(crate) fn admits(&self, request: &Request) -> bool {
        let from_query = request.uri().query().into_iter().flat_map(|query| {
            form_urlencoded::parse(query.as_bytes())
                .filter(|(key, _)| key == "access_token")
                .map(|(_, value)| value.into_owned().into_bytes())
        });
        let from_header = request
            .headers()
            .get_all(header::AUTHORIZATION)
            .into_iter()
            .filter_map(|value| credential(value.as_bytes()).map(<[u8]>::to_vec));
        // Every candidate is compared, so timing does not reveal which form matched.
        from_query
            .chain(from_header)
            .fold(false, |admitted, candidate| {
                self.matches(&candidate) | admitted
            })
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccessToken(<redacted>)")
    }
}

/// The credential of an `Authorization: token X` or `Authorization: Bearer X` header; the
/// scheme is case-insensitive, the credential is taken byte for byte.
fn credential(header_value: &[u8]) -> Option<&[u8]> {
    let space = header_value.iter().position(|&byte| byte == b' ')?;
    let (scheme, rest) = header_value.split_at(space);
    let known = scheme.eq_ignore_ascii_case(b"token") || scheme.eq_ignore_ascii_case(b"bearer");
    known.then(|| &rest[1..])
}

/// Middleware: 403 unless the request carries the token.
pub async fn require_token(
    State(token): State<AccessToken>,
    request: Request,
    next: Next,
) -> Response {
    admit(&token, request, next, ApiError::forbidden).await
}

/// Middleware: 403 unless the request carries the operator token. The access token is not
/// enough, and the answer says which token the route needs.
pub async fn require_operator_token(
    State(token): State<AccessToken>,
    request: Request,
    next: Next,
) -> Response {
    let set = token.is_set();
    admit(&token, request, next, || {
        let message = if set {
            "this route needs the operator token (operator_token in the cluster file), not the \
             access token: pass it in an `Authorization: Bearer <token>` header"
        } else {
            "this route needs the operator token, and this cluster has none: set \
             `operator_token` (the same long random value) in every node's cluster file and \
             restart the nodes one by one"
        };
        ApiError::new(axum::http::StatusCode::FORBIDDEN, message)
    })
    .await
}

/// Runs the request if it carries `token`, otherwise answers `refusal()`.
async fn admit(
    token: &AccessToken,
    request: Request,
    next: Next,
    refusal: impl FnOnce() -> ApiError,
) -> Response {
    if token.admits(&request) {
        next.run(request).await
    } else {
        refusal().into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, authorization: Option<&[u8]>) -> Request {
        let mut builder = Request::builder().uri(uri);
        if let Some(value) = authorization {
            builder = builder.header(
                header::AUTHORIZATION,
                axum::http::HeaderValue::from_bytes(value).expect("a header value"),
            );
        }
        builder.body(axum::body::Body::empty()).expect("a request")
    }

    #[test]
    fn accepts_every_documented_form() {
        let token = AccessToken::new("t0k=&n ü");
        assert!(token.admits(&request("/x?access_token=t0k%3D%26n%20%C3%BC", None)));
        assert!(token.admits(&request("/x", Some("token t0k=&n ü".as_bytes()))));
        assert!(token.admits(&request("/x", Some("Bearer t0k=&n ü".as_bytes()))));
        assert!(token.admits(&request("/x", Some("bearer t0k=&n ü".as_bytes()))));
    }

    #[test]
    fn refuses_wrong_missing_or_malformed_credentials() {
        let token = AccessToken::new("secret");
        assert!(!token.admits(&request("/x", None)));
        assert!(!token.admits(&request("/x?access_token=secre", None)));
        assert!(!token.admits(&request("/x?access_token=", None)));
        assert!(!token.admits(&request("/x", Some(b"Basic secret"))));
        assert!(!token.admits(&request("/x", Some(b"secret"))));
        assert!(!token.admits(&request("/x", Some(b"token secret "))));
    }

    #[test]
    fn an_unset_token_admits_nothing_not_even_an_empty_credential() {
        let token = AccessToken::unset();
        assert!(!token.is_set());
        assert!(!token.admits(&request("/x", None)));
        assert!(!token.admits(&request("/x?access_token=", None)));
        assert!(!token.admits(&request("/x", Some(b"Bearer "))));
    }

    #[test]
    fn debug_never_shows_the_token() {
        assert!(!format!("{:?}", AccessToken::new("hunter2")).contains("hunter2"));
    }
}
