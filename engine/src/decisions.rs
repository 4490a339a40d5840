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
//! * **Redelivery**: ticks that were already due when this leader took over may have been
//!   published by the previous leader; publishing one is counted as a re-delivery, once.
//! * **Purge** active clocks nobody consumes: http clocks not polled for the clock TTL, and
//!   RabbitMQ clocks whose queue the broker reported missing.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use tickd_domain::{
    Channel, ClockId, ClockStatus, Intent, KeyChange, Registry, SharedMap, Tick, TickId,
    key_changes,
};
use tokio::time::Instant;

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
/// Every outbox key this leader has seen is in exactly one of `ready`, `in_flight` and the
/// waiting part of `retries`, so finding what to publish next costs the ticks it returns, not
/// the ticks in flight: during a burst ten thousand ticks are in flight, and scanning past them
/// after every applied entry and every pass was a tenth of the leader's CPU.
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
        Self {
            config,
            lease: Lease::default(),
            seen: outbox.clone(),
            ready: outbox.keys().cloned().collect(),
            in_flight: HashSet::new(),
            abandoned: BTreeSet::new(),
            confirmed: Vec::new(),
            inherited,
            publish_paused_until: None,
            retries: HashMap::new(),
            waiting: BTreeSet::new(),
        }
    }

    /// Catches up with the registry's outbox: ticks filed since the last look are ready, ticks
    /// removed (confirmed, withdrawn, purged with their clock) are forgotten. Costs what changed
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
                    self.ready.insert(key.clone());
                }
                KeyChange::Removed(key) => {
                    self.ready.remove(key);
                    self.in_flight.remove(key);
                    self.inherited.remove(key);
                    if let Some(retry) = self.retries.remove(key) {
                        self.waiting.remove(&(retry.not_before, key.clone()));
                    }
                }
            }
        }
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
    pub fn settle(&mut self, key: OutboxKey, settled: Settled, now: Instant) -> bool {
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
                self.wait(key, now + after, 1);
                return true;
            }
            PublishOutcome::Deferred { after, .. } => {
                self.wait(key, now + after, 0);
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
        self.confirmed.push(Confirmation {
            key,
            published_ms,
            attempts: failed_before.saturating_add(attempted),
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

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use tickd_domain::{Command, Outcome as Applied, QueueId, Schedule};

    use super::*;
    use crate::lease::LEASE;

    const MS: Duration = Duration::from_millis(1);
    const TTL: Duration = Duration::from_secs(60);

    fn config() -> EngineConfig {
        EngineConfig {
            clock_ttl: TTL,
            catch_up: Duration::from_secs(10),
            http_queue_limit: 100,
        }
    }

    /// A moment well after the epoch, on a whole second, so that instants are easy to name.
    fn start() -> Now {
        Now {
            instant: Instant::now(),
            wall_ms: 1_000_000,
        }
    }

    fn register(registry: &mut Registry, name: &str, channel: Channel, now: Now) -> ClockId {
        let command = Command::Register {
            name: name.to_owned(),
            schedule: Schedule::parse("every.1.seconds").expect("a valid schedule"),
            id: ClockId::new(format!("id-{name}")),
            channel,
            max_clocks: 10_000,
            now_ms: now.wall_ms,
            overlap: tickd_domain::Overlap::Allow,
        };
        match registry.apply(command) {
            Applied::Registered {
                clock,
                created: true,
            } => clock.id,
            other => panic!("expected a new clock, got {other:?}"),
        }
    }

    fn rabbit_clock(registry: &mut Registry, name: &str, now: Now) -> ClockId {
        register(registry, name, Channel::Rabbit, now)
    }

    fn http_clock(registry: &mut Registry, name: &str, now: Now) -> ClockId {
        let queue_id = QueueId::new(format!("queue-{name}"));
        register(registry, name, Channel::Http { queue_id }, now)
    }

    /// Files every tick up to `through` after `now`, as a committed intent would.
    fn file_through(registry: &mut Registry, now: Now, through: Duration) {
        let intent = Intent {
            through_ms: now.after(through).wall_ms,
            now_ms: now.wall_ms,
            catch_up_ms: 10_000,
            queue_limit: 100,
            in_flight_from_ms: None,
        };
        registry.apply(Command::Intend(intent));
    }

    /// The decisions of a leader that took over at `now` and holds its lease from then (for
    /// [`LEASE`]).
    fn leading(registry: &Registry, now: Now) -> Decisions {
        let mut decisions = Decisions::new(config(), registry, now);
        decisions.lease_confirmed(now.instant);
        decisions
    }

    /// What a publisher said of `tick`, published at `at`.
    fn settled(tick: &Outgoing, at: Now, outcome: PublishOutcome) -> Settled {
        Settled {
            clock: tick.tick.clock.clone(),
            published_ms: at.wall_ms,
            outcome,
        }
    }

    /// Settles `tick` at `at` with an `outcome` that ends its attempts; returns the
    /// confirmations then waiting.
    fn settle_for_good(
        decisions: &mut Decisions,
        registry: &Registry,
        tick: &Outgoing,
        at: Now,
        outcome: PublishOutcome,
    ) -> Option<Vec<Confirmation>> {
        let again = decisions.settle(tick.key.clone(), settled(tick, at, outcome), at.instant);
        assert!(!again, "the outcome ended the tick's attempts");
        decisions.confirms(registry)
    }

    fn keys(outgoing: &[Outgoing]) -> Vec<OutboxKey> {
        outgoing.iter().map(|tick| tick.key.clone()).collect()
    }

    /// A registry with one RabbitMQ clock registered at `now` and its ticks filed 3 s ahead.
    fn one_ticking_clock(now: Now) -> Registry {
        let mut registry = Registry::new();
        rabbit_clock(&mut registry, "orders", now);
        file_through(&mut registry, now, Duration::from_secs(3));
        registry
    }

    /// Applies `confirmations` as their committed `Confirm` command would.
    fn commit_confirms(registry: &mut Registry, confirmations: Vec<Confirmation>) {
        let (ticks, published_ms) = confirmations
            .into_iter()
            .map(|confirmation| (confirmation.key, confirmation.published_ms))
            .unzip();
        registry.apply(Command::Confirm {
            ticks,
            published_ms,
            attempts: Vec::new(),
        });
    }

    /// Every outbox tick is in exactly one of the decisions' places (ready, in flight,
    /// waiting for its next attempt), and nothing else is: what lets `due` and
    /// `next_publish_at` read the ready ticks alone instead of scanning past those in flight.
    fn assert_partition(decisions: &mut Decisions, registry: &Registry) {
        decisions.look(registry);
        let outbox = registry.ledger().outbox();
        let waiting: HashSet<&OutboxKey> = decisions.waiting.iter().map(|(_, key)| key).collect();
        for key in outbox.keys() {
            let places = [
                decisions.ready.contains(key),
                decisions.in_flight.contains(key),
                waiting.contains(key),
            ];
            assert_eq!(
                places.iter().filter(|place| **place).count(),
                1,
                "{key:?} is (ready, in flight, waiting) {places:?}"
            );
        }
        let known = decisions.ready.len() + decisions.in_flight.len() + waiting.len();
        assert_eq!(known, outbox.len(), "a key the outbox no longer holds");
    }

    #[test]
    fn every_outbox_tick_has_one_place_and_one_filed_below_those_in_flight_is_found() {
        let now = start();
        let mut registry = Registry::new();
        let clocks: Vec<ClockId> = (0..3)
            .map(|n| rabbit_clock(&mut registry, &format!("clock-{n}"), now))
            .collect();
        file_through(&mut registry, now, Duration::from_secs(3));
        let mut decisions = leading(&registry, now);
        assert_partition(&mut decisions, &registry);

        // The lease is renewed at every step, as the loop renews it.
        let first = now.after(Duration::from_secs(1));
        decisions.lease_confirmed(first.instant);
        let outgoing = decisions.due(first, &registry);
        assert_eq!(outgoing.len(), 3, "one tick per clock at the first second");
        assert_partition(&mut decisions, &registry);
        decisions.accepted(&outgoing);
        assert_partition(&mut decisions, &registry);
        assert!(decisions.due(first, &registry).is_empty(), "all in flight");

        // One fails outright, one is told to wait, one is delivered.
        let failed = PublishOutcome::Failed("the channel closed".into());
        assert!(decisions.settle(
            outgoing[0].key.clone(),
            settled(&outgoing[0], first, failed),
            first.instant
        ));
        let wait = PublishOutcome::RetryAfter {
            after: Duration::from_secs(5),
            reason: "503".into(),
        };
        assert!(decisions.settle(
            outgoing[1].key.clone(),
            settled(&outgoing[1], first, wait),
            first.instant
        ));
        let delivered = PublishOutcome::Delivered { after: MS };
        let confirmations =
            settle_for_good(&mut decisions, &registry, &outgoing[2], first, delivered)
                .unwrap_or_default();
        assert_partition(&mut decisions, &registry);
        assert_eq!(
            keys(&decisions.due(first, &registry)),
            vec![outgoing[0].key.clone()],
            "the failed tick at once, the waiting one not yet"
        );

        // A manual tick filed now is due before ticks already in flight at later instants:
        // it is found anyway.
        let later = first.after(Duration::from_secs(1));
        decisions.lease_confirmed(later.instant);
        let in_flight = decisions.due(later, &registry);
        decisions.accepted(&in_flight);
        registry.apply(Command::Tick {
            id: clocks[2].clone(),
            now_ms: first.wall_ms,
        });
        commit_confirms(&mut registry, confirmations);
        assert_partition(&mut decisions, &registry);
        let manual: Vec<Outgoing> = decisions
            .due(later, &registry)
            .into_iter()
            .filter(|tick| tick.tick.manual)
            .collect();
        assert_eq!(
            manual.len(),
            1,
            "the manual tick filed below those in flight"
        );
        assert_eq!(manual[0].tick.clock, clocks[2]);

        // The wait ends: the tick is ready again, with its attempt counted.
        let retried = first.after(Duration::from_secs(5));
        decisions.lease_confirmed(retried.instant);
        assert!(
            !keys(&decisions.due(later, &registry)).contains(&outgoing[1].key),
            "still waiting"
        );
        let again = decisions.due(retried, &registry);
        let retry = again
            .iter()
            .find(|tick| tick.key == outgoing[1].key)
            .unwrap_or_else(|| panic!("the waiting tick is due again: {again:?}"));
        assert_eq!(retry.attempt, 2);
        assert_partition(&mut decisions, &registry);
    }

    #[test]
    fn the_intent_reaches_the_lookahead_with_the_configured_limits() {
        let now = start();
        let intent = Decisions::new(config(), &Registry::new(), now).intent(now);
        assert_eq!(
            intent,
            Intent {
                through_ms: now.wall_ms + 600,
                now_ms: now.wall_ms,
                catch_up_ms: 10_000,
                queue_limit: 100,
                in_flight_from_ms: None,
            }
        );
    }

    #[test]
    fn the_intent_spares_the_ticks_a_consumer_may_hold_until_they_leave_the_outbox() {
        let now = start();
        let mut registry = one_ticking_clock(now);
        // Taking over 2.5 s later, the leader inherits the ticks of 1 and 2 s, which the
        // previous leader may have published.
        let takeover = now.after(Duration::from_millis(2_500));
        let mut decisions = leading(&registry, takeover);
        let first = now.wall_ms + 1_000;
        assert_eq!(decisions.intent(takeover).in_flight_from_ms, Some(first));
        // Published again, they are in flight until their confirmation is committed.
        let outgoing = decisions.due(takeover, &registry);
        assert_eq!(outgoing.len(), 2);
        decisions.accepted(&outgoing);
        assert_eq!(decisions.intent(takeover).in_flight_from_ms, Some(first));
        for tick in &outgoing {
            let delivered = settled(tick, takeover, PublishOutcome::Delivered { after: MS });
            assert!(!decisions.settle(tick.key.clone(), delivered, takeover.instant));
        }
        let confirmed = decisions.confirms(&registry).unwrap_or_default();
        assert_eq!(
            decisions.intent(takeover).in_flight_from_ms,
            Some(first),
            "settled but not yet confirmed in the log, they are still in the outbox"
        );
        commit_confirms(&mut registry, confirmed);
        assert_eq!(decisions.confirms(&registry), None);
        assert_eq!(decisions.intent(takeover).in_flight_from_ms, None);
    }

    #[test]
    fn publishing_waits_once_the_most_ticks_await_the_broker() {
        let now = start();
        let mut registry = Registry::new();
        for n in 0..11 {
            rabbit_clock(&mut registry, &format!("clock-{n}"), now);
        }
        // 35 minutes without a leader: 2 100 late ticks per clock, filed one by one.
        let later = now.after(Duration::from_secs(2_100));
        registry.apply(Command::Intend(Intent {
            through_ms: later.wall_ms,
            now_ms: later.wall_ms,
            catch_up_ms: 3_600_000,
            queue_limit: 100,
            in_flight_from_ms: None,
        }));
        assert!(registry.ledger().outbox().len() > MAX_IN_FLIGHT);
        let mut decisions = leading(&registry, later);
        let mut published = 0;
        // Bounded: passes that kept handing out the same ticks would fail the count below
        // instead of running forever.
        for _ in 0..=MAX_IN_FLIGHT.div_ceil(MAX_PUBLISH_BATCH) {
            let outgoing = decisions.due(later, &registry);
            if outgoing.is_empty() {
                break;
            }
            decisions.accepted(&outgoing);
            published += outgoing.len();
        }
        assert_eq!(
            published, MAX_IN_FLIGHT,
            "nothing beyond the bound is published"
        );
        assert_eq!(
            decisions.next_publish_at(later, &registry),
            later.instant + IDLE_WAKE,
            "at the bound the loop waits instead of spinning"
        );
        // One tick settled and removed from the outbox makes room for one more.
        let first = registry.ledger().outbox().keys().next().cloned();
        let first = first.unwrap_or_else(|| panic!("an outbox tick"));
        let delivered = Settled {
            clock: registry.ledger().outbox()[&first].clock.clone(),
            published_ms: later.wall_ms,
            outcome: PublishOutcome::Delivered { after: MS },
        };
        assert!(!decisions.settle(first.clone(), delivered, later.instant));
        let confirmed = decisions.confirms(&registry).unwrap_or_default();
        commit_confirms(&mut registry, confirmed);
        assert_eq!(decisions.confirms(&registry), None);
        assert_eq!(decisions.due(later, &registry).len(), 1);
    }

    #[test]
    fn nothing_is_published_before_the_lease_is_confirmed() {
        let now = start();
        let registry = one_ticking_clock(now);
        let mut decisions = Decisions::new(config(), &registry, now);
        let first_due = now.after(Duration::from_secs(1));
        assert!(decisions.due(first_due, &registry).is_empty());
        // Not in a busy loop: the next look waits for a renewal.
        assert_eq!(
            decisions.next_publish_at(first_due, &registry),
            first_due.instant + LEASE_RENEW_EVERY
        );
        let renewed = first_due.after(LEASE_RENEW_EVERY);
        decisions.lease_confirmed(renewed.instant);
        assert_eq!(decisions.due(renewed, &registry).len(), 1);
    }

    #[test]
    fn nothing_is_published_once_the_lease_has_run_out() {
        let now = start();
        let registry = one_ticking_clock(now);
        let mut decisions = Decisions::new(config(), &registry, now);
        let asked_at = now.after(Duration::from_secs(1) - LEASE);
        decisions.lease_confirmed(asked_at.instant);
        assert!(
            decisions
                .due(now.after(Duration::from_secs(1)), &registry)
                .is_empty(),
            "a lease asked for {LEASE:?} before the tick's instant has run out at it"
        );

        let mut decisions = Decisions::new(config(), &registry, now);
        decisions.lease_confirmed(asked_at.after(MS).instant);
        assert_eq!(
            decisions
                .due(now.after(Duration::from_secs(1)), &registry)
                .len(),
            1
        );
    }

    #[test]
    fn a_lost_lease_stops_publishing_at_once() {
        let now = start();
        let registry = one_ticking_clock(now);
        let instant = now.after(Duration::from_secs(1));
        let mut decisions = leading(&registry, instant);
        decisions.lease_lost();
        assert!(decisions.due(instant, &registry).is_empty());
    }

    #[test]
    fn a_tick_is_published_at_its_instant_and_not_a_millisecond_before() {
        let now = start();
        let registry = one_ticking_clock(now);
        let instant = now.after(Duration::from_secs(1));
        let early = now.after(Duration::from_secs(1) - MS);
        let mut decisions = leading(&registry, early);
        assert!(decisions.due(early, &registry).is_empty());
        // The loop sleeps exactly until then (the idle wake is longer than 1 ms).
        assert_eq!(decisions.next_publish_at(early, &registry), instant.instant);
        let outgoing = decisions.due(instant, &registry);
        assert_eq!(outgoing.len(), 1);
        assert_eq!(outgoing[0].tick.due_at_ms, instant.wall_ms);
        assert_eq!(
            outgoing[0].destination,
            Destination::Rabbit {
                queue: "ticktok-orders;every.1.seconds".to_owned()
            }
        );
        assert!(
            !outgoing[0].redelivery,
            "the tick was filed ahead of its instant"
        );
    }

    /// A leader whose one clock's first tick is due at the returned instant and was handed
    /// to the broker then.
    fn one_tick_in_flight() -> (Registry, Decisions, Now, Vec<Outgoing>) {
        let now = start();
        let registry = one_ticking_clock(now);
        let instant = now.after(Duration::from_secs(1));
        let mut decisions = leading(&registry, instant);
        let outgoing = decisions.due(instant, &registry);
        decisions.accepted(&outgoing);
        (registry, decisions, instant, outgoing)
    }

    #[test]
    fn a_tick_in_flight_is_not_published_twice() {
        let (registry, mut decisions, instant, _) = one_tick_in_flight();
        assert!(decisions.due(instant, &registry).is_empty());
        // The next wake is for the next tick, not the one in flight (capped by the idle wake).
        assert_eq!(
            decisions.next_publish_at(instant, &registry),
            instant.instant + IDLE_WAKE
        );
    }

    #[test]
    fn a_tick_the_broker_did_not_confirm_is_published_again() {
        let (registry, mut decisions, instant, outgoing) = one_tick_in_flight();
        let key = outgoing[0].key.clone();
        let failed = settled(&outgoing[0], instant, PublishOutcome::Failed("nack".into()));
        assert!(decisions.settle(key.clone(), failed, instant.instant));
        assert_eq!(keys(&decisions.due(instant, &registry)), vec![key]);
        assert_eq!(
            decisions.confirms(&registry),
            None,
            "a failed tick is not confirmed"
        );
    }

    #[test]
    fn a_tick_to_retry_waits_for_its_backoff_then_goes_again_as_the_next_attempt() {
        let (registry, mut decisions, instant, outgoing) = one_tick_in_flight();
        assert_eq!(outgoing[0].attempt, 1);
        let key = outgoing[0].key.clone();
        let backoff = Duration::from_secs(2);
        for attempt in 1..=2 {
            let at = instant.after(backoff * (attempt - 1));
            decisions.lease_confirmed(at.instant);
            let failed = PublishOutcome::RetryAfter {
                after: backoff,
                reason: "500".into(),
            };
            assert!(decisions.settle(key.clone(), settled(&outgoing[0], at, failed), at.instant));
            let early = at.after(backoff - MS);
            decisions.lease_confirmed(early.instant);
            assert!(
                !keys(&decisions.due(early, &registry)).contains(&key),
                "no attempt before the backoff has passed"
            );
            let ready = at.after(backoff);
            decisions.lease_confirmed(ready.instant);
            let again = decisions.due(ready, &registry);
            decisions.accepted(&again);
            let again: Vec<_> = again.iter().filter(|tick| tick.key == key).collect();
            assert_eq!(
                again.len(),
                1,
                "the tick goes again once its backoff has passed"
            );
            assert_eq!(again[0].attempt, attempt + 1);
        }
        assert_eq!(decisions.confirms(&registry), None, "a retried tick stays");
        let delivered = PublishOutcome::Delivered { after: MS };
        let at = instant.after(backoff * 2);
        decisions.settle(
            key.clone(),
            settled(&outgoing[0], at, delivered),
            at.instant,
        );
        assert_eq!(
            decisions.confirms(&registry),
            Some(vec![Confirmation {
                key,
                published_ms: Some(at.wall_ms),
                attempts: 3
            }]),
            "two failed attempts, then the one that delivered"
        );
    }

    #[test]
    fn a_deferred_tick_waits_without_counting_an_attempt() {
        let (registry, mut decisions, instant, outgoing) = one_tick_in_flight();
        let key = outgoing[0].key.clone();
        let wait = Duration::from_secs(1);
        let deferred = PublishOutcome::Deferred {
            after: wait,
            reason: "circuit open".into(),
        };
        assert!(decisions.settle(
            key.clone(),
            settled(&outgoing[0], instant, deferred),
            instant.instant
        ));
        let early = instant.after(wait - MS);
        decisions.lease_confirmed(early.instant);
        assert!(!keys(&decisions.due(early, &registry)).contains(&key));
        let ready = instant.after(wait);
        decisions.lease_confirmed(ready.instant);
        let again = decisions.due(ready, &registry);
        let again: Vec<_> = again.iter().filter(|tick| tick.key == key).collect();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].attempt, 1, "a deferral is not an attempt");
    }

    #[test]
    fn a_tick_given_up_leaves_the_outbox_as_received_by_nobody() {
        let (registry, mut decisions, instant, outgoing) = one_tick_in_flight();
        let key = outgoing[0].key.clone();
        let gave_up = PublishOutcome::GaveUp("404 Not Found".into());
        assert_eq!(
            settle_for_good(&mut decisions, &registry, &outgoing[0], instant, gave_up),
            Some(vec![Confirmation {
                key,
                published_ms: None,
                attempts: 1
            }])
        );
        assert!(
            decisions
                .due(instant.after(IDLE_WAKE), &registry)
                .is_empty()
        );
    }

    #[test]
    fn a_tick_that_expires_while_it_waits_is_given_up_without_another_attempt() {
        let (registry, mut decisions, instant, outgoing) = one_tick_in_flight();
        let key = outgoing[0].key.clone();
        let failed = PublishOutcome::RetryAfter {
            after: Duration::from_secs(1),
            reason: "503".into(),
        };
        assert!(decisions.settle(
            key.clone(),
            settled(&outgoing[0], instant, failed),
            instant.instant
        ));
        let later = instant.after(Duration::from_secs(1));
        decisions.lease_confirmed(later.instant);
        let again: Vec<Outgoing> = decisions
            .due(later, &registry)
            .into_iter()
            .filter(|tick| tick.key == key)
            .collect();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].attempt, 2);
        decisions.accepted(&again);
        let expired = PublishOutcome::Expired("webhook_retry_for_ms ran out".into());
        assert_eq!(
            settle_for_good(&mut decisions, &registry, &again[0], later, expired),
            Some(vec![Confirmation {
                key,
                published_ms: None,
                attempts: 1
            }]),
            "the one failed attempt, and none for the expiry"
        );
    }

    #[test]
    fn a_refused_publish_pauses_publishing_then_offers_the_same_ticks() {
        let now = start();
        let registry = one_ticking_clock(now);
        let mut decisions = leading(&registry, now);
        let instant = now.after(Duration::from_secs(1));
        decisions.lease_confirmed(instant.instant);
        let refused = keys(&decisions.due(instant, &registry));
        assert_eq!(refused.len(), 1);
        decisions.publish_failed(instant);
        assert_eq!(
            decisions.next_publish_at(instant, &registry),
            instant.instant + PUBLISH_RETRY_PAUSE
        );
        let before = instant.after(PUBLISH_RETRY_PAUSE - MS);
        decisions.lease_confirmed(before.instant);
        assert!(decisions.due(before, &registry).is_empty());
        let after = instant.after(PUBLISH_RETRY_PAUSE);
        assert_eq!(keys(&decisions.due(after, &registry)), refused);
    }

    #[test]
    fn delivered_and_returned_ticks_are_confirmed_in_one_command() {
        let now = start();
        let mut registry = Registry::new();
        rabbit_clock(&mut registry, "orders", now);
        let gone = rabbit_clock(&mut registry, "invoices", now);
        file_through(&mut registry, now, Duration::from_secs(3));
        let instant = now.after(Duration::from_secs(1));
        let mut decisions = leading(&registry, instant);
        let outgoing = decisions.due(instant, &registry);
        decisions.accepted(&outgoing);
        assert_eq!(outgoing.len(), 2);
        for tick in &outgoing {
            let outcome = if tick.tick.clock == gone {
                PublishOutcome::Unroutable
            } else {
                PublishOutcome::Delivered { after: MS }
            };
            assert!(!decisions.settle(
                tick.key.clone(),
                settled(tick, instant, outcome),
                instant.instant
            ));
        }
        let published = |key: &OutboxKey| {
            let delivered = outgoing
                .iter()
                .any(|o| &o.key == key && o.tick.clock != gone);
            delivered.then_some(instant.wall_ms)
        };
        let expected = keys(&outgoing)
            .into_iter()
            .map(|key| Confirmation {
                published_ms: published(&key),
                key,
                attempts: 1,
            })
            .collect();
        assert_eq!(decisions.confirms(&registry), Some(expected));
        assert_eq!(
            decisions.confirms(&registry),
            None,
            "each tick is confirmed once"
        );
        // The returned tick's clock has no queue any more: nobody consumes it.
        assert_eq!(decisions.abandoned(instant, &registry), Some(vec![gone]));
        assert_eq!(decisions.abandoned(instant, &registry), None);
    }

    #[test]
    fn a_large_instant_goes_out_in_bounded_passes() {
        let now = start();
        let mut registry = Registry::new();
        for index in 0..=MAX_PUBLISH_BATCH {
            rabbit_clock(&mut registry, &format!("clock{index}"), now);
        }
        file_through(&mut registry, now, Duration::from_secs(1));
        let instant = now.after(Duration::from_secs(1));
        let mut decisions = leading(&registry, instant);
        let first = decisions.due(instant, &registry);
        assert_eq!(first.len(), MAX_PUBLISH_BATCH);
        decisions.accepted(&first);
        assert_eq!(decisions.due(instant, &registry).len(), 1);
    }

    #[test]
    fn ticks_due_at_takeover_count_as_redeliveries_once() {
        let registered = start();
        let mut registry = Registry::new();
        rabbit_clock(&mut registry, "orders", registered);
        file_through(&mut registry, registered, Duration::from_secs(3));
        // The previous leader stopped after 2.5 s: the ticks of 1 s and 2 s may have gone out.
        let takeover = registered.after(Duration::from_millis(2_500));
        let mut decisions = leading(&registry, takeover);
        let later = registered.after(Duration::from_secs(3));
        decisions.lease_confirmed(later.instant);
        let outgoing = decisions.due(later, &registry);
        let redelivered: Vec<(u64, bool)> = outgoing
            .iter()
            .map(|tick| (tick.tick.due_at_ms - registered.wall_ms, tick.redelivery))
            .collect();
        assert_eq!(
            redelivered,
            vec![(1_000, true), (2_000, true), (3_000, false)]
        );

        decisions.accepted(&outgoing);
        let first = outgoing[0].key.clone();
        let lost = settled(
            &outgoing[0],
            later,
            PublishOutcome::Failed("connection lost".into()),
        );
        decisions.settle(first, lost, later.instant);
        let again = decisions.due(later, &registry);
        assert_eq!(again.len(), 1);
        assert!(!again[0].redelivery, "a re-delivery is counted once");
    }

    #[test]
    fn idle_http_clocks_are_purged_after_the_ttl_and_paused_or_rabbit_ones_are_kept() {
        let now = start();
        let mut registry = Registry::new();
        let idle = http_clock(&mut registry, "idle", now);
        let paused = http_clock(&mut registry, "paused", now);
        registry.apply(Command::Pause {
            id: paused,
            now_ms: now.wall_ms,
        });
        http_clock(&mut registry, "recent", now.after(Duration::from_secs(1)));
        rabbit_clock(&mut registry, "rabbit", now);
        let mut decisions = leading(&registry, now);
        assert_eq!(decisions.abandoned(now.after(TTL - MS), &registry), None);
        assert_eq!(
            decisions.abandoned(now.after(TTL), &registry),
            Some(vec![idle])
        );
    }
}
