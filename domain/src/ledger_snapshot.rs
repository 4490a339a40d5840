//! The tick ledger as snapshots and backups hold it: the ledger's own fields and, among them,
//! `cursors`, each clock's cursor by its id.
//!
//! A live registry keeps a clock's cursor in the clock's record ([`crate::records`]), not in
//! the ledger. The serialized form keeps the shape it has always had, so that every release
//! reads every other's snapshots and backups: serializing writes the cursors from wherever
//! they are kept ([`LedgerView`]), and deserializing hands each cursor, as it is read, to a
//! [`CursorSink`]: a map for a backup ([`LedgerSnapshot`]), the records of the registry being
//! loaded for a snapshot (`crate::load`), so that no second map of a million cursors is built
//! and thrown away.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::clock::ClockId;
use crate::registry::SnapshotError;
use crate::shared_map::SharedMap;
use crate::ticks::{Cursor, Tick, TickId, TickLedger, outbox_as_list};

/// A ledger read from, or to be written as, a snapshot or a backup: the tick ledger and the
/// clocks' cursors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerSnapshot {
    /// The ledger's ticks, watermark, counters and series.
    pub ticks: TickLedger,
    /// Per clock: when its ticks start, when it was last used, and its statistics.
    pub cursors: BTreeMap<ClockId, Cursor>,
}

impl Serialize for LedgerSnapshot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        LedgerView {
            ticks: &self.ticks,
            cursors: &self.cursors,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for LedgerSnapshot {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut cursors = BTreeMap::new();
        let ticks = LedgerSeed(&mut cursors).deserialize(deserializer)?;
        Ok(LedgerSnapshot { ticks, cursors })
    }
}

/// The serialized ledger: the tick ledger's fields and `cursors`, a map by clock id.
#[derive(Serialize)]
pub(crate) struct LedgerView<'a, C: Serialize> {
    #[serde(flatten)]
    pub(crate) ticks: &'a TickLedger,
    pub(crate) cursors: C,
}

/// Where the cursors of a ledger being read go, one by one, in the order they are read.
pub(crate) trait CursorSink {
    /// Takes the cursor of the clock `id`; a later cursor for the same id replaces it.
    fn receive(&mut self, id: ClockId, cursor: Cursor) -> Result<(), SnapshotError>;
}

impl CursorSink for BTreeMap<ClockId, Cursor> {
    fn receive(&mut self, id: ClockId, cursor: Cursor) -> Result<(), SnapshotError> {
        self.insert(id, cursor);
        Ok(())
    }
}

/// Reads a serialized ledger into a [`TickLedger`], its cursors into a sink.
pub(crate) struct LedgerSeed<'a, S>(pub(crate) &'a mut S);

impl<'de, S: CursorSink> DeserializeSeed<'de> for LedgerSeed<'_, S> {
    type Value = TickLedger;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<TickLedger, D::Error> {
        deserializer.deserialize_map(self)
    }
}

/// The fields of a serialized ledger. Any other is skipped: `last_pops`, which releases
/// before pop replays wrote, and whatever a newer release adds.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Field {
    IntendedThroughMs,
    Outbox,
    Queues,
    Leases,
    AckedReceipts,
    OverlapCarry,
    ManualRequests,
    PopReplays,
    Cursors,
    ManualSequence,
    Counters,
    QueueLimit,
    Series,
    #[serde(other)]
    Other,
}

impl<'de, S: CursorSink> Visitor<'de> for LedgerSeed<'_, S> {
    type Value = TickLedger;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a tick ledger")
    }

    /// A field the map lacks keeps its default, as it did when the ledger's form was derived;
    /// a field given twice keeps its later value.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TickLedger, A::Error> {
        let mut ledger = TickLedger::default();
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::IntendedThroughMs => ledger.intended_through_ms = map.next_value()?,
                Field::Outbox => ledger.outbox = map.next_value::<OutboxField>()?.0,
                Field::Queues => ledger.queues = map.next_value()?,
                Field::Leases => ledger.leases = map.next_value()?,
                Field::AckedReceipts => ledger.acked_receipts = map.next_value()?,
                Field::OverlapCarry => ledger.overlap_carry = map.next_value()?,
                Field::ManualRequests => ledger.manual_requests = map.next_value()?,
                Field::PopReplays => ledger.pop_replays = map.next_value()?,
                Field::Cursors => map.next_value_seed(CursorsInto(&mut *self.0))?,
                Field::ManualSequence => ledger.manual_sequence = map.next_value()?,
                Field::Counters => ledger.counters = map.next_value()?,
                Field::QueueLimit => ledger.queue_limit = map.next_value()?,
                Field::Series => ledger.series = map.next_value()?,
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(ledger)
    }
}

/// The outbox, read from its serialized list.
struct OutboxField(SharedMap<(u64, TickId), Tick>);

impl<'de> Deserialize<'de> for OutboxField {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        outbox_as_list::deserialize(deserializer).map(OutboxField)
    }
}

/// The `cursors` map, fed to a sink entry by entry.
struct CursorsInto<'a, S>(&'a mut S);

impl<'de, S: CursorSink> DeserializeSeed<'de> for CursorsInto<'_, S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, S: CursorSink> Visitor<'de> for CursorsInto<'_, S> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a map of cursors by clock id")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some((id, cursor)) = map.next_entry::<ClockId, Cursor>()? {
            self.0.receive(id, cursor).map_err(de::Error::custom)?;
        }
        Ok(())
    }
}
