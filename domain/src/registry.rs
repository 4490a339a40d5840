//! The clock registry: the replicated state and its one transition, [`Registry::apply`].
//!
//! Every node applies the same [`Command`]s in the same (Raft log) order and
//! must reach the same [`Registry`] and the same [`Outcome`]s. `apply`
//! therefore reads nothing but its arguments: ids, channels and limits are
//! decided by the proposing node and travel inside the command. A refusal
//! (unknown id, limit reached, invalid name) is a deterministic result, an
//! [`Outcome`], never an error that could make replicas diverge.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::{Channel, Clock, ClockId, ClockStatus, validate_name};
use crate::filter::ClockFilter;
use crate::schedule::Schedule;

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
    },
    /// Stop the clock's scheduled ticks.
    Pause {
        /// The clock to pause.
        id: ClockId,
    },
    /// Restart the clock's scheduled ticks.
    Resume {
        /// The clock to resume.
        id: ClockId,
    },
    /// Deliver one manual tick to the clock. Applying it currently only
    /// checks that the clock exists; the tick engine adds the tick itself.
    Tick {
        /// The clock to tick.
        id: ClockId,
    },
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
    /// No clock has the command's id.
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

/// The key of a clock's identity: its name and its schedule literal.
type Pair = (String, String);

/// All clocks of the cluster: the state that the Raft state machine
/// replicates.
///
/// Invariants, kept by [`Registry::apply`] and checked when a snapshot is
/// loaded: ids are unique, (name, schedule literal) pairs are unique, and the
/// pair index names exactly the stored clocks. A snapshot is the list of
/// clocks ordered by id; the index is rebuilt on load.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Clock>", into = "Vec<Clock>")]
pub struct Registry {
    /// The clocks by id; a `BTreeMap` so that iteration, listing and
    /// snapshots have one order on every node.
    clocks: BTreeMap<ClockId, Clock>,
    /// The id of the clock for each (name, schedule literal) pair, so that a
    /// registration joins the existing clock.
    by_pair: BTreeMap<Pair, ClockId>,
}

impl Registry {
    /// An empty registry, the state before the first command.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Applies one command: the only way the registry changes. Deterministic:
    /// the result depends only on the registry and the command.
    pub fn apply(&mut self, command: Command) -> Outcome {
        match command {
            Command::Register {
                name,
                schedule,
                id,
                channel,
                max_clocks,
            } => self.register(name, schedule, id, channel, max_clocks),
            Command::Pause { id } => self.set_status(&id, ClockStatus::Paused),
            Command::Resume { id } => self.set_status(&id, ClockStatus::Active),
            Command::Tick { id } => match self.clocks.get(&id) {
                Some(clock) => Outcome::Updated(clock.clone()),
                None => Outcome::NotFound,
            },
        }
    }

    /// Joins the clock of the pair, or creates it if the name is valid, the
    /// limit allows and the proposed id is free.
    fn register(
        &mut self,
        name: String,
        schedule: Schedule,
        id: ClockId,
        channel: Channel,
        max_clocks: u64,
    ) -> Outcome {
        if let Err(err) = validate_name(&name) {
            return Outcome::Rejected {
                reason: err.to_string(),
            };
        }
        if let Some(clock) = self.find(&name, &schedule) {
            return Outcome::Registered {
                clock: clock.clone(),
                created: false,
            };
        }
        if u64::try_from(self.clocks.len()).unwrap_or(u64::MAX) >= max_clocks {
            return Outcome::LimitReached { max_clocks };
        }
        if self.clocks.contains_key(&id) {
            // Random ids should not collide; if they do, overwriting would
            // destroy another clock, so the proposer must retry with a new id.
            return Outcome::Rejected {
                reason: format!("clock id {id} is already in use by another clock"),
            };
        }
        let clock = Clock {
            id,
            name,
            schedule,
            status: ClockStatus::Active,
            channel,
        };
        self.insert(clock.clone());
        Outcome::Registered {
            clock,
            created: true,
        }
    }

    /// Sets a clock's status; setting the status it already has is a no-op
    /// that still reports the clock, as the API answers 200 either way.
    fn set_status(&mut self, id: &ClockId, status: ClockStatus) -> Outcome {
        match self.clocks.get_mut(id) {
            Some(clock) => {
                clock.status = status;
                Outcome::Updated(clock.clone())
            }
            None => Outcome::NotFound,
        }
    }

    /// Stores a clock and indexes its pair; the caller has checked that
    /// neither its id nor its pair is taken.
    fn insert(&mut self, clock: Clock) {
        self.by_pair.insert(pair_of(&clock), clock.id.clone());
        self.clocks.insert(clock.id.clone(), clock);
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
        self.clocks.values()
    }

    /// The clock registered for the exact (name, schedule literal) pair, so a
    /// node can answer a repeated registration without a Raft round trip.
    pub fn find(&self, name: &str, schedule: &Schedule) -> Option<&Clock> {
        let pair = (name.to_owned(), schedule.as_str().to_owned());
        self.by_pair.get(&pair).and_then(|id| self.clocks.get(id))
    }

