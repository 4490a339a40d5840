//! The replicated state as the rest of the node reads it, and the per-queue change
//! notifications that long polls wait on ([`queue_changes`]).

pub mod queue_changes;

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::{Entry, EntryPayload, LogId, RaftTypeConfig, StoredMembership};
use serde::{Deserialize, Serialize};
use tickd_domain::{Command, Level, Outcome, QueueId, Registry, RegistryImage};

use self::queue_changes::{QueueChanges, QueueWatch};
use crate::{NodeAddr, NodeId, Response};

/// Everything the state machine has applied: the registry plus the Raft bookkeeping that must
/// move atomically with it (a snapshot of one without the other would be inconsistent).
///
/// Serialized as its [`image`](Self::image), the form a snapshot holds.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ReplicatedState {
    /// The format of the serialized state. First, so that a snapshot in a format this binary
    /// does not know is refused before anything else of it is decoded. Absent from v0.1.0's
    /// snapshots, which are format 1.
    #[serde(default)]
    pub format: StateFormat,
    /// The cluster level: which command kinds the log may carry ([`tickd_domain::level`]).
    /// Absent from v0.1.0's snapshots, which are level 1.
    #[serde(default)]
    pub cluster_level: Level,
    /// The last log entry applied to `registry`.
    pub last_applied: Option<LogId<NodeId>>,
    /// The last membership applied.
    pub membership: StoredMembership<NodeId, NodeAddr>,
    /// The clock registry.
    pub registry: Registry,
}

impl ReplicatedState {
    /// Applies one command: the cluster level is kept here, everything else by the registry.
    pub fn apply(&mut self, command: Command) -> Outcome {
        match command {
            Command::SetLevel { level } => {
                self.cluster_level = level;
                Outcome::LevelSet { level }
            }
            command => self.registry.apply_at(self.cluster_level, command),
        }
    }

    /// Applies one log entry: it becomes the last applied, a command is applied
    /// ([`Self::apply`]), a membership is stored. What every state machine over this state does
    /// with each entry: the node's (`storage`) and the deterministic simulation's (`sim/`),
    /// whose openraft type configuration keeps its snapshots elsewhere.
    pub fn apply_entry<C>(&mut self, entry: Entry<C>) -> Response
    where
        C: RaftTypeConfig<D = Command, NodeId = NodeId, Node = NodeAddr>,
    {
        let log_id = entry.log_id;
        self.last_applied = Some(log_id);
        let outcome = match entry.payload {
            EntryPayload::Blank => None,
            EntryPayload::Normal(command) => {
                let _apply =
                    tracing::debug_span!("apply", index = log_id.index, command = command.kind())
                        .entered();
                let outcome = self.apply(command);
                tracing::debug!("applied");
                Some(outcome)
            }
            EntryPayload::Membership(membership) => {
                self.membership = StoredMembership::new(Some(log_id), membership);
                None
            }
        };
        Response {
            outcome,
            index: Some(log_id.index),
        }
    }

    /// The state as it is now, unchanged by whatever is applied after: what a snapshot
    /// encodes. O(1), so that the state machine holds its lock for the image and not for the
    /// encoding ([`RegistryImage`]).
    pub fn image(&self) -> StateImage {
        StateImage {
            format: self.format,
            cluster_level: self.cluster_level,
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            registry: self.registry.image(),
        }
    }
}

impl Serialize for ReplicatedState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.image().serialize(serializer)
    }
}

/// A [`ReplicatedState`] frozen at one log index, in the shape it is serialized in; see
/// [`ReplicatedState::image`].
#[derive(Debug, Clone, Serialize)]
pub struct StateImage {
    /// See [`ReplicatedState::format`]. First, as there.
    pub format: StateFormat,
    /// See [`ReplicatedState::cluster_level`].
    pub cluster_level: Level,
    /// The last log entry applied to the registry of the image.
    pub last_applied: Option<LogId<NodeId>>,
    /// The last membership applied.
    pub membership: StoredMembership<NodeId, NodeAddr>,
    /// The registry's replicated part.
    pub registry: RegistryImage,
}

/// The format version of a serialized [`ReplicatedState`] (the snapshot file, and what a
/// leader sends a follower that is too far behind).
///
/// It serializes as the format this binary writes, [`StateFormat::WRITTEN`], and refuses to
/// deserialize one it does not read, with an error that names the version needed. Raise
/// `WRITTEN` when a change to the state's serialized form would be misread by the binaries
/// that read the current one; additive fields with defaults need no new format (older
/// binaries ignore them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateFormat;

impl StateFormat {
    /// The format this binary writes and the newest it reads.
    pub const WRITTEN: u32 = 1;
}

impl Serialize for StateFormat {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u32(Self::WRITTEN)
    }
}

impl<'de> Deserialize<'de> for StateFormat {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let found = u32::deserialize(deserializer)?;
        if (1..=Self::WRITTEN).contains(&found) {
            Ok(StateFormat)
        } else {
            Err(serde::de::Error::custom(format!(
                "the state (snapshot) has format {found}, and this tickd reads formats 1 to {}:                  it was written by a newer tickd; run that release, or a later one, on this node",
                Self::WRITTEN
            )))
        }
    }
}

/// A cheap, cloneable handle on the applied state, shared by the state machine (the only
/// writer) and the API (readers).
///
/// A `std` lock, not an async one: every critical section is short and never awaits, so a
/// reader never holds up the runtime.
#[derive(Debug, Clone, Default)]
pub struct StateHandle {
    state: Arc<RwLock<ReplicatedState>>,
    /// Who waits for which queue to change; the state machine signals them.
    changes: QueueChanges,
}

impl StateHandle {
    /// Wraps a state recovered at start-up.
    pub fn new(state: ReplicatedState) -> Self {
        Self {
            state: Arc::new(RwLock::new(state)),
            changes: QueueChanges::default(),
        }
    }

