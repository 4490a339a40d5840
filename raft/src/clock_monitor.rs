//! Measures every voter's clock once per [`MEASURE_EVERY`] and acts on the verdict (see
//! [`crate::cluster_clock`]).
//!
//! A node whose clock is beyond the bound must not lead: it stops campaigning (openraft's
//! elections are switched off at runtime), and as leader it stops sending heartbeats and
//! refuses client writes and read indexes, which would confirm its leadership with a round of
//! heartbeats ([`ClusterClock::stepping_down`]), so that the followers' election
//! timers run out and one of them takes over. openraft 0.9 has no leadership transfer; going
//! quiet is how a leader hands over. The engine stops intending and publishing on its own
//! once the verdict turns (`ClusterClock::firing_now_ms`).

use std::collections::BTreeMap;

use futures::future::join_all;
use openraft::{RaftMetrics, RaftTypeConfig, ServerState};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, interval};

use crate::cluster_clock::{
    ClusterClock, MEASURE_EVERY, PROBE_TIMEOUT, PeerOffset, Round, Verdict,
};
use crate::{NodeAddr, NodeId, Replica, telemetry};

/// Runs until `stop` turns true.
pub async fn run(replica: Replica, mut stop: watch::Receiver<bool>) {
    let clock = replica.clock().clone();
    let mut rounds = interval(MEASURE_EVERY);
    rounds.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last = Verdict::Unmeasured;
    loop {
        tokio::select! {
            _ = rounds.tick() => {}
            _ = stop.changed() => return,
        }
        // Test builds only (the `fail` crate's `failpoints` feature): a monitor that dies.
        fail::fail_point!("clock-monitor", |_| ());
        let (voters, peers) = voters_and_peers(&replica.raft().metrics().borrow());
        let voters = voters.len();
        if voters == 0 {
            continue;
        }
        if peers.is_empty() {
            clock.alone(Instant::now());
        } else if !clock.record(measure(&replica, voters, peers).await) {
            tracing::warn!(
                "this node's wall clock was stepped while its peers' clocks were measured; \
                 the round is dropped and the next one measures the new offset"
            );
        }
        let verdict = clock.verdict();
        telemetry::record_clock(&clock.offsets(), &verdict);
        act(replica.raft(), &clock, &verdict, &last);
        last = verdict;
    }
}

/// The membership's voters (this node included if it is one), and those other than this node
/// with their addresses.
pub(crate) fn voters_and_peers(
    metrics: &RaftMetrics<NodeId, NodeAddr>,
) -> (Vec<NodeId>, Vec<(NodeId, NodeAddr)>) {
    let membership = metrics.membership_config.membership();
    let voters: Vec<NodeId> = membership.voter_ids().collect();
    let peers = membership
        .nodes()
        .filter(|(id, _)| **id != metrics.id && voters.contains(id))
        .map(|(id, node)| (*id, node.clone()))
        .collect();
    (voters, peers)
}

/// What one peer's status said of its clock.
enum Reading {
    /// Its offset from this node.
    Offset(NodeId, PeerOffset),
    /// It answered without a wall clock: a release from before clock measurement.
    Unclocked,
}

/// One round: every peer asked for its status at once, each answer timed.
async fn measure(replica: &Replica, voters: usize, peers: Vec<(NodeId, NodeAddr)>) -> Round {
    let clock = replica.clock();
    let began = (clock.wall_ms(), Instant::now());
    let probes = peers.into_iter().map(|(id, node)| async move {
        let sent = Instant::now();
        let status = replica.peer_status(id, &node, PROBE_TIMEOUT).await.ok()?;
        let round_trip = sent.elapsed();
        let Some(peer_wall_ms) = status.wall_ms else {
            return Some(Reading::Unclocked);
        };
        // This node's wall clock at the request, read through the monotonic clock so that
        // every probe of the round is measured against the same wall clock.
        let since_began = u64::try_from(sent.duration_since(began.1).as_millis()).unwrap_or(0);
        let sent_wall_ms = began.0.saturating_add(since_began);
        Some(Reading::Offset(
            id,
            PeerOffset::measure(sent_wall_ms, round_trip, peer_wall_ms),
        ))
    });
    let mut offsets = BTreeMap::new();
    let mut unclocked = 0usize;
    for reading in join_all(probes).await.into_iter().flatten() {
        match reading {
            Reading::Offset(id, offset) => {
                offsets.insert(id, offset);
            }
            Reading::Unclocked => unclocked = unclocked.saturating_add(1),
        }
    }
    Round {
        offsets,
        unclocked,
        voters,
        began,
        ended: (clock.wall_ms(), Instant::now()),
    }
}

