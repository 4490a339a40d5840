//! Loading a registry from its serialized form, a snapshot's or a backup's: the clocks are
//! checked and indexed as they are read, never held as a second list.
//!
//! Two costs of the obvious load (decode the whole list, then insert it in order) are avoided.
//! The list of a million clocks is 80 MB that the allocator keeps once it is freed; read into
//! chunks of [`CHUNK`] clocks instead, it never exists whole. And a list in id order,
//! inserted as it comes, fills the clock map's nodes by half (see [`crate::shared_map`]);
//! each chunk is inserted in a scrambled order, so the nodes fill as registrations fill them.
//!
//! A restore's [`crate::RegistrySnapshot`], which is a list already (it is checked as one
//! before it is applied), goes through the same [`Loader`], for the same order.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::clock::Clock;
use crate::registry::{Registry, SnapshotError};
use crate::shared_map;
use crate::ticks::TickLedger;

/// How many clocks are read before they are inserted: one run of the scramble, and a chunk that
/// weighs nothing (320 KiB).
const CHUNK: usize = shared_map::SCRAMBLE_RUN;

/// A registry being loaded: the clocks read so far, and the chunk not yet inserted.
pub(crate) struct Loader {
    registry: Registry,
    chunk: Vec<Clock>,
}

impl Loader {
    pub(crate) fn new() -> Self {
        Loader {
            registry: Registry::default(),
            chunk: Vec::with_capacity(CHUNK),
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
                Field::Ledger => ledger = Some(map.next_value::<TickLedger>()?),
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
            });
            let Outcome::Registered { clock, .. } = created else {
                panic!("registration {n}: {created:?}");
            };
            if n % 3 == 0 {
                registry.apply(Command::Pause {
                    id: clock.id,
                    now_ms: 2_000,
                });
            }
        }
        registry.apply(Command::Intend(Intent {
            now_ms: 10_000,
            through_ms: 11_000,
            catch_up_ms: 60_000,
            queue_limit: 100,
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
