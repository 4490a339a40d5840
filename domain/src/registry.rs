//! The clock registry: the replicated state and its one transition, [`Registry::apply`].
//!
//! Every node applies the same [`Command`]s in the same (Raft log) order and
//! must reach the same [`Registry`] and the same [`Outcome`]s. `apply`
//! therefore reads nothing but its arguments: ids, channels, limits and the
//! current time are decided by the proposing node and travel inside the
//! command. A refusal (unknown id, limit reached, invalid name) is a
//! deterministic result, an [`Outcome`], never an error that could make
//! replicas diverge.
//!
//! Whatever a command holds, applying it returns: arithmetic is checked or saturating, and
//! every loop is bounded by the registry's size, the command's own size or the intent window
//! (see the bounds in [`crate::ticks`]). A restored backup is validated like the
//! registrations and actions that could have produced it
//! ([`RegistrySnapshot::validate_for_restore`]) before it replaces anything.

use std::collections::HashSet;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use crate::clock::{Channel, Clock, ClockId, ClockStatus, QueueId, validate_name};
use crate::clocks_stamp::ClocksStamp;
use crate::due_index::DueIndex;
use crate::filter::ClockFilter;
use crate::ledger_snapshot::CursorSink;
use crate::ledger_snapshot::{LedgerSnapshot, LedgerView};
use crate::level::{Level, Levels};
use crate::literals::Literals;
use crate::load::Loader;
use crate::pair_index::PairIndex;
use crate::queue_index::QueueIndex;
use crate::records::ClockRecords;
use crate::restore_document::RestoreDocument;
use crate::schedule::Schedule;
use crate::selection::Selection;
use crate::shared_map;
use crate::ticks::{
    Cursor, Destination, Filed, Intent, MAX_LOOKAHEAD_MS, MAX_MANUAL_SEQUENCE, Tick, TickId,
    TickLedger,
};

/// A change to the registry, proposed through Raft and applied on every node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Create the clock for (`name`, `schedule`), or join the existing one.
    ///
    /// `id` and `channel` are chosen at random by the proposing node before
    /// proposing, because `apply` cannot generate them. When the pair already
    /// exists they are discarded and the existing clock is returned
    /// unchanged, so concurrent registrations of one pair on different nodes
    /// end as one clock.
    ///
    /// Written with a RabbitMQ channel's queue name spelled out, as v0.1.0 reads it
    /// (`crate::wire_form`).
    #[serde(
        serialize_with = "crate::wire_form::serialize_registration",
        deserialize_with = "crate::wire_form::deserialize_registration"
    )]
    Register {
        /// The clock's name, validated again by `apply`.
        name: String,
        /// The clock's schedule.
        schedule: Schedule,
        /// The id for the clock if this command creates it.
        id: ClockId,
        /// The channel for the clock if this command creates it.
        channel: Channel,
        /// The cluster's clock limit at proposal time; a registration that
        /// would exceed it creates nothing. Carried in the command so that
        /// every replica enforces the same limit.
        max_clocks: u64,
        /// The proposer's clock: a new clock's first tick is the first instant after it.
        now_ms: u64,
    },
    /// Stop the clock's scheduled ticks: none due after `now_ms` is delivered.
    Pause {
        /// The clock to pause.
        id: ClockId,
        /// The proposer's clock.
        now_ms: u64,
    },
    /// Restart the clock's scheduled ticks at the first instant after `now_ms`.
    Resume {
        /// The clock to resume.
        id: ClockId,
        /// The proposer's clock.
        now_ms: u64,
    },
    /// Deliver one manual tick to the clock now, whatever its status or schedule.
    Tick {
        /// The clock to tick.
        id: ClockId,
        /// The proposer's clock: the tick's `scheduled_at`.
        now_ms: u64,
    },
    /// The leader's intent to fire every scheduled tick due up to a point in time.
    Intend(Intent),
    /// The broker confirmed these outbox ticks; they are delivered.
    Confirm {
        /// The outbox keys (due instant, id) of the confirmed ticks.
        ticks: Vec<(u64, TickId)>,
        /// For each of `ticks`, in the same order: the leader's clock when it handed the tick
        /// to the broker, or `None` when the broker returned it (its queue is gone). For the
        /// tick statistics; empty from a v0.1.0 leader, and ignored unless it has one entry
        /// per tick.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        published_ms: Vec<Option<u64>>,
    },
    /// A poll of an http queue: remove and return the ticks due at `now_ms`.
    ///
    /// `request` makes a retry harmless: when a forwarded pop's answer is lost, the proposing
    /// node sends the same command again, and applying a pop whose `request` equals the queue's
    /// last one returns that pop's ticks again instead of removing the next ones (which would
    /// lose the first batch).
    Pop {
        /// The queue polled.
        queue: QueueId,
        /// The polling node's clock.
        now_ms: u64,
        /// A random id of this poll, drawn by the proposing node.
        request: String,
    },
    /// Polls that found nothing: the queues' consumers are alive.
    Touch {
        /// The queues that were polled.
        queues: Vec<QueueId>,
        /// The reporting node's clock.
        now_ms: u64,
    },
    /// Remove active clocks whose channel had no consumer for the clock TTL (SPEC §6).
    /// Paused clocks are kept.
    Purge {
        /// The clocks the leader found abandoned.
        clocks: Vec<ClockId>,
    },
    /// Seed a cluster that has no clocks from a backup (`tickd restore`): the clocks with
    /// their ids, statuses and channels, and their undelivered ticks.
    ///
    /// Refused when the registry holds any clock, so that a restore can never overwrite live
    /// state. Ticks that fell due between the backup and the restore are not replayed: the
    /// restored clocks continue at their next instant after the later of the two watermarks.
    Restore {
        /// The backed-up registry, as the JSON text it travels in ([`RestoreDocument`]).
        snapshot: RestoreDocument,
        /// The proposer's clock: every restored clock counts as consumed now, so that the
        /// leader does not purge clocks whose consumers have not reconnected yet.
        now_ms: u64,
        /// The cluster's clock limit at proposal time, as for `Register`.
        max_clocks: u64,
    },
    /// Several commands proposed together, applied in order as if each had its own log entry.
    ///
    /// A busy node gathers the writes that queue up while its earlier proposals are in flight
    /// into one entry, so that one append, one fsync and one replication round carry them all.
    /// The outcome is [`Outcome::Batch`], one outcome per command in the same order. A batch
    /// inside a batch is rejected (it is never proposed, so it can only be a bad request).
    Batch(Vec<Command>),
    /// Raise (or lower) the cluster level: which command kinds the log may carry from here on.
    ///
    /// Proposed only by the leader, once every voter advertises support for `level` (see
    /// [`crate::level`]). The replicated state above the registry keeps the level; the registry
    /// itself refuses the command, which can reach it only inside a batch.
    SetLevel {
        /// The new cluster level.
        level: Level,
    },
}

impl Command {
    /// The serialized tag of every command kind this binary decodes. A log entry tagged with
    /// anything else was proposed by a newer binary.
    pub const KINDS: &'static [&'static str] = &[
        "Register", "Pause", "Resume", "Tick", "Intend", "Confirm", "Pop", "Touch", "Purge",
        "Restore", "Batch", "SetLevel",
    ];

    /// The command's name, for log lines, spans and metric labels: it names what a command
    /// does without carrying its contents (a registration's channel holds an http queue id,
    /// which is a consumer's capability and must not reach a log).
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Register { .. } => "register",
            Command::Pause { .. } => "pause",
            Command::Resume { .. } => "resume",
            Command::Tick { .. } => "tick",
            Command::Intend(_) => "intend",
            Command::Confirm { .. } => "confirm",
            Command::Pop { .. } => "pop",
            Command::Touch { .. } => "touch",
            Command::Purge { .. } => "purge",
            Command::Restore { .. } => "restore",
            Command::Batch(_) => "batch",
            Command::SetLevel { .. } => "set_level",
        }
    }
}

/// The result of applying a [`Command`], identical on every replica; the node
/// that proposed the command turns it into the HTTP response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The clock for the registered pair, and whether this command created it.
    ///
    /// A created clock is stored `ACTIVE` (registration is one atomic
    /// command, so the stored status is never `PENDING`); the API still shows
    /// `PENDING` in the response to the POST that created it, as Ticktok does.
    /// A joined clock keeps its status: a paused clock stays paused.
    Registered {
        /// The clock as stored.
        clock: Clock,
        /// `true` when this command created the clock, `false` when it joined
        /// an existing one.
        created: bool,
    },
    /// The clock after a pause, resume or tick.
    Updated(Clock),
    /// No clock (or queue) has the command's id.
    NotFound,
    /// Creating the clock would exceed the registry's limit; nothing changed.
    LimitReached {
        /// The limit that was enforced.
        max_clocks: u64,
    },
    /// The command was invalid (for instance a name that the API should have
    /// refused); nothing changed.
    Rejected {
        /// What was wrong, for a person.
        reason: String,
    },
    /// What an intent filed.
    Filed(Filed),
    /// How many confirmed ticks left the outbox.
    Confirmed {
        /// The number removed (a tick confirmed twice counts once).
        count: u64,
    },
    /// The ticks a poll removed, oldest first.
    Popped(Vec<Tick>),
    /// Activity was recorded.
    Touched,
    /// The clocks removed by a purge.
    Purged {
        /// Their ids.
        clocks: Vec<ClockId>,
    },
    /// A restore seeded the registry with this many clocks.
    Restored {
        /// The number of clocks restored.
        clocks: u64,
    },
    /// A restore was refused because the registry already holds clocks; nothing changed.
    NotEmpty {
        /// How many clocks it holds.
        clocks: u64,
    },
    /// The outcomes of a [`Command::Batch`], in the order of its commands.
    Batch(Vec<Outcome>),
    /// The cluster level is now `level` ([`Command::SetLevel`]).
    LevelSet {
        /// The new cluster level.
        level: Level,
    },
}

/// Why a snapshot cannot be loaded as a registry: it breaks an invariant that
/// `apply` maintains, so it is corrupt or was not produced by this crate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// Two clocks share an id.
    #[error("corrupt registry snapshot: clock id {id} appears twice")]
    DuplicateId {
        /// The repeated id.
        id: ClockId,
    },
    /// Two clocks share a (name, schedule) pair.
    #[error(
        "corrupt registry snapshot: clocks {first} and {second} both have name {name:?} and \
         schedule {schedule}"
    )]
    DuplicatePair {
        /// The first clock with the pair.
        first: ClockId,
        /// The second clock with the pair.
        second: ClockId,
        /// The shared name.
        name: String,
        /// The shared schedule.
        schedule: Schedule,
    },
}

/// The serialized form of a [`Registry`]: the clocks ordered by id and the tick ledger; the
/// indexes are derived on load.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrySnapshot {
    /// Every clock, ordered by id.
    pub clocks: Vec<Clock>,
    /// Committed and undelivered ticks, and the clocks' cursors.
    pub ledger: LedgerSnapshot,
}

/// All clocks of the cluster and their committed ticks: the state that the Raft state
/// machine replicates.
///
/// Invariants, kept by [`Registry::apply`] and checked when a snapshot is
/// loaded: ids are unique, (name, schedule literal) pairs are unique, and the
/// indexes name exactly the stored clocks.
///
/// Deserialized from the shape of [`RegistrySnapshot`] without building one
/// (`crate::load`).
#[derive(Clone, Debug, Default)]
pub struct Registry {
    /// The clocks with their cursors, by id; ordered, so that iteration, listing and
    /// snapshots have one order on every node, and persistent, so that an
    /// [`image`](Self::image) of them costs nothing.
    clocks: ClockRecords,
    /// The id of the clock for each (name, schedule literal) pair, so that a
    /// registration joins the existing clock.
    by_pair: PairIndex,
    /// The clock of each http queue, so that a poll finds its clock.
    by_queue: QueueIndex,
    /// The active clocks by the next instant an intent must file for them, so that an intent
    /// visits only the clocks due in its window.
    due: DueIndex,
    /// Committed and undelivered ticks.
    ledger: TickLedger,
    /// One copy of each schedule literal the clocks use.
    literals: Literals,
    /// Drawn afresh whenever `clocks` changes: see [`ClocksStamp`]. Not state.
    stamp: ClocksStamp,
}

/// Equal registries hold equal state; their [`ClocksStamp`]s, which are not state, may differ.
impl PartialEq for Registry {
    fn eq(&self, other: &Self) -> bool {
        let Registry {
            clocks,
            by_pair,
            by_queue,
            due,
            ledger,
            literals,
            stamp: _,
        } = self;
        clocks.same_as(&other.clocks)
            && *by_pair == other.by_pair
            && *by_queue == other.by_queue
            && *due == other.due
            && *ledger == other.ledger
            && *literals == other.literals
    }
}

impl Eq for Registry {}

impl Registry {
    /// An empty registry, the state before the first command.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Applies one command as a cluster at this binary's highest level does; see
    /// [`apply_at`](Self::apply_at).
    pub fn apply(&mut self, command: Command) -> Outcome {
        self.apply_at(Levels::THIS_BINARY.highest, command)
    }

    /// Applies one command by the rules of cluster level `level`: the only way the registry
    /// changes. Deterministic: the result depends only on the registry, the level and the
    /// command, so every replica of a cluster, whatever its release, reaches the same state.
    pub fn apply_at(&mut self, level: Level, command: Command) -> Outcome {
        match command {
            Command::Register {
                name,
                schedule,
                id,
                channel,
                max_clocks,
                now_ms,
            } => self.register(level, name, schedule, id, channel, max_clocks, now_ms),
            Command::Pause { id, now_ms } => self.pause(&id, now_ms),
            Command::Resume { id, now_ms } => self.resume(level, &id, now_ms),
            Command::Tick { id, now_ms } => self.tick_now(level, &id, now_ms),
            Command::Intend(intent) => Outcome::Filed(self.intend(level, &intent)),
            Command::Confirm {
                ticks,
                published_ms,
            } => self.confirm(level, ticks, published_ms),
            Command::Pop {
                queue,
                now_ms,
                request,
            } => self.pop(level, &queue, now_ms, request),
            Command::Touch { queues, now_ms } => {
                for queue in &queues {
                    if let Some(clock) = self.by_queue.find(&self.clocks, queue) {
                        let id = clock.id.clone();
                        self.note_activity(&id, now_ms);
                    }
                }
                Outcome::Touched
            }
            Command::Purge { clocks } => Outcome::Purged {
                clocks: self.purge(clocks),
            },
            Command::Restore {
                snapshot,
                now_ms,
                max_clocks,
            } => self.restore(level, snapshot, now_ms, max_clocks),
            Command::Batch(commands) => Outcome::Batch(
                commands
                    .into_iter()
                    .map(|command| match command {
                        Command::Batch(_) => Outcome::Rejected {
                            reason: "a batch of commands cannot contain another batch".into(),
                        },
                        command => self.apply_at(level, command),
                    })
                    .collect(),
            ),
            Command::SetLevel { .. } => Outcome::Rejected {
                reason: "the cluster level is set by its own log entry, never inside a batch"
                    .into(),
            },
        }
    }

