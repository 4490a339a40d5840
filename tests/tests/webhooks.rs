//! The webhook channel end to end (SPEC §1, §2, §5): real clusters deliver to a receiver in
//! the test, every signature is checked with the Standard Webhooks project's own library, and
//! receivers that fail, go down, never answer or lose their leader lose no tick.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tickd_tests::api::{action, register_body, register_webhook, stats_of};
use tickd_tests::local_names;
use tickd_tests::pki::Pki;
use tickd_tests::timing::FAILOVER;
use tickd_tests::webhook::{Delivery, Receiver, Silent, verify_with_standard_webhooks};
use tickd_tests::{NodeId, TestCluster, eventually, unique_name};

/// A cluster whose ticks may go to the test's receivers on loopback.
async fn cluster(nodes: usize) -> TestCluster {
    TestCluster::builder()
        .nodes(nodes)
        .setting("webhook_allow_private", "true")
        .start()
        .await
}

/// Registers a webhook clock to `url` on `node`; returns its id and secret.
async fn webhook_clock(
    cluster: &TestCluster,
    node: NodeId,
    schedule: &str,
    url: &str,
) -> (String, String) {
    let (status, _, clock) =
        register_webhook(cluster, node, &unique_name("hook"), schedule, url).await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");
    assert_eq!(clock["channel"]["type"], "webhook", "{clock}");
    assert_eq!(clock["channel"]["details"]["url"], url, "{clock}");
    let secret = clock["channel"]["details"]["secret"]
        .as_str()
        .unwrap_or_else(|| panic!("a new webhook clock comes with its secret: {clock}"));
    assert!(secret.starts_with("whsec_"), "{secret}");
    let id = clock["id"].as_str().expect("a clock id").to_owned();
    (id, secret.to_owned())
}

/// The deliveries of clock `id`.
fn of_clock(deliveries: Vec<Delivery>, id: &str) -> Vec<Delivery> {
    deliveries
        .into_iter()
        .filter(|delivery| delivery.tick()["clock"] == id)
        .collect()
}

/// The scheduled instants (ms) of the ticks delivered 2xx, by tick id.
fn delivered_instants(deliveries: &[Delivery]) -> BTreeMap<String, String> {
    deliveries
        .iter()
        .filter(|delivery| (200..300).contains(&delivery.answered))
        .map(|delivery| {
            let tick = delivery.tick();
            (
                tick["scheduled_at"].as_str().unwrap_or_default().to_owned(),
                delivery.id.clone(),
            )
        })
        .collect()
}

/// Asserts that the scheduled ticks delivered form an unbroken run of one-second instants:
/// every instant from the first to the last arrived.
fn assert_no_gap(deliveries: &[Delivery], what: &str) {
    let instants: Vec<i64> = delivered_instants(deliveries)
        .keys()
        .map(|at| {
            chrono::DateTime::parse_from_rfc3339(at)
                .unwrap_or_else(|error| panic!("scheduled_at {at}: {error}"))
                .timestamp_millis()
        })
        .collect();
    assert!(
        instants.len() >= 2,
        "{what}: too few ticks to judge: {instants:?}"
    );
    for pair in instants.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1_000,
            "{what}: a tick is missing between {} and {} (every delivered instant: {instants:?})",
            pair[0],
            pair[1]
        );
    }
}

