//! The consensus core's failure: what a node does when openraft stops on its own.
//!
//! openraft's core quits for good on a storage error (a failed append, vote or snapshot write,
//! ENOSPC or EIO) and on a few internal faults, and it does not restart. The process would
//! stay up answering 503 to every write while a load balancer kept sending it traffic: a
//! zombie. tickd is crash-only instead: the node reports DOWN at once and exits non-zero, so
//! that a supervisor restarts it, which recovers from the durable log and snapshot.

use openraft::error::Fatal;
use tokio::sync::watch;

use crate::view::failure_of;
use crate::{NodeId, Raft};

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

/// What a task of the node does once the consensus core has stopped for good (a halted node,
/// or a failure the node is exiting on): nothing, until the node is told to stop. The node's
/// tasks last as long as the node; one that ended earlier would be taken for a task that died
/// (the node's supervisor exits on that), and a halted node stays up to say why it halted.
pub async fn idle_until_stop(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use openraft::StorageError;
    use openraft::error::Fatal;

    use crate::view::failure_of;

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
