//! openraft's storage conformance suite against the RocksDB log store and state machine.

use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;
use tickd_raft::{NodeId, TypeConfig};
use tickd_storage::{LogStore, StateMachine};

struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for RocksBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<NodeId>> {
        let dir = TempDir::new().map_err(|e| openraft::StorageIOError::write(&e))?;
        let (log, state_machine, _handle) =
            tickd_storage::open(dir.path()).map_err(|e| openraft::StorageIOError::write(&e))?;
        Ok((dir, log, state_machine))
    }
}

#[test]
fn rocksdb_store_passes_openraft_suite() {
    if let Err(error) = Suite::test_all(RocksBuilder) {
        panic!("the RocksDB store fails openraft's conformance suite: {error}");
    }
}
