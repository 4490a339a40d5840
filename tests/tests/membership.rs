//! Membership changes at runtime, black-box: growing and shrinking a ticking cluster,
//! replacing a dead node, and every refusal.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tickd_tests::api::{
    NODES_PATH, clock_id, cluster_view, get_clock, list, operator, register, remove_node, send,
    try_send,
};
use tickd_tests::membership::{SETTLE, add_ok, remove_ok, voters, wait_for_voters};
use tickd_tests::{NodeId, TestCluster, ports, unique_name};
use tokio::task::JoinHandle;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The nodes clients may use: the members that are neither removed nor about to be.
#[derive(Clone, Default)]
struct LiveNodes(Arc<Mutex<Vec<(NodeId, String)>>>);

impl LiveNodes {
    fn of(cluster: &TestCluster, ids: &[NodeId]) -> Self {
        let nodes = ids.iter().map(|&id| (id, cluster.api_url(id))).collect();
        Self(Arc::new(Mutex::new(nodes)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(NodeId, String)>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn add(&self, cluster: &TestCluster, id: NodeId) {
        self.lock().push((id, cluster.api_url(id)));
    }

    fn retire(&self, id: NodeId) {
        self.lock().retain(|(node, _)| *node != id);
    }

    /// The API base URL of the `n`-th live node (round robin).
    fn pick(&self, n: usize) -> String {
        let nodes = self.lock();
        nodes[n % nodes.len()].1.clone()
    }
}

/// Polls an http queue on the live nodes, round robin, and keeps every tick id.
fn poll_ticks(
    client: reqwest::Client,
    live: LiveNodes,
    pop_path: String,
    got: Arc<Mutex<BTreeSet<String>>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        for attempt in 0.. {
            let url = format!("{}{pop_path}?wait=1", live.pick(attempt));
            let ticks = match client.get(url).send().await {
                Ok(reply) => reply.json::<Value>().await.ok(),
                Err(_) => None,
            };
            let Some(Value::Array(ticks)) = ticks else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let mut got = got.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            got.extend(
                ticks
                    .iter()
                    .filter_map(|tick| tick["tick_id"].as_str().map(str::to_string)),
            );
        }
    })
}

/// Registers a new clock every 250 ms on the live nodes; keeps the ids of the acknowledged ones.
fn write_clocks(
    client: reqwest::Client,
    token: String,
    live: LiveNodes,
    acknowledged: Arc<Mutex<Vec<String>>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        for attempt in 0.. {
            let url = format!("{}/api/v1/clocks", live.pick(attempt));
            let body = json!({ "name": unique_name("member-write"), "schedule": "@never" });
            let request = client.post(url).bearer_auth(&token).json(&body);
            if let Ok((StatusCode::CREATED, _, created)) = try_send(request).await
                && let Some(id) = created["id"].as_str()
            {
                acknowledged
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(id.to_string());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

#[tokio::test]
async fn growing_to_five_and_shrinking_to_three_without_the_leader_loses_no_tick_or_write() {
    let cluster = TestCluster::builder()
        .nodes(5)
        .joining([4, 5])
        .clock_ttl_ms(600_000)
        .start()
        .await;
    let live = LiveNodes::of(&cluster, &[1, 2, 3]);

    // A ticking http clock, polled on the live nodes, and a stream of acknowledged writes.
    let (status, _, clock) = register(&cluster, 1, &unique_name("grow"), "every.1.seconds").await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");
    let registered_at = now_ms();
    let pop_url = clock["channel"]["details"]["url"]
        .as_str()
        .expect("a pop url");
    let pop_path = reqwest::Url::parse(pop_url)
        .expect("a url")
        .path()
        .to_string();
    let ticks = Arc::new(Mutex::new(BTreeSet::new()));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let pollers: Vec<JoinHandle<()>> = (0..2)
        .map(|_| {
            poll_ticks(
                cluster.client().clone(),
                live.clone(),
                pop_path.clone(),
                ticks.clone(),
            )
        })
        .collect();
    let writer = write_clocks(
        cluster.client().clone(),
        cluster.token().to_string(),
        live.clone(),
        acknowledged.clone(),
    );

    // Grow: each joining node is started, then added through a different member.
    for (id, via) in [(4, 2), (5, 3)] {
        cluster.restart(id);
        cluster.wait_serving(id, SETTLE).await;
        add_ok(&cluster, via, id).await;
        live.add(&cluster, id);
    }
    wait_for_voters(&cluster, 1, &[1, 2, 3, 4, 5]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Shrink: the leader first, asked through another member, then one follower.
    let leader = cluster.wait_for_leader(SETTLE).await;
    let via = *[1, 2, 3, 4, 5]
        .iter()
        .find(|&&id| id != leader)
        .expect("a non-leader");
    live.retire(leader);
    remove_ok(&cluster, via, leader).await;
    let new_leader = cluster.wait_for_new_leader(leader, SETTLE).await;
    let follower = *cluster
        .running_ids()
        .iter()
        .find(|&&id| id != new_leader)
        .expect("a follower");
    live.retire(follower);
    remove_ok(&cluster, new_leader, follower).await;
    let remaining = cluster.running_ids();
    assert_eq!(remaining.len(), 3, "{remaining:?}");
    wait_for_voters(&cluster, remaining[0], &remaining).await;

    // Let the clock tick under the new membership (at least 3 s, and so that the whole window
    // spans at least 15 s), then stop the clients.
    let tail_ms = 3_000.max((registered_at + 15_000).saturating_sub(now_ms()));
    tokio::time::sleep(Duration::from_millis(tail_ms)).await;
    let window_end = now_ms().saturating_sub(2_000);
    tokio::time::sleep(Duration::from_secs(2)).await;
    writer.abort();
    for poller in pollers {
        poller.abort();
    }

    // No tick lost: every instant from the first one after registration through the end of
    // the window was delivered.
    let got = ticks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let id = clock_id(&clock);
    let delivered: BTreeSet<u64> = got
        .iter()
        .filter_map(|tick| tick.strip_prefix(&format!("{id}-")))
        .filter_map(|instant| instant.parse().ok())
        .collect();
    let first = (registered_at / 1_000 + 1) * 1_000;
    let missing: Vec<u64> = (first..=window_end)
        .step_by(1_000)
        .filter(|instant| !delivered.contains(instant))
        .collect();
    assert!(
        missing.is_empty(),
        "ticks lost at {missing:?}; delivered {delivered:?}"
    );
    assert!(
        window_end > first + 10_000,
        "the window is too short to judge"
    );

    // No acknowledged write lost.
    let acknowledged = acknowledged
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    assert!(acknowledged.len() > 10, "too few writes: {acknowledged:?}");
    let (status, _, listed) = list(&cluster, remaining[1], "").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let present: BTreeSet<String> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|clock| clock["id"].as_str().map(str::to_string))
        .collect();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|id| !present.contains(*id))
        .collect();
    assert!(lost.is_empty(), "acknowledged registrations lost: {lost:?}");
}

#[tokio::test]
async fn a_dead_node_with_a_wiped_disk_is_replaced_by_a_fresh_node_id() {
    let cluster = TestCluster::builder().nodes(4).joining([4]).start().await;
    let (status, _, clock) = register(&cluster, 1, &unique_name("replace"), "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");

    // Node 3 dies and its disk is gone.
    cluster.kill(3);
    cluster.wipe(3);
    let (status, _, body) = remove_node(&cluster, 1, 3).await;
    assert_eq!(status, StatusCode::OK, "removing the dead node: {body}");

    // A fresh node takes its place under a new id; a wrong id for its address is refused.
    cluster.restart(4);
    cluster.wait_serving(4, SETTLE).await;
    let mistaken = json!({
        "id": 7,
        "api": cluster.api_addr(4).to_string(),
        "raft": cluster.raft_addr(4).to_string(),
    });
    let request = operator(&cluster, Method::POST, 2, NODES_PATH).json(&mistaken);
    let (status, _, body) = send(request.timeout(Duration::from_secs(30))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("is node 4, not node 7"),
        "{body}"
    );
    add_ok(&cluster, 2, 4).await;
    wait_for_voters(&cluster, 1, &[1, 2, 4]).await;
    cluster.wait_ready(SETTLE).await;
    for node in [1, 2, 4] {
        let (status, _, body) = get_clock(&cluster, node, &clock_id(&clock)).await;
        assert_eq!(status, StatusCode::OK, "node {node}: {body}");
    }
    // The new node holds the log: with it, the cluster survives the loss of another one.
    cluster.kill(1);
    let (status, _, body) = register(&cluster, 4, &unique_name("after"), "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Every refused change answers a JSON 4xx that says why, and changes nothing.
#[tokio::test]
async fn refused_membership_changes_say_why_and_change_nothing() {
    let cluster = TestCluster::builder().nodes(1).start().await;
    let before = cluster_view(&cluster, 1).await;
    let free = ports::allocate(2);
    let unused = |port: u16| format!("127.0.0.1:{port}");
    let node1_api = cluster.api_addr(1).to_string();
    let node1_raft = cluster.raft_addr(1).to_string();
    let cases: Vec<(Value, StatusCode, &str)> = vec![
        (
            json!({"id": 1, "api": unused(free[0]), "raft": unused(free[1])}),
            StatusCode::CONFLICT,
            "already a member",
        ),
        (
            json!({"id": 2, "api": node1_api, "raft": unused(free[1])}),
            StatusCode::CONFLICT,
            "already belongs to node 1",
        ),
        (
            json!({"id": 2, "api": unused(free[0]), "raft": unused(free[1])}),
            StatusCode::CONFLICT,
            "does not answer",
        ),
        (
            json!({"id": 2, "api": unused(free[0]), "raft": node1_raft}),
            StatusCode::CONFLICT,
            "already belongs to node 1",
        ),
        (
            json!({"id": 2, "api": "localhost", "raft": unused(free[1])}),
            StatusCode::BAD_REQUEST,
            "ip:port",
        ),
        (
            json!({"id": "two", "api": unused(free[0]), "raft": unused(free[1])}),
            StatusCode::BAD_REQUEST,
            "not a valid node",
        ),
    ];
    for (body, expected, says) in cases {
        let request = operator(&cluster, Method::POST, 1, NODES_PATH).json(&body);
        let (status, _, answer) = send(request).await;
        assert_eq!(status, expected, "{body}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(says),
            "{body}: {message:?} should say {says:?}"
        );
    }
    let removals: [(&str, StatusCode, &str); 3] = [
        ("1", StatusCode::CONFLICT, "last voter"),
        ("9", StatusCode::NOT_FOUND, "not a member"),
        ("nine", StatusCode::BAD_REQUEST, "whole numbers"),
    ];
    for (id, expected, says) in removals {
        let path = format!("{NODES_PATH}/{id}");
        let (status, _, answer) = send(operator(&cluster, Method::DELETE, 1, &path)).await;
        assert_eq!(status, expected, "remove {id}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(says),
            "remove {id}: {message:?} should say {says:?}"
        );
    }
    let anonymous = cluster
        .client()
        .delete(format!("{}{NODES_PATH}/1", cluster.api_url(1)));
    let (status, _, _) = send(anonymous).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let after = cluster_view(&cluster, 1).await;
    assert_eq!(voters(&after), voters(&before));
    assert_eq!(after.nodes.len(), before.nodes.len());
}
