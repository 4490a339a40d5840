//! The replicated state as the rest of the node reads it, and the per-queue change
//! notifications that long polls wait on ([`queue_changes`]).

pub mod queue_changes;

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::{LogId, StoredMembership};
use serde::{Deserialize, Serialize};
use tickd_domain::{QueueId, Registry};

use self::queue_changes::{QueueChanges, QueueWatch};
use crate::{NodeAddr, NodeId};

/// Everything the state machine has applied: the registry plus the Raft bookkeeping that must
/// move atomically with it (a snapshot of one without the other would be inconsistent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicatedState {
    /// The last log entry applied to `registry`.
    pub last_applied: Option<LogId<NodeId>>,
    /// The last membership applied.
    pub membership: StoredMembership<NodeId, NodeAddr>,
    /// The clock registry.
    pub registry: Registry,
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
}
