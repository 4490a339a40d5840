//! Tick statistics: what became of each clock's ticks (delivered, filed late, coalesced,
//! dropped; the last delivery and how late the recent ones were), and the cluster's deliveries
//! over the last minutes. The dashboard shows them; scripts read them from the API.
//!
//! They are part of the replicated state, kept by apply from what the commands carry: a pop
//! names its queue and its instant, a confirmation names the ticks and when the leader handed
//! each to the broker, an intent knows which of its ticks are late or coalesced. So every node
//! answers the same, and the figures survive failovers and restarts. Their size is fixed
//! whatever the traffic: one [`ClockStats`] per clock (counters, one [`Delivery`] and the last
//! [`RECENT_TICKS`] latenesses, 72 bytes, allocated by the first tick that records anything:
//! see [`StatsSlot`]) and one [`DeliverySeries`] of
//! [`SERIES_BUCKETS`] buckets for the whole cluster.
//!
//! A tick's lateness is the time from its instant to its delivery: for a RabbitMQ clock, to
//! the leader handing it to the broker; for an http clock, to the pop that returned it (a
//! poller that polls every minute sees up to a minute of lateness, which is its own).
//!
//! Kept from cluster level 2 ([`crate::Level::keeps_tick_stats`]): v0.1.0 replicas keep none,
//! and replicas of one cluster keep the same state.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// How many of a clock's latest latenesses its statistics keep.
pub const RECENT_TICKS: usize = 8;

/// The width of one bucket of the cluster's [`DeliverySeries`]: 10 seconds.
pub const SERIES_BUCKET_MS: u64 = 10_000;

/// How many buckets the series keeps: 90 of 10 seconds, the last 15 minutes.
pub const SERIES_BUCKETS: usize = 90;

/// One delivered tick, as a clock's statistics remember its last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The tick's instant (its `scheduled_at`), in milliseconds since the epoch.
    pub due_at_ms: u64,
    /// How long after its instant it was delivered (handed to the broker, or returned by a
    /// pop), in milliseconds; a lateness beyond `u32::MAX` (49 days) is kept as that.
    pub lateness_ms: u32,
    /// Whether it was a manual tick.
    pub manual: bool,
}

impl Delivery {
    /// The tick due at `due_at_ms` delivered at `delivered_at_ms` (never before its instant;
    /// an earlier stamp, from a clock behind the proposer's, counts as on time).
    pub fn of(due_at_ms: u64, delivered_at_ms: u64, manual: bool) -> Delivery {
        let lateness = delivered_at_ms.saturating_sub(due_at_ms);
        Delivery {
            due_at_ms,
            lateness_ms: u32::try_from(lateness).unwrap_or(u32::MAX),
            manual,
        }
    }

    /// When it was delivered.
    pub fn delivered_at_ms(&self) -> u64 {
        self.due_at_ms.saturating_add(u64::from(self.lateness_ms))
    }
}

/// The latenesses of a clock's last [`RECENT_TICKS`] delivered ticks, in milliseconds, in a
/// fixed array of 16-bit values (18 bytes per clock, no allocation): a lateness beyond
/// 65 535 ms is kept as 65 535. Serialized as a list, oldest first; a longer list loads as its
/// last [`RECENT_TICKS`], and larger values load as 65 535.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
#[serde(from = "Vec<u64>", into = "Vec<u16>")]
pub struct RecentLateness {
    /// A ring: `len` values, the oldest at `(next + RECENT_TICKS - len) % RECENT_TICKS`.
    values: [u16; RECENT_TICKS],
    len: u8,
    next: u8,
}

impl RecentLateness {
    /// Remembers one lateness, forgetting the oldest when full.
    pub fn push(&mut self, lateness_ms: u64) {
        let slot = usize::from(self.next);
        self.values[slot] = u16::try_from(lateness_ms).unwrap_or(u16::MAX);
        self.next = u8::try_from((slot + 1) % RECENT_TICKS).unwrap_or(0);
        if usize::from(self.len) < RECENT_TICKS {
            self.len = self.len.saturating_add(1);
        }
    }

