//! The cluster across hosts: each node in a network namespace of its own, with its own address
//! on a private bridge the test builds (`tickd_tests::rig`), RabbitMQ reached through a relay,
//! and faults that are real — a cable pulled, packets dropped — instead of a proxy.
//!
//! Each scenario runs the chaos workload around one scripted fault and is judged by the chaos
//! checkers (`tickd_tests::chaos::scripted`): no acknowledged write lost, the registry
//! linearizable, no tick lost or renamed, leader and ticks back soon after the heal.
//!
//! Needs root and iproute2 (the rig), tcpdump (the capture) and nftables (the cut): without
//! them these tests fail under `CI=true`; elsewhere a rig that cannot be built skips, loudly.
//! The nodes speak TLS, with mutual TLS between them (`Rig::cluster`); the capture test shows
//! what that hides, beside the same traffic in plain HTTP.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::StatusCode;
use tickd_tests::api::{clock_id, cluster_view, list, register};
use tickd_tests::chaos::scripted::under_fault;
use tickd_tests::cluster::HOST_API_PORT;
use tickd_tests::config::{TEST_SECRET, TEST_TOKEN};
use tickd_tests::membership::{SETTLE, add_ok, remove_ok, wait_for_voters};
use tickd_tests::rig::{Rig, pcap};
use tickd_tests::{NodeId, TestCluster};

/// How long a restarted node may take to be healthy again.
const RECOVERY: Duration = Duration::from_secs(30);

/// How long a fault lasts once the cluster has a new leader: long enough for the workload to
/// write through it and for ticks to fall due.
const FAULT_HOLDS: Duration = Duration::from_secs(3);

/// How long before a watched clock's instant a fault that takes the leader away begins.
const BEFORE_AN_INSTANT: Duration = Duration::from_millis(100);

