//! Versions across a cluster: every node says which release it runs and which cluster levels
//! it supports, the leader raises the cluster level once every voter supports it, and an
//! entry a node cannot apply halts that node loudly instead of stopping its replication
//! without a word.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tickd_tests::api::{self, HEALTH_PATH, register};
use tickd_tests::cluster::THIS_LEVEL;
use tickd_tests::config::TEST_SECRET;
use tickd_tests::{NodeId, TestCluster, unique_name};

/// What this build calls itself; every crate of the workspace shares the version.
const THIS_RELEASE: &str = env!("CARGO_PKG_VERSION");

/// Generous for a loaded two-core machine: the leader checks the voters every 2 s.
const SETTLE: Duration = Duration::from_secs(30);

/// The value of the unlabelled metric `name` on `node`, if it exports it.
async fn metric(cluster: &TestCluster, node: NodeId, name: &str) -> Option<f64> {
    let (status, _, text) = api::send(api::operator(cluster, Method::GET, node, "/metrics")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let prefix = format!("{name} ");
    text.as_str()?
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
}

#[tokio::test]
async fn a_new_cluster_rises_to_this_binarys_level_and_every_node_says_its_release() {
    let cluster = TestCluster::start(3).await;
    let deadline = Instant::now() + SETTLE;
    loop {
        let seen = api::cluster_json(&cluster, 2).await;
        if seen["cluster_level"] == THIS_LEVEL {
            break;
        }
        assert_eq!(
            seen["cluster_level"], 1,
            "a new cluster starts at level 1: {seen}"
        );
        assert!(
            Instant::now() < deadline,
            "the cluster level never rose to {THIS_LEVEL}: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for node in cluster.node_ids() {
        let seen = api::cluster_json(&cluster, node).await;
        let members = seen["nodes"].as_array().expect("nodes");
        assert_eq!(members.len(), 3, "{seen}");
        for member in members {
            assert_eq!(member["version"], THIS_RELEASE, "{seen}");
            assert_eq!(member["levels"], format!("1..={THIS_LEVEL}"), "{seen}");
        }
        // The gauge follows the applied level at the level monitor's next check (2 s).
        let deadline = Instant::now() + SETTLE;
        while metric(&cluster, node, "tickd_cluster_level").await != Some(THIS_LEVEL as f64) {
            assert!(
                Instant::now() < deadline,
                "node {node} never exported the level it applied"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(metric(&cluster, node, "tickd_halted").await, Some(0.0));
    }
}

/// An append request, as a leader at `term` would send it, carrying one entry at `index` of a
/// command kind no release of tickd has (what a follower meets when the leader runs a newer
/// binary than its own).
fn append_from_a_newer_leader(leader: NodeId, term: u64, index: u64) -> Value {
    let leader_id = json!({ "term": term, "node_id": leader });
    json!({
        "vote": { "leader_id": leader_id, "committed": true },
        "prev_log_id": { "leader_id": leader_id, "index": index - 1 },
        "entries": [{
            "log_id": { "leader_id": leader_id, "index": index },
            "payload": { "Normal": { "Reshard": { "ways": 4 } } },
        }],
        "leader_commit": { "leader_id": leader_id, "index": index - 1 },
    })
}

#[tokio::test]
async fn an_entry_from_a_newer_binary_halts_the_follower_loudly() {
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(SETTLE).await;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let seen = api::cluster_json(&cluster, leader).await;
    let term = seen["term"].as_u64().expect("a term");
    let applied = seen["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|node| node["id"] == leader))
        .and_then(|node| node["last_applied"].as_u64())
        .expect("the leader's applied index");

    let response = cluster
        .client()
        .post(format!(
            "http://{}/raft/append",
            cluster.raft_addr(follower)
        ))
        .header("x-tickd-secret", TEST_SECRET)
        .json(&append_from_a_newer_leader(leader, term, applied + 1))
        .send()
        .await
        .expect("the Raft port answers");
    // Not a 400, which a leader counts as an unreachable node and retries without end.
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let answer = response.text().await.unwrap_or_default();
    assert!(
        answer.contains("node halted") && answer.contains("`Reshard`"),
        "the leader is told why: {answer}"
    );

    // Loudly: health DOWN, the metric, an ERROR line that names the fix. The process stays.
    let deadline = Instant::now() + SETTLE;
    loop {
        let (status, _, body) =
            api::send(api::anonymous(&cluster, Method::GET, follower, HEALTH_PATH)).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(body["status"], "DOWN", "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "health stayed {status}: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(metric(&cluster, follower, "tickd_halted").await, Some(1.0));
    let log = cluster.log(follower);
    assert!(
        log.lines().any(|line| line.contains("ERROR")
            && line.contains("halting")
            && line.contains("install the leader's release on this node")),
        "the follower's log says why it halted:\n{log}"
    );
    assert!(cluster.is_running(follower), "a halted node stays up");

    // The other two still make a majority, and the halted node shows as such in their view.
    let (status, _, body) = register(&cluster, leader, &unique_name("after-halt"), "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let seen = api::cluster_json(&cluster, leader).await;
    let halted = seen["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|node| node["id"] == follower))
        .cloned()
        .expect("the halted follower is still a member");
    assert_eq!(halted["role"], "shutdown", "{seen}");
}
