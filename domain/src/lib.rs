//! tickd's domain: schedules, clocks and the clock registry, as a pure and
//! deterministic state machine.
//!
//! # Role
//!
//! tickd replicates its clock registry through Raft: every node appends the
//! same [`Command`]s to its log and applies them, in log order, to its own
//! [`Registry`]. For the replicas to agree, [`Registry::apply`] must compute
//! the same [`Outcome`] and the same next state on every node, today and after
//! a replay from a snapshot. This crate is that state machine and the types it
//! speaks, and nothing else:
//!
//! - [`Schedule`] parses and checks schedule literals (`every.5.seconds`,
//!   `@never`) and computes their epoch-aligned tick instants.
//! - [`Clock`] and its parts ([`ClockId`], [`ClockStatus`], [`Channel`],
//!   [`QueueId`]) are the resources the API shows; [`validate_name`] bounds
//!   names so RabbitMQ queue names stay within 255 bytes.
//! - [`Registry`] holds the clocks and applies [`Command`]s; applying any command returns,
//!   with bounded work and bounded state (see the bounds in the `ticks` module and
//!   [`RegistrySnapshot::validate_for_restore`] for restored backups).
//! - [`stats`] keeps what became of each clock's ticks and the cluster's recent deliveries.
//! - [`ClockFilter`] is the list query of `GET /api/v1/clocks`; [`Selection`] the clocks it
//!   selects, taken from the registry to be walked off the state's lock.
//! - [`leases`] hands http-queue ticks out under receipts until an ack, for delivery at least
//!   once over HTTP; [`overlap`] skips the instants that fall due while a clock's previous
//!   tick is unacknowledged, for the clocks that ask.
//! - [`webhook`] holds the webhook channel's receiver URLs, signing secrets and signatures,
//!   and the rule of which addresses a tick may be sent to.
//! - [`Level`] says which command kinds a cluster's log may carry, so that a rolling upgrade
//!   never hands a node a command its binary cannot decode.
//!
//! # Invariants
//!
//! - **Pure.** Nothing here reads a clock, draws a random number, does I/O or
//!   awaits. Whatever is non-deterministic (clock ids, queue ids, the
//!   current time, configured limits) is decided by the proposing node and
//!   carried inside the command.
//! - **Refusals are outcomes.** An unknown id, a reached limit or an invalid
//!   name is a valid, deterministic result of applying a command
//!   ([`Outcome::NotFound`], [`Outcome::LimitReached`], [`Outcome::Rejected`]),
//!   never a panic or an error that a replica could handle differently.
//! - **One clock per (name, schedule literal) pair**, whatever the number of
//!   concurrent registrations: the first applied creates it, the others join
//!   it.
//! - **Deterministic order.** Clocks are kept in an ordered set by id, so lists
//!   and snapshots come out in the same order on every node.
//! - **Cheap images.** The replicated maps are persistent ([`SharedMap`]): an image of the
//!   registry ([`Registry::image`]) costs O(1) and stays as it was while the registry goes
//!   on changing, so a snapshot is encoded without stopping the state machine.
//! - **No panics on input.** Parsing and instant arithmetic are checked; the
//!   crate has no `unwrap` outside tests.
//!
//! # Neighbours
//!
//! The Raft state machine (`tickd-raft`) applies commands and snapshots the
//! registry through its serde form; the REST API (`tickd-api`) parses
//! schedules, names and list queries with this crate before proposing, maps
//! its errors to 400s and outcomes to responses; the tick engine computes due
//! instants with [`Schedule::next_instant_after`] and
//! [`Schedule::instants_in`] from a `now` it is given.

mod clock;
mod clocks_stamp;
mod compact_id;
mod due_index;
mod excerpt;
mod filter;
mod key_hash;
pub mod leases;
mod ledger_snapshot;
pub mod level;
mod literals;
mod load;
pub mod overlap;
mod packed_set;
mod pair_index;
mod queue_index;
mod records;
mod registry;
mod restore;
mod restore_document;
mod retries;
mod schedule;
mod selection;
mod shared_map;
pub mod stats;
mod ticks;
pub mod webhook;
mod wire_form;

pub use clock::{
    Channel, Clock, ClockId, ClockStatus, IdError, MAX_ID_BYTES, MAX_NAME_BYTES,
    MIN_QUEUE_ID_BYTES, NameError, QueueId, StatusError, validate_name,
};
pub use clocks_stamp::ClocksStamp;
pub use compact_id::IdText;
pub use excerpt::{EXCERPT_CHARS, Excerpt};
pub use filter::{ClockFilter, Criterion, FilterError};
pub use leases::{AckRefusal, LeasedMessage, LeasedTick, Receipt, RefusedReceipt};
pub use ledger_snapshot::LedgerSnapshot;
pub use level::{Level, Levels};
pub use overlap::{Overlap, OverlapError};
pub use registry::{
    Command, Outcome, Registry, RegistryImage, RegistrySnapshot, SnapshotError,
    calendar_needs_level, leases_need_level, overlap_fits, overlap_needs_level,
    webhooks_need_level,
};
pub use restore::RestoreError;
pub use restore_document::RestoreDocument;
pub use schedule::zones::database_version as zone_database_version;
pub use schedule::{
    Dst, LAST_ALIGNED_INPUT_MS, MAX_CALENDAR_BYTES, MAX_COUNTED_INSTANTS, MAX_INTERVAL_MS,
    MAX_LITERAL_BYTES, Schedule, ScheduleError,
};
pub use selection::Selection;
pub use shared_map::{KeyChange, SharedMap, key_changes};
pub use stats::{ClockStats, Delivery, DeliverySeries, SeriesBucket, StatsSlot};
pub use ticks::{
    Cursor, DEFAULT_QUEUE_LIMIT, EARLIER_POPS_KEPT, Filed, Intent, MAX_CATCH_UP_MS,
    MAX_LOOKAHEAD_MS, MAX_MANUAL_SEQUENCE, MAX_POP_TICKS, PopReplay, PoppedTick, Tick,
    TickCounters, TickId, TickLedger, TickMessage, rfc3339_millis,
};
pub use webhook::{Webhook, WebhookSecret, WebhookUrl};
pub use wire_form::WrittenClocks;