    /// The clocks that `filter` selects, ordered by id, for
    /// `GET /api/v1/clocks`.
    pub fn list(&self, filter: &ClockFilter) -> Vec<Clock> {
        self.clocks()
            .filter(|clock| filter.matches(clock))
            .cloned()
            .collect()
    }
}

/// The identity key of a clock.
fn pair_of(clock: &Clock) -> Pair {
    (clock.name.clone(), clock.schedule.as_str().to_owned())
}

impl TryFrom<Vec<Clock>> for Registry {
    type Error = SnapshotError;

    /// Loads a snapshot, rebuilding the pair index and refusing a list that
    /// breaks the registry's invariants.
    fn try_from(clocks: Vec<Clock>) -> Result<Self, Self::Error> {
        let mut registry = Registry::new();
        for clock in clocks {
            if registry.clocks.contains_key(&clock.id) {
                return Err(SnapshotError::DuplicateId { id: clock.id });
            }
            if let Some(first) = registry.by_pair.get(&pair_of(&clock)) {
                return Err(SnapshotError::DuplicatePair {
                    first: first.clone(),
                    second: clock.id,
                    name: clock.name,
                    schedule: clock.schedule,
                });
            }
            registry.insert(clock);
        }
        Ok(registry)
    }
}

impl From<Registry> for Vec<Clock> {
    /// The snapshot form: the clocks ordered by id; the index is derived.
    fn from(registry: Registry) -> Self {
        registry.clocks.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::QueueId;

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
                queue_id: QueueId::new(format!("queue-{proposed_id}")),
            },
            max_clocks,
        }
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
    fn register_creates_an_active_clock_with_the_proposed_id_and_channel() {
        let mut registry = Registry::new();
        let clock = create(&mut registry, "orders", "every.5.seconds", "c1");
        assert_eq!(clock.id, id("c1"));
        assert_eq!(clock.name, "orders");
        assert_eq!(clock.schedule.as_str(), "every.5.seconds");
        assert_eq!(clock.status, ClockStatus::Active);
        assert_eq!(
            clock.channel,
            Channel::Http {
                queue_id: QueueId::new("queue-c1".to_owned())
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
        registry.apply(Command::Pause { id: clock.id });
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
            (Command::Pause { id: id("c1") }, ClockStatus::Paused),
            (Command::Pause { id: id("c1") }, ClockStatus::Paused),
            (Command::Resume { id: id("c1") }, ClockStatus::Active),
            (Command::Resume { id: id("c1") }, ClockStatus::Active),
            (Command::Tick { id: id("c1") }, ClockStatus::Active),
            (Command::Pause { id: id("c1") }, ClockStatus::Paused),
            (Command::Tick { id: id("c1") }, ClockStatus::Paused),
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
            Command::Pause { id: id("nope") },
            Command::Resume { id: id("nope") },
            Command::Tick { id: id("nope") },
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
            Command::Pause { id: id("c1") },
            Command::Resume { id: id("c9") },
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
        let ids: Vec<&str> = registry.clocks().map(|clock| clock.id.as_str()).collect();
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
        registry.apply(Command::Pause { id: id("c1") });

        let snapshot = serde_json::to_value(&registry)?;
        let ids: Vec<&str> = snapshot
            .as_array()
            .map(|clocks| {
                clocks
                    .iter()
                    .filter_map(|clock| clock["id"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(ids, ["c1", "c2"]);

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
                serde_json::json!([clock("c1", "a"), clock("c1", "b")]),
                "corrupt registry snapshot: clock id c1 appears twice",
            ),
            (
                serde_json::json!([clock("c1", "a"), clock("c2", "a")]),
                "corrupt registry snapshot: clocks c1 and c2 both have name \"a\" and schedule \
                 every.1.second",
            ),
        ];
        for (snapshot, message) in cases {
            let err = serde_json::from_value::<Registry>(snapshot).err();
            assert_eq!(err.map(|err| err.to_string()).as_deref(), Some(message));
        }
        let empty: Registry = serde_json::from_str("[]")?;
        assert!(empty.is_empty());
        Ok(())
    }

    #[test]
    fn list_applies_the_filter_in_id_order() -> Result<(), Box<dyn std::error::Error>> {
        let pending = Clock {
            id: id("c0"),
            name: "orders".to_owned(),
            schedule: schedule("every.5.seconds"),
            status: ClockStatus::Pending,
            channel: Channel::Http {
                queue_id: QueueId::new("q0".to_owned()),
            },
        };
        let mut registry = Registry::try_from(vec![pending])?;
        create(&mut registry, "orders", "every.1.minute", "c3");
        create(&mut registry, "orders", "every.1.hour", "c1");
        create(&mut registry, "invoices", "every.5.seconds", "c2");
        registry.apply(Command::Pause { id: id("c1") });

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
                .list(&filter)
                .into_iter()
                .map(|clock| clock.id.to_string())
                .collect();
            assert_eq!(listed, *expected, "query {query:?}");
        }
        Ok(())
    }
}