#[tokio::test]
async fn every_tick_arrives_signed_as_standard_webhooks_specifies_with_its_tick_id() {
    let cluster = cluster(3).await;
    let follower = cluster.a_follower(Duration::from_secs(30)).await;
    let receiver = Receiver::start().await;
    let (id, secret) = webhook_clock(&cluster, follower, "every.1.seconds", &receiver.url()).await;
    eventually(
        "five ticks at the receiver",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async { (of_clock(receiver.delivered(), &id).len() >= 5).then_some(()) },
    )
    .await;
    let deliveries = of_clock(receiver.deliveries(), &id);
    for delivery in &deliveries {
        let tick = delivery.tick();
        assert_eq!(
            tick["tick_id"],
            delivery.id.as_str(),
            "webhook-id is the tick_id"
        );
        assert_eq!(tick["schedule"], "every.1.seconds");
        assert_eq!(tick["manual"], false);
    }
    assert_no_gap(&deliveries, "a receiver that always answers");
    let verified = verify_with_standard_webhooks(&secret, &deliveries).await;
    assert_eq!(verified, deliveries.len());
    let key = secret.trim_start_matches("whsec_");
    for node in cluster.node_ids() {
        assert!(
            !cluster.log(node).contains(key),
            "node {node}'s log holds the clock's secret"
        );
    }
    // The library refuses what was not signed with this secret: the check can fail.
    let other = format!("whsec_{}", "A".repeat(43) + "=");
    let refused = std::panic::AssertUnwindSafe(verify_with_standard_webhooks(&other, &deliveries));
    assert!(
        futures::FutureExt::catch_unwind(refused).await.is_err(),
        "a wrong secret must fail the verification"
    );

    // Joining the clock shows its URL, never the secret again; another URL is a 409.
    let (status, _, clock) = register_body(
        &cluster,
        follower,
        &serde_json::json!({
            "name": deliveries[0].tick()["name"],
            "schedule": "every.1.seconds",
            "channel": {"type": "webhook", "url": receiver.url()},
        }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");
    assert_eq!(clock["id"], id.as_str());
    assert!(
        clock["channel"]["details"]["secret"].is_null(),
        "a joined clock's answer never shows the secret again: {clock}"
    );
    let elsewhere = format!("{}/elsewhere", receiver.url());
    let (status, _, error) = register_body(
        &cluster,
        follower,
        &serde_json::json!({
            "name": deliveries[0].tick()["name"],
            "schedule": "every.1.seconds",
            "channel": {"type": "webhook", "url": elsewhere},
        }),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&receiver.url()),
        "the 409 says which channel the clock has: {error}"
    );
}

#[tokio::test]
async fn a_receiver_that_fails_twice_gets_the_tick_again_with_the_same_id() {
    let cluster = cluster(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let receiver = Receiver::scripted(Arc::new(|_, earlier| {
        if earlier < 2 {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        }
    }))
    .await;
    let (id, secret) = webhook_clock(&cluster, leader, "@never", &receiver.url()).await;
    let (status, _, clock) = action(&cluster, leader, &id, "tick").await;
    assert_eq!(status, StatusCode::OK, "{clock}");
    let deliveries = eventually(
        "the manual tick delivered on its third attempt",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            let deliveries = of_clock(receiver.deliveries(), &id);
            (deliveries.iter().any(|delivery| delivery.answered == 200)).then_some(deliveries)
        },
    )
    .await;
    let answered: Vec<u16> = deliveries
        .iter()
        .map(|delivery| delivery.answered)
        .collect();
    assert_eq!(answered, [500, 500, 200], "two failures, then the delivery");
    let ids: HashSet<&str> = deliveries
        .iter()
        .map(|delivery| delivery.id.as_str())
        .collect();
    assert_eq!(ids.len(), 1, "every attempt carries the same webhook-id");
    assert_eq!(deliveries[0].tick()["manual"], true);
    let waits: Vec<Duration> = deliveries
        .windows(2)
        .map(|pair| pair[1].at.duration_since(pair[0].at))
        .collect();
    assert!(
        waits.iter().all(|wait| *wait >= Duration::from_millis(400)),
        "each retry waits for its backoff: {waits:?}"
    );
    assert_eq!(
        verify_with_standard_webhooks(&secret, &deliveries).await,
        3,
        "each attempt is signed anew"
    );
    // Delivered once: nothing more arrives for it, and its statistics say how it went.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(of_clock(receiver.deliveries(), &id).len(), 3);
    let stats = stats_of(&cluster, leader, &id)
        .await
        .expect("the clock's statistics");
    assert_eq!(
        (
            &stats["delivered"],
            &stats["retried"],
            &stats["failed"],
            &stats["given_up"]
        ),
        (&json!(1), &json!(1), &json!(2), &json!(0)),
        "{stats}"
    );
}

#[tokio::test]
async fn a_receiver_that_refuses_a_tick_with_a_404_is_not_asked_again() {
    let cluster = cluster(1).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let receiver = Receiver::scripted(Arc::new(|_, _| StatusCode::NOT_FOUND)).await;
    let (id, _) = webhook_clock(&cluster, leader, "@never", &receiver.url()).await;
    action(&cluster, leader, &id, "tick").await;
    eventually(
        "the first attempt",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async { (!of_clock(receiver.deliveries(), &id).is_empty()).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        of_clock(receiver.deliveries(), &id).len(),
        1,
        "a 4xx other than 408 and 429 ends the attempts"
    );
    let stats = stats_of(&cluster, leader, &id)
        .await
        .expect("the clock's statistics");
    assert_eq!(
        (&stats["delivered"], &stats["failed"], &stats["given_up"]),
        (&json!(0), &json!(1), &json!(1)),
        "{stats}"
    );
}

#[tokio::test]
async fn a_receiver_down_for_20_seconds_gets_every_tick_once_it_is_back() {
    let cluster = cluster(3).await;
    let follower = cluster.a_follower(Duration::from_secs(30)).await;
    let receiver = Receiver::start().await;
    let (id, secret) = webhook_clock(&cluster, follower, "every.1.seconds", &receiver.url()).await;
    eventually(
        "ticks before the outage",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async { (of_clock(receiver.delivered(), &id).len() >= 2).then_some(()) },
    )
    .await;
    receiver.go_down();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let missed_by_then = of_clock(receiver.delivered(), &id).len();
    receiver.resume().await;
    // Every instant of the outage, and those after it, arrive within the retry time.
    let expected = missed_by_then + 20;
    eventually(
        "the outage's ticks, retried once the receiver is back",
        Duration::from_secs(90),
        Duration::from_millis(250),
        || async {
            let delivered = of_clock(receiver.delivered(), &id);
            let instants = delivered_instants(&delivered);
            (instants.len() >= expected).then_some(())
        },
    )
    .await;
    let deliveries = of_clock(receiver.deliveries(), &id);
    assert_no_gap(&deliveries, "a receiver down for 20 s");
    let delivered: Vec<Delivery> = deliveries
        .iter()
        .filter(|delivery| delivery.answered == 200)
        .cloned()
        .collect();
    assert_eq!(
        verify_with_standard_webhooks(&secret, &delivered).await,
        delivered.len()
    );
}

/// `webhook_ca_file`: an https receiver whose certificate a private CA signed gets every tick
/// once the cluster trusts that CA; one signed by a CA it does not trust gets none, though it
/// serves any client that trusts its own.
#[tokio::test]
async fn https_receivers_are_trusted_through_webhook_ca_file_and_no_other_ca() {
    let dir = tempfile::tempdir().expect("a folder for the receivers' CAs");
    let trusted = Pki::create(&dir.path().join("trusted"));
    let stranger_ca = Pki::create(&dir.path().join("stranger"));
    let receiver = Receiver::start_tls(&trusted.node(1, &["127.0.0.1"])).await;
    let stranger = Receiver::start_tls(&stranger_ca.node(1, &["127.0.0.1"])).await;
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("webhook_allow_private", "true")
        .setting("webhook_ca_file", format!("{:?}", trusted.ca()))
        .start()
        .await;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let (id, secret) = webhook_clock(&cluster, leader, "every.1.seconds", &receiver.url()).await;
    let (stranger_id, _) =
        webhook_clock(&cluster, leader, "every.1.seconds", &stranger.url()).await;
    eventually(
        "ticks over https to the receiver the CA file vouches for",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async { (of_clock(receiver.delivered(), &id).len() >= 3).then_some(()) },
    )
    .await;
    let delivered = of_clock(receiver.delivered(), &id);
    assert_no_gap(&delivered, "an https receiver");
    assert_eq!(
        verify_with_standard_webhooks(&secret, &delivered).await,
        delivered.len()
    );
    assert!(
        of_clock(stranger.deliveries(), &stranger_id).is_empty(),
        "a receiver whose CA the cluster does not trust got ticks"
    );
    // The stranger is refused for its certificate alone: a client that trusts its CA is served.
    let client = tickd_tests::http::client_builder()
        .tls_backend_preconfigured(stranger_ca.client_config(None))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTPS client");
    let answer = client
        .post(stranger.url())
        .header("webhook-id", "probe")
        .body("{}")
        .send()
        .await
        .expect("the stranger serves a client that trusts its CA");
    assert_eq!(answer.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_receiver_that_never_answers_delays_no_other_clock() {
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("webhook_allow_private", "true")
        .setting("webhook_max_concurrency", "8")
        .setting("webhook_max_concurrency_per_receiver", "4")
        .start()
        .await;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let silent = Silent::start().await;
    for _ in 0..10 {
        webhook_clock(&cluster, leader, "every.1.seconds", &silent.url()).await;
    }
    // The silent receiver's ten clocks fill its four slots and queue behind them, each attempt
    // waiting out the 10 s timeout.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let receiver = Receiver::start().await;
    let (id, _) = webhook_clock(&cluster, leader, "every.1.seconds", &receiver.url()).await;
    let deliveries = eventually(
        "ten ticks at the answering receiver",
        Duration::from_secs(40),
        Duration::from_millis(100),
        || async {
            let delivered = of_clock(receiver.delivered(), &id);
            (delivered.len() >= 10).then_some(delivered)
        },
    )
    .await;
    let lateness: Vec<i64> = deliveries
        .iter()
        .map(|delivery| {
            let tick = delivery.tick();
            let scheduled = tick["scheduled_at"].as_str().unwrap_or_default();
            let scheduled = chrono::DateTime::parse_from_rfc3339(scheduled)
                .expect("an RFC 3339 instant")
                .timestamp_millis();
            let timestamp: i64 = delivery.timestamp.parse().expect("Unix seconds");
            timestamp * 1_000 - scheduled
        })
        .collect();
    // webhook-timestamp has whole seconds: a tick sent in the second of its instant shows 0.
    assert!(
        lateness.iter().all(|late| *late <= 1_000),
        "ticks to an answering receiver go out within their second, whatever the silent one \
         holds (lateness by webhook-timestamp, ms: {lateness:?})"
    );
    assert_no_gap(&deliveries, "a receiver beside a silent one");
}

#[tokio::test]
async fn the_leader_killed_during_deliveries_loses_no_tick() {
    let cluster = cluster(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let follower = cluster.a_follower(Duration::from_secs(30)).await;
    let receiver = Receiver::start().await;
    let (id, secret) = webhook_clock(&cluster, follower, "every.1.seconds", &receiver.url()).await;
    eventually(
        "ticks before the failover",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async { (of_clock(receiver.delivered(), &id).len() >= 3).then_some(()) },
    )
    .await;
    cluster.kill(leader);
    cluster.wait_for_new_leader(leader, FAILOVER * 3).await;
    let before = of_clock(receiver.delivered(), &id).len();
    eventually(
        "ticks after the failover",
        Duration::from_secs(40),
        Duration::from_millis(100),
        || async { (of_clock(receiver.delivered(), &id).len() >= before + 8).then_some(()) },
    )
    .await;
    let deliveries = of_clock(receiver.deliveries(), &id);
    assert_no_gap(&deliveries, "a leader killed during deliveries");
    // A tick delivered twice (the old leader's delivery not yet confirmed) keeps its id.
    let mut by_instant: BTreeMap<String, HashSet<String>> = BTreeMap::new();
    for delivery in &deliveries {
        let tick = delivery.tick();
        by_instant
            .entry(tick["scheduled_at"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .insert(delivery.id.clone());
    }
    assert!(
        by_instant.values().all(|ids| ids.len() == 1),
        "one webhook-id per instant: {by_instant:?}"
    );
    assert_eq!(
        verify_with_standard_webhooks(&secret, &deliveries).await,
        deliveries.len()
    );
}

/// Registrations whose receiver is not public are refused, literal addresses and names
/// alike, without `webhook_allow_private`.
#[tokio::test]
async fn receivers_on_internal_addresses_are_refused_at_registration() {
    let cluster = TestCluster::start(1).await;
    let node = cluster.wait_for_leader(Duration::from_secs(30)).await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:9/hook",
        "http://[::ffff:127.0.0.1]:9/hook",
        "http://localhost:9/hook",
        "https://user:password@example.com/hook",
        "ftp://example.com/hook",
    ] {
        let (status, _, error) = register_webhook(
            &cluster,
            node,
            &unique_name("internal"),
            "every.5.seconds",
            url,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains("webhook url"), "{url}: {message}");
    }
    let (status, _, clocks) = tickd_tests::api::list(&cluster, node, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(clocks, Value::Array(vec![]), "a refusal creates nothing");
}

/// A name checked at registration is resolved again at every delivery: once it resolves to
/// loopback, no tick goes there. The node resolves through the test's hosts file alone
/// (`local_names`).
#[tokio::test]
async fn a_name_that_starts_resolving_to_loopback_is_refused_at_delivery() {
    let dir = tempfile::tempdir().expect("a scratch folder");
    // A public address (TEST-NET-3) the registration accepts; no packet is ever sent to it:
    // the name is switched to loopback before the first tick.
    let names = local_names::in_folder(dir.path(), "203.0.113.10 receiver.tickd.test\n");
    let cluster = TestCluster::builder()
        .nodes(1)
        .binary(&names.wrapper)
        .start()
        .await;
    let node = cluster.wait_for_leader(Duration::from_secs(30)).await;
    // The wrapped node asks no DNS server: a name the machine's resolver knows (a package
    // registry's) does not resolve for it.
    let (status, _, refused) = register_webhook(
        &cluster,
        node,
        &unique_name("outside"),
        "@never",
        "http://deb.debian.org/hook",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|message| message.contains("does not resolve")),
        "{refused}"
    );
    let receiver = Receiver::start().await;
    let url = receiver.url_by_name("receiver.tickd.test");
    let (status, _, clock) =
        register_webhook(&cluster, node, &unique_name("rebind"), "@never", &url).await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");
    let id = clock["id"].as_str().expect("an id").to_owned();
    // Rewritten in place: the bind mount holds the file, not its name.
    std::fs::write(&names.hosts, "127.0.0.1 receiver.tickd.test\n").expect("rewrite hosts");
    let (status, _, refused) =
        register_webhook(&cluster, node, &unique_name("rebind"), "@never", &url).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the same name, now loopback, is refused at registration: {refused}"
    );
    action(&cluster, node, &id, "tick").await;
    eventually(
        "the delivery refused for the name's new address",
        Duration::from_secs(20),
        Duration::from_millis(200),
        || async {
            cluster
                .log(node)
                .contains("resolves only to addresses that are not public (127.0.0.1)")
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        receiver.deliveries().is_empty(),
        "no tick reaches an address the name resolves to after registration: {:?}",
        receiver.deliveries()
    );
}
