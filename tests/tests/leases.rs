//! Lease and ack on http queues (SPEC §2), black-box on a 3-node cluster of real processes: a
//! tick leased and never acked comes back with one more delivery, whichever node is asked; an
//! acked one never comes back; the leader killed while leases are open loses no tick and lets
//! none be acked twice; a lease that runs out while the whole cluster is down is honoured once
//! it is back.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tickd_tests::api::{self, action, on_node};
use tickd_tests::leases::{REQUEST_TIMEOUT, ack, http_clock, lease, post, text};
use tickd_tests::timing::AGREED_LEADER_WITHIN;
use tickd_tests::{NodeId, TestCluster, eventually, unique_name};

/// An http clock of `schedule` registered through node 1: its id and its queue's base URL.
async fn registered(cluster: &TestCluster, schedule: &str) -> (String, String) {
    let body = json!({"name": unique_name("leased"), "schedule": schedule});
    http_clock(cluster, &body).await
}

/// A 3-node cluster with an `@never` http clock holding one manual tick: the cluster, the
/// clock's id and its queue's base URL.
async fn one_manual_tick() -> (TestCluster, String, String) {
    let cluster = TestCluster::builder().nodes(3).start().await;
    let (id, queue) = registered(&cluster, "@never").await;
    let (status, _, body) = action(&cluster, 1, &id, "tick").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    (cluster, id, queue)
}

/// The manual tick of [`one_manual_tick`], leased on `node` for a second once it is filed.
async fn lease_the_tick(cluster: &TestCluster, node: NodeId, queue: &str) -> Value {
    eventually(
        "the manual tick to be leased",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            match lease(cluster, node, queue, 1_000).await.as_slice() {
                [tick] => Ok(tick.clone()),
                other => Err(format!("leased {other:?}")),
            }
        },
    )
    .await
}

#[tokio::test]
async fn a_tick_leased_and_never_acked_comes_back_and_an_acked_one_never_does() {
    let (cluster, id, queue) = one_manual_tick().await;

    let first = lease_the_tick(&cluster, 2, &queue).await;
    assert_eq!(first["deliveries"], 1, "{first}");
    assert_eq!(first["manual"], true, "{first}");
    let tick_id = text(&first, "tick_id").to_owned();
    // Hidden from every other poller while the lease holds: a lease or a pop elsewhere gets
    // nothing.
    assert_eq!(lease(&cluster, 3, &queue, 1_000).await, Vec::<Value>::new());
    let (status, _, popped) = api::pop(
        &cluster,
        &on_node(&cluster, 1, &format!("{queue}/pop")),
        None,
    )
    .await;
    assert_eq!((status, popped), (StatusCode::OK, json!([])));

    // Never acked: handed out again after the visibility time, same id, deliveries 2, then 3,
    // through whichever node is asked.
    let mut receipts = vec![text(&first, "receipt").to_owned()];
    // The second lease runs out too; the third holds.
    for (deliveries, node, visibility_ms) in [(2, 3, 1_000), (3, 1, 30_000)] {
        let again = eventually(
            "the unacked tick to come back",
            Duration::from_secs(10),
            Duration::from_millis(100),
            || async {
                match lease(&cluster, node, &queue, visibility_ms)
                    .await
                    .as_slice()
                {
                    [tick] => Ok(tick.clone()),
                    other => Err(format!("leased {other:?}")),
                }
            },
        )
        .await;
        assert_eq!(text(&again, "tick_id"), tick_id, "{again}");
        assert_eq!(again["deliveries"], deliveries, "{again}");
        receipts.push(text(&again, "receipt").to_owned());
    }
    let answer = ack(&cluster, 2, &queue, &[]).await;
    assert_eq!(answer, json!({"acked": 0, "refused": []}));
    // The stale receipts are refused, the live one acks, and a repeat of it is refused.
    let latest = receipts[2].as_str();
    let answer = ack(&cluster, 2, &queue, &[receipts[0].as_str(), latest, latest]).await;
    assert_eq!(
        answer,
        json!({"acked": 1, "refused": [
            {"receipt": receipts[0], "reason": "unknown"},
            {"receipt": latest, "reason": "repeated"},
        ]})
    );
    // Acked again through another node before its deadline, as a client whose answer was lost
    // retries: acked again, not refused.
    let answer = ack(&cluster, 3, &queue, &[latest]).await;
    assert_eq!(answer, json!({"acked": 1, "refused": []}));
    // Acked: it never comes back, however long a lease waits.
    let url = on_node(&cluster, 1, &format!("{queue}/lease?wait=3"));
    let (status, _, none) = api::send(cluster.client().post(url).timeout(REQUEST_TIMEOUT)).await;
    assert_eq!((status, none), (StatusCode::OK, json!([])));

    let stats = api::stats_of(&cluster, 3, &id)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        (
            &stats["delivered"],
            &stats["redelivered"],
            &stats["acked"],
            &stats["leased"]
        ),
        (&json!(1), &json!(2), &json!(1), &json!(0)),
        "{stats}"
    );
}

