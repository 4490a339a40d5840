//! The tick ledger: which ticks the cluster has committed to deliver, and which of them are
//! still undelivered. It is part of the replicated state, so a new leader knows exactly what
//! its predecessor promised.
//!
//! # How a scheduled tick travels
//!
//! 1. The leader proposes [`Intent`]s a little ahead of time. Applying one moves the global
//!    watermark `intended_through` forward and files every tick of every active clock that
//!    falls due in the window: in the [`outbox`](TickLedger::outbox) for RabbitMQ clocks, in
//!    the clock's replicated queue for http clocks.
//! 2. For RabbitMQ, the leader publishes each outbox tick at its instant and, once the broker
//!    confirms it, proposes a `Confirm` that removes it. Whatever is still in the outbox after
//!    a failover is published again by the new leader, with the same [`TickId`].
//! 3. For http, a poll pops the due ticks out of the queue through one Raft write, so each
//!    tick reaches exactly one poller.
//!
//! # Late and missed ticks
//!
//! Ticks that fell due while no leader could commit are filed by the next intent. Those less
//! than the catch-up window late are filed one by one (each with its own id); older ones of a
//! clock are coalesced into one tick, the newest of them, so a long outage never ends in a
//! burst. Both are counted. The same window bounds the outbox while the broker is away: every
//! intent coalesces each clock's overdue outbox ticks into the newest, so at most
//! catch-up / interval + 1 scheduled ticks per clock wait for the broker.
//!
//! # Bounds
//!
//! Applying a command never does more work, nor files more ticks, than the registry's size
//! and the intent window allow, whatever the command holds (a leader's bug, a crafted backup):
//!
//! - An intent reaches at most [`MAX_LOOKAHEAD_MS`] past its own `now_ms`, and its catch-up
//!   window is at most [`MAX_CATCH_UP_MS`]; so one intent files at most
//!   (catch-up + look-ahead) / interval + 2 ticks per active clock.
//! - An http queue keeps at most the queue limit of the latest intent (`http_queue_limit`,
//!   [`DEFAULT_QUEUE_LIMIT`] before the first intent), manual ticks included: a queue over it
//!   drops its oldest tick, counted as dropped.
//! - A pop returns at most [`MAX_POP_TICKS`] ticks, the oldest; the rest wait for the next pop.
//!   The pop's replay record keeps each returned tick's id, instant and kind, not the whole
//!   tick (the clock's name and schedule are read from the clock again).
//! - Manual tick sequence numbers stop at [`MAX_MANUAL_SEQUENCE`]: a manual tick beyond it is
//!   refused, never an overflow.

