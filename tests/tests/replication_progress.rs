//! Issue 43, N1: an entry that cannot replicate within openraft's 100 ms append deadline must
//! never wedge the cluster, and a cluster whose replication stops says so.
//!
//! - A backup of several MiB restores into an empty 3-node cluster (on 3a3ea22 a debug build
//!   stuck from 2.9 MiB, for good), and into a live one it is refused before it is proposed,
//!   with the cluster serving and ticking throughout.
//! - With every fsync on both followers 150 ms slow (the power-loss filesystem's
//!   `fsync-delay`), writes keep committing and ticks keep flowing.
//! - A follower cut off from the leader is reported stalled (cluster status, metric), and a
//!   leader cut off from both followers reports DOWN instead of UP.
//!
//! The restore size is `TICKD_RESTORE_MIB` (16 by default, for the debug build of the suite);
//! the hand profile on a release build is 30:
//!
//! ```text
//! cargo build --release --bin tickd
//! TICKD_BINARY=$CARGO_TARGET_DIR/release/tickd TICKD_RESTORE_MIB=30 \
//!   cargo test --test replication_progress -- --nocapture large
//! ```

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tickd_tests::api::{
    BACKUP_PATH, CLUSTER_PATH, RESTORE_PATH, authed, health, metric, on_node, operator, pop,
    register, send,
};
use tickd_tests::cluster::READY_TIMEOUT;
use tickd_tests::power::PowerCluster;
use tickd_tests::{NodeId, TestCluster, eventually, unique_name};

/// The restore's size in the suite: well past the 2.9 MiB at which a debug build stuck, and
/// past what a debug build replicates within openraft's 100 ms deadline without a carried
/// append (it fails at this size when appends are sent afresh at every attempt).
const DEFAULT_RESTORE_MIB: usize = 16;

/// How long a restore of that size may take on a loaded two-core machine, debug build.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long the leader waits before it reports a follower stalled or its commit stopped
/// (`tickd_raft::progress::STALL_AFTER`), plus the margin of a loaded machine.
const STALL_REPORTED_WITHIN: Duration = Duration::from_secs(40);

/// Held by the tests of this file that load the machine most (the two 16 MiB restores, and
/// the slow-fsync run), so that they run one at a time. Side by side on a two-core machine,
/// twelve debug nodes left the restore's leader behind its forwarding deadline, and the client
/// got a 503 (seen three times on 2026-11-28, when that deadline allowed one pass of the
/// bytes, 10 s at this size; `LARGE_ENTRY_PASSES` in raft/src/replica.rs now allows five).
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn restore_bytes() -> usize {
    let mib = std::env::var("TICKD_RESTORE_MIB")
        .ok()
        .map(|value| {
            value
                .parse::<usize>()
                .unwrap_or_else(|_| panic!("TICKD_RESTORE_MIB must be a number, not {value:?}"))
        })
        .unwrap_or(DEFAULT_RESTORE_MIB);
    mib * 1024 * 1024
}

/// A valid backup of at least `bytes` of JSON: the backup of a one-node cluster holding one
/// http clock, its clock copied under fresh ids, names and queue ids as a node draws them.
async fn large_backup(bytes: usize) -> (Value, usize) {
    let source = TestCluster::start(1).await;
    let (status, _, clock) = register(&source, 1, &unique_name("template"), "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");
    let (status, _, mut backup) = send(operator(&source, Method::GET, 1, BACKUP_PATH)).await;
    assert_eq!(status, StatusCode::OK, "{backup}");
    let template = backup["registry"]["clocks"][0].clone();
    let template_id = template["id"]
        .as_str()
        .expect("the template's id")
        .to_owned();
    // Each clock has its cursor in the ledger, as the template's has.
    let cursor = backup["registry"]["ledger"]["cursors"][&template_id].clone();
    let copy = |n: usize| {
        let mut clock = template.clone();
        clock["id"] = json!(format!("{n:032x}"));
        clock["name"] = json!(format!("restored-{n:08}-{}", "x".repeat(48)));
        clock["channel"]["queue_id"] = json!(format!("{:032x}", n + (1 << 40)));
        clock
    };
    // Every copy encodes to about the same size with its cursor; 1 % more makes up for what
    // the estimate misses.
    let encoded = |value: &Value| serde_json::to_vec(value).expect("JSON encodes").len();
    let one = encoded(&copy(0)) + encoded(&json!({ format!("{:032x}", 0): cursor }));
    let count = bytes.div_ceil(one) * 101 / 100;
    let clocks: Vec<Value> = (0..count).map(copy).collect();
    let cursors: serde_json::Map<String, Value> = clocks
        .iter()
        .map(|clock| {
            (
                clock["id"].as_str().unwrap_or_default().to_owned(),
                cursor.clone(),
            )
        })
        .collect();
    backup["registry"]["clocks"] = Value::Array(clocks);
    backup["registry"]["ledger"]["cursors"] = Value::Object(cursors);
    let size = serde_json::to_vec(&backup).expect("a backup encodes").len();
    assert!(size >= bytes, "the backup is {size} bytes, {bytes} wanted");
    (backup, count)
}

