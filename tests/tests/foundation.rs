//! The cluster foundation, black-box: real `tickd` processes on loopback, real RocksDB, SIGKILL.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tickd_tests::api::{self, clock_id, cluster_view, list, register};
use tickd_tests::timing::AGREED_LEADER_WITHIN;
use tickd_tests::{NodeId, TestCluster};

const CATCH_UP_LIMIT: Duration = Duration::from_secs(30);

/// The target and message of the line a node logs once it has shut down cleanly.
const CLEAN_STOP: &str = "tickd::node: stopped";

/// Whether a log line is the clean-stop line: `<timestamp>  INFO tickd::node: stopped`, in
/// the plain format the test cluster's nodes log in.
fn is_clean_stop(line: &str) -> bool {
    line.split_once(' ').is_some_and(|(_, rest)| {
        rest.trim_start()
            .strip_prefix("INFO ")
            .is_some_and(|rest| rest == CLEAN_STOP)
    })
}

async fn register_ok(cluster: &TestCluster, node: NodeId, name: &str) -> String {
    let (status, _, body) = register(cluster, node, name, "every.5.seconds").await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "register {name} via node {node}: {body}"
    );
    clock_id(&body)
}

async fn ids_seen_by(cluster: &TestCluster, node: NodeId) -> BTreeSet<String> {
    let (status, _, body) = list(cluster, node, "").await;
    assert_eq!(status, StatusCode::OK, "list via node {node}: {body}");
    body.as_array()
        .expect("a JSON array")
        .iter()
        .map(|clock| clock["id"].as_str().expect("an id").to_string())
        .collect()
}

#[tokio::test]
async fn writes_through_every_node_are_read_on_every_node() {
    let cluster = TestCluster::start(3).await;
    let mut written = BTreeSet::new();
    for node in cluster.node_ids() {
        written.insert(register_ok(&cluster, node, &format!("via-{node}")).await);
    }
    for node in cluster.node_ids() {
        assert_eq!(
            ids_seen_by(&cluster, node).await,
            written,
            "node {node} must see every write at once"
        );
    }
    let cluster = &cluster;
    let views: Vec<Option<u64>> = futures::future::join_all(
        cluster
            .node_ids()
            .into_iter()
            .map(|node| async move { cluster_view(cluster, node).await.leader }),
    )
    .await;
    assert!(
        views.windows(2).all(|pair| pair[0] == pair[1]),
        "every node names the same leader: {views:?}"
    );
}

#[tokio::test]
async fn leader_kill_elects_a_new_leader_and_the_old_one_catches_up() {
    let cluster = TestCluster::start(3).await;
    let old = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    let before = register_ok(&cluster, old, "before-kill").await;

    let killed_at = Instant::now();
    cluster.kill(old);
    // The bound is derived from the election's configuration (tests/src/timing.rs); the
    // wait fails the test past it.
    let new = cluster.wait_for_new_leader(old, AGREED_LEADER_WITHIN).await;
    println!("node {new} leads {:?} after the kill", killed_at.elapsed());

    let mut after = Vec::new();
    for node in cluster.running_ids() {
        after.push(register_ok(&cluster, node, &format!("after-kill-via-{node}")).await);
    }

    cluster.restart(old);
    cluster.wait_healthy(old, CATCH_UP_LIMIT).await;
    cluster.wait_caught_up(old, CATCH_UP_LIMIT).await;
    let seen = ids_seen_by(&cluster, old).await;
    assert!(
        seen.contains(&before) && after.iter().all(|id| seen.contains(id)),
        "{seen:?}"
    );
}

/// Elections a node called before openraft's own timer (`raft/src/leader_loss.rs`).
const EARLY_ELECTIONS: &str = "tickd_raft_early_elections_total";

async fn early_elections(cluster: &TestCluster, node: NodeId) -> f64 {
    api::metric(cluster, node, EARLY_ELECTIONS)
        .await
        .unwrap_or_else(|| panic!("node {node} exports no {EARLY_ELECTIONS}"))
}