#[tokio::test]
async fn bad_leases_and_acks_are_refused_and_change_nothing() {
    let (cluster, _, queue) = one_manual_tick().await;
    for (route, body) in [
        ("lease", json!({"max": 0})),
        ("lease", json!({"max": 101})),
        ("lease", json!({"visibility_ms": 999})),
        ("lease", json!({"visibility_ms": 3_600_001})),
        ("lease", json!({"max": "ten"})),
        // serde reads a struct from an array of its fields too; no schema of an object does.
        ("lease", json!([null, null])),
        ("ack", json!({})),
        ("ack", json!({"receipts": vec!["r.0"; 101]})),
    ] {
        let (status, _, answer) = post(&cluster, 2, &queue, route, &body)
            .await
            .unwrap_or_else(|error| panic!("{route}: {error}"));
        assert_eq!(status, StatusCode::BAD_REQUEST, "{route} {body}: {answer}");
        assert!(
            answer["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{answer}"
        );
    }
    // A receipt longer than any tickd issues is unknown, answered without a write.
    let long = "r".repeat(65);
    let answer = ack(&cluster, 1, &queue, &["x.0", &long]).await;
    assert_eq!(
        answer,
        json!({"acked": 0, "refused": [
            {"receipt": "x.0", "reason": "unknown"},
            {"receipt": long, "reason": "unknown"},
        ]})
    );
    // A body that is not declared as JSON is a 415, never ignored.
    let url = on_node(&cluster, 2, &format!("{queue}/lease"));
    let (status, _, answer) = api::send(cluster.client().post(url).body(r#"{"max": 1}"#)).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{answer}");
    // An unknown queue is a 404 for both routes.
    let unknown = format!(
        "{}/{}",
        queue.rsplit_once('/').map_or("", |(base, _)| base),
        "0".repeat(32)
    );
    for route in ["lease", "ack"] {
        let (status, _, answer) = post(&cluster, 3, &unknown, route, &json!({"receipts": []}))
            .await
            .unwrap_or_else(|error| panic!("{route}: {error}"));
        assert_eq!(status, StatusCode::NOT_FOUND, "{route}: {answer}");
    }
    // The tick is still there, untouched, for the first lease.
    let ticks = lease(&cluster, 1, &queue, 1_000).await;
    assert_eq!(ticks.len(), 1, "{ticks:?}");
    assert_eq!(ticks[0]["deliveries"], 1);
}

/// One tick leased on `node` for `visibility_ms`.
async fn lease_one(cluster: &TestCluster, node: NodeId, queue: &str, visibility_ms: u64) -> Value {
    let body = json!({"max": 1, "visibility_ms": visibility_ms});
    match post(cluster, node, queue, "lease", &body).await {
        Ok((StatusCode::OK, _, Value::Array(ticks))) if ticks.len() == 1 => ticks[0].clone(),
        other => panic!("a lease of one tick on node {node}: {other:?}"),
    }
}

/// What a consumer that acks whatever it is handed has seen of one clock.
#[derive(Default)]
struct Consumer {
    /// Per tick id: how many times an ack of it was answered as acked.
    acked: BTreeMap<String, u32>,
    /// Per tick id: the highest `deliveries` it was handed out with.
    deliveries: BTreeMap<String, u64>,
    /// Requests that failed below HTTP or with a 503 (a failover).
    failed: u32,
}

impl Consumer {
    /// One round: lease through `node`, then ack what was leased, retrying the ack through
    /// the other nodes until one answers. A retried ack's `unknown` means the failed attempt
    /// committed (nobody else holds the receipt), so it counts as acked.
    async fn round(&mut self, cluster: &TestCluster, node: NodeId, queue: &str) {
        let body = json!({"max": 100, "visibility_ms": 2_000});
        let ticks = match post(cluster, node, queue, "lease", &body).await {
            Ok((StatusCode::OK, _, Value::Array(ticks))) => ticks,
            Ok((StatusCode::SERVICE_UNAVAILABLE, _, _)) | Err(_) => {
                self.failed += 1;
                return;
            }
            Ok(other) => panic!("lease on node {node}: {other:?}"),
        };
        if ticks.is_empty() {
            return;
        }
        let mut by_receipt = BTreeMap::new();
        for tick in &ticks {
            let id = text(tick, "tick_id").to_owned();
            let deliveries = tick["deliveries"].as_u64().unwrap_or_default();
            let seen = self.deliveries.entry(id.clone()).or_default();
            *seen = (*seen).max(deliveries);
            by_receipt.insert(text(tick, "receipt").to_owned(), id);
        }
        let receipts: Vec<&str> = by_receipt.keys().map(String::as_str).collect();
        let mut retried = false;
        for attempt in 0..30 {
            let via: NodeId = 1 + (attempt + node) % 3;
            match post(cluster, via, queue, "ack", &json!({ "receipts": receipts })).await {
                Ok((StatusCode::OK, _, answer)) => {
                    let refused: BTreeMap<&str, &str> = answer["refused"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|refusal| (text(refusal, "receipt"), text(refusal, "reason")))
                        .collect();
                    for (receipt, id) in &by_receipt {
                        let acked = match refused.get(receipt.as_str()) {
                            None => true,
                            Some(&"unknown") if retried => true,
                            Some(_) => false,
                        };
                        if acked {
                            *self.acked.entry(id.clone()).or_default() += 1;
                        }
                    }
                    return;
                }
                Ok((StatusCode::SERVICE_UNAVAILABLE, _, _)) | Err(_) => {
                    self.failed += 1;
                    retried = true;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(other) => panic!("ack through node {via}: {other:?}"),
            }
        }
        panic!("no node answered an ack for 30 attempts");
    }
}

#[tokio::test]
async fn the_leader_killed_with_leases_open_loses_no_tick_and_acks_none_twice() {
    let cluster = TestCluster::builder().nodes(3).start().await;
    let (id, queue) = registered(&cluster, "every.1.seconds").await;
    let mut consumer = Consumer::default();
    let started = Instant::now();
    let mut killed = None;
    let mut round: NodeId = 0;
    while started.elapsed() < Duration::from_secs(16) {
        round += 1;
        let node = 1 + round % 3;
        if killed.is_none() && started.elapsed() > Duration::from_secs(5) {
            let leader = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
            let follower = 1 + leader % 3;
            // Two leases open across the kill: one held for 20 s and acked after the failover
            // (the new leader must neither have lost it nor ended it early), one of 1 s never
            // acked (it must come back, one delivery more, and be acked by the rounds).
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            let held = lease_one(&cluster, follower, &queue, 20_000).await;
            let abandoned = lease_one(&cluster, follower, &queue, 1_000).await;
            cluster.kill(leader);
            killed = Some(leader);
            consumer
                .deliveries
                .insert(text(&abandoned, "tick_id").to_owned(), 1);
            let receipt = text(&held, "receipt");
            let answer = eventually(
                "the ack of the lease held across the failover",
                Duration::from_secs(15),
                Duration::from_millis(200),
                || async {
                    match post(
                        &cluster,
                        follower,
                        &queue,
                        "ack",
                        &json!({"receipts": [receipt]}),
                    )
                    .await
                    {
                        Ok((StatusCode::OK, _, answer)) => Ok(answer),
                        other => Err(format!("{other:?}")),
                    }
                },
            )
            .await;
            assert_eq!(answer, json!({"acked": 1, "refused": []}), "{held}");
            consumer.acked.insert(text(&held, "tick_id").to_owned(), 1);
            consumer
                .deliveries
                .insert(text(&held, "tick_id").to_owned(), 1);
        }
        if Some(node) == killed {
            continue;
        }
        consumer.round(&cluster, node, &queue).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let leader = killed.expect("the leader was killed");
    cluster.restart(leader);
    cluster.wait_healthy(leader, Duration::from_secs(30)).await;
    // Stop the clock, then drain: whatever a lease still hides comes back after 2 s.
    let (status, _, body) = action(&cluster, 1, &id, "pause").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let drained = Instant::now();
    while drained.elapsed() < Duration::from_secs(6) {
        consumer
            .round(
                &cluster,
                1 + (drained.elapsed().as_millis() % 3) as NodeId,
                &queue,
            )
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let twice: Vec<&String> = consumer
        .acked
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|(id, _)| id)
        .collect();
    assert!(twice.is_empty(), "ticks acked twice: {twice:?}");
    let instants: Vec<u64> = consumer
        .acked
        .keys()
        .filter_map(|id| id.rsplit_once('-').and_then(|(_, at)| at.parse().ok()))
        .collect();
    assert!(instants.len() >= 10, "too few ticks acked: {instants:?}");
    let missing: Vec<u64> = instants
        .windows(2)
        .filter(|pair| pair[1] - pair[0] != 1_000)
        .map(|pair| pair[0] + 1_000)
        .collect();
    assert!(
        missing.is_empty(),
        "ticks never acked after: {missing:?} (acked {instants:?})"
    );
    let redelivered = consumer
        .deliveries
        .values()
        .filter(|count| **count > 1)
        .count();
    assert!(
        redelivered >= 1,
        "the abandoned lease's tick never came back"
    );
    let unacked: Vec<&String> = consumer
        .deliveries
        .keys()
        .filter(|id| !consumer.acked.contains_key(*id))
        .collect();
    assert!(
        unacked.is_empty(),
        "ticks leased and never acked: {unacked:?}"
    );
    eprintln!(
        "{} ticks acked once each; {} redelivered; {} requests failed during the failover",
        instants.len(),
        redelivered,
        consumer.failed
    );
}

#[tokio::test]
async fn a_lease_that_runs_out_while_the_cluster_is_down_is_honoured_when_it_is_back() {
    let (cluster, _, queue) = one_manual_tick().await;
    let first = lease_the_tick(&cluster, 1, &queue).await;
    cluster.kill_all();
    tokio::time::sleep(Duration::from_secs(6)).await;
    cluster.restart_all();
    cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    let again = eventually(
        "the tick to be handed out again",
        Duration::from_secs(20),
        Duration::from_millis(200),
        || async {
            match post(&cluster, 2, &queue, "lease", &json!({})).await {
                Ok((StatusCode::OK, _, Value::Array(ticks))) if ticks.len() == 1 => {
                    Ok(ticks[0].clone())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(again["tick_id"], first["tick_id"]);
    assert_eq!(again["deliveries"], 2);
}