    /// The remembered latenesses, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        let len = usize::from(self.len);
        let first = (usize::from(self.next) + RECENT_TICKS - len) % RECENT_TICKS;
        (0..len).map(move |offset| self.values[(first + offset) % RECENT_TICKS])
    }

    /// Whether no lateness is remembered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Two rings are equal when they hold the same latenesses in the same order, wherever in the
/// array they start (a ring loaded from a snapshot starts at the beginning).
impl PartialEq for RecentLateness {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for RecentLateness {}

impl From<Vec<u64>> for RecentLateness {
    fn from(values: Vec<u64>) -> Self {
        let mut recent = RecentLateness::default();
        let skip = values.len().saturating_sub(RECENT_TICKS);
        for value in values.into_iter().skip(skip) {
            recent.push(value);
        }
        recent
    }
}

impl From<RecentLateness> for Vec<u16> {
    fn from(recent: RecentLateness) -> Self {
        recent.iter().collect()
    }
}

/// What became of one clock's ticks since it was registered (or since its cluster reached
/// level 2). 72 bytes: the counters saturate at `u32::MAX` (136 years of a one-second clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClockStats {
    /// Ticks delivered: confirmed by the broker, or returned by a pop (a retried pop counts
    /// once).
    pub delivered: u32,
    /// Scheduled ticks filed after their instant: a leader change, a stall or an outage
    /// delayed them.
    pub late: u32,
    /// Missed ticks older than the catch-up window, folded into a later tick.
    pub coalesced: u32,
    /// Ticks dropped from the clock's full http queue (`http_queue_limit`).
    pub dropped: u32,
    /// Ticks that took more than one attempt (a webhook receiver that failed, then took it).
    #[serde(skip_serializing_if = "is_zero")]
    pub retried: u32,
    /// Failed attempts of settled ticks: an error status, no answer, no connection.
    #[serde(skip_serializing_if = "is_zero")]
    pub failed: u32,
    /// Ticks given up: a webhook tick refused by its receiver or not taken within the retry
    /// time; a leased tick handed out `max_deliveries` times without an ack.
    #[serde(skip_serializing_if = "is_zero")]
    pub given_up: u32,
    /// Hand-outs by leases of a tick whose earlier lease ran out without an ack (a tick's first
    /// hand-out counts as its delivery).
    #[serde(skip_serializing_if = "is_zero")]
    pub redelivered: u32,
    /// Leased ticks acked.
    #[serde(skip_serializing_if = "is_zero")]
    pub acked: u32,
    /// Instants skipped by overlap control (SPEC §5a).
    #[serde(skip_serializing_if = "is_zero")]
    pub skipped: u32,
    /// The last delivered tick.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<Delivery>,
    /// How late the last few delivered ticks were.
    #[serde(skip_serializing_if = "RecentLateness::is_empty")]
    pub recent: RecentLateness,
}

impl ClockStats {
    /// Records one delivered tick.
    pub fn delivered(&mut self, delivery: Delivery) {
        add(&mut self.delivered, 1);
        self.recent.push(u64::from(delivery.lateness_ms));
        self.last = Some(delivery);
    }

    /// Adds to the counts of late, coalesced and dropped ticks.
    pub fn missed(&mut self, late: u64, coalesced: u64, dropped: u64) {
        add(&mut self.late, late);
        add(&mut self.coalesced, coalesced);
        add(&mut self.dropped, dropped);
    }

    /// Records the attempts of one settled tick: `attempts` in all, the last of which
    /// delivered it unless it was `given_up`.
    pub fn attempted(&mut self, attempts: u32, given_up: bool) {
        let failed = if given_up {
            attempts
        } else {
            attempts.saturating_sub(1)
        };
        add(&mut self.failed, u64::from(failed));
        add(&mut self.retried, u64::from(attempts > 1));
        add(&mut self.given_up, u64::from(given_up));
    }