async fn restore(cluster: &TestCluster, node: NodeId, document: &Value) -> (StatusCode, Value) {
    let request = operator(cluster, Method::POST, node, RESTORE_PATH)
        .timeout(RESTORE_TIMEOUT)
        .json(document);
    let (status, _, body) = send(request).await;
    (status, body)
}

/// Registers a clock on `node` within `within`, retrying refusals.
async fn registers(cluster: &TestCluster, node: NodeId, within: Duration) -> Value {
    let name = unique_name("serving");
    eventually(
        "a registration",
        within,
        Duration::from_millis(200),
        || async {
            match register(cluster, node, &name, "@never").await {
                (StatusCode::CREATED, _, body) => Ok(body),
                (status, _, body) => Err(format!("{status} {body}")),
            }
        },
    )
    .await
}

/// How many ticks an http clock delivers to pops on `node` over `window`.
async fn ticks_within(
    cluster: &TestCluster,
    node: NodeId,
    clock: &Value,
    window: Duration,
) -> usize {
    let url = on_node(
        cluster,
        node,
        clock["channel"]["details"]["url"]
            .as_str()
            .unwrap_or_else(|| panic!("an http clock: {clock}")),
    );
    let started = Instant::now();
    let mut ticks = 0;
    while started.elapsed() < window {
        let (status, _, popped) = pop(cluster, &url, Some(Duration::from_secs(1))).await;
        if status == StatusCode::OK {
            ticks += popped.as_array().map_or(0, Vec::len);
        }
    }
    ticks
}

