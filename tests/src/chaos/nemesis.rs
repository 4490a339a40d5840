//! The nemesis: one fault every few seconds, chosen at random from the seed.
//!
//! Faults: SIGKILL of the leader or of a follower (restarted after a pause), a power loss of
//! the leader, of a follower or of every node (SIGKILL, then every write its disk had not
//! fsynced is dropped, see [`PowerCluster::lose_power`]; restarted on what is left), SIGSTOP
//! of the leader (continued after a pause), a network partition isolating the leader or a
//! follower (every link from and to it black-holed by the link proxies, then healed), a crash
//! of every node at once (all restarted), and, in RabbitMQ runs, a stop and start of the run's
//! private broker (tickd is let back in once the run's consumers are attached again, see
//! [`GatedBroker`]). Each fault is healed before the next one; the time until the cluster has
//! a leader again is measured.

use std::time::{Duration, Instant};

use crate::chaos::history::{Fault, LeaderRecovery};
use crate::chaos::rng::Rng;
use crate::chaos::time::now_ms;
use crate::power::PowerCluster;
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
    /// Cut the power of the leader (one time in three), of a follower (one in three) or of
    /// every node (one in three): SIGKILL, then drop what the disks had not fsynced; restart
    /// later.
    PowerLoss,
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
    /// Step the leader's wall clock 5 s or an hour, ahead or back; set it right later.
    ClockSkew,
}

/// The steps of [`FaultKind::ClockSkew`], in seconds: past the bound (250 ms by default) by a
/// little and by a lot, either way.
const CLOCK_STEPS: [i64; 4] = [5, -5, 3_600, -3_600];

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

/// What a power loss dropped, for a fault's description.
/// The nodes with a live process (running or stopped): those whose power can be cut.
pub fn live_nodes(cluster: &TestCluster) -> Vec<NodeId> {
    cluster
        .node_ids()
        .into_iter()
        .filter(|&node| cluster.pid(node).is_some())
        .collect()
}

/// Injects faults until `until_ms`, healing each before the next. Returns what it did.
///
/// The order of the kinds is part of what a seed replays: the suite's short profile relies on
/// its seed drawing a [`FaultKind::PowerLoss`] early (`tests/tests/chaos.rs` asserts it did).
pub async fn run(
    power: &PowerCluster,
    mut rabbit: Option<RabbitSide<'_>>,
    mut rng: Rng,
    until_ms: u64,
) -> Vec<Fault> {
    let cluster: &TestCluster = power;
    let mut faults = Vec::new();
    loop {
        let pause = Duration::from_millis(2_000 + rng.below(2_000));
        tokio::time::sleep(pause).await;
        if now_ms() + 8_000 > until_ms {
            return faults;
        }
        let mut kinds = vec![
            FaultKind::KillLeader,
            FaultKind::PowerLoss,
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
        if cluster.has_skewable_clocks() {
            kinds.push(FaultKind::ClockSkew);
        }
        let kind = *rng.pick(&kinds);
        let fault = inject(power, rabbit.as_mut(), kind, &mut rng).await;
        faults.push(fault);
    }
}

async fn inject(
    power: &PowerCluster,
    rabbit: Option<&mut RabbitSide<'_>>,
    kind: FaultKind,
    rng: &mut Rng,
) -> Fault {
    let cluster: &TestCluster = power;
    let start_ms = now_ms();
    let hold = Duration::from_millis(1_500 + rng.below(2_500));
    let leader = await_leader(cluster, LEADER_BOUND)
        .await
        .map(|(leader, _)| leader);
    let (kind, what, leader) = match (kind, leader) {
        (FaultKind::KillLeader, Some(leader)) => {
            cluster.kill(leader);
            let elected = await_new_leader(cluster, leader, LEADER_BOUND).await;
            tokio::time::sleep(hold).await;
            cluster.restart(leader);
            (kind, format!("kill -9 leader {leader}"), recovery(elected))
        }
        (FaultKind::PowerLoss, Some(leader)) => match rng.below(3) {
            0 => {
                let loss = power.lose_power_of(&live_nodes(cluster));
                tokio::time::sleep(Duration::from_millis(500)).await;
                cluster.restart_all();
                let elected = await_leader(cluster, LEADER_BOUND)
                    .await
                    .map(|(_, took)| took);
                (
                    kind,
                    format!("power loss of every node ({loss})"),
                    recovery(elected),
                )
            }
            1 => {
                let loss = power.lose_power(leader);
                let elected = await_new_leader(cluster, leader, LEADER_BOUND).await;
                tokio::time::sleep(hold).await;
                cluster.restart(leader);
                (
                    kind,
                    format!("power loss of leader {leader} ({loss})"),
                    recovery(elected),
                )
            }
            _ => {
                let victim = pick_follower(cluster, leader, rng);
                let loss = power.lose_power(victim);
                tokio::time::sleep(hold).await;
                cluster.restart(victim);
                (
                    kind,
                    format!("power loss of follower {victim} ({loss})"),
                    LeaderRecovery::Kept,
                )
            }
        },
        (FaultKind::KillFollower, Some(leader)) => {
            let victim = pick_follower(cluster, leader, rng);
            cluster.kill(victim);
            tokio::time::sleep(hold).await;
            cluster.restart(victim);
            (
                kind,
                format!("kill -9 follower {victim}"),
                LeaderRecovery::Kept,
            )
        }
        (FaultKind::PauseLeader, Some(leader)) => {
            cluster.stop(leader);
            let elected = await_new_leader(cluster, leader, LEADER_BOUND).await;
            tokio::time::sleep(hold).await;
            cluster.cont(leader);
            (
                kind,
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
                kind,
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
                kind,
                format!(
                    "partition isolating follower {victim} for {} ms",
                    millis(hold)
                ),
                LeaderRecovery::Kept,
            )
        }
        (FaultKind::ClockSkew, Some(leader)) => {
            let seconds = *rng.pick(&CLOCK_STEPS);
            cluster.set_clock_offset(leader, seconds);
            // It measures the step within a second, stops firing and hands over.
            let elected = await_new_leader(cluster, leader, LEADER_BOUND).await;
            tokio::time::sleep(hold).await;
            cluster.set_clock_offset(leader, 0);
            (
                kind,
                format!(
                    "clock of leader {leader} stepped {seconds:+} s for {} ms",
                    millis(hold)
                ),
                recovery(elected),
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
                    kind,
                    format!("RabbitMQ down for {} ms", millis(down_at.elapsed())),
                    LeaderRecovery::Kept,
                )
            }
            None => (
                kind,
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
            (
                FaultKind::CrashAll,
                "crash of every node".to_string(),
                recovery(elected),
            )
        }
    };
    Fault {
        kind,
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
