//! The state machine: the clock registry in memory, made durable by snapshots.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, LogId, OptionalSend, RaftLogId, StorageError, StorageIOError,
    StoredMembership,
};
use tickd_raft::unsupported;
use tickd_raft::{NodeAddr, NodeId, ReplicatedState, Response, StateHandle, TypeConfig};

use crate::OpenError;
use crate::snapshot_file::{Meta, PendingSnapshot, SnapshotFile};
use crate::telemetry::{self, SnapshotOrigin};

type StoreResult<T> = Result<T, StorageError<NodeId>>;

/// The replicated state machine of one node.
pub struct StateMachine {
    state: StateHandle,
    snapshots: SnapshotFile,
}

/// Finishes a snapshot whose state was written to a temporary file when the builder was made.
pub struct SnapshotBuilder {
    /// The written state, or why it could not be written (reported by `build_snapshot`, since
    /// making a builder cannot fail in openraft's interface).
    written: Result<WrittenState, String>,
    snapshots: SnapshotFile,
}

/// The state machine serialized at one log position, not yet durable.
struct WrittenState {
    pending: PendingSnapshot,
    /// How long writing took, part of the snapshot's build time.
    writing: Duration,
}

impl StateMachine {
    /// Loads the state from the snapshot in `snapshot_dir`, or starts empty.
    pub(crate) fn open(snapshot_dir: PathBuf) -> Result<Self, OpenError> {
        let snapshots = SnapshotFile::new(snapshot_dir);
        let state = match snapshots.load() {
            Ok(Some((state, bytes))) => {
                telemetry::record_snapshot_size(bytes);
                state
            }
            Ok(None) => ReplicatedState::default(),
            Err(error) => {
                return Err(OpenError::Snapshot {
                    path: snapshots.path(),
                    reason: error.to_string(),
                });
            }
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

/// Serializes the applied state, under its read lock, to a temporary snapshot file.
fn write_state(state: &StateHandle, snapshots: &SnapshotFile) -> Result<WrittenState, String> {
    let started = Instant::now();
    let state = state.read();
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    let meta = Meta {
        last_log_id: state.last_applied,
        last_membership: state.membership.clone(),
        snapshot_id: snapshot_id(state.last_applied, nonce),
    };
    let written = snapshots.write("built", &meta, &*state);
    drop(state);
    let writing = started.elapsed();
    telemetry::record_snapshot_write(writing);
    written
        .map(|pending| WrittenState { pending, writing })
        .map_err(|error| format!("the state could not be written: {error}"))
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StoreResult<Snapshot<TypeConfig>> {
        let started = Instant::now();
        let written = std::mem::replace(&mut self.written, Err("already built".to_string()))
            .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e)))?;
        let WrittenState { pending, writing } = written;
        let bytes = pending.bytes;
        let snapshots = self.snapshots.clone();
        // Fsyncing a large snapshot is blocking work. If a newer snapshot was installed from
        // the leader meanwhile, that one is what this build hands back.
        let (meta, file) = tokio::task::spawn_blocking(move || snapshots.commit(pending))
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        telemetry::record_snapshot(SnapshotOrigin::Built, bytes);
        tracing::info!(
            snapshot = %meta.snapshot_id,
            bytes,
            elapsed_ms = (writing + started.elapsed()).as_millis(),
            "snapshot built"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
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
        // Long polls wake only for the queues these entries change (see
        // `tickd_raft::state::queue_changes`).
        let observed = self.state.queue_changes().observe(&state.registry);
        let responses = entries
            .into_iter()
            .map(|entry| {
                let log_id = *entry.get_log_id();
                // The Raft route halts a node before such an entry reaches its log; one that is
                // there all the same (a binary downgraded under its log) stops the core here,
                // before anything of it is applied.
                if let Some(why) = unsupported::in_entries(std::slice::from_ref(&entry)) {
                    return Err(StorageIOError::apply(log_id, &why).into());
                }
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
                        let outcome = state.apply(command);
                        tracing::debug!("applied");
                        Some(outcome)
                    }
                    EntryPayload::Membership(membership) => {
                        state.membership = StoredMembership::new(Some(log_id), membership);
                        None
                    }
                };
                Ok(Response {
                    outcome,
                    index: Some(log_id.index),
                })
            })
            .collect::<StoreResult<Vec<Response>>>()?;
        let changed = observed.changed(&state.registry);
        drop(state);
        changed.notify();
        Ok(responses)
    }

    /// Writes the state to a temporary file under the read lock instead of copying it:
    /// readers go on, applies wait about as long as a copy took, and the node never holds two
    /// registries (or a registry and its encoding) at once. The writes reach the page cache
    /// only; the fsync happens in `build_snapshot`, off the lock.
    ///
    /// The writing runs on a blocking thread: at a million clocks it takes seconds, and on a
    /// runtime thread it held up everything else that thread serves (heartbeats, votes, the
    /// API), so followers missed their leader and elections followed.
    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        let state = self.state.clone();
        let snapshots = self.snapshots.clone();
        let written = tokio::task::spawn_blocking(move || write_state(&state, &snapshots))
            .await
            .unwrap_or_else(|error| Err(format!("the snapshot writer failed: {error}")));
        SnapshotBuilder {
            written,
            snapshots: self.snapshots.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StoreResult<Box<tokio::fs::File>> {
        let file = self
            .snapshots
            .receiving()
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        Ok(Box::new(tokio::fs::File::from_std(file)))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<tokio::fs::File>,
    ) -> StoreResult<()> {
        let received = snapshot.into_std().await;
        let signature = Some(meta.signature());
        let snapshots = self.snapshots.clone();
        let installing = meta.clone();
        // Durable first, visible second: a crash in between restarts from the new snapshot.
        let (state, bytes) = tokio::task::spawn_blocking(move || {
            let mut pending = snapshots.receive(received, &installing)?;
            let state = pending.decode()?;
            let bytes = pending.bytes;
            let (current, _file) = snapshots.commit(pending)?;
            if current != installing {
                // openraft installs only snapshots newer than the applied state, and a node
                // builds its own only from that state, so this would be a broken invariant.
                return Err(std::io::Error::other(format!(
                    "snapshot {} is older than the current snapshot {}",
                    installing.snapshot_id, current.snapshot_id
                )));
            }
            Ok::<_, std::io::Error>((state, bytes))
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?
        .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
        *self.state.write() = state;
        self.state.queue_changes().notify_all();
        telemetry::record_snapshot(SnapshotOrigin::Installed, bytes);
        tracing::info!(snapshot = %meta.snapshot_id, bytes, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StoreResult<Option<Snapshot<TypeConfig>>> {
        let snapshots = self.snapshots.clone();
        let current = tokio::task::spawn_blocking(move || snapshots.open())
            .await
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        Ok(current.map(|(meta, file)| Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    #[test]
    fn snapshot_ids_name_the_log_position_and_the_build() {
        let position = LogId::new(CommittedLeaderId::new(3, 2), 41);
        assert_eq!(snapshot_id(Some(position), 0xbeef), "3-2-41-beef");
        assert_eq!(snapshot_id(None, 0xbeef), "empty-beef");
        // Two builds at one position (nothing applied in between) are two snapshots.
        assert_ne!(
            snapshot_id(Some(position), 1),
            snapshot_id(Some(position), 2)
        );
    }

    #[tokio::test]
    async fn the_handle_reads_what_the_state_machine_applied() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (_log, mut state_machine, handle) = crate::open(dir.path()).expect("opened");
        let log_id = LogId::new(CommittedLeaderId::new(1, 1), 1);
        let blank = Entry {
            log_id,
            payload: EntryPayload::Blank,
        };
        state_machine.apply([blank]).await.expect("applied");
        assert_eq!(handle.read().last_applied, Some(log_id));
        assert_eq!(state_machine.handle().read().last_applied, Some(log_id));
    }
}