    /// Counts a lease's redeliveries and the ticks it gave up (its first deliveries are
    /// counted as [`delivered`](Self::delivered)).
    pub fn leased(&mut self, again: u64, given_up: u64) {
        add(&mut self.redelivered, again);
        add(&mut self.given_up, given_up);
    }

    /// Counts acked leased ticks.
    pub fn acked(&mut self, count: u64) {
        add(&mut self.acked, count);
    }

    /// Counts instants skipped by overlap control.
    pub fn skipped(&mut self, count: u64) {
        add(&mut self.skipped, count);
    }

    /// Whether nothing has been recorded (such statistics are left out of a snapshot).
    pub fn is_empty(&self) -> bool {
        *self == ClockStats::default()
    }
}

/// Whether a counter is zero: left out of the serialized form, which stays as releases
/// without it wrote it.
fn is_zero(counter: &u32) -> bool {
    *counter == 0
}

/// A clock's statistics as the registry keeps them: nothing until the first tick that records
/// something. Most clocks of a large cluster are hourly or daily and sit idle between ticks;
/// a [`ClockStats`] of zeros inline in each of them would be a tenth of an idle clock's memory,
/// where an empty slot is one pointer. Serialized exactly as [`ClockStats`], so snapshots do
/// not change; a slot holds statistics only when they are not empty, so two slots are equal
/// exactly when their statistics are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsSlot(Option<Box<ClockStats>>);

impl StatsSlot {
    /// The statistics (zeros while nothing was recorded).
    pub fn get(&self) -> ClockStats {
        self.0.as_deref().copied().unwrap_or_default()
    }

    /// Whether nothing has been recorded (such statistics are left out of a snapshot).
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Records one delivered tick.
    pub fn delivered(&mut self, delivery: Delivery) {
        self.0.get_or_insert_with(Box::default).delivered(delivery);
    }

    /// Adds to the counts of late, coalesced and dropped ticks; nothing to add keeps an empty
    /// slot empty.
    pub fn missed(&mut self, late: u64, coalesced: u64, dropped: u64) {
        if late == 0 && coalesced == 0 && dropped == 0 {
            return;
        }
        self.0
            .get_or_insert_with(Box::default)
            .missed(late, coalesced, dropped);
    }
}

impl StatsSlot {
    /// Records the attempts of one settled tick (see [`ClockStats::attempted`]); a tick
    /// delivered at its first attempt keeps an empty slot empty.
    pub fn attempted(&mut self, attempts: u32, given_up: bool) {
        if attempts <= 1 && !given_up {
            return;
        }
        self.0
            .get_or_insert_with(Box::default)
            .attempted(attempts, given_up);
    }
}

impl StatsSlot {
    /// Counts a lease's redeliveries and given-up ticks (see [`ClockStats::leased`]); none
    /// keeps an empty slot empty.
    pub fn leased(&mut self, again: u64, given_up: u64) {
        if again == 0 && given_up == 0 {
            return;
        }
        self.0
            .get_or_insert_with(Box::default)
            .leased(again, given_up);
    }

    /// Counts acked leased ticks; none keeps an empty slot empty.
    pub fn acked(&mut self, count: u64) {
        if count == 0 {
            return;
        }
        self.0.get_or_insert_with(Box::default).acked(count);
    }

    /// Counts instants skipped by overlap control; none keeps an empty slot empty.
    pub fn skipped(&mut self, count: u64) {
        if count == 0 {
            return;
        }
        self.0.get_or_insert_with(Box::default).skipped(count);
    }
}

impl From<ClockStats> for StatsSlot {
    fn from(stats: ClockStats) -> Self {
        StatsSlot((!stats.is_empty()).then(|| Box::new(stats)))
    }
}

impl Serialize for StatsSlot {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for StatsSlot {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ClockStats::deserialize(deserializer).map(StatsSlot::from)
    }
}

