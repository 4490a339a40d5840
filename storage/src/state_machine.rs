//! The state machine: the clock registry in memory, made durable by snapshots.

use std::io;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{
    Entry, LogId, OptionalSend, RaftLogId, StorageError, StorageIOError, StoredMembership,
};
use tickd_raft::unsupported;
use tickd_raft::{
    NodeAddr, NodeId, ReplicatedState, Response, StateHandle, StateImage, TypeConfig,
};

use crate::OpenError;
use crate::snapshot_file::{Meta, PendingSnapshot, SnapshotFile};
use crate::telemetry::{self, SnapshotOrigin};

type StoreResult<T> = Result<T, StorageError<NodeId>>;

/// The replicated state machine of one node.
pub struct StateMachine {
    state: StateHandle,
    snapshots: SnapshotFile,
}

/// Builds a snapshot of the state as it was when the builder was made: the builder holds an
/// image of it ([`ReplicatedState::image`]), which later applies do not change.
///
/// [`ReplicatedState::image`]: tickd_raft::ReplicatedState::image
pub struct SnapshotBuilder {
    /// The state to encode; taken by the first `build_snapshot`.
    image: Option<StateImage>,
    snapshots: SnapshotFile,
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

/// Serializes an image of the state to a temporary snapshot file (about a second per 200 MB
/// of snapshot, during which the state machine goes on applying).
fn write_image(image: StateImage, snapshots: &SnapshotFile) -> io::Result<PendingSnapshot> {
    let started = Instant::now();
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    let meta = Meta {
        last_log_id: image.last_applied,
        last_membership: image.membership.clone(),
        snapshot_id: snapshot_id(image.last_applied, nonce),
    };
    let written = snapshots.write("built", &meta, &image);
    // Nodes the state changed meanwhile are freed here, with the image.
    drop(image);
    telemetry::record_snapshot_write(started.elapsed());
    written.map_err(|error| io::Error::other(format!("the state could not be written: {error}")))
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    /// Encodes the image and makes it the current snapshot, on a blocking thread: at a million
    /// clocks the encoding takes seconds, and on a runtime thread it held up everything else
    /// that thread serves (heartbeats, votes, the API), so followers missed their leader and
    /// elections followed. openraft runs this in a task of its own, so the state machine
    /// applies meanwhile.
    async fn build_snapshot(&mut self) -> StoreResult<Snapshot<TypeConfig>> {
        let started = Instant::now();
        let image = self.image.take().ok_or_else(|| {
            StorageIOError::write_snapshot(None, &io::Error::other("already built"))
        })?;
        let snapshots = self.snapshots.clone();
        // If a newer snapshot was installed from the leader meanwhile, that one is what this
        // build hands back.
        let (meta, file, bytes) = tokio::task::spawn_blocking(move || {
            let pending = write_image(image, &snapshots)?;
            let bytes = pending.bytes;
            snapshots
                .commit(pending)
                .map(|(meta, file)| (meta, file, bytes))
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(None, &e))?
        .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        telemetry::record_snapshot(SnapshotOrigin::Built, bytes);
        tracing::info!(
            snapshot = %meta.snapshot_id,
            bytes,
            elapsed_ms = started.elapsed().as_millis(),
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
                if let Some(why) = unsupported::in_entries(std::slice::from_ref(&entry)) {
                    return Err(StorageIOError::apply(log_id, &why).into());
                }
                Ok(state.apply_entry(entry))
            })
            .collect::<StoreResult<Vec<Response>>>()?;
        let changed = observed.changed(&state.registry);
        drop(state);
        changed.notify();
        Ok(responses)
    }

    /// Takes an image of the state under the read lock, in O(1): openraft's state machine
    /// task waits for this call before it applies anything more, so the encoding waits for
    /// `build_snapshot`, which openraft runs in a task of its own. The image shares the state's
    /// nodes: the node never holds two registries (or a registry and its encoding) at once,
    /// only the nodes that applies change while the image is encoded are copied.
    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            image: Some(self.state.read().image()),
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
                return Err(io::Error::other(format!(
                    "snapshot {} is older than the current snapshot {}",
                    installing.snapshot_id, current.snapshot_id
                )));
            }
            Ok::<_, io::Error>((state, bytes))
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?
        .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
        let replaced = self.state.replace(state);
        self.state.queue_changes().notify_all();
        // Freed where it holds up neither the state's readers nor a runtime worker; an image
        // a reader still holds keeps its share of it alive until that reader is done.
        tokio::task::spawn_blocking(move || drop(replaced));
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
    use std::time::Duration;

    use openraft::{CommittedLeaderId, EntryPayload};
    use tickd_domain::{Channel, ClockId, Command, QueueId};

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

    /// Registers a clock in `state` as the entry at `index` would.
    fn register_at(state: &mut ReplicatedState, index: u64) {
        state.apply(Command::Register {
            name: format!("clock-{index}"),
            schedule: "every.1.hours".parse().expect("a schedule"),
            id: ClockId::new(format!("{index:032x}")),
            channel: Channel::Http {
                queue_id: QueueId::new(format!("q{index:031x}")),
            },
            max_clocks: u64::MAX,
            now_ms: 1_764_000_000_000,
            overlap: tickd_domain::Overlap::Allow,
        });
        state.last_applied = Some(LogId::new(CommittedLeaderId::new(1, 1), index));
    }

    /// The state machine goes on applying while a snapshot is built, and the snapshot is the
    /// state at one log index all the same. openraft's state machine task applies nothing
    /// while `get_snapshot_builder` runs, so that call must not encode; and the encoding must
    /// not hold the state, or the write that comes during it waits for all of it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_go_on_while_a_snapshot_is_built_and_it_holds_the_state_of_one_index() {
        const CLOCKS: u64 = 20_000;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (_log, mut state_machine, handle) = crate::open(dir.path()).expect("opened");
        {
            let mut state = handle.write();
            for index in 1..=CLOCKS {
                register_at(&mut state, index);
            }
        }
        let asked = Instant::now();
        let mut builder = state_machine.get_snapshot_builder().await;
        let making_the_builder = asked.elapsed();
        let building = tokio::spawn(async move {
            let started = Instant::now();
            let built = builder.build_snapshot().await;
            (built, started.elapsed())
        });
        // Each write registers one more clock; the longest wait for the lock is kept.
        let mut longest_wait = Duration::ZERO;
        let mut index = CLOCKS;
        while !building.is_finished() {
            index += 1;
            let asked = Instant::now();
            let mut state = handle.write();
            longest_wait = longest_wait.max(asked.elapsed());
            register_at(&mut state, index);
        }
        let (built, build_time) = building.await.expect("the build returned");
        let built = built.expect("the snapshot was built");
        let (decoded, _bytes) = SnapshotFile::new(dir.path().join("snapshot"))
            .load()
            .expect("the snapshot reads")
            .expect("a snapshot exists");

        assert_eq!(built.meta.last_log_id.map(|id| id.index), Some(CLOCKS));
        assert_eq!(decoded.last_applied, built.meta.last_log_id);
        assert_eq!(
            decoded.registry.len() as u64,
            CLOCKS,
            "the snapshot holds exactly the clocks applied up to its index"
        );
        assert!(index > CLOCKS + 10, "writes were applied during the build");
        assert!(
            making_the_builder * 4 < build_time,
            "making the builder took {making_the_builder:?} against {build_time:?} for the \
             build: the state machine waited for the encoding"
        );
        assert!(
            longest_wait * 4 < build_time,
            "a write waited {longest_wait:?} for the state while the build took \
             {build_time:?}: the encoding held the state"
        );
    }
}