    /// Removes and returns the ticks of `queue` due at `now_ms`, or those of the queue's last
    /// pop again when this is a retry of it; see [`Command::Pop`].
    fn pop(&mut self, level: Level, queue: &QueueId, now_ms: u64, request: String) -> Outcome {
        let Some(clock) = self.by_queue.find(&self.clocks, queue) else {
            return Outcome::NotFound;
        };
        let ledger = &mut self.ledger;
        let retried = ledger
            .pop_replays
            .get(queue)
            .is_some_and(|replay| replay.request == request);
        let popped = ledger.pop_due(clock, queue, now_ms, request, level.max_pop_ticks());
        let id = clock.id.clone();
        self.note_activity(&id, now_ms);
        if level.keeps_tick_stats() && !retried {
            for tick in &popped {
                self.note_delivered(tick, now_ms);
            }
        }
        Outcome::Popped(popped)
    }

    /// Removes the ticks the broker settled from the outbox; those it stored count as
    /// delivered when they were published.
    fn confirm(
        &mut self,
        level: Level,
        ticks: Vec<(u64, TickId)>,
        published_ms: Vec<Option<u64>>,
    ) -> Outcome {
        let published =
            (level.keeps_tick_stats() && published_ms.len() == ticks.len()).then_some(published_ms);
        let mut count = 0u64;
        for (index, key) in ticks.into_iter().enumerate() {
            let Some(tick) = self.ledger.outbox.remove(&key) else {
                continue;
            };
            count = count.saturating_add(1);
            let delivered_at = published.as_ref().and_then(|all| all.get(index).copied());
            if let Some(Some(delivered_at_ms)) = delivered_at {
                self.note_delivered(&tick, delivered_at_ms);
            }
        }
        Outcome::Confirmed { count }
    }

    /// Replaces a registry without clocks by a backed-up one; see [`Command::Restore`].
    fn restore(
        &mut self,
        level: Level,
        document: RestoreDocument,
        now_ms: u64,
        max_clocks: u64,
    ) -> Outcome {
        if !self.is_empty() {
            return Outcome::NotEmpty {
                clocks: u64::try_from(self.len()).unwrap_or(u64::MAX),
            };
        }
        let snapshot = match document.decode() {
            Ok(snapshot) => snapshot,
            Err(error) => {
                return Outcome::Rejected {
                    reason: format!("the restored document is not a registry: {error}"),
                };
            }
        };
        if u64::try_from(snapshot.clocks.len()).unwrap_or(u64::MAX) > max_clocks {
            return Outcome::LimitReached { max_clocks };
        }
        if !level.has_calendar_schedules()
            && snapshot
                .clocks
                .iter()
                .any(|clock| clock.schedule.is_calendar())
        {
            return Outcome::Rejected {
                reason: calendar_needs_level(level),
            };
        }
        // The API checks the same before proposing; apply checks again, because it must be
        // safe whatever reaches the log.
        if level.bounds_commands()
            && let Err(error) = snapshot.validate_for_restore(now_ms)
        {
            return Outcome::Rejected {
                reason: error.to_string(),
            };
        }
        let mut restored = match Registry::try_from(snapshot) {
            Ok(restored) => restored,
            Err(error) => {
                return Outcome::Rejected {
                    reason: error.to_string(),
                };
            }
        };
        // Every restored clock counts as used now (see `Command::Restore`).
        restored.clocks.modify_each_cursor(|cursor| {
            cursor.last_activity_ms = cursor.last_activity_ms.max(now_ms);
        });
        let ledger = &mut restored.ledger;
        // The later watermark wins: instants this cluster's leader already intended (with no
        // clocks to file them for) are not filed again, so no restored clock ticks twice for
        // one instant and the gap since the backup is skipped rather than replayed.
        ledger.intended_through_ms = ledger
            .intended_through_ms
            .max(self.ledger.intended_through_ms);
        // Manual tick ids stay unique across both histories.
        ledger.manual_sequence = ledger.manual_sequence.max(self.ledger.manual_sequence);
        ledger.counters.absorb(&self.ledger.counters);
        // The series describes this cluster's last minutes, not the backed-up one's.
        ledger.series = std::mem::take(&mut self.ledger.series);
        if level.bounds_commands() {
            Self::fit_restored_queues(ledger, self.ledger.queue_limit);
        }
        // The watermark moved: the restored clocks' next instants follow it.
        restored.reindex_all();
        let clocks = u64::try_from(restored.len()).unwrap_or(u64::MAX);
        *self = restored;
        Outcome::Restored { clocks }
    }

    /// Fits a restored ledger to this cluster: its queue limit applies to the restored queues
    /// too, and replay records of pops made on the backed-up cluster cannot be retried here.
    fn fit_restored_queues(ledger: &mut TickLedger, queue_limit: u64) {
        // The restoring cluster's queue limit applies, to the restored queues too; replay
        // records of pops made on the backed-up cluster cannot be retried here.
        ledger.queue_limit = queue_limit;
        ledger.pop_replays.clear();
        let limit = usize::try_from(ledger.queue_limit.max(1)).unwrap_or(usize::MAX);
        let mut dropped = 0u64;
        shared_map::update_each(&mut ledger.queues, |queue| {
            while queue.len() > limit {
                queue.pop_front();
                dropped = dropped.saturating_add(1);
            }
        });
        ledger.counters.dropped = ledger.counters.dropped.saturating_add(dropped);
    }