/// Waits until [`BEFORE_AN_INSTANT`] before the next whole second, when the watched clocks
/// (every second, on the second) next fall due. A fault that takes the leader away then
/// leaves that instant to its successor, so each run tests the ticks due while there is no
/// leader, not only those of a lucky failover that fell between two instants.
async fn just_before_an_instant() {
    let into_second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.subsec_millis())
        .unwrap_or(0);
    let until = (1_000 - u64::from(into_second)).saturating_sub(millis(BEFORE_AN_INSTANT));
    tokio::time::sleep(Duration::from_millis(until)).await;
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The ids of every clock node `node` lists.
async fn ids_seen_by(cluster: &TestCluster, node: NodeId) -> BTreeSet<String> {
    let (status, _, body) = list(cluster, node, "").await;
    assert_eq!(status, StatusCode::OK, "list via node {node}: {body}");
    body.as_array()
        .into_iter()
        .flatten()
        .filter_map(|clock| clock["id"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_form_a_cluster_and_take_registrations_through_every_node() {
    let Some(rig) = Rig::start(3).await else {
        return;
    };
    let cluster = rig.cluster().start().await;
    let view = cluster_view(&cluster, 1).await;
    for node in cluster.node_ids() {
        let pid = cluster.pid(node).expect("a running node");
        assert!(
            rig.runs_on_host(pid, node),
            "node {node} (pid {pid}) does not run in {}",
            rig.namespace(node)
        );
        let host = rig.address(u8::try_from(node).expect("a small id"));
        let member = view.nodes.iter().find(|member| member.id == node);
        assert_eq!(
            member.map(|member| member.api.clone()),
            Some(format!("{host}:{HOST_API_PORT}")),
            "{view:?}"
        );
    }
    let mut written = BTreeSet::new();
    for node in cluster.node_ids() {
        let (status, _, body) = register(&cluster, node, &format!("via-{node}"), "@never").await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "register via node {node}: {body}"
        );
        written.insert(clock_id(&body));
    }
    for node in cluster.node_ids() {
        assert_eq!(ids_seen_by(&cluster, node).await, written, "node {node}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_loses_no_acknowledged_write_and_no_tick() {
    let Some(rig) = Rig::start(3).await else {
        return;
    };
    let cluster = rig.cluster().start().await;
    let verdict = under_fault(&cluster, 1, async {
        let leader = cluster.wait_for_leader(SETTLE).await;
        just_before_an_instant().await;
        cluster.kill(leader);
        cluster.wait_for_new_leader(leader, SETTLE).await;
        tokio::time::sleep(FAULT_HOLDS).await;
        cluster.restart(leader);
        cluster.wait_healthy(leader, RECOVERY).await;
    })
    .await;
    verdict.assert_held("kill -9 of the leader");
    assert!(verdict.registered_during_fault > 0, "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unplugged_leader_is_replaced_and_the_writes_of_its_successor_survive_the_heal() {
    let Some(rig) = Rig::start(3).await else {
        return;
    };
    let cluster = rig.cluster().start().await;
    let verdict = under_fault(&cluster, 2, async {
        let leader = cluster.wait_for_leader(SETTLE).await;
        just_before_an_instant().await;
        rig.unplug(leader);
        let successor = cluster.wait_for_new_leader(leader, SETTLE).await;
        assert_ne!(successor, leader);
        tokio::time::sleep(FAULT_HOLDS).await;
        rig.plug(leader);
        cluster.wait_caught_up(leader, RECOVERY).await;
    })
    .await;
    verdict.assert_held("the leader's cable pulled");
    assert!(verdict.registered_during_fault > 0, "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_one_follower_loses_nothing() {
    let Some(rig) = Rig::start(3).await else {
        return;
    };
    let cluster = rig.cluster().start().await;
    let verdict = under_fault(&cluster, 3, async {
        let leader = cluster.wait_for_leader(SETTLE).await;
        let follower = cluster
            .node_ids()
            .into_iter()
            .find(|node| *node != leader)
            .expect("a follower");
        rig.cut(leader, follower);
        tokio::time::sleep(FAULT_HOLDS * 2).await;
        rig.mend_cuts();
        cluster.wait_caught_up(follower, RECOVERY).await;
    })
    .await;
    verdict.assert_held("the leader cut off from one follower");
    assert!(verdict.registered_during_fault > 0, "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_every_host_loses_nothing() {
    let Some(rig) = Rig::start(3).await else {
        return;
    };
    let cluster = rig.cluster().start().await;
    let verdict = under_fault(&cluster, 4, async {
        cluster.kill_all();
        cluster.restart_all();
        cluster.wait_ready(RECOVERY).await;
    })
    .await;
    verdict.assert_held("kill -9 of every node, then a restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_to_five_hosts_and_back_to_three_loses_nothing() {
    let Some(rig) = Rig::start(5).await else {
        return;
    };
    let cluster = rig.cluster().joining([4, 5]).start().await;
    let verdict = under_fault(&cluster, 5, async {
        for (id, via) in [(4, 2), (5, 3)] {
            cluster.restart(id);
            cluster.wait_serving(id, SETTLE).await;
            add_ok(&cluster, via, id).await;
        }
        wait_for_voters(&cluster, 1, &[1, 2, 3, 4, 5]).await;
        // Back to three: the leader first, asked through another member, then a follower.
        let leader = cluster.wait_for_leader(SETTLE).await;
        let via = if leader == 1 { 2 } else { 1 };
        remove_ok(&cluster, via, leader).await;
        let successor = cluster.wait_for_new_leader(leader, SETTLE).await;
        let follower = cluster
            .running_ids()
            .into_iter()
            .find(|node| *node != successor)
            .expect("a follower");
        remove_ok(&cluster, successor, follower).await;
        let remaining = cluster.running_ids();
        assert_eq!(remaining.len(), 3, "{remaining:?}");
        wait_for_voters(&cluster, remaining[0], &remaining).await;
    })
    .await;
    verdict.assert_held("grow to five, shrink to three");
    assert!(verdict.registered_during_fault > 0, "{verdict:?}");
}

/// Registers one clock through every node of `cluster` while the bridge is captured, and
/// returns the capture: followers forward each registration to the leader over the bridge,
/// and the leader replicates it to both followers.
async fn captured_registrations(rig: &Rig, cluster: &TestCluster, prefix: &str) -> Vec<u8> {
    let capture = rig.capture();
    for node in cluster.node_ids() {
        let (status, _, body) =
            register(cluster, node, &format!("{prefix}-{node}"), "@never").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let file = capture.stop();
    let packets = pcap::packets(&file).unwrap_or_else(|error| panic!("{error}"));
    assert!(
        packets.len() > 20,
        "the capture of the bridge holds {} packets ({} bytes): it missed the traffic",
        packets.len(),
        file.len()
    );
    file
}

/// The packets of a capture that carry `needle`.
fn carrying(file: &[u8], needle: &str) -> Vec<usize> {
    pcap::packets_containing(file, needle.as_bytes()).unwrap_or_else(|error| panic!("{error}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_tls_the_secret_and_the_token_appear_in_no_packet() {
    let Some(rig) = Rig::start(3).await else {
        return;
    };
    // The control: in plain HTTP (`insecure = true`) the same traffic shows both, so the
    // capture sees Raft and API traffic and the search finds what is there.
    let plain = rig.plain_cluster().start().await;
    let file = captured_registrations(&rig, &plain, "plain").await;
    assert!(
        !carrying(&file, TEST_SECRET).is_empty(),
        "no packet of plain Raft traffic carries the secret: the capture missed it"
    );
    assert!(
        !carrying(&file, TEST_TOKEN).is_empty(),
        "no packet carries the token"
    );
    drop(plain);

    let cluster = rig.cluster().start().await;
    assert!(cluster.api_url(1).starts_with("https://"));
    let file = captured_registrations(&rig, &cluster, "tls").await;
    for (what, needle) in [
        ("cluster secret", TEST_SECRET),
        ("access token", TEST_TOKEN),
    ] {
        let packets = carrying(&file, needle);
        assert!(
            packets.is_empty(),
            "the {what} crossed the bridge in clear under TLS, in packets {packets:?}"
        );
    }
}
