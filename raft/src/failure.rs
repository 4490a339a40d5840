//! The consensus core's failure: what a node does when openraft stops on its own.
//!
//! openraft's core quits for good on a storage error (a failed append, vote or snapshot write,
//! ENOSPC or EIO) and on a few internal faults, and it does not restart. The process would
//! stay up answering 503 to every write while a load balancer kept sending it traffic: a
//! zombie. tickd is crash-only instead: the node reports DOWN at once and exits non-zero, so
//! that a supervisor restarts it, which recovers from the durable log and snapshot.

use openraft::error::Fatal;

use crate::{NodeId, Raft};

/// Why the core stopped, when it stopped on an error rather than being shut down. `None`
/// while it runs, and after an orderly [`Raft::shutdown`].
pub fn core_failure(raft: &Raft) -> Option<Fatal<NodeId>> {
    failure_of(&raft.metrics().borrow().running_state)
}

/// Waits until the core stops on an error and returns why. Never returns after an orderly
/// shutdown, nor while the core runs.
pub async fn core_failed(raft: &Raft) -> Fatal<NodeId> {
    let mut metrics = raft.metrics();
    loop {
        let running = metrics.borrow_and_update().running_state.clone();
        if let Some(fatal) = failure_of(&running) {
            return fatal;
        }
        if metrics.changed().await.is_err() {
            if let Err(Fatal::Stopped) = running {
                // An orderly shutdown (a halted node's, say) said so before the core left.
                return std::future::pending().await;
            }
            // The core is gone without a last word; an orderly shutdown leaves one.
            return Fatal::Panicked;
        }
    }
}

fn failure_of(running: &Result<(), Fatal<NodeId>>) -> Option<Fatal<NodeId>> {
    match running {
        Ok(()) | Err(Fatal::Stopped) => None,
        Err(fatal) => Some(fatal.clone()),
    }
}

#[cfg(test)]
mod tests {
    use openraft::StorageError;
    use openraft::error::Fatal;

    use super::failure_of;

    #[test]
    fn a_storage_error_is_a_failure_and_a_shutdown_is_not() {
        assert!(failure_of(&Ok(())).is_none());
        assert!(failure_of(&Err(Fatal::Stopped)).is_none());
        let io = std::io::Error::from_raw_os_error(28);
        let storage: StorageError<u64> =
            StorageError::from(openraft::StorageIOError::write_logs(&io));
        let failed = failure_of(&Err(Fatal::StorageError(storage))).expect("a failure");
        assert!(failed.to_string().contains("os error 28"), "{failed}");
        assert!(failure_of(&Err(Fatal::Panicked)).is_some());
    }
}
