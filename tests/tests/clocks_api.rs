//! The clocks REST API against a real 3-node cluster, requests spread over the nodes: a port
//! of Ticktok's end-to-end API scenarios, every row of SPEC §2's error table, and
//! read-your-writes across nodes.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tickd_tests::TestCluster;
use tickd_tests::api::{
    self, CLOCKS_PATH, action, anonymous, authed, clock_id, get_clock, list, list_where, operator,
    register, send,
};

/// A query filter: key and raw value.
type Filter<'a> = (&'a str, &'a str);
/// A clock's (name, schedule).
type Pair = (String, String);

/// Asserts SPEC §2's error shape and returns the message.
fn assert_error(reply: &api::Reply, status: StatusCode, path: &str) -> String {
    let (actual, _, body) = reply;
    assert_eq!(*actual, status, "{body}");
    assert_eq!(body["status"], json!(status.as_u16()), "{body}");
    assert_eq!(
        body["error"],
        json!(status.canonical_reason().expect("a reason")),
        "{body}"
    );
    assert_eq!(body["path"], json!(path), "{body}");
    let timestamp = body["timestamp"].as_str().expect("a timestamp");
    assert!(
        timestamp.ends_with('Z') && timestamp.contains('T'),
        "RFC 3339: {timestamp}"
    );
    let message = body["message"].as_str().expect("a message").to_string();
    assert!(!message.is_empty(), "{body}");
    message
}

fn rels(clock: &Value) -> Vec<&str> {
    clock["links"]
        .as_array()
        .expect("links")
        .iter()
        .map(|link| link["rel"].as_str().expect("a rel"))
        .collect()
}

#[tokio::test]
async fn ticktok_api_scenarios_across_nodes() {
    let cluster = TestCluster::start(3).await;
    let base = cluster.api_url(1);

    // Register a new clock through node 1.
    let (status, headers, created) = register(&cluster, 1, "backup", "every.5.seconds").await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = clock_id(&created);
    let self_href = format!("{base}/api/v1/clocks/{id}");
    let location = headers["location"].to_str().expect("an ASCII Location");
    assert_eq!(location, format!("{self_href}?access_token=test-token"));
    assert_eq!(created["name"], "backup");
    assert_eq!(created["schedule"], "every.5.seconds");
    assert_eq!(created["status"], "PENDING");
    assert_eq!(created["channel"]["type"], "http");
    let pop_url = created["channel"]["details"]["url"]
        .as_str()
        .expect("a pop url");
    assert!(pop_url.starts_with(&format!("{base}/api/v1/queues/")) && pop_url.ends_with("/pop"));
    assert!(created["channel"]["uri"].is_null() && created["channel"]["queue"].is_null());
    assert_eq!(rels(&created), ["self", "tick", "pause"]);
    assert_eq!(created["links"][0]["href"], json!(self_href));
    assert_eq!(
        created["links"][1]["href"],
        json!(format!("{self_href}/tick"))
    );
    assert_eq!(
        created["links"][2]["href"],
        json!(format!("{self_href}/pause"))
    );

    // The GET at Location equals the POST body, with status ACTIVE and no channel.
    let (status, _, fetched) = send(cluster.client().get(location)).await;
    assert_eq!(status, StatusCode::OK, "{fetched}");
    let mut expected = created.clone();
    expected["status"] = json!("ACTIVE");
    expected
        .as_object_mut()
        .expect("an object")
        .remove("channel");
    assert_eq!(fetched, expected);

    // Health on every node.
    for node in cluster.node_ids() {
        let (status, _, body) = api::health(&cluster, node).await;
        assert_eq!((status, body), (StatusCode::OK, json!({"status": "UP"})));
    }

    // 403 without a token, 400 for an invalid schedule, 404s.
    let forbidden = send(anonymous(&cluster, Method::GET, 3, CLOCKS_PATH)).await;
    assert_error(&forbidden, StatusCode::FORBIDDEN, CLOCKS_PATH);
    let invalid = register(&cluster, 2, "backup", "every.5.fortnights").await;
    let message = assert_error(&invalid, StatusCode::BAD_REQUEST, CLOCKS_PATH);
    assert!(
        message.contains("every.<N>."),
        "the message states the grammar: {message}"
    );
    let unknown = get_clock(&cluster, 3, "no-such-clock").await;
    assert_error(
        &unknown,
        StatusCode::NOT_FOUND,
        "/api/v1/clocks/no-such-clock",
    );
    let unknown_action = action(&cluster, 1, &id, "explode").await;
    assert_error(
        &unknown_action,
        StatusCode::NOT_FOUND,
        &format!("/api/v1/clocks/{id}/explode"),
    );

    // List by name through another node returns exactly that clock.
    register(&cluster, 3, "other", "every.5.seconds").await;
    let (status, _, listed) = list_where(&cluster, 2, &[("name", "backup")]).await;
    assert_eq!(status, StatusCode::OK);
    let listed = listed.as_array().expect("an array").clone();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], json!(id));

    // Pause through node 3: 200, PAUSED, resume offered instead of pause.
    let (status, _, paused) = action(&cluster, 3, &id, "pause").await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["status"], "PAUSED");
    assert_eq!(rels(&paused), ["self", "resume", "tick"]);
    // A re-POST of a paused clock joins it and leaves it paused.
    let (status, _, rejoined) = register(&cluster, 2, "backup", "every.5.seconds").await;
    assert_eq!(
        (status, rejoined["id"].clone()),
        (StatusCode::CREATED, json!(id))
    );
    assert_eq!(rejoined["status"], "PAUSED");
    let (_, _, resumed) = action(&cluster, 1, &id, "resume").await;
    assert_eq!(resumed["status"], "ACTIVE");
    assert_eq!(rels(&resumed), ["self", "tick", "pause"]);
    let (status, _, ticked) = action(&cluster, 2, &id, "tick").await;
    assert_eq!(
        (status, ticked["status"].clone()),
        (StatusCode::OK, json!("ACTIVE"))
    );

    // Twelve concurrent identical registrations over the three nodes: one clock.
    let cluster = &cluster;
    let replies = futures::future::join_all((0..12u64).map(|round| async move {
        register(cluster, round % 3 + 1, "race", "every.10.seconds").await
    }))
    .await;
    let ids: Vec<String> = replies
        .iter()
        .map(|(status, _, body)| {
            assert_eq!(*status, StatusCode::CREATED, "{body}");
            clock_id(body)
        })
        .collect();
    assert!(ids.windows(2).all(|pair| pair[0] == pair[1]), "{ids:?}");
    let (_, _, races) = list_where(cluster, 3, &[("name", "race")]).await;
    assert_eq!(races.as_array().map(Vec::len), Some(1));
}