use std::collections::{BTreeMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::clock::{Clock, ClockId, QueueId};
use crate::leases::{AckedReceipts, QueueLeases};
use crate::level::Level;
use crate::retries::RecentRequests;
use crate::schedule::Schedule;
use crate::shared_map::{self, SharedMap};
use crate::stats::{Delivery, DeliverySeries, StatsSlot};

/// The furthest past its own `now_ms` an intent reaches; a later `through_ms` is clamped to
/// it. The leader intends 600 ms ahead (`engine::decisions::LOOKAHEAD`); the rest is margin
/// for clock skew between the nodes. It also bounds a restored backup's watermark: a backup
/// cannot have intended ticks further ahead than this of the restoring cluster's clock.
pub const MAX_LOOKAHEAD_MS: u64 = 60_000;

/// The longest catch-up window an intent uses; a larger `catch_up_ms` (the `catch_up_ms` of
/// the cluster file) is clamped to it, so that one intent files at most an hour of missed
/// ticks one by one per clock (3 600 for a one-second clock) and coalesces the rest.
pub const MAX_CATCH_UP_MS: u64 = 60 * 60 * 1_000;

/// How much older than the catch-up window an outbox tick in flight may grow before it is
/// coalesced anyway ([`Intent::in_flight_from_ms`]): far beyond the broker's confirmation
/// timeout and a confirmation's commit, so that only a leader whose confirmations stopped
/// committing reaches it.
pub const MAX_IN_FLIGHT_SPARED_MS: u64 = 60_000;

/// The queue limit in force before the first intent tells the ledger the configured one
/// (`http_queue_limit`, whose default is the same 1 000).
pub const DEFAULT_QUEUE_LIMIT: u64 = 1_000;

/// The most ticks one pop returns: the oldest due ones; the rest stay in the queue for the
/// next pop. With the default queue limit a full queue drains in ten pops.
pub const MAX_POP_TICKS: usize = 100;

/// How many of a queue's pops before its last one a retry still gets back (from level 3,
/// [`crate::Level::earlier_pops_kept`]), newest first, and only while together they hold at
/// most [`MAX_POP_TICKS`] ticks. A node retries a pop whose answer it lost for up to 5 s, and
/// several pollers of one queue pop in between: with only the last pop remembered, the retry
/// popped afresh and the first attempt's ticks reached nobody, though the poller was answered.
pub const EARLIER_POPS_KEPT: usize = 16;

/// The highest manual tick sequence number: 2^53, the largest integer every JSON reader
/// keeps exactly. A million manual ticks a second would take 285 years to reach it; a backup
/// that claims more is refused, and a manual tick beyond it is refused, never an overflow.
pub const MAX_MANUAL_SEQUENCE: u64 = 1 << 53;

/// The deterministic identity of one tick: the clock and the instant for a scheduled tick,
/// the clock and a sequence number for a manual one. Every delivery of a tick, by any leader,
/// carries the same id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TickId(String);

impl TickId {
    /// The id of the scheduled tick of `clock` at `instant_ms`.
    pub fn scheduled(clock: &ClockId, instant_ms: u64) -> Self {
        TickId(format!("{clock}-{instant_ms}"))
    }

    /// The id of the `sequence`-th manual tick of the cluster, delivered to `clock`.
    pub fn manual(clock: &ClockId, sequence: u64) -> Self {
        TickId(format!("{clock}-m{sequence}"))
    }

    /// The least id of all, to start a range of outbox keys at an instant.
    pub(crate) fn lowest() -> Self {
        TickId(String::new())
    }

    /// The id as it appears in messages.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TickId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One tick committed for delivery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick {
    /// The tick's identity.
    pub id: TickId,
    /// The clock it belongs to.
    pub clock: ClockId,
    /// The clock's name, for the message.
    pub name: String,
    /// The clock's schedule, for the message.
    pub schedule: Schedule,
    /// The instant the tick is due, in milliseconds since the Unix epoch. It is never
    /// delivered before it.
    pub due_at_ms: u64,
    /// Whether the tick comes from the `tick` action rather than the schedule.
    pub manual: bool,
    /// How many of the clock's instants before this one, since its previous delivered tick,
    /// were coalesced into it or dropped from its full queue (SPEC §5): a consumer sees every
    /// gap from the ticks alone. Fixed once the tick is filed, except that an older tick
    /// dropped or coalesced later adds its own count and itself; counted from cluster level 3
    /// ([`crate::Level::counts_skipped`]). Absent from the serialized form while 0, as
    /// releases without it wrote ticks.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub skipped: u32,
}

/// Whether a count is zero: left out of the serialized form.
fn is_zero_u32(count: &u32) -> bool {
    *count == 0
}

/// A tick as clients receive it (SPEC §5): a JSON object with at least `schedule`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TickMessage {
    /// The clock's schedule, exactly as registered. Ticktok compat: the one field Ticktok's
    /// clients read.
    pub schedule: String,
    /// The clock id.
    pub clock: String,
    /// The clock name.
    pub name: String,
    /// The tick's deterministic id.
    pub tick_id: String,
    /// When the tick was due, RFC 3339 UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub scheduled_at: String,
    /// Whether it came from the `tick` action.
    pub manual: bool,
    /// How many of the clock's instants since its previous delivered tick were coalesced,
    /// dropped or skipped (0 when none).
    pub skipped: u32,
}

impl Tick {
    /// The tick of `clock`'s schedule due at `instant_ms`: its id is derived from the two, so
    /// every filing and every delivery of that instant carries the same one.
    pub fn scheduled(clock: &ClockId, name: &str, schedule: &Schedule, instant_ms: u64) -> Tick {
        Tick {
            id: TickId::scheduled(clock, instant_ms),
            clock: clock.clone(),
            name: name.to_owned(),
            schedule: schedule.clone(),
            due_at_ms: instant_ms,
            manual: false,
            skipped: 0,
        }
    }

    /// Adds to this tick the instants of `gone`, a tick of the same clock dropped or
    /// coalesced before delivery: `gone` itself and what it had absorbed.
    pub(crate) fn absorb(&mut self, gone: &Tick) {
        self.skipped = self.skipped.saturating_add(1).saturating_add(gone.skipped);
    }

    /// The message delivered to clients.
    pub fn message(&self) -> TickMessage {
        TickMessage {
            schedule: self.schedule.to_string(),
            clock: self.clock.to_string(),
            name: self.name.clone(),
            tick_id: self.id.to_string(),
            scheduled_at: rfc3339_millis(self.due_at_ms),
            manual: self.manual,
            skipped: self.skipped,
        }
    }

    /// How long the broker may hold a scheduled tick before dropping it: until the clock's
    /// next instant, less 1 ms (one interval minus 1 ms for `every.<N>.<unit>`), so a queue
    /// holds at most one scheduled tick of a clock (SPEC §5). `None` for a manual tick, and
    /// for the last tick of a schedule (an `@at`), which do not expire.
    pub fn expiry_ms(&self) -> Option<u64> {
        if self.manual {
            return None;
        }
        self.schedule
            .next_instant_after(self.due_at_ms)
            .map(|next| (next - self.due_at_ms).saturating_sub(1).max(1))
    }
}

