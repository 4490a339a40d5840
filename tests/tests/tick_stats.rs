//! Tick statistics (`GET /api/v1/stats`), black-box: real processes, the real RabbitMQ, SIGKILL.
//! Deliveries through both channels, late and coalesced ticks after a whole-cluster outage,
//! dropped ticks from a full http queue, and the same figures on every node. The consumer sees
//! the same gaps in the ticks themselves (`skipped`, SPEC §5).
//!
//! A new cluster keeps statistics from level 2, which its leader sets within seconds of its
//! forming: each test waits for it before its first tick.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tickd_tests::api::{action, anonymous, authed, clock_id, pop, register, send, stats_of};
use tickd_tests::cluster::THIS_LEVEL;
use tickd_tests::gaps::gaps_counted_in;
use tickd_tests::rabbit::{self, Consumers};
use tickd_tests::{NodeId, TestCluster, TestClusterBuilder, eventually, unique_name};

/// Starts the cluster of `builder`, waits until it keeps statistics (level 2, which its leader
/// sets within seconds of the forming), and returns it with one of its followers.
async fn counting(builder: TestClusterBuilder) -> (TestCluster, NodeId) {
    let cluster = builder.start().await;
    cluster
        .wait_for_cluster_level(THIS_LEVEL, Duration::from_secs(30))
        .await;
    let follower = cluster.a_follower(Duration::from_secs(20)).await;
    (cluster, follower)
}

fn count(stats: &Value, field: &str) -> u64 {
    stats[field].as_u64().unwrap_or(0)
}

/// Waits until the figures of clock `id`, read through `node`, satisfy `holds`.
async fn figures_until(
    cluster: &TestCluster,
    node: NodeId,
    id: &str,
    what: &str,
    holds: impl Fn(&Value) -> bool,
) -> Value {
    eventually(
        what,
        Duration::from_secs(30),
        Duration::from_millis(250),
        || async {
            let stats = stats_of(cluster, node, id).await?;
            if holds(&stats) {
                Ok(stats)
            } else {
                Err(format!("not yet: {stats}"))
            }
        },
    )
    .await
}

/// The series windows of the answer of `node`.
async fn series(cluster: &TestCluster, node: NodeId) -> Vec<Value> {
    let (status, _, body) = send(authed(cluster, Method::GET, node, "/api/v1/stats")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["bucket_seconds"], 10, "{body}");
    body["series"].as_array().cloned().unwrap_or_default()
}

