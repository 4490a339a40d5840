//! Overlap control of http clocks (SPEC §5a), black-box on a 3-node cluster of real
//! processes: with `skip`, consumers that hold each tick 3 s get about one instant in three,
//! never two ticks at once, each counting the instants skipped since the previous one, through
//! a failover of the leader; with `buffer_one`, a consumer is never more than one instant
//! behind; a bad or conflicting overlap is refused and creates nothing.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use tickd_tests::api::{self, register_body};
use tickd_tests::gaps::{gaps_counted, instant_of};
use tickd_tests::leases::{http_clock, post, text};
use tickd_tests::timing::AGREED_LEADER_WITHIN;
use tickd_tests::{NodeId, TestCluster, unique_name};

/// How long a consumer holds each tick before it acks it: three instants of the clock.
const HOLD: Duration = Duration::from_secs(3);
/// The lease's visibility time: the hold, an ack's failover and a margin.
const VISIBILITY_MS: u64 = 12_000;

/// One tick a consumer held: its instant, its `skipped`, and when the consumer got it and
/// had its ack answered.
#[derive(Debug, Clone)]
struct Held {
    instant_ms: u64,
    skipped: u64,
    leased_at: Instant,
    acked_at: Instant,
}

/// Leases on the running nodes in turn until `until`, holding each tick [`HOLD`] and acking
/// it; a node that fails or answers anything but 200 (a failover) is passed over.
async fn consume(cluster: &TestCluster, queue: &str, first: NodeId, until: Instant) -> Vec<Held> {
    let mut held = Vec::new();
    let mut node = first;
    while Instant::now() < until {
        node = 1 + node % 3;
        if !cluster.is_running(node) {
            continue;
        }
        let body = json!({"max": 10, "visibility_ms": VISIBILITY_MS});
        let ticks = match post(cluster, node, queue, "lease", &body).await {
            Ok((StatusCode::OK, _, ticks)) => ticks,
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let leased_at = Instant::now();
        let ticks = ticks.as_array().cloned().unwrap_or_default();
        assert!(ticks.len() <= 1, "one tick at a time: {ticks:?}");
        let Some(tick) = ticks.first() else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        tokio::time::sleep(HOLD).await;
        let receipt = text(tick, "receipt");
        let acked_at = ack_anywhere(cluster, queue, node, receipt).await;
        held.push(Held {
            instant_ms: instant_of(tick),
            skipped: tick["skipped"].as_u64().unwrap_or(0),
            leased_at,
            acked_at,
        });
    }
    held
}

/// Acks `receipt` on the running nodes in turn from `node` until one answers that it acked
/// it; when it did. After an attempt whose answer was lost (its node killed), the receipt may
/// be gone already: refused as unknown, it was acked by that attempt.
async fn ack_anywhere(cluster: &TestCluster, queue: &str, node: NodeId, receipt: &str) -> Instant {
    let body = json!({ "receipts": [receipt] });
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut node = node;
    let mut answer_lost = false;
    loop {
        if cluster.is_running(node) {
            match post(cluster, node, queue, "ack", &body).await {
                Ok((StatusCode::OK, _, answer)) => {
                    let acked = answer == json!({"acked": 1, "refused": []});
                    let acked_before = answer_lost
                        && answer
                            == json!({"acked": 0, "refused": [
                                {"receipt": receipt, "reason": "unknown"}
                            ]});
                    assert!(acked || acked_before, "{receipt}: {answer}");
                    return Instant::now();
                }
                Ok(_) => {}
                Err(_) => answer_lost = true,
            }
        }
        assert!(
            Instant::now() < deadline,
            "no node acked {receipt} within 8 s"
        );
        node = 1 + node % 3;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_skip_consumers_hold_one_tick_at_a_time_through_a_failover_and_see_every_gap() {
    let cluster = TestCluster::builder().nodes(3).start().await;
    let name = unique_name("skipping");
    let body = json!({"name": name, "schedule": "every.1.seconds", "overlap": "skip"});
    let (id, queue) = http_clock(&cluster, &body).await;

    // Two consumers on different nodes; the leader is killed 8 s in.
    let until = Instant::now() + Duration::from_secs(20);
    let failover = async {
        tokio::time::sleep(Duration::from_secs(8)).await;
        let leader = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
        cluster.kill(leader);
        (leader, Instant::now())
    };
    let (first, second, (killed, killed_at)) = tokio::join!(
        consume(&cluster, &queue, 1, until),
        consume(&cluster, &queue, 2, until),
        failover
    );
    let mut held = [first, second].concat();
    held.sort_by_key(|tick| tick.leased_at);

    // Never two at once: each tick was leased after the previous one's ack.
    for pair in held.windows(2) {
        assert!(
            pair[1].leased_at >= pair[0].acked_at,
            "two ticks held at once: {pair:?}"
        );
    }
    // About one instant in three (a 3 s hold of a 1 s clock), at least one of them after the
    // failover, and every gap counted.
    assert!(held.len() >= 4, "{held:?}");
    assert!(
        held.iter().any(|tick| tick.leased_at > killed_at),
        "ticks after the failover: {held:?}"
    );
    assert!(
        held.iter().skip(1).all(|tick| tick.skipped >= 2),
        "{held:?}"
    );
    gaps_counted(held.iter().map(|tick| (tick.instant_ms, tick.skipped)));

    let stats = api::stats_of(&cluster, 1 + killed % 3, &id)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let seen: u64 = held.iter().map(|tick| tick.skipped).sum();
    let counted = stats["skipped"].as_u64().unwrap_or(0);
    assert!(
        counted >= seen,
        "the statistics count every skipped instant ({seen} seen by the consumers): {stats}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_buffer_one_a_consumer_is_never_more_than_one_instant_behind() {
    let cluster = TestCluster::builder().nodes(3).start().await;
    let name = unique_name("buffering");
    let body = json!({"name": name, "schedule": "every.1.seconds", "overlap": "buffer_one"});
    let (_, queue) = http_clock(&cluster, &body).await;
    let held = consume(
        &cluster,
        &queue,
        1,
        Instant::now() + Duration::from_secs(12),
    )
    .await;
    assert!(held.len() >= 3, "{held:?}");
    for pair in held.windows(2) {
        // The next tick is the newest instant due when the previous was acked.
        let acked_after_ms = pair[1]
            .leased_at
            .saturating_duration_since(pair[0].acked_at)
            .as_millis();
        let behind_ms = u128::from(pair[1].instant_ms - pair[0].instant_ms);
        assert!(
            behind_ms <= HOLD.as_millis() + 1_000 + acked_after_ms,
            "{pair:?}"
        );
        assert!(pair[1].skipped >= 1, "{pair:?}");
    }
    gaps_counted(held.iter().map(|tick| (tick.instant_ms, tick.skipped)));
}

#[tokio::test]
async fn a_bad_or_conflicting_overlap_is_refused_and_creates_nothing() {
    // Loopback receivers allowed, so that a webhook registration reaches the overlap check.
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("webhook_allow_private", "true")
        .start()
        .await;
    let name = unique_name("refused");
    for (body, status, says) in [
        (
            json!({"name": name, "schedule": "every.1.seconds", "overlap": "sometimes"}),
            StatusCode::BAD_REQUEST,
            "invalid overlap \"sometimes\"",
        ),
        (
            json!({"name": name, "schedule": "every.1.seconds", "overlap": "skip",
                "channel": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}}),
            StatusCode::BAD_REQUEST,
            "overlap skip needs a channel",
        ),
    ] {
        let (answered, _, answer) = register_body(&cluster, 1, &body).await;
        assert_eq!(answered, status, "{answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{answer}");
    }
    let (_, _, listed) = api::list_where(&cluster, 1, &[("name", &name)]).await;
    assert_eq!(listed, json!([]));
    // The clock exists with skip: joining it with another overlap is a conflict; without
    // one, or with its own, it is joined.
    let skip = json!({"name": name, "schedule": "every.1.seconds", "overlap": "skip"});
    let (id, _) = http_clock(&cluster, &skip).await;
    let other = json!({"name": name, "schedule": "every.1.seconds", "overlap": "buffer_one"});
    let (status, _, answer) = register_body(&cluster, 1, &other).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(message.contains("exists with overlap skip"), "{answer}");
    for body in [skip, json!({"name": name, "schedule": "every.1.seconds"})] {
        let (status, _, joined) = register_body(&cluster, 1, &body).await;
        assert_eq!(status, StatusCode::CREATED, "{joined}");
        assert_eq!(joined["id"], json!(id), "{joined}");
    }
}
