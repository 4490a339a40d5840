//! Backup and restore, black-box: a backup of a running cluster seeds a fresh one with the
//! same clocks, and a restore never overwrites a cluster that has clocks.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tickd_tests::api::{
    BACKUP_PATH, RESTORE_PATH, action, authed, clock_id, cluster_json, list_where, on_node,
    operator, pop, register, send,
};
use tickd_tests::cluster::THIS_LEVEL;
use tickd_tests::{TestCluster, eventually, unique_name};

/// Every clock a node lists (any status), by id: (name, schedule, status).
async fn clocks_of(cluster: &TestCluster, node: u64) -> BTreeMap<String, (Value, Value, Value)> {
    let mut clocks = BTreeMap::new();
    for status in ["ACTIVE", "PAUSED"] {
        let (code, _, listed) = list_where(cluster, node, &[("status", status)]).await;
        assert_eq!(code, StatusCode::OK, "{listed}");
        for clock in listed.as_array().into_iter().flatten() {
            clocks.insert(
                clock_id(clock),
                (
                    clock["name"].clone(),
                    clock["schedule"].clone(),
                    clock["status"].clone(),
                ),
            );
        }
    }
    clocks
}

async fn restore(cluster: &TestCluster, node: u64, document: &Value) -> (StatusCode, Value) {
    let request = operator(cluster, Method::POST, node, RESTORE_PATH).json(document);
    let (status, _, body) = send(request).await;
    (status, body)
}

/// Backup and restore are the operator's: the access token, which every client holds, gets
/// 403 on both and changes nothing, where the operator token restores the same document.
#[tokio::test]
async fn the_access_token_can_neither_back_up_nor_restore() {
    let source = TestCluster::start(1).await;
    let (status, _, body) = register(&source, 1, &unique_name("kept"), "every.1.hours").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, refused) = send(authed(&source, Method::GET, 1, BACKUP_PATH)).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a backup with the access token: {refused}"
    );
    let (status, _, backup) = send(operator(&source, Method::GET, 1, BACKUP_PATH)).await;
    assert_eq!(status, StatusCode::OK, "{backup}");

    let target = TestCluster::start(1).await;
    let request = authed(&target, Method::POST, 1, RESTORE_PATH).json(&backup);
    let (status, _, refused) = send(request).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a restore with the access token: {refused}"
    );
    assert!(
        clocks_of(&target, 1).await.is_empty(),
        "the refused restore changed nothing"
    );
    let (status, body) = restore(&target, 1, &backup).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(clocks_of(&target, 1).await.len(), 1);
}