    /// Joins the clock of the pair, or creates it if the name is valid, the
    /// limit allows and the proposed id is free.
    #[allow(
        clippy::too_many_arguments,
        reason = "a registration's fields, and the level that decides how they apply"
    )]
    fn register(
        &mut self,
        level: Level,
        name: String,
        schedule: Schedule,
        id: ClockId,
        channel: Channel,
        max_clocks: u64,
        now_ms: u64,
    ) -> Outcome {
        if let Err(err) = validate_name(&name) {
            return Outcome::Rejected {
                reason: err.to_string(),
            };
        }
        if schedule.is_calendar() && !level.has_calendar_schedules() {
            return Outcome::Rejected {
                reason: calendar_needs_level(level),
            };
        }
        if let Some(clock) = self.find(&name, &schedule) {
            let clock = clock.clone();
            self.note_activity(&clock.id, now_ms);
            return Outcome::Registered {
                clock,
                created: false,
            };
        }
        if u64::try_from(self.clocks.len()).unwrap_or(u64::MAX) >= max_clocks {
            return Outcome::LimitReached { max_clocks };
        }
        if self.clocks.contains(&id) {
            // Random ids should not collide; if they do, overwriting would
            // destroy another clock, so the proposer must retry with a new id.
            return Outcome::Rejected {
                reason: format!("clock id {id} is already in use by another clock"),
            };
        }
        if let Channel::Http { queue_id } = &channel
            && level.bounds_commands()
            && self.by_queue.find(&self.clocks, queue_id).is_some()
        {
            // Likewise for queue ids: two clocks on one queue would pop each other's ticks.
            return Outcome::Rejected {
                reason: "the proposed queue id is already in use by another clock".into(),
            };
        }
        let clock = Clock {
            id,
            name: name.into_boxed_str(),
            schedule,
            status: ClockStatus::Active,
            channel,
        };
        self.insert(clock.clone(), Some(Cursor::starting(now_ms)));
        self.start_ticking(level, &clock, now_ms);
        Outcome::Registered {
            clock,
            created: true,
        }
    }

    /// Starts (or restarts) a clock's scheduled ticks after `now_ms`, once the caller has set
    /// its cursor to start there. Instants that the leader's intents already cover are filed
    /// at once, so the clock does not miss its first tick because the intent watermark was
    /// ahead of the registration.
    ///
    /// Only the last [`MAX_LOOKAHEAD_MS`] before the watermark can be covered (intents reach
    /// no further ahead), so a command whose `now_ms` lies far behind the watermark files at
    /// most that window's instants, not every instant since `now_ms`.
    fn start_ticking(&mut self, level: Level, clock: &Clock, now_ms: u64) {
        let through = self.ledger.intended_through_ms;
        let (from, limit) = if level.bounds_commands() {
            let from = now_ms.max(through.saturating_sub(MAX_LOOKAHEAD_MS));
            (from, self.ledger.queue_limit)
        } else {
            (now_ms, u64::MAX)
        };
        let covered: Vec<u64> = clock.schedule.instants_in(from, through).collect();
        let mut dropped = 0u64;
        for instant in covered {
            let tick = scheduled_tick(clock, instant);
            let lost = self.ledger.file(tick, destination(clock), limit);
            dropped = dropped.saturating_add(lost);
        }
        self.note_dropped(level, &clock.id, dropped, now_ms);
        // A clock starts ticking new or resumed from a pause: either way out of the index.
        self.reindex(&clock.id, None);
    }

    /// Rebuilds the due index for every clock (a loaded or restored registry), from nothing:
    /// a ledger that comes from elsewhere may carry instants of an index that is not this one.
    ///
    /// The records are walked in id order, and clocks of one schedule share their next
    /// instant, so most entries land at the end of their instant's run: the packed index
    /// moves next to nothing for them, and fills its blocks nearly as well as random inserts
    /// do (94 % against 98 %, `packed_set` tests).
    fn reindex_all(&mut self) {
        let watermark = self.ledger.intended_through_ms;
        let mut due = DueIndex::default();
        for (clock, cursor) in self.clocks.with_cursors() {
            due.set(&clock.id, None, due_key_of(clock, cursor, watermark));
        }
        self.due = due;
    }

    /// The instant the due index files a clock under, computed from the state: the first
    /// instant of its schedule after the later of the intent watermark and its cursor, if it
    /// is active and has a cursor; `None` (out of the index) otherwise.
    ///
    /// The index holds each clock under exactly this key, so a command finds a clock's entry by
    /// computing the key before it changes what the key is made of (the clock's status, its
    /// cursor, the watermark), and [`reindex`](Self::reindex) moves it after. Nothing stores
    /// the key beside the clock: it cost every cursor 8 bytes. An intent moves the watermark
    /// for every clock, but only the keys at or before its end change (a clock with no instant
    /// in the window keeps its next one), and those are the clocks it visits. One exception,
    /// kept as it was: a clock a snapshot holds as `pending` turns active when resumed without
    /// being indexed (only a resume from a pause starts a clock ticking).
    fn due_key(&self, id: &ClockId) -> Option<u64> {
        let (clock, cursor) = self.clocks.with_cursor(id)?;
        due_key_of(clock, cursor, self.ledger.intended_through_ms)
    }

    /// Moves a clock in the due index from `previous`, the key it was filed under before the
    /// command changed it (see [`due_key`](Self::due_key)), to its key now. Every command that
    /// changes a clock's status, its cursor or the watermark calls it for the clock.
    fn reindex(&mut self, id: &ClockId, previous: Option<u64>) {
        let next = self.due_key(id);
        self.due.set(id, previous, next);
    }

    /// Counts ticks a command dropped from a clock's full http queue.
    fn note_dropped(&mut self, level: Level, clock: &ClockId, dropped: u64, at_ms: u64) {
        if !level.keeps_tick_stats() || dropped == 0 {
            return;
        }
        let missed = Filed {
            dropped,
            ..Filed::default()
        };
        self.note_missed(clock, &missed);
        self.ledger.note_missed_at(at_ms, &missed);
    }

    /// Adds to a clock's counts of late, coalesced and dropped ticks. Nothing to add leaves
    /// the record where it is (an intent notes every clock it visits, most with nothing).
    fn note_missed(&mut self, clock: &ClockId, missed: &Filed) {
        if missed.late == 0 && missed.coalesced == 0 && missed.dropped == 0 {
            return;
        }
        self.clocks.modify_cursor(clock, |cursor| {
            cursor
                .stats
                .missed(missed.late, missed.coalesced, missed.dropped);
        });
    }

    /// Records a delivered tick (handed to the broker, or popped at `delivered_at_ms`) in the
    /// series and in its clock's statistics.
    fn note_delivered(&mut self, tick: &Tick, delivered_at_ms: u64) {
        let delivery = self.ledger.note_delivered(tick, delivered_at_ms);
        self.clocks
            .modify_cursor(&tick.clock, |cursor| cursor.stats.delivered(delivery));
    }

    /// A consumer showed interest in the clock at `now_ms` (a registration, a poll): it is not
    /// abandoned.
    fn note_activity(&mut self, id: &ClockId, now_ms: u64) {
        self.clocks.modify_cursor(id, |cursor| {
            cursor.last_activity_ms = cursor.last_activity_ms.max(now_ms);
        });
    }

    fn pause(&mut self, id: &ClockId, now_ms: u64) -> Outcome {
        let previous = self.due_key(id);
        let paused = self
            .clocks
            .modify(id, |record| *record.status = ClockStatus::Paused);
        let (Some(()), Some(clock)) = (paused, self.clocks.get(id).cloned()) else {
            return Outcome::NotFound;
        };
        self.stamp = ClocksStamp::fresh();
        self.reindex(id, previous);
        // Scheduled ticks filed ahead of their instant are withdrawn: none due after the
        // pause is delivered. Manual ticks stay.
        let withdrawn = |tick: &Tick| &tick.clock == id && !tick.manual && tick.due_at_ms > now_ms;
        shared_map::retain(&mut self.ledger.outbox, |_, tick| !withdrawn(tick));
        if let Channel::Http { queue_id } = &clock.channel
            && let Some(queue) = self.ledger.queues.get_mut(queue_id)
        {
            queue.retain(|tick| !withdrawn(tick));
        }
        Outcome::Updated(clock)
    }

    fn resume(&mut self, level: Level, id: &ClockId, now_ms: u64) -> Outcome {
        // A resumed clock starts afresh after `now_ms` and keeps its statistics.
        let resumed = self.clocks.modify(id, |record| {
            let was_paused = *record.status == ClockStatus::Paused;
            *record.status = ClockStatus::Active;
            if was_paused {
                let cursor = record
                    .cursor
                    .get_or_insert_with(|| Cursor::starting(now_ms));
                cursor.ticks_from_ms = now_ms;
                cursor.last_activity_ms = now_ms;
            }
            was_paused
        });
        let (Some(was_paused), Some(clock)) = (resumed, self.clocks.get(id).cloned()) else {
            return Outcome::NotFound;
        };
        self.stamp = ClocksStamp::fresh();
        if was_paused {
            self.start_ticking(level, &clock, now_ms);
        }
        Outcome::Updated(clock)
    }

    fn tick_now(&mut self, level: Level, id: &ClockId, now_ms: u64) -> Outcome {
        let Some(clock) = self.clocks.get(id).cloned() else {
            return Outcome::NotFound;
        };
        let sequence = self.ledger.manual_sequence;
        let bounded = level.bounds_commands();
        if bounded && sequence >= MAX_MANUAL_SEQUENCE {
            return Outcome::Rejected {
                reason: format!(
                    "the cluster has filed its maximum of {MAX_MANUAL_SEQUENCE} manual ticks"
                ),
            };
        }
        // A rabbit clock's ticks wait in the outbox until the broker confirms them; nothing
        // drops the oldest there, so a burst of manual ticks while the broker is away is
        // refused at the same limit an http queue holds.
        let limit = if bounded {
            self.ledger.queue_limit
        } else {
            u64::MAX
        };
        if bounded && let Destination::Outbox = destination(&clock) {
            let cap = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
            let waiting = self
                .ledger
                .outbox
                .values()
                .filter(|tick| tick.manual && tick.clock == clock.id)
                .take(cap)
                .count();
            if waiting >= cap {
                return Outcome::Rejected {
                    reason: format!(
                        "clock {} has {waiting} manual ticks waiting for the broker, the \
                         limit (`http_queue_limit`); tick it again once the broker has \
                         confirmed them",
                        clock.id
                    ),
                };
            }
        }
        self.ledger.manual_sequence = sequence.saturating_add(1);
        let tick = Tick {
            id: TickId::manual(&clock.id, sequence),
            clock: clock.id.clone(),
            name: clock.name.to_string(),
            schedule: clock.schedule.clone(),
            due_at_ms: now_ms,
            manual: true,
        };
        // Manual ticks obey the http queue limit like scheduled ones: a queue over it drops its
        // oldest tick, so a burst of manual ticks on a paused clock cannot grow it unbounded.
        let dropped = self.ledger.file(tick, destination(&clock), limit);
        self.note_dropped(level, &clock.id, dropped, now_ms);
        Outcome::Updated(clock)
    }

    /// Files every scheduled tick of every active clock due up to the intent's end, within
    /// the intent's bounds ([`Intent::bounded`]). Only the clocks the due index holds at or
    /// before the intent's end are visited: the others have no instant in the window.
    fn intend(&mut self, level: Level, intent: &Intent) -> Filed {
        let due = self.due.due_through(intent.bounded().through_ms);
        self.intend_for(level, intent, &due)
    }

    /// Applies an intent to `clocks`, the clocks with ticks due in its window; every clock
    /// left out must have none.
    fn intend_for(&mut self, level: Level, intent: &Intent, clocks: &[ClockId]) -> Filed {
        let intent = &intent.bounded();
        self.ledger.queue_limit = intent.queue_limit;
        let mut filed = Filed::default();
        if intent.through_ms <= self.ledger.intended_through_ms {
            return filed;
        }
        // Their keys before the watermark moves: filing changes neither a clock's status nor
        // its cursor, the watermark does.
        let previous: Vec<Option<u64>> = clocks.iter().map(|id| self.due_key(id)).collect();
        let keeps_stats = level.keeps_tick_stats();
        for id in clocks {
            let Some((clock, Some(cursor))) = self.clocks.with_cursor(id) else {
                continue;
            };
            if clock.status != ClockStatus::Active {
                continue;
            }
            let missed = file_due_ticks(clock, cursor, &mut self.ledger, intent);
            if keeps_stats {
                self.note_missed(id, &missed);
            }
            filed.ticks = filed.ticks.saturating_add(missed.ticks);
            filed.late = filed.late.saturating_add(missed.late);
            filed.coalesced = filed.coalesced.saturating_add(missed.coalesced);
            filed.dropped = filed.dropped.saturating_add(missed.dropped);
        }
        self.ledger.intended_through_ms = intent.through_ms;
        for (id, previous) in clocks.iter().zip(previous) {
            self.reindex(id, previous);
        }
        let counters = &mut self.ledger.counters;
        counters.late = counters.late.saturating_add(filed.late);
        counters.coalesced = counters.coalesced.saturating_add(filed.coalesced);
        let coalesced = self
            .ledger
            .coalesce_outbox(intent.now_ms.saturating_sub(intent.catch_up_ms));
        let count = u64::try_from(coalesced.len()).unwrap_or(u64::MAX);
        filed.coalesced = filed.coalesced.saturating_add(count);
        if keeps_stats {
            let one = Filed {
                coalesced: 1,
                ..Filed::default()
            };
            for clock in &coalesced {
                self.note_missed(clock, &one);
            }
            self.ledger.note_missed_at(intent.now_ms, &filed);
        }
        filed
    }

    /// Removes the active clocks among `ids` and everything filed for them; unknown and
    /// paused clocks are kept. Returns the ids removed.
    ///
    /// The outbox is scanned once for the whole batch: the leader purges every clock whose
    /// queue expired in one command, and a pass per clock would cost clocks × outbox.
    fn purge(&mut self, ids: Vec<ClockId>) -> Vec<ClockId> {
        let mut purged = Vec::new();
        let mut queues = Vec::new();
        let mut schedules = Vec::new();
        for id in ids {
            let previous = self.due_key(&id);
            let Some(clock) = self.clocks.get(&id) else {
                continue;
            };
            if clock.status == ClockStatus::Paused {
                continue;
            }
            self.by_pair.remove(clock);
            if let Channel::Http { queue_id } = &clock.channel {
                self.by_queue.remove(queue_id, &id);
                queues.push(queue_id.clone());
            }
            if let Some(removed) = self.clocks.remove(&id) {
                schedules.push(removed.schedule);
                self.stamp = ClocksStamp::fresh();
            }
            self.reindex(&id, previous);
            purged.push(id);
        }
        let forgotten: HashSet<&ClockId> = purged.iter().collect();
        self.ledger.forget(&forgotten, &queues);
        // After the ticks: the last copy of a literal goes with the last thing that held it.
        for schedule in schedules {
            self.literals.release(schedule);
        }
        purged
    }

    /// Stores a clock with its cursor and indexes it; the caller has checked that neither its
    /// id nor its pair is taken.
    fn insert(&mut self, mut clock: Clock, cursor: Option<Cursor>) {
        clock.schedule = self.literals.share(clock.schedule);
        self.by_pair.insert(&clock);
        if let Channel::Http { queue_id } = &clock.channel {
            self.by_queue.insert(queue_id, &clock.id);
        }
        self.clocks.insert(clock, cursor);
        self.stamp = ClocksStamp::fresh();
    }

    /// The clock with this id, for `GET /api/v1/clocks/{id}`.
    pub fn get(&self, id: &ClockId) -> Option<&Clock> {
        self.clocks.get(id)
    }

    /// How many clocks exist, to compare with the cluster's limit.
    pub fn len(&self) -> usize {
        self.clocks.len()
    }

    /// Whether no clock exists.
    pub fn is_empty(&self) -> bool {
        self.clocks.is_empty()
    }

    /// Every clock, ordered by id (the same order on every node).
    pub fn clocks(&self) -> impl Iterator<Item = &Clock> {
        self.clocks.clocks()
    }

    /// Every clock with its cursor, ordered by id.
    pub fn clocks_with_cursors(&self) -> impl Iterator<Item = (&Clock, Option<&Cursor>)> {
        self.clocks.with_cursors()
    }

    /// The cursor of the clock with this id: when its ticks start, when it was last used, and
    /// what became of its ticks.
    pub fn cursor(&self, id: &ClockId) -> Option<&Cursor> {
        self.clocks.cursor(id)
    }

    /// The clock registered for the exact (name, schedule literal) pair, so a
    /// node can answer a repeated registration without a Raft round trip.
    pub fn find(&self, name: &str, schedule: &Schedule) -> Option<&Clock> {
        self.by_pair.find(&self.clocks, name, schedule.as_str())
    }

    /// The clock that owns an http queue.
    pub fn clock_of_queue(&self, queue: &QueueId) -> Option<&Clock> {
        self.by_queue.find(&self.clocks, queue)
    }

    /// The clocks that `filter` selects, to be walked now or after the state's lock is
    /// released: see [`Selection`].
    pub fn select(&self, filter: ClockFilter) -> Selection {
        Selection::of(filter, &self.by_pair, &self.clocks)
    }

    /// The committed and undelivered ticks.
    pub fn ledger(&self) -> &TickLedger {
        &self.ledger
    }

    /// Equal to an earlier stamp of this registry if its clocks have not changed since: see
    /// [`ClocksStamp`].
    pub fn clocks_stamp(&self) -> ClocksStamp {
        self.stamp
    }

    /// The registry's replicated part as it is now, unchanged by whatever is applied after:
    /// what a snapshot encodes. O(1): it shares the registry's nodes ([`RegistryImage`]).
    pub fn image(&self) -> RegistryImage {
        RegistryImage {
            clocks: self.clocks.clone(),
            ledger: self.ledger.clone(),
        }
    }
}

/// Files the ticks of one active clock that fall due in `intent`'s window, and says what it
/// filed: the ticks, those late, those coalesced into a later one, and those its full http
/// queue dropped.
fn file_due_ticks(
    clock: &Clock,
    cursor: &Cursor,
    ledger: &mut TickLedger,
    intent: &Intent,
) -> Filed {
    let (instants, coalesced) = ledger.due_instants(&clock.schedule, cursor, intent);
    let mut filed = Filed {
        coalesced,
        ..Filed::default()
    };
    for instant in instants {
        filed.ticks = filed.ticks.saturating_add(1);
        if instant < intent.now_ms {
            filed.late = filed.late.saturating_add(1);
        }
        let tick = scheduled_tick(clock, instant);
        let dropped = ledger.file(tick, destination(clock), intent.queue_limit);
        filed.dropped = filed.dropped.saturating_add(dropped);
    }
    filed
}

/// Why a calendar schedule is refused at `level`.
pub fn calendar_needs_level(level: Level) -> String {
    format!(
        "calendar schedules need cluster level {} (this cluster runs at level {level}): every \
         node must run a release that has them; finish the upgrade, or wait a few seconds if \
         the cluster has just formed",
        Level::V0_3
    )
}

/// The scheduled tick of `clock` at `instant_ms`.
fn scheduled_tick(clock: &Clock, instant_ms: u64) -> Tick {
    Tick::scheduled(&clock.id, &clock.name, &clock.schedule, instant_ms)
}

/// The due index's key of `clock` with `cursor` under the intent watermark `intended_through_ms`
/// (see [`Registry::due_key`]).
fn due_key_of(clock: &Clock, cursor: Option<&Cursor>, intended_through_ms: u64) -> Option<u64> {
    let cursor = cursor.filter(|_| clock.status == ClockStatus::Active)?;
    let after = intended_through_ms.max(cursor.ticks_from_ms);
    clock
        .schedule
        .next_instant_after(after)
        .filter(|instant| *instant != 0)
}

/// Where a clock's ticks are filed.
fn destination(clock: &Clock) -> Destination<'_> {
    match &clock.channel {
        Channel::Rabbit => Destination::Outbox,
        Channel::Http { queue_id } => Destination::Queue(queue_id),
    }
}

impl TryFrom<RegistrySnapshot> for Registry {
    type Error = SnapshotError;

    /// Loads a snapshot, rebuilding the indexes and refusing a list that
    /// breaks the registry's invariants.
    fn try_from(snapshot: RegistrySnapshot) -> Result<Self, Self::Error> {
        let mut loader = Loader::new();
        for clock in snapshot.clocks {
            loader.push(clock)?;
        }
        for (id, cursor) in snapshot.ledger.cursors {
            loader.receive(id, cursor)?;
        }
        loader.finish(snapshot.ledger.ticks)
    }
}

impl Registry {
    /// Adds a clock of a snapshot being loaded ([`Loader`]), refusing one whose id or pair
    /// another clock already has.
    pub(crate) fn load_clock(&mut self, clock: Clock) -> Result<(), SnapshotError> {
        if self.clocks.contains(&clock.id) {
            return Err(SnapshotError::DuplicateId { id: clock.id });
        }
        if let Some(first) = self.find(&clock.name, &clock.schedule) {
            return Err(SnapshotError::DuplicatePair {
                first: first.id.clone(),
                second: clock.id,
                name: clock.name.into_string(),
                schedule: clock.schedule,
            });
        }
        self.insert(clock, None);
        Ok(())
    }

    /// Gives a clock of a snapshot being loaded its cursor; hands the cursor back when no
    /// clock has the id (yet).
    pub(crate) fn attach_cursor(&mut self, id: &ClockId, cursor: Cursor) -> Option<Cursor> {
        if !self.clocks.contains(id) {
            return Some(cursor);
        }
        self.clocks
            .modify(id, |record| *record.cursor = Some(cursor));
        None
    }

