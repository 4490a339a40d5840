//! The cluster's clock: this node's wall clock corrected to the majority's, and whether this
//! node's own clock agrees with the majority closely enough to fire ticks.
//!
//! On one machine every node shares one wall clock; across machines they disagree, and NTP
//! steps them. A leader that trusted its own clock would publish every tick early when its
//! clock runs ahead (SPEC §3: never before the instant). So every node measures, once per
//! [`MEASURE_EVERY`], the offset of every voter's clock from its own, the way NTP does: it
//! asks the peer's status (which carries the peer's wall clock), and takes the peer's reading
//! minus the midpoint of the round trip, with half the round trip as the error.
//!
//! From one round of measurements (its own clock counting as offset 0):
//!
//! * the **verdict**: this node's clock is *within* the bound (`max_clock_offset_ms`) when a
//!   majority of voters, itself included, read within the bound of it (each allowed its
//!   measurement error); *beyond* when they do not. A node beyond the bound does not campaign,
//!   and as leader stops intending and publishing and steps down (see the engine);
//! * the **majority's time**: this node's reading plus the median offset. At least a majority
//!   of clocks read at or past the median, so a tick published when the majority's time, less
//!   the median's error, has reached its instant is never early by the majority's clock.
//!
//! The majority's time is anchored on the monotonic clock at each round and advanced by it in
//! between: a step of this node's wall clock moves nothing until the next round measures it,
//! and then every offset has moved by the step the other way, so the majority's time is the
//! same. A round during which the wall clock moved differently from the monotonic clock (by
//! more than [`STEP_TOLERANCE`]) mixes two clocks and is dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::wall_clock::WallClock;
use crate::{NodeAddr, NodeId};
use openraft::RaftTypeConfig;

/// Default of `max_clock_offset_ms`.
pub const DEFAULT_MAX_CLOCK_OFFSET: Duration = Duration::from_millis(250);
/// How often every voter's clock is measured.
pub const MEASURE_EVERY: Duration = Duration::from_secs(1);
/// The longest one measurement may take; a slower answer says little about the peer's clock.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(800);
/// How much the wall clock may drift from the monotonic clock during one round before the
/// round counts as spanning a step of the wall clock.
pub const STEP_TOLERANCE: Duration = Duration::from_millis(50);

/// A peer's clock minus this node's, as last measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerOffset {
    /// The peer's reading minus this node's, in milliseconds.
    pub offset_ms: i64,
    /// Half the round trip of the measurement: the true offset is within this of `offset_ms`.
    pub uncertainty_ms: u64,
}

impl PeerOffset {
    /// The offset of a peer that read `peer_wall_ms` while this node's clock went from
    /// `sent_wall_ms` (at the request) through a round trip of `round_trip`.
    pub fn measure(sent_wall_ms: u64, round_trip: Duration, peer_wall_ms: u64) -> Self {
        let round_trip_ms = u64::try_from(round_trip.as_millis()).unwrap_or(u64::MAX);
        let midpoint = i128::from(sent_wall_ms) + i128::from(round_trip_ms / 2);
        let offset = i128::from(peer_wall_ms) - midpoint;
        Self {
            offset_ms: i64::try_from(offset).unwrap_or(if offset < 0 {
                i64::MIN
            } else {
                i64::MAX
            }),
            // Rounding to whole milliseconds costs up to one more.
            uncertainty_ms: round_trip_ms.div_ceil(2).saturating_add(1),
        }
    }

    /// Whether the peer's clock may be within `bound` of this node's.
    fn agrees(&self, bound_ms: u64) -> bool {
        self.offset_ms
            .unsigned_abs()
            .saturating_sub(self.uncertainty_ms)
            <= bound_ms
    }
}

/// Whether this node's clock may be trusted to fire ticks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Verdict {
    /// No round has measured enough voters yet.
    Unmeasured,
    /// A majority of voters, this node included, read within the bound of this node.
    Within,
    /// Fewer than a majority do.
    Beyond {
        /// Voters within the bound, this node included.
        agreeing: usize,
        /// Voters in the membership.
        voters: usize,
        /// The median offset of the voters from this node: how far off this node is.
        median_offset_ms: i64,
    },
}

/// What one round of measurements concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Conclusion {
    verdict: Verdict,
    /// The majority's time minus this node's reading; `None` when too few were measured.
    correction: Option<PeerOffset>,
}