#[tokio::test]
async fn a_backup_restored_into_a_fresh_cluster_keeps_ids_statuses_and_queues() {
    let source = TestCluster::start(3).await;
    let ticking = register(&source, 1, &unique_name("ticking"), "every.1.seconds").await;
    let paused = register(&source, 2, &unique_name("paused"), "@never").await;
    let slow = register(&source, 3, &unique_name("slow"), "every.1.hours").await;
    for (status, _, body) in [&ticking, &paused, &slow] {
        assert_eq!(*status, StatusCode::CREATED, "{body}");
    }
    let (ticking, paused) = (ticking.2, paused.2);
    // An undelivered manual tick, then a pause: both must survive.
    for verb in ["tick", "pause"] {
        let (status, _, body) = action(&source, 1, &clock_id(&paused), verb).await;
        assert_eq!(status, StatusCode::OK, "{verb}: {body}");
    }
    let expected = clocks_of(&source, 1).await;
    assert_eq!(expected.len(), 3, "{expected:?}");

    let (status, _, backup) = send(operator(&source, Method::GET, 2, BACKUP_PATH)).await;
    assert_eq!(status, StatusCode::OK, "{backup}");
    assert_eq!(backup["format"], "tickd-backup");
    assert_eq!(backup["version"], 1);
    assert!(backup["last_applied"].as_u64().is_some(), "{backup}");

    let target = TestCluster::start(3).await;
    let (status, body) = restore(&target, 3, &backup).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["restored"], 3);
    for node in [1, 2, 3] {
        assert_eq!(clocks_of(&target, node).await, expected, "node {node}");
    }

    // The queue ids survived: the source's poll URLs work on the target, and the manual tick
    // filed before the backup is delivered there.
    let url_of = |clock: &Value| {
        let url = clock["channel"]["details"]["url"]
            .as_str()
            .expect("a pop url");
        on_node(&target, 2, url)
    };
    let (status, _, manual) = pop(&target, &url_of(&paused), None).await;
    assert_eq!(status, StatusCode::OK, "{manual}");
    assert_eq!(manual[0]["manual"], true, "{manual}");
    assert_eq!(
        manual[0]["clock"].as_str(),
        Some(clock_id(&paused).as_str())
    );
    let ticking_url = url_of(&ticking);
    eventually(
        "a tick of the restored clock on its old queue",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let (status, _, ticks) = pop(&target, &ticking_url, Some(Duration::from_secs(2))).await;
            match ticks.as_array() {
                Some(ticks) if status == StatusCode::OK && !ticks.is_empty() => Ok(()),
                _ => Err(format!("{status} {ticks}")),
            }
        },
    )
    .await;

    // A cluster with clocks is never overwritten, and a document that is not a current backup
    // is refused: nothing changes either way.
    let (status, body) = restore(&target, 1, &backup).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("already holds 3 clocks"),
        "{body}"
    );
    let mut newer = backup.clone();
    newer["version"] = json!(2);
    let fresh = TestCluster::start(1).await;
    for (document, says) in [
        (newer, "format version 2"),
        (json!({"clocks": []}), "not a tickd backup"),
    ] {
        let (status, body) = restore(&fresh, 1, &document).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            body["message"].as_str().unwrap_or_default().contains(says),
            "{body} should say {says:?}"
        );
    }
    assert!(clocks_of(&fresh, 1).await.is_empty());
    assert_eq!(clocks_of(&target, 2).await, expected);
}

/// A restore is applied with the bounds on its queues only from cluster level 2 on, so a cluster
/// still at level 1 does not take one (SECURITY's N9): a new cluster whose third voter never
/// answered cannot learn that voter's release and stays at level 1; a restore there waits for
/// the level, is refused with a 503 that says why, and changes nothing. Once the voter is up
/// the level rises and the same document is restored.
#[tokio::test]
async fn a_restore_waits_for_the_level_of_bounded_queues_and_is_refused_without_it() {
    let source = TestCluster::start(1).await;
    let (status, _, body) = register(&source, 1, &unique_name("kept"), "every.1.hours").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, backup) = send(operator(&source, Method::GET, 1, BACKUP_PATH)).await;
    assert_eq!(status, StatusCode::OK, "{backup}");

    let target = TestCluster::builder()
        .nodes(3)
        .initially_down([3])
        .start()
        .await;
    let view = cluster_json(&target, 1).await;
    assert_eq!(view["cluster_level"], 1, "{view}");
    let asked = Instant::now();
    let (status, body) = restore(&target, 1, &backup).await;
    let waited = asked.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.to_string().contains("level 1"), "{body}");
    // The route waits five seconds for the level before it refuses; a timer may fire a
    // little early by the test's clock, never a second.
    assert!(
        waited >= Duration::from_secs(4),
        "refused after {waited:?}, without waiting for the level"
    );
    assert!(
        clocks_of(&target, 1).await.is_empty(),
        "the refused restore changed nothing"
    );

    target.restart(3);
    target
        .wait_for_cluster_level(THIS_LEVEL, Duration::from_secs(30))
        .await;
    let (status, body) = restore(&target, 2, &backup).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(clocks_of(&target, 3).await.len(), 1);
}
