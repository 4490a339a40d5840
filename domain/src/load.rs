//! Loading a registry from its serialized form, a snapshot's or a backup's: the clocks are
//! checked and indexed as they are read, never held as a second list.
//!
//! Two costs of the obvious load (decode the whole list, then insert it in order) are avoided.
//! The list of a million clocks is 80 MB that the allocator keeps once it is freed; read into
//! chunks of [`CHUNK`] clocks instead, it never exists whole. And a list in id order,
//! inserted as it comes, fills the clock map's nodes by half (see [`crate::shared_map`]);
//! each chunk is inserted in a scrambled order, so the nodes fill as registrations fill them.
//!
//! The cursors (`ledger.cursors`, after the clocks in every snapshot this release writes) go
//! into their clocks' records as they are read ([`CursorSink`]): no map of them is built. One
//! that comes before its clock waits until the clocks are in; one whose clock is not in the
//! snapshot is dropped, as it could never be used (a restore refuses a backup that has one).
//!
//! A restore's [`crate::RegistrySnapshot`], which is a list already (it is checked as one
//! before it is applied), goes through the same [`Loader`], for the same order.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::clock::{Clock, ClockId};
use crate::ledger_snapshot::{CursorSink, LedgerSeed};
use crate::registry::{Registry, SnapshotError};
use crate::shared_map;
use crate::ticks::{Cursor, TickLedger};

/// How many clocks are read before they are inserted: one run of the scramble, and a chunk that
/// weighs nothing (320 KiB).
const CHUNK: usize = shared_map::SCRAMBLE_RUN;

/// A registry being loaded: the clocks read so far, the chunk not yet inserted, and the
/// cursors read before their clocks.
pub(crate) struct Loader {
    registry: Registry,
    chunk: Vec<Clock>,
    early_cursors: BTreeMap<ClockId, Cursor>,
}

impl Loader {
    pub(crate) fn new() -> Self {
        Loader {
            registry: Registry::default(),
            chunk: Vec::with_capacity(CHUNK),
            early_cursors: BTreeMap::new(),
        }
    }

    /// Takes the next clock of the list.
    pub(crate) fn push(&mut self, clock: Clock) -> Result<(), SnapshotError> {
        self.chunk.push(clock);
        if self.chunk.len() >= CHUNK {
            self.insert_chunk()?;
        }
        Ok(())
    }

    /// The registry of the clocks taken and `ledger`, indexed.
    pub(crate) fn finish(mut self, ledger: TickLedger) -> Result<Registry, SnapshotError> {
        self.insert_chunk()?;
        for (id, cursor) in std::mem::take(&mut self.early_cursors) {
            self.registry.attach_cursor(&id, cursor);
        }
        Ok(self.registry.loaded(ledger))
    }

    fn insert_chunk(&mut self) -> Result<(), SnapshotError> {
        shared_map::scramble(&mut self.chunk);
        for clock in self.chunk.drain(..) {
            self.registry.load_clock(clock)?;
        }
        Ok(())
    }
}

impl CursorSink for Loader {
    /// Puts the cursor in its clock's record; the clocks read so far are inserted first.
    fn receive(&mut self, id: ClockId, cursor: Cursor) -> Result<(), SnapshotError> {
        self.insert_chunk()?;
        if let Some(early) = self.registry.attach_cursor(&id, cursor) {
            self.early_cursors.insert(id, early);
        }
        Ok(())
    }
}

/// A registry deserializes from the shape of [`crate::RegistrySnapshot`] (`clocks`, `ledger`),
/// through a `Loader`.
impl<'de> Deserialize<'de> for Registry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct("RegistrySnapshot", FIELDS, RegistryVisitor)
    }
}

const FIELDS: &[&str] = &["clocks", "ledger"];

struct RegistryVisitor;

impl<'de> Visitor<'de> for RegistryVisitor {
    type Value = Registry;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a registry snapshot: an object with clocks and ledger")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Registry, A::Error> {
        let mut loader = Loader::new();
        let mut clocks_seen = false;
        let mut ledger = None;
        while let Some(key) = map.next_key::<Field>()? {
            match key {
                Field::Clocks if clocks_seen => return Err(de::Error::duplicate_field("clocks")),
                Field::Clocks => {
                    clocks_seen = true;
                    map.next_value_seed(ClocksInto(&mut loader))?;
                }
                Field::Ledger if ledger.is_some() => {
                    return Err(de::Error::duplicate_field("ledger"));
                }
                Field::Ledger => ledger = Some(map.next_value_seed(LedgerSeed(&mut loader))?),
                Field::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        if !clocks_seen {
            return Err(de::Error::missing_field("clocks"));
        }
        let ledger = ledger.ok_or_else(|| de::Error::missing_field("ledger"))?;
        loader.finish(ledger).map_err(de::Error::custom)
    }
}

/// The fields of a registry snapshot; any other is skipped, as the derived form skipped it.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Field {
    Clocks,
    Ledger,
    #[serde(other)]
    Other,
}

/// The `clocks` list, fed to a loader clock by clock.
struct ClocksInto<'a>(&'a mut Loader);

