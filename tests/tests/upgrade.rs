//! A running cluster of a previous release upgraded node by node to this build, under the
//! chaos workload: registry clients writing through every node and watched clocks ticking
//! every second, judged by the chaos checkers over the whole history (no acknowledged write
//! lost, the registry linearizable, no tick lost and every tick's id unchanged, leader and
//! ticks back after the last step), and held to docs/upgrading.md's "keeps serving and firing
//! throughout": bounded silences between acknowledged writes, from the first step to the
//! last, and between ticks (see [`WRITE_GAP_BOUND`] and [`TICK_GAP_BOUND`]).
//!
//! The procedure is docs/upgrading.md's: each node in turn is stopped with SIGTERM, started from the
//! new binary on the same data directory, and given time to catch up, followers first and the
//! leader last. Before it, one node goes up to the new build and back down: a rolling
//! downgrade is possible as long as the cluster level has not risen. After the last node, the
//! leader raises the cluster level to this build's (3) by proposing `SetLevel`.
//!
//! From v0.1.0 (level 1), `SetLevel` is itself the first kind v0.1.0 cannot read. From v0.2.0
//! (level 2, today's main before calendar schedules), a calendar schedule is refused with a
//! 503 while any node runs v0.2.0, which cannot parse one, and accepted once the level is 3;
//! the `every.1.seconds` clocks tick through it all with the same instants and ids.
//!
//! Downgrading further is not possible: a log at the new level holds entries the previous
//! release cannot decode (docs/upgrading.md).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tickd_tests::api::{self, BACKUP_PATH};
use tickd_tests::chaos::scripted::{Verdict, under_fault};
use tickd_tests::chaos::time::now_ms;
use tickd_tests::chaos::workload::CLIENT_TIMEOUT;
use tickd_tests::cluster::THIS_LEVEL;
use tickd_tests::cluster::tickd_binary;
use tickd_tests::rabbit::BROKER_URI;
use tickd_tests::releases::{Release, V0_1_0, V0_2_0};
use tickd_tests::timing::FAILOVER;
use tickd_tests::{NodeId, TestCluster};

/// What this build calls itself.
const THIS_RELEASE: &str = env!("CARGO_PKG_VERSION");
/// How long a restarted node may take to serve and catch up on a loaded two-core machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the leader may take to raise the level once the last node runs the new build (it
/// checks the voters every 2 s).
const LEVEL_TIMEOUT: Duration = Duration::from_secs(30);

/// Log entries between snapshots (the workload appends a few dozen a second).
const SNAPSHOT_EVERY: u64 = 30;

/// A previous release's binary: built from history the first time (minutes), then kept.
async fn previous_release(release: Release) -> PathBuf {
    tokio::task::spawn_blocking(move || release.binary())
        .await
        .expect("the build of the previous release panicked")
}

/// A calendar schedule, which only level 3 may hold.
const CALENDAR: &str = "TZ=Europe/Berlin 0 30 9 * * MON-FRI";

/// The longest the cluster may go without acknowledging a write during the upgrade. Writes
/// stop only while there is no leader, which the leader's own step causes once: at most a
/// [`FAILOVER`]. A client whose request was in flight to a node as it stopped, or to the
/// leader as it went, has its answer (or its timeout) within [`CLIENT_TIMEOUT`], and the
/// workload's four clients spread over every node, so one of them answers by then.
const WRITE_GAP_BOUND: Duration = FAILOVER.saturating_add(CLIENT_TIMEOUT);

/// The longest a watched clock (`every.1.seconds`) may go without a delivery during the
/// upgrade: ticks stop only while there is no leader (a [`FAILOVER`]), and the new leader
/// publishes every tick that fell due meanwhile at once, so its consumer waits at most one
/// more interval and one more pass of its own (a poll or a RabbitMQ reconnect to another node,
/// a second each).
const TICK_GAP_BOUND: Duration = FAILOVER.saturating_add(Duration::from_secs(2));

/// One step of the upgrade: which node was replaced by which build, from when to when
/// (milliseconds since the epoch).
#[derive(Debug)]
struct Step {
    node: NodeId,
    binary: PathBuf,
    began_ms: u64,
    ended_ms: u64,
}

