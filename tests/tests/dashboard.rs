//! tickd's own dashboard in a real headless Chromium, against a real 3-node cluster: sign in,
//! see the nodes and the leader, see clocks registered through the API appear without a
//! reload, pause one and tick another from the page, see the tick's delivery in the clock's
//! statistics and in the plot, and see a new leader after the leader is killed. Each test leaves screenshots under `target/screenshots/` for review.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tickd_tests::api::{self, clock_id, register};
use tickd_tests::browser::Browser;
use tickd_tests::cluster::THIS_LEVEL;
use tickd_tests::timing::FAILOVER;
use tickd_tests::webhook::Receiver;
use tickd_tests::{NodeId, TestCluster, eventually, unique_name};

/// How long the page may take to show what the cluster did (it checks every 250 ms for the
/// cluster, every second for the clocks).
const SHOWN_WITHIN: Duration = Duration::from_secs(10);
/// How soon after the leader's death the page must show its successor: a failover, then
/// the page's next look at the cluster (every 250 ms) and a render, rounded up to 1 s.
const NEW_LEADER_WITHIN: Duration = FAILOVER.saturating_add(Duration::from_secs(1));
const POLL: Duration = Duration::from_millis(100);

/// The text of every element matching `selector`.
async fn texts(browser: &Browser, selector: &str) -> Vec<String> {
    let mut texts = Vec::new();
    for element in browser.find_all(selector).await {
        texts.push(browser.text(&element).await);
    }
    texts
}

/// The node the page marks as leader, if it marks one.
async fn leader_on_page(browser: &Browser) -> Option<NodeId> {
    let value = browser
        .run("const row = document.querySelector('#nodes tr.leader'); return row ? row.dataset.node : null;")
        .await;
    value.as_str().and_then(|id| id.parse().ok())
}

/// Opens `node`'s page and submits `token` in its sign-in form.
async fn sign_in(browser: &Browser, cluster: &TestCluster, node: NodeId, token: &str) {
    browser.goto(&format!("{}/", cluster.api_url(node))).await;
    let field = eventually("the sign-in form", SHOWN_WITHIN, POLL, || async {
        browser.find_all("#token").await.into_iter().next()
    })
    .await;
    browser.type_into(&field, token).await;
    let submit = browser.find_all("#sign-in button[type=submit]").await;
    browser
        .click(&submit[0])
        .await
        .expect("click the sign-in button");
}

/// The leader of a 3-node `cluster` and a follower to open the page on, once the leader has
/// raised the cluster level to this release's (tick statistics and webhooks need it; it is
/// set within seconds of the forming).
async fn leader_and_follower(cluster: &TestCluster) -> (NodeId, NodeId) {
    let leader = cluster.wait_for_leader(SHOWN_WITHIN).await;
    cluster
        .wait_for_cluster_level(THIS_LEVEL, Duration::from_secs(30))
        .await;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    (leader, follower)
}

/// The row of the clock named `name` on the page.
async fn clock_row_appears(browser: &Browser, name: &str) {
    let selector = format!("#clocks tbody tr[data-name=\"{name}\"]");
    eventually(
        &format!("the clock {name} on the page"),
        SHOWN_WITHIN,
        POLL,
        || async { browser.find_all(&selector).await.into_iter().next() },
    )
    .await;
}

async fn click_action(browser: &Browser, name: &str, action: &str) {
    let selector =
        format!("#clocks tbody tr[data-name=\"{name}\"] button[data-action=\"{action}\"]");
    let button = eventually(
        &format!("the {action} button of {name}"),
        SHOWN_WITHIN,
        POLL,
        || async { browser.find_all(&selector).await.into_iter().next() },
    )
    .await;
    browser
        .click(&button)
        .await
        .unwrap_or_else(|error| panic!("click {action} of {name}: {error}"));
}

