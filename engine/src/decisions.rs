//! The leader's decisions, without I/O: what to propose, what to publish and what to confirm,
//! given the time and what has happened.
//!
//! [`Decisions`] is a plain struct stepped by the duties loop (`duties.rs`), which owns every
//! effect: the timers, the Raft proposals, the broker and the metrics. Each method takes the
//! time as an argument ([`Now`]) and the applied registry to read, and returns what to do, so
//! the rules of the lease, the publish, the confirmation and the purge are tested by stepping
//! instants and events, without a broker, a cluster or a clock.
//!
//! The rules, in one place:
//!
//! * **Publish** only while the [`Lease`] holds, only ticks whose instant has come, each at
//!   most once at a time (a tick handed to the broker is *in flight* until the broker settles
//!   it), at most [`MAX_PUBLISH_BATCH`] at once and at most [`MAX_IN_FLIGHT`] awaiting the
//!   broker, so a broker that confirms slower than ticks fall due holds the leader's memory
//!   still instead of growing it. A failed publish pauses publishing for
//!   [`PUBLISH_RETRY_PAUSE`]; a tick the broker did not confirm is published again, with its id.
//! * **Confirm** what the broker stored, or returned because the queue is gone, in one
//!   command per [`CONFIRM_EVERY`](crate::duties::CONFIRM_EVERY).
//! * **Overlap**: a clock with overlap control (SPEC §5a) has one tick out at a time, its
//!   oldest in the outbox; the others wait until it is settled and its `Confirm`, stamped
//!   with the settlement's time, has decided which of them are skipped (`decisions/lines.rs`).
//! * **Redelivery**: ticks that were already due when this leader took over may have been
//!   published by the previous leader; publishing one is counted as a re-delivery, once.
//! * **Purge** active clocks nobody consumes: http clocks not polled for the clock TTL, and
//!   RabbitMQ clocks whose queue the broker reported missing.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use tickd_domain::{
    Channel, ClockId, ClockStatus, Command, Intent, KeyChange, Registry, SharedMap, Tick, TickId,
    key_changes,
};
use tokio::time::Instant;

use self::lines::Lines;
use crate::EngineConfig;
use crate::lease::Lease;
use crate::publisher::{self, Destination, PublishOutcome};

/// How far ahead of the clock intents are committed: several commit latencies, so that the
/// publish at an instant never waits for consensus.
pub const LOOKAHEAD: Duration = Duration::from_millis(600);
/// How often the lease is renewed (it lasts [`crate::lease::LEASE`]).
pub const LEASE_RENEW_EVERY: Duration = Duration::from_millis(100);
/// The most ticks published in one pass. A larger instant goes out in several passes, one
/// right after the other: each pass is bounded by the broker's operation timeout, which ten
/// thousand messages to a busy broker exceeded (the whole burst then failed and was published
/// again, loading the broker further), and the loop serves intents and the lease in between.
pub const MAX_PUBLISH_BATCH: usize = 2_000;
/// The most ticks handed to the broker and not yet settled and removed from the outbox. Each
/// holds a confirmation future and the broker client's buffers: a broker that confirms slower
/// than ticks fall due was reported to grow a leader to 1.8 GB without it. Beyond it, publishing waits
/// for confirmations; the ticks wait in the replicated outbox, where they are bounded anyway.
pub const MAX_IN_FLIGHT: usize = 20_000;
/// How long publishing pauses after a publisher refused a whole publish (its destination
/// unreachable): an outage costs a failed attempt now and then, never a busy loop. RabbitMQ's
/// client reconnects at most this often too ([`crate::rabbit::RECONNECT_PAUSE`]).
pub const PUBLISH_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// The longest the loop sleeps when nothing is due: ticks filed meanwhile are found this late
/// at worst (an applied entry wakes the loop sooner).
pub const IDLE_WAKE: Duration = Duration::from_millis(250);

/// The key of an outbox tick: its due instant and its id.
pub type OutboxKey = (u64, TickId);

/// The two clocks a decision reads: the monotonic one for the lease and the pauses, which
/// no wall-clock step can stretch, and the wall clock for due instants, which are replicated
/// as milliseconds since the epoch.
#[derive(Clone, Copy, Debug)]
pub struct Now {
    /// The monotonic clock.
    pub instant: Instant,
    /// The wall clock, in milliseconds since the Unix epoch.
    pub wall_ms: u64,
}

