//! openraft's state machine over the real [`ReplicatedState`], with snapshots on the simulated
//! [`Disk`].
//!
//! Applying is production's own code ([`ReplicatedState::apply_entry`], which
//! `storage/src/state_machine.rs` calls too). What differs is where a snapshot lives:
//! production writes the state's JSON to a file, the model writes the same JSON to the disk,
//! durable at once.

use std::io::{self, Cursor};
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{
    Entry, LogId, OptionalSend, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use tickd_raft::{NodeAddr, NodeId, ReplicatedState, Response, StateHandle, StateImage};

use crate::disk::{Disk, StoredSnapshot};
use crate::log_store::lock;
use crate::runtime::SimConfig;

type StoreResult<T> = Result<T, StorageError<NodeId>>;

/// One incarnation's state machine.
pub struct StateMachine {
    state: StateHandle,
    disk: Arc<Mutex<Disk>>,
    generation: u64,
    /// Snapshots built by this incarnation, to make each id unique.
    built: u64,
}

impl StateMachine {
    /// The state machine of a node starting on `disk`: its snapshot's state, or empty.
    pub fn open(disk: Arc<Mutex<Disk>>) -> Result<Self, serde_json::Error> {
        let (generation, state) = {
            let guard = lock(&disk);
            let state = match guard.snapshot() {
                Some(snapshot) => serde_json::from_slice(&snapshot.data)?,
                None => ReplicatedState::default(),
            };
            (guard.generation(), state)
        };
        Ok(StateMachine {
            state: StateHandle::new(state),
            disk,
            generation,
            built: 0,
        })
    }

    /// The handle through which the node (its engine, its clients' reads) reads the state.
    pub fn handle(&self) -> StateHandle {
        self.state.clone()
    }
}

/// Builds a snapshot of the state at one index (an image, unchanged by later applies).
pub struct SnapshotBuilder {
    image: Option<StateImage>,
    disk: Arc<Mutex<Disk>>,
    generation: u64,
    id: String,
}

fn storage_error(error: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(None, &error).into()
}

impl RaftSnapshotBuilder<SimConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StoreResult<Snapshot<SimConfig>> {
        let image = self
            .image
            .take()
            .ok_or_else(|| storage_error(io::Error::other("already built")))?;
        let data = serde_json::to_vec(&image).map_err(storage_error)?;
        let meta = SnapshotMeta {
            last_log_id: image.last_applied,
            last_membership: image.membership.clone(),
            snapshot_id: self.id.clone(),
        };
        lock(&self.disk)
            .put_snapshot(
                self.generation,
                StoredSnapshot {
                    meta: meta.clone(),
                    data: data.clone(),
                },
            )
            .map_err(|_| storage_error(io::Error::other("the node crashed")))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<SimConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> StoreResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, NodeAddr>)> {
        let state = self.state.read();
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StoreResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry<SimConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut state = self.state.write();
        let responses = entries
            .into_iter()
            .map(|entry| state.apply_entry(entry))
            .collect();
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        self.built = self.built.saturating_add(1);
        let image = self.state.read().image();
        let id = match image.last_applied {
            Some(id) => format!(
                "{}-{}-{}-g{}-{}",
                id.leader_id.term, id.leader_id.node_id, id.index, self.generation, self.built
            ),
            None => format!("empty-g{}-{}", self.generation, self.built),
        };
        SnapshotBuilder {
            image: Some(image),
            disk: self.disk.clone(),
            generation: self.generation,
            id,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StoreResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, NodeAddr>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StoreResult<()> {
        let data = snapshot.into_inner();
        let state: ReplicatedState = serde_json::from_slice(&data).map_err(storage_error)?;
        lock(&self.disk)
            .put_snapshot(
                self.generation,
                StoredSnapshot {
                    meta: meta.clone(),
                    data,
                },
            )
            .map_err(|_| storage_error(io::Error::other("the node crashed")))?;
        let _replaced = self.state.replace(state);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StoreResult<Option<Snapshot<SimConfig>>> {
        let disk = lock(&self.disk);
        Ok(disk.snapshot().map(|stored| Snapshot {
            meta: stored.meta.clone(),
            snapshot: Box::new(Cursor::new(stored.data.clone())),
        }))
    }
}