#[tokio::test]
async fn the_dashboard_shows_the_cluster_and_drives_its_clocks_in_a_real_browser() {
    let cluster = TestCluster::start(3).await;
    let (leader, page_node) = leader_and_follower(&cluster).await;
    let browser = Browser::start().await;

    // A wrong token is refused with a message, and nothing is shown.
    sign_in(&browser, &cluster, page_node, "not-the-token").await;
    eventually("the refusal", SHOWN_WITHIN, POLL, || async {
        texts(&browser, "#sign-in-error")
            .await
            .into_iter()
            .find(|text| text.contains("not the cluster's access token"))
    })
    .await;

    sign_in(&browser, &cluster, page_node, cluster.token()).await;
    let rows = eventually("three nodes on the page", SHOWN_WITHIN, POLL, || async {
        let rows = texts(&browser, "#nodes tbody tr").await;
        (rows.len() == 3).then_some(rows)
    })
    .await;
    assert!(
        rows.iter().any(|row| row.contains("Leader")),
        "a leader row: {rows:?}"
    );
    let shown = eventually("the leader marked", SHOWN_WITHIN, POLL, || async {
        leader_on_page(&browser).await
    })
    .await;
    assert_eq!(shown, leader, "the page marks the cluster's leader");
    assert!(
        !browser.url().await.contains(cluster.token()),
        "the token is never in the address"
    );

    // Clocks registered through the API appear without a reload.
    let ticking = unique_name("dash-hourly");
    let never = unique_name("dash-never");
    let (status, _, _) = register(&cluster, leader, &ticking, "every.1.hours").await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _, never_clock) = register(&cluster, leader, &never, "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{never_clock}");
    clock_row_appears(&browser, &ticking).await;
    clock_row_appears(&browser, &never).await;
    browser.screenshot("dashboard-clocks").await;

    // Pause from the page; the API says PAUSED.
    click_action(&browser, &ticking, "pause").await;
    let clocks = eventually(
        "the clock paused through the page",
        SHOWN_WITHIN,
        POLL,
        || async {
            let (status, _, list) = api::send(api::authed(
                &cluster,
                Method::GET,
                page_node,
                &format!("/api/v1/clocks?name={ticking}"),
            ))
            .await;
            (status == StatusCode::OK && list[0]["status"] == "PAUSED").then_some(list)
        },
    )
    .await;
    assert_eq!(clocks.as_array().map(Vec::len), Some(1), "{clocks}");

    // Tick the @never clock from the page; the tick arrives on its channel.
    click_action(&browser, &never, "tick").await;
    let poll_url = never_clock["channel"]["details"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("an http channel: {never_clock}"))
        .to_owned();
    let ticks = eventually(
        "the manual tick on the channel",
        SHOWN_WITHIN,
        POLL,
        || async {
            let (status, _, ticks) = api::pop(&cluster, &poll_url, None).await;
            (status == StatusCode::OK && ticks.as_array().is_some_and(|t| !t.is_empty()))
                .then_some(ticks)
        },
    )
    .await;
    let tick: &Value = &ticks[0];
    assert_eq!(tick["name"], never.as_str(), "{ticks}");
    assert!(
        tick["tick_id"]
            .as_str()
            .is_some_and(|id| id.starts_with(&clock_id(&never_clock))),
        "{ticks}"
    );

    // The delivered tick shows in the clock's statistics and in the plot of the last minutes.
    let delivered_row = format!("#clocks tbody tr[data-name=\"{never}\"][data-delivered=\"1\"]");
    eventually("the delivery on the page", SHOWN_WITHIN, POLL, || async {
        browser.find_all(&delivered_row).await.into_iter().next()
    })
    .await;
    let lateness = texts(&browser, &format!("{delivered_row} td.lateness")).await;
    assert!(
        lateness.iter().any(|text| text.ends_with(" ms")),
        "the tick's lateness: {lateness:?}"
    );
    eventually("a delivery in the plot", SHOWN_WITHIN, POLL, || async {
        browser
            .find_all("#deliveries-plot rect.delivered")
            .await
            .into_iter()
            .next()
    })
    .await;

    // A clock polled every second: its recent lateness is drawn as a sparkline.
    let polled = unique_name("dash-second");
    let (status, _, polled_clock) = register(&cluster, leader, &polled, "every.1.seconds").await;
    assert_eq!(status, StatusCode::CREATED, "{polled_clock}");
    let polled_url = polled_clock["channel"]["details"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("an http channel: {polled_clock}"))
        .to_owned();
    let sparkline = format!("#clocks tbody tr[data-name=\"{polled}\"] td.lateness svg.spark");
    eventually(
        "the polled clock's sparkline",
        Duration::from_secs(20),
        POLL,
        || async {
            api::pop(&cluster, &polled_url, Some(Duration::from_secs(1))).await;
            browser.find_all(&sparkline).await.into_iter().next()
        },
    )
    .await;
    browser.screenshot("dashboard-ticks").await;
    browser
        .run("document.getElementById('ticks-view').scrollIntoView(); return null;")
        .await;
    browser.screenshot("dashboard-plot").await;
    browser.run("window.scrollTo(0, 0); return null;").await;

    // A calendar clock shows its next tick in its own zone, with the UTC instant beside it.
    let weekly = unique_name("dash-kathmandu");
    let (status, _, weekly_clock) = register(
        &cluster,
        leader,
        &weekly,
        "TZ=Asia/Kathmandu every.MON.at.09:30",
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{weekly_clock}");
    let next_cell = format!("#clocks tbody tr[data-name=\"{weekly}\"] td.next");
    let shown = eventually(
        "the calendar clock's next tick",
        SHOWN_WITHIN,
        POLL,
        || async {
            texts(&browser, &next_cell)
                .await
                .into_iter()
                .find(|text| text.contains("09:30:00"))
        },
    )
    .await;
    assert!(
        shown.ends_with("+05:45"),
        "the next tick in Kathmandu's offset: {shown:?}"
    );

    // Kill the leader: the page shows its successor within a failover and a refresh.
    let killed_at = Instant::now();
    cluster.kill(leader);
    let successor = eventually("a new leader on the page", SHOWN_WITHIN, POLL, || async {
        leader_on_page(&browser)
            .await
            .filter(|shown| *shown != leader)
    })
    .await;
    let took = killed_at.elapsed();
    browser.screenshot("dashboard-failover").await;
    assert!(
        took <= NEW_LEADER_WITHIN,
        "the page showed node {successor} leading {took:?} after the kill"
    );
    let changes = texts(&browser, "#leader-changes li").await;
    assert!(
        changes
            .iter()
            .any(|change| change.contains(&format!("node {successor} leads"))),
        "the change is listed: {changes:?}"
    );
}

