//! `GET /metrics`, black-box: real processes scraped the way Prometheus scrapes them, the text
//! parsed by a Prometheus text-format parser, not by string matching.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use prometheus_parse::{Sample, Value};
use reqwest::{Method, StatusCode};
use tickd_tests::api::{self, anonymous, authed, operator};
use tickd_tests::rabbit::{self, Consumers};
use tickd_tests::{NodeId, TestCluster, eventually, unique_name};

/// One parsed scrape of one node.
struct Scrape {
    node: NodeId,
    samples: Vec<Sample>,
}

impl Scrape {
    /// The sum of the samples of `metric` whose labels include every pair of `labels`; 0 when
    /// there is none (a labelled counter, such as a route's requests, appears with its first
    /// event; unlabelled ones are registered at zero when the node starts).
    fn value(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|sample| sample.metric == metric)
            .filter(|sample| {
                labels
                    .iter()
                    .all(|(key, value)| sample.labels.get(key) == Some(*value))
            })
            .map(|sample| match &sample.value {
                Value::Counter(value) | Value::Gauge(value) | Value::Untyped(value) => *value,
                other => panic!("node {}: {metric} is not a number: {other:?}", self.node),
            })
            .sum()
    }

    /// Whether the histogram is exposed as a real Prometheus histogram (with buckets), which
    /// is what lets an operator compute a p99 across nodes.
    fn has_buckets(&self, histogram: &str) -> bool {
        self.samples.iter().any(|sample| {
            sample.metric == histogram
                && matches!(&sample.value, Value::Histogram(buckets) if !buckets.is_empty())
        })
    }
}

/// Scrapes a node with the cluster's token.
async fn scrape(cluster: &TestCluster, node: NodeId) -> Scrape {
    let response = operator(cluster, Method::GET, node, "/metrics")
        .send()
        .await
        .unwrap_or_else(|error| panic!("node {node}: GET /metrics: {}", api::describe(&error)));
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "node {node}: GET /metrics"
    );
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "node {node}: the Prometheus text format, not {content_type:?}"
    );
    let text = response.text().await.expect("the scrape's body");
    let lines = text.lines().map(|line| Ok(line.to_string()));
    let parsed = prometheus_parse::Scrape::parse(lines)
        .unwrap_or_else(|error| panic!("node {node}: the scrape does not parse: {error}"));
    Scrape {
        node,
        samples: parsed.samples,
    }
}

/// Asserts that each counter is higher in `later` than in `earlier`.
fn assert_moved(earlier: &Scrape, later: &Scrape, counters: &[&str]) {
    for counter in counters {
        let (before, after) = (earlier.value(counter, &[]), later.value(counter, &[]));
        assert!(
            after > before,
            "node {}: {counter} did not move between two scrapes ({before} then {after})",
            later.node
        );
    }
}

/// Tick ids that consumers received from `new` after `since` (by the publishing node's
/// `app_id`) and also from `old`: ticks the new leader delivered again after taking over.
fn repeated_since(consumers: &[Consumers], old: NodeId, new: NodeId, since: Instant) -> usize {
    let (old, new) = (format!("tickd-node-{old}"), format!("tickd-node-{new}"));
    let received: Vec<_> = consumers.iter().flat_map(Consumers::received).collect();
    let from_old: BTreeSet<&str> = received
        .iter()
        .filter(|tick| tick.app_id.as_deref() == Some(old.as_str()))
        .map(|tick| tick.tick_id())
        .collect();
    received
        .iter()
        .filter(|tick| tick.at > since && tick.app_id.as_deref() == Some(new.as_str()))
        .map(|tick| tick.tick_id())
        .filter(|id| from_old.contains(id))
        .collect::<BTreeSet<_>>()
        .len()
}

/// How many leader kills the failover part makes. Each halts the followers within a few
/// milliseconds of a publish, before the confirmation's batch (every 100 ms) is committed,
/// nearly always; a broken re-delivery counter fails every attempt.
const FAILOVER_ATTEMPTS: usize = 3;