fn series_total(windows: &[Value], field: &str) -> u64 {
    windows.iter().map(|window| count(window, field)).sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbit_deliveries_and_an_outage_show_in_the_same_figures_on_every_node() {
    let broker = rabbit::broker().await;
    // A short catch-up window, so that a few seconds of outage coalesce missed ticks.
    let (cluster, follower) = counting(
        TestCluster::builder()
            .nodes(3)
            .rabbit_uri(Some(broker.clone()))
            .setting("catch_up_ms", "2000"),
    )
    .await;
    let name = unique_name("stats-rabbit");
    let consumers =
        Consumers::of_new_clock(&cluster, follower, &name, "every.1.seconds", &broker).await;
    let (_, _, listed) = send(authed(
        &cluster,
        Method::GET,
        follower,
        &format!("/api/v1/clocks?name={name}"),
    ))
    .await;
    let id = clock_id(&listed[0]);

    // Ticks flow: the follower's figures follow the broker's confirmations.
    let delivered = figures_until(
        &cluster,
        follower,
        &id,
        "three delivered ticks in the statistics",
        |stats| count(stats, "delivered") >= 3,
    )
    .await;
    let last = &delivered["last_tick"];
    assert_eq!(last["manual"], false, "{delivered}");
    let lateness = last["lateness_ms"].as_u64().expect("a lateness");
    assert!(
        lateness < 2_000,
        "a tick published on time is not seconds late: {delivered}"
    );
    let recent = delivered["recent_lateness_ms"].as_array().expect("recent");
    assert!(!recent.is_empty() && recent.len() <= 8, "{delivered}");
    assert_eq!(count(&delivered, "coalesced"), 0, "{delivered}");
    let received = consumers.received().len() as u64;
    assert!(
        received >= count(&delivered, "delivered").saturating_sub(1),
        "the consumer got {received} ticks, the statistics say {delivered}"
    );
    assert!(series_total(&series(&cluster, follower).await, "delivered") >= 3);

    // The whole cluster is down for 6 s: with a 2 s catch-up window, the first intent after
    // the restart files the last missed seconds late and coalesces the older ones.
    cluster.kill_all();
    tokio::time::sleep(Duration::from_secs(6)).await;
    cluster.restart_all();
    cluster.wait_for_leader(Duration::from_secs(30)).await;
    let before = count(&delivered, "delivered");
    let after = figures_until(
        &cluster,
        follower,
        &id,
        "late and coalesced ticks after the outage, and deliveries added to those before it",
        |stats| {
            count(stats, "coalesced") >= 2
                && count(stats, "late") >= 1
                && count(stats, "delivered") > before
        },
    )
    .await;
    // The late ticks filed after the restart were delivered late: more than a second.
    let latest: Vec<u64> = after["recent_lateness_ms"]
        .as_array()
        .expect("recent")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert!(
        latest.iter().any(|lateness| *lateness >= 1_000),
        "a tick delivered after the outage is late: {after}"
    );
    let windows = series(&cluster, follower).await;
    assert!(series_total(&windows, "coalesced") >= 2, "{windows:?}");
    assert!(series_total(&windows, "late") >= 1, "{windows:?}");

    // Paused, the clock's figures stop moving; once every node has applied the last
    // confirmation, every node answers the same.
    let (status, _, body) = action(&cluster, follower, &id, "pause").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually(
        "the same figures on every node",
        Duration::from_secs(20),
        Duration::from_millis(500),
        || async {
            let mut answers = Vec::new();
            for node in cluster.node_ids() {
                answers.push(stats_of(&cluster, node, &id).await?);
            }
            if answers.windows(2).all(|pair| pair[0] == pair[1]) {
                Ok(())
            } else {
                Err(format!("the nodes differ: {answers:?}"))
            }
        },
    )
    .await;
    // The consumer saw every coalesced instant counted in the tick that replaced them.
    let received: Vec<Value> = consumers
        .received()
        .iter()
        .map(|received| received.body.clone())
        .collect();
    let figures = stats_of(&cluster, follower, &id).await.expect("stats");
    assert_eq!(
        gaps_counted_in(&received),
        count(&figures, "coalesced"),
        "{figures}"
    );
    consumers.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_queue_counts_its_dropped_ticks_and_a_pop_its_deliveries() {
    let (cluster, follower) = counting(
        TestCluster::builder()
            .nodes(3)
            .setting("http_queue_limit", "3"),
    )
    .await;
    let name = unique_name("stats-http");
    let (status, _, created) = register(&cluster, follower, &name, "every.1.seconds").await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = clock_id(&created);
    let url = created["channel"]["details"]["url"]
        .as_str()
        .expect("a pop url")
        .to_owned();

    // Nobody polls: the queue keeps its newest 3 ticks (at most one of them not yet due: the
    // leader files 600 ms ahead) and drops the older ones.
    let full = figures_until(&cluster, follower, &id, "dropped ticks", |stats| {
        count(stats, "dropped") >= 2
    })
    .await;
    assert_eq!(count(&full, "delivered"), 0, "{full}");
    assert!(full["last_tick"].is_null(), "{full}");

    // One pop returns the kept ticks that are due, 2 or 3: each delivered, the oldest at least
    // a second late.
    let (status, _, popped) = pop(&cluster, &url, None).await;
    assert_eq!(status, StatusCode::OK, "{popped}");
    let popped = popped.as_array().cloned().unwrap_or_default();
    assert!((2..=3).contains(&popped.len()), "{popped:?}");
    let after = stats_of(&cluster, follower, &id).await.expect("stats");
    assert_eq!(count(&after, "delivered"), popped.len() as u64, "{after}");
    // The first tick popped counts every instant dropped before it; the others none.
    assert_eq!(
        popped[0]["skipped"].as_u64(),
        Some(count(&after, "dropped")),
        "{popped:?}"
    );
    assert_eq!(gaps_counted_in(&popped), 0, "{popped:?}");
    let recent: Vec<u64> = after["recent_lateness_ms"]
        .as_array()
        .expect("recent")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(recent.len(), popped.len(), "{after}");
    assert!(recent[0] >= 1_000, "{after}");
    assert!(recent.windows(2).all(|pair| pair[0] > pair[1]), "{after}");
    assert_eq!(
        after["last_tick"]["scheduled_at"],
        popped[popped.len() - 1]["scheduled_at"],
        "the last tick is the newest popped: {after}"
    );
    let windows = series(&cluster, follower).await;
    assert!(series_total(&windows, "dropped") >= 2, "{windows:?}");
    assert!(series_total(&windows, "delivered") >= 2, "{windows:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_statistics_route_needs_the_token_and_refuses_unknown_filters() {
    let cluster = TestCluster::start(1).await;
    let node = cluster.node_ids()[0];
    let (status, _, body) = send(anonymous(&cluster, Method::GET, node, "/api/v1/stats")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _, body) = send(authed(
        &cluster,
        Method::GET,
        node,
        "/api/v1/stats?colour=blue",
    ))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _, body) = send(authed(&cluster, Method::GET, node, "/api/v1/stats")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["matched"], 0, "{body}");
}