/// Formats milliseconds since the epoch as RFC 3339 UTC with milliseconds.
pub fn rfc3339_millis(unix_ms: u64) -> String {
    let millis = i64::try_from(unix_ms).unwrap_or(i64::MAX);
    match chrono::DateTime::from_timestamp_millis(millis) {
        Some(instant) => instant.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => "9999-12-31T23:59:59.999Z".to_string(),
    }
}

/// A leader's intent to fire every tick due up to `through_ms`, stamped by the leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The end of the window (inclusive), in milliseconds since the epoch.
    pub through_ms: u64,
    /// The leader's clock when it proposed the intent.
    pub now_ms: u64,
    /// Ticks more than this late are coalesced.
    pub catch_up_ms: u64,
    /// The most ticks an http queue keeps; older ones are dropped. The ledger remembers it
    /// for the manual ticks filed until the next intent.
    pub queue_limit: u64,
    /// The instant of the oldest outbox tick the leader may have handed to its consumers
    /// and not yet seen removed (published and unconfirmed, or inherited from a previous
    /// leader): no outbox tick from it on is coalesced, since a consumer may hold it and a
    /// tick it holds must not be counted as skipped. Honoured from cluster level 3
    /// ([`crate::Level::counts_skipped`]) and never further back than
    /// [`MAX_IN_FLIGHT_SPARED_MS`] before the catch-up window, so that a confirmation that never
    /// commits cannot stop the outbox's bound. Absent when nothing is in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_from_ms: Option<u64>,
}

impl Intent {
    /// The intent as applied: `through_ms` at most [`MAX_LOOKAHEAD_MS`] after `now_ms`, the
    /// catch-up window at most [`MAX_CATCH_UP_MS`] and the queue limit at least 1, so that
    /// applying it files a bounded number of ticks whatever the command holds.
    pub fn bounded(&self) -> Intent {
        Intent {
            through_ms: self
                .through_ms
                .min(self.now_ms.saturating_add(MAX_LOOKAHEAD_MS)),
            now_ms: self.now_ms,
            catch_up_ms: self.catch_up_ms.min(MAX_CATCH_UP_MS),
            queue_limit: self.queue_limit.max(1),
            in_flight_from_ms: self.in_flight_from_ms,
        }
    }

    /// Outbox ticks due before this instant are coalesced into their clock's newest: those
    /// older than the catch-up window, except, from `level` 3 on, the ones in flight and
    /// those after them (for at most [`MAX_IN_FLIGHT_SPARED_MS`] more).
    pub fn coalesce_before_ms(&self, level: Level) -> u64 {
        let cutoff = self.now_ms.saturating_sub(self.catch_up_ms);
        match self.in_flight_from_ms {
            Some(in_flight) if level.counts_skipped() => in_flight
                .min(cutoff)
                .max(cutoff.saturating_sub(MAX_IN_FLIGHT_SPARED_MS)),
            _ => cutoff,
        }
    }
}

/// What applying an [`Intent`] filed, for the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filed {
    /// Ticks filed for delivery.
    pub ticks: u64,
    /// Of those, ticks already due when the intent was proposed (a leader change or a stall).
    pub late: u64,
    /// Missed ticks older than the catch-up window, folded into a later tick.
    pub coalesced: u64,
    /// Ticks dropped from full http queues.
    pub dropped: u64,
    /// Clocks the intent looked at: those the due index names, not every clock registered.
    /// It is what an intent costs, so an operator (and a test) can see that an idle registry
    /// of a million hourly clocks costs an intent nothing. Zero for the other commands.
    #[serde(default)]
    pub visited: u64,
}

/// Running totals since the cluster was formed, replicated so that they survive failovers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickCounters {
    /// Ticks filed for delivery, scheduled and manual.
    pub filed: u64,
    /// Ticks filed after their instant.
    pub late: u64,
    /// Missed ticks coalesced away.
    pub coalesced: u64,
    /// Ticks dropped from full http queues.
    pub dropped: u64,
    /// Ticks handed out by leases, first deliveries and later ones.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub leased: u64,
    /// Of those, ticks handed out again after a lease ran out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub redelivered: u64,
    /// Leased ticks acked.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub acked: u64,
    /// Leased ticks given up after `max_deliveries` deliveries without an ack.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub given_up: u64,
    /// Instants skipped by overlap control (`crate::overlap`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u64,
}

/// Whether a counter is zero: left out of the serialized form, which stays as releases without
/// leases wrote it.
fn is_zero(counter: &u64) -> bool {
    *counter == 0
}

impl TickCounters {
    /// Adds another history's totals to these (a restore joins the backup's history to the
    /// restoring cluster's).
    pub fn absorb(&mut self, other: &TickCounters) {
        self.filed = self.filed.saturating_add(other.filed);
        self.late = self.late.saturating_add(other.late);
        self.coalesced = self.coalesced.saturating_add(other.coalesced);
        self.dropped = self.dropped.saturating_add(other.dropped);
        self.leased = self.leased.saturating_add(other.leased);
        self.redelivered = self.redelivered.saturating_add(other.redelivered);
        self.acked = self.acked.saturating_add(other.acked);
        self.given_up = self.given_up.saturating_add(other.given_up);
        self.skipped = self.skipped.saturating_add(other.skipped);
    }
}

