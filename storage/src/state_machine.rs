//! The state machine: the clock registry in memory, made durable by snapshots.

use std::io::Cursor;
use std::path::PathBuf;

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, LogId, OptionalSend, RaftLogId, StorageError, StorageIOError,
    StoredMembership,
};
use tickd_raft::{NodeAddr, NodeId, ReplicatedState, Response, StateHandle, TypeConfig};

use crate::OpenError;
use crate::snapshot_file::{Meta, SnapshotFile};
use crate::telemetry::{self, SnapshotOrigin};

type StoreResult<T> = Result<T, StorageError<NodeId>>;

/// The replicated state machine of one node.
pub struct StateMachine {
    state: StateHandle,
    snapshots: SnapshotFile,
}

/// Builds a snapshot from a copy of the state taken when the builder was made.
pub struct SnapshotBuilder {
    state: ReplicatedState,
    snapshots: SnapshotFile,
}

impl StateMachine {
    /// Loads the state from the snapshot in `snapshot_dir`, or starts empty.
    pub(crate) fn open(snapshot_dir: PathBuf) -> Result<Self, OpenError> {
        let snapshots = SnapshotFile::new(snapshot_dir);
        let unreadable = |reason: String| OpenError::Snapshot {
            path: snapshots.path(),
            reason,
        };
        let state = match snapshots.load().map_err(|e| unreadable(e.to_string()))? {
            Some((_meta, data)) => {
                telemetry::record_snapshot_size(data.len());
                decode(&data).map_err(unreadable)?
            }
            None => ReplicatedState::default(),
        };
        Ok(Self {
            state: StateHandle::new(state),
            snapshots,
        })
    }

    /// The handle through which the node reads the applied state.
    pub fn handle(&self) -> StateHandle {
        self.state.clone()
    }
}

fn decode(data: &[u8]) -> Result<ReplicatedState, String> {
    serde_json::from_slice(data).map_err(|error| format!("the snapshot does not decode: {error}"))
}

/// A snapshot's id: unique per log position and per build, so that a follower never mistakes
/// two different snapshots for one (openraft resumes chunked transfers by id).
fn snapshot_id(last_applied: Option<LogId<NodeId>>, nonce: u128) -> String {
    match last_applied {
        Some(id) => format!(
            "{}-{}-{}-{nonce:x}",
            id.leader_id.term, id.leader_id.node_id, id.index
        ),
        None => format!("empty-{nonce:x}"),
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StoreResult<Snapshot<TypeConfig>> {
        let started = std::time::Instant::now();
        let state = std::mem::take(&mut self.state);
        let snapshots = self.snapshots.clone();
        // Serializing and fsyncing a large registry is blocking work.
        let built = tokio::task::spawn_blocking(move || -> Result<(Meta, Vec<u8>), String> {
            let data = serde_json::to_vec(&state).map_err(|e| e.to_string())?;
            let nonce = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_nanos())
                .unwrap_or_default();
            let meta = Meta {
                last_log_id: state.last_applied,
                last_membership: state.membership.clone(),
                snapshot_id: snapshot_id(state.last_applied, nonce),
            };
            snapshots.store(&meta, &data).map_err(|e| e.to_string())?;
            Ok((meta, data))
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(None, &e))?
        .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e)))?;
        let (meta, data) = built;
        telemetry::record_snapshot(SnapshotOrigin::Built, data.len());
        tracing::info!(
            snapshot = %meta.snapshot_id,
            bytes = data.len(),
            elapsed_ms = started.elapsed().as_millis(),
            "snapshot built"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> StoreResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, NodeAddr>)> {
        let state = self.state.read();
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StoreResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut state = self.state.write();
        let responses = entries
            .into_iter()
            .map(|entry| {
                let log_id = *entry.get_log_id();
                state.last_applied = Some(log_id);
                let outcome = match entry.payload {
                    EntryPayload::Blank => None,
                    EntryPayload::Normal(command) => {
                        // The last hop of a write's trace, on every node: the index is the one
                        // the proposing node's `write` span records.
                        let _apply = tracing::debug_span!(
                            "apply",
                            index = log_id.index,
                            command = command.kind()
                        )
                        .entered();
                        let outcome = state.registry.apply(command);
                        tracing::debug!("applied");
                        Some(outcome)
                    }
                    EntryPayload::Membership(membership) => {
                        state.membership = StoredMembership::new(Some(log_id), membership);
                        None
                    }
                };
                Response {
                    outcome,
                    index: Some(log_id.index),
                }
            })
            .collect();
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            state: self.state.read().clone(),
            snapshots: self.snapshots.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StoreResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StoreResult<()> {
        let data = snapshot.into_inner();
        let bytes = data.len();
        let signature = Some(meta.signature());
        let state = decode(&data).map_err(|reason| {
            StorageIOError::read_snapshot(signature.clone(), &std::io::Error::other(reason))
        })?;
        // Durable first, visible second: a crash in between restarts from the new snapshot.
        let snapshots = self.snapshots.clone();
        let stored_meta = meta.clone();
        tokio::task::spawn_blocking(move || snapshots.store(&stored_meta, &data))
            .await
            .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?
            .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
        *self.state.write() = state;
        telemetry::record_snapshot(SnapshotOrigin::Installed, bytes);
        tracing::info!(snapshot = %meta.snapshot_id, bytes, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StoreResult<Option<Snapshot<TypeConfig>>> {
        let snapshots = self.snapshots.clone();
        let loaded = tokio::task::spawn_blocking(move || snapshots.load())
            .await
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        Ok(loaded.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
