//! Clocks that disagree (issue 20), with real processes: one node's wall clock set off the
//! machine's by libfaketime (its monotonic clock untouched, as NTP leaves it), the chaos
//! workload and its checkers around the faults. The checkers judge deliveries by the test's
//! own clock, the machine's: no tick before its instant, none lost, writes durable and
//! linearizable, leader and ticks back soon after each heal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tickd_tests::api::{self, authed};
use tickd_tests::chaos::scripted::under_fault;
use tickd_tests::membership::SETTLE;
use tickd_tests::timing::FAILOVER;
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

/// How often the tests ask a node whether it leads.
const LEADERSHIP_POLL: Duration = Duration::from_millis(100);

/// The longest a leader whose clock was stepped beyond the bound may go on leading: its next
/// measurement (one [`MEASURE_EVERY`], whose probes may take a [`PROBE_TIMEOUT`]) turns its verdict
/// and its heartbeats off, then its followers elect another (a [`FAILOVER`]), and a poll of
/// the test may see it a [`LEADERSHIP_POLL`] late.
const LEADS_AFTER_STEP_AT_MOST: Duration = MEASURE_EVERY
    .saturating_add(PROBE_TIMEOUT)
    .saturating_add(FAILOVER)
    .saturating_add(LEADERSHIP_POLL);
/// `tickd_raft::cluster_clock::MEASURE_EVERY` (the suite links none of tickd's code).
const MEASURE_EVERY: Duration = Duration::from_secs(1);
/// `tickd_raft::cluster_clock::PROBE_TIMEOUT`: how long one round's probes may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

/// Whether `node` says it leads (its own cluster view names it), or `None` when it does not
/// answer in time (killed, or busy).
async fn leads(cluster: &TestCluster, node: NodeId) -> Option<bool> {
    let request =
        authed(cluster, Method::GET, node, "/api/v1/cluster").timeout(LEADERSHIP_POLL * 5);
    match api::try_send(request).await {
        Ok((StatusCode::OK, _, view)) => Some(view["leader"] == node),
        _ => None,
    }
}

/// Runs `work` while asking `node` every [`LEADERSHIP_POLL`] whether it leads; returns the
/// work's result and the instants at which the node said it did.
async fn leadership_during<T>(
    cluster: &TestCluster,
    node: NodeId,
    work: impl Future<Output = T>,
) -> (T, Vec<Instant>) {
    let done = AtomicBool::new(false);
    let watch = async {
        let mut led = Vec::new();
        while !done.load(Ordering::Relaxed) {
            let asked = Instant::now();
            if leads(cluster, node).await == Some(true) {
                led.push(asked);
            }
            tokio::time::sleep_until((asked + LEADERSHIP_POLL).into()).await;
        }
        led
    };
    let work = async {
        let result = work.await;
        done.store(true, Ordering::Relaxed);
        result
    };
    tokio::join!(work, watch)
}

