//! Issue 18, items 3 and 5, against real `tickd` processes: a crafted backup is refused with a
//! 400 that says why and leaves the cluster as it was and serving; manual ticks cannot grow an
//! http queue past its limit, and a pop returns at most its maximum.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tickd_tests::api::{
    BACKUP_PATH, RESTORE_PATH, action, clock_id, list_where, on_node, operator, pop, register, send,
};
use tickd_tests::cluster::THIS_LEVEL;
use tickd_tests::{TestCluster, unique_name};

/// The most ticks one pop returns (`tickd_domain::MAX_POP_TICKS`).
const MAX_POP_TICKS: usize = 100;

async fn restore(cluster: &TestCluster, node: u64, document: &Value) -> (StatusCode, Value) {
    let request = operator(cluster, Method::POST, node, RESTORE_PATH).json(document);
    let (status, _, body) = send(request).await;
    (status, body)
}

/// How many clocks a node lists, any status.
async fn clock_count(cluster: &TestCluster, node: u64) -> usize {
    let mut count = 0;
    for status in ["ACTIVE", "PAUSED"] {
        let (code, _, listed) = list_where(cluster, node, &[("status", status)]).await;
        assert_eq!(code, StatusCode::OK, "{listed}");
        count += listed.as_array().map_or(0, Vec::len);
    }
    count
}

/// The pop URL of a registered http clock, on `node`.
fn pop_url(cluster: &TestCluster, node: u64, clock: &Value) -> String {
    let url = clock["channel"]["details"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("an http clock: {clock}"));
    on_node(cluster, node, url)
}

#[tokio::test]
async fn crafted_backups_are_refused_with_a_reason_and_change_nothing() {
    let source = TestCluster::start(1).await;
    let (status, _, clock) = register(&source, 1, &unique_name("crafted"), "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");
    let (status, _, body) = action(&source, 1, &clock_id(&clock), "tick").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, backup) = send(operator(&source, Method::GET, 1, BACKUP_PATH)).await;
    assert_eq!(status, StatusCode::OK, "{backup}");
    assert!(backup["registry"]["clocks"][0].is_object(), "{backup}");

    let edit = |change: &dyn Fn(&mut Value)| {
        let mut document = backup.clone();
        change(&mut document);
        document
    };
    let crafted = [
        (
            "watermark 2^64-1",
            edit(&|d| d["registry"]["ledger"]["intended_through_ms"] = json!(u64::MAX)),
            "ledger.intended_through_ms is 18446744073709551615",
        ),
        (
            "manual_sequence 2^64-1",
            edit(&|d| d["registry"]["ledger"]["manual_sequence"] = json!(u64::MAX)),
            "ledger.manual_sequence is 18446744073709551615",
        ),
        (
            "queue id 1",
            edit(&|d| d["registry"]["clocks"][0]["channel"]["queue_id"] = json!("1")),
            "invalid queue id \"1\"",
        ),
        (
            "a 5 000-byte name",
            edit(&|d| d["registry"]["clocks"][0]["name"] = json!("n".repeat(5_000))),
            "it is 5000 bytes long",
        ),
        (
            "an id with ../",
            edit(&|d| {
                let id = d["registry"]["clocks"][0]["id"]
                    .as_str()
                    .unwrap_or_default();
                d["registry"]["clocks"][0]["id"] = json!(format!("../{id}"));
            }),
            "invalid clock id",
        ),
    ];

    let target = TestCluster::start(3).await;
    for (what, document, says) in &crafted {
        let (status, body) = restore(&target, 2, document).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(says),
            "{what}: the message should say {says:?}: {message}"
        );
        assert!(
            message.len() < 1_000,
            "{what}: the message quotes an excerpt"
        );
    }
    // Nothing changed, and every node still serves: it lists, and the genuine backup restores.
    for node in [1, 2, 3] {
        assert_eq!(clock_count(&target, node).await, 0, "node {node}");
    }
    let (status, body) = restore(&target, 3, &backup).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for node in [1, 2, 3] {
        assert_eq!(clock_count(&target, node).await, 1, "node {node}");
    }
    let (status, _, ticks) = pop(&target, &pop_url(&target, 1, &clock), None).await;
    assert_eq!(status, StatusCode::OK, "{ticks}");
    assert_eq!(
        ticks.as_array().map(Vec::len),
        Some(1),
        "the manual tick: {ticks}"
    );
}

#[tokio::test]
async fn manual_ticks_cannot_exceed_the_queue_limit_and_a_pop_is_bounded() {
    // A limit above one pop's maximum, so that draining the queue takes several pops.
    let limit = 150;
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("http_queue_limit", limit.to_string())
        .start()
        .await;
    // Manual ticks and pops are bounded from cluster level 2 on (level 1 applies them as
    // v0.1.0 did).
    cluster
        .wait_for_cluster_level(THIS_LEVEL, Duration::from_secs(30))
        .await;
    let (status, _, clock) = register(&cluster, 1, &unique_name("burst"), "every.1.hours").await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");
    let id = clock_id(&clock);
    let (status, _, body) = action(&cluster, 1, &id, "pause").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The leader's first intent has carried the configured limit by now (intents run every
    // 200 ms); then a burst of manual ticks well past it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in 0..(limit * 2 + 20) {
        let (status, _, body) = action(&cluster, 1, &id, "tick").await;
        assert_eq!(status, StatusCode::OK, "tick {n}: {body}");
    }
    let url = pop_url(&cluster, 1, &clock);
    let mut sizes = Vec::new();
    let mut ids = Vec::new();
    loop {
        let (status, _, ticks) = pop(&cluster, &url, None).await;
        assert_eq!(status, StatusCode::OK, "{ticks}");
        let ticks = ticks.as_array().cloned().unwrap_or_default();
        if ticks.is_empty() {
            break;
        }
        assert!(sizes.len() < 10, "the queue never drains: {sizes:?}");
        sizes.push(ticks.len());
        ids.extend(ticks.iter().map(|tick| tick["tick_id"].clone()));
    }
    assert_eq!(sizes, [MAX_POP_TICKS, limit - MAX_POP_TICKS], "pop sizes");
    // The newest ticks were kept, oldest first across the pops.
    let last = limit * 2 + 19;
    assert_eq!(ids.last(), Some(&json!(format!("{id}-m{last}"))), "{ids:?}");
}
