//! Reads anyone can send cost the cluster little (issue 18, findings 4 and 6), black-box.
//!
//! - Pops of made-up queue ids on a follower are answered 404 from the node's own state: no
//!   503, no leadership confirmation per pop, no lost leadership, no log line per pop.
//! - Idle long polls cost the leader almost no CPU: they wake when their own queue changes,
//!   not on every Raft event, and a tick still wakes its poll at once.
//! - Long polls beyond the node's cap are answered at once instead of held.
//! - Requests without a valid token (unknown paths, wrong tokens) are limited per client
//!   address; a token holder on the same address, pops and health checks are not.
//!
//! The scenarios run one at a time (a CPU measurement must not share the box with another
//! cluster of this file).

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::future::join_all;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tickd_tests::api::{self, anonymous, clock_id, cluster_view, register};
use tickd_tests::{NodeId, TestCluster};
use tokio::sync::Mutex;

/// One scenario at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// The longest `?wait` the API accepts, in seconds.
const MAX_WAIT_SECONDS: u64 = 30;

/// A three-node cluster whose `/metrics` any test client may read.
fn three_nodes() -> tickd_tests::TestClusterBuilder {
    TestCluster::builder().nodes(3).metrics_require_token(false)
}

/// A queue id of the shape a node draws (32 hex digits) that no node drew.
fn made_up_queue_id(n: u64) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    format!("{:016x}{:016x}", nanos as u64 ^ 0x5eed_u64, n)
}

/// The number of ERROR lines in a node's log.
fn error_lines(cluster: &TestCluster, node: NodeId) -> usize {
    cluster
        .log(node)
        .lines()
        .filter(|line| line.contains(" ERROR "))
        .count()
}