impl<'de> DeserializeSeed<'de> for ClocksInto<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ClocksInto<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a list of clocks")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(clock) = seq.next_element::<Clock>()? {
            self.0.push(clock).map_err(de::Error::custom)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Channel, ClockId, QueueId};
    use crate::registry::{Command, Outcome, RegistrySnapshot};
    use crate::schedule::Schedule;
    use crate::ticks::Intent;

    /// A registry of `count` clocks, every third paused, one intent applied: more than a
    /// chunk, so that a load spans several.
    fn registry_of(count: usize) -> Registry {
        let mut registry = Registry::new();
        for n in 0..count {
            let literal = if n % 2 == 0 {
                "every.1.hours"
            } else {
                "every.5.seconds"
            };
            let created = registry.apply(Command::Register {
                name: format!("clock {n}"),
                schedule: literal.parse::<Schedule>().expect("a valid literal"),
                id: ClockId::new(format!(
                    "{:032x}",
                    (n as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                )),
                channel: Channel::Http {
                    queue_id: QueueId::new(format!("{:032x}", n as u128 + 1)),
                },
                max_clocks: u64::MAX,
                now_ms: 1_000,
                overlap: crate::Overlap::Allow,
            });
            let Outcome::Registered { clock, .. } = created else {
                panic!("registration {n}: {created:?}");
            };
            if n % 3 == 0 {
                registry.apply(Command::Pause {
                    id: clock.id,
                    now_ms: 2_000,
                    request: None,
                });
            }
        }
        registry.apply(Command::Intend(Intent {
            now_ms: 10_000,
            through_ms: 11_000,
            catch_up_ms: 60_000,
            queue_limit: 100,
            in_flight_from_ms: None,
        }));
        registry
    }

    #[test]
    fn a_registry_loads_back_as_it_was_indexes_and_all() {
        let registry = registry_of(3 * CHUNK + 17);
        let json = serde_json::to_vec(&registry).expect("a registry serializes");
        let loaded: Registry = serde_json::from_slice(&json).expect("and loads");
        // Equality covers the derived indexes too: the pair, queue and due indexes of the
        // loaded registry are those the registrations built.
        assert_eq!(loaded, registry);
        let snapshot: RegistrySnapshot = serde_json::from_slice(&json).expect("a snapshot");
        assert_eq!(Registry::try_from(snapshot), Ok(registry));
    }

    #[test]
    fn cursors_read_before_their_clocks_reach_them() {
        // A snapshot written by hand (or by another serializer) may put the ledger first:
        // every cursor then arrives before its clock and must still end in its record.
        let registry = registry_of(CHUNK + 5);
        let value = serde_json::to_value(&registry).expect("serializes");
        let ledger_first = format!(
            r#"{{"ledger": {}, "clocks": {}}}"#,
            value["ledger"], value["clocks"]
        );
        let loaded: Registry = serde_json::from_str(&ledger_first).expect("loads");
        assert_eq!(
            loaded, registry,
            "cursors, statistics and the due index as they were"
        );
        assert!(
            loaded
                .clocks_with_cursors()
                .all(|(_, cursor)| cursor.is_some())
        );
    }

    #[test]
    fn a_cursor_of_no_clock_is_dropped_and_none_is_made_up() {
        let registry = registry_of(2);
        let mut value = serde_json::to_value(&registry).expect("serializes");
        let ids: Vec<String> = registry
            .clocks()
            .map(|clock| clock.id.to_string())
            .collect();
        let cursors = value["ledger"]["cursors"]
            .as_object_mut()
            .expect("a map of cursors");
        let kept = cursors.remove(&ids[0]).expect("the first clock's cursor");
        cursors.insert("ffffffffffffffffffffffffffffffff".into(), kept);
        let loaded: Registry = serde_json::from_value(value).expect("loads");
        assert_eq!(loaded.len(), 2, "both clocks, and no third");
        let first = ClockId::new(ids[0].clone());
        assert!(
            loaded.cursor(&first).is_none(),
            "the first clock lost its cursor"
        );
        assert!(loaded.cursor(&ClockId::new(ids[1].clone())).is_some());
        let again = serde_json::to_value(&loaded).expect("serializes");
        assert_eq!(
            again["ledger"]["cursors"]
                .as_object()
                .map(|cursors| cursors.keys().cloned().collect::<Vec<_>>()),
            Some(vec![ids[1].clone()]),
            "the stray cursor is gone, and no cursor was made up for the first clock"
        );
    }

    #[test]
    fn a_clock_listed_twice_is_refused_and_unknown_fields_are_skipped() {
        let registry = registry_of(3);
        let mut value = serde_json::to_value(&registry).expect("serializes");
        value["comment"] = "written by hand".into();
        let loaded: Result<Registry, _> = serde_json::from_value(value.clone());
        assert_eq!(loaded.ok(), Some(registry));

        let first = value["clocks"][0].clone();
        value["clocks"]
            .as_array_mut()
            .expect("a list of clocks")
            .push(first);
        let refused = serde_json::from_value::<Registry>(value)
            .err()
            .map(|error| error.to_string());
        assert!(
            refused
                .as_deref()
                .is_some_and(|e| e.contains("appears twice")),
            "{refused:?}"
        );
    }

    #[test]
    fn a_snapshot_without_its_clocks_or_its_ledger_is_refused() {
        for (json, missing) in [
            (r#"{"ledger": {}}"#, "missing field `clocks`"),
            (r#"{"clocks": []}"#, "missing field `ledger`"),
            (
                r#"{"clocks": [], "clocks": [], "ledger": {}}"#,
                "duplicate field `clocks`",
            ),
        ] {
            let error = serde_json::from_str::<Registry>(json)
                .err()
                .map(|error| error.to_string());
            assert!(
                error.as_deref().is_some_and(|e| e.contains(missing)),
                "{json}: {error:?}"
            );
        }
        let empty: Registry =
            serde_json::from_str(r#"{"clocks": [], "ledger": {}}"#).expect("an empty registry");
        assert_eq!(empty, Registry::new());
    }
}