/// Per-clock bookkeeping of the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Scheduled ticks at instants after this one are due (set on registration and resume).
    pub ticks_from_ms: u64,
    /// The last time a consumer showed interest (registration, a poll, a resume).
    pub last_activity_ms: u64,
    /// What became of the clock's ticks (absent from snapshots of v0.1.0, and while empty).
    #[serde(default, skip_serializing_if = "StatsSlot::is_empty")]
    pub stats: StatsSlot,
}

impl Cursor {
    /// The cursor of a clock that starts ticking after `now_ms`.
    pub fn starting(now_ms: u64) -> Self {
        Cursor {
            ticks_from_ms: now_ms,
            last_activity_ms: now_ms,
            stats: StatsSlot::default(),
        }
    }
}

/// What a pop's replay record keeps of each tick it returned: enough to rebuild the tick
/// with its clock, no more (the clock's name and schedule are not copied).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoppedTick {
    /// The tick's id.
    pub id: TickId,
    /// Its instant.
    pub due_at_ms: u64,
    /// Whether it was a manual tick.
    pub manual: bool,
    /// Its [`Tick::skipped`].
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub skipped: u32,
}

impl PoppedTick {
    /// The tick as it was popped, rebuilt with its clock's name and schedule.
    fn tick_of(&self, clock: &Clock) -> Tick {
        Tick {
            id: self.id.clone(),
            clock: clock.id.clone(),
            name: clock.name.to_string(),
            schedule: clock.schedule.clone(),
            due_at_ms: self.due_at_ms,
            manual: self.manual,
            skipped: self.skipped,
        }
    }
}

/// The last pop of an http queue, so that a retried pop gets the same ticks back (see
/// `Command::Pop`): at most [`MAX_POP_TICKS`] of them; with the earlier pops that returned
/// ticks, within [`EARLIER_POPS_KEPT`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PopReplay {
    /// The pop's request id.
    pub request: String,
    /// The ticks it returned, oldest first.
    pub ticks: Vec<PoppedTick>,
    /// The queue's earlier pops that returned ticks, newest first, each without earlier pops
    /// of its own (from level 3). Absent from the serialized form while empty, as releases
    /// before it wrote it; they ignore it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<PopReplay>,
}

impl PopReplay {
    /// The ticks the pop with `request` returned, if it is this one or one of the earlier.
    fn ticks_of(&self, request: &str) -> Option<&[PoppedTick]> {
        std::iter::once(self)
            .chain(&self.earlier)
            .find(|pop| pop.request == request)
            .map(|pop| pop.ticks.as_slice())
    }

    /// The earlier pops to keep once `self` is no longer the last: `self`, if it returned
    /// ticks, before its own earlier pops, newest first, cut to `kept` pops and
    /// [`MAX_POP_TICKS`] ticks in all.
    fn into_earlier(mut self, kept: usize) -> Vec<PopReplay> {
        let mut earlier = std::mem::take(&mut self.earlier);
        if !self.ticks.is_empty() {
            earlier.insert(0, self);
        }
        let mut ticks = 0_usize;
        let within = earlier
            .iter()
            .take(kept)
            .take_while(|pop| {
                ticks = ticks.saturating_add(pop.ticks.len());
                ticks <= MAX_POP_TICKS
            })
            .count();
        earlier.truncate(within);
        earlier
    }
}

