//! Thin helpers for tickd's HTTP API, named for what they do.
//!
//! Every helper returns a [`Reply`] — status, headers and body — and asserts
//! nothing about it: the tests say what they expect. A body that is not JSON
//! becomes `Value::String` with the raw text (so `body.is_object()` tells a
//! JSON error from a plain one), and an empty body becomes `Value::Null`.
//!
//! Authenticated helpers send `Authorization: Bearer <token>`; for the other
//! ways of passing the token, build the request with [`anonymous`] and add it.
//! A transport failure (refused, timed out) panics in [`send`]; use
//! [`try_send`] where a failure is the expected outcome.

use std::error::Error as _;
use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, StatusCode, Url};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::cluster::{NodeId, REQUEST_TIMEOUT, TestCluster};

/// The status, headers and body of one response.
pub type Reply = (StatusCode, HeaderMap, Value);

/// The clocks collection.
pub const CLOCKS_PATH: &str = "/api/v1/clocks";

/// The cluster view.
pub const CLUSTER_PATH: &str = "/api/v1/cluster";

/// The health endpoint.
pub const HEALTH_PATH: &str = "/mgmt/health";

/// The membership collection.
pub const NODES_PATH: &str = "/api/v1/cluster/nodes";

/// The backup route.
pub const BACKUP_PATH: &str = "/api/v1/backup";

/// The restore route.
pub const RESTORE_PATH: &str = "/api/v1/restore";

/// The API's OpenAPI document.
pub const OPENAPI_PATH: &str = "/api/v1/openapi.json";

/// How long a membership change may take: the new node catches up first (the node bounds
/// that wait at 30 s), then two membership entries commit.
pub const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(60);

/// What `/api/v1/cluster` returns.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ClusterView {
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// This node's current Raft term.
    pub term: u64,
    /// Every member, as this node sees it.
    pub nodes: Vec<NodeView>,
}

/// One member in a [`ClusterView`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NodeView {
    /// The member's id.
    pub id: NodeId,
    /// Its API address.
    pub api: String,
    /// Its Raft address.
    pub raft: String,
    /// Whether it votes (a learner does not).
    pub voter: bool,
    /// Its role as this node sees it (leader, follower, …).
    pub role: String,
    /// Whether this node can reach it.
    pub reachable: bool,
    /// The last log index it has applied, as far as this node knows.
    pub last_applied: Option<u64>,
}

/// A request to `path` (with any query) on a node, with the cluster's token
/// as `Authorization: Bearer`.
pub fn authed(cluster: &TestCluster, method: Method, node: NodeId, path: &str) -> RequestBuilder {
    anonymous(cluster, method, node, path).bearer_auth(cluster.token())
}

/// A request to `path` (with any query) on a node, with the operator token: membership
/// changes, backup, restore and metrics.
pub fn operator(cluster: &TestCluster, method: Method, node: NodeId, path: &str) -> RequestBuilder {
    anonymous(cluster, method, node, path).bearer_auth(cluster.operator_token())
}

/// A request to `path` (with any query) on a node, without a token.
pub fn anonymous(
    cluster: &TestCluster,
    method: Method,
    node: NodeId,
    path: &str,
) -> RequestBuilder {
    cluster
        .client()
        .request(method, format!("{}{path}", cluster.api_url(node)))
}

/// Sends a request and collects the reply.
///
/// # Panics
///
/// When the request fails below HTTP (connection refused, timeout, …).
pub async fn send(request: RequestBuilder) -> Reply {
    match try_send(request).await {
        Ok(reply) => reply,
        Err(error) => panic!("request failed: {}", describe(&error)),
    }
}

/// Sends a request and collects the reply, or returns the transport error.
pub async fn try_send(request: RequestBuilder) -> Result<Reply, reqwest::Error> {
    collect(request.send().await?).await
}

/// Reads a response whole into a reply.
pub async fn collect(response: reqwest::Response) -> Result<Reply, reqwest::Error> {
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.bytes().await?;
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    Ok((status, headers, body))
}