/// Concludes a round: `offsets` of the voters other than this node that answered, and
/// `unclocked` more that answered without a clock (see [`Round::unclocked`]), out of `voters`
/// voters in all (this node among them).
fn conclude(
    offsets: &BTreeMap<NodeId, PeerOffset>,
    unclocked: usize,
    voters: usize,
    bound_ms: u64,
) -> Conclusion {
    let majority = voters / 2 + 1;
    if offsets.len().saturating_add(unclocked).saturating_add(1) < majority {
        return Conclusion {
            verdict: Verdict::Unmeasured,
            correction: None,
        };
    }
    let at_this_node = PeerOffset {
        offset_ms: 0,
        uncertainty_ms: 0,
    };
    let mut readings: Vec<PeerOffset> = offsets.values().copied().collect();
    readings.extend(std::iter::repeat_n(
        at_this_node,
        unclocked.saturating_add(1),
    ));
    readings.sort_by_key(|reading| reading.offset_ms);
    // The lower median: with an even count, the earlier of the two middle clocks.
    let median = readings[(readings.len() - 1) / 2];
    let agreeing = offsets
        .values()
        .filter(|offset| offset.agrees(bound_ms))
        .count()
        .saturating_add(unclocked)
        .saturating_add(1);
    let verdict = if agreeing >= majority {
        Verdict::Within
    } else {
        Verdict::Beyond {
            agreeing,
            voters,
            median_offset_ms: median.offset_ms,
        }
    };
    Conclusion {
        verdict,
        correction: Some(median),
    }
}

/// The majority's time at a monotonic instant.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    at: Instant,
    majority_ms: u64,
    uncertainty_ms: u64,
}

#[derive(Debug)]
struct Readings {
    offsets: BTreeMap<NodeId, PeerOffset>,
    verdict: Verdict,
    anchor: Option<Anchor>,
}

/// This node's view of the cluster's clocks, shared by the monitor that measures them and by
/// everything that reads the time: the engine, the pop route, the status views.
#[derive(Debug, Clone)]
pub struct ClusterClock {
    bound: Duration,
    wall: WallClock,
    readings: Arc<RwLock<Readings>>,
}

/// A round of measurements, as the monitor took it.
#[derive(Debug, Clone)]
pub struct Round {
    /// The voters' offsets from this node (only those that answered).
    pub offsets: BTreeMap<NodeId, PeerOffset>,
    /// Voters that answered without a wall clock reading: they run a release from before
    /// clock measurement (v0.1.0), which fires by its own clock. Each counts as agreeing with
    /// this node at offset 0: during a rolling upgrade the guarantee is the old release's, and
    /// a new node that leads beside old ones still fires (unmeasured, it would fire nothing).
    pub unclocked: usize,
    /// How many voters the membership has, this node among them.
    pub voters: usize,
    /// This node's wall clock and the monotonic clock when the round began and ended.
    pub began: (u64, Instant),
    /// See `began`.
    pub ended: (u64, Instant),
}

impl ClusterClock {
    /// A clock that tolerates `bound` between this node and the majority, on the host's wall
    /// clock.
    pub fn new(bound: Duration) -> Self {
        Self::with_wall_clock(bound, WallClock::host())
    }

    /// [`Self::new`] on the wall clock `wall`.
    pub fn with_wall_clock(bound: Duration, wall: WallClock) -> Self {
        Self {
            bound,
            wall,
            readings: Arc::new(RwLock::new(Readings {
                offsets: BTreeMap::new(),
                verdict: Verdict::Unmeasured,
                anchor: None,
            })),
        }
    }

    /// The tolerated offset (`max_clock_offset_ms`).
    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// This node's own wall clock, uncorrected: what a round of measurements is taken against.
    pub fn wall_ms(&self) -> u64 {
        self.wall.now_ms()
    }