/// The replicated record of committed and undelivered ticks.
///
/// The clocks' cursors are not here: the registry keeps each in its clock's record
/// (`crate::records`). Snapshots and backups still list them under `ledger.cursors`, and a
/// ledger is read only in that form ([`crate::LedgerSnapshot`]).
///
/// Its fields are the crate's: the registry changes them through the ledger's own bookkeeping
/// methods, and other crates read them through the accessors below.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TickLedger {
    /// Every scheduled instant up to this one has been filed.
    pub(crate) intended_through_ms: u64,
    /// Ticks for RabbitMQ and webhook clocks, committed and not yet settled, in due order.
    /// Serialized as a list: JSON maps cannot have composite keys, and the key is derived.
    #[serde(with = "outbox_as_list")]
    pub(crate) outbox: SharedMap<(u64, TickId), Tick>,
    /// Ticks for http clocks, waiting to be popped or leased.
    pub(crate) queues: SharedMap<QueueId, VecDeque<Tick>>,
    /// Ticks of http clocks handed out by leases and not acked yet, by queue and receipt
    /// (`crate::leases`). Absent from the serialized form while empty, as releases without
    /// leases wrote it.
    #[serde(skip_serializing_if = "SharedMap::is_empty")]
    pub(crate) leases: SharedMap<QueueId, QueueLeases>,
    /// Per http queue, the receipts acked before their deadline, kept until it passes so that
    /// a retried ack is answered as acked again (`crate::leases`). Absent from the serialized
    /// form while empty, as releases before it wrote it.
    #[serde(skip_serializing_if = "SharedMap::is_empty")]
    pub(crate) acked_receipts: SharedMap<QueueId, AckedReceipts>,
    /// Per clock with overlap control, the instants it skipped when no later tick was filed
    /// yet: its next filed scheduled tick counts them (`crate::overlap`). Absent from the
    /// serialized form while empty, as releases without overlap control wrote it.
    #[serde(skip_serializing_if = "SharedMap::is_empty")]
    pub(crate) overlap_carry: SharedMap<ClockId, u32>,
    /// Per clock, the request ids of its latest manual ticks, pauses and resumes, so that a
    /// retried one changes nothing (`crate::retries`); named when only manual ticks carried
    /// one. Absent from the serialized form while empty, as releases before it wrote it.
    #[serde(skip_serializing_if = "SharedMap::is_empty")]
    pub(crate) manual_requests: SharedMap<ClockId, RecentRequests>,
    /// Per http queue, the last pop's request id and what it returned, so that a retried pop
    /// gets the same ticks back (see `Command::Pop`). It replaces the whole-tick `last_pops` of
    /// earlier versions, which a snapshot may still hold and which is ignored on load (a
    /// retry that straddles the upgrade pops afresh).
    pub(crate) pop_replays: SharedMap<QueueId, PopReplay>,
    /// The number of manual ticks filed so far: the next manual tick's sequence number.
    pub(crate) manual_sequence: u64,
    /// Totals. Read through [`counters`](Self::counters); only the ledger's own bookkeeping
    /// (and the snapshot reader, `crate::ledger_snapshot`) changes them.
    pub(crate) counters: TickCounters,
    /// The queue limit of the latest intent (`http_queue_limit`): manual ticks filed between
    /// two intents obey it too. Read through [`queue_limit`](Self::queue_limit).
    pub(crate) queue_limit: u64,
    /// The cluster's deliveries over the last minutes (from level 2; see [`crate::stats`]).
    pub(crate) series: DeliverySeries,
}

impl Default for TickLedger {
    fn default() -> Self {
        TickLedger {
            intended_through_ms: 0,
            outbox: SharedMap::new(),
            queues: SharedMap::new(),
            leases: SharedMap::new(),
            acked_receipts: SharedMap::new(),
            overlap_carry: SharedMap::new(),
            manual_requests: SharedMap::new(),
            pop_replays: SharedMap::new(),
            manual_sequence: 0,
            counters: TickCounters::default(),
            queue_limit: DEFAULT_QUEUE_LIMIT,
            series: DeliverySeries::default(),
        }
    }
}

/// Where a clock's ticks go, as the ledger needs to know it.
#[derive(Clone, Copy, Debug)]
pub enum Destination<'a> {
    /// The RabbitMQ outbox.
    Outbox,
    /// The http queue with this id.
    Queue(&'a QueueId),
}

impl TickLedger {
    /// Every scheduled instant up to this one has been filed.
    pub fn intended_through_ms(&self) -> u64 {
        self.intended_through_ms
    }

    /// Ticks for RabbitMQ and webhook clocks, committed and not yet settled, in due order.
    pub fn outbox(&self) -> &SharedMap<(u64, TickId), Tick> {
        &self.outbox
    }

    /// Ticks for http clocks, by queue, waiting to be popped.
    pub fn queues(&self) -> &SharedMap<QueueId, VecDeque<Tick>> {
        &self.queues
    }

    /// Ticks of http queues held by leases, by queue and receipt (`crate::leases`).
    pub fn leases(&self) -> &SharedMap<QueueId, QueueLeases> {
        &self.leases
    }

    /// Per http queue, the receipts acked before their deadline, for a retry of their ack.
    pub fn acked_receipts(&self) -> &SharedMap<QueueId, AckedReceipts> {
        &self.acked_receipts
    }

    /// Per http queue, what its last pop returned, for a retry of that pop.
    pub fn pop_replays(&self) -> &SharedMap<QueueId, PopReplay> {
        &self.pop_replays
    }

    /// The number of manual ticks filed so far: the next manual tick's sequence number.
    pub fn manual_sequence(&self) -> u64 {
        self.manual_sequence
    }

    /// The cluster's deliveries over the last minutes.
    pub fn series(&self) -> &DeliverySeries {
        &self.series
    }

    /// The totals since the cluster was formed.
    pub fn counters(&self) -> &TickCounters {
        &self.counters
    }

    /// The queue limit of the latest intent (`http_queue_limit`; [`DEFAULT_QUEUE_LIMIT`]
    /// before the first): manual ticks filed between two intents obey it too.
    pub fn queue_limit(&self) -> u64 {
        self.queue_limit
    }

    /// Takes the queue limit of an intent being applied, for the ticks it files and the manual
    /// ticks filed until the next one.
    pub(crate) fn adopt_queue_limit(&mut self, queue_limit: u64) {
        self.queue_limit = queue_limit;
    }