/// A node that knows no leader answers health with 503 and Ticktok's own body,
/// `{"status":"DOWN"}`, not the JSON error shape every other error takes: load balancers read
/// it.
#[tokio::test]
async fn a_node_without_a_leader_reports_down_in_the_health_shape() {
    let cluster = TestCluster::builder()
        .nodes(3)
        .initially_down([2, 3])
        .wait_ready(false)
        .start()
        .await;
    cluster.wait_serving(1, Duration::from_secs(30)).await;
    let (status, _, body) = api::health(&cluster, 1).await;
    assert_eq!(
        (status, body),
        (StatusCode::SERVICE_UNAVAILABLE, json!({"status": "DOWN"}))
    );
}

#[tokio::test]
async fn list_filters_combine_and_negate() {
    let cluster = TestCluster::start(3).await;
    for (name, schedule) in [
        ("a", "every.5.seconds"),
        ("b", "every.5.seconds"),
        ("a", "@never"),
    ] {
        let (status, _, _) = register(&cluster, 1, name, schedule).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (_, _, b) = list_where(&cluster, 2, &[("name", "b")]).await;
    let b_id = clock_id(&b[0]);
    action(&cluster, 3, &b_id, "pause").await;

    let names = |reply: Value| -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = reply
            .as_array()
            .expect("an array")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().into(),
                    c["schedule"].as_str().unwrap_or_default().into(),
                )
            })
            .collect();
        pairs.sort();
        pairs
    };
    let pair = |name: &str, schedule: &str| (name.to_string(), schedule.to_string());
    let cases: [(&[Filter], Vec<Pair>); 5] = [
        (
            &[("name", "a")],
            vec![pair("a", "@never"), pair("a", "every.5.seconds")],
        ),
        (
            &[("schedule", "!every.5.seconds")],
            vec![pair("a", "@never")],
        ),
        (
            &[("name", "a"), ("schedule", "@never")],
            vec![pair("a", "@never")],
        ),
        (&[("status", "PAUSED")], vec![pair("b", "every.5.seconds")]),
        (&[("status", "!PAUSED"), ("name", "!a")], vec![]),
    ];
    for (filters, expected) in cases {
        let (status, _, body) = list_where(&cluster, 3, filters).await;
        assert_eq!(status, StatusCode::OK, "{filters:?}: {body}");
        assert_eq!(names(body), expected, "{filters:?}");
    }
    let (status, _, body) = list(&cluster, 1, "colour=red").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        ["name", "schedule", "status", "id"]
            .iter()
            .all(|key| message.contains(key)),
        "{message}"
    );
}

