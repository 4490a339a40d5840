//! The bare sender is the floor the webhook lateness figures are divided by: it must post
//! like tickd (the same message, signed as Standard Webhooks says, at each instant and never
//! before it) or the ratio means nothing.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use tickd_domain::WebhookSecret;

/// How many clocks the sender ticks.
const CLOCKS: usize = 3;
/// How many whole instants the test waits for.
const INSTANTS: usize = 2;

/// One request as the receiver saw it.
struct Received {
    headers: HeaderMap,
    body: Bytes,
    arrived_ms: u128,
}

type Sink = Arc<Mutex<Vec<Received>>>;

async fn receive(State(sink): State<Sink>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let arrived_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis());
    sink.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Received {
            headers,
            body,
            arrived_ms,
        });
    StatusCode::OK
}

#[tokio::test]
async fn the_bare_sender_posts_signed_ticks_at_their_instants_never_before() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!(
        "http://{}/hook",
        listener.local_addr().expect("its address")
    );
    let sink: Sink = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(sink.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let secret = WebhookSecret::from_bytes([9; 32]);
    let mut sender = Command::new(env!("CARGO_BIN_EXE_bare-sender"))
        .arg("--url")
        .arg(&url)
        .arg("--clocks")
        .arg(CLOCKS.to_string())
        .arg("--secret")
        .arg(secret.expose())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the bare sender");

    // Every clock's ticks of the first INSTANTS instants, within two seconds of the last.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(INSTANTS as u64 + 3);
    while sink.lock().unwrap_or_else(PoisonError::into_inner).len() < CLOCKS * INSTANTS
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = sender.kill();
    let _ = sender.wait();
    server.abort();

    let received = std::mem::take(&mut *sink.lock().unwrap_or_else(PoisonError::into_inner));
    assert!(
        received.len() >= CLOCKS * INSTANTS,
        "{} requests, expected {} within {INSTANTS} s",
        received.len(),
        CLOCKS * INSTANTS
    );
    let mut instants = std::collections::BTreeMap::<i64, usize>::new();
    for request in &received {
        let header = |name: &str| {
            request
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let tick: Value = serde_json::from_slice(&request.body).expect("a JSON tick");
        let id = header("webhook-id");
        assert_eq!(tick["tick_id"], id.as_str(), "webhook-id is the tick id");
        assert_eq!(tick["schedule"], "every.1.seconds");
        assert_eq!(tick["manual"], false);
        assert_eq!(header("content-type"), "application/json");

        let timestamp: u64 = header("webhook-timestamp")
            .parse()
            .expect("webhook-timestamp is unix seconds");
        assert_eq!(
            header("webhook-signature"),
            secret.sign(&id, timestamp, &request.body),
            "the signature of {id} verifies with the secret"
        );

        let scheduled =
            chrono::DateTime::parse_from_rfc3339(tick["scheduled_at"].as_str().unwrap_or(""))
                .expect("scheduled_at is RFC 3339");
        let instant = scheduled.timestamp_millis();
        assert_eq!(instant % 1_000, 0, "instants are whole seconds: {tick}");
        assert!(id.ends_with(&format!("-{instant}")), "tick id {id:?}");
        assert!(
            request.arrived_ms >= instant as u128,
            "{id} arrived at {} ms, before its instant {instant}",
            request.arrived_ms
        );
        // Instants are whole seconds: signed at or after one, the timestamp is at least it.
        assert!(
            timestamp * 1_000 >= instant as u64,
            "{id} was signed at {timestamp} s, before its instant {instant}"
        );
        *instants.entry(instant).or_default() += 1;
    }
    let first: Vec<(i64, usize)> = instants.into_iter().take(INSTANTS).collect();
    assert_eq!(
        first.iter().map(|(_, count)| *count).collect::<Vec<_>>(),
        vec![CLOCKS; INSTANTS],
        "every clock ticks once at each instant: {first:?}"
    );
    assert_eq!(
        first[1].0 - first[0].0,
        1_000,
        "one instant a second: {first:?}"
    );
}
