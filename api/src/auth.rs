//! The API's tokens (SPEC §4): the access token of Ticktok clients, and the operator token
//! of the routes that change or copy the whole cluster.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tickd_raft::secret::CredentialDigest;

use crate::error::ApiError;
use crate::strangers::Strangers;

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

    /// Whether any credential the request presents, in its `Authorization` header or as
    /// `?access_token=` (Ticktok's clients), is this token.
    pub(crate) fn admits(&self, request: &Request) -> bool {
        self.admits_header(request) | self.admits_query(request)
    }

    /// Whether the request's `Authorization` header presents this token: the only form the
    /// operator token is taken in, since a URL ends up in proxy logs and shell history.
    pub(crate) fn admits_header(&self, request: &Request) -> bool {
        let from_header = request
            .headers()
            .get_all(header::AUTHORIZATION)
            .into_iter()
            .filter_map(|value| credential(value.as_bytes()).map(<[u8]>::to_vec));
        self.matches_any(from_header)
    }

    /// Whether the request's `?access_token=` presents this token.
    fn admits_query(&self, request: &Request) -> bool {
        let from_query = request.uri().query().into_iter().flat_map(|query| {
            form_urlencoded::parse(query.as_bytes())
                .filter(|(key, _)| key == "access_token")
                .map(|(_, value)| value.into_owned().into_bytes())
        });
        self.matches_any(from_query)
    }

    /// Every candidate is compared, so timing does not reveal which one matched.
    fn matches_any(&self, candidates: impl Iterator<Item = Vec<u8>>) -> bool {
        candidates.fold(false, |admitted, candidate| {
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

/// What the operator routes check: the operator token, and, for a request without it, the
/// address's budget of requests without a valid token.
#[derive(Clone)]
pub struct OperatorGate {
    /// The operator token.
    pub token: AccessToken,
    /// The per-address limiter: a wrong operator token is charged to it even when the request
    /// carries a valid access token, so an access-token holder cannot guess the operator token
    /// at full speed.
    pub strangers: Arc<Strangers>,
}

/// Middleware: 403 unless the request carries the operator token in its `Authorization`
/// header. The access token is not enough, the query string is no place for it, and the
/// answer says which token the route needs and how to send it. A refusal is charged to the
/// address's budget ([`Strangers::charge`]): past it, 429.
pub async fn require_operator_token(
    State(gate): State<OperatorGate>,
    request: Request,
    next: Next,
) -> Response {
    if gate.token.admits_header(&request) {
        return next.run(request).await;
    }
    if let Some(too_many) = gate.strangers.charge(&request) {
        return too_many;
    }
    let message = if !gate.token.is_set() {
        "this route needs the operator token, and this cluster has none: set `operator_token` \
         (the same long random value) in every node's cluster file and restart the nodes one \
         by one"
    } else if gate.token.admits_query(&request) {
        "the operator token is taken only in an `Authorization: Bearer <token>` header, never in \
         the URL (URLs end up in proxy logs and shell history); consider this token exposed and \
         change operator_token"
    } else {
        "this route needs the operator token (operator_token in the cluster file), not the \
         access token: pass it in an `Authorization: Bearer <token>` header"
    };
    ApiError::new(axum::http::StatusCode::FORBIDDEN, message).into_response()
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
    fn the_header_only_form_ignores_the_query_string() {
        let token = AccessToken::new("operator");
        assert!(token.admits_header(&request("/x", Some(b"Bearer operator"))));
        assert!(!token.admits_header(&request("/x?access_token=operator", None)));
        assert!(token.admits(&request("/x?access_token=operator", None)));
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
    fn a_token_presented_more_than_once_or_beside_a_wrong_one_is_still_admitted() {
        let token = AccessToken::new("secret");
        let both = request("/x?access_token=secret", Some(b"Bearer secret"));
        assert!(token.admits(&both), "in the header and in the query");
        let twice = request("/x?access_token=secret&access_token=secret", None);
        assert!(token.admits(&twice), "twice in the query");
        let among = request("/x?access_token=wrong&access_token=secret", None);
        assert!(token.admits(&among), "beside a wrong one");
    }

    #[test]
    fn a_set_token_says_so_and_shows_itself_only_when_asked() {
        let token = AccessToken::new("hunter2");
        assert!(token.is_set());
        assert_eq!(
            token.expose(),
            "hunter2",
            "the compat Location header carries it"
        );
        assert_eq!(format!("{token:?}"), "AccessToken(<redacted>)");
    }
}