#[tokio::test]
async fn a_large_list_comes_in_pages_linked_by_the_next_header() {
    let cluster = TestCluster::start(3).await;
    for n in 0..7 {
        let (status, _, _) = register(&cluster, 1, &format!("paged-{n}"), "@never").await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (_, _, everything) = list(&cluster, 2, "").await;
    let ids = |page: &Value| -> Vec<String> {
        page.as_array()
            .expect("an array")
            .iter()
            .map(clock_id)
            .collect()
    };
    let all = ids(&everything);
    assert_eq!(all.len(), 7);

    // Pages of 3, followed through their Link headers on another node: the same clocks in
    // the same (id) order, and no Link after the last page.
    let mut url = format!("{}{CLOCKS_PATH}?limit=3", cluster.api_url(3));
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let (status, headers, page) =
            send(cluster.client().get(&url).bearer_auth(cluster.token())).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        assert!(ids(&page).len() <= 3, "{page}");
        seen.extend(ids(&page));
        let Some(link) = headers.get("link") else {
            break;
        };
        let link = link.to_str().expect("a text header");
        assert!(link.ends_with("; rel=\"next\""), "{link}");
        url = link[1..link.find('>').expect("a bracketed URL")].to_string();
        assert!(url.contains("limit=3") && url.contains("after="), "{url}");
    }
    assert_eq!((pages, seen), (3, all));

    for (query, says) in [
        ("limit=0", "limit must be a whole number from 1 to 10000"),
        (
            "limit=10001",
            "limit must be a whole number from 1 to 10000",
        ),
        ("limt=3", "the list also takes limit and after"),
    ] {
        let (status, _, body) = list(&cluster, 1, query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{query}: {message}");
    }
}

#[tokio::test]
async fn every_error_row_is_json_with_its_status() {
    let cluster = TestCluster::builder().nodes(3).max_clocks(2).start().await;
    let post = |node| authed(&cluster, Method::POST, node, CLOCKS_PATH);

    // 403: missing and wrong token, in every accepted form; the token never echoes.
    let wrong = [
        anonymous(&cluster, Method::GET, 1, CLOCKS_PATH),
        anonymous(
            &cluster,
            Method::GET,
            2,
            "/api/v1/clocks?access_token=guess",
        ),
        anonymous(&cluster, Method::GET, 3, CLOCKS_PATH).header("authorization", "token guess"),
        anonymous(&cluster, Method::GET, 1, CLOCKS_PATH).header("authorization", "Bearer guess"),
    ];
    for request in wrong {
        let reply = send(request).await;
        let message = assert_error(&reply, StatusCode::FORBIDDEN, CLOCKS_PATH);
        assert!(
            !message.contains("guess") && !message.contains("test-token"),
            "{message}"
        );
    }
    let by_query = send(anonymous(
        &cluster,
        Method::GET,
        2,
        "/api/v1/clocks?access_token=test-token",
    ))
    .await;
    assert_eq!(by_query.0, StatusCode::OK);
    let by_token_header = send(
        anonymous(&cluster, Method::GET, 3, CLOCKS_PATH)
            .header("authorization", "token test-token"),
    )
    .await;
    assert_eq!(by_token_header.0, StatusCode::OK);

    // 400: invalid name, invalid schedule, malformed JSON, wrong types, unknown filter key.
    let too_long = "n".repeat(201);
    let bad_bodies = [
        json!({"name": "", "schedule": "every.5.seconds"}),
        json!({"name": too_long, "schedule": "every.5.seconds"}),
        json!({"name": "x", "schedule": "every.99999999999.seconds"}),
        json!({"name": "x", "schedule": " every.5.seconds"}),
        json!({"name": "x", "schedule": "every.5.seconds\n"}),
        json!({"name": "x"}),
        json!({"name": 7, "schedule": "every.5.seconds"}),
        json!(["not", "an", "object"]),
    ];
    for body in bad_bodies {
        let reply = send(post(1).json(&body)).await;
        assert_error(&reply, StatusCode::BAD_REQUEST, CLOCKS_PATH);
    }
    let malformed = send(
        post(2)
            .header("content-type", "application/json")
            .body("{\"name\": "),
    )
    .await;
    assert_error(&malformed, StatusCode::BAD_REQUEST, CLOCKS_PATH);
    let unknown_key = send(authed(
        &cluster,
        Method::GET,
        3,
        "/api/v1/clocks?colour=red",
    ))
    .await;
    assert_error(&unknown_key, StatusCode::BAD_REQUEST, CLOCKS_PATH);

    // 415: not declared as JSON.
    let text = send(
        post(1)
            .header("content-type", "text/plain")
            .body(r#"{"name":"x","schedule":"@never"}"#),
    )
    .await;
    assert_error(&text, StatusCode::UNSUPPORTED_MEDIA_TYPE, CLOCKS_PATH);
    let undeclared = send(post(1).body(r#"{"name":"x","schedule":"@never"}"#)).await;
    assert_error(&undeclared, StatusCode::UNSUPPORTED_MEDIA_TYPE, CLOCKS_PATH);

    // 413: over 64 KiB, refused before parsing.
    let huge = format!(
        r#"{{"name":"x","schedule":"@never","pad":"{}"}}"#,
        "p".repeat(70 * 1024)
    );
    let too_large = send(
        post(2)
            .header("content-type", "application/json")
            .body(huge),
    )
    .await;
    assert_error(&too_large, StatusCode::PAYLOAD_TOO_LARGE, CLOCKS_PATH);

    // 404: unknown clock, action, path.
    assert_error(
        &get_clock(&cluster, 1, "nope").await,
        StatusCode::NOT_FOUND,
        "/api/v1/clocks/nope",
    );
    let (_, _, created) = register(&cluster, 1, "x", "@never").await;
    let id = clock_id(&created);
    let bad_action = action(&cluster, 2, &id, "rewind").await;
    assert_error(
        &bad_action,
        StatusCode::NOT_FOUND,
        &format!("/api/v1/clocks/{id}/rewind"),
    );
    let bad_clock_action = action(&cluster, 3, "nope", "pause").await;
    assert_error(
        &bad_clock_action,
        StatusCode::NOT_FOUND,
        "/api/v1/clocks/nope/pause",
    );
    let no_path = send(authed(&cluster, Method::GET, 1, "/api/v2/whatever")).await;
    assert_error(&no_path, StatusCode::NOT_FOUND, "/api/v2/whatever");

    // 405: wrong method on a known path.
    let delete = send(authed(&cluster, Method::DELETE, 2, CLOCKS_PATH)).await;
    assert_error(&delete, StatusCode::METHOD_NOT_ALLOWED, CLOCKS_PATH);
    let get_action = send(authed(
        &cluster,
        Method::GET,
        3,
        &format!("/api/v1/clocks/{id}/pause"),
    ))
    .await;
    assert_error(
        &get_action,
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("/api/v1/clocks/{id}/pause"),
    );

    // 429: beyond max_clocks, naming the limit; joining an existing clock still works.
    register(&cluster, 1, "y", "@never").await;
    let full = register(&cluster, 2, "z", "@never").await;
    let message = assert_error(&full, StatusCode::TOO_MANY_REQUESTS, CLOCKS_PATH);
    assert!(message.contains('2'), "{message}");
    assert_eq!(
        register(&cluster, 3, "x", "@never").await.0,
        StatusCode::CREATED
    );

    // Nothing above changed anything: exactly the two clocks exist.
    let (_, _, all) = list(&cluster, 1, "").await;
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");

    // 503 with Retry-After when no quorum answers within the forwarding deadline, asked of
    // the leader itself (it accepts the proposal but can never commit it).
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    for node in cluster
        .node_ids()
        .into_iter()
        .filter(|node| *node != leader)
    {
        cluster.kill(node);
    }
    let reply = send(post(leader).json(&json!({"name": "w", "schedule": "@never"}))).await;
    assert_error(&reply, StatusCode::SERVICE_UNAVAILABLE, CLOCKS_PATH);
    assert!(reply.1.contains_key("retry-after"), "{:?}", reply.1);
}

#[tokio::test]
async fn a_write_on_one_node_is_read_at_once_on_another() {
    let cluster = TestCluster::start(3).await;
    for round in 0..30u64 {
        let writer = round % 3 + 1;
        let reader = (round + 1) % 3 + 1;
        let name = format!("ryw-{round}");
        let (status, _, created) = register(&cluster, writer, &name, "every.1.minutes").await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, _, fetched) = get_clock(&cluster, reader, &clock_id(&created)).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "round {round}: node {reader} must see node {writer}'s write"
        );
        assert_eq!(fetched["name"], json!(name));
        if round % 2 == 0 {
            let (_, _, paused) = action(&cluster, reader, &clock_id(&created), "pause").await;
            assert_eq!(paused["status"], "PAUSED");
            let (_, _, listed) = list_where(&cluster, writer, &[("name", &name)]).await;
            assert_eq!(
                listed[0]["status"], "PAUSED",
                "round {round}: the pause is read at once"
            );
        }
    }
}

#[tokio::test]
async fn rabbit_clusters_hand_out_the_queue_and_the_consumer_uri() {
    let uri = "amqp://guest:guest@127.0.0.1:5672/%2f";
    let cluster = TestCluster::builder()
        .nodes(3)
        .rabbit_uri(Some(uri.to_string()))
        .start()
        .await;
    let (status, _, created) = register(&cluster, 2, "mail;digest", "every.1.hours").await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let channel = &created["channel"];
    assert_eq!(channel["type"], "rabbit");
    assert_eq!(
        channel["details"],
        json!({"uri": uri, "queue": "ticktok-mail;digest;every.1.hours"})
    );
    assert_eq!(channel["uri"], json!(uri));
    assert_eq!(channel["queue"], json!("ticktok-mail;digest;every.1.hours"));
}

/// The `_sum` and `_count` of the write-batch histogram on one node: how many client writes
/// its proposals carried, and how many proposals it made.
async fn write_batches(cluster: &TestCluster, node: u64) -> (f64, f64) {
    let response = operator(cluster, Method::GET, node, "/metrics")
        .send()
        .await
        .unwrap_or_else(|error| panic!("node {node}: GET /metrics: {}", api::describe(&error)));
    let text = response.text().await.expect("the scrape's body");
    let value = |suffix: &str| {
        let metric = format!("tickd_raft_write_batch_commands_{suffix} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&metric))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (value("sum"), value("count"))
}

#[tokio::test]
async fn a_burst_of_writes_shares_log_entries_and_each_caller_gets_its_own_outcome() {
    let cluster = TestCluster::start(3).await;
    let cluster = &cluster;
    // 90 distinct clocks, and 30 registrations of one more pair, all at once over the nodes.
    let requests: Vec<(u64, String)> = (0..120u64)
        .map(|n| {
            let name = if n < 90 {
                format!("burst-{n}")
            } else {
                "burst-shared".to_string()
            };
            (n % 3 + 1, name)
        })
        .collect();
    let replies = futures::future::join_all(requests.iter().map(|(node, name)| async move {
        register(cluster, *node, name, "every.1.minutes").await
    }))
    .await;
    let mut ids = std::collections::HashMap::new();
    for ((node, name), (status, _, body)) in requests.iter().zip(&replies) {
        assert_eq!(*status, StatusCode::CREATED, "node {node}, {name}: {body}");
        assert_eq!(
            body["name"],
            json!(name),
            "node {node} answered another write"
        );
        ids.entry(name.clone())
            .or_insert_with(std::collections::HashSet::new)
            .insert(clock_id(body));
    }
    assert_eq!(ids.len(), 91, "every distinct name got a clock");
    assert!(
        ids.values().all(|clocks| clocks.len() == 1),
        "one clock per pair, whatever entry carried its registrations: {ids:?}"
    );
    let distinct: std::collections::HashSet<_> = ids.values().flatten().collect();
    assert_eq!(distinct.len(), 91, "no two pairs share a clock");
    let (_, _, listed) = list(cluster, 2, "").await;
    assert_eq!(listed.as_array().map(Vec::len), Some(91));

    let (mut writes, mut proposals) = (0.0, 0.0);
    for node in 1..=3 {
        let (sum, count) = write_batches(cluster, node).await;
        writes += sum;
        proposals += count;
    }
    assert!(writes >= 120.0, "every write was proposed: {writes}");
    assert!(
        proposals < writes,
        "120 simultaneous writes behind two proposal slots per node shared entries: \
         {proposals} proposals for {writes} writes"
    );
}
