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
    /// The size of the last snapshot, so the next one is encoded into a buffer that does not
    /// have to grow (each doubling would copy it and leave the old buffer to the allocator).
    last_snapshot_bytes: usize,
}

/// Builds a snapshot from the state as it was encoded when the builder was made.
pub struct SnapshotBuilder {
    /// The encoded state, or why it could not be encoded (reported by `build_snapshot`, since
    /// making a builder cannot fail in openraft's interface).
    encoded: Result<EncodedState, String>,
    snapshots: SnapshotFile,
}

/// The state machine serialized at one log position.
struct EncodedState {
    data: Vec<u8>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, NodeAddr>,
    /// How long encoding took, part of the snapshot's build time.
    encoding: std::time::Duration,
}

impl StateMachine {
    /// Loads the state from the snapshot in `snapshot_dir`, or starts empty.
    pub(crate) fn open(snapshot_dir: PathBuf) -> Result<Self, OpenError> {
        let snapshots = SnapshotFile::new(snapshot_dir);
        let unreadable = |reason: String| OpenError::Snapshot {
            path: snapshots.path(),
            reason,
        };
        let (state, last_snapshot_bytes) =
            match snapshots.load().map_err(|e| unreadable(e.to_string()))? {
                Some((_meta, data)) => {
                    telemetry::record_snapshot_size(data.len());
                    (decode(&data).map_err(unreadable)?, data.len())
                }
                None => (ReplicatedState::default(), 0),
            };
        Ok(Self {
            state: StateHandle::new(state),
            snapshots,
            last_snapshot_bytes,
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
        let encoded = std::mem::replace(&mut self.encoded, Err("already built".to_string()))
            .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e)))?;
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or_default();
        let meta = Meta {
            last_log_id: encoded.last_applied,
            last_membership: encoded.membership,
            snapshot_id: snapshot_id(encoded.last_applied, nonce),
        };
        let snapshots = self.snapshots.clone();
        let stored_meta = meta.clone();
        // Writing and fsyncing a large snapshot is blocking work.
        let data = tokio::task::spawn_blocking(move || {
            snapshots
                .store(&stored_meta, &encoded.data)
                .map(|()| encoded.data)
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(None, &e))?
        .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        telemetry::record_snapshot(SnapshotOrigin::Built, data.len());
        tracing::info!(
            snapshot = %meta.snapshot_id,
            bytes = data.len(),
            elapsed_ms = (encoded.encoding + started.elapsed()).as_millis(),
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

    /// Encodes the state under the read lock instead of copying it: readers go on, applies wait
    /// about as long as a copy took, and the node never holds two registries at once (a copy
    /// doubled its peak memory, which the allocator then kept).
    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        let started = std::time::Instant::now();
        let state = self.state.read();
        let capacity = self.last_snapshot_bytes + self.last_snapshot_bytes / 8;
        let mut data = Vec::with_capacity(capacity);
        let encoded = match serde_json::to_writer(&mut data, &*state) {
            Ok(()) => Ok(EncodedState {
                data,
                last_applied: state.last_applied,
                membership: state.membership.clone(),
                encoding: started.elapsed(),
            }),
            Err(error) => Err(format!("the state does not encode: {error}")),
        };
        drop(state);
        if let Ok(encoded) = &encoded {
            self.last_snapshot_bytes = encoded.data.len();
        }
        SnapshotBuilder {
            encoded,
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
        self.last_snapshot_bytes = bytes;
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