    /// Moves the watermark: every scheduled instant up to `through_ms` has been filed.
    pub(crate) fn mark_intended_through(&mut self, through_ms: u64) {
        self.intended_through_ms = through_ms;
    }

    /// Adds an intent's late and coalesced ticks to the totals; filing counted the filed and
    /// dropped ones, and [`coalesce_outbox`](Self::coalesce_outbox) counts its own.
    pub(crate) fn count_missed(&mut self, missed: &Filed) {
        self.counters.late = self.counters.late.saturating_add(missed.late);
        self.counters.coalesced = self.counters.coalesced.saturating_add(missed.coalesced);
    }

    /// The next manual tick's sequence number, taken: the following one is next. Saturates at
    /// `u64::MAX` (a level-1 cluster does not stop at [`MAX_MANUAL_SEQUENCE`]).
    pub(crate) fn take_manual_sequence(&mut self) -> u64 {
        let sequence = self.manual_sequence;
        self.manual_sequence = sequence.saturating_add(1);
        sequence
    }

    /// How many manual ticks of `clock` wait in the outbox for the broker, counted no further
    /// than `cap`.
    pub(crate) fn manual_ticks_waiting(&self, clock: &ClockId, cap: usize) -> usize {
        self.outbox
            .values()
            .filter(|tick| tick.manual && tick.clock == *clock)
            .take(cap)
            .count()
    }

    /// Whether a pop of `queue_id` with `request` retries the queue's last pop or an earlier
    /// one it keeps, and so gets that pop's ticks again from [`pop_due`](Self::pop_due).
    pub(crate) fn is_retried_pop(&self, queue_id: &QueueId, request: &str) -> bool {
        self.popped_by(queue_id, request).is_some()
    }

    /// The ticks the pop of `queue_id` with `request` returned, if the queue keeps it.
    fn popped_by(&self, queue_id: &QueueId, request: &str) -> Option<&[PoppedTick]> {
        self.pop_replays.get(queue_id)?.ticks_of(request)
    }

    /// Removes a tick the broker settled from the outbox and returns it; `None` when it is not
    /// there (settled already, or never filed).
    pub(crate) fn settle(&mut self, key: &(u64, TickId)) -> Option<Tick> {
        self.outbox.remove(key)
    }

    /// Withdraws `clock`'s scheduled ticks due after `after_ms`, from the outbox and from its
    /// http queue `queue` if it has one: none of them is delivered. Manual ticks stay.
    pub(crate) fn withdraw_scheduled(
        &mut self,
        clock: &ClockId,
        queue: Option<&QueueId>,
        after_ms: u64,
    ) {
        let withdrawn =
            |tick: &Tick| &tick.clock == clock && !tick.manual && tick.due_at_ms > after_ms;
        shared_map::retain(&mut self.outbox, |_, tick| !withdrawn(tick));
        if let Some(queue_id) = queue
            && let Some(queue) = self.queues.get_mut(queue_id)
        {
            queue.retain(|tick| !withdrawn(tick));
        }
    }

    /// Joins a restored ledger to the history of `own`, the ledger of the cluster restoring
    /// it, which it is about to replace (`Command::Restore`).
    pub(crate) fn join_history(&mut self, own: &mut TickLedger) {
        // The later watermark wins: instants this cluster's leader already intended (with no
        // clocks to file them for) are not filed again, so no restored clock ticks twice for
        // one instant and the gap since the backup is skipped rather than replayed.
        self.intended_through_ms = self.intended_through_ms.max(own.intended_through_ms);
        // Manual tick ids stay unique across both histories.
        self.manual_sequence = self.manual_sequence.max(own.manual_sequence);
        self.counters.absorb(&own.counters);
        // The series describes this cluster's last minutes, not the backed-up one's.
        self.series = std::mem::take(&mut own.series);
    }

    /// Fits a restored ledger to this cluster: its queue limit applies to the restored queues
    /// too, and replay records of pops, acks and manual ticks made on the backed-up cluster
    /// cannot be retried here.
    pub(crate) fn fit_restored_queues(&mut self, queue_limit: u64) {
        self.queue_limit = queue_limit;
        self.pop_replays.clear();
        self.acked_receipts.clear();
        self.manual_requests.clear();
        let limit = usize::try_from(self.queue_limit.max(1)).unwrap_or(usize::MAX);
        let mut dropped = 0u64;
        let leases = self.leases.clone();
        shared_map::update_each(&mut self.queues, |queue_id, queue| {
            let leased = leases.get(queue_id).map_or(0, BTreeMap::len);
            while queue.len().saturating_add(leased) > limit && !queue.is_empty() {
                queue.pop_front();
                dropped = dropped.saturating_add(1);
            }
        });
        shared_map::retain(&mut self.queues, |_, queue| !queue.is_empty());
        self.counters.dropped = self.counters.dropped.saturating_add(dropped);
    }