/// Waits (polling every millisecond) until a consumer receives a tick that `node` published
/// after `since`.
async fn a_tick_from(consumers: &[Consumers], node: NodeId, since: Instant) {
    let publisher = format!("tickd-node-{node}");
    eventually(
        "a tick from the leader",
        Duration::from_secs(5),
        Duration::from_millis(1),
        || async {
            consumers
                .iter()
                .flat_map(Consumers::received)
                .any(|tick| tick.at > since && tick.app_id.as_deref() == Some(publisher.as_str()))
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn metrics_move_while_ticking_and_across_a_leader_kill() {
    let uri = rabbit::broker().await;
    let cluster = TestCluster::builder()
        .nodes(3)
        .rabbit_uri(Some(uri.clone()))
        .start()
        .await;
    let mut leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a 3-node cluster has followers");

    // Five every.1.seconds clocks registered through a follower (so the writes are
    // forwarded), each with a consumer.
    let mut consumers = Vec::new();
    for index in 0..5 {
        let name = unique_name(&format!("metrics-{index}"));
        consumers.push(
            Consumers::of_new_clock(&cluster, follower, &name, "every.1.seconds", &uri).await,
        );
    }
    eventually(
        "every clock ticking",
        Duration::from_secs(5),
        Duration::from_millis(100),
        || async {
            consumers
                .iter()
                .all(|c| c.received().len() >= 2)
                .then_some(())
        },
    )
    .await;

    // Two scrapes of the leader while it ticks: the tick counters move.
    let first = scrape(&cluster, leader).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let second = scrape(&cluster, leader).await;
    assert_moved(
        &first,
        &second,
        &[
            "tickd_ticks_filed_total",
            "tickd_ticks_published_total",
            "tickd_ticks_delivered_total",
            "tickd_tick_publish_lateness_seconds_count",
            "tickd_tick_confirm_duration_seconds_count",
            "tickd_raft_append_duration_seconds_count",
            "tickd_raft_fsync_duration_seconds_count",
            "tickd_raft_commit_index",
            "tickd_raft_last_applied_index",
        ],
    );
    for histogram in [
        "tickd_tick_publish_lateness_seconds",
        "tickd_tick_confirm_duration_seconds",
        "tickd_raft_append_duration_seconds",
        "tickd_api_request_duration_seconds",
    ] {
        assert!(
            second.has_buckets(histogram),
            "{histogram} is a histogram with buckets"
        );
    }
    assert_eq!(second.value("tickd_raft_is_leader", &[]), 1.0);
    assert_eq!(second.value("tickd_rabbitmq_connected", &[]), 1.0);
    assert_eq!(second.value("tickd_clocks", &[("status", "ACTIVE")]), 5.0);
    assert_eq!(second.value("tickd_clocks", &[("status", "PAUSED")]), 0.0);

    // The follower saw the registrations as API requests by route template, and forwarded
    // them to the leader.
    let seen_by_follower = scrape(&cluster, follower).await;
    assert_eq!(seen_by_follower.value("tickd_raft_is_leader", &[]), 0.0);
    assert_eq!(seen_by_follower.value("tickd_raft_has_leader", &[]), 1.0);
    let created = [
        ("route", "/api/v1/clocks"),
        ("method", "POST"),
        ("status", "201"),
    ];
    assert_eq!(
        seen_by_follower.value("tickd_api_requests_total", &created),
        5.0
    );
    assert!(
        seen_by_follower.value(
            "tickd_forwarded_requests_total",
            &[("route", "/internal/write"), ("result", "ok")]
        ) >= 5.0,
        "the follower forwarded its five registrations"
    );
    assert_eq!(
        seen_by_follower.value("tickd_clocks", &[("status", "ACTIVE")]),
        5.0,
        "the state gauges come from the replicated state, on every node"
    );
    // A node counts its clocks again once they changed, not only at its first scrape.
    let (status, _, body) = api::register(&cluster, follower, &unique_name("idle"), "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let idle = api::clock_id(&body);
    let (status, _, body) = api::action(&cluster, follower, &idle, "pause").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually(
        "the follower's gauges counting the paused clock",
        Duration::from_secs(5),
        Duration::from_millis(100),
        || async {
            let seen = scrape(&cluster, follower).await;
            let counts = [
                seen.value("tickd_clocks", &[("status", "ACTIVE")]),
                seen.value("tickd_clocks", &[("status", "PAUSED")]),
            ];
            (counts == [5.0, 1.0]).then_some(())
        },
    )
    .await;

    // A leader kill between a tick's publish and the commit of its confirmation. As soon as
    // the consumers get a tick from the leader, the followers are halted (SIGSTOP), so the
    // leader cannot commit the batched `Confirm` that would take the tick out of the outbox;
    // it is killed and the followers resumed. The new leader inherits the unconfirmed tick
    // and publishes it again: the consumers get it from both, and it must be counted.
    let mut delivered_twice = false;
    for attempt in 1..=FAILOVER_ATTEMPTS {
        let mut before = Vec::new();
        for id in cluster.running_ids() {
            before.push(scrape(&cluster, id).await);
        }
        let followers: Vec<NodeId> = cluster
            .running_ids()
            .into_iter()
            .filter(|id| *id != leader)
            .collect();
        a_tick_from(&consumers, leader, Instant::now()).await;
        for id in &followers {
            cluster.stop(*id);
        }
        cluster.kill(leader);
        let killed_at = Instant::now();
        for id in &followers {
            cluster.cont(*id);
        }
        let new_leader = cluster
            .wait_for_new_leader(leader, Duration::from_secs(10))
            .await;
        let before = before
            .into_iter()
            .find(|scrape| scrape.node == new_leader)
            .expect("the new leader was scraped before the kill");

        // The new leader republishes what it inherited within a second of taking over. The
        // repeats are counted before the scrape: the counter moves before the consumer sees
        // the tick, so it can only be ahead.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let repeats = repeated_since(&consumers, leader, new_leader, killed_at);
        let after = scrape(&cluster, new_leader).await;
        assert_eq!(after.value("tickd_raft_is_leader", &[]), 1.0);
        assert!(
            after.value("tickd_raft_term", &[]) > before.value("tickd_raft_term", &[]),
            "attempt {attempt}: a new term"
        );
        assert_moved(&before, &after, &["tickd_raft_leader_changes_total"]);
        // Every tick the consumers got from both leaders was counted as a re-delivery (the
        // counter may count more: a tick the dead leader was about to publish when it died
        // is counted too, since the new leader cannot know).
        let redelivered = after.value("tickd_ticks_redelivered_total", &[])
            - before.value("tickd_ticks_redelivered_total", &[]);
        assert!(
            redelivered >= repeats as f64,
            "attempt {attempt}: consumers got {repeats} ticks from both node {leader} and \
             node {new_leader}, but the new leader counted {redelivered} re-deliveries"
        );
        cluster.restart(leader);
        cluster.wait_healthy(leader, Duration::from_secs(20)).await;
        leader = new_leader;
        if repeats > 0 {
            delivered_twice = true;
            break;
        }
        eprintln!(
            "attempt {attempt}: no tick reached the consumers from both leaders (its \
             confirmation was committed before the followers were halted?); trying again"
        );
    }
    assert!(
        delivered_twice,
        "no tick delivered twice after {FAILOVER_ATTEMPTS} leader kills, each as soon as a \
         tick arrived from the leader, with the followers halted"
    );
    for consumer in consumers {
        consumer.stop().await;
    }
}

#[tokio::test]
async fn metrics_need_the_token_unless_the_cluster_file_says_otherwise() {
    // By default: 403 without a token and with the clients' access token, 200 with the
    // operator token in either form.
    let cluster = TestCluster::builder()
        .nodes(1)
        .env("TICKD_LOG", "debug")
        .start()
        .await;
    let operator_token = cluster.operator_token().to_owned();
    let (status, _, body) = api::send(anonymous(&cluster, Method::GET, 1, "/metrics")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["status"], 403, "the JSON error shape: {body}");
    let (status, _, body) = api::send(authed(&cluster, Method::GET, 1, "/metrics")).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "the access token is not enough: {body}"
    );
    let (status, _, _) = api::send(operator(&cluster, Method::GET, 1, "/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    // Never in the URL, where proxy logs and shell history keep it.
    let (status, _, body) = api::send(anonymous(
        &cluster,
        Method::GET,
        1,
        &format!("/metrics?access_token={operator_token}"),
    ))
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _, body) = api::send(operator(&cluster, Method::GET, 1, "/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    let text = body.as_str().expect("a text body");
    assert!(
        text.contains("route=\"/metrics\""),
        "requests are labelled by route: {text}"
    );
    assert!(
        !text.contains(&operator_token),
        "the token is never in a metric"
    );
    let log = cluster.log(1);
    assert!(
        !log.contains(&operator_token),
        "the token is never in a log line, even at debug level"
    );

    // Turned off in the cluster file: open to scrapers, while the API keeps its token.
    let open = TestCluster::builder()
        .nodes(1)
        .metrics_require_token(false)
        .start()
        .await;
    let (status, _, body) = api::send(anonymous(&open, Method::GET, 1, "/metrics")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, _) = api::send(anonymous(&open, Method::GET, 1, api::CLOCKS_PATH)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// How long a snapshot's serialization took is exported: at a million clocks it is the
/// largest piece of work a node does, and it grows with the state. So is what the log's
/// RocksDB holds in memory.
#[tokio::test]
async fn a_snapshot_records_how_long_writing_it_took() {
    let cluster = TestCluster::builder()
        .nodes(1)
        .rabbit_uri(None)
        .snapshot_every(5)
        .start()
        .await;
    let node = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let before = scrape(&cluster, node).await;
    assert_eq!(
        before.value("tickd_raft_snapshot_write_duration_seconds_count", &[]),
        0.0
    );
    for index in 0..10 {
        let name = unique_name(&format!("snapshot-{index}"));
        let (status, _, body) = api::register(&cluster, node, &name, "@never").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let after = eventually(
        "a snapshot built",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let scraped = scrape(&cluster, node).await;
            (scraped.value("tickd_raft_snapshots_total", &[("origin", "built")]) >= 1.0)
                .then_some(scraped)
        },
    )
    .await;
    assert!(
        after.value("tickd_raft_snapshot_write_duration_seconds_count", &[]) >= 1.0,
        "every built snapshot records its write"
    );
    assert!(
        after.has_buckets("tickd_raft_snapshot_write_duration_seconds"),
        "a histogram with buckets"
    );
    // The log's memory is measured at each scrape: the entries just written sit in a memtable.
    assert!(
        after.value("tickd_raft_log_memory_bytes", &[("part", "memtables")]) > 0.0,
        "the log's memtables hold the entries just written"
    );
}