/// What openraft may do on this node's behalf under a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Switches {
    /// Campaign when its leader goes quiet.
    elect: bool,
    /// Send heartbeats (as leader): a quiet leader hands over.
    heartbeat: bool,
}

/// A clock beyond the bound neither campaigns nor, while leading, keeps its followers' timers
/// from running out; an unmeasured or agreeing one does both.
fn switches(verdict: &Verdict, leading: bool) -> Switches {
    let beyond = matches!(verdict, Verdict::Beyond { .. });
    Switches {
        elect: !beyond,
        heartbeat: !(beyond && leading),
    }
}

/// Whether a node may campaign under `verdict`: also asked before an early campaign
/// ([`crate::leader_loss`]), which openraft starts whatever its election switch says.
pub(crate) fn may_campaign(verdict: &Verdict) -> bool {
    switches(verdict, false).elect
}

/// Switches elections and, while leading, heartbeats off for a clock beyond the bound, and
/// back on once it is within; says so when the verdict changes. Generic over the type
/// configuration so that the deterministic simulation (`sim/`), whose openraft keeps its
/// snapshots in memory, acts on its verdicts the same way.
pub fn act<C>(raft: &openraft::Raft<C>, clock: &ClusterClock, verdict: &Verdict, last: &Verdict)
where
    C: RaftTypeConfig<NodeId = NodeId, Node = NodeAddr>,
{
    let leading = raft.metrics().borrow().state == ServerState::Leader;
    let Switches { elect, heartbeat } = switches(verdict, leading);
    raft.runtime_config().elect(elect);
    raft.runtime_config().heartbeat(heartbeat);
    if verdict == last {
        return;
    }
    let bound_ms = clock.bound().as_millis();
    match verdict {
        Verdict::Beyond {
            agreeing,
            voters,
            median_offset_ms,
        } => tracing::error!(
            agreeing,
            voters,
            median_offset_ms,
            max_clock_offset_ms = bound_ms as u64,
            "this node's clock is {} ms off the majority's, beyond max_clock_offset_ms: it \
             will not campaign, fire ticks or stay leader until its clock is fixed (check \
             NTP on this machine)",
            median_offset_ms.unsigned_abs()
        ),
        Verdict::Within if matches!(last, Verdict::Beyond { .. }) => tracing::warn!(
            "this node's clock is back within max_clock_offset_ms of the majority's: it may \
             campaign and fire ticks again"
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEYOND: Verdict = Verdict::Beyond {
        agreeing: 0,
        voters: 3,
        median_offset_ms: 5_000,
    };

    #[test]
    fn a_clock_beyond_the_bound_neither_campaigns_nor_keeps_leading() {
        for leading in [false, true] {
            let switched = switches(&BEYOND, leading);
            assert!(
                !switched.elect,
                "campaigns beyond the bound (leading: {leading})"
            );
        }
        assert!(
            !switches(&BEYOND, true).heartbeat,
            "a leader beyond it goes quiet"
        );
        // A follower's heartbeat switch is moot, and left on for when it leads again.
        assert!(switches(&BEYOND, false).heartbeat);
    }

    #[test]
    fn a_clock_within_the_bound_or_unmeasured_does_both() {
        for verdict in [Verdict::Within, Verdict::Unmeasured] {
            for leading in [false, true] {
                let everything = Switches {
                    elect: true,
                    heartbeat: true,
                };
                assert_eq!(switches(&verdict, leading), everything, "{verdict:?}");
            }
        }
    }
}
