//! The nemesis: one fault every few seconds, chosen at random from the seed.
//!
//! Faults: SIGKILL of the leader or of a follower (restarted after a pause), SIGSTOP of the
//! leader (continued after a pause), a network partition isolating the leader or a follower
//! (every link from and to it black-holed by the link proxies, then healed), a crash of every
//! node at once (all restarted), and, in RabbitMQ runs, a stop and start of the run's private
//! broker (tickd is let back in once the run's consumers are attached again, see
//! [`GatedBroker`]). Each fault is healed before the next one; the time until the cluster has
//! a leader again is measured.

use std::time::{Duration, Instant};

use crate::chaos::history::{Fault, LeaderRecovery};
use crate::chaos::rng::Rng;
use crate::chaos::time::now_ms;
use crate::rabbit::{GatedBroker, ResilientConsumer};
use crate::{NodeId, TestCluster};

/// How long the nemesis waits for a leader after a fault before it records the fault as one
/// the cluster did not recover from in time (the liveness checker then fails the run).
pub const LEADER_BOUND: Duration = Duration::from_secs(10);

/// The kinds of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL the leader, restart it later.
    KillLeader,
    /// SIGKILL a follower, restart it later.
    KillFollower,
    /// SIGSTOP the leader, SIGCONT it later.
    PauseLeader,
    /// Cut every link of the leader, heal later.
    IsolateLeader,
    /// Cut every link of a follower, heal later.
    IsolateFollower,
    /// SIGKILL every node, restart them all.
    CrashAll,
    /// Stop the private RabbitMQ, start it again.
    BrokerOutage,
}

/// The RabbitMQ side of a run: the broker the nemesis may stop, and the consumers to wait for
/// when it comes back.
pub struct RabbitSide<'a> {
    /// The run's private broker, gated in front of tickd.
    pub broker: &'a mut GatedBroker,
    /// The run's consumers, attached to the broker directly.
    pub consumers: &'a [&'a ResilientConsumer],
}

/// The leader the running nodes agree on, and how long it took to find one.
pub async fn await_leader(cluster: &TestCluster, bound: Duration) -> Option<(NodeId, Duration)> {
    let started = Instant::now();
    while started.elapsed() < bound {
        if let Some(leader) = cluster.leader().await {
            return Some((leader, started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Like [`await_leader`], for a leader other than `old`.
async fn await_new_leader(cluster: &TestCluster, old: NodeId, bound: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < bound {
        if cluster.leader().await.is_some_and(|leader| leader != old) {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// A random node other than `leader`.
fn pick_follower(cluster: &TestCluster, leader: NodeId, rng: &mut Rng) -> NodeId {
    let followers: Vec<NodeId> = cluster
        .node_ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    *rng.pick(&followers)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Injects faults until `until_ms`, healing each before the next. Returns what it did.
pub async fn run(
    cluster: &TestCluster,
    mut rabbit: Option<RabbitSide<'_>>,
    mut rng: Rng,
    until_ms: u64,
) -> Vec<Fault> {
    let mut faults = Vec::new();
    loop {
        let pause = Duration::from_millis(2_000 + rng.below(2_000));
        tokio::time::sleep(pause).await;
        if now_ms() + 8_000 > until_ms {
            return faults;
        }
        let mut kinds = vec![
            FaultKind::KillLeader,
            FaultKind::KillFollower,
            FaultKind::PauseLeader,
            FaultKind::CrashAll,
        ];
        if rabbit.is_some() {
            kinds.push(FaultKind::BrokerOutage);
        }
        if cluster.has_link_proxies() {
            kinds.extend([FaultKind::IsolateLeader, FaultKind::IsolateFollower]);
        }
        let kind = *rng.pick(&kinds);
        let fault = inject(cluster, rabbit.as_mut(), kind, &mut rng).await;
        faults.push(fault);
    }
}

async fn inject(
    cluster: &TestCluster,
    rabbit: Option<&mut RabbitSide<'_>>,
    kind: FaultKind,
    rng: &mut Rng,
) -> Fault {
    let start_ms = now_ms();
    let hold = Duration::from_millis(1_500 + rng.below(2_500));
    let leader = await_leader(cluster, LEADER_BOUND)
        .await
        .map(|(leader, _)| leader);
    let (what, leader) = match (kind, leader) {
        (FaultKind::KillLeader, Some(leader)) => {
            cluster.kill(leader);
            let elected = await_new_leader(cluster, leader, LEADER_BOUND).await;
            tokio::time::sleep(hold).await;
            cluster.restart(leader);
            (format!("kill -9 leader {leader}"), recovery(elected))
        }
        (FaultKind::KillFollower, Some(leader)) => {
            let victim = pick_follower(cluster, leader, rng);
            cluster.kill(victim);
            tokio::time::sleep(hold).await;
            cluster.restart(victim);
            (format!("kill -9 follower {victim}"), LeaderRecovery::Kept)
        }
        (FaultKind::PauseLeader, Some(leader)) => {
            cluster.stop(leader);
            let elected = await_new_leader(cluster, leader, LEADER_BOUND).await;
            tokio::time::sleep(hold).await;
            cluster.cont(leader);
            (
                format!("SIGSTOP leader {leader} for {} ms", millis(hold)),
                recovery(elected),
            )
        }
        (FaultKind::IsolateLeader, Some(leader)) => {
            cluster.isolate(leader);
            let elected = await_new_leader(cluster, leader, LEADER_BOUND).await;
            tokio::time::sleep(hold).await;
            cluster.heal_links();
            (
                format!(
                    "partition isolating leader {leader} for {} ms",
                    millis(hold)
                ),
                recovery(elected),
            )
        }
        (FaultKind::IsolateFollower, Some(leader)) => {
            let victim = pick_follower(cluster, leader, rng);
            cluster.isolate(victim);
            tokio::time::sleep(hold).await;
            cluster.heal_links();
            (
                format!(
                    "partition isolating follower {victim} for {} ms",
                    millis(hold)
                ),
                LeaderRecovery::Kept,
            )
        }
        (FaultKind::BrokerOutage, _) => match rabbit {
            Some(rabbit) => {
                // The outage runs from the stop to the moment tickd is let in again, which
                // includes the broker's own shutdown and start-up (seconds on a busy machine).
                let down_at = Instant::now();
                rabbit.broker.stop();
                tokio::time::sleep(hold).await;
                rabbit.broker.restart_then_open(rabbit.consumers).await;
                (
                    format!("RabbitMQ down for {} ms", millis(down_at.elapsed())),
                    LeaderRecovery::Kept,
                )
            }
            None => (
                "no fault (no private broker)".to_string(),
                LeaderRecovery::Kept,
            ),
        },
        (FaultKind::CrashAll, _) | (_, None) => {
            cluster.kill_all();
            tokio::time::sleep(Duration::from_millis(500)).await;
            cluster.restart_all();
            let elected = await_leader(cluster, LEADER_BOUND)
                .await
                .map(|(_, took)| took);
            ("crash of every node".to_string(), recovery(elected))
        }
    };
    Fault {
        what,
        start_ms,
        healed_ms: now_ms(),
        leader,
    }
}

/// A lost leader's recovery: elected after the time waited, or not within [`LEADER_BOUND`].
fn recovery(elected: Option<Duration>) -> LeaderRecovery {
    match elected {
        Some(took) => LeaderRecovery::Elected {
            after_ms: millis(took),
        },
        None => LeaderRecovery::NotWithin {
            bound_ms: millis(LEADER_BOUND),
        },
    }
}