    /// The scheduled instants of a clock to file for `intent`: the late ones within the
    /// catch-up window each, the older ones coalesced into their newest. Returns the instants
    /// and how many were coalesced away.
    pub fn due_instants(
        &self,
        schedule: &Schedule,
        cursor: &Cursor,
        intent: &Intent,
    ) -> (Vec<u64>, u64) {
        let after = self.intended_through_ms.max(cursor.ticks_from_ms);
        if intent.through_ms <= after {
            return (Vec::new(), 0);
        }
        let cutoff = intent.now_ms.saturating_sub(intent.catch_up_ms);
        let mut instants = Vec::new();
        let mut coalesced = 0;
        // Instants before the cutoff, without enumerating an epoch-aligned run (an outage of
        // a day is 86 400 one-second instants): keep the newest, count the rest.
        if let Some((newest_old, before_it)) = schedule.coalesced_before(after, cutoff)
            && newest_old <= intent.through_ms
        {
            coalesced = before_it;
            instants.push(newest_old);
        }
        let from = after.max(cutoff.saturating_sub(1));
        instants.extend(schedule.instants_in(from, intent.through_ms));
        (instants, coalesced)
    }

    /// Files one tick; an http queue beyond `queue_limit` drops its oldest tick, whose instant
    /// the next tick in line counts as skipped from `level` 3 on.
    pub fn file(
        &mut self,
        level: Level,
        mut tick: Tick,
        destination: Destination<'_>,
        queue_limit: u64,
    ) -> u64 {
        self.counters.filed = self.counters.filed.saturating_add(1);
        self.take_overlap_carry(&mut tick);
        match destination {
            Destination::Outbox => {
                self.outbox.insert((tick.due_at_ms, tick.id.clone()), tick);
                0
            }
            Destination::Queue(queue_id) => {
                let leased = self.leased_in_queue(queue_id);
                let queue = self.queues.entry(queue_id.clone()).or_default();
                queue.push_back(tick);
                // Leased ticks count against the limit, but only waiting ones are dropped: a
                // leased tick is in its consumer's hands (`crate::leases`).
                let limit = usize::try_from(queue_limit.max(1)).unwrap_or(usize::MAX);
                let mut dropped = 0u64;
                while queue.len().saturating_add(leased) > limit
                    && let Some(gone) = queue.pop_front()
                {
                    dropped = dropped.saturating_add(1);
                    if level.counts_skipped()
                        && let Some(next) = queue.front_mut()
                    {
                        next.absorb(&gone);
                    }
                }
                if queue.is_empty() {
                    // Every place was leased: the newcomer itself was dropped.
                    self.queues.remove(queue_id);
                }
                self.counters.dropped = self.counters.dropped.saturating_add(dropped);
                dropped
            }
        }
    }

    /// Removes the ticks of `clock`'s queue `queue_id` that are due at `now_ms` (and those whose
    /// lease ran out) and returns them, oldest first: at most `max` (the cluster level's
    /// [`Level::max_pop_ticks`]); the others stay for the next pop, as do ticks filed ahead of
    /// their instant. A pop with the
    /// same `request` as the queue's last one, or as one of the `earlier_kept` before it that
    /// returned ticks (the cluster level's [`Level::earlier_pops_kept`]), is a retry: it gets
    /// the same ticks again and removes nothing.
    ///
    /// [`Level::max_pop_ticks`]: crate::Level::max_pop_ticks
    /// [`Level::earlier_pops_kept`]: crate::Level::earlier_pops_kept
    pub fn pop_due(
        &mut self,
        clock: &Clock,
        queue_id: &QueueId,
        now_ms: u64,
        request: String,
        max: usize,
        earlier_kept: usize,
    ) -> Vec<Tick> {
        if let Some(popped) = self.popped_by(queue_id, &request) {
            return popped.iter().map(|popped| popped.tick_of(clock)).collect();
        }
        if !self.queues.contains_key(queue_id) && !self.leases.contains_key(queue_id) {
            return Vec::new();
        }
        let (taken, _) = self.take_available(queue_id, now_ms, max, None);
        let due: Vec<Tick> = taken.into_iter().map(|available| available.tick).collect();
        let replay = PopReplay {
            request,
            ticks: due
                .iter()
                .map(|tick| PoppedTick {
                    id: tick.id.clone(),
                    due_at_ms: tick.due_at_ms,
                    manual: tick.manual,
                    skipped: tick.skipped,
                })
                .collect(),
            earlier: Vec::new(),
        };
        if let Some(previous) = self.pop_replays.insert(queue_id.clone(), replay)
            && earlier_kept > 0
            && let Some(last) = self.pop_replays.get_mut(queue_id)
        {
            last.earlier = previous.into_earlier(earlier_kept);
        }
        due
    }

    /// The ticks of `queue_id` available at `now_ms` (due, or back from a lease that ran
    /// out), without taking them.
    pub fn due_in_queue(&self, queue_id: &QueueId, now_ms: u64) -> usize {
        let waiting = self.queues.get(queue_id).map_or(0, |queue| {
            queue.iter().filter(|tick| tick.due_at_ms <= now_ms).count()
        });
        let expired = self.leases.get(queue_id).map_or(0, |leases| {
            leases
                .values()
                .filter(|lease| lease.until_ms <= now_ms)
                .count()
        });
        waiting.saturating_add(expired)
    }