    /// Takes in a round of measurements. Returns `false` (and changes nothing) when the wall
    /// clock was stepped during it.
    pub fn record(&self, round: Round) -> bool {
        let wall = i128::from(round.ended.0) - i128::from(round.began.0);
        let monotonic = i128::try_from(round.ended.1.duration_since(round.began.1).as_millis())
            .unwrap_or(i128::MAX);
        let tolerance = i128::try_from(STEP_TOLERANCE.as_millis()).unwrap_or(i128::MAX);
        if (wall - monotonic).abs() > tolerance {
            return false;
        }
        let bound_ms = u64::try_from(self.bound.as_millis()).unwrap_or(u64::MAX);
        let conclusion = conclude(&round.offsets, round.unclocked, round.voters, bound_ms);
        let mut readings = self.write();
        readings.offsets = round.offsets;
        readings.verdict = conclusion.verdict;
        if let Some(correction) = conclusion.correction {
            // The offsets were measured against the wall clock as it read when the round
            // began, advanced by the monotonic clock: the majority's time is that same reading
            // at the round's end plus the median. The wall clock's own reading at the end
            // would carry whatever it moved beyond the monotonic clock during the round (a
            // step under the tolerance, a fast drift), and ticks would go out that much early.
            let majority = i128::from(round.began.0) + monotonic + i128::from(correction.offset_ms);
            readings.anchor = Some(Anchor {
                at: round.ended.1,
                majority_ms: u64::try_from(majority.max(0)).unwrap_or(u64::MAX),
                uncertainty_ms: correction.uncertainty_ms,
            });
        }
        true
    }

    /// The majority's time now, in milliseconds since the Unix epoch: this node's wall clock
    /// until a round has measured the majority.
    pub fn now_ms(&self) -> u64 {
        self.majority_now()
            .map_or_else(|| self.wall.now_ms(), |(now, _)| now)
    }

    /// The earliest the majority's time may be now: what a tick's instant is compared with
    /// before it is handed to a poller.
    pub fn earliest_now_ms(&self) -> u64 {
        self.majority_now().map_or_else(
            || self.wall.now_ms(),
            |(now, uncertainty)| now.saturating_sub(uncertainty),
        )
    }

    /// The latest the majority's time may be now: where a lease's deadline is counted from,
    /// so that judged by [`Self::earliest_now_ms`] anywhere it lasts at least its visibility
    /// time by the majority's clock.
    pub fn latest_now_ms(&self) -> u64 {
        self.majority_now().map_or_else(
            || self.wall.now_ms(),
            |(now, uncertainty)| now.saturating_add(uncertainty),
        )
    }

    /// [`Self::earliest_now_ms`] for the leader's duties: what intents are stamped with and
    /// what a tick's instant is compared with before it is published. `Err` when this node's
    /// clock may not fire ticks.
    pub fn firing_now_ms(&self) -> Result<u64, Verdict> {
        match self.verdict() {
            Verdict::Within => Ok(self.earliest_now_ms()),
            refused => Err(refused),
        }
    }

    /// Why this node refuses client writes: it leads with a clock beyond the bound and is
    /// handing over (see `crate::clock_monitor`). `None` when it does not lead or its clock
    /// is within the bound.
    pub fn stepping_down<C>(&self, raft: &openraft::Raft<C>) -> Option<String>
    where
        C: RaftTypeConfig<NodeId = NodeId, Node = NodeAddr>,
    {
        let leading = raft.metrics().borrow().state == openraft::ServerState::Leader;
        match self.verdict() {
            Verdict::Beyond {
                median_offset_ms, ..
            } if leading => Some(format!(
                "the leader's clock is {} ms off the majority's, beyond max_clock_offset_ms \
                 ({} ms): it is stepping down",
                median_offset_ms.unsigned_abs(),
                self.bound.as_millis()
            )),
            _ => None,
        }
    }

    /// The last round's verdict on this node's clock.
    pub fn verdict(&self) -> Verdict {
        self.read().verdict.clone()
    }

    /// The voters' offsets from this node, as last measured.
    pub fn offsets(&self) -> BTreeMap<NodeId, PeerOffset> {
        self.read().offsets.clone()
    }

    /// A single-voter cluster: its own clock is the majority's.
    pub fn alone(&self, at: Instant) {
        let now = self.wall.now_ms();
        self.record(Round {
            offsets: BTreeMap::new(),
            unclocked: 0,
            voters: 1,
            began: (now, at),
            ended: (now, at),
        });
    }

