//! The absolute base URL that links and channel URLs are built on (SPEC §1).

use axum::extract::FromRequestParts;
use axum::http::header::HOST;
use axum::http::request::Parts;

use crate::AppState;

/// `scheme://host[:port]` as the client reached this node, or the configured public URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl(pub String);

impl FromRequestParts<AppState> for BaseUrl {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(public) = &app.config.public_url {
            return Ok(Self(public.trim_end_matches('/').to_string()));
        }
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
        };
        // tickd's own TLS, or a reverse proxy that terminates TLS and says so.
        let scheme = match header("x-forwarded-proto") {
            _ if app.config.tls => "https",
            Some("https") => "https",
            _ => "http",
        };
        let host = header(HOST.as_str())
            .filter(|host| is_plausible_host(host))
            .map(str::to_string)
            .unwrap_or_else(|| app.config.api_address.clone());
        Ok(Self(format!("{scheme}://{host}")))
    }
}

/// A Host header goes into every link this node hands out; one with characters that do not
/// belong in an authority is ignored rather than echoed.
fn is_plausible_host(host: &str) -> bool {
    !host.is_empty()
        && host
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b".-:[]_".contains(&byte))
}

#[cfg(test)]
mod tests {
    use super::is_plausible_host;

    #[test]
    fn accepts_host_forms_and_refuses_injection() {
        for host in ["127.0.0.1:9643", "tickd.example", "[::1]:9643", "node_2"] {
            assert!(is_plausible_host(host), "{host}");
        }
        for host in ["", "evil.com/path", "a b", "x\"y", "h?q=1", "user@host"] {
            assert!(!is_plausible_host(host), "{host}");
        }
    }
}