    /// The earliest instant at which a tick of `queue_id` becomes available: a waiting tick's
    /// instant, or a lease's deadline.
    pub fn next_due_in_queue(&self, queue_id: &QueueId) -> Option<u64> {
        let waiting = self
            .queues
            .get(queue_id)
            .into_iter()
            .flat_map(|queue| queue.iter().map(|tick| tick.due_at_ms));
        let leased = self
            .leases
            .get(queue_id)
            .into_iter()
            .flat_map(|leases| leases.values().map(|lease| lease.until_ms));
        waiting.chain(leased).min()
    }

    /// Bounds the outbox while the broker is away: of each clock's scheduled ticks that are
    /// older than `cutoff_ms` (the catch-up window), only the newest stays; the others are
    /// coalesced into it, as missed ticks are at intent time (SPEC §7). So a broker outage of
    /// any length leaves at most catch-up / interval + 1 scheduled ticks per clock waiting.
    /// Returns the clock of each tick coalesced away. Manual ticks are never coalesced. From
    /// `level` 3 on, the newest counts the others as skipped.
    pub fn coalesce_outbox(&mut self, level: Level, cutoff_ms: u64) -> Vec<ClockId> {
        let mut newest: BTreeMap<ClockId, (u64, TickId)> = BTreeMap::new();
        let mut older = Vec::new();
        let overdue = self.outbox.range(..(cutoff_ms, TickId::lowest()));
        for (key, tick) in overdue.filter(|(_, tick)| !tick.manual) {
            // Keys come in due order, so the last one seen per clock is its newest.
            if let Some(previous) = newest.insert(tick.clock.clone(), key.clone()) {
                older.push(previous);
            }
        }
        let gone: Vec<Tick> = older
            .iter()
            .filter_map(|key| self.outbox.remove(key))
            .collect();
        if level.counts_skipped() {
            for tick in &gone {
                if let Some(key) = newest.get(&tick.clock)
                    && let Some(kept) = self.outbox.get_mut(key)
                {
                    kept.absorb(tick);
                }
            }
        }
        let coalesced: Vec<ClockId> = gone.into_iter().map(|tick| tick.clock).collect();
        let count = u64::try_from(coalesced.len()).unwrap_or(u64::MAX);
        self.counters.coalesced = self.counters.coalesced.saturating_add(count);
        coalesced
    }

    /// Records a tick delivered at `delivered_at_ms` (handed to the broker, or popped) in the
    /// series, and returns the delivery for its clock's statistics.
    pub fn note_delivered(&mut self, tick: &Tick, delivered_at_ms: u64) -> Delivery {
        let delivery = Delivery::of(tick.due_at_ms, delivered_at_ms, tick.manual);
        self.series
            .delivered(delivered_at_ms, u64::from(delivery.lateness_ms));
        delivery
    }

    /// Adds a command's late, coalesced and dropped ticks to the series' window of `at_ms`.
    pub fn note_missed_at(&mut self, at_ms: u64, missed: &Filed) {
        if missed.late == 0 && missed.coalesced == 0 && missed.dropped == 0 {
            return;
        }
        if let Some(bucket) = self.series.at(at_ms) {
            bucket.late = bucket.late.saturating_add(missed.late);
            bucket.coalesced = bucket.coalesced.saturating_add(missed.coalesced);
            bucket.dropped = bucket.dropped.saturating_add(missed.dropped);
        }
    }

    /// Forgets the ticks of purged clocks and their http queues, in one pass over the outbox.
    pub fn forget(&mut self, clocks: &HashSet<&ClockId>, queues: &[QueueId]) {
        if clocks.is_empty() {
            return;
        }
        for queue in queues {
            self.queues.remove(queue);
            self.leases.remove(queue);
            self.acked_receipts.remove(queue);
            self.pop_replays.remove(queue);
        }
        shared_map::retain(&mut self.overlap_carry, |clock, _| !clocks.contains(clock));
        shared_map::retain(&mut self.manual_requests, |clock, _| {
            !clocks.contains(clock)
        });
        shared_map::retain(&mut self.outbox, |_, tick| !clocks.contains(&tick.clock));
    }
}

/// The outbox's serialized form: its ticks in due order; the keys are rebuilt on load.
pub(crate) mod outbox_as_list {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{SharedMap, Tick, TickId};

    pub fn serialize<S: Serializer>(
        outbox: &SharedMap<(u64, TickId), Tick>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(outbox.values())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<SharedMap<(u64, TickId), Tick>, D::Error> {
        let ticks = Vec::<Tick>::deserialize(deserializer)?;
        Ok(ticks
            .into_iter()
            .map(|tick| ((tick.due_at_ms, tick.id.clone()), tick))
            .collect())
    }
}

#[cfg(test)]
mod tests;