/// Adds `count` to a saturating counter.
fn add(counter: &mut u32, count: u64) {
    *counter = counter.saturating_add(u32::try_from(count).unwrap_or(u32::MAX));
}

/// What happened to the cluster's ticks during one [`SERIES_BUCKET_MS`] window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SeriesBucket {
    /// The window's start, in milliseconds since the epoch (a multiple of the width).
    pub start_ms: u64,
    /// Ticks delivered in the window.
    pub delivered: u64,
    /// The sum of their latenesses, for the mean.
    pub lateness_sum_ms: u64,
    /// The largest of their latenesses.
    pub lateness_max_ms: u64,
    /// Scheduled ticks filed late by the intents of the window.
    pub late: u64,
    /// Missed ticks coalesced in the window.
    pub coalesced: u64,
    /// Ticks dropped from full http queues in the window.
    pub dropped: u64,
}

/// The cluster's deliveries over the last [`SERIES_BUCKETS`] × [`SERIES_BUCKET_MS`], one
/// bucket per window that saw anything, oldest first. Windows are placed by the instants the
/// commands carry (a pop's, a confirmation's, an intent's), so every replica fills the same
/// buckets; an event older than the oldest bucket kept is not recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<SeriesBucket>", into = "Vec<SeriesBucket>")]
pub struct DeliverySeries {
    buckets: VecDeque<SeriesBucket>,
}

impl DeliverySeries {
    /// The bucket of the window holding `at_ms`, created if needed; `None` when that window
    /// is older than every window the series keeps.
    pub fn at(&mut self, at_ms: u64) -> Option<&mut SeriesBucket> {
        let start_ms = at_ms - at_ms % SERIES_BUCKET_MS;
        let window = SERIES_BUCKET_MS.saturating_mul(SERIES_BUCKETS as u64);
        let newest = self
            .buckets
            .back()
            .map_or(start_ms, |b| b.start_ms.max(start_ms));
        if start_ms.saturating_add(window) <= newest {
            return None;
        }
        let position = match self.buckets.binary_search_by_key(&start_ms, |b| b.start_ms) {
            Ok(position) => position,
            Err(position) => {
                let bucket = SeriesBucket {
                    start_ms,
                    ..SeriesBucket::default()
                };
                self.buckets.insert(position, bucket);
                position
            }
        };
        // Windows that fell out of the last SERIES_BUCKETS leave, oldest first.
        let mut removed = 0;
        while self
            .buckets
            .front()
            .is_some_and(|b| b.start_ms.saturating_add(window) <= newest)
            || self.buckets.len() > SERIES_BUCKETS
        {
            self.buckets.pop_front();
            removed += 1;
        }
        self.buckets.get_mut(position.checked_sub(removed)?)
    }

    /// Records one delivered tick `lateness_ms` late, at `delivered_at_ms`.
    pub fn delivered(&mut self, delivered_at_ms: u64, lateness_ms: u64) {
        if let Some(bucket) = self.at(delivered_at_ms) {
            bucket.delivered = bucket.delivered.saturating_add(1);
            bucket.lateness_sum_ms = bucket.lateness_sum_ms.saturating_add(lateness_ms);
            bucket.lateness_max_ms = bucket.lateness_max_ms.max(lateness_ms);
        }
    }

    /// The buckets kept, oldest first.
    pub fn buckets(&self) -> impl Iterator<Item = &SeriesBucket> {
        self.buckets.iter()
    }
}

impl From<Vec<SeriesBucket>> for DeliverySeries {
    /// Loads buckets in any order, aligned and deduplicated: a restored or hand-made document
    /// cannot break the series' order or size.
    fn from(buckets: Vec<SeriesBucket>) -> Self {
        let mut series = DeliverySeries::default();
        for loaded in buckets {
            if let Some(bucket) = series.at(loaded.start_ms) {
                let start_ms = bucket.start_ms;
                *bucket = SeriesBucket { start_ms, ..loaded };
            }
        }
        series
    }
}

