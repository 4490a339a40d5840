//! The nemesis of a simulated run: one fault at a time, each drawn from the seed, held for a
//! drawn time and healed — crashes (one node, the leader, every node at once) with unsynced
//! writes lost, partitions both ways and one way, a lossy network that also duplicates, delays
//! and so reorders messages, a broker that refuses or confirms late, and a node's wall clock
//! stepped or drifting, within `max_clock_offset_ms` and beyond it.

use std::sync::Arc;
use std::time::Duration;

use tickd_raft::NodeId;
use tickd_tests::chaos::history::Violation;
use tickd_tests::chaos::rng::Rng;
use tokio::time::Instant;

use crate::broker::BrokerWeather;
use crate::cluster::Cluster;
use crate::log_store::lock;
use crate::world::{Weather, World};

/// The kinds of fault, in the order the seed draws them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One node, the leader half the time, loses power and restarts later.
    Crash,
    /// Every node loses power at once and restarts.
    CrashAll,
    /// One node is cut off both ways.
    Isolate,
    /// One node can receive but not send.
    Mute,
    /// Messages are lost, duplicated and delayed on every link.
    Lossy,
    /// The broker refuses every publish.
    BrokerDown,
    /// The broker confirms late.
    BrokerSlow,
    /// One node's wall clock is stepped, within `max_clock_offset_ms` or beyond it, and set
    /// right after the hold.
    ClockStep,
    /// One node's wall clock runs fast or slow, until it drifted within or beyond the bound,
    /// and is set right after the hold.
    ClockDrift,
}

const KINDS: [Kind; 9] = [
    Kind::Crash,
    Kind::CrashAll,
    Kind::Isolate,
    Kind::Mute,
    Kind::Lossy,
    Kind::BrokerDown,
    Kind::BrokerSlow,
    Kind::ClockStep,
    Kind::ClockDrift,
];

/// The steps of a clock, in ms: within the bound (250 ms), and beyond it as an NTP step or a
/// wrong time zone would be.
const CLOCK_STEPS: [i64; 6] = [120, -120, 5_000, -5_000, 3_600_000, -3_600_000];
/// How often a drifting clock moves.
const DRIFT_EVERY: Duration = Duration::from_millis(100);

/// The current leader, as the running nodes report it.
pub fn leader(world: &World) -> Option<NodeId> {
    lock(&world.running).iter().find_map(|(id, running)| {
        let metrics = running.raft.metrics();
        let leads = metrics.borrow().state == openraft::ServerState::Leader;
        leads.then_some(*id)
    })
}

/// Injects faults until `until`, then heals everything. Returns how many it injected.
pub async fn run(world: Arc<World>, cluster: Arc<Cluster>, mut rng: Rng, until: Instant) -> u64 {
    let ids = cluster.ids();
    let mut injected = 0u64;
    loop {
        tokio::time::sleep(Duration::from_millis(500 + rng.below(2_500))).await;
        let held = Duration::from_millis(200 + rng.below(4_800));
        if Instant::now() + held >= until {
            break;
        }
        let kind = *rng.pick(&KINDS);
        let victim = match leader(&world) {
            Some(leader) if rng.below(2) == 0 => leader,
            _ => *rng.pick(&ids),
        };
        injected = injected.saturating_add(1);
        world.record(format_args!("fault {kind:?} node {victim} for {held:?}"));
        match kind {
            Kind::Crash => {
                cluster.crash(victim);
                tokio::time::sleep(held).await;
                restart(&world, &cluster, victim).await;
            }
            Kind::CrashAll => {
                for id in &ids {
                    cluster.crash(*id);
                }
                tokio::time::sleep(held.min(Duration::from_secs(2))).await;
                for id in &ids {
                    restart(&world, &cluster, *id).await;
                }
            }
            Kind::Isolate | Kind::Mute => {
                {
                    let mut network = lock(&world.network);
                    for other in ids.iter().filter(|other| **other != victim) {
                        network.weather.cut.insert((victim, *other));
                        if kind == Kind::Isolate {
                            network.weather.cut.insert((*other, victim));
                        }
                    }
                }
                tokio::time::sleep(held).await;
                lock(&world.network).weather.cut.clear();
            }
            Kind::Lossy => {
                lock(&world.network).weather = Weather {
                    loss_per_mille: 50 + rng.below(350),
                    duplicate_per_mille: rng.below(100),
                    extra_delay_ms: rng.below(60),
                    cut: Default::default(),
                };
                tokio::time::sleep(held).await;
                lock(&world.network).weather = Weather::default();
            }
            Kind::ClockStep => {
                let step = *rng.pick(&CLOCK_STEPS);
                world.record(format_args!("node {victim} clock stepped by {step} ms"));
                set_offset(&world, victim, step);
                tokio::time::sleep(held).await;
                set_offset(&world, victim, 0);
            }
            Kind::ClockDrift => {
                // 10 to 500 ms per second, either way: past the bound within the hold, or not.
                let per_step = i64::try_from(1 + rng.below(50)).unwrap_or(1);
                let per_step = if rng.below(2) == 0 {
                    per_step
                } else {
                    -per_step
                };
                let mut offset = 0i64;
                let until = Instant::now() + held;
                while Instant::now() < until {
                    tokio::time::sleep(DRIFT_EVERY).await;
                    offset = offset.saturating_add(per_step);
                    set_offset(&world, victim, offset);
                }
                world.record(format_args!("node {victim} clock drifted to {offset} ms"));
                set_offset(&world, victim, 0);
            }
            Kind::BrokerDown | Kind::BrokerSlow => {
                lock(&world.broker).weather = BrokerWeather {
                    refusing: kind == Kind::BrokerDown,
                    stall_ms: if kind == Kind::BrokerSlow {
                        200 + rng.below(2_800)
                    } else {
                        0
                    },
                };
                tokio::time::sleep(held).await;
                lock(&world.broker).weather = BrokerWeather::default();
            }
        }
        world.record(format_args!("healed {kind:?}"));
    }
    injected
}

fn set_offset(world: &World, node: NodeId, offset_ms: i64) {
    lock(&world.offsets).insert(node, offset_ms);
}

/// Starts `node` again; a node that cannot is a violation.
pub async fn restart(world: &World, cluster: &Cluster, node: NodeId) {
    if let Err(why) = cluster.start(node).await {
        world.record(format_args!("node {node} failed to restart: {why}"));
        lock(&world.violations).push(Violation {
            checker: "restart",
            detail: format!("node {node} did not restart from its disk: {why}"),
        });
    }
}
