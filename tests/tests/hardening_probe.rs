//! The second hostile probe's findings on the API's edges (issue 43), against real `tickd`
//! processes; each test fails on 3a3ea22's behaviour.
//!
//! - N4: a request that carries a valid access token is still charged, per address, for a
//!   wrong operator token: guessing it runs into 429s.
//! - N5: the operator token is taken only in a header, never as `?access_token=`.
//! - N7: one client address holds at most four event streams of a node; another still gets
//!   one.
//! - N8: adding a node at an address that answers with an error page does not echo the page.
//! - A clean install: a node starts and serves where the system has no root certificates (a
//!   slim image without `ca-certificates`).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tickd_tests::api::{NODES_PATH, health, operator, send};
use tickd_tests::{TestCluster, eventually};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A client whose requests come from 127.0.0.`n`.
fn client_at(n: u8) -> reqwest::Client {
    tickd_tests::http::client_from(n, Duration::from_secs(30))
}

async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("the node answers");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn an_access_token_holder_guessing_the_operator_token_is_limited() {
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("unauthenticated_rate_per_second", "1")
        .setting("unauthenticated_burst", "5")
        .start()
        .await;
    let node = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let backup = format!(
        "{}/api/v1/backup?access_token={}",
        cluster.api_url(node),
        cluster.token()
    );
    let guesser = client_at(31);
    let mut statuses = Vec::new();
    for n in 0..12 {
        let guess = format!("guess-{n}");
        let (status, _) = answer(guesser.get(&backup).bearer_auth(guess)).await;
        statuses.push(status.as_u16());
    }
    assert!(
        statuses[..5].iter().all(|status| *status == 403),
        "{statuses:?}"
    );
    assert!(
        statuses[6..].iter().all(|status| *status == 429),
        "guesses past the burst are refused unseen: {statuses:?}"
    );
    // The access token itself still works from that address.
    let (status, body) = answer(
        guesser
            .get(format!("{}/api/v1/clocks", cluster.api_url(node)))
            .bearer_auth(cluster.token()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn the_operator_token_is_refused_in_the_url() {
    let cluster = TestCluster::start(1).await;
    let node = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let in_url = format!(
        "{}/api/v1/backup?access_token={}",
        cluster.api_url(node),
        cluster.operator_token()
    );
    let (status, body) = answer(cluster.client().get(&in_url)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("never in the URL"), "{body}");
    assert!(!message.contains(cluster.operator_token()), "{body}");
    let (status, _, body) = send(operator(&cluster, Method::GET, node, "/api/v1/backup")).await;
    assert_eq!(status, StatusCode::OK, "the header works: {body}");
}

#[tokio::test]
async fn one_address_cannot_take_every_event_stream() {
    let cluster = TestCluster::start(1).await;
    let node = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let events = format!("{}/api/v1/events", cluster.api_url(node));
    let hog = client_at(41);
    let mut held = Vec::new();
    for n in 0..4 {
        let response = hog
            .get(&events)
            .bearer_auth(cluster.token())
            .send()
            .await
            .expect("the node answers");
        assert_eq!(response.status(), StatusCode::OK, "stream {n}");
        // Held and never read, as the probe's streams were.
        held.push(response);
    }
    let (status, body) = answer(hog.get(&events).bearer_auth(cluster.token())).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let dashboard = client_at(42)
        .get(&events)
        .bearer_auth(cluster.token())
        .send()
        .await
        .expect("the node answers");
    assert_eq!(
        dashboard.status(),
        StatusCode::OK,
        "another address gets a stream"
    );
    drop(held);
    eventually(
        "the closed streams' places are free again",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || async {
            let response = hog
                .get(&events)
                .bearer_auth(cluster.token())
                .send()
                .await
                .map_err(|error| error.to_string())?;
            match response.status() {
                StatusCode::OK => Ok(()),
                status => Err(status.to_string()),
            }
        },
    )
    .await;
}

#[tokio::test]
async fn adding_a_node_does_not_echo_what_its_address_answers() {
    let cluster = TestCluster::start(1).await;
    let node = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("its address");
    let page = "<h1>admin</h1> db_password=hunter2";
    let server = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            let response = format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n{page}",
                page.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        }
    });
    let body = json!({
        "id": 9,
        "api": format!("127.0.0.1:{}", tickd_tests::ports::allocate(1)[0]),
        "raft": address.to_string(),
    });
    let (status, _, answer) =
        send(operator(&cluster, Method::POST, node, NODES_PATH).json(&body)).await;
    server.abort();
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(message.contains("HTTP 500"), "{answer}");
    assert!(
        !message.contains("hunter2"),
        "the page is not echoed: {answer}"
    );
}

#[tokio::test]
async fn a_node_starts_where_the_system_has_no_root_certificates() {
    let empty = tempfile::tempdir().expect("an empty directory");
    let cluster = TestCluster::builder()
        .nodes(1)
        .env(
            "SSL_CERT_FILE",
            empty.path().join("none.pem").display().to_string(),
        )
        .env("SSL_CERT_DIR", empty.path().display().to_string())
        .start()
        .await;
    let node = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let (status, _, body) = health(&cluster, node).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