/// Ticks node `node` handed to RabbitMQ, by its own metrics. Every node exports the counter
/// from its start (at zero), so a scrape without it fails rather than reading as nothing
/// published: a renamed or dropped metric must not make "fired nothing" pass.
async fn published_by(cluster: &TestCluster, node: NodeId) -> f64 {
    let (status, _, text) = api::send(api::operator(cluster, Method::GET, node, "/metrics")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let text = text.as_str().expect("the metrics are text");
    text.lines()
        .find(|line| line.starts_with("tickd_ticks_published_total "))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("node {node} exports no tickd_ticks_published_total:\n{text}"))
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

    // Refuses to lead: asked every 100 ms through three elections it could win, the skewed
    // node never says it leads (its campaign guard; without it, it wins about half of them).
    let fault = under_fault(&cluster, 20 + offset_seconds.unsigned_abs(), async {
        for _ in 0..3 {
            let leader = wait_for_leader_other_than(&cluster, SKEWED).await;
            cluster.kill(leader);
            // Two nodes are left whose clocks disagree: neither can tell which is right, so
            // neither fires; the ticks wait for the third.
            tokio::time::sleep(HOLD).await;
            cluster.restart(leader);
            cluster.wait_healthy(leader, RECOVERY).await;
        }
    });
    let (verdict, led) = leadership_during(&cluster, SKEWED, fault).await;
    assert!(
        led.is_empty(),
        "node {SKEWED}, {offset_seconds} s off, said it led {} times (polled every {:?})",
        led.len(),
        LEADERSHIP_POLL
    );
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

/// Three RabbitMQ nodes whose clocks can be stepped, each reporting its clock within the
/// bound.
async fn agreeing_cluster() -> TestCluster {
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
    cluster
}

/// The leader's clock stepped `step` seconds ahead, then the next leader's as far back: each
/// hands over within a measurement and a failover (asked every 100 ms whether it still
/// leads), and the checkers see no tick early, by the test's clock, and none lost.
async fn a_stepped_leader_hands_over(step: i64, seed: u64) {
    let cluster = agreeing_cluster().await;
    let mut held_on = Vec::new();
    let verdict = under_fault(&cluster, seed, async {
        for step in [step, -step] {
            let leader = cluster.wait_for_leader(SETTLE).await;
            let stepped_at = Instant::now();
            cluster.set_clock_offset(leader, step);
            // The stepped leader stops firing at its next measurement and hands over.
            let handed_over = wait_for_leader_other_than(&cluster, leader);
            let (_, led) = leadership_during(&cluster, leader, handed_over).await;
            if let Some(last) = led.last() {
                held_on.push((leader, step, last.duration_since(stepped_at)));
            }
            wait_for_verdict(&cluster, leader, false).await;
            tokio::time::sleep(HOLD).await;
            cluster.set_clock_offset(leader, 0);
            wait_for_verdict(&cluster, leader, true).await;
        }
    })
    .await;
    verdict.assert_held(&format!(
        "the leader's clock stepped {step} s, then another's {} s",
        -step
    ));
    for (leader, step, held) in held_on {
        assert!(
            held <= LEADS_AFTER_STEP_AT_MOST,
            "node {leader} still led {held:?} after its clock was stepped {step} s (at most \
             {LEADS_AFTER_STEP_AT_MOST:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_clock_stepped_an_hour_either_way_releases_no_early_tick_and_loses_none() {
    a_stepped_leader_hands_over(HOUR, 31).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_clock_stepped_five_seconds_either_way_hands_over_and_fires_nothing_early() {
    a_stepped_leader_hands_over(5, 37).await;
}

/// How far ahead the leader's clock is set in the within-the-bound test: inside the default
/// `max_clock_offset_ms` (250 ms), and far more than a RabbitMQ delivery takes on loopback.
const WITHIN_BOUND_AHEAD_MS: i64 = 200;
/// How long the leader runs ahead: several measurements, several dozen ticks.
const WITHIN_BOUND_HOLD: Duration = Duration::from_secs(8);

/// A leader 200 ms ahead is within the bound (250 ms): it keeps leading and firing, by the
/// majority's time rather than its own, so no tick reaches a consumer before its instant by
/// the test's clock. Firing by its own clock it would hand every tick over about 200 ms early,
/// which the checkers see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_200_ms_ahead_keeps_firing_and_fires_nothing_early() {
    let cluster = agreeing_cluster().await;
    let mut observed = None;
    let verdict = under_fault(&cluster, 47, async {
        let leader = cluster.wait_for_leader(SETTLE).await;
        cluster.set_clock_offset_ms(leader, WITHIN_BOUND_AHEAD_MS);
        let published_before = published_by(&cluster, leader).await;
        let ((), led) =
            leadership_during(&cluster, leader, tokio::time::sleep(WITHIN_BOUND_HOLD)).await;
        let peer = cluster.node_ids().into_iter().find(|id| *id != leader);
        let peer = peer.expect("a node on the machine's clock");
        let measured = member(&cluster_view(&cluster, peer).await, leader)["clock_offset_ms"]
            .as_i64()
            .expect("the peer measured the leader");
        let still_leads = leads(&cluster, leader).await;
        let published = published_by(&cluster, leader).await - published_before;
        cluster.set_clock_offset_ms(leader, 0);
        observed = Some((leader, measured, led.len(), still_leads, published));
    })
    .await;
    verdict.assert_held("the leader's clock 200 ms ahead, within the bound");
    let (leader, measured, polls_led, still_leads, published) = observed.expect("the fault ran");
    assert!(
        (WITHIN_BOUND_AHEAD_MS - 100..=WITHIN_BOUND_AHEAD_MS + 100).contains(&measured),
        "a peer measured leader {leader} {measured} ms off, not about {WITHIN_BOUND_AHEAD_MS}: \
         the skew the test is about was not applied"
    );
    assert_eq!(
        still_leads,
        Some(true),
        "leader {leader}, within the bound, handed over"
    );
    assert!(
        polls_led > 0 && published > 0.0,
        "leader {leader} led in {polls_led} polls and published {published} ticks while ahead"
    );
}
