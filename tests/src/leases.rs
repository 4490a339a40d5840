//! Leases and acks of http queues (SPEC §2) as a consumer sends them: a clock's queue, and
//! `lease` and `ack` on any node, for the suites of leases and of overlap control.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::api::{self, Reply, clock_id, on_node, register_body};
use crate::{NodeId, TestCluster};

/// How long one request may take on a loaded two-core machine, a failover included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The http clock that registering `body` through node 1 created: its id and its queue's base
/// URL (`…/api/v1/queues/{id}`).
pub async fn http_clock(cluster: &TestCluster, body: &Value) -> (String, String) {
    let (status, _, answer) = register_body(cluster, 1, body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let pop = answer["channel"]["details"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("an http channel: {answer}"));
    let queue = pop
        .strip_suffix("/pop")
        .unwrap_or_else(|| panic!("a pop URL: {pop}"));
    (clock_id(&answer), queue.to_owned())
}

/// `POST {queue}/{route}` on `node` with `body`; `Err` for a transport error (a node killed
/// mid-request).
pub async fn post(
    cluster: &TestCluster,
    node: NodeId,
    queue: &str,
    route: &str,
    body: &Value,
) -> Result<Reply, String> {
    let url = on_node(cluster, node, &format!("{queue}/{route}"));
    let request = cluster
        .client()
        .post(url)
        .json(body)
        .timeout(REQUEST_TIMEOUT);
    api::try_send(request)
        .await
        .map_err(|error| api::describe(&error))
}

/// A lease of up to 100 ticks on `node` that must answer 200; its ticks.
pub async fn lease(
    cluster: &TestCluster,
    node: NodeId,
    queue: &str,
    visibility_ms: u64,
) -> Vec<Value> {
    let body = json!({"max": 100, "visibility_ms": visibility_ms});
    let (status, _, answer) = post(cluster, node, queue, "lease", &body)
        .await
        .unwrap_or_else(|error| panic!("lease on node {node}: {error}"));
    assert_eq!(status, StatusCode::OK, "lease on node {node}: {answer}");
    answer
        .as_array()
        .unwrap_or_else(|| panic!("a list of ticks: {answer}"))
        .clone()
}

/// An ack on `node` that must answer 200; its answer.
pub async fn ack(cluster: &TestCluster, node: NodeId, queue: &str, receipts: &[&str]) -> Value {
    let body = json!({ "receipts": receipts });
    let (status, _, answer) = post(cluster, node, queue, "ack", &body)
        .await
        .unwrap_or_else(|error| panic!("ack on node {node}: {error}"));
    assert_eq!(status, StatusCode::OK, "ack on node {node}: {answer}");
    answer
}

/// A tick's `field`, which must be a string.
pub fn text<'a>(tick: &'a Value, field: &str) -> &'a str {
    tick[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {tick}"))
}
