//! Overlap control (SPEC §5a), black-box on a 3-node cluster of real processes.
//!
//! Http clocks: with `skip`, consumers that hold each tick 3 s get about one instant in three,
//! never two ticks at once, each counting the instants skipped since the previous one, through
//! a failover of the leader; with `buffer_one`, a consumer is never more than one instant
//! behind. Webhook clocks, whose receiver's 2xx is the acknowledgement: a receiver busy 2.5 s
//! with each tick of an every-second clock gets one tick in three with `skip`, each counting
//! the 2 instants skipped, never two ticks at once, through a failover; with `buffer_one` it is
//! never more than one instant behind. A bad or conflicting overlap is refused and creates
//! nothing.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use tickd_tests::api::{self, register_body};
use tickd_tests::gaps::{gaps_counted, instant_of};
use tickd_tests::leases::{http_clock, post, text};
use tickd_tests::timing::AGREED_LEADER_WITHIN;
use tickd_tests::webhook::{Delivery, Receiver};
use tickd_tests::{NodeId, TestCluster, rabbit, unique_name};

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

/// How long a webhook receiver takes to answer each tick: two and a half instants of an
/// every-second clock, so that the third instant falls due after its answer.
const BUSY: Duration = Duration::from_millis(2_500);

/// Registers an every-second webhook clock to `receiver` with `overlap`; returns its id.
async fn webhook_clock(cluster: &TestCluster, receiver: &Receiver, overlap: &str) -> String {
    let body = json!({
        "name": unique_name("hooked"),
        "schedule": "every.1.seconds",
        "channel": {"type": "webhook", "url": receiver.url()},
        "overlap": overlap,
    });
    let (status, _, clock) = register_body(cluster, 1, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");
    assert_eq!(clock["overlap"], overlap, "{clock}");
    clock["id"].as_str().expect("a clock id").to_owned()
}

/// The ticks `receiver` answered 2xx, one per tick, as (instant, skipped, received at ms).
fn received(receiver: &Receiver) -> Vec<(u64, u64, u64)> {
    receiver
        .delivered()
        .iter()
        .map(|delivery| {
            let tick = delivery.tick();
            let skipped = tick["skipped"].as_u64().unwrap_or(0);
            (instant_of(&tick), skipped, delivery.received_ms)
        })
        .collect()
}

/// No delivery arrived while the receiver was busy with another tick; a tick sent again
/// after a failover (its `webhook-id` the same) may overlap itself.
fn one_at_a_time(deliveries: &[Delivery]) {
    for delivery in deliveries {
        assert!(
            delivery.overlapping.iter().all(|busy| *busy == delivery.id),
            "{} arrived while the receiver was busy with {:?}",
            delivery.id,
            delivery.overlapping
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_webhook_receiver_gets_one_tick_at_a_time_through_a_failover() {
    let cluster = TestCluster::builder()
        .nodes(3)
        .setting("webhook_allow_private", "true")
        .start()
        .await;
    let skipping = Receiver::answering_after(BUSY).await;
    let buffering = Receiver::answering_after(BUSY).await;
    let skip_id = webhook_clock(&cluster, &skipping, "skip").await;
    webhook_clock(&cluster, &buffering, "buffer_one").await;

    // The leader is killed 10 s in; 12 s more for the next one to take over and go on.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let leader = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    cluster.kill(leader);
    let killed_ms = tickd_tests::chaos::time::now_ms();
    tokio::time::sleep(Duration::from_secs(12)).await;

    one_at_a_time(&skipping.deliveries());
    one_at_a_time(&buffering.deliveries());

    // Skip: one instant in three, each after the first counting the two skipped since the
    // previous one, but across the failover, where the outage may have skipped more.
    let ticks = received(&skipping);
    assert!((5..=9).contains(&ticks.len()), "about 22 s / 3: {ticks:?}");
    assert!(
        ticks.iter().any(|(_, _, at)| *at > killed_ms + 2_000),
        "ticks after the failover: {ticks:?}"
    );
    let seen = gaps_counted(
        ticks
            .iter()
            .map(|(instant, skipped, _)| (*instant, *skipped)),
    );
    let steady = ticks
        .iter()
        .skip(1)
        .filter(|(_, skipped, _)| *skipped == 2)
        .count();
    assert!(
        steady + 2 >= ticks.len(),
        "two skipped between ticks: {ticks:?}"
    );
    let stats = api::stats_of(&cluster, 1 + leader % 3, &skip_id)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let counted = stats["skipped"].as_u64().unwrap_or(0);
    assert!(counted >= seen, "{seen} seen by the receiver: {stats}");

    // Buffer one: each tick is the newest instant due when the previous was answered, never
    // more than one instant late (but across the failover), every gap counted.
    let ticks = received(&buffering);
    assert!(ticks.len() >= 6, "{ticks:?}");
    let late = ticks
        .iter()
        .filter(|(instant, _, at)| at.saturating_sub(*instant) >= 2_000)
        .filter(|(_, _, at)| !(killed_ms..killed_ms + 6_000).contains(at));
    assert_eq!(late.count(), 0, "more than one instant behind: {ticks:?}");
    gaps_counted(
        ticks
            .iter()
            .map(|(instant, skipped, _)| (*instant, *skipped)),
    );
}

#[tokio::test]
async fn a_bad_or_conflicting_overlap_is_refused_and_creates_nothing() {
    // A broker, so that a RabbitMQ registration reaches the overlap check.
    let cluster = TestCluster::builder()
        .nodes(1)
        .rabbit_uri(Some(rabbit::broker().await))
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
                "channel": {"type": "rabbit"}}),
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
    // The broker's channel is the default: these ask for the http one.
    let http = json!({"type": "http"});
    let skip = json!({"name": name, "schedule": "every.1.seconds", "overlap": "skip",
        "channel": http});
    let (id, _) = http_clock(&cluster, &skip).await;
    let other = json!({"name": name, "schedule": "every.1.seconds", "overlap": "buffer_one",
        "channel": http});
    let (status, _, answer) = register_body(&cluster, 1, &other).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(message.contains("exists with overlap skip"), "{answer}");
    let without = json!({"name": name, "schedule": "every.1.seconds", "channel": http});
    for body in [skip, without] {
        let (status, _, joined) = register_body(&cluster, 1, &body).await;
        assert_eq!(status, StatusCode::CREATED, "{joined}");
        assert_eq!(joined["id"], json!(id), "{joined}");
    }
}
