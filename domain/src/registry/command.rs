//! The command language of the registry: the [`Command`]s proposed through Raft and the
//! [`Outcome`]s applying them returns, with their serialized shapes.
//!
//! Separate from the transition ([`super::apply`]) because it is a wire format as much as code:
//! every command is a log entry that every release of the cluster must decode alike (a kind
//! this binary does not know, [`Command::KINDS`], is a newer binary's), and its serde shape
//! may change only with a cluster level ([`crate::level`]). Reading what a command is, and
//! what it may answer, should not mean reading how it is applied.

use serde::{Deserialize, Serialize};

use crate::clock::{Channel, Clock, ClockId, QueueId};
use crate::leases::{LeasedTick, Receipt, RefusedReceipt};
use crate::level::Level;
use crate::overlap::Overlap;
use crate::restore_document::RestoreDocument;
use crate::schedule::Schedule;
use crate::ticks::{Filed, Intent, Tick, TickId};

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
        /// The new clock's overlap control (SPEC §5a); written only when not
        /// [`Overlap::Allow`], and refused below cluster level 3.
        overlap: Overlap,
    },
    /// Stop the clock's scheduled ticks: none due after `now_ms` is delivered.
    ///
    /// `request` makes a retry harmless: a pause whose `request` the clock's latest requests
    /// carried changes nothing, so that a retry committed after another client's resume does
    /// not undo it (`crate::retries`).
    Pause {
        /// The clock to pause.
        id: ClockId,
        /// The proposer's clock.
        now_ms: u64,
        /// A random id of this request, drawn by the proposing node; written only from cluster
        /// level 3, which applies it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<String>,
    },
    /// Restart the clock's scheduled ticks at the first instant after `now_ms`.
    ///
    /// `request` makes a retry harmless, as [`Command::Pause`]'s does.
    Resume {
        /// The clock to resume.
        id: ClockId,
        /// The proposer's clock.
        now_ms: u64,
        /// A random id of this request, as [`Command::Pause`]'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<String>,
    },
    /// Deliver one manual tick to the clock now, whatever its status or schedule.
    ///
    /// `request` makes a retry harmless: applying a tick whose `request` the clock's latest
    /// manual ticks carried files nothing (`crate::retries`).
    Tick {
        /// The clock to tick.
        id: ClockId,
        /// The proposer's clock: the tick's `scheduled_at`.
        now_ms: u64,
        /// A random id of this request, drawn by the proposing node; written only from cluster
        /// level 3, which applies it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<String>,
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
        /// For each of `ticks`, in the same order: how many attempts the leader made, the last
        /// of which delivered it (or gave it up, if `published_ms` says `None` for a webhook
        /// clock). Empty when every tick took one attempt, as every tick of a release without
        /// webhooks did; ignored unless it has one entry per tick.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attempts: Vec<u32>,
        /// For each of `ticks`, in the same order: for a tick of a clock with overlap control
        /// (SPEC §5a), the leader's clock when the publisher settled it (its receiver's 2xx,
        /// or its giving up); `None` for the others. The clock's instants due by then fell due
        /// while it was unacknowledged (`crate::overlap`). Empty when no tick is of such a
        /// clock, as before overlap control; applied from level 3 and ignored unless it has
        /// one entry per tick.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        settled_ms: Vec<Option<u64>>,
    },
    /// A poll of an http queue: remove and return the ticks due at `now_ms`.
    ///
    /// `request` makes a retry harmless: when a forwarded pop's answer is lost, the proposing
    /// node sends the same command again, and applying a pop whose `request` equals the queue's
    /// last one returns that pop's ticks again instead of removing the next ones (which would
    /// lose the first batch). From level 3 so does one whose `request` is that of an earlier
    /// pop the queue keeps (`crate::ticks::EARLIER_POPS_KEPT`): another poller may pop the
    /// queue between a pop and its retry.
    Pop {
        /// The queue polled.
        queue: QueueId,
        /// The polling node's clock.
        now_ms: u64,
        /// A random id of this poll, drawn by the proposing node.
        request: String,
    },
    /// A lease of an http queue: hand out at most `max` ticks available at `now_ms`, hidden
    /// from other pollers until `until_ms`, under receipts of `token` (see [`crate::leases`]).
    ///
    /// A retry needs no replay record, unlike a pop's: the token names the lease, and a lease
    /// whose token is in use answers the ticks that lease holds and leases nothing more.
    Lease {
        /// The queue polled.
        queue: QueueId,
        /// The earliest the majority's time may be at the polling node: what the ticks'
        /// instants and the deadlines of earlier leases are compared with.
        now_ms: u64,
        /// The lease's deadline: the latest the majority's time may be at the polling node,
        /// plus the visibility time asked for.
        until_ms: u64,
        /// The most ticks to hand out, 1 to [`crate::leases::MAX_LEASE_TICKS`].
        max: u32,
        /// The lease's token, drawn by the polling node: its receipts are `<token>.<n>`.
        token: String,
        /// A tick handed out this many times whose last lease ran out is given up instead
        /// (`max_deliveries` of the cluster file).
        max_deliveries: u32,
    },
    /// An ack of leased ticks: remove those of `receipts` whose lease has not run out at
    /// `now_ms`.
    ///
    /// A retry is harmless: a receipt an ack honoured is remembered until its deadline, and
    /// presented again it is answered as acked again.
    Ack {
        /// The queue the receipts were issued for.
        queue: QueueId,
        /// The receipts, at most [`crate::leases::MAX_ACK_RECEIPTS`].
        receipts: Vec<Receipt>,
        /// The earliest the majority's time may be at the acking node.
        now_ms: u64,
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
        "Register", "Pause", "Resume", "Tick", "Intend", "Confirm", "Pop", "Lease", "Ack", "Touch",
        "Purge", "Restore", "Batch", "SetLevel",
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
            Command::Lease { .. } => "lease",
            Command::Ack { .. } => "ack",
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
    /// The ticks a lease handed out, oldest first.
    Leased(Vec<LeasedTick>),
    /// A lease was refused: the queue holds [`crate::leases::MAX_OPEN_LEASES`] leases whose
    /// deadline has not passed; nothing changed.
    LeasesFull {
        /// The number of open leases.
        open: u64,
    },
    /// What an ack honoured: how many receipts, and the receipts it refused, in the order
    /// given.
    Acked {
        /// The receipts honoured: ticks removed by this ack, and receipts an earlier ack
        /// honoured before their deadline.
        acked: u64,
        /// The receipts refused, with their reasons.
        refused: Vec<RefusedReceipt>,
    },
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