/// A webhook receiver that fails shows under the cluster, on a follower's page, with its
/// failures, its open circuit and the last error, and leaves the page once it answers again.
#[tokio::test]
async fn a_failing_webhook_receiver_shows_on_the_page_until_it_answers_again() {
    let cluster = TestCluster::builder()
        .nodes(3)
        .setting("webhook_allow_private", "true")
        .start()
        .await;
    let (_, page_node) = leader_and_follower(&cluster).await;
    // Down from the start: every attempt finds the port closed.
    let receiver = Receiver::start().await;
    receiver.go_down();
    let (status, _, clock) = api::register_webhook(
        &cluster,
        page_node,
        &unique_name("hook"),
        "every.1.seconds",
        &receiver.url(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");
    let browser = Browser::start().await;
    sign_in(&browser, &cluster, page_node, cluster.token()).await;
    let host = receiver
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/hook")
        .to_owned();
    let selector = format!("#failing-list li[data-receiver=\"{host}\"]");
    // Ten failures in a row open its circuit: about ten seconds of ticks and their retries.
    let shown = eventually(
        "the receiver failing, its circuit open",
        Duration::from_secs(40),
        POLL,
        || async {
            texts(&browser, &selector)
                .await
                .into_iter()
                .find(|text| text.contains("circuit open"))
        },
    )
    .await;
    assert!(
        shown.contains("failed attempts in a row") && shown.contains("last: "),
        "{shown}"
    );
    browser.screenshot("dashboard-failing-receiver").await;
    receiver.resume().await;
    // The circuit's probe (within its first 10 s open) succeeds, and the report is empty.
    eventually(
        "the receiver gone from the page",
        Duration::from_secs(40),
        POLL,
        || async {
            let hidden = browser
                .run("return document.getElementById('failing-receivers').hidden;")
                .await;
            (texts(&browser, &selector).await.is_empty() && hidden == Value::Bool(true))
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn ticktoks_api_key_parameter_signs_in_and_leaves_the_address() {
    let cluster = TestCluster::start(1).await;
    let browser = Browser::start().await;
    let url = format!("{}/?api_key={}", cluster.api_url(1), cluster.token());
    browser.goto(&url).await;
    eventually("one node on the page", SHOWN_WITHIN, POLL, || async {
        (texts(&browser, "#nodes tbody tr").await.len() == 1).then_some(())
    })
    .await;
    let address = browser.url().await;
    assert!(
        !address.contains("api_key") && !address.contains(cluster.token()),
        "the token left the address: {address}"
    );
    browser.screenshot("dashboard-api-key").await;
}

#[tokio::test]
async fn a_node_serves_at_most_32_event_streams_and_each_begins_with_the_cluster() {
    let cluster = TestCluster::start(1).await;
    // One address holds at most four streams: the 32 come from eight loopback addresses, the
    // 33rd from a ninth.
    let clients: Vec<reqwest::Client> = (0..9u8)
        .map(|n| tickd_tests::http::client_from(50 + n, Duration::from_secs(30)))
        .collect();
    let open = |n: usize| {
        clients[n / 4]
            .get(format!("{}/api/v1/events", cluster.api_url(1)))
            .bearer_auth(cluster.token())
            .send()
    };
    let mut streams = Vec::new();
    for n in 0..32 {
        let response = open(n)
            .await
            .unwrap_or_else(|error| panic!("stream {n}: {error}"));
        assert_eq!(response.status(), StatusCode::OK, "stream {n}");
        streams.push(response);
    }
    let refused = open(32).await.expect("the 33rd stream's answer");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    let first = streams[0]
        .chunk()
        .await
        .expect("a first event")
        .expect("a chunk");
    let text = String::from_utf8_lossy(&first);
    assert!(text.starts_with("event: cluster\n"), "{text}");
    // A closed stream frees its slot.
    streams.pop();
    eventually("a freed slot", SHOWN_WITHIN, POLL, || async {
        let response = open(31).await.ok()?;
        (response.status() == StatusCode::OK).then_some(())
    })
    .await;
    let without_token = cluster
        .client()
        .get(format!("{}/api/v1/events", cluster.api_url(1)))
        .send()
        .await
        .expect("an answer");
    assert_eq!(without_token.status(), StatusCode::FORBIDDEN);
}

/// How long the streams of the sharing test are watched: long enough for several of each
/// stream's refreshes (every 2 s) and of the shared views' builds (at most one a second).
const WATCHED_FOR: Duration = Duration::from_secs(7);

/// Builds of one of the event streams' views (`cluster`, `listing` or `stats`) on `node`.
async fn views_built(cluster: &TestCluster, node: NodeId, view: &str) -> f64 {
    let series = format!("tickd_api_stream_views_built_total{{view=\"{view}\"}}");
    api::metric(cluster, node, &series)
        .await
        .unwrap_or_else(|| panic!("node {node} exports no {series}"))
}

/// The events of an event stream's text: each one's kind and data.
fn stream_events(text: &str) -> Vec<(String, String)> {
    text.split("\n\n")
        .filter_map(|event| {
            let mut kind = None;
            let mut data = String::new();
            for line in event.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    kind = Some(name.to_owned());
                } else if let Some(line) = line.strip_prefix("data: ") {
                    data.push_str(line);
                }
            }
            Some((kind?, data))
        })
        .collect()
}

#[tokio::test]
async fn every_event_stream_of_a_node_shares_one_cluster_status_one_listing_and_one_set_of_statistics()
 {
    let cluster = TestCluster::start(1).await;
    let node = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let before = [
        views_built(&cluster, node, "cluster").await,
        views_built(&cluster, node, "listing").await,
        views_built(&cluster, node, "stats").await,
    ];
    // Sixteen dashboards, four per client address (the most one address may hold).
    let clients: Vec<reqwest::Client> = (0..4u8)
        .map(|n| tickd_tests::http::client_from(70 + n, Duration::from_secs(60)))
        .collect();
    let started = Instant::now();
    let mut readers = Vec::new();
    for n in 0..16 {
        let mut response = clients[n / 4]
            .get(format!("{}/api/v1/events", cluster.api_url(node)))
            .bearer_auth(cluster.token())
            .send()
            .await
            .unwrap_or_else(|error| panic!("stream {n}: {error}"));
        assert_eq!(response.status(), StatusCode::OK, "stream {n}");
        readers.push(tokio::spawn(async move {
            let mut text = String::new();
            let until = tokio::time::Instant::now() + WATCHED_FOR;
            while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(until, response.chunk()).await {
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
            text
        }));
    }
    // A clock added while they watch: every stream lists it, from one pass over the clocks.
    let name = unique_name("watched");
    let (status, _, body) = register(&cluster, node, &name, "every.1.seconds").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let mut texts = Vec::new();
    for reader in readers {
        texts.push(reader.await.expect("a stream's reader"));
    }
    let watched = started.elapsed();
    let built = [
        views_built(&cluster, node, "cluster").await - before[0],
        views_built(&cluster, node, "listing").await - before[1],
        views_built(&cluster, node, "stats").await - before[2],
    ];

    let events: Vec<Vec<(String, String)>> = texts.iter().map(|text| stream_events(text)).collect();
    let sent = |kind: &str| -> usize {
        events
            .iter()
            .map(|events| events.iter().filter(|(each, _)| each == kind).count())
            .sum()
    };
    for (n, events) in events.iter().enumerate() {
        assert!(
            events
                .iter()
                .any(|(kind, data)| kind == "clocks" && data.contains(&name)),
            "stream {n} never listed the new clock: {events:?}"
        );
    }
    // Each shared view is built at most once a second (the age a stream may take it at), one
    // more for a build under way as the window closed; per stream, the sixteen streams' first
    // events alone would be sixteen builds of each.
    let at_most = watched.as_secs_f64().ceil() + 1.0;
    let [cluster_builds, listing_builds, stats_builds] = built;
    assert!(
        cluster_builds <= at_most,
        "{cluster_builds} cluster statuses built in {watched:?} for {} cluster events",
        sent("cluster")
    );
    assert!(
        sent("cluster") >= 16 * 3,
        "each stream refreshes the cluster every 2 s: {} events in {watched:?}",
        sent("cluster")
    );
    assert!(
        stats_builds <= at_most,
        "{stats_builds} statistics built in {watched:?}"
    );
    // Listed once before the clock was added and once after, whatever the number of streams.
    assert!(
        (1.0..=2.0).contains(&listing_builds),
        "{listing_builds} listings of the clocks built for {} clocks events",
        sent("clocks")
    );
}