/// The sum of a counter's samples whose labels contain every `label` (`name="value"`).
async fn counter(cluster: &TestCluster, node: NodeId, metric: &str, labels: &[&str]) -> f64 {
    let (status, _, body) = api::send(anonymous(cluster, Method::GET, node, "/metrics")).await;
    assert_eq!(status, StatusCode::OK, "node {node}: GET /metrics");
    let text = body.as_str().unwrap_or_default().to_string();
    text.lines()
        .filter(|line| {
            line.starts_with(metric)
                && line[metric.len()..].starts_with(['{', ' '])
                && labels.iter().all(|label| line.contains(label))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The share of one core a process used over `window`.
async fn cpu_share(pid: u32, window: Duration) -> f64 {
    let percent = tickd_tests::process::cpu_percent(&[pid], window)
        .await
        .unwrap_or_else(|error| panic!("the CPU of process {pid}: {error}"));
    percent[0] / 100.0
}

/// HTTP clients bound to different loopback source addresses, so that hundreds of held polls
/// stay under the API listener's per-address connection cap.
fn spread_clients(count: u8) -> Vec<reqwest::Client> {
    (1..=count).map(client_at).collect()
}

/// A client whose requests come from 127.0.0.`n`.
fn client_at(n: u8) -> reqwest::Client {
    tickd_tests::http::client_from(n, Duration::from_secs(MAX_WAIT_SECONDS + 20))
}

/// Registers `count` http clocks that never tick on their own, and returns their ids and pop
/// URLs. Eight at a time, so that the client's pool keeps few connections to the node open.
async fn quiet_queues(cluster: &TestCluster, via: NodeId, count: usize) -> Vec<(String, String)> {
    let registrations = (0..count).map(|n| async move {
        let (status, _, created) = register(
            cluster,
            via,
            &tickd_tests::unique_name(&format!("idle-{n}")),
            "@never",
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let url = created["channel"]["details"]["url"]
            .as_str()
            .expect("a pop url")
            .to_string();
        (clock_id(&created), url)
    });
    futures::stream::iter(registrations)
        .buffered(8)
        .collect()
        .await
}

#[tokio::test]
async fn bogus_pops_on_a_follower_are_answered_locally_and_cost_the_leader_nothing() {
    let _serial = SERIAL.lock().await;
    let cluster = three_nodes().start().await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|node| *node != leader)
        .expect("a follower");
    let term = cluster_view(&cluster, leader).await.term;
    let errors_before = error_lines(&cluster, follower);
    let read_index = ["route=\"/internal/read-index\""];
    let forwarded_before = counter(
        &cluster,
        follower,
        "tickd_forwarded_requests_total",
        &read_index,
    )
    .await;

    let base = cluster.api_url(follower);
    let clients = spread_clients(8);
    let started = Instant::now();
    let pops = (0..500u64).map(|n| {
        let url = format!("{base}/api/v1/queues/{}/pop", made_up_queue_id(n));
        let client = clients[n as usize % clients.len()].clone();
        async move {
            match client.get(url).send().await {
                Ok(response) => response.status().as_u16(),
                Err(_) => 0,
            }
        }
    });
    let statuses = join_all(pops).await;
    let took = started.elapsed();

    let not_found = statuses.iter().filter(|status| **status == 404).count();
    let unavailable = statuses.iter().filter(|status| **status == 503).count();
    assert_eq!(
        (not_found, unavailable),
        (500, 0),
        "500 made-up queues must all be 404 at once, none 503 (took {took:?}; statuses other \
         than 404: {:?})",
        statuses
            .iter()
            .filter(|status| **status != 404)
            .collect::<Vec<_>>()
    );

    // The leader confirmed its leadership for them at most a few times, not once per pop.
    let forwarded = counter(
        &cluster,
        follower,
        "tickd_forwarded_requests_total",
        &read_index,
    )
    .await
        - forwarded_before;
    assert!(
        forwarded <= 10.0,
        "500 bogus pops made the follower ask the leader for {forwarded} read indexes"
    );

    // Ids no node could have drawn are refused from the follower's own state: not one read
    // index for them.
    let forwarded_before = counter(
        &cluster,
        follower,
        "tickd_forwarded_requests_total",
        &read_index,
    )
    .await;
    let malformed = (0..100u64).map(|n| {
        let url = format!("{base}/api/v1/queues/bogus-{n}/pop");
        let client = clients[n as usize % clients.len()].clone();
        async move {
            client
                .get(url)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    });
    let statuses = join_all(malformed).await;
    assert!(statuses.iter().all(|status| *status == 404), "{statuses:?}");
    let forwarded = counter(
        &cluster,
        follower,
        "tickd_forwarded_requests_total",
        &read_index,
    )
    .await
        - forwarded_before;
    assert_eq!(
        forwarded, 0.0,
        "malformed queue ids must be answered without asking the leader"
    );

    // The leader kept its office: same leader, same term, still leading by its own account.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let view = cluster_view(&cluster, leader).await;
    assert_eq!(
        (view.leader, view.term),
        (Some(leader), term),
        "the bogus pops cost node {leader} its leadership"
    );
    assert_eq!(
        counter(&cluster, leader, "tickd_raft_is_leader", &[]).await,
        1.0,
        "node {leader} still leads"
    );

    // No line per bogus request.
    let new_errors = error_lines(&cluster, follower) - errors_before;
    assert!(
        new_errors < 5,
        "the follower logged {new_errors} ERROR lines for 500 bogus pops"
    );

    // A real queue registered through the leader is popped on the follower at once: the
    // follower's "unknown" is checked with the leader before it says 404.
    let (status, _, created) = register(&cluster, leader, "fresh", "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let url = created["channel"]["details"]["url"]
        .as_str()
        .expect("a pop url");
    let (status, _, body) = api::pop(&cluster, &api::on_node(&cluster, follower, url), None).await;
    assert_eq!((status, body), (StatusCode::OK, Value::Array(Vec::new())));
}

#[tokio::test]
async fn idle_long_polls_cost_the_leader_little_and_a_tick_still_wakes_its_poll() {
    let _serial = SERIAL.lock().await;
    let cluster = three_nodes()
        .setting("max_long_polls", "1000")
        .start()
        .await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|node| *node != leader)
        .expect("a follower");
    let pid = cluster.pid(leader).expect("the leader's pid");
    let queues = quiet_queues(&cluster, leader, 100).await;
    // A queue of its own for the wake check, so that no idle poll takes its tick.
    let (ticked_clock, ticked_url) = quiet_queues(&cluster, leader, 1).await.remove(0);

    // The leader at rest: it fires intents and heartbeats, nobody polls.
    let window = Duration::from_secs(8);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = cpu_share(pid, window).await;

    // 500 long polls, 5 per queue, held on the leader for the longest wait, re-polled when
    // they end, until the measurement is done.
    let clients = spread_clients(8);
    let stop = tokio::sync::watch::channel(false);
    let polls: Vec<_> = (0..500usize)
        .map(|n| {
            let (_, url) = &queues[n % queues.len()];
            let url = format!(
                "{}?wait={MAX_WAIT_SECONDS}",
                api::on_node(&cluster, leader, url)
            );
            let client = clients[n % clients.len()].clone();
            let mut stop = stop.1.clone();
            tokio::spawn(async move {
                let mut answers = Vec::new();
                loop {
                    tokio::select! {
                        answer = client.get(&url).send() => {
                            let status = match answer {
                                Ok(response) => response.status().as_u16(),
                                Err(error) => {
                                    if answers.is_empty() {
                                        eprintln!("poll failed: {}", api::describe(&error));
                                    }
                                    0
                                }
                            };
                            answers.push(status);
                        }
                        _ = stop.changed() => return answers,
                    }
                }
            })
        })
        .collect();
    // Let the polls arrive and settle into their wait.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let polled = cpu_share(pid, window).await;
    let added = polled - idle;
    eprintln!(
        "leader CPU: {:.1} % at rest, {:.1} % with 500 idle long polls (+{:.1} points)",
        idle * 100.0,
        polled * 100.0,
        added * 100.0
    );

    // While they wait, a manual tick wakes its own queue's poll at once, on the leader and on
    // a follower.
    let mut woken = Vec::new();
    for node in [leader, follower] {
        let url = api::on_node(&cluster, node, &ticked_url);
        let poll = tokio::spawn({
            let client = cluster.client().clone();
            async move {
                let started = Instant::now();
                let answer = client
                    .get(format!("{url}?wait={MAX_WAIT_SECONDS}"))
                    .timeout(Duration::from_secs(MAX_WAIT_SECONDS + 10))
                    .send()
                    .await
                    .expect("the poll is answered");
                let status = answer.status();
                let body: Value = answer.json().await.expect("a JSON body");
                (status, body, started.elapsed())
            }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ticked_at = Instant::now();
        let (status, _, body) = api::action(&cluster, follower, &ticked_clock, "tick").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, body, _) = poll.await.expect("the poll task");
        woken.push((node, status, body, ticked_at.elapsed()));
    }
    let _ = stop.0.send(true);
    let mut statuses = Vec::new();
    for poll in polls {
        statuses.extend(poll.await.expect("a poller"));
    }

    for (node, status, body, after) in &woken {
        assert_eq!(*status, StatusCode::OK, "node {node}: {body}");
        assert_eq!(
            body.as_array().map(Vec::len),
            Some(1),
            "node {node}: the poll gets the manual tick: {body}"
        );
        assert!(
            *after < Duration::from_secs(3),
            "node {node}: the poll woke {after:?} after the tick"
        );
    }
    // The idle polls were held, not answered at once over and over.
    assert!(
        statuses.len() < 600,
        "the 500 idle polls were answered {} times in ~15 s: they are not being held ({:?})",
        statuses.len(),
        statuses
            .iter()
            .fold(std::collections::BTreeMap::new(), |mut counts, status| {
                *counts.entry(*status).or_insert(0) += 1;
                counts
            })
    );
    // 8 % → 42 % before per-queue wakes on a release build. The bound, 5 points, on a
    // debug build: measured −0.9 to +1.5 points, and the figure is the leader's own CPU time,
    // which other load on the box slows but does not add to.
    assert!(
        added < 0.05,
        "500 idle long polls added {:.1} points of CPU on the leader ({:.1} % → {:.1} %)",
        added * 100.0,
        idle * 100.0,
        polled * 100.0
    );
}

#[tokio::test]
async fn long_polls_over_the_cap_are_answered_at_once() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("max_long_polls", "3")
        .start()
        .await;
    let queues = quiet_queues(&cluster, 1, 1).await;
    let url = format!("{}?wait=5", queues[0].1);
    let held: Vec<_> = (0..3)
        .map(|_| {
            let client = cluster.client().clone();
            let url = url.clone();
            tokio::spawn(async move { client.get(url).send().await.map(|r| r.status()) })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let (status, _, body) = api::send(cluster.client().get(&url)).await;
    let took = started.elapsed();
    assert_eq!((status, &body), (StatusCode::OK, &Value::Array(Vec::new())));
    assert!(
        took < Duration::from_secs(2),
        "a fourth poll over a cap of 3 is answered at once, not after {took:?}"
    );
    for poll in held {
        let status = poll.await.expect("a poll task").expect("an answer");
        assert_eq!(status, StatusCode::OK);
    }
    // Once they finished, a poll is held again.
    let started = Instant::now();
    let (status, _, _) = api::send(cluster.client().get(format!("{}?wait=2", queues[0].1))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_millis(1_900));
}

#[tokio::test]
async fn a_stranger_past_its_burst_gets_429_and_a_token_holder_on_its_address_does_not() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("unauthenticated_rate_per_second", "1")
        .setting("unauthenticated_burst", "5")
        .start()
        .await;
    let node = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let base = cluster.api_url(node);
    let (status, _, created) = register(&cluster, node, "polled", "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let pop_url = api::on_node(
        &cluster,
        node,
        created["channel"]["details"]["url"]
            .as_str()
            .expect("a pop url"),
    );
    let stranger = client_at(9);
    let status_of = |request: reqwest::RequestBuilder| async move {
        let response = request.send().await.expect("the node answers");
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
        let body = response.json::<Value>().await.unwrap_or(Value::Null);
        (status, retry_after, body)
    };

    // The burst: five requests for nothing (in well under a second, so at most one more
    // refills).
    let nothing = format!("{base}/mgmt/nothing-here");
    for n in 0..5 {
        let (status, _, body) = status_of(stranger.get(&nothing)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "request {n}: {body}");
    }
    let mut refused = None;
    for _ in 0..3 {
        let answer = status_of(stranger.get(&nothing)).await;
        if answer.0 == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(answer);
            break;
        }
    }
    let (_, retry_after, body) = refused.expect("a request past the burst gets a 429");
    assert!(
        retry_after.is_some_and(|seconds| seconds >= 1),
        "Retry-After: {retry_after:?}"
    );
    assert_eq!(body["status"], 429, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|message| message.contains("without a valid token")),
        "{body}"
    );
    // Health is never counted: a load balancer behind the stranger's address still sees the
    // node UP (the second hostile probe's N6).
    for _ in 0..20 {
        let (status, _, body) = status_of(stranger.get(format!("{base}/mgmt/health"))).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "health from a refused address: {body}"
        );
    }
    // A token guesser on that address is refused before its guess is looked at.
    let (status, _, body) = status_of(
        stranger
            .get(format!("{base}/api/v1/clocks"))
            .bearer_auth("a-guess"),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");

    // The token holder on the same address, and pops, are served.
    let (status, _, body) = status_of(
        stranger
            .get(format!("{base}/api/v1/clocks"))
            .bearer_auth(cluster.token()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for _ in 0..10 {
        let (status, _, body) = status_of(stranger.get(&pop_url)).await;
        assert_eq!(status, StatusCode::OK, "a pop of a real queue: {body}");
    }
    // So are leases and acks: their credential is the queue id too.
    let queue_url = pop_url.strip_suffix("/pop").unwrap_or(&pop_url);
    let receipts = json!({"receipts": [format!("{}.1", "0".repeat(32))]});
    for _ in 0..10 {
        let lease = stranger.post(format!("{queue_url}/lease")).json(&json!({}));
        let (status, _, body) = status_of(lease).await;
        assert_eq!(status, StatusCode::OK, "a lease of a real queue: {body}");
        let ack = stranger.post(format!("{queue_url}/ack")).json(&receipts);
        let (status, _, body) = status_of(ack).await;
        assert_eq!(status, StatusCode::OK, "an ack on a real queue: {body}");
    }
    // Another address has its own bucket.
    let (status, _, body) = status_of(client_at(10).get(&nothing)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    let (status, _, metrics) =
        api::send(api::operator(&cluster, Method::GET, node, "/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    let refusals = metrics
        .as_str()
        .unwrap_or_default()
        .lines()
        .find(|line| line.starts_with("tickd_api_strangers_refused_total "))
        .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok());
    assert!(
        refusals.is_some_and(|count| count >= 2.0),
        "the refusals are counted: {refusals:?}"
    );

    // The bucket refills at the rate.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let (status, _, body) = status_of(stranger.get(&nothing)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "after a pause: {body}");
}