    /// The loaded clocks with their `ledger`, the due index built from both.
    pub(crate) fn loaded(mut self, ledger: TickLedger) -> Registry {
        self.ledger = ledger;
        self.reindex_all();
        self
    }
}

/// The registry's replicated part frozen at one instant: its clocks and its ledger as they
/// were when [`Registry::image`] took it, whatever the registry applies afterwards. What a
/// snapshot encodes.
///
/// An image shares the registry's nodes ([`SharedMap`]): taking one costs O(1) and no
/// memory, and the registry copies a node only when it changes one the image still holds. So
/// the state machine holds its lock for the image, not for the encoding, and goes on applying
/// while the image is written out. The derived indexes are not part of it: they are rebuilt
/// when a snapshot is loaded.
///
/// It also lets a reader that passes over every clock (a metrics scrape, the dashboard's
/// event stream) do so without the state's lock, which every command waits for.
#[derive(Clone, Debug)]
pub struct RegistryImage {
    clocks: ClockRecords,
    ledger: TickLedger,
}

impl RegistryImage {
    /// The clocks, ordered by id.
    pub fn clocks(&self) -> impl Iterator<Item = &Clock> {
        self.clocks.clocks()
    }

    /// The cursor of the clock with this id.
    pub fn cursor(&self, id: &ClockId) -> Option<&Cursor> {
        self.clocks.cursor(id)
    }

    /// How many clocks there are.
    pub fn len(&self) -> usize {
        self.clocks.len()
    }

    /// Whether there is no clock.
    pub fn is_empty(&self) -> bool {
        self.clocks.is_empty()
    }

    /// The committed and undelivered ticks.
    pub fn ledger(&self) -> &TickLedger {
        &self.ledger
    }
}

/// Serialized in the shape of [`RegistrySnapshot`], from the image's own maps: a snapshot of a
/// large registry must not be copied into another form first (a copy doubles the node's peak
/// memory, and the allocator keeps that peak).
impl Serialize for RegistryImage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut snapshot = serializer.serialize_struct("RegistrySnapshot", 2)?;
        snapshot.serialize_field("clocks", &ClocksById(&self.clocks))?;
        let ledger = LedgerView {
            ticks: &self.ledger,
            cursors: CursorsById(&self.clocks),
        };
        snapshot.serialize_field("ledger", &ledger)?;
        snapshot.end()
    }
}

/// A registry serializes as its image.
impl Serialize for Registry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.image().serialize(serializer)
    }
}

/// The clocks as the snapshot lists them: ordered by id.
struct ClocksById<'a>(&'a ClockRecords);

impl Serialize for ClocksById<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clocks())
    }
}

/// The clocks' cursors as the snapshot's ledger lists them: a map by clock id.
struct CursorsById<'a>(&'a ClockRecords);

impl Serialize for CursorsById<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(
            self.0
                .with_cursors()
                .filter_map(|(clock, cursor)| Some((&clock.id, cursor?))),
        )
    }
}

impl From<RegistryImage> for RegistrySnapshot {
    /// The snapshot form: the clocks ordered by id and the ledger; indexes are derived.
    fn from(image: RegistryImage) -> Self {
        RegistrySnapshot {
            clocks: image.clocks.clocks().cloned().collect(),
            ledger: LedgerSnapshot {
                cursors: image
                    .clocks
                    .with_cursors()
                    .filter_map(|(clock, cursor)| Some((clock.id.clone(), cursor?.clone())))
                    .collect(),
                ticks: image.ledger,
            },
        }
    }
}

