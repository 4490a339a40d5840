//! The replicated state as the rest of the node reads it.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::{LogId, StoredMembership};
use serde::{Deserialize, Serialize};
use tickd_domain::Registry;

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
pub struct StateHandle(Arc<RwLock<ReplicatedState>>);

impl StateHandle {
    /// Wraps a state recovered at start-up.
    pub fn new(state: ReplicatedState) -> Self {
        Self(Arc::new(RwLock::new(state)))
    }

    /// Read access. A poisoned lock means a writer panicked mid-apply; the state machine's
    /// writes are whole-value assignments, so the data is still the last consistent value.
    pub fn read(&self) -> RwLockReadGuard<'_, ReplicatedState> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Write access, for the state machine alone.
    pub fn write(&self) -> RwLockWriteGuard<'_, ReplicatedState> {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
