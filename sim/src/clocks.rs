//! The nodes' clocks: each node's wall clock is true time plus an offset the nemesis steps or
//! drifts, read by the real [`ClusterClock`] through its wall-clock seam; once per
//! [`MEASURE_EVERY`] a node measures every voter's clock across the simulated network, as
//! production's clock monitor does over HTTP (`raft/src/clock_monitor.rs`), records the
//! round, and acts on the verdict with the monitor's own [`act`]: a node beyond the bound
//! stops campaigning and, leading, stops its heartbeats, so that another takes over.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::join_all;
use openraft::Raft;
use tickd_raft::NodeId;
use tickd_raft::clock_monitor::act;
use tickd_raft::cluster_clock::{
    ClusterClock, MEASURE_EVERY, PROBE_TIMEOUT, PeerOffset, Round, Verdict,
};
use tickd_raft::wall_clock::WallClock;
use tokio::time::Instant;

use crate::network::exchange;
use crate::runtime::SimConfig;
use crate::world::{EPOCH_MS, World};

/// `max_clock_offset_ms` of the simulated nodes: production's default.
pub const BOUND: Duration = tickd_raft::cluster_clock::DEFAULT_MAX_CLOCK_OFFSET;

/// A node's cluster clock on its virtual wall clock. The clock holds the world weakly: the
/// world holds the running nodes, and with them their clocks.
pub fn cluster_clock(world: &Arc<World>, node: NodeId) -> ClusterClock {
    let world: Weak<World> = Arc::downgrade(world);
    ClusterClock::with_wall_clock(
        BOUND,
        WallClock::new(move || {
            world
                .upgrade()
                .map_or(EPOCH_MS, |world| world.wall_ms(node))
        }),
    )
}

/// Measures the voters' clocks once per [`MEASURE_EVERY`] and acts on each verdict, until
/// the incarnation ends.
pub async fn monitor(
    world: Arc<World>,
    me: (NodeId, u64),
    raft: Raft<SimConfig>,
    clock: ClusterClock,
) {
    let mut last = Verdict::Unmeasured;
    while world.is_running(me.0, me.1) {
        tokio::time::sleep(MEASURE_EVERY).await;
        let voters: Vec<NodeId> = raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect();
        if voters.is_empty() {
            continue;
        }
        let peers: Vec<NodeId> = voters.iter().copied().filter(|id| *id != me.0).collect();
        if peers.is_empty() {
            clock.alone(Instant::now());
        } else {
            let round = measure(&world, me, &clock, voters.len(), peers).await;
            let _kept = clock.record(round);
        }
        let verdict = clock.verdict();
        if verdict != last {
            world.record(format_args!("node {} clock {verdict:?}", me.0));
        }
        act(&raft, &clock, &verdict, &last);
        last = verdict;
    }
}

/// One round: every peer asked for its wall clock at once, each answer timed.
async fn measure(
    world: &Arc<World>,
    me: (NodeId, u64),
    clock: &ClusterClock,
    voters: usize,
    peers: Vec<NodeId>,
) -> Round {
    let began = (clock.wall_ms(), Instant::now());
    let probes = peers.into_iter().map(|peer| async move {
        let sent = Instant::now();
        let read = |node: crate::world::Running| async move { Ok::<u64, ()>(node.clock.wall_ms()) };
        let peer_wall_ms = exchange(world, me, peer, PROBE_TIMEOUT, read).await.ok()?;
        let since_began = u64::try_from(sent.duration_since(began.1).as_millis()).unwrap_or(0);
        let sent_wall_ms = began.0.saturating_add(since_began);
        Some((
            peer,
            PeerOffset::measure(sent_wall_ms, sent.elapsed(), peer_wall_ms),
        ))
    });
    let offsets: BTreeMap<NodeId, PeerOffset> =
        join_all(probes).await.into_iter().flatten().collect();
    Round {
        offsets,
        unclocked: 0,
        voters,
        began,
        ended: (clock.wall_ms(), Instant::now()),
    }
}