impl From<Registry> for RegistrySnapshot {
    fn from(registry: Registry) -> Self {
        registry.image().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::QueueId;
    use crate::stats::{ClockStats, Delivery, SeriesBucket};
    use crate::ticks::{Filed, Intent, TickCounters, TickId};

    /// A generous limit for tests that are not about the limit.
    const NO_LIMIT: u64 = 1_000;

    fn schedule(literal: &str) -> Schedule {
        Schedule::parse(literal).unwrap_or_else(|err| panic!("test schedule {literal:?}: {err}"))
    }

    fn id(id: &str) -> ClockId {
        ClockId::new(id.to_owned())
    }

    fn register(name: &str, literal: &str, proposed_id: &str, max_clocks: u64) -> Command {
        Command::Register {
            name: name.to_owned(),
            schedule: schedule(literal),
            id: id(proposed_id),
            channel: Channel::Http {
                queue_id: queue_for(proposed_id),
            },
            max_clocks,
            now_ms: 0,
        }
    }

    /// The queue id the tests' registrations propose for `proposed_id`: padded to the 32
    /// bytes a drawn queue id has, so that backups of these registries restore.
    fn queue_for(proposed_id: &str) -> QueueId {
        QueueId::new(format!("queue-{proposed_id:_<26}"))
    }

    /// Applies a register command that must create a clock, and returns it.
    fn create(registry: &mut Registry, name: &str, literal: &str, proposed_id: &str) -> Clock {
        match registry.apply(register(name, literal, proposed_id, NO_LIMIT)) {
            Outcome::Registered {
                clock,
                created: true,
            } => clock,
            other => panic!("expected a new clock, got {other:?}"),
        }
    }

    #[test]
    fn clocks_of_one_schedule_share_its_literal_until_the_last_is_purged() {
        let mut registry = Registry::new();
        create(&mut registry, "a", "every.1.hours", "c1");
        create(&mut registry, "b", "every.1.hours", "c2");
        create(&mut registry, "c", "every.2.hours", "c3");
        let literal = |registry: &Registry, clock: &str| {
            registry
                .get(&id(clock))
                .map(|clock| clock.schedule.as_str().as_ptr())
        };
        assert_eq!(
            literal(&registry, "c1"),
            literal(&registry, "c2"),
            "one copy"
        );
        assert_ne!(literal(&registry, "c1"), literal(&registry, "c3"));
        assert_eq!(registry.literals.len(), 2);
        registry.apply(Command::Purge {
            clocks: vec![id("c1")],
        });
        assert_eq!(registry.literals.len(), 2, "c2 still uses every.1.hours");
        registry.apply(Command::Purge {
            clocks: vec![id("c2"), id("c3")],
        });
        assert_eq!(registry.literals.len(), 0);
    }

    #[test]
    fn register_creates_an_active_clock_with_the_proposed_id_and_channel() {
        let mut registry = Registry::new();
        let clock = create(&mut registry, "orders", "every.5.seconds", "c1");
        assert_eq!(clock.id, id("c1"));
        assert_eq!(&*clock.name, "orders");
        assert_eq!(clock.schedule.as_str(), "every.5.seconds");
        assert_eq!(clock.status, ClockStatus::Active);
        assert_eq!(
            clock.channel,
            Channel::Http {
                queue_id: queue_for("c1")
            }
        );
        assert_eq!(registry.get(&id("c1")), Some(&clock));
        assert_eq!(
            registry.find("orders", &schedule("every.5.seconds")),
            Some(&clock)
        );
        assert_eq!(registry.len(), 1);
        assert!(!registry.is_empty());
    }

    #[test]
    fn duplicate_registrations_with_different_proposed_ids_end_as_one_clock() {
        let mut registry = Registry::new();
        let first = create(&mut registry, "orders", "every.5.seconds", "from-node-1");
        for proposed in ["from-node-2", "from-node-3", "from-node-1"] {
            let outcome = registry.apply(register("orders", "every.5.seconds", proposed, NO_LIMIT));
            assert_eq!(
                outcome,
                Outcome::Registered {
                    clock: first.clone(),
                    created: false
                }
            );
        }
        assert_eq!(registry.len(), 1);
        assert_eq!(registry.get(&id("from-node-2")), None);
    }

    #[test]
    fn a_batch_applies_its_commands_in_order_as_if_each_were_alone() {
        let mut batched = Registry::new();
        let mut one_by_one = Registry::new();
        let commands = vec![
            register("orders", "every.5.seconds", "c1", NO_LIMIT),
            register("orders", "every.5.seconds", "c2", NO_LIMIT),
            Command::Pause {
                id: id("c1"),
                now_ms: 7,
            },
            Command::Pause {
                id: id("unknown"),
                now_ms: 7,
            },
            register("billing", "every.1.minute", "c3", 1),
        ];
        let expected: Vec<Outcome> = commands
            .iter()
            .map(|command| one_by_one.apply(command.clone()))
            .collect();
        assert_eq!(
            batched.apply(Command::Batch(commands)),
            Outcome::Batch(expected)
        );
        assert_eq!(batched, one_by_one);
        // The last registration met the limit of one clock it carried.
        assert_eq!(batched.len(), 1);
    }

    #[test]
    fn a_batch_inside_a_batch_is_rejected_and_changes_nothing() {
        let mut registry = Registry::new();
        let nested = Command::Batch(vec![register("orders", "every.5.seconds", "c1", NO_LIMIT)]);
        let outcome = registry.apply(Command::Batch(vec![nested]));
        assert!(
            matches!(&outcome, Outcome::Batch(outcomes)
                if matches!(outcomes.as_slice(), [Outcome::Rejected { .. }])),
            "{outcome:?}"
        );
        assert!(registry.is_empty());
    }

    #[test]
    fn identity_is_the_literal_pair() {
        let mut registry = Registry::new();
        create(&mut registry, "orders", "every.5.seconds", "c1");
        create(&mut registry, "orders", "every.05.seconds", "c2");
        create(&mut registry, "orders", "every.1.minute", "c3");
        create(&mut registry, "orders", "every.60.seconds", "c4");
        create(&mut registry, "Orders", "every.5.seconds", "c5");
        // A ';' in the name must not let two pairs collide.
        create(&mut registry, "a;b", "every.1.second", "c6");
        create(&mut registry, "a", "every.1.second", "c7");
        assert_eq!(registry.len(), 7);
    }

    #[test]
    fn joining_keeps_a_paused_clock_paused() {
        let mut registry = Registry::new();
        let clock = create(&mut registry, "orders", "every.5.seconds", "c1");
        registry.apply(Command::Pause {
            id: clock.id,
            now_ms: 0,
        });
        let outcome = registry.apply(register("orders", "every.5.seconds", "c2", NO_LIMIT));
        match outcome {
            Outcome::Registered {
                clock,
                created: false,
            } => assert_eq!((clock.id, clock.status), (id("c1"), ClockStatus::Paused)),
            other => panic!("expected a join, got {other:?}"),
        }
    }

    #[test]
    fn pause_and_resume_set_the_status_idempotently() {
        let mut registry = Registry::new();
        create(&mut registry, "orders", "every.5.seconds", "c1");
        let steps = [
            (
                Command::Pause {
                    id: id("c1"),
                    now_ms: 0,
                },
                ClockStatus::Paused,
            ),
            (
                Command::Pause {
                    id: id("c1"),
                    now_ms: 0,
                },
                ClockStatus::Paused,
            ),
            (
                Command::Resume {
                    id: id("c1"),
                    now_ms: 0,
                },
                ClockStatus::Active,
            ),
            (
                Command::Resume {
                    id: id("c1"),
                    now_ms: 0,
                },
                ClockStatus::Active,
            ),
            (
                Command::Tick {
                    id: id("c1"),
                    now_ms: 0,
                },
                ClockStatus::Active,
            ),
            (
                Command::Pause {
                    id: id("c1"),
                    now_ms: 0,
                },
                ClockStatus::Paused,
            ),
            (
                Command::Tick {
                    id: id("c1"),
                    now_ms: 0,
                },
                ClockStatus::Paused,
            ),
        ];
        for (command, status) in steps {
            let described = format!("{command:?}");
            match registry.apply(command) {
                Outcome::Updated(clock) => {
                    assert_eq!(clock.status, status, "{described}");
                    assert_eq!(registry.get(&id("c1")), Some(&clock), "{described}");
                }
                other => panic!("{described}: expected Updated, got {other:?}"),
            }
        }
    }

    #[test]
    fn actions_on_unknown_ids_are_not_found_and_change_nothing() {
        let mut registry = Registry::new();
        create(&mut registry, "orders", "every.5.seconds", "c1");
        let before = registry.clone();
        for command in [
            Command::Pause {
                id: id("nope"),
                now_ms: 0,
            },
            Command::Resume {
                id: id("nope"),
                now_ms: 0,
            },
            Command::Tick {
                id: id("nope"),
                now_ms: 0,
            },
        ] {
            assert_eq!(registry.apply(command), Outcome::NotFound);
        }
        assert_eq!(registry, before);
    }

    #[test]
    fn the_limit_stops_new_clocks_but_not_joins() {
        let mut registry = Registry::new();
        assert_eq!(
            registry.apply(register("x", "every.1.second", "c0", 0)),
            Outcome::LimitReached { max_clocks: 0 }
        );
        assert!(registry.is_empty());

        for (index, name) in ["a", "b"].into_iter().enumerate() {
            let outcome = registry.apply(register(name, "every.1.second", &format!("c{index}"), 2));
            assert!(matches!(outcome, Outcome::Registered { created: true, .. }));
        }
        let before = registry.clone();
        assert_eq!(
            registry.apply(register("c", "every.1.second", "c2", 2)),
            Outcome::LimitReached { max_clocks: 2 }
        );
        assert_eq!(registry, before);
        let joined = registry.apply(register("a", "every.1.second", "c3", 2));
        assert!(matches!(joined, Outcome::Registered { created: false, .. }));
        // A lower limit proposed later also refuses, without removing anything.
        assert_eq!(
            registry.apply(register("d", "every.1.second", "c4", 1)),
            Outcome::LimitReached { max_clocks: 1 }
        );
        assert_eq!(registry.len(), 2);
    }

    #[test]
    fn invalid_names_are_rejected_and_change_nothing() {
        let mut registry = Registry::new();
        create(&mut registry, "orders", "every.5.seconds", "c1");
        let before = registry.clone();
        let long = "x".repeat(201);
        for name in ["", long.as_str()] {
            match registry.apply(register(name, "every.5.seconds", "c2", NO_LIMIT)) {
                Outcome::Rejected { reason } => {
                    assert!(reason.starts_with("invalid clock name"), "{reason}")
                }
                other => panic!("expected Rejected, got {other:?}"),
            }
        }
        assert_eq!(registry, before);
    }

    #[test]
    fn a_colliding_proposed_id_is_rejected_not_overwritten() {
        let mut registry = Registry::new();
        let original = create(&mut registry, "orders", "every.5.seconds", "c1");
        let outcome = registry.apply(register("invoices", "every.5.seconds", "c1", NO_LIMIT));
        assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
        assert_eq!(registry.get(&id("c1")), Some(&original));
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn the_same_commands_give_the_same_registry_and_outcomes() {
        let commands = [
            register("a", "every.1.second", "c2", NO_LIMIT),
            register("b", "@never", "c1", NO_LIMIT),
            register("a", "every.1.second", "c3", NO_LIMIT),
            Command::Pause {
                id: id("c1"),
                now_ms: 0,
            },
            Command::Resume {
                id: id("c9"),
                now_ms: 0,
            },
            register("c", "every.1.day", "c4", 3),
            register("d", "every.1.day", "c5", 3),
        ];
        let run = || {
            let mut registry = Registry::new();
            let outcomes: Vec<Outcome> = commands
                .iter()
                .cloned()
                .map(|command| registry.apply(command))
                .collect();
            (registry, outcomes)
        };
        let (registry, outcomes) = run();
        assert_eq!((registry.clone(), outcomes.clone()), run());
        let ids: Vec<String> = registry
            .clocks()
            .map(|clock| clock.id.to_string())
            .collect();
        assert_eq!(ids, ["c1", "c2", "c4"]);
        assert_eq!(
            outcomes.last(),
            Some(&Outcome::LimitReached { max_clocks: 3 })
        );
    }

    #[test]
    fn a_snapshot_round_trip_rebuilds_the_index() -> Result<(), serde_json::Error> {
        let mut registry = Registry::new();
        create(&mut registry, "orders", "every.5.seconds", "c2");
        create(&mut registry, "invoices", "@never", "c1");
        registry.apply(Command::Pause {
            id: id("c1"),
            now_ms: 0,
        });

        let snapshot = serde_json::to_value(&registry)?;
        let ids: Vec<&str> = snapshot["clocks"]
            .as_array()
            .map(|clocks| {
                clocks
                    .iter()
                    .filter_map(|clock| clock["id"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(ids, ["c1", "c2"]);
        let owned_form = serde_json::to_value(RegistrySnapshot::from(registry.clone()))?;
        assert_eq!(
            snapshot, owned_form,
            "serialized in place as its snapshot form"
        );

        let mut restored: Registry = serde_json::from_value(snapshot)?;
        assert_eq!(restored, registry);
        let found = restored
            .find("invoices", &schedule("@never"))
            .map(|clock| clock.status);
        assert_eq!(found, Some(ClockStatus::Paused));
        let joined = restored.apply(register("orders", "every.5.seconds", "c3", NO_LIMIT));
        assert!(matches!(joined, Outcome::Registered { created: false, .. }));
        assert_eq!(restored.len(), 2);
        Ok(())
    }

    #[test]
    fn corrupt_snapshots_are_refused() -> Result<(), serde_json::Error> {
        let clock = |id: &str, name: &str| {
            serde_json::json!({
                "id": id, "name": name, "schedule": "every.1.second", "status": "ACTIVE",
                "channel": {"type": "http", "queue_id": format!("q-{id}")},
            })
        };
        let cases = [
            (
                serde_json::json!({"clocks": [clock("c1", "a"), clock("c1", "b")], "ledger": {}}),
                "corrupt registry snapshot: clock id c1 appears twice",
            ),
            (
                serde_json::json!({"clocks": [clock("c1", "a"), clock("c2", "a")], "ledger": {}}),
                "corrupt registry snapshot: clocks c1 and c2 both have name \"a\" and schedule \
                 every.1.second",
            ),
        ];
        for (snapshot, message) in cases {
            let err = serde_json::from_value::<Registry>(snapshot).err();
            assert_eq!(err.map(|err| err.to_string()).as_deref(), Some(message));
        }
        let empty: Registry = serde_json::from_str(r#"{"clocks": [], "ledger": {}}"#)?;
        assert!(empty.is_empty());
        Ok(())
    }

    #[test]
    fn list_applies_the_filter_in_id_order() -> Result<(), Box<dyn std::error::Error>> {
        let pending = Clock {
            id: id("c0"),
            name: "orders".into(),
            schedule: schedule("every.5.seconds"),
            status: ClockStatus::Pending,
            channel: Channel::Http {
                queue_id: QueueId::new("q0".to_owned()),
            },
        };
        let mut registry = Registry::try_from(RegistrySnapshot {
            clocks: vec![pending],
            ledger: LedgerSnapshot::default(),
        })?;
        create(&mut registry, "orders", "every.1.minute", "c3");
        create(&mut registry, "orders", "every.1.hour", "c1");
        create(&mut registry, "invoices", "every.5.seconds", "c2");
        registry.apply(Command::Pause {
            id: id("c1"),
            now_ms: 0,
        });

        /// Query pairs, and the ids they should list.
        type Case = (
            &'static [(&'static str, &'static str)],
            &'static [&'static str],
        );
        let cases: &[Case] = &[
            (&[], &["c1", "c2", "c3"]),
            (&[("access_token", "t")], &["c1", "c2", "c3"]),
            (&[("name", "orders")], &["c1", "c3"]),
            (&[("name", "!orders")], &["c2"]),
            (&[("schedule", "!every.5.seconds")], &["c1", "c3"]),
            (&[("status", "PENDING")], &["c0"]),
            (&[("status", "!PAUSED")], &["c0", "c2", "c3"]),
            (&[("status", "!ACTIVE"), ("name", "orders")], &["c0", "c1"]),
            (&[("id", "c0")], &[]),
        ];
        for (query, expected) in cases {
            let filter = ClockFilter::from_pairs(
                query
                    .iter()
                    .map(|(key, value)| ((*key).to_owned(), (*value).to_owned())),
            )?;
            let listed: Vec<String> = registry
                .select(filter)
                .matching(None)
                .map(|clock| clock.id.to_string())
                .collect();
            assert_eq!(listed, *expected, "query {query:?}");
        }
        Ok(())
    }

    fn intent(through_ms: u64, now_ms: u64) -> Command {
        Command::Intend(Intent {
            through_ms,
            now_ms,
            catch_up_ms: 60_000,
            queue_limit: 100,
        })
    }

    fn rabbit(name: &str, literal: &str, proposed_id: &str, now_ms: u64) -> Command {
        Command::Register {
            name: name.to_owned(),
            schedule: schedule(literal),
            id: id(proposed_id),
            channel: Channel::Rabbit,
            max_clocks: NO_LIMIT,
            now_ms,
        }
    }

    fn outbox_ids(registry: &Registry) -> Vec<String> {
        registry
            .ledger()
            .outbox
            .values()
            .map(|tick| tick.id.to_string())
            .collect()
    }

    #[test]
    fn intents_file_the_ticks_of_active_clocks_once() {
        let mut registry = Registry::new();
        registry.apply(rabbit("a", "every.1.seconds", "ra", 500));
        registry.apply(rabbit("b", "every.2.seconds", "rb", 500));
        registry.apply(rabbit("c", "@never", "rc", 500));
        let filed = registry.apply(intent(2_400, 1_900));
        assert_eq!(
            filed,
            Outcome::Filed(Filed {
                ticks: 3,
                late: 1,
                coalesced: 0,
                dropped: 0
            })
        );
        assert_eq!(outbox_ids(&registry), ["ra-1000", "ra-2000", "rb-2000"]);
        // The same window again files nothing: the watermark moved.
        assert_eq!(
            registry.apply(intent(2_400, 2_000)),
            Outcome::Filed(Filed::default())
        );
        let confirmed = registry.apply(Command::Confirm {
            ticks: vec![(1_000, TickId::scheduled(&id("ra"), 1_000))],
            published_ms: Vec::new(),
        });
        assert_eq!(confirmed, Outcome::Confirmed { count: 1 });
        assert_eq!(outbox_ids(&registry), ["ra-2000", "rb-2000"]);
    }

    #[test]
    fn a_clock_registered_behind_the_watermark_gets_its_covered_ticks() {
        let mut registry = Registry::new();
        registry.apply(intent(3_000, 2_500));
        registry.apply(rabbit("late", "every.1.seconds", "rl", 1_500));
        assert_eq!(outbox_ids(&registry), ["rl-2000", "rl-3000"]);
    }

    #[test]
    fn pause_withdraws_future_ticks_and_resume_restarts_after_now() {
        let mut registry = Registry::new();
        registry.apply(rabbit("a", "every.1.seconds", "ra", 0));
        registry.apply(intent(3_000, 2_100));
        registry.apply(Command::Pause {
            id: id("ra"),
            now_ms: 2_100,
        });
        assert_eq!(outbox_ids(&registry), ["ra-1000", "ra-2000"]);
        registry.apply(intent(6_000, 5_500));
        assert_eq!(
            outbox_ids(&registry),
            ["ra-1000", "ra-2000"],
            "paused: nothing filed"
        );
        registry.apply(Command::Resume {
            id: id("ra"),
            now_ms: 5_500,
        });
        assert_eq!(outbox_ids(&registry), ["ra-1000", "ra-2000", "ra-6000"]);
    }

    /// The ids of the ticks waiting in an http clock's queue, in filing order.
    fn queue_ids(registry: &Registry, clock: &Clock) -> Vec<String> {
        let Channel::Http { queue_id } = &clock.channel else {
            panic!("an http clock, got {:?}", clock.channel);
        };
        registry
            .ledger()
            .queues
            .get(queue_id)
            .map(|queue| queue.iter().map(|tick| tick.id.to_string()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn pause_withdraws_the_same_ticks_from_an_http_queue_as_from_the_outbox() {
        let mut registry = Registry::new();
        registry.apply(rabbit("r", "every.1.seconds", "ra", 0));
        let http = create(&mut registry, "h", "every.1.seconds", "hc");
        registry.apply(intent(3_000, 2_100));
        // The manual ticks are stamped later than the pause below: a new leader's clock may be
        // behind its predecessor's (within the offset bound), and a manual tick must survive a
        // pause whatever its stamp, so only `manual` can keep them.
        for clock in ["ra", "hc"] {
            registry.apply(Command::Tick {
                id: id(clock),
                now_ms: 2_200,
            });
        }
        assert_eq!(
            queue_ids(&registry, &http),
            ["hc-1000", "hc-2000", "hc-3000", "hc-m1"]
        );
        for clock in ["ra", "hc"] {
            registry.apply(Command::Pause {
                id: id(clock),
                now_ms: 2_100,
            });
        }
        // Ticks already due stay for their consumer, the one due after the pause is withdrawn,
        // the manual tick stays: on both channels alike.
        assert_eq!(outbox_ids(&registry), ["ra-1000", "ra-2000", "ra-m0"]);
        assert_eq!(queue_ids(&registry, &http), ["hc-1000", "hc-2000", "hc-m1"]);
        let Channel::Http { queue_id } = http.channel.clone() else {
            panic!("an http clock");
        };
        let popped = registry.apply(Command::Pop {
            queue: queue_id,
            now_ms: 5_000,
            request: "after-pause".into(),
        });
        let Outcome::Popped(ticks) = popped else {
            panic!("a pop outcome, got {popped:?}");
        };
        let popped: Vec<(String, bool)> = ticks
            .iter()
            .map(|tick| (tick.id.to_string(), tick.manual))
            .collect();
        assert_eq!(
            popped,
            [
                ("hc-1000".to_owned(), false),
                ("hc-2000".to_owned(), false),
                ("hc-m1".to_owned(), true)
            ],
            "a consumer polling long after the pause gets nothing scheduled after it"
        );
        // While paused nothing is filed; a resume restarts after its own instant.
        registry.apply(intent(6_000, 5_500));
        assert!(
            queue_ids(&registry, &http).is_empty(),
            "paused: nothing filed"
        );
        registry.apply(Command::Resume {
            id: http.id.clone(),
            now_ms: 5_500,
        });
        assert_eq!(queue_ids(&registry, &http), ["hc-6000"]);
    }

    #[test]
    fn manual_ticks_have_sequential_ids_and_ignore_status() {
        let mut registry = Registry::new();
        registry.apply(rabbit("n", "@never", "rn", 0));
        registry.apply(Command::Pause {
            id: id("rn"),
            now_ms: 1,
        });
        registry.apply(Command::Tick {
            id: id("rn"),
            now_ms: 10,
        });
        registry.apply(Command::Tick {
            id: id("rn"),
            now_ms: 20,
        });
        assert_eq!(outbox_ids(&registry), ["rn-m0", "rn-m1"]);
        assert!(registry.ledger().outbox.values().all(|tick| tick.manual));
    }

    #[test]
    fn pops_return_due_ticks_once_and_unknown_queues_are_not_found() {
        let mut registry = Registry::new();
        let clock = create(&mut registry, "h", "every.1.seconds", "hc");
        let Channel::Http { queue_id } = clock.channel.clone() else {
            panic!("an http clock");
        };
        registry.apply(intent(3_500, 2_600));
        let pop = |now_ms: u64, request: &str| Command::Pop {
            queue: queue_id.clone(),
            now_ms,
            request: request.into(),
        };
        let popped = registry.apply(pop(2_600, "first"));
        let Outcome::Popped(ticks) = popped.clone() else {
            panic!("a pop outcome, got {popped:?}");
        };
        let instants: Vec<u64> = ticks.iter().map(|tick| tick.due_at_ms).collect();
        assert_eq!(instants, [1_000, 2_000]);
        // A retried pop (its answer was lost) gets the same ticks again, and takes no others.
        assert_eq!(registry.apply(pop(3_600, "first")), popped);
        assert_eq!(registry.ledger().due_in_queue(&queue_id, 3_600), 1);
        assert_eq!(
            registry.apply(pop(2_700, "second")),
            Outcome::Popped(Vec::new())
        );
        assert_eq!(registry.ledger().due_in_queue(&queue_id, 3_000), 1);
        let unknown = Command::Pop {
            queue: QueueId::new("nope".into()),
            now_ms: 0,
            request: "r".into(),
        };
        assert_eq!(registry.apply(unknown), Outcome::NotFound);
    }

    #[test]
    fn purge_removes_active_clocks_and_keeps_paused_ones() {
        let mut registry = Registry::new();
        let active = create(&mut registry, "a", "every.1.seconds", "c1");
        create(&mut registry, "p", "every.1.seconds", "c2");
        registry.apply(Command::Pause {
            id: id("c2"),
            now_ms: 0,
        });
        registry.apply(intent(2_000, 1_500));
        let purged = registry.apply(Command::Purge {
            clocks: vec![id("c1"), id("c2"), id("c9")],
        });
        assert_eq!(
            purged,
            Outcome::Purged {
                clocks: vec![id("c1")]
            }
        );
        assert!(registry.get(&id("c1")).is_none() && registry.get(&id("c2")).is_some());
        let Channel::Http { queue_id } = active.channel else {
            panic!("an http clock");
        };
        assert!(registry.clock_of_queue(&queue_id).is_none());
        assert!(!registry.ledger().queues.contains_key(&queue_id));
        // A later registration of the pair creates a fresh clock.
        let again = registry.apply(register("a", "every.1.seconds", "c3", NO_LIMIT));
        assert!(matches!(again, Outcome::Registered { created: true, .. }));
    }

    #[test]
    fn a_snapshot_keeps_the_ledger() -> Result<(), serde_json::Error> {
        let mut registry = Registry::new();
        registry.apply(rabbit("a", "every.1.seconds", "ra", 0));
        create(&mut registry, "h", "every.1.seconds", "hc");
        registry.apply(intent(3_000, 2_500));
        registry.apply(Command::Tick {
            id: id("ra"),
            now_ms: 2_600,
        });
        let restored: Registry = serde_json::from_str(&serde_json::to_string(&registry)?)?;
        assert_eq!(restored, registry);
        assert_eq!(
            outbox_ids(&restored),
            ["ra-1000", "ra-2000", "ra-m0", "ra-3000"]
        );
        Ok(())
    }

    #[test]
    fn the_clocks_stamp_moves_when_a_clock_is_added_paused_resumed_or_purged_and_only_then() {
        let mut registry = Registry::new();
        let mut last = registry.clocks_stamp();
        let mut moved = |registry: &Registry, what: &str, expected: bool| {
            let now = registry.clocks_stamp();
            assert_eq!(now != last, expected, "{what}: did the stamp move?");
            last = now;
        };
        let clock = create(&mut registry, "orders", "every.1.seconds", "c1");
        moved(&registry, "a registration", true);
        registry.apply(register("orders", "every.1.seconds", "c2", NO_LIMIT));
        moved(&registry, "a registration that joins the clock", false);
        registry.apply(intent(10_000, 0));
        let Channel::Http { queue_id } = clock.channel.clone() else {
            panic!("the tests register http clocks");
        };
        registry.apply(Command::Pop {
            queue: queue_id.clone(),
            now_ms: 5_000,
            request: "r1".into(),
        });
        registry.apply(Command::Touch {
            queues: vec![queue_id],
            now_ms: 6_000,
        });
        moved(&registry, "an intent, a pop and a touch", false);
        registry.apply(Command::Pause {
            id: id("c1"),
            now_ms: 7_000,
        });
        moved(&registry, "a pause", true);
        registry.apply(Command::Resume {
            id: id("c1"),
            now_ms: 8_000,
        });
        moved(&registry, "a resume", true);
        let copy = registry.clone();
        assert_eq!(copy.clocks_stamp(), registry.clocks_stamp(), "a copy");
        registry.apply(Command::Purge {
            clocks: vec![id("c1")],
        });
        moved(&registry, "a purge", true);
        registry.apply(restore(copy.clone().into(), 9_000));
        moved(&registry, "a restore", true);

        // A registry loaded from its serialized form holds the same state, under a stamp of
        // its own.
        let json = serde_json::to_string(&copy).expect("a registry serializes");
        let loaded: Registry = serde_json::from_str(&json).expect("and loads");
        assert_eq!(loaded, copy, "equal state");
        assert_ne!(loaded.clocks_stamp(), copy.clocks_stamp());
    }

    fn document(snapshot: &RegistrySnapshot) -> RestoreDocument {
        RestoreDocument::of(snapshot).expect("a snapshot encodes")
    }

    fn restore(snapshot: RegistrySnapshot, now_ms: u64) -> Command {
        Command::Restore {
            snapshot: document(&snapshot),
            now_ms,
            max_clocks: NO_LIMIT,
        }
    }

    /// A backed-up registry: one paused http clock, one active RabbitMQ clock with filed ticks.
    fn backed_up() -> Registry {
        let mut source = Registry::new();
        create(&mut source, "h", "every.1.seconds", "hc");
        source.apply(Command::Pause {
            id: id("hc"),
            now_ms: 100,
        });
        source.apply(rabbit("a", "every.1.seconds", "ra", 0));
        source.apply(intent(3_000, 2_500));
        source
    }

    #[test]
    fn an_image_keeps_the_state_it_was_taken_at_while_the_registry_goes_on() {
        let mut registry = backed_up();
        registry.apply(Command::Resume {
            id: id("hc"),
            now_ms: 2_600,
        });
        registry.apply(intent(4_000, 3_500));
        let then = serde_json::to_value(&registry).unwrap_or_default();
        let image = registry.image();
        assert!(
            image.clocks.ptr_eq(&registry.clocks)
                && image.ledger.outbox.ptr_eq(&registry.ledger.outbox),
            "an image shares the registry's maps: taking one copies nothing"
        );

        // Every kind of change after the image: it must see none of them.
        create(&mut registry, "later", "every.2.seconds", "lc");
        registry.apply(intent(9_000, 8_500));
        registry.apply(Command::Pop {
            queue: queue_for("hc"),
            now_ms: 9_000,
            request: "after-image".into(),
        });
        registry.apply(Command::Pause {
            id: id("ra"),
            now_ms: 9_100,
        });
        registry.apply(Command::Purge {
            clocks: vec![id("hc")],
        });

        let now = serde_json::to_value(&registry).unwrap_or_default();
        assert_ne!(now, then, "the registry changed");
        assert_eq!(serde_json::to_value(&image).unwrap_or_default(), then);
        let loaded: Registry = serde_json::from_value(then).unwrap_or_default();
        assert_eq!(
            loaded.len(),
            2,
            "the image loads as the registry it was taken from"
        );
    }

    #[test]
    fn restore_seeds_an_empty_registry_with_ids_statuses_and_queues() {
        let source = backed_up();
        let mut target = Registry::new();
        target.apply(intent(50_000, 49_500));
        let outcome = target.apply(restore(source.clone().into(), 50_000));
        assert_eq!(outcome, Outcome::Restored { clocks: 2 });
        for clock in source.clocks() {
            assert_eq!(target.get(&clock.id), Some(clock));
        }
        let queue = queue_for("hc");
        assert_eq!(
            target.clock_of_queue(&queue).map(|c| c.id.clone()),
            Some(id("hc"))
        );
        assert_eq!(outbox_ids(&target), outbox_ids(&source));
        // The later watermark wins, and restored clocks count as consumed at restore time.
        assert_eq!(target.ledger().intended_through_ms, 50_000);
        assert_eq!(target.len(), source.len());
        assert!(
            target
                .clocks_with_cursors()
                .all(|(_, cursor)| cursor.is_some_and(|cursor| cursor.last_activity_ms == 50_000))
        );
    }

    #[test]
    fn restore_refuses_a_registry_with_clocks_and_changes_nothing() {
        let mut target = Registry::new();
        create(&mut target, "live", "every.5.seconds", "live");
        let before = target.clone();
        let outcome = target.apply(restore(backed_up().into(), 0));
        assert_eq!(outcome, Outcome::NotEmpty { clocks: 1 });
        assert_eq!(target, before);
    }

    #[test]
    fn restore_refuses_a_corrupt_or_oversized_backup() {
        let mut snapshot: RegistrySnapshot = backed_up().into();
        let mut target = Registry::new();
        let limited = Command::Restore {
            snapshot: document(&snapshot),
            now_ms: 0,
            max_clocks: 1,
        };
        assert_eq!(
            target.apply(limited),
            Outcome::LimitReached { max_clocks: 1 }
        );
        let twin = snapshot.clocks[0].clone();
        snapshot.clocks.push(twin);
        assert!(matches!(
            target.apply(restore(snapshot, 0)),
            Outcome::Rejected { .. }
        ));
        assert!(target.is_empty());
    }

    /// An intent with a ten-second schedule's worth of knobs: the catch-up window is one
    /// minute and an http queue keeps three ticks.
    fn intent_keeping_three(through_ms: u64, now_ms: u64) -> Command {
        Command::Intend(Intent {
            through_ms,
            now_ms,
            catch_up_ms: 60_000,
            queue_limit: 3,
        })
    }

    #[test]
    fn intents_count_what_they_filed_late_coalesced_and_dropped() {
        let mut registry = Registry::new();
        registry.apply(rabbit("r", "every.10.seconds", "ra", 0));
        let http = create(&mut registry, "h", "every.10.seconds", "hc");
        // Nothing could commit from 0 to 100 s. Per clock: 10 s and 20 s are older than the
        // cutoff (40 s) and coalesced into 30 s; 30..=100 s are filed, all late but 100 s,
        // which is due at the intent's own instant. The queue keeps the newest 3 of its 8.
        let filed = registry.apply(intent_keeping_three(100_500, 100_000));
        assert_eq!(
            filed,
            Outcome::Filed(Filed {
                ticks: 16,
                late: 14,
                coalesced: 4,
                dropped: 5,
            })
        );
        // The broker stays away for another minute. Per clock 110..=160 s are filed, all late
        // but 160 s; the queue drops all it held for the 6 new ones; the outbox's ticks older
        // than the new cutoff (100 s), 30..=90 s, are coalesced into 90 s.
        let filed = registry.apply(intent_keeping_three(160_500, 160_000));
        assert_eq!(
            filed,
            Outcome::Filed(Filed {
                ticks: 12,
                late: 10,
                coalesced: 6,
                dropped: 6,
            })
        );
        assert_eq!(
            registry.ledger().counters,
            TickCounters {
                filed: 28,
                late: 24,
                coalesced: 10,
                dropped: 11,
            }
        );
        assert_eq!(
            outbox_ids(&registry),
            [
                "ra-90000",
                "ra-100000",
                "ra-110000",
                "ra-120000",
                "ra-130000",
                "ra-140000",
                "ra-150000",
                "ra-160000"
            ]
        );
        assert_eq!(
            queue_ids(&registry, &http),
            ["hc-140000", "hc-150000", "hc-160000"]
        );
    }

    /// The scenario of `intents_count_what_they_filed_late_coalesced_and_dropped` at `level`,
    /// then a pop of the http clock (retried once), a confirmation of two of the RabbitMQ
    /// clock's ticks (one stored, one returned), and a pause and resume of the http clock.
    fn outage_then_deliveries(level: Level) -> (Registry, Clock) {
        let mut registry = Registry::new();
        registry.apply_at(level, rabbit("r", "every.10.seconds", "ra", 0));
        let Outcome::Registered { clock: http, .. } =
            registry.apply_at(level, register("h", "every.10.seconds", "hc", NO_LIMIT))
        else {
            panic!("an http clock");
        };
        registry.apply_at(level, intent_keeping_three(100_500, 100_000));
        registry.apply_at(level, intent_keeping_three(160_500, 160_000));
        let Channel::Http { queue_id } = http.channel.clone() else {
            panic!("an http clock");
        };
        let pop = || Command::Pop {
            queue: queue_id.clone(),
            now_ms: 165_000,
            request: "p1".into(),
        };
        registry.apply_at(level, pop());
        registry.apply_at(level, pop());
        let key = |at: u64| (at, TickId::scheduled(&id("ra"), at));
        registry.apply_at(
            level,
            Command::Confirm {
                ticks: vec![key(90_000), key(100_000)],
                published_ms: vec![Some(165_000), None],
            },
        );
        for command in [
            Command::Pause {
                id: id("hc"),
                now_ms: 166_000,
            },
            Command::Resume {
                id: id("hc"),
                now_ms: 167_000,
            },
        ] {
            registry.apply_at(level, command);
        }
        (registry, http)
    }

    fn stats_of(registry: &Registry, clock: &str) -> ClockStats {
        registry
            .cursor(&id(clock))
            .map(|cursor| cursor.stats.get())
            .unwrap_or_else(|| panic!("clock {clock} has a cursor"))
    }

    #[test]
    fn tick_statistics_count_each_clocks_deliveries_and_missed_ticks() {
        let (registry, _) = outage_then_deliveries(Level::V0_2);
        // The RabbitMQ clock: 12 late (7 + 5), 2 coalesced by the first intent and 6 in the
        // outbox by the second; of the two settled ticks only the stored one is delivered,
        // published 75 s after its instant.
        let rabbit = stats_of(&registry, "ra");
        assert_eq!(
            (
                rabbit.delivered,
                rabbit.late,
                rabbit.coalesced,
                rabbit.dropped
            ),
            (1, 12, 8, 0)
        );
        assert_eq!(
            rabbit.last,
            Some(Delivery {
                due_at_ms: 90_000,
                lateness_ms: 75_000,
                manual: false,
            })
        );
        // The http clock: the pop returned its three ticks (the retry counts nothing), 25, 15
        // and 5 s late; its queue dropped 5 then 6; pause and resume kept the figures.
        let http = stats_of(&registry, "hc");
        assert_eq!(
            (http.delivered, http.late, http.coalesced, http.dropped),
            (3, 12, 2, 11)
        );
        assert_eq!(
            http.recent.iter().collect::<Vec<_>>(),
            vec![25_000, 15_000, 5_000]
        );
        assert_eq!(http.last.map(|last| last.lateness_ms), Some(5_000));
        // The series: one window per intent, and the deliveries in the second.
        let windows: Vec<SeriesBucket> = registry.ledger().series.buckets().copied().collect();
        assert_eq!(
            windows,
            vec![
                SeriesBucket {
                    start_ms: 100_000,
                    late: 14,
                    coalesced: 4,
                    dropped: 5,
                    ..SeriesBucket::default()
                },
                SeriesBucket {
                    start_ms: 160_000,
                    delivered: 4,
                    lateness_sum_ms: 120_000,
                    lateness_max_ms: 75_000,
                    late: 10,
                    coalesced: 6,
                    dropped: 6,
                },
            ]
        );
        // The figures travel in the snapshot.
        let reloaded = Registry::try_from(RegistrySnapshot::from(registry.clone()));
        assert_eq!(reloaded.as_ref(), Ok(&registry));
    }

    #[test]
    fn at_level_1_no_tick_statistics_are_kept() {
        let (registry, _) = outage_then_deliveries(Level::V0_1);
        assert!(stats_of(&registry, "ra").is_empty());
        assert!(stats_of(&registry, "hc").is_empty());
        assert_eq!(registry.ledger().series.buckets().count(), 0);
    }

    #[test]
    fn a_purged_clock_takes_its_statistics_and_a_restore_keeps_the_series() {
        let (mut registry, _) = outage_then_deliveries(Level::V0_2);
        let backup = RegistrySnapshot::from(registry.clone());
        registry.apply(Command::Purge {
            clocks: vec![id("ra"), id("hc")],
        });
        assert!(
            registry.is_empty(),
            "the clocks went, and their cursors with them"
        );
        let series_before: Vec<SeriesBucket> =
            registry.ledger().series.buckets().copied().collect();
        let mut restored = Registry::new();
        restored.apply(restore(backup, 170_000));
        assert_eq!(
            stats_of(&restored, "hc").delivered,
            3,
            "a clock's history is restored"
        );
        assert_eq!(
            restored.ledger().series.buckets().count(),
            0,
            "the restoring cluster's own (empty) series is kept"
        );
        assert_eq!(series_before.len(), 2);
    }

    #[test]
    fn pages_follow_the_id_order_from_after_the_last_id_seen() {
        let mut registry = Registry::new();
        for n in 0..5 {
            create(&mut registry, &format!("n{n}"), "@never", &format!("c{n}"));
        }
        let every = ClockFilter::default();
        let ids = |page: &[Clock]| -> Vec<String> {
            page.iter().map(|clock| clock.id.to_string()).collect()
        };
        let every = registry.select(every);
        let (first, more) = every.page(None, 2);
        assert_eq!((ids(&first), more), (vec!["c0".into(), "c1".into()], true));
        let (next, more) = every.page(Some(&id("c1")), 2);
        assert_eq!((ids(&next), more), (vec!["c2".into(), "c3".into()], true));
        let (last, more) = every.page(Some(&id("c3")), 2);
        assert_eq!((ids(&last), more), (vec!["c4".into()], false));
        // `after` need not name a clock (it may have been purged since).
        let (from_gone, _) = every.page(Some(&id("c10")), 10);
        assert_eq!(ids(&from_gone), ["c2", "c3", "c4"]);
        let named = ClockFilter::from_pairs([("name".to_string(), "n3".to_string())])
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(registry.select(named).page(None, 1).0.len(), 1);
        assert_eq!(every.matching(None).count(), 5);
    }

    #[test]
    fn a_selection_keeps_the_clocks_it_was_taken_with() {
        let mut registry = Registry::new();
        create(&mut registry, "kept", "@never", "c1");
        create(&mut registry, "gone", "@never", "c2");
        let every = registry.select(ClockFilter::default());
        let named = ClockFilter::from_pairs([("name".to_string(), "kept".to_string())])
            .unwrap_or_else(|error| panic!("{error}"));
        let kept = registry.select(named);
        create(&mut registry, "kept", "every.1.seconds", "c3");
        registry.apply(Command::Purge {
            clocks: vec![id("c2")],
        });
        registry.apply(Command::Pause {
            id: id("c1"),
            now_ms: 0,
        });
        let ids = |selection: &Selection| -> Vec<String> {
            selection
                .matching(None)
                .map(|clock| format!("{} {:?}", clock.id, clock.status))
                .collect()
        };
        assert_eq!(ids(&every), ["c1 Active", "c2 Active"]);
        assert_eq!(ids(&kept), ["c1 Active"]);
    }

    #[test]
    fn a_list_by_name_answers_what_a_pass_over_every_clock_answers() {
        let mut registry = Registry::new();
        // Ids out of name order, several schedules per name, a paused clock.
        let clocks = [
            ("orders", "@never", "c7"),
            ("orders", "every.1.seconds", "c2"),
            ("orders", "every.2.seconds", "c5"),
            ("invoices", "@never", "c3"),
            ("order", "@never", "c1"),
        ];
        for (name, literal, clock) in clocks {
            create(&mut registry, name, literal, clock);
        }
        registry.apply(Command::Pause {
            id: id("c5"),
            now_ms: 0,
        });
        let scan = |filter: &ClockFilter, after: Option<&ClockId>| -> Vec<String> {
            registry
                .clocks()
                .filter(|clock| after.is_none_or(|after| clock.id > *after))
                .filter(|clock| filter.matches(clock))
                .map(|clock| clock.id.to_string())
                .collect()
        };
        let filter = |pairs: &[(&str, &str)]| {
            ClockFilter::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
                .unwrap_or_else(|error| panic!("{error}"))
        };
        for pairs in [
            vec![("name", "orders")],
            vec![("name", "orders"), ("status", "ACTIVE")],
            vec![("name", "orders"), ("schedule", "@never")],
            vec![("name", "order")],
            vec![("name", "receipts")],
            vec![("name", "!orders")],
        ] {
            let filter = filter(&pairs);
            for after in [None, Some(id("c2")), Some(id("c6"))] {
                let listed: Vec<String> = registry
                    .select(filter.clone())
                    .matching(after.as_ref())
                    .map(|clock| clock.id.to_string())
                    .collect();
                assert_eq!(
                    listed,
                    scan(&filter, after.as_ref()),
                    "{pairs:?} after {after:?}"
                );
            }
        }
        let (page, more) = registry.select(filter(&[("name", "orders")])).page(None, 2);
        let ids: Vec<String> = page.iter().map(|clock| clock.id.to_string()).collect();
        assert_eq!(
            (ids, more),
            (vec!["c2".to_string(), "c5".to_string()], true)
        );
    }

    #[test]
    fn pause_keeps_the_tick_due_at_its_own_instant() {
        let mut registry = Registry::new();
        registry.apply(rabbit("a", "every.1.seconds", "ra", 0));
        registry.apply(intent(3_000, 2_000));
        registry.apply(Command::Pause {
            id: id("ra"),
            now_ms: 2_000,
        });
        // 2 s is due when the pause is applied, not after it: its consumer still gets it.
        assert_eq!(outbox_ids(&registry), ["ra-1000", "ra-2000"]);
    }

    #[test]
    fn confirm_counts_each_tick_it_removes_once() {
        let mut registry = Registry::new();
        registry.apply(rabbit("a", "every.1.seconds", "ra", 0));
        registry.apply(intent(3_000, 2_500));
        let key = |at: u64| (at, TickId::scheduled(&id("ra"), at));
        let confirmed = registry.apply(Command::Confirm {
            ticks: vec![key(1_000), key(2_000), key(2_000), key(9_000)],
            published_ms: Vec::new(),
        });
        assert_eq!(confirmed, Outcome::Confirmed { count: 2 });
        assert_eq!(outbox_ids(&registry), ["ra-3000"]);
    }

    #[test]
    fn purge_withdraws_the_outbox_ticks_of_the_purged_clocks_only() {
        let mut registry = Registry::new();
        registry.apply(rabbit("gone", "every.1.seconds", "rg", 0));
        registry.apply(rabbit("kept", "every.1.seconds", "rk", 0));
        registry.apply(intent(2_000, 1_500));
        let purged = registry.apply(Command::Purge {
            clocks: vec![id("rg")],
        });
        assert_eq!(
            purged,
            Outcome::Purged {
                clocks: vec![id("rg")]
            }
        );
        assert_eq!(outbox_ids(&registry), ["rk-1000", "rk-2000"]);
        assert!(registry.cursor(&id("rg")).is_none());
        assert!(registry.cursor(&id("rk")).is_some());
    }

    /// The second hostile probe's N9: a scheduled tick filed twice in a queue was restored,
    /// and delivered once per copy.
    #[test]
    fn a_backup_that_files_one_tick_twice_is_refused() {
        let mut source = Registry::new();
        create(&mut source, "h", "every.1.seconds", "hq");
        source.apply(intent(3_000, 2_500));
        let mut snapshot: RegistrySnapshot = source.into();
        assert_eq!(snapshot.validate_for_restore(2_500), Ok(()));
        let queues = &mut snapshot.ledger.ticks.queues;
        let (queue_id, mut queue) = queues
            .iter()
            .find(|(_, queue)| !queue.is_empty())
            .map(|(queue_id, queue)| (queue_id.clone(), queue.clone()))
            .expect("the intent filed ticks");
        queue.push_back(queue[0].clone());
        queues.insert(queue_id, queue);
        let refused = snapshot
            .validate_for_restore(2_500)
            .expect_err("a tick twice");
        assert!(refused.to_string().contains("appears twice"), "{refused}");
    }

    #[test]
    fn a_restore_whose_document_is_not_a_registry_is_rejected_and_changes_nothing() {
        let mut target = Registry::new();
        let garbage: RestoreDocument = serde_json::from_str("{\"clocks\": 7}").expect("JSON text");
        let outcome = target.apply(Command::Restore {
            snapshot: garbage,
            now_ms: 0,
            max_clocks: NO_LIMIT,
        });
        assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
        assert!(target.is_empty());
    }

    #[test]
    fn restore_accepts_a_backup_of_exactly_the_limit() {
        let mut target = Registry::new();
        let at_the_limit = Command::Restore {
            snapshot: document(&backed_up().into()),
            now_ms: 0,
            max_clocks: 2,
        };
        assert_eq!(target.apply(at_the_limit), Outcome::Restored { clocks: 2 });
        assert_eq!(target.len(), 2);
    }

    #[test]
    fn restore_joins_the_backup_counters_to_the_clusters_own() {
        let source = backed_up();
        assert_eq!(
            source.ledger().counters,
            TickCounters {
                filed: 3,
                late: 2,
                coalesced: 0,
                dropped: 0,
            }
        );
        // The restoring cluster ticked a clock of its own, manually and on schedule, and
        // purged it: it holds no clock but has a history.
        let mut target = Registry::new();
        target.apply(rabbit("old", "every.1.seconds", "ro", 0));
        target.apply(Command::Tick {
            id: id("ro"),
            now_ms: 500,
        });
        target.apply(intent(2_000, 2_000));
        target.apply(Command::Purge {
            clocks: vec![id("ro")],
        });
        assert_eq!(
            target.ledger().counters,
            TickCounters {
                filed: 3,
                late: 1,
                coalesced: 0,
                dropped: 0,
            }
        );
        assert_eq!(
            target.apply(restore(source.into(), 3_000)),
            Outcome::Restored { clocks: 2 }
        );
        assert_eq!(
            target.ledger().counters,
            TickCounters {
                filed: 6,
                late: 3,
                coalesced: 0,
                dropped: 0,
            }
        );
        assert_eq!(target.ledger().manual_sequence, 1);
    }

    #[test]
    fn command_kinds_name_each_command_for_spans_and_metrics() {
        let clock = id("c");
        let queue = QueueId::new("q".to_owned());
        let cases = [
            (register("n", "@never", "c", NO_LIMIT), "register"),
            (
                Command::Pause {
                    id: clock.clone(),
                    now_ms: 0,
                },
                "pause",
            ),
            (
                Command::Resume {
                    id: clock.clone(),
                    now_ms: 0,
                },
                "resume",
            ),
            (
                Command::Tick {
                    id: clock.clone(),
                    now_ms: 0,
                },
                "tick",
            ),
            (intent(0, 0), "intend"),
            (
                Command::Confirm {
                    ticks: Vec::new(),
                    published_ms: Vec::new(),
                },
                "confirm",
            ),
            (
                Command::Pop {
                    queue: queue.clone(),
                    now_ms: 0,
                    request: "r".to_owned(),
                },
                "pop",
            ),
            (
                Command::Touch {
                    queues: vec![queue],
                    now_ms: 0,
                },
                "touch",
            ),
            (
                Command::Purge {
                    clocks: vec![clock],
                },
                "purge",
            ),
            (restore(RegistrySnapshot::default(), 0), "restore"),
            (Command::Batch(Vec::new()), "batch"),
        ];
        for (command, kind) in cases {
            assert_eq!(command.kind(), kind, "{command:?}");
        }
    }

    /// Restores `snapshot` into an empty registry at 10 000 ms and returns the refusal's
    /// reason, failing the test if it was restored.
    fn refusal(snapshot: RegistrySnapshot) -> String {
        let mut target = Registry::new();
        match target.apply(restore(snapshot.clone(), 10_000)) {
            Outcome::Rejected { reason } => {
                assert!(target.is_empty(), "a refused restore changes nothing");
                let checked = snapshot.validate_for_restore(10_000).err();
                assert_eq!(
                    checked.map(|error| error.to_string()),
                    Some(reason.clone()),
                    "the API's check and apply agree"
                );
                reason
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn restore_refuses_watermarks_and_counters_no_cluster_reaches() {
        let mut snapshot: RegistrySnapshot = backed_up().into();
        snapshot.ledger.ticks.intended_through_ms = u64::MAX;
        let reason = refusal(snapshot);
        assert!(reason.starts_with("ledger.intended_through_ms is 18446744073709551615"));
        let mut snapshot: RegistrySnapshot = backed_up().into();
        snapshot.ledger.ticks.intended_through_ms = 10_000 + MAX_LOOKAHEAD_MS;
        assert!(
            snapshot.validate_for_restore(10_000).is_ok(),
            "the look-ahead itself is allowed"
        );
        let mut snapshot: RegistrySnapshot = backed_up().into();
        snapshot.ledger.ticks.manual_sequence = u64::MAX;
        assert!(refusal(snapshot).starts_with("ledger.manual_sequence is 18446744073709551615"));
    }

    #[test]
    fn restore_refuses_ids_names_and_channels_a_registration_would_not_produce() {
        let mutate = |change: &dyn Fn(&mut Clock)| {
            let mut snapshot: RegistrySnapshot = backed_up().into();
            if let Some(clock) = snapshot.clocks.iter_mut().find(|c| c.id == id("hc")) {
                change(clock);
            }
            refusal(snapshot)
        };
        let short_queue = mutate(&|clock| {
            clock.channel = Channel::Http {
                queue_id: QueueId::new("1".into()),
            }
        });
        assert!(
            short_queue.starts_with("clock hc: channel.queue_id: invalid queue id \"1\""),
            "{short_queue}"
        );
        let long_name = mutate(&|clock| clock.name = "n".repeat(5_000).into());
        assert!(
            long_name.starts_with("clock hc: invalid clock name: it is 5000 bytes long"),
            "{long_name}"
        );
        let path = mutate(&|clock| clock.id = id("../../etc"));
        assert!(
            path.starts_with("clock #") && path.contains("contains '.'"),
            "{path}"
        );
        let pending = mutate(&|clock| clock.status = ClockStatus::Pending);
        assert!(pending.contains("PENDING"), "{pending}");
    }

    #[test]
    fn restore_refuses_ticks_and_cursors_of_clocks_it_does_not_hold() {
        let mut snapshot: RegistrySnapshot = backed_up().into();
        snapshot.ledger.cursors.remove(&id("ra"));
        assert!(refusal(snapshot).contains("ledger.cursors"));
        let mut snapshot: RegistrySnapshot = backed_up().into();
        let first = snapshot.ledger.ticks.outbox.keys().next().cloned();
        if let Some(tick) = first.and_then(|key| snapshot.ledger.ticks.outbox.get_mut(&key)) {
            tick.id = TickId::scheduled(&id("ra"), 1);
        }
        assert!(refusal(snapshot).starts_with("ledger.outbox: tick"));
        let mut snapshot: RegistrySnapshot = backed_up().into();
        snapshot
            .ledger
            .ticks
            .queues
            .insert(queue_for("nobody"), Default::default());
        assert!(refusal(snapshot).starts_with("ledger.queues holds queue"));
    }

    #[test]
    fn a_manual_tick_past_the_last_sequence_number_is_refused_not_an_overflow() {
        for last in [MAX_MANUAL_SEQUENCE, u64::MAX] {
            // A registry loaded from a Raft snapshot is not validated as a backup is: apply
            // must stay safe with any counter.
            let mut snapshot: RegistrySnapshot = backed_up().into();
            snapshot.ledger.ticks.manual_sequence = last;
            let mut registry = Registry::try_from(snapshot).unwrap_or_default();
            let before = registry.clone();
            let outcome = registry.apply(Command::Tick {
                id: id("hc"),
                now_ms: 5_000,
            });
            assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
            assert_eq!(registry, before);
        }
    }

    #[test]
    fn manual_ticks_waiting_for_the_broker_are_refused_past_the_queue_limit() {
        let mut registry = Registry::new();
        registry.apply(rabbit("r", "@never", "ra", 0));
        registry.apply(rabbit("s", "@never", "rs", 0));
        registry.apply(intent_keeping_three(1_000, 1_000));
        let tick = |registry: &mut Registry, clock: &str, now_ms| {
            registry.apply(Command::Tick {
                id: id(clock),
                now_ms,
            })
        };
        for now_ms in 0..3 {
            assert!(matches!(
                tick(&mut registry, "ra", now_ms),
                Outcome::Updated(_)
            ));
        }
        let before = registry.clone();
        let refused = tick(&mut registry, "ra", 3);
        assert!(
            matches!(&refused, Outcome::Rejected { reason } if reason.contains("3 manual ticks")),
            "{refused:?}"
        );
        assert_eq!(registry, before, "a refused tick changes nothing");
        // The limit is per clock, and a confirmation makes room again.
        assert!(matches!(tick(&mut registry, "rs", 4), Outcome::Updated(_)));
        let first = registry
            .ledger()
            .outbox
            .iter()
            .find(|(_, tick)| tick.clock == id("ra"))
            .map(|(key, _)| key.clone())
            .expect("a waiting manual tick");
        registry.apply(Command::Confirm {
            ticks: vec![first],
            published_ms: Vec::new(),
        });
        assert!(matches!(tick(&mut registry, "ra", 5), Outcome::Updated(_)));
    }

    #[test]
    fn at_level_1_commands_apply_as_v0_1_0_applied_them() {
        let v0_1 = Level::V0_1;
        let mut registry = Registry::new();
        registry.apply_at(v0_1, rabbit("r", "@never", "ra", 0));
        let http = match registry.apply_at(v0_1, register("h", "@never", "hc", NO_LIMIT)) {
            Outcome::Registered { clock, .. } => clock,
            other => panic!("a registration: {other:?}"),
        };
        registry.apply_at(v0_1, intent_keeping_three(1_000, 1_000));
        // Manual ticks: no cap on those waiting for the broker, none on an http queue.
        for (clock, now_ms) in [("ra", 0), ("hc", 0)].repeat(5).into_iter().zip(0..) {
            let ticked = registry.apply_at(
                v0_1,
                Command::Tick {
                    id: id(clock.0),
                    now_ms,
                },
            );
            assert!(matches!(ticked, Outcome::Updated(_)), "{ticked:?}");
        }
        let waiting = |registry: &Registry| {
            registry
                .ledger()
                .queues
                .get(&queue_for("hc"))
                .map(std::collections::VecDeque::len)
        };
        assert_eq!(waiting(&registry), Some(5), "kept past the limit of 3");
        assert_eq!(registry.ledger().outbox.len(), 5);
        // A proposed queue id already in use is taken, as v0.1.0 takes it.
        let twin = Command::Register {
            name: "twin".to_owned(),
            schedule: schedule("@never"),
            id: id("tw"),
            channel: http.channel.clone(),
            max_clocks: NO_LIMIT,
            now_ms: 2_000,
        };
        assert!(matches!(
            registry.clone().apply_at(v0_1, twin.clone()),
            Outcome::Registered { created: true, .. }
        ));
        assert!(matches!(
            registry.clone().apply(twin),
            Outcome::Rejected { .. }
        ));
        // A registration stamped far behind the watermark files every instant since its
        // stamp, where level 2 files one look-ahead window.
        let mut far = Registry::new();
        far.apply_at(v0_1, intent(MAX_LOOKAHEAD_MS * 3, MAX_LOOKAHEAD_MS * 3));
        let mut bounded = far.clone();
        let stale = rabbit("s", "every.1.seconds", "st", 0);
        far.apply_at(v0_1, stale.clone());
        bounded.apply(stale);
        assert!(far.ledger().outbox.len() > bounded.ledger().outbox.len());
    }

    #[test]
    fn manual_ticks_on_a_paused_http_clock_obey_the_queue_limit() {
        let mut registry = Registry::new();
        let clock = create(&mut registry, "h", "every.1.seconds", "hc");
        registry.apply(Command::Pause {
            id: clock.id.clone(),
            now_ms: 0,
        });
        // Before any intent the default limit holds; after one, the configured limit.
        for now_ms in 0..1_500 {
            registry.apply(Command::Tick {
                id: clock.id.clone(),
                now_ms,
            });
        }
        let queue = queue_for("hc");
        let waiting = |registry: &Registry| registry.ledger().queues.get(&queue).map(|q| q.len());
        let default = usize::try_from(crate::ticks::DEFAULT_QUEUE_LIMIT).unwrap_or(usize::MAX);
        assert_eq!(waiting(&registry), Some(default));
        registry.apply(intent_keeping_three(2_000, 2_000));
        for now_ms in 2_000..22_000 {
            registry.apply(Command::Tick {
                id: clock.id.clone(),
                now_ms,
            });
        }
        assert_eq!(waiting(&registry), Some(3));
        assert_eq!(registry.ledger().counters.dropped, 21_500 - 3);
        match registry.apply(Command::Pop {
            queue,
            now_ms: 30_000,
            request: "r".into(),
        }) {
            Outcome::Popped(ticks) => {
                let ids: Vec<&str> = ticks.iter().map(|t| t.id.as_str()).collect();
                assert_eq!(
                    ids,
                    ["hc-m21497", "hc-m21498", "hc-m21499"],
                    "the newest stay"
                );
            }
            other => panic!("expected a pop, got {other:?}"),
        }
    }

    #[test]
    fn a_registration_far_behind_a_wild_watermark_files_one_window_at_most() {
        let mut registry = Registry::new();
        // An intent stamped at the end of time moves the watermark there, but no further
        // than its look-ahead.
        registry.apply(Command::Intend(Intent {
            through_ms: u64::MAX,
            now_ms: u64::MAX - 1,
            catch_up_ms: u64::MAX,
            queue_limit: u64::MAX,
        }));
        assert_eq!(registry.ledger().intended_through_ms, u64::MAX);
        registry.apply(rabbit("late", "every.1.seconds", "rl", 0));
        let filed = registry.ledger().outbox.len();
        let window = MAX_LOOKAHEAD_MS / 1_000;
        assert!(
            filed <= usize::try_from(window).unwrap_or(usize::MAX),
            "{filed}"
        );
    }

    /// The due index against the full scan it replaced, kept here as the oracle: for any
    /// sequence of registrations, pauses, resumes, manual ticks, pops, purges, restores and
    /// intents, a registry whose intents visit only the indexed clocks and one whose intents
    /// visit every active clock reach the same state and outcomes, and the index built up
    /// command by command equals one rebuilt from scratch.
    mod due_index_oracle {
        use proptest::prelude::*;

        use super::*;

        const SCHEDULES: [&str; 5] = [
            "every.1.seconds",
            "every.2.seconds",
            "every.3.seconds",
            "every.1.minutes",
            "@never",
        ];

        #[derive(Clone, Debug)]
        enum Step {
            Apply(Box<Command>),
            /// Restores the backup of `backed_up()` (refused unless the registry is empty).
            Restore(u64),
        }

        fn apply(command: Command) -> Step {
            Step::Apply(Box::new(command))
        }

        fn clock_id() -> impl Strategy<Value = ClockId> {
            (0..4u8).prop_map(|n| id(&format!("c{n}")))
        }

        fn instant() -> impl Strategy<Value = u64> {
            0..200_000u64
        }

        fn step() -> impl Strategy<Value = Step> {
            let register = (0..4u8, 0..SCHEDULES.len(), any::<bool>(), instant()).prop_map(
                |(n, schedule, rabbit, now_ms)| {
                    let literal = SCHEDULES[schedule];
                    let proposed = format!("c{n}");
                    let name = format!("n{n}");
                    let mut command = register(&name, literal, &proposed, NO_LIMIT);
                    if let Command::Register {
                        channel,
                        now_ms: at,
                        ..
                    } = &mut command
                    {
                        *at = now_ms;
                        if rabbit {
                            *channel = Channel::Rabbit;
                        }
                    }
                    apply(command)
                },
            );
            // Instants are whole seconds: half of the intents start or end on one, where a
            // window's bounds matter.
            let now = prop_oneof![instant(), instant().prop_map(|at| at / 1_000 * 1_000)];
            let ahead = prop_oneof![0..3_000u64, Just(0u64), Just(1_000), Just(2_000)];
            let catch_up = prop_oneof![Just(0u64), Just(2_000), Just(60_000)];
            let intent = (now, ahead, catch_up, 1..5u64).prop_map(
                |(now_ms, ahead, catch_up_ms, queue_limit)| {
                    apply(Command::Intend(Intent {
                        through_ms: now_ms + ahead,
                        now_ms,
                        catch_up_ms,
                        queue_limit,
                    }))
                },
            );
            prop_oneof![
                3 => register,
                1 => (clock_id(), instant()).prop_map(|(id, now_ms)| apply(Command::Pause { id, now_ms })),
                1 => (clock_id(), instant()).prop_map(|(id, now_ms)| apply(Command::Resume { id, now_ms })),
                1 => (clock_id(), instant()).prop_map(|(id, now_ms)| apply(Command::Tick { id, now_ms })),
                1 => (0..4u8, instant()).prop_map(|(n, now_ms)| apply(Command::Pop {
                    queue: queue_for(&format!("c{n}")),
                    now_ms,
                    request: format!("r{now_ms}"),
                })),
                1 => proptest::collection::vec(clock_id(), 0..4)
                    .prop_map(|clocks| apply(Command::Purge { clocks })),
                1 => instant().prop_map(Step::Restore),
                6 => intent,
            ]
        }

        /// Applies `step`; `scan` makes intents visit every active clock, as before the index.
        fn run(registry: &mut Registry, step: &Step, scan: bool) -> Outcome {
            let command = match step {
                Step::Apply(command) => (**command).clone(),
                Step::Restore(now_ms) => restore(RegistrySnapshot::from(backed_up()), *now_ms),
            };
            match (command, scan) {
                (Command::Intend(intent), true) => {
                    let active: Vec<ClockId> = registry
                        .clocks()
                        .filter(|clock| clock.status == ClockStatus::Active)
                        .map(|clock| clock.id.clone())
                        .collect();
                    Outcome::Filed(registry.intend_for(Level::V0_2, &intent, &active))
                }
                (command, _) => registry.apply(command),
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(
                std::env::var("PROPTEST_CASES")
                    .ok()
                    .and_then(|cases| cases.parse().ok())
                    .unwrap_or(64)
            ))]
            #[test]
            fn the_index_files_exactly_what_the_full_scan_files(
                steps in proptest::collection::vec(step(), 1..60)
            ) {
                let mut indexed = Registry::new();
                let mut scanned = Registry::new();
                for step in &steps {
                    let by_index = run(&mut indexed, step, false);
                    let by_scan = run(&mut scanned, step, true);
                    prop_assert_eq!(&by_index, &by_scan, "{:?}", step);
                    prop_assert_eq!(&indexed, &scanned, "{:?}", step);
                    let rebuilt = Registry::try_from(RegistrySnapshot::from(indexed.clone()));
                    prop_assert_eq!(rebuilt.as_ref(), Ok(&indexed), "{:?}", step);
                }
            }
        }
    }
}