impl From<DeliverySeries> for Vec<SeriesBucket> {
    fn from(series: DeliverySeries) -> Self {
        series.buckets.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_lateness_keeps_the_last_few_oldest_first() {
        let mut recent = RecentLateness::default();
        assert!(recent.is_empty());
        for lateness in 1..=10 {
            recent.push(lateness);
        }
        assert_eq!(
            recent.iter().collect::<Vec<_>>(),
            vec![3, 4, 5, 6, 7, 8, 9, 10]
        );
        recent.push(u64::MAX);
        assert_eq!(recent.iter().last(), Some(u16::MAX));
        let loaded = RecentLateness::from((0..20).collect::<Vec<u64>>());
        assert_eq!(
            loaded.iter().collect::<Vec<_>>(),
            (12..20).collect::<Vec<_>>()
        );
        let round_trip: Vec<u16> = RecentLateness::from(vec![5, 6]).into();
        assert_eq!(round_trip, vec![5, 6]);
        // A full ring equals its reloaded self, wherever its oldest value sits.
        let saved: Vec<u16> = recent.into();
        let reloaded = RecentLateness::from(saved.into_iter().map(u64::from).collect::<Vec<_>>());
        assert_eq!(reloaded, recent);
        assert_ne!(reloaded, RecentLateness::from(vec![1, 2]));
        assert_eq!(
            RecentLateness::from(vec![1 << 40])
                .iter()
                .collect::<Vec<_>>(),
            vec![u16::MAX],
            "a loaded value beyond the range is kept as its largest"
        );
    }

    #[test]
    fn a_delivery_counts_and_is_remembered_with_its_lateness() {
        let mut stats = ClockStats::default();
        assert!(stats.is_empty());
        let delivery = Delivery::of(10_000, 10_250, false);
        assert_eq!(delivery.lateness_ms, 250);
        assert_eq!(delivery.delivered_at_ms(), 10_250);
        stats.delivered(delivery);
        assert_eq!(stats.delivered, 1);
        assert_eq!(stats.last, Some(delivery));
        assert_eq!(stats.recent.iter().collect::<Vec<_>>(), vec![250]);
        assert_eq!(Delivery::of(20_000, 19_000, true).lateness_ms, 0);
        assert_eq!(Delivery::of(0, u64::MAX, false).lateness_ms, u32::MAX);
        stats.missed(u64::MAX, 2, 3);
        assert_eq!(
            (stats.late, stats.coalesced, stats.dropped),
            (u32::MAX, 2, 3)
        );
        stats.missed(1, 0, 0);
        assert_eq!(stats.late, u32::MAX, "counters saturate");
    }

    #[test]
    fn a_clocks_statistics_stay_small() {
        // Every clock carries a slot: at a million clocks each byte here is a megabyte per node.
        // 72 bytes until overlap control's count took the last 8 (four webhook, lease and
        // overlap counters are zero for most clocks: boxing them apart is the next saving).
        assert!(size_of::<ClockStats>() <= 80);
        assert_eq!(size_of::<StatsSlot>(), size_of::<usize>());
    }

    #[test]
    fn a_settled_ticks_attempts_count_its_failures_retries_and_give_up() {
        let mut slot = StatsSlot::default();
        slot.attempted(1, false);
        assert!(
            slot.is_empty(),
            "a first-attempt delivery records nothing more"
        );
        slot.attempted(3, false);
        slot.attempted(2, true);
        slot.attempted(1, true);
        let stats = slot.get();
        assert_eq!(
            (stats.retried, stats.failed, stats.given_up),
            (2, 2 + 2 + 1, 2),
            "retried: ticks of more than one attempt; failed: every attempt that did not \
             deliver; given up: ticks"
        );
        let json = serde_json::to_value(ClockStats::default()).expect("serializes");
        assert!(
            json.get("retried").is_none() && json.get("given_up").is_none(),
            "zero counters are written as releases without them wrote statistics: {json}"
        );
    }

    #[test]
    fn a_slot_holds_statistics_only_once_something_was_recorded() -> Result<(), serde_json::Error> {
        let mut slot = StatsSlot::default();
        slot.missed(0, 0, 0);
        assert!(slot.is_empty(), "nothing to add allocates nothing");
        assert_eq!(slot, StatsSlot::from(ClockStats::default()));
        assert_eq!(
            serde_json::to_value(&slot)?,
            serde_json::to_value(ClockStats::default())?
        );

        let delivery = Delivery::of(10_000, 10_250, false);
        let mut expected = ClockStats::default();
        expected.delivered(delivery);
        expected.missed(1, 2, 3);
        slot.delivered(delivery);
        slot.missed(1, 2, 3);
        assert!(!slot.is_empty());
        assert_eq!(slot.get(), expected);
        // Serialized exactly as the statistics it holds, and loaded back equal.
        let json = serde_json::to_value(&slot)?;
        assert_eq!(json, serde_json::to_value(expected)?);
        assert_eq!(serde_json::from_value::<StatsSlot>(json)?, slot);
        let empty: StatsSlot = serde_json::from_value(serde_json::json!({}))?;
        assert!(empty.is_empty(), "empty statistics load as an empty slot");
        Ok(())
    }

    #[test]
    fn the_series_keeps_the_last_fifteen_minutes_in_order() {
        let mut series = DeliverySeries::default();
        series.delivered(1_000_005, 5);
        series.delivered(1_000_009, 100);
        series.delivered(1_020_000, 7);
        // Skew: a delivery stamped in an earlier, empty window goes in its place.
        series.delivered(1_010_001, 1);
        let starts: Vec<u64> = series.buckets().map(|b| b.start_ms).collect();
        assert_eq!(starts, vec![1_000_000, 1_010_000, 1_020_000]);
        let first = series.buckets().next().copied().unwrap_or_default();
        assert_eq!(
            (
                first.delivered,
                first.lateness_sum_ms,
                first.lateness_max_ms
            ),
            (2, 105, 100)
        );
        // Fifteen minutes later the first windows have left, and older events are ignored.
        let later = 1_000_000 + SERIES_BUCKET_MS * SERIES_BUCKETS as u64;
        series.delivered(later + 1, 3);
        let starts: Vec<u64> = series.buckets().map(|b| b.start_ms).collect();
        assert_eq!(starts, vec![1_010_000, 1_020_000, later]);
        series.delivered(1_000_001, 3);
        assert_eq!(series.buckets().count(), 3);
        // However many windows pass, at most SERIES_BUCKETS are kept.
        for window in 0..500u64 {
            series.delivered(later + window * SERIES_BUCKET_MS, 1);
        }
        assert_eq!(series.buckets().count(), SERIES_BUCKETS);
    }

    #[test]
    fn a_loaded_series_is_put_in_order_and_trimmed() {
        let bucket = |start_ms: u64, delivered: u64| SeriesBucket {
            start_ms,
            delivered,
            ..SeriesBucket::default()
        };
        let loaded = DeliverySeries::from(vec![
            bucket(30_000, 3),
            bucket(10_005, 1),
            bucket(10_000, 2),
            bucket(5_000_000, 9),
        ]);
        let kept: Vec<(u64, u64)> = loaded
            .buckets()
            .map(|b| (b.start_ms, b.delivered))
            .collect();
        // The window of 5 000 000 leaves everything older than fifteen minutes before it.
        assert_eq!(kept, vec![(5_000_000, 9)]);
        let loaded = DeliverySeries::from(vec![bucket(30_000, 3), bucket(10_005, 1)]);
        let kept: Vec<(u64, u64)> = loaded
            .buckets()
            .map(|b| (b.start_ms, b.delivered))
            .collect();
        assert_eq!(kept, vec![(10_000, 1), (30_000, 3)]);
    }
}