/// A transport error with its chain of causes, for a panic message.
pub fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `POST /api/v1/clocks` with `{"name", "schedule"}`.
pub async fn register(cluster: &TestCluster, node: NodeId, name: &str, schedule: &str) -> Reply {
    let body = json!({ "name": name, "schedule": schedule });
    register_body(cluster, node, &body).await
}

/// `POST /api/v1/clocks` of a webhook clock whose ticks go to `url`.
pub async fn register_webhook(
    cluster: &TestCluster,
    node: NodeId,
    name: &str,
    schedule: &str,
    url: &str,
) -> Reply {
    let body = json!({
        "name": name,
        "schedule": schedule,
        "channel": {"type": "webhook", "url": url},
    });
    register_body(cluster, node, &body).await
}

/// `POST /api/v1/clocks` with `body` as it is.
pub async fn register_body(cluster: &TestCluster, node: NodeId, body: &Value) -> Reply {
    send(authed(cluster, Method::POST, node, CLOCKS_PATH).json(body)).await
}

/// The tick statistics of clock `id` (`GET /api/v1/stats?id=`), read through `node`; `Err`
/// says what came back instead.
pub async fn stats_of(cluster: &TestCluster, node: NodeId, id: &str) -> Result<Value, String> {
    let path = format!("/api/v1/stats?id={id}");
    let (status, _, body) = send(authed(cluster, Method::GET, node, &path)).await;
    if status != StatusCode::OK {
        return Err(format!("stats on node {node}: {status} {body}"));
    }
    match body["clocks"].as_array().map(Vec::as_slice) {
        Some([clock]) => Ok(clock.clone()),
        _ => Err(format!(
            "stats on node {node} do not hold exactly clock {id}: {body}"
        )),
    }
}

/// `GET /api/v1/clocks/{id}`.
pub async fn get_clock(cluster: &TestCluster, node: NodeId, id: &str) -> Reply {
    let url = clock_url(cluster, node, id, None);
    send(cluster.client().get(url).bearer_auth(cluster.token())).await
}

/// `GET /api/v1/clocks?{query}`, the query passed as written (already
/// encoded); `""` lists without filters.
pub async fn list(cluster: &TestCluster, node: NodeId, query: &str) -> Reply {
    let path = if query.is_empty() {
        CLOCKS_PATH.to_owned()
    } else {
        format!("{CLOCKS_PATH}?{query}")
    };
    send(authed(cluster, Method::GET, node, &path)).await
}

/// `GET /api/v1/clocks` with these filters, each key and value URL-encoded.
pub async fn list_where(cluster: &TestCluster, node: NodeId, filters: &[(&str, &str)]) -> Reply {
    let mut url = endpoint(cluster, node, CLOCKS_PATH);
    if !filters.is_empty() {
        url.query_pairs_mut().extend_pairs(filters);
    }
    send(cluster.client().get(url).bearer_auth(cluster.token())).await
}

/// `PUT /api/v1/clocks/{id}/{action}` (`pause`, `resume`, `tick`, or anything
/// else to test the 404).
pub async fn action(cluster: &TestCluster, node: NodeId, id: &str, action: &str) -> Reply {
    let url = clock_url(cluster, node, id, Some(action));
    send(cluster.client().put(url).bearer_auth(cluster.token())).await
}

/// `GET` an http channel's pop URL (no token). With `wait`, asks the node to
/// hold the request up to that long (`?wait=N`, whole seconds) and extends the
/// request timeout to match.
pub async fn pop(cluster: &TestCluster, url: &str, wait: Option<Duration>) -> Reply {
    let mut url = Url::parse(url).unwrap_or_else(|error| panic!("pop url {url:?}: {error}"));
    let mut request_timeout = REQUEST_TIMEOUT;
    if let Some(wait) = wait {
        url.query_pairs_mut()
            .append_pair("wait", &wait.as_secs().to_string());
        request_timeout += wait;
    }
    send(cluster.client().get(url).timeout(request_timeout)).await
}