    /// Starts waiting for `queue` to change: watch first, then read the state, then wait, so
    /// that no change falls in between.
    pub fn watch_queue(&self, queue: &QueueId) -> QueueWatch {
        self.changes.watch(queue)
    }

    /// The per-queue notifications, for the state machine that signals them.
    pub fn queue_changes(&self) -> &QueueChanges {
        &self.changes
    }

    /// Read access. A poisoned lock means a writer panicked mid-apply; the state machine's
    /// writes are whole-value assignments, so the data is still the last consistent value.
    pub fn read(&self) -> RwLockReadGuard<'_, ReplicatedState> {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Write access, for the state machine alone.
    pub fn write(&self) -> RwLockWriteGuard<'_, ReplicatedState> {
        self.state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Puts `state` in place of the applied state and hands the old one back, for the state
    /// machine alone (an installed snapshot). The caller frees it after the lock is released:
    /// freeing a million clocks takes a tenth of a second or more, which no reader should wait
    /// for.
    #[must_use = "the old state is handed back to be freed off the lock"]
    pub fn replace(&self, state: ReplicatedState) -> ReplicatedState {
        std::mem::replace(&mut *self.write(), state)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tickd_domain::{Channel, ClockId, Level, Outcome, QueueId};

    use super::*;

    /// The state as v0.1.0 wrote it: no format, no cluster level.
    fn as_v0_1_wrote_it() -> serde_json::Value {
        let mut written = serde_json::to_value(ReplicatedState::default()).expect("serializable");
        let fields = written.as_object_mut().expect("an object");
        fields.remove("format");
        fields.remove("cluster_level");
        written
    }

    #[test]
    fn a_replaced_state_is_handed_back_and_the_new_one_read() {
        let old = ReplicatedState {
            last_applied: Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 7)),
            ..ReplicatedState::default()
        };
        let handle = StateHandle::new(old);
        let newer = ReplicatedState {
            last_applied: Some(LogId::new(openraft::CommittedLeaderId::new(2, 1), 9)),
            ..ReplicatedState::default()
        };
        let replaced = handle.replace(newer);
        assert_eq!(replaced.last_applied.map(|id| id.index), Some(7));
        assert_eq!(handle.read().last_applied.map(|id| id.index), Some(9));
    }

    #[test]
    fn the_format_is_written_first_and_a_v0_1_state_reads_as_format_1_at_level_1() {
        let written = serde_json::to_string(&ReplicatedState::default()).expect("serializable");
        assert!(
            written.starts_with(r#"{"format":1,"cluster_level":1,"#),
            "{written}"
        );
        let old: ReplicatedState =
            serde_json::from_value(as_v0_1_wrote_it()).expect("a v0.1.0 state reads");
        assert_eq!(old.cluster_level, Level::V0_1);
    }

    #[test]
    fn a_state_in_a_newer_format_is_refused_with_the_version_it_needs() {
        let mut newer = as_v0_1_wrote_it();
        newer["format"] = json!(2);
        let error = serde_json::from_value::<ReplicatedState>(newer)
            .expect_err("format 2 is not this binary's")
            .to_string();
        assert!(
            error.contains("has format 2") && error.contains("reads formats 1 to 1"),
            "{error}"
        );
        let mut zero = as_v0_1_wrote_it();
        zero["format"] = json!(0);
        assert!(serde_json::from_value::<ReplicatedState>(zero).is_err());
    }

    #[test]
    fn set_level_is_applied_to_the_state_and_everything_else_to_the_registry() {
        let mut state = ReplicatedState::default();
        let outcome = state.apply(Command::SetLevel { level: Level::V0_2 });
        assert_eq!(outcome, Outcome::LevelSet { level: Level::V0_2 });
        assert_eq!(state.cluster_level, Level::V0_2);
        let outcome = state.apply(Command::Purge { clocks: vec![] });
        assert_eq!(outcome, Outcome::Purged { clocks: vec![] });
        assert_eq!(state.cluster_level, Level::V0_2);
    }

    /// How many ticks one pop of a queue holding 150 due manual ticks returns, on a state at
    /// `level`.
    fn first_pop_at(level: Level) -> usize {
        let mut state = ReplicatedState {
            cluster_level: level,
            ..ReplicatedState::default()
        };
        let queue = QueueId::new(format!("queue-{:_<26}", "c1"));
        let id = ClockId::new("c1".to_owned());
        let registered = state.apply(Command::Register {
            name: "burst".to_owned(),
            schedule: tickd_domain::Schedule::parse("@never").expect("a schedule"),
            id: id.clone(),
            channel: Channel::Http {
                queue_id: queue.clone(),
            },
            max_clocks: 10,
            now_ms: 0,
            overlap: tickd_domain::Overlap::Allow,
        });
        assert!(
            matches!(registered, Outcome::Registered { .. }),
            "{registered:?}"
        );
        for now_ms in 1..=150 {
            let id = id.clone();
            let ticked = state.apply(Command::Tick {
                id,
                now_ms,
                request: None,
            });
            assert!(matches!(ticked, Outcome::Updated(_)), "{ticked:?}");
        }
        let request = "p1".to_owned();
        match state.apply(Command::Pop {
            queue,
            now_ms: 1_000,
            request,
        }) {
            Outcome::Popped(ticks) => ticks.len(),
            other => panic!("a pop: {other:?}"),
        }
    }

    #[test]
    fn a_pop_follows_the_clusters_level_not_the_binarys() {
        assert_eq!(first_pop_at(Level::V0_1), 150, "as v0.1.0 pops");
        assert_eq!(first_pop_at(Level::V0_2), tickd_domain::MAX_POP_TICKS);
    }
}