/// Once a majority has not heard a dead leader for openraft's vote lease, its first follower
/// campaigns at once instead of waiting out openraft's election timer on top. A loaded host may
/// delay that follower until openraft's timer wins the race, so the test allows three kills and
/// fails only if the new leader never came from an early campaign.
#[tokio::test]
async fn a_dead_leader_is_replaced_by_an_early_campaign() {
    let cluster = TestCluster::start(3).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let old = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
        let mut before = BTreeMap::new();
        for node in cluster.node_ids().into_iter().filter(|node| *node != old) {
            before.insert(node, early_elections(&cluster, node).await);
        }
        let killed_at = Instant::now();
        cluster.kill(old);
        let new = cluster.wait_for_new_leader(old, AGREED_LEADER_WITHIN).await;
        let elapsed = killed_at.elapsed();
        let called = early_elections(&cluster, new).await - before[&new];
        seen.push(format!(
            "node {new} leads {elapsed:?} after the kill, early campaigns {called}"
        ));
        if called >= 1.0 {
            println!("{seen:#?}");
            return;
        }
        cluster.restart(old);
        cluster.wait_healthy(old, CATCH_UP_LIMIT).await;
        cluster.wait_caught_up(old, CATCH_UP_LIMIT).await;
    }
    panic!("no new leader came from an early campaign: {seen:#?}");
}

