//! The benchmark's HTTP client and the one tickd call it makes at volume: registering a clock.

use std::time::Duration;

use serde_json::{Value, json};
use tickd_tests::pki::Pki;

/// One HTTP client for every request to a cluster: a connection pool large enough for the
/// widest load level, no proxy (loopback only), and a timeout well past the forwarding
/// deadline. For a cluster with TLS on, it trusts that cluster's CA (and only it).
pub fn http_client(pki: Option<&Pki>) -> Result<reqwest::Client, String> {
    let mut builder = tickd_tests::http::client_builder()
        .pool_max_idle_per_host(512)
        .timeout(Duration::from_secs(30));
    if let Some(pki) = pki {
        builder = builder.tls_backend_preconfigured(pki.client_config(None));
    }
    builder
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// A clock registration request.
#[derive(Debug, Clone)]
pub struct Registration<'a> {
    /// The node's API base URL, e.g. `http://127.0.0.1:9643`.
    pub api: &'a str,
    /// The access token.
    pub token: &'a str,
    /// The clock name.
    pub name: &'a str,
    /// The schedule literal.
    pub schedule: &'a str,
    /// The receiver URL of a webhook clock; `None` registers a clock of the cluster's default
    /// channel.
    pub webhook: Option<&'a str>,
}

impl Registration<'_> {
    /// The request body: what etcd's puts are sized after.
    pub fn body(&self) -> Value {
        match self.webhook {
            None => json!({ "name": self.name, "schedule": self.schedule }),
            Some(url) => json!({
                "name": self.name,
                "schedule": self.schedule,
                "channel": { "type": "webhook", "url": url },
            }),
        }
    }

    /// Registers the clock; the response body on 201.
    pub async fn send(&self, http: &reqwest::Client) -> Result<Value, String> {
        let response = http
            .post(format!("{}/api/v1/clocks", self.api))
            .bearer_auth(self.token)
            .json(&self.body())
            .send()
            .await
            .map_err(|e| format!("{}: {e}", self.api))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("{}: {e}", self.api))?;
        if status == reqwest::StatusCode::CREATED {
            Ok(body)
        } else {
            Err(format!("{} answered {status}: {body}", self.api))
        }
    }
}