impl Now {
    /// The same moment `elapsed` later on both clocks.
    pub fn after(self, elapsed: Duration) -> Now {
        Now {
            instant: self.instant + elapsed,
            wall_ms: self
                .wall_ms
                .saturating_add(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// What a publisher said about one tick this leader published.
#[derive(Debug)]
pub struct Settled {
    /// The tick's clock.
    pub clock: ClockId,
    /// The leader's clock when it handed the tick over: the tick's delivery, in its clock's
    /// statistics.
    pub published_ms: u64,
    /// What became of it.
    pub outcome: PublishOutcome,
}

/// One tick to hand to a publisher.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// Its outbox key.
    pub key: OutboxKey,
    /// The tick.
    pub tick: Tick,
    /// Where it goes.
    pub destination: Destination,
    /// Whether a previous leader may have published it already.
    pub redelivery: bool,
    /// Which attempt of this leader's this is: 1 for the first; a publisher that retries with
    /// a backoff grows it with this.
    pub attempt: u32,
    /// The majority's time when the tick was handed over ([`Now::wall_ms`]): what a publisher
    /// judges time by (how long a tick has been tried, the time it stamps), never its own
    /// node's clock, which may have jumped before the clock monitor noticed.
    pub now_ms: u64,
}

/// A settled tick, for the next `Confirm` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmation {
    /// Its outbox key.
    pub key: OutboxKey,
    /// The leader's clock when it handed over the attempt that delivered it; `None` when
    /// nobody received it (its queue is gone, or it was given up).
    pub published_ms: Option<u64>,
    /// The attempts this leader made, the last one included.
    pub attempts: u32,
    /// For a tick of a clock with overlap control, the leader's clock when the publisher
    /// settled it: its acknowledgement, which decides the instants that fell due behind it
    /// (`Command::Confirm`). `None` for the others.
    pub settled_ms: Option<u64>,
}

/// A tick whose last attempt failed and that waits before the next one.
#[derive(Debug, Clone, Copy)]
struct Retry {
    /// How many attempts this leader made.
    attempts: u32,
    /// No attempt before this instant.
    not_before: Instant,
}

/// The leader's state between two steps, for one term.
///
/// Every outbox key this leader has seen is in exactly one of `ready`, `in_flight`, the
/// waiting part of `retries` and the ticks `lines` holds, so finding what to publish next
/// costs the ticks it returns, not the ticks in flight: during a burst ten thousand ticks are
/// in flight, and scanning past them after every applied entry and every pass was a tenth of
/// the leader's CPU.
#[derive(Debug)]
pub struct Decisions {
    config: EngineConfig,
    lease: Lease,
    /// The outbox as this leader last looked at it ([`look`](Self::look)): a copy of the
    /// registry's (O(1); it shares the registry's nodes), to learn which ticks were filed and
    /// removed since, at the cost of those alone.
    seen: SharedMap<OutboxKey, Tick>,
    /// Outbox ticks that may be handed to a publisher once due: neither in flight nor waiting
    /// for their next attempt. Ordered as the outbox, by due instant.
    ready: BTreeSet<OutboxKey>,
    /// Outbox ticks handed to the broker by this leader and still in the outbox: either
    /// awaiting the broker's confirmation or awaiting the `Confirm` command that removes them.
    /// A failed publish leaves the set, so the tick is published again.
    in_flight: HashSet<OutboxKey>,
    /// Clocks whose queue the broker reported missing: nobody consumed them for the TTL.
    abandoned: BTreeSet<ClockId>,
    /// Settled ticks waiting for the next `Confirm` command, with their publish instant
    /// (`None` for a tick nobody received).
    confirmed: Vec<Confirmation>,
    /// Outbox ticks that were already due when this leader took over: the previous leader may
    /// have published them without its confirmation being committed. Ticks filed ahead of
    /// their instant are not here: no leader publishes a tick before its instant.
    inherited: BTreeSet<OutboxKey>,
    /// After a failed publish or without the lease, no new attempt before this instant: a
    /// broker outage costs one attempt per reconnect pause, not a busy loop.
    publish_paused_until: Option<Instant>,
    /// Outbox ticks whose last attempt failed and that wait before the next one (webhooks'
    /// backoff), and those made ready again after such a wait, until they settle: how many
    /// attempts each had. Forgotten with the leadership: a new leader tries every unconfirmed
    /// tick at once.
    retries: HashMap<OutboxKey, Retry>,
    /// The ticks of `retries` still waiting, by the instant their wait ends.
    waiting: BTreeSet<(Instant, OutboxKey)>,
    /// The ticks of clocks with overlap control: only each clock's head is ever ready, in
    /// flight or waiting; the others are held until it leaves the outbox.
    lines: Lines,
}

impl Decisions {
    /// The decisions of a leader that takes over at `now` with `registry` applied.
    pub fn new(config: EngineConfig, registry: &Registry, now: Now) -> Self {
        let outbox = registry.ledger().outbox();
        let inherited = outbox
            .keys()
            .take_while(|(due_at, _)| *due_at <= now.wall_ms)
            .cloned()
            .collect();
        let mut decisions = Self {
            config,
            lease: Lease::default(),
            // Every tick of the outbox is new to this leader: the first look places each.
            seen: SharedMap::new(),
            ready: BTreeSet::new(),
            in_flight: HashSet::new(),
            abandoned: BTreeSet::new(),
            confirmed: Vec::new(),
            inherited,
            publish_paused_until: None,
            retries: HashMap::new(),
            waiting: BTreeSet::new(),
            lines: Lines::default(),
        };
        decisions.look(registry);
        decisions
    }

    /// Catches up with the registry's outbox: ticks filed since the last look are ready (or
    /// held behind their clock's head), ticks removed (confirmed, withdrawn, purged with their
    /// clock) are forgotten, and a removed head makes the next of its line ready. Costs what changed
    /// since the last look; nothing when the outbox is the one already seen.
    fn look(&mut self, registry: &Registry) {
        let outbox = registry.ledger().outbox();
        if self.seen.ptr_eq(outbox) {
            return;
        }
        let seen = std::mem::replace(&mut self.seen, outbox.clone());
        for change in key_changes(&seen, outbox) {
            match change {
                KeyChange::Added(key) => {
                    if self.may_go_out(key, registry) {
                        self.ready.insert(key.clone());
                    }
                }
                KeyChange::Removed(key) => {
                    self.ready.remove(key);
                    self.in_flight.remove(key);
                    self.inherited.remove(key);
                    if let Some(retry) = self.retries.remove(key) {
                        self.waiting.remove(&(retry.not_before, key.clone()));
                    }
                    if let Some(head) = self.lines.removed(key) {
                        self.ready.insert(head);
                    }
                }
            }
        }
    }

    /// Whether a tick just filed under `key` may go out once due: always, unless its clock
    /// has overlap control and an older tick of it is still in the outbox, unacknowledged.
    fn may_go_out(&mut self, key: &OutboxKey, registry: &Registry) -> bool {
        let outbox = registry.ledger().outbox();
        let Some(clock) = outbox.get(key).map(|tick| &tick.clock) else {
            return true;
        };
        let overlap = registry.get(clock).map(|clock| clock.overlap);
        if overlap.is_none_or(|overlap| overlap.is_allow()) {
            return true;
        }
        self.lines.filed(key, clock)
    }

    /// Makes ready again the ticks whose wait for their next attempt is over at `now`.
    fn end_waits(&mut self, now: Instant) {
        while self.waiting.first().is_some_and(|(until, _)| *until <= now) {
            if let Some((_, key)) = self.waiting.pop_first() {
                self.ready.insert(key);
            }
        }
    }

    /// A quorum confirmed leadership when asked at `asked_at`.
    pub fn lease_confirmed(&mut self, asked_at: Instant) {
        self.lease.confirmed(asked_at);
    }

    /// Leadership could not be confirmed.
    pub fn lease_lost(&mut self) {
        self.lease.lost();
    }

    /// The intent to propose at `now`: every instant up to [`LOOKAHEAD`] ahead, sparing from
    /// the outbox's coalescing the ticks a consumer may already hold.
    pub fn intent(&self, now: Now) -> Intent {
        Intent {
            through_ms: now.after(LOOKAHEAD).wall_ms,
            now_ms: now.wall_ms,
            catch_up_ms: duration_ms(self.config.catch_up),
            queue_limit: self.config.http_queue_limit,
            in_flight_from_ms: self.in_flight_from_ms(),
        }
    }

    /// The instant of the oldest tick that may be in its consumers' hands and is still in the
    /// outbox: one this leader handed over and has not seen removed, or one it inherited
    /// already due, which the previous leader may have published. Coalesced into a later
    /// tick, such a tick would be counted as skipped by a consumer that received it. A scan
    /// of the ticks in flight (at most [`MAX_IN_FLIGHT`]) per intent.
    fn in_flight_from_ms(&self) -> Option<u64> {
        let handed_over = self.in_flight.iter().map(|(due_at, _)| *due_at).min();
        let inherited = self.inherited.first().map(|(due_at, _)| *due_at);
        handed_over.into_iter().chain(inherited).min()
    }

    /// When to look for due ticks next: the earliest ready tick's instant (now, if it is due)
    /// or the end of the first wait for a next attempt, no later than [`IDLE_WAKE`] and no
    /// earlier than the end of a pause.
    pub fn next_publish_at(&mut self, now: Now, registry: &Registry) -> Instant {
        let idle = now.instant + IDLE_WAKE;
        // With the most ticks in flight, a settled one makes room: look again at the next idle
        // wake, not at once (which would spin).
        if self.in_flight.len() >= MAX_IN_FLIGHT {
            return idle;
        }
        self.look(registry);
        let ready = self.ready.first().map(|(due_at, _)| {
            now.instant + Duration::from_millis(due_at.saturating_sub(now.wall_ms))
        });
        let waited = self.waiting.first().map(|(until, _)| *until);
        let Some(due) = ready.into_iter().chain(waited).min() else {
            return idle;
        };
        let due = due.min(idle);
        self.publish_paused_until
            .map_or(due, |paused| due.max(paused))
    }

    /// The ticks to publish at `now`: due, ready, for clocks that still exist, at most
    /// [`MAX_PUBLISH_BATCH`] and no more than [`MAX_IN_FLIGHT`] in flight. Empty during a
    /// pause, or without the lease (which pauses publishing until the lease may have been
    /// renewed). They stay ready until the publisher takes them ([`accepted`](Self::accepted)).
    pub fn due(&mut self, now: Now, registry: &Registry) -> Vec<Outgoing> {
        if self
            .publish_paused_until
            .is_some_and(|paused| now.instant < paused)
        {
            return Vec::new();
        }
        if !self.lease.holds(now.instant) {
            self.publish_paused_until = Some(now.instant + LEASE_RENEW_EVERY);
            return Vec::new();
        }
        self.look(registry);
        self.end_waits(now.instant);
        let mut outgoing = Vec::new();
        let mut orphans = Vec::new();
        let room = MAX_IN_FLIGHT.saturating_sub(self.in_flight.len());
        let outbox = registry.ledger().outbox();
        let due = self
            .ready
            .iter()
            .take_while(|(due_at, _)| *due_at <= now.wall_ms)
            .take(MAX_PUBLISH_BATCH.min(room))
            .filter_map(|key| outbox.get(key).map(|tick| (key, tick)));
        for (key, tick) in due {
            match registry.get(&tick.clock).and_then(publisher::destination) {
                Some(destination) => outgoing.push(Outgoing {
                    key: key.clone(),
                    tick: tick.clone(),
                    destination,
                    redelivery: self.inherited.contains(key),
                    attempt: self
                        .retries
                        .get(key)
                        .map_or(1, |retry| retry.attempts.saturating_add(1)),
                    now_ms: now.wall_ms,
                }),
                // Only clocks with a publisher file ticks in the outbox, and removing a clock
                // removes its ticks; should one outlive its clock anyway, nobody can receive it.
                None => orphans.push(key.clone()),
            }
        }
        for key in orphans {
            self.ready.remove(&key);
            self.in_flight.insert(key.clone());
            self.confirmed.push(Confirmation {
                key,
                published_ms: None,
                attempts: 1,
                settled_ms: None,
            });
        }
        outgoing
    }

    /// The publisher took `outgoing`: each tick is in flight until it is settled, and a
    /// re-delivery is counted once.
    pub fn accepted(&mut self, outgoing: &[Outgoing]) {
        for tick in outgoing {
            self.ready.remove(&tick.key);
            self.in_flight.insert(tick.key.clone());
            self.inherited.remove(&tick.key);
        }
    }

    /// The publisher refused a whole publish at `now`: the ticks stay in the outbox, and the
    /// next attempt waits for [`PUBLISH_RETRY_PAUSE`].
    pub fn publish_failed(&mut self, now: Now) {
        self.publish_paused_until = Some(now.instant + PUBLISH_RETRY_PAUSE);
    }

    /// Records what the publisher said at `now` about one tick; true if it must be published
    /// again.
    pub fn settle(&mut self, key: OutboxKey, settled: Settled, now: Now) -> bool {
        let at = now.instant;
        // Every outcome but an expiry ends an attempt.
        let attempted = u32::from(!matches!(settled.outcome, PublishOutcome::Expired(_)));
        let published_ms = match settled.outcome {
            PublishOutcome::Delivered { .. } => Some(settled.published_ms),
            PublishOutcome::GaveUp(_) | PublishOutcome::Expired(_) => None,
            PublishOutcome::Unroutable => {
                // Nobody can receive it: the tick is done, and the clock is abandoned.
                self.abandoned.insert(settled.clock);
                None
            }
            PublishOutcome::RetryAfter { after, .. } => {
                self.wait(key, at + after, 1);
                return true;
            }
            PublishOutcome::Deferred { after, .. } => {
                self.wait(key, at + after, 0);
                return true;
            }
            PublishOutcome::Failed(_) => {
                // Published again at once, if it is still in the outbox.
                if self.in_flight.remove(&key) {
                    self.ready.insert(key);
                }
                return true;
            }
        };
        let failed_before = self.retries.remove(&key).map_or(0, |retry| {
            self.waiting.remove(&(retry.not_before, key.clone()));
            retry.attempts
        });
        // Settling the head of a clock with overlap control acknowledges it: the instants
        // that fell due until now are decided by the confirmation.
        let settled_ms = self.lines.is_head(&key).then_some(now.wall_ms);
        self.confirmed.push(Confirmation {
            key,
            published_ms,
            attempts: failed_before.saturating_add(attempted),
            settled_ms,
        });
        false
    }

    /// `key` leaves the ticks in flight and waits until `not_before`, after `attempted` more
    /// attempts. A tick no longer in flight left the outbox meanwhile: it waits for nothing.
    fn wait(&mut self, key: OutboxKey, not_before: Instant, attempted: u32) {
        if !self.in_flight.remove(&key) {
            return;
        }
        let retry = self.retries.entry(key.clone()).or_insert(Retry {
            attempts: 0,
            not_before,
        });
        self.waiting.remove(&(retry.not_before, key.clone()));
        retry.attempts = retry.attempts.saturating_add(attempted);
        retry.not_before = not_before;
        self.waiting.insert((not_before, key));
    }

    /// The ticks to remove from the outbox in one `Confirm` command, if any. Ticks that have
    /// left the outbox are forgotten: they are settled for good.
    pub fn confirms(&mut self, registry: &Registry) -> Option<Vec<Confirmation>> {
        self.look(registry);
        (!self.confirmed.is_empty()).then(|| std::mem::take(&mut self.confirmed))
    }

    /// The `Confirm` of `confirmations` did not commit (a write that timed out while no quorum
    /// answered): they go into the next one. Without it their ticks stayed in the outbox and in
    /// flight for the rest of the term, published by nobody and confirmed by nobody, and held
    /// back the outbox's coalescing ([`Intent::in_flight_from_ms`]). A confirmation applied
    /// twice changes nothing: the second finds its tick gone.
    pub fn confirm_again(&mut self, confirmations: Vec<Confirmation>) {
        self.confirmed.extend(confirmations);
    }

    /// The active clocks to purge at `now` (SPEC §6), if any: RabbitMQ clocks whose queue the
    /// broker reported missing, and http clocks not polled for the clock TTL.
    pub fn abandoned(&mut self, now: Now, registry: &Registry) -> Option<Vec<ClockId>> {
        let ttl = duration_ms(self.config.clock_ttl);
        let mut abandoned: Vec<ClockId> = std::mem::take(&mut self.abandoned).into_iter().collect();
        let idle_http = registry.clocks_with_cursors().filter(|(clock, cursor)| {
            let idle_since = cursor.map_or(0, |cursor| cursor.last_activity_ms);
            clock.status == ClockStatus::Active
                && matches!(clock.channel, Channel::Http { .. })
                && now.wall_ms.saturating_sub(idle_since) >= ttl
        });
        abandoned.extend(idle_http.map(|(clock, _)| clock.id.clone()));
        (!abandoned.is_empty()).then_some(abandoned)
    }
}

/// The `Confirm` command that takes `confirmed` out of the outbox. Attempts go in only when
/// some tick took more than one, and settlement instants only when some tick is of a clock
/// with overlap control (which exists from cluster level 3 alone): a cluster without either
/// writes its confirmations as releases without webhooks did.
pub fn confirm_command(confirmed: Vec<Confirmation>) -> Command {
    let attempts: Vec<u32> = if confirmed.iter().any(|tick| tick.attempts != 1) {
        confirmed.iter().map(|tick| tick.attempts).collect()
    } else {
        Vec::new()
    };
    let settled_ms: Vec<Option<u64>> = if confirmed.iter().any(|tick| tick.settled_ms.is_some()) {
        confirmed.iter().map(|tick| tick.settled_ms).collect()
    } else {
        Vec::new()
    };
    let (ticks, published_ms) = confirmed
        .into_iter()
        .map(|tick| (tick.key, tick.published_ms))
        .unzip();
    Command::Confirm {
        ticks,
        published_ms,
        attempts,
        settled_ms,
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

mod lines;
#[cfg(test)]
mod tests;
