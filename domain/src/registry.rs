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
//!
//! The module is split by concern. [`command`] is the command language ([`Command`],
//! [`Outcome`]), a wire format every release must decode alike; [`apply`] is the transition,
//! what each command does; this file is the store: the [`Registry`] with its indexes, the
//! queries the API and the engine read it by, and its snapshot forms ([`RegistrySnapshot`],
//! [`RegistryImage`]) with their serialization.

mod apply;
mod command;
#[cfg(test)]
mod tests;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

pub use apply::{
    calendar_needs_level, leases_need_level, overlap_fits, overlap_needs_level, webhooks_need_level,
};
pub use command::{Command, Outcome};

use crate::clock::{Channel, Clock, ClockId, ClockStatus, QueueId};
use crate::clocks_stamp::ClocksStamp;
use crate::due_index::DueIndex;
use crate::filter::ClockFilter;
use crate::ledger_snapshot::CursorSink;
use crate::ledger_snapshot::{LedgerSnapshot, LedgerView};
use crate::literals::Literals;
use crate::load::Loader;
use crate::pair_index::PairIndex;
use crate::queue_index::QueueIndex;
use crate::records::ClockRecords;
use crate::schedule::Schedule;
use crate::selection::Selection;
use crate::ticks::{Cursor, TickLedger};

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

    // The store's bookkeeping of its indexes, shared by the transition (`apply`, a child module,
    // sees these private methods) and the snapshot loader.

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
