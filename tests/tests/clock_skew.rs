//! Clocks that disagree (issue 20), with real processes: one node's wall clock set off the
//! machine's by libfaketime (its monotonic clock untouched, as NTP leaves it), the chaos
//! workload and its checkers around the faults. The checkers judge deliveries by the test's
//! own clock, the machine's: no tick before its instant, none lost, writes durable and
//! linearizable, leader and ticks back soon after each heal.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tickd_tests::api::{self, authed};
use tickd_tests::chaos::scripted::under_fault;
use tickd_tests::membership::SETTLE;
use tickd_tests::{NodeId, TestCluster, eventually, rabbit};

/// The node whose clock is set off.
const SKEWED: NodeId = 1;
/// How long a restarted node may take to be healthy again.
const RECOVERY: Duration = Duration::from_secs(30);
/// How long each fault holds.
const HOLD: Duration = Duration::from_secs(3);
/// An hour, in seconds: the size of the steps.
const HOUR: i64 = 3_600;

/// The cluster's status as `node` sees it.
async fn cluster_view(cluster: &TestCluster, node: NodeId) -> Value {
    let (status, _, view) = api::send(authed(cluster, Method::GET, node, "/api/v1/cluster")).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    view
}

/// `member`'s entry in `view`.
fn member(view: &Value, member: NodeId) -> &Value {
    view["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|node| node["id"] == member))
        .unwrap_or_else(|| panic!("node {member} in {view}"))
}

/// Waits until `node` says its own clock is (or is not) within the bound.
async fn wait_for_verdict(cluster: &TestCluster, node: NodeId, within: bool) {
    let what = format!("node {node} to report its clock within the bound: {within}");
    eventually(&what, SETTLE, Duration::from_millis(250), || async {
        let view = cluster_view(cluster, node).await;
        match member(&view, node)["clock_within_bound"].as_bool() {
            Some(verdict) if verdict == within => Ok(()),
            other => Err(format!("{other:?} in {view}")),
        }
    })
    .await;
}

/// Waits for a leader other than `old`.
async fn wait_for_leader_other_than(cluster: &TestCluster, old: NodeId) -> NodeId {
    let leader = cluster.wait_for_new_leader(old, SETTLE).await;
    assert_ne!(leader, old);
    leader
}

/// Ticks node `node` handed to RabbitMQ, by its own metrics.
async fn published_by(cluster: &TestCluster, node: NodeId) -> f64 {
    let (status, _, text) = api::send(api::operator(cluster, Method::GET, node, "/metrics")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    text.as_str()
        .unwrap_or_default()
        .lines()
        .find(|line| line.starts_with("tickd_ticks_published_total "))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A node `offset_seconds` off the others: it says so, never leads for long, fires nothing,
/// and with the leader killed three times over no tick is early or lost.
async fn a_skewed_node_never_fires(offset_seconds: i64) {
    let broker = rabbit::broker().await;
    let cluster = TestCluster::builder()
        .nodes(3)
        .rabbit_uri(Some(broker))
        .clock_offset(SKEWED, offset_seconds)
        .start()
        .await;
    wait_for_verdict(&cluster, SKEWED, false).await;
    let healthy = cluster.node_ids().into_iter().find(|id| *id != SKEWED);
    let healthy = healthy.expect("a node on the machine's clock");
    wait_for_verdict(&cluster, healthy, true).await;
    // Had it led before its first measurement, it has handed over by now.
    wait_for_leader_other_than(&cluster, SKEWED).await;

    // Its peers measure it, and so does it: about the offset, either way round.
    let expected_ms = offset_seconds * 1_000;
    let seen_by_peer = member(&cluster_view(&cluster, healthy).await, SKEWED)["clock_offset_ms"]
        .as_i64()
        .expect("the peer measured the skewed node");
    assert!(
        (seen_by_peer - expected_ms).abs() < 500,
        "node {healthy} measured node {SKEWED} {seen_by_peer} ms off, not about {expected_ms}"
    );
    let seen_by_skewed = member(&cluster_view(&cluster, SKEWED).await, healthy)["clock_offset_ms"]
        .as_i64()
        .expect("the skewed node measured its peer");
    assert!(
        (seen_by_skewed + expected_ms).abs() < 500,
        "node {SKEWED} measured node {healthy} {seen_by_skewed} ms off, not about {}",
        -expected_ms
    );

    let verdict = under_fault(&cluster, 20 + offset_seconds.unsigned_abs(), async {
        for _ in 0..3 {
            let leader = wait_for_leader_other_than(&cluster, SKEWED).await;
            cluster.kill(leader);
            // Two nodes are left whose clocks disagree: neither can tell which is right, so
            // neither fires; the ticks wait for the third.
            tokio::time::sleep(HOLD).await;
            cluster.restart(leader);
            cluster.wait_healthy(leader, RECOVERY).await;
        }
    })
    .await;
    verdict.assert_held(&format!(
        "a node {offset_seconds} s off, three leader kills"
    ));
    assert_eq!(
        published_by(&cluster, SKEWED).await,
        0.0,
        "the skewed node published ticks"
    );
    assert!(
        cluster.log(SKEWED).contains("beyond max_clock_offset_ms"),
        "the skewed node's log says why it holds back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_five_seconds_ahead_never_fires_and_no_tick_is_early_or_lost() {
    a_skewed_node_never_fires(5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_five_seconds_behind_never_fires_and_no_tick_is_early_or_lost() {
    a_skewed_node_never_fires(-5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_clock_stepped_an_hour_either_way_releases_no_early_tick_and_loses_none() {
    let broker = rabbit::broker().await;
    let cluster = TestCluster::builder()
        .nodes(3)
        .rabbit_uri(Some(broker))
        .skewable_clocks()
        .start()
        .await;
    for node in cluster.node_ids() {
        wait_for_verdict(&cluster, node, true).await;
    }
    let verdict = under_fault(&cluster, 31, async {
        for step in [HOUR, -HOUR] {
            let leader = cluster.wait_for_leader(SETTLE).await;
            cluster.set_clock_offset(leader, step);
            // The stepped leader stops firing at its next measurement and hands over.
            wait_for_leader_other_than(&cluster, leader).await;
            wait_for_verdict(&cluster, leader, false).await;
            tokio::time::sleep(HOLD).await;
            cluster.set_clock_offset(leader, 0);
            wait_for_verdict(&cluster, leader, true).await;
        }
    })
    .await;
    verdict.assert_held("the leader's clock stepped an hour ahead, then another's an hour back");
}