    fn majority_now(&self) -> Option<(u64, u64)> {
        let anchor = self.read().anchor?;
        let elapsed =
            u64::try_from(Instant::now().duration_since(anchor.at).as_millis()).unwrap_or(u64::MAX);
        Some((
            anchor.majority_ms.saturating_add(elapsed),
            anchor.uncertainty_ms,
        ))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Readings> {
        self.readings
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Readings> {
        self.readings
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset(offset_ms: i64, uncertainty_ms: u64) -> PeerOffset {
        PeerOffset {
            offset_ms,
            uncertainty_ms,
        }
    }

    fn offsets(values: &[(NodeId, i64)]) -> BTreeMap<NodeId, PeerOffset> {
        values.iter().map(|&(id, ms)| (id, offset(ms, 1))).collect()
    }

    #[test]
    fn a_measurement_takes_the_midpoint_of_the_round_trip() {
        // Sent at 1 000, answered 40 ms later; the peer read 1 520 at the midpoint (1 020).
        let measured = PeerOffset::measure(1_000, Duration::from_millis(40), 1_520);
        assert_eq!(measured, offset(500, 21));
        let behind = PeerOffset::measure(10_000, Duration::from_millis(2), 4_000);
        assert_eq!(behind.offset_ms, -6_001);
    }

    #[test]
    fn a_node_ahead_of_both_peers_is_beyond_and_its_correction_is_their_time() {
        // This node runs 5 s ahead: both peers read 5 s behind it.
        let conclusion = conclude(&offsets(&[(2, -5_000), (3, -5_002)]), 0, 3, 250);
        assert_eq!(
            conclusion.verdict,
            Verdict::Beyond {
                agreeing: 1,
                voters: 3,
                median_offset_ms: -5_000
            }
        );
        assert_eq!(conclusion.correction.map(|c| c.offset_ms), Some(-5_000));
    }

    #[test]
    fn a_node_with_one_skewed_peer_is_within_and_ignores_that_peer() {
        let conclusion = conclude(&offsets(&[(2, 5_000), (3, 3)]), 0, 3, 250);
        assert_eq!(conclusion.verdict, Verdict::Within);
        assert_eq!(conclusion.correction.map(|c| c.offset_ms), Some(3));
    }

    #[test]
    fn the_error_of_a_measurement_counts_for_the_peer() {
        let near = [(2, offset(300, 60)), (3, offset(-300, 60))]
            .into_iter()
            .collect();
        assert_eq!(conclude(&near, 0, 3, 250).verdict, Verdict::Within);
        let far = [(2, offset(300, 10)), (3, offset(-300, 10))]
            .into_iter()
            .collect();
        assert!(matches!(
            conclude(&far, 0, 3, 250).verdict,
            Verdict::Beyond { .. }
        ));
    }

    #[test]
    fn too_few_answers_leave_the_clock_unmeasured() {
        let conclusion = conclude(&BTreeMap::new(), 0, 3, 250);
        assert_eq!(conclusion.verdict, Verdict::Unmeasured);
        assert_eq!(conclusion.correction, None);
        // One peer of two answered: with this node, a majority of three.
        assert_eq!(
            conclude(&offsets(&[(2, 10)]), 0, 3, 250).verdict,
            Verdict::Within
        );
        // Five voters need three: one answer is not enough.
        assert_eq!(
            conclude(&offsets(&[(2, 10)]), 0, 5, 250).verdict,
            Verdict::Unmeasured
        );
    }

    #[test]
    fn voters_of_a_release_without_clocks_count_as_agreeing_with_this_node() {
        // A new node beside two v0.1.0 nodes: measured, within, and its own clock is the
        // majority's (the old release's guarantee), so that it fires when it leads.
        let conclusion = conclude(&BTreeMap::new(), 2, 3, 250);
        assert_eq!(conclusion.verdict, Verdict::Within);
        assert_eq!(
            conclusion.correction.map(|median| median.offset_ms),
            Some(0)
        );
        // They do not outvote two measured clocks that disagree with this one.
        let far = offsets(&[(2, 5_000), (3, 5_002)]);
        assert!(matches!(
            conclude(&far, 1, 5, 250).verdict,
            Verdict::Beyond {
                agreeing: 2,
                voters: 5,
                ..
            }
        ));
    }

    fn round(
        offsets: BTreeMap<NodeId, PeerOffset>,
        began: (u64, Instant),
        ended: (u64, Instant),
    ) -> Round {
        Round {
            offsets,
            unclocked: 0,
            voters: 3,
            began,
            ended,
        }
    }

    #[test]
    fn a_measurement_beyond_an_i64_of_milliseconds_saturates_on_its_own_side() {
        let ahead = PeerOffset::measure(0, Duration::ZERO, u64::MAX);
        assert_eq!(ahead.offset_ms, i64::MAX);
        let behind = PeerOffset::measure(u64::MAX, Duration::ZERO, 0);
        assert_eq!(behind.offset_ms, i64::MIN);
    }

    #[test]
    fn an_even_count_of_readings_takes_the_lower_median() {
        // This node (0) and three peers: 0, 100, 200, 300; the lower of the middle two.
        let four = offsets(&[(2, 100), (3, 200), (4, 300)]);
        let conclusion = conclude(&four, 0, 4, 250);
        assert_eq!(conclusion.correction, Some(offset(100, 1)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_is_dropped_only_when_the_wall_clock_strayed_beyond_the_tolerance() {
        let clock = ClusterClock::new(Duration::from_millis(250));
        let start = Instant::now();
        let level = || offsets(&[(2, 0), (3, 0)]);
        let tolerance = u64::try_from(STEP_TOLERANCE.as_millis()).expect("a small tolerance");
        // A slow round, 300 ms on both clocks: nothing strayed.
        let slow = start + Duration::from_millis(300);
        assert!(clock.record(round(level(), (1_000, start), (1_300, slow))));
        // The wall clock ran ahead of the monotonic one by exactly the tolerance, then by 1 ms
        // more.
        let ended = (1_300 + tolerance, slow);
        assert!(clock.record(round(level(), (1_300, slow), ended)));
        let ended = (1_300 + tolerance + 1, slow);
        assert!(!clock.record(round(level(), (1_300, slow), ended)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_majoritys_time_follows_the_monotonic_clock_between_rounds() {
        let clock = ClusterClock::new(Duration::from_millis(250));
        let start = Instant::now();
        // This node reads 100 000 while both peers read 5 s less.
        let behind = offsets(&[(2, -5_000), (3, -5_000)]);
        assert!(clock.record(round(behind, (100_000, start), (100_000, start))));
        tokio::time::advance(Duration::from_millis(700)).await;
        assert_eq!(clock.now_ms(), 95_700);
        assert!(matches!(clock.firing_now_ms(), Err(Verdict::Beyond { .. })));

        let agreeing = offsets(&[(2, 40), (3, -10)]);
        let now = Instant::now();
        assert!(clock.record(round(agreeing, (200_000, now), (200_000, now))));
        // The median is this node's own clock (offset 0, no error).
        assert_eq!(clock.firing_now_ms(), Ok(200_000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wall_clock_that_moves_within_the_tolerance_during_a_round_moves_no_tick_early() {
        // Found by the deterministic simulation (a leader's clock drifting fast): the offsets
        // are measured against the wall clock as it read at the round's start; anchored on
        // its reading at the end, the majority's time carried the 40 ms it ran ahead during
        // the round, and ticks went out up to that much early.
        let clock = ClusterClock::new(Duration::from_millis(250));
        let start = Instant::now();
        let level = offsets(&[(2, 0), (3, 0)]);
        let ended = start + Duration::from_millis(10);
        assert!(clock.record(round(level, (1_000_000, start), (1_000_050, ended))));
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(
            clock.now_ms(),
            1_000_010,
            "the majority read 1 000 000 at the start, and 10 ms passed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_of_the_wall_clock_moves_neither_the_majoritys_time_nor_a_round() {
        let clock = ClusterClock::new(Duration::from_millis(250));
        let start = Instant::now();
        let level = offsets(&[(2, 0), (3, 0)]);
        assert!(clock.record(round(level, (1_000_000, start), (1_000_000, start))));
        tokio::time::advance(Duration::from_secs(1)).await;
        let at = Instant::now();
        let hour = 3_600_000;
        // The wall clock jumped an hour ahead during the round: the round is dropped.
        let stepped = round(
            offsets(&[(2, -hour), (3, -hour)]),
            (1_001_000, at),
            (1_001_000 + hour as u64, at + Duration::from_millis(10)),
        );
        assert!(!clock.record(stepped));
        assert_eq!(clock.verdict(), Verdict::Within);
        assert_eq!(clock.now_ms(), 1_001_000);
        // The next round measures the step: the majority's time stays, the verdict turns.
        let after = round(
            offsets(&[(2, -hour), (3, -hour)]),
            (1_001_000 + hour as u64, at),
            (1_001_000 + hour as u64, at),
        );
        assert!(clock.record(after));
        assert_eq!(clock.now_ms(), 1_001_000);
        assert!(matches!(clock.verdict(), Verdict::Beyond { .. }));
    }
}