/// A follower that was paused past the vote lease, but not past openraft's own election timer,
/// asks the others before it campaigns, hears that the leader is alive, and leaves it in office:
/// an early campaign on its own silence alone would raise the term and depose the leader.
#[tokio::test]
async fn a_follower_paused_past_the_vote_lease_leaves_a_live_leader_in_office() {
    /// Past the vote lease and the first follower's margin (650 ms), short of openraft's own
    /// timer (the vote lease and at least 300 ms of election timeout: 900 ms) even with the
    /// 100 ms between heartbeats added.
    const PAUSE: Duration = Duration::from_millis(680);
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    // The lowest-numbered follower ranks first: it is the one that would campaign.
    let follower = cluster.a_follower(AGREED_LEADER_WITHIN).await;
    let term = cluster_view(&cluster, leader).await.term;
    for _ in 0..3 {
        cluster.stop(follower);
        tokio::time::sleep(PAUSE).await;
        cluster.cont(follower);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let view = cluster_view(&cluster, leader).await;
    assert_eq!(
        (view.leader, view.term),
        (Some(leader), term),
        "node {leader} must still lead in term {term}"
    );
    assert_eq!(early_elections(&cluster, follower).await, 0.0);
}

#[tokio::test]
async fn follower_kill_keeps_writes_flowing_and_it_rejoins() {
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    cluster.kill(follower);

    let mut written = Vec::new();
    for (round, node) in cluster
        .running_ids()
        .into_iter()
        .cycle()
        .take(6)
        .enumerate()
    {
        written.push(register_ok(&cluster, node, &format!("while-down-{round}")).await);
    }
    cluster.restart(follower);
    cluster.wait_healthy(follower, CATCH_UP_LIMIT).await;
    cluster.wait_caught_up(follower, CATCH_UP_LIMIT).await;
    let seen = ids_seen_by(&cluster, follower).await;
    assert!(
        written.iter().all(|id| seen.contains(id)),
        "the rejoined follower sees {seen:?}"
    );
}

#[tokio::test]
async fn sigkill_of_every_node_loses_no_acknowledged_write() {
    let cluster = TestCluster::start(3).await;
    let mut written = BTreeSet::new();
    for (round, node) in cluster.node_ids().into_iter().cycle().take(15).enumerate() {
        written.insert(register_ok(&cluster, node, &format!("durable-{round}")).await);
    }
    let paused = clock_id(&json!({ "id": written.iter().next().expect("a clock") }));
    let (status, _, _) = api::action(&cluster, 2, &paused, "pause").await;
    assert_eq!(status, StatusCode::OK);

    cluster.kill_all();
    cluster.restart_all();
    cluster.wait_ready(Duration::from_secs(30)).await;

    for node in cluster.node_ids() {
        assert_eq!(
            ids_seen_by(&cluster, node).await,
            written,
            "node {node} after the full restart"
        );
    }
    let (_, _, body) = api::get_clock(&cluster, 3, &paused).await;
    assert_eq!(
        body["status"], "PAUSED",
        "an acknowledged pause survives: {body}"
    );
}

/// A three-node cluster that snapshots every `snapshot_every` entries, its leader and one of
/// its followers.
async fn cluster_and_a_follower(snapshot_every: u64) -> (TestCluster, NodeId, NodeId) {
    let cluster = TestCluster::builder()
        .nodes(3)
        .snapshot_every(snapshot_every)
        .start()
        .await;
    let leader = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    (cluster, leader, follower)
}

#[tokio::test]
async fn a_wiped_node_catches_up_through_a_snapshot() {
    let (cluster, leader, victim) = cluster_and_a_follower(20).await;
    let mut written = BTreeSet::new();
    for round in 0..70 {
        written.insert(register_ok(&cluster, leader, &format!("snap-{round}")).await);
    }
    cluster.kill(victim);
    cluster.wipe(victim);
    // More writes, so the log the victim would need has been purged behind a snapshot.
    for round in 70..100 {
        written.insert(register_ok(&cluster, leader, &format!("snap-{round}")).await);
    }
    cluster.restart(victim);
    cluster.wait_healthy(victim, CATCH_UP_LIMIT).await;
    cluster.wait_caught_up(victim, CATCH_UP_LIMIT).await;
    assert_eq!(ids_seen_by(&cluster, victim).await, written);
    assert!(
        cluster.log(victim).contains("snapshot installed"),
        "the wiped node should have caught up through a snapshot"
    );
}

/// Registers through `leader`, ten a second, until it has built one more snapshot than it had,
/// and returns the ids registered. Gives up after `limit` registrations.
///
/// Slowly, so that the count of entries a snapshot lands at is known within a few: a node
/// waits twenty times its last build before the next (`snapshot_pace`), and a build of
/// milliseconds is measured at the pace's 100 ms checks, so the wait is about 2 s (up to 4 on
/// a loaded machine). Unthrottled, a debug cluster appends a few hundred entries in that time.
async fn register_until_a_snapshot(
    cluster: &TestCluster,
    leader: NodeId,
    prefix: &str,
    limit: usize,
) -> BTreeSet<String> {
    let built = |cluster: &TestCluster| cluster.log(leader).matches("snapshot built").count();
    let before = built(cluster);
    let mut written = BTreeSet::new();
    for round in 0..limit {
        written.insert(register_ok(cluster, leader, &format!("{prefix}-{round}")).await);
        if built(cluster) > before {
            return written;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("node {leader} built no snapshot in {limit} registrations");
}

#[tokio::test]
async fn a_follower_back_from_a_short_outage_catches_up_from_the_log() {
    const SNAPSHOT_EVERY: usize = 60;
    let (cluster, leader, victim) = cluster_and_a_follower(SNAPSHOT_EVERY as u64).await;
    // The leader has just snapshotted; the victim goes down a third of a period after it.
    let mut written =
        register_until_a_snapshot(&cluster, leader, "before", 3 * SNAPSHOT_EVERY).await;
    for round in 0..SNAPSHOT_EVERY / 3 {
        written.insert(register_ok(&cluster, leader, &format!("known-{round}")).await);
    }
    cluster.wait_caught_up(victim, CATCH_UP_LIMIT).await;
    cluster.kill(victim);
    // Fewer entries than a period while it is down, but enough that the leader snapshots and
    // purges: with no log kept behind the snapshot, the victim would need the snapshot.
    written.extend(register_until_a_snapshot(&cluster, leader, "missed", 3 * SNAPSHOT_EVERY).await);
    cluster.restart(victim);
    cluster.wait_healthy(victim, CATCH_UP_LIMIT).await;
    cluster.wait_caught_up(victim, CATCH_UP_LIMIT).await;
    assert_eq!(ids_seen_by(&cluster, victim).await, written);
    assert!(
        !cluster.log(victim).contains("snapshot installed"),
        "the follower should have caught up from the log, not through a snapshot"
    );
}

#[tokio::test]
async fn raft_requests_without_the_secret_or_with_garbage_change_nothing() {
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    let term_before = cluster_view(&cluster, leader).await.term;
    let client = cluster.client();
    let target = cluster.raft_addr(leader);
    // A vote request for a huge term would depose the leader if it were accepted.
    let vote = json!({ "vote": { "leader_id": { "term": 1000, "node_id": 9 }, "committed": false }, "last_log_id": null });

    let refused = client
        .post(format!("http://{target}/raft/vote"))
        .json(&vote)
        .send()
        .await
        .expect("reply");
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let wrong = client
        .post(format!("http://{target}/raft/vote"))
        .header("x-tickd-secret", "not-the-secret")
        .json(&vote)
        .send()
        .await
        .expect("reply");
    assert_eq!(wrong.status(), StatusCode::FORBIDDEN);
    // What a node says of its leader's silence is for members only, as every internal route.
    let silence = client
        .get(format!("http://{target}/internal/leader-silence"))
        .send()
        .await
        .expect("reply");
    assert_eq!(silence.status(), StatusCode::FORBIDDEN);
    for path in [
        "/raft/append",
        "/raft/vote",
        "/raft/snapshot",
        "/internal/write",
    ] {
        let garbage = client
            .post(format!("http://{target}{path}"))
            .header("x-tickd-secret", "test-secret")
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .expect("reply");
        assert_eq!(garbage.status(), StatusCode::BAD_REQUEST, "{path}");
        let body: Value = garbage.json().await.expect("a JSON refusal");
        assert!(!body["message"].as_str().unwrap_or_default().is_empty());
    }

    let view = cluster_view(&cluster, leader).await;
    assert_eq!(view.leader, Some(leader), "the leader is unchanged");
    assert_eq!(view.term, term_before, "the term is unchanged");
    register_ok(&cluster, leader, "still-writable").await;
}

#[tokio::test]
async fn sigterm_stops_a_node_cleanly_and_it_rejoins() {
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    let written = register_ok(&cluster, leader, "before-sigterm").await;
    let status = cluster.terminate(leader).await;
    let log = cluster.log(leader);
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM must end the node with exit status 0, got {status}; log:\n{log}"
    );
    // The last line tickd logs when everything shut down (node/src/node.rs), matched whole:
    // "stopped" alone also matches the warning "a server stopped with an error".
    assert!(
        log.lines().any(is_clean_stop),
        "the node logs its clean stop ({CLEAN_STOP:?} at INFO); log:\n{log}"
    );
    // Clean means none of the node's own shutdown warnings (Raft or a server failing to stop);
    // openraft's replication chatter about peers is not about this node's shutdown.
    let shutdown = log
        .rsplit_once("shutting down")
        .map_or("", |(_, rest)| rest);
    assert!(
        !shutdown
            .lines()
            .any(|line| line.contains(" WARN tickd::node: ")),
        "warnings during the shutdown:\n{shutdown}"
    );
    cluster.restart(leader);
    cluster.wait_healthy(leader, CATCH_UP_LIMIT).await;
    cluster.wait_caught_up(leader, CATCH_UP_LIMIT).await;
    assert!(ids_seen_by(&cluster, leader).await.contains(&written));
}