/// The bytes of appends `node` has sent its followers.
async fn appended_bytes(cluster: &TestCluster, node: NodeId) -> f64 {
    let mut total = 0.0;
    for peer in cluster.node_ids().into_iter().filter(|peer| *peer != node) {
        let series = format!("tickd_raft_append_bytes_total{{peer=\"{peer}\"}}");
        total += metric(cluster, node, &series).await.unwrap_or(0.0);
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_backup_restores_into_an_empty_cluster() {
    let _heavy = HEAVY.lock().await;
    let (backup, count) = large_backup(restore_bytes()).await;
    let target = TestCluster::start(3).await;
    let follower = target.a_follower(READY_TIMEOUT).await;
    let started = Instant::now();
    let (status, body) = restore(&target, follower, &backup).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["restored"], json!(count));
    println!(
        "restored {count} clocks ({} MiB) in {:?}",
        restore_bytes() / (1024 * 1024),
        started.elapsed()
    );
    // Committed means a majority holds it; the cluster goes on serving writes after it.
    for node in target.node_ids() {
        registers(&target, node, Duration::from_secs(30)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_into_a_live_cluster_is_refused_before_it_is_proposed() {
    let _heavy = HEAVY.lock().await;
    let (backup, _) = large_backup(restore_bytes()).await;
    let live = TestCluster::start(3).await;
    let (status, _, ticking) = register(&live, 1, &unique_name("ticking"), "every.1.seconds").await;
    assert_eq!(status, StatusCode::CREATED, "{ticking}");
    let leader = live.wait_for_leader(READY_TIMEOUT).await;
    let before = appended_bytes(&live, leader).await;
    for node in live.node_ids() {
        let (status, body) = restore(&live, node, &backup).await;
        assert_eq!(status, StatusCode::CONFLICT, "node {node}: {body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|message| message.contains("already holds 1 clocks")),
            "{body}"
        );
    }
    // Nothing was proposed: the leader sent its followers its intents only (a few hundred
    // bytes each), not three restores that the registry would have refused at apply after
    // replicating them.
    let grown = appended_bytes(&live, leader).await - before;
    let (status, _, backup_now) = send(operator(&live, Method::GET, leader, BACKUP_PATH)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        backup_now["registry"]["clocks"].as_array().map(Vec::len),
        Some(1)
    );
    // The cluster serves and ticks as before.
    for node in live.node_ids() {
        registers(&live, node, Duration::from_secs(10)).await;
    }
    let ticks = ticks_within(&live, 2, &ticking, Duration::from_secs(5)).await;
    assert!(
        ticks >= 3,
        "{ticks} ticks of an every.1.seconds clock in 5 s"
    );
    assert!(
        grown < 1024.0 * 1024.0,
        "the leader sent {grown} bytes of appends while three restores were refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_commit_and_ticks_flow_while_both_followers_fsync_slowly() {
    let _heavy = HEAVY.lock().await;
    let power = PowerCluster::start(TestCluster::builder(), 3).await;
    let leader = power.wait_for_leader(READY_TIMEOUT).await;
    let (status, _, ticking) =
        register(&power, leader, &unique_name("slow-disk"), "every.1.seconds").await;
    assert_eq!(status, StatusCode::CREATED, "{ticking}");
    let followers: Vec<NodeId> = power
        .node_ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    for follower in &followers {
        power.slow_fsyncs(*follower, Duration::from_millis(150));
    }
    // Every write now waits for a follower's 150 ms fsync, past openraft's 100 ms deadline.
    let started = Instant::now();
    for node in power.node_ids() {
        for _ in 0..3 {
            registers(&power, node, Duration::from_secs(30)).await;
        }
    }
    println!(
        "nine registrations with slow follower disks in {:?}",
        started.elapsed()
    );
    let ticks = ticks_within(&power, followers[0], &ticking, Duration::from_secs(10)).await;
    assert!(
        ticks >= 5,
        "{ticks} ticks of an every.1.seconds clock in 10 s"
    );
    let now_leader = power.wait_for_leader(READY_TIMEOUT).await;
    let carried = power
        .node_ids()
        .into_iter()
        .filter(|id| *id != now_leader)
        .map(|id| format!("tickd_raft_appends_carried_total{{peer=\"{id}\"}}"));
    let mut total = 0.0;
    for series in carried {
        total += metric(&power, now_leader, &series).await.unwrap_or(0.0);
    }
    assert!(
        total > 0.0,
        "appends outlived openraft's deadline and were carried: {total}"
    );
    let (status, _, body) = health(&power, now_leader).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_follower_is_reported_and_a_cut_leader_reports_down() {
    let cluster = TestCluster::builder().nodes(3).link_proxies().start().await;
    let leader = cluster.wait_for_leader(READY_TIMEOUT).await;
    let cut = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    cluster.isolate(cut);
    let status = eventually(
        "the leader reports the cut follower stalled",
        STALL_REPORTED_WITHIN,
        Duration::from_millis(500),
        || async {
            let (code, _, status) = send(authed(&cluster, Method::GET, leader, CLUSTER_PATH)).await;
            let nodes = status["nodes"].as_array().cloned().unwrap_or_default();
            let stalled = nodes
                .iter()
                .find(|node| node["id"] == json!(cut))
                .and_then(|node| node["stalled_ms"].as_u64());
            match (code, stalled) {
                (StatusCode::OK, Some(ms)) if ms >= 10_000 => Ok(status),
                _ => Err(format!("{code} {status}")),
            }
        },
    )
    .await;
    for node in status["nodes"].as_array().into_iter().flatten() {
        if node["id"] != json!(cut) {
            assert!(node.get("stalled_ms").is_none(), "{status}");
        }
    }
    let series = format!("tickd_raft_follower_stalled{{peer=\"{cut}\"}}");
    assert_eq!(metric(&cluster, leader, &series).await, Some(1.0));
    // The majority still commits: the leader stays UP.
    let (code, _, body) = health(&cluster, leader).await;
    assert_eq!(code, StatusCode::OK, "{body}");

    // Now the leader alone: the others elect a leader of their own, and the old one, which
    // still believes it leads, can commit nothing. It must say DOWN, not UP.
    cluster.heal_links();
    let leader = cluster.wait_for_leader(READY_TIMEOUT).await;
    cluster.isolate(leader);
    health_becomes(
        &cluster,
        leader,
        StatusCode::SERVICE_UNAVAILABLE,
        STALL_REPORTED_WITHIN,
    )
    .await;
    cluster.heal_links();
    health_becomes(&cluster, leader, StatusCode::OK, READY_TIMEOUT).await;
}

/// Waits until `node`'s health answers `wanted`.
async fn health_becomes(cluster: &TestCluster, node: NodeId, wanted: StatusCode, within: Duration) {
    eventually(
        &format!("node {node}'s health answers {wanted}"),
        within,
        Duration::from_millis(500),
        || async {
            match health(cluster, node).await {
                (code, _, body) if code == wanted => Ok(body),
                (code, _, body) => Err(format!("{code} {body}")),
            }
        },
    )
    .await;
}