/// `POST /api/v1/cluster/nodes` on node `via`: add node `id` with the addresses the cluster
/// file gives it.
pub async fn add_node(cluster: &TestCluster, via: NodeId, id: NodeId) -> Reply {
    let body = json!({
        "id": id,
        "api": cluster.api_addr(id).to_string(),
        "raft": cluster.raft_addr(id).to_string(),
    });
    let request = operator(cluster, Method::POST, via, NODES_PATH).json(&body);
    send(request.timeout(MEMBERSHIP_TIMEOUT)).await
}

/// `DELETE /api/v1/cluster/nodes/{id}` on node `via`.
pub async fn remove_node(cluster: &TestCluster, via: NodeId, id: NodeId) -> Reply {
    let request = operator(cluster, Method::DELETE, via, &format!("{NODES_PATH}/{id}"));
    send(request.timeout(MEMBERSHIP_TIMEOUT)).await
}

/// `GET /mgmt/health` (no token).
pub async fn health(cluster: &TestCluster, node: NodeId) -> Reply {
    send(anonymous(cluster, Method::GET, node, HEALTH_PATH)).await
}

/// The sample of one series in `node`'s metrics: `series` is the metric's name, with its
/// labels as the node renders them (`name{label="value"}`) if it has any; `None` when the node
/// does not export it.
///
/// # Panics
///
/// When the node does not answer the operator's `GET /metrics` with 200.
pub async fn metric(cluster: &TestCluster, node: NodeId, series: &str) -> Option<f64> {
    let (status, _, text) = send(operator(cluster, Method::GET, node, "/metrics")).await;
    assert_eq!(status, StatusCode::OK, "node {node}: GET /metrics: {text}");
    let text = text
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| text.to_string());
    text.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// `GET /api/v1/cluster`, parsed.
///
/// # Panics
///
/// When the node does not answer 200 with a cluster view.
pub async fn cluster_view(cluster: &TestCluster, node: NodeId) -> ClusterView {
    let body = cluster_json(cluster, node).await;
    serde_json::from_value(body.clone())
        .unwrap_or_else(|error| panic!("node {node}: cluster view {body}: {error}"))
}

/// `GET /api/v1/cluster` as JSON, every field (versions, levels, clock offsets) included.
///
/// # Panics
///
/// When the node does not answer 200.
pub async fn cluster_json(cluster: &TestCluster, node: NodeId) -> Value {
    let (status, _, body) = send(authed(cluster, Method::GET, node, CLUSTER_PATH)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "node {node}: GET {CLUSTER_PATH}: {body}"
    );
    body
}

/// The URL of a clock (`action: None`) or of one of its actions on a node;
/// the id and action are encoded as path segments.
pub fn clock_url(cluster: &TestCluster, node: NodeId, id: &str, action: Option<&str>) -> Url {
    let mut url = endpoint(cluster, node, CLOCKS_PATH);
    {
        let mut segments = url
            .path_segments_mut()
            .expect("an http URL has path segments");
        segments.push(id);
        if let Some(action) = action {
            segments.push(action);
        }
    }
    url
}

/// The same absolute URL (e.g. a pop URL or a `Location` handed out by one
/// node) pointed at another node's API address.
pub fn on_node(cluster: &TestCluster, node: NodeId, url: &str) -> String {
    let mut url = Url::parse(url).unwrap_or_else(|error| panic!("url {url:?}: {error}"));
    let addr = cluster.api_addr(node);
    url.set_ip_host(addr.ip())
        .expect("an http URL takes an IP host");
    url.set_port(Some(addr.port()))
        .expect("an http URL takes a port");
    url.into()
}

/// The `id` of a clock in a reply body.
///
/// # Panics
///
/// When the body has no string `id`.
pub fn clock_id(body: &Value) -> String {
    match body.get("id").and_then(Value::as_str) {
        Some(id) => id.to_owned(),
        None => panic!("no clock id in {body}"),
    }
}

/// A node's base URL joined with `path`, parsed.
fn endpoint(cluster: &TestCluster, node: NodeId, path: &str) -> Url {
    let base = cluster.api_url(node);
    Url::parse(&format!("{base}{path}")).unwrap_or_else(|error| panic!("url {base}{path}: {error}"))
}