/// Stops `node` with SIGTERM, starts it again from `binary` on the same data, and waits until
/// it serves and has caught up with the leader; records the step.
async fn replace(cluster: &TestCluster, node: NodeId, binary: &Path, steps: &Mutex<Vec<Step>>) {
    let began_ms = now_ms();
    let exit = cluster.terminate(node).await;
    assert!(exit.success(), "node {node} exited with {exit} on SIGTERM");
    cluster.set_binary(node, binary);
    cluster.restart(node);
    cluster.wait_ready(STEP_TIMEOUT).await;
    cluster.wait_caught_up(node, STEP_TIMEOUT).await;
    steps
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Step {
            node,
            binary: binary.to_path_buf(),
            began_ms,
            ended_ms: now_ms(),
        });
}

/// Writes were acknowledged throughout, never more than [`WRITE_GAP_BOUND`] apart from the
/// first step's start to the last one's end, and no watched clock went longer than
/// [`TICK_GAP_BOUND`] without a tick: docs/upgrading.md's "keeps serving and firing throughout".
///
/// A step may see no write acknowledged at all: the leader's is over in well under a second
/// once its successor serves, and an election is about that long. The bound on the gap is what
/// holds for every step, short or long.
fn assert_continuity(verdict: &Verdict, steps: &[Step], scenario: &str) {
    let (Some(first), Some(last)) = (steps.first(), steps.last()) else {
        panic!("{scenario}: no step was recorded");
    };
    for step in steps {
        let acknowledged = verdict
            .writes_acknowledged_ms
            .iter()
            .filter(|at| (step.began_ms..=step.ended_ms).contains(at))
            .count();
        println!(
            "{scenario}: node {} to {} in {} ms, {acknowledged} writes acknowledged meanwhile",
            step.node,
            step.binary.display(),
            step.ended_ms - step.began_ms
        );
    }
    let write_gap = verdict.longest_write_gap_ms(first.began_ms, last.ended_ms);
    let tick_gap = verdict.ticks.longest_gap_ms;
    println!(
        "{scenario}: {} steps in {} ms, {} writes acknowledged in all, longest without one \
         {write_gap} ms, longest without a tick {tick_gap} ms",
        steps.len(),
        last.ended_ms - first.began_ms,
        verdict.writes_acknowledged_ms.len()
    );
    assert!(
        u128::from(write_gap) <= WRITE_GAP_BOUND.as_millis(),
        "{scenario}: {write_gap} ms without an acknowledged write (at most {WRITE_GAP_BOUND:?})"
    );
    assert!(
        u128::from(tick_gap) <= TICK_GAP_BOUND.as_millis(),
        "{scenario}: a watched clock went {tick_gap} ms without a tick (at most \
         {TICK_GAP_BOUND:?})"
    );
}

