//! The absolute base URL that links and channel URLs are built on (SPEC §1).
//!
//! Links carry the access token (`Location`) and http channels' poll URLs are capabilities, so
//! the host they name must be one the operator chose. Without a configured public URL the host
//! comes from the request's `Host` header, as Ticktok's server did: on loopback any plausible
//! host is used, but a node reachable from the network uses only a host of its allow-list
//! ([`LinkHosts`]), so that a forged `Host` cannot point a client's links at another server.

use std::collections::BTreeSet;

use axum::extract::FromRequestParts;
use axum::http::header::HOST;
use axum::http::request::Parts;

use crate::AppState;
use crate::error::ApiError;

/// `scheme://host[:port]` as the client reached this node, or the configured public URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl(pub String);

/// Which `Host` headers a node builds links on when it has no public URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkHosts {
    /// Any plausible host: the API listens on loopback, where only this machine reaches it.
    Any,
    /// Only these hosts (`host` or `host:port`, lower case); any other is refused with a 400.
    Only(BTreeSet<String>),
}

impl LinkHosts {
    /// An allow-list of hosts, compared without regard to case.
    pub fn only<'a>(hosts: impl IntoIterator<Item = &'a str>) -> Self {
        Self::Only(hosts.into_iter().map(str::to_ascii_lowercase).collect())
    }

    fn admits(&self, host: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Only(hosts) => hosts.contains(&host.to_ascii_lowercase()),
        }
    }
}

impl FromRequestParts<AppState> for BaseUrl {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
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
        let host = match header(HOST.as_str()).filter(|host| is_plausible_host(host)) {
            Some(host) if app.config.link_hosts.admits(host) => host.to_string(),
            Some(_) => return Err(unlisted_host()),
            None => app.config.api_address.clone(),
        };
        Ok(Self(format!("{scheme}://{host}")))
    }
}

/// The refusal of a `Host` outside the allow-list. The host itself is not echoed: it is the
/// attacker's text.
fn unlisted_host() -> ApiError {
    ApiError::bad_request(
        "the request's Host header names a host this node does not serve links for; reach the \
         node by an address of the cluster file's `api_hosts` (by default the nodes' `api` \
         addresses), or set `public_url` for the node",
    )
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
    use super::{LinkHosts, is_plausible_host};

    #[test]
    fn accepts_host_forms_and_refuses_injection() {
        for host in ["127.0.0.1:9643", "tickd.example", "[::1]:9643", "node_2"] {
            assert!(is_plausible_host(host), "{host}");
        }
        for host in ["", "evil.com/path", "a b", "x\"y", "h?q=1", "user@host"] {
            assert!(!is_plausible_host(host), "{host}");
        }
    }

    #[test]
    fn an_allow_list_admits_its_hosts_whatever_their_case_and_nothing_else() {
        let hosts = LinkHosts::only(["Tickd.Example:9643", "10.0.0.5:9643"]);
        assert!(hosts.admits("tickd.example:9643"));
        assert!(hosts.admits("10.0.0.5:9643"));
        assert!(!hosts.admits("tickd.example"));
        assert!(!hosts.admits("evil.example:9643"));
        assert!(LinkHosts::Any.admits("evil.example:9643"));
    }
}
