//! A running cluster of the previous release upgraded node by node to this build, under the
//! chaos workload: registry clients writing through every node and watched clocks ticking
//! every second, judged by the chaos checkers over the whole history (no acknowledged write
//! lost, the registry linearizable, no tick lost, leader and ticks back after the last step).
//!
//! The procedure is the README's: each node in turn is stopped with SIGTERM, started from the
//! new binary on the same data directory, and given time to catch up, followers first and the
//! leader last. Before it, one node goes up to the new build and back down to v0.1.0: a
//! rolling downgrade is possible as long as the cluster level has not risen. After the last
//! node, the leader raises the cluster level to 2 by proposing `SetLevel`, a command kind that
//! v0.1.0 cannot read: the first new kind, used once every voter supports it.
//!
//! Downgrading further is not possible: a level-2 log holds entries v0.1.0 cannot decode
//! (README, "Upgrading").

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tickd_tests::api::{self, BACKUP_PATH};
use tickd_tests::chaos::scripted::under_fault;
use tickd_tests::cluster::tickd_binary;
use tickd_tests::rabbit::BROKER_URI;
use tickd_tests::releases::V0_1_0;
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

/// The previous release's binary: built from history the first time (minutes), then kept.
async fn previous_release() -> PathBuf {
    tokio::task::spawn_blocking(|| V0_1_0.binary())
        .await
        .expect("the build of the previous release panicked")
}

/// Stops `node` with SIGTERM, starts it again from `binary` on the same data, and waits until
/// it serves and has caught up with the leader.
async fn replace(cluster: &TestCluster, node: NodeId, binary: &Path) {
    let exit = cluster.terminate(node).await;
    assert!(exit.success(), "node {node} exited with {exit} on SIGTERM");
    cluster.set_binary(node, binary);
    cluster.restart(node);
    cluster.wait_ready(STEP_TIMEOUT).await;
    cluster.wait_caught_up(node, STEP_TIMEOUT).await;
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

async fn upgrade_under_workload(rabbit_uri: Option<String>, seed: u64) {
    let old = previous_release().await;
    let new = tickd_binary();
    let cluster = TestCluster::builder()
        .nodes(3)
        .binary(&old)
        // v0.1.0 refuses a file with keys it does not know.
        .without_operator_token()
        // Snapshots every few seconds under the workload, and no log kept behind them: the
        // new build loads v0.1.0's snapshot files, and a node back from its restart may be
        // sent a snapshot by a leader of the other release.
        .snapshot_every(SNAPSHOT_EVERY)
        .rabbit_uri(rabbit_uri)
        .start()
        .await;
    let old_view = api::cluster_json(&cluster, 1).await;
    assert!(
        old_view.get("cluster_level").is_none(),
        "the cluster starts on v0.1.0, which knows no levels: {old_view}"
    );

    let verdict = under_fault(&cluster, seed, async {
        // A rolling downgrade while the level is 1: one node up to the new build and back.
        let probe = cluster.a_follower(STEP_TIMEOUT).await;
        replace(&cluster, probe, &new).await;
        let mixed = api::cluster_json(&cluster, probe).await;
        assert_eq!(
            mixed["cluster_level"], 1,
            "a mixed cluster stays at 1: {mixed}"
        );
        let mut expected = vec!["0.1.0".to_string(); 3];
        expected[usize::try_from(probe).expect("a small id") - 1] = THIS_RELEASE.to_string();
        assert_eq!(versions(&mixed), expected, "{mixed}");
        replace(&cluster, probe, &old).await;

        // The rolling upgrade: the followers first, the leader last.
        let leader = cluster.wait_for_leader(STEP_TIMEOUT).await;
        let mut order: Vec<NodeId> = cluster
            .node_ids()
            .into_iter()
            .filter(|id| *id != leader)
            .collect();
        order.push(leader);
        for node in order {
            replace(&cluster, node, &new).await;
        }
        cluster.wait_for_cluster_level(2, LEVEL_TIMEOUT).await;
    })
    .await;
    verdict.assert_held("a rolling upgrade from v0.1.0");

    for node in cluster.node_ids() {
        let seen = api::cluster_json(&cluster, node).await;
        assert_eq!(seen["cluster_level"], 2, "node {node}: {seen}");
        assert_eq!(
            versions(&seen),
            vec![THIS_RELEASE; 3],
            "node {node}: {seen}"
        );
    }
    // The file is still v0.1.0's, without an operator token: the operator's routes say so.
    let (status, _, body) = api::send(api::authed(&cluster, Method::GET, 1, BACKUP_PATH)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.to_string().contains("this cluster has none"),
        "the refusal names the missing operator_token: {body}"
    );
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
    upgrade_under_workload(Some(BROKER_URI.to_string()), 41).await;
}

#[tokio::test]
async fn a_v0_1_0_cluster_with_http_clocks_upgrades_node_by_node_under_the_workload() {
    upgrade_under_workload(None, 42).await;
}