/// The version every member has in `node`'s view (a member that reports none is listed as
/// v0.1.0), in id order.
fn versions(view: &Value) -> Vec<String> {
    let mut members: Vec<(u64, String)> = view["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("a cluster view lists its nodes: {view}"))
        .iter()
        .map(|member| {
            (
                member["id"].as_u64().unwrap_or_default(),
                member["version"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    members.sort();
    members.into_iter().map(|(_, version)| version).collect()
}

async fn upgrade_under_workload(release: Release, rabbit_uri: Option<String>, seed: u64) {
    let old = previous_release(release).await;
    let new = tickd_binary();
    let old_version = release.reported_version.unwrap_or("0.1.0");
    let builder = TestCluster::builder()
        .nodes(3)
        .binary(&old)
        // Snapshots every few seconds under the workload, and no log kept behind them: the
        // new build loads the old release's snapshot files, and a node back from its restart
        // may be sent a snapshot by a leader of the other release.
        .snapshot_every(SNAPSHOT_EVERY)
        .rabbit_uri(rabbit_uri);
    // v0.1.0 refuses a file with keys it does not know.
    let builder = if release.reported_version.is_none() {
        builder.without_operator_token()
    } else {
        builder
    };
    let cluster = builder.start().await;
    let old_level = match release.reported_version {
        None => {
            let old_view = api::cluster_json(&cluster, 1).await;
            assert!(
                old_view.get("cluster_level").is_none(),
                "the cluster starts on v0.1.0, which knows no levels: {old_view}"
            );
            1
        }
        Some(_) => {
            cluster.wait_for_cluster_level(2, LEVEL_TIMEOUT).await;
            2
        }
    };

    let steps = Mutex::new(Vec::new());
    let verdict = under_fault(&cluster, seed, async {
        // A rolling downgrade while the level is 1: one node up to the new build and back.
        let probe = cluster.a_follower(STEP_TIMEOUT).await;
        replace(&cluster, probe, &new, &steps).await;
        let mixed = api::cluster_json(&cluster, probe).await;
        assert_eq!(
            mixed["cluster_level"], old_level,
            "a mixed cluster stays at {old_level}: {mixed}"
        );
        let mut expected = vec![old_version.to_string(); 3];
        expected[usize::try_from(probe).expect("a small id") - 1] = THIS_RELEASE.to_string();
        assert_eq!(versions(&mixed), expected, "{mixed}");
        if old_level == 2 {
            // The node of this build takes the registration and waits for level 3, which
            // does not come while two nodes cannot parse a calendar schedule.
            let (status, _, body) = api::register(&cluster, probe, "calendar", CALENDAR).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
            assert!(body.to_string().contains("level 3"), "{body}");
        }
        replace(&cluster, probe, &old, &steps).await;

        // The rolling upgrade: the followers first, the leader last.
        let leader = cluster.wait_for_leader(STEP_TIMEOUT).await;
        let mut order: Vec<NodeId> = cluster
            .node_ids()
            .into_iter()
            .filter(|id| *id != leader)
            .collect();
        order.push(leader);
        for node in order {
            replace(&cluster, node, &new, &steps).await;
        }
        cluster
            .wait_for_cluster_level(THIS_LEVEL, LEVEL_TIMEOUT)
            .await;
    })
    .await;
    let scenario = format!("a rolling upgrade from {}", release.name);
    verdict.assert_held(&scenario);
    let steps = steps.into_inner().unwrap_or_else(PoisonError::into_inner);
    assert_continuity(&verdict, &steps, &scenario);

    for node in cluster.node_ids() {
        let seen = api::cluster_json(&cluster, node).await;
        assert_eq!(seen["cluster_level"], THIS_LEVEL, "node {node}: {seen}");
        assert_eq!(
            versions(&seen),
            vec![THIS_RELEASE; 3],
            "node {node}: {seen}"
        );
    }
    if release.reported_version.is_none() {
        // The file is still v0.1.0's, without an operator token: the operator's routes say so.
        let (status, _, body) = api::send(api::authed(&cluster, Method::GET, 1, BACKUP_PATH)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(
            body.to_string().contains("this cluster has none"),
            "the refusal names the missing operator_token: {body}"
        );
    }
    // At this build's level a calendar schedule is taken.
    let (status, _, body) = api::register(&cluster, 1, "calendar", CALENDAR).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let raised = cluster
        .node_ids()
        .into_iter()
        .any(|node| cluster.log(node).contains("cluster level raised"));
    assert!(
        raised,
        "no node logged the level's rise (the SetLevel proposal)"
    );
}

#[tokio::test]
async fn a_v0_1_0_cluster_with_rabbitmq_clocks_upgrades_node_by_node_under_the_workload() {
    upgrade_under_workload(V0_1_0, Some(BROKER_URI.to_string()), 41).await;
}

#[tokio::test]
async fn a_v0_1_0_cluster_with_http_clocks_upgrades_node_by_node_under_the_workload() {
    upgrade_under_workload(V0_1_0, None, 42).await;
}

#[tokio::test]
async fn a_v0_2_0_cluster_with_rabbitmq_clocks_upgrades_node_by_node_under_the_workload() {
    upgrade_under_workload(V0_2_0, Some(BROKER_URI.to_string()), 43).await;
}
