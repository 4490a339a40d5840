//! The HTTP client of the admin commands: one node's API, the token, and errors an operator
//! can act on.

use std::error::Error as _;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// How long connecting to the node may take: it is on a local network, so longer means down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one admin request may take. Adding a node waits for it to catch up (up to 30 s)
/// and a backup of a large registry takes a while; everything else answers in milliseconds.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(90);

/// Why an admin command failed. Every message names what to check.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No connection, or no answer in time.
    #[error(
        "cannot reach tickd at {api}: {reason}; is the node running, and is --api (or \
         TICKD_API) its API address?"
    )]
    Unreachable {
        /// The API base URL that was tried.
        api: String,
        /// What the HTTP client reported, with its causes.
        reason: String,
    },
    /// The node answered 403.
    #[error("the {} was refused by {api}; check {}", .credential.name(), .credential.flag())]
    TokenRefused {
        /// The API base URL.
        api: String,
        /// The credential that was sent.
        credential: Credential,
    },
    /// The node answered with an error; its JSON message says why.
    #[error("{message} (HTTP {status})")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The `message` of the JSON error body.
        message: String,
    },
    /// The answer is not the JSON tickd sends: something else listens at the address.
    #[error("{api} answered with something that is not tickd's JSON ({reason}); is --api right?")]
    Garbled {
        /// The API base URL.
        api: String,
        /// What did not decode.
        reason: String,
    },
    /// The command line is incomplete.
    #[error("{0}")]
    Usage(String),
    /// A local file could not be read or written.
    #[error("{what} {path}: {source}")]
    File {
        /// What was being done ("cannot write the backup to").
        what: &'static str,
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A backup file is not one this tickd can restore.
    #[error("{path}: {reason}")]
    Backup {
        /// The file.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },
}

/// Which token a command sends: clock commands and `cluster status` need the access token;
/// membership changes, backup and restore the operator token.
#[derive(Debug, Clone, Copy)]
pub enum Credential {
    /// The access token (`--token`, `ACCESS_TOKEN`).
    Client,
    /// The operator token (`--operator-token`, `OPERATOR_TOKEN`).
    Operator,
}

impl Credential {
    fn name(self) -> &'static str {
        match self {
            Credential::Client => "access token",
            Credential::Operator => "operator token",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Credential::Client => "--token (or ACCESS_TOKEN)",
            Credential::Operator => "--operator-token (or OPERATOR_TOKEN)",
        }
    }

    /// The cluster file's key, and where a node keeps its generated token of this role.
    fn sources(self) -> &'static str {
        match self {
            Credential::Client => "`token` in the cluster file, or access-token",
            Credential::Operator => "`operator_token` in the cluster file, or operator-token",
        }
    }
}

/// A connection to one node's API.
#[derive(Debug, Clone)]
pub struct AdminClient {
    http: reqwest::Client,
    base: String,
    credential: Credential,
    token: String,
}

impl AdminClient {
    /// A client for the API at `api` (`http://host:port`, `https://host:port`, or just
    /// `host:port`: https with `tls`, http without) that sends `token` as its `credential`;
    /// `tls` trusts only the cluster's CA.
    pub fn new(
        api: &str,
        credential: Credential,
        token: Option<String>,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Self, CliError> {
        let token = token.filter(|token| !token.is_empty()).ok_or_else(|| {
            CliError::Usage(format!(
                "no {}: pass {} ({}; a node without a configured token stores a generated \
                 one in its data directory)",
                credential.name(),
                credential.flag(),
                credential.sources(),
            ))
        })?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base = if api.contains("://") {
            api.trim_end_matches('/').to_string()
        } else {
            format!("{scheme}://{}", api.trim_end_matches('/'))
        };
        let builder = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT);
        // Plain HTTP needs no roots: without this, reqwest would load the system's, and fail
        // on a machine without `ca-certificates`.
        let tls = match tls {
            Some(tls) => tls,
            None => tickd_raft::network::unused_tls()
                .map_err(|error| CliError::Usage(format!("cannot set up TLS: {error}")))?,
        };
        let builder = builder.tls_backend_preconfigured(tls);
        let http = builder
            .build()
            .map_err(|error| CliError::Usage(format!("cannot build an HTTP client: {error}")))?;
        Ok(Self {
            http,
            base,
            credential,
            token,
        })
    }

    /// The base URL of the node's API, for messages.
    pub fn api(&self) -> &str {
        &self.base
    }

    /// GETs `path` and returns the JSON answer.
    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.send(Method::GET, path, None).await
    }

    /// Sends a request with an optional JSON body and returns the JSON answer.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|error| self.unreachable(&error))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|error| self.unreachable(&error))?;
        if status == StatusCode::FORBIDDEN {
            return Err(CliError::TokenRefused {
                api: self.base.clone(),
                credential: self.credential,
            });
        }
        let garbled = |reason: String| CliError::Garbled {
            api: self.base.clone(),
            reason,
        };
        let json: Value = serde_json::from_str(&text)
            .map_err(|error| garbled(format!("HTTP {status}, {error}")))?;
        if status.is_success() {
            return Ok(json);
        }
        match json.get("message").and_then(Value::as_str) {
            Some(message) => Err(CliError::Api {
                status: status.as_u16(),
                message: message.to_string(),
            }),
            None => Err(garbled(format!("HTTP {status} without an error message"))),
        }
    }

    fn unreachable(&self, error: &reqwest::Error) -> CliError {
        let mut reason = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            reason = format!("{reason}: {cause}");
            source = cause.source();
        }
        CliError::Unreachable {
            api: self.base.clone(),
            reason,
        }
    }
}
