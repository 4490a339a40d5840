//! The simulation's openraft type configuration and the runtime behind it.
//!
//! Production's [`tickd_raft::TypeConfig`] runs on openraft's `TokioRuntime`, whose only
//! randomness is the election timeout, drawn from `rand::thread_rng()`, and keeps snapshots in
//! files (read and written on tokio's blocking pool, threads the simulation cannot order).
//! [`SimConfig`] carries the same commands, responses, node ids and addresses, so the real
//! [`tickd_raft::ReplicatedState`] applies its entries, but keeps snapshots in memory and runs
//! on [`SimRuntime`]: tokio, on the simulation's one thread, with the election timeouts drawn
//! from the seed.

use std::cell::Cell;
use std::future::Future;
use std::io::Cursor;
use std::time::Duration;

use openraft::async_runtime::TokioOneShotSender;
use openraft::{AsyncRuntime, OptionalSend, TokioInstant};
use tickd_domain::Command;
use tickd_raft::{NodeAddr, NodeId, Response};

openraft::declare_raft_types!(
    /// tickd's Raft types with in-memory snapshots, on the seeded [`SimRuntime`].
    pub SimConfig:
        D = Command,
        R = Response,
        NodeId = NodeId,
        Node = NodeAddr,
        Entry = openraft::Entry<SimConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = SimRuntime,
);

thread_local! {
    /// The state of the generator behind [`SimRuntime::thread_rng`] on this thread: set from
    /// the seed when a simulation starts ([`seed_thread_rng`]).
    static RAFT_RNG: Cell<u64> = const { Cell::new(0) };
}

/// Seeds the generator openraft draws its election timeouts from, on this thread.
pub fn seed_thread_rng(seed: u64) {
    RAFT_RNG.with(|state| state.set(seed));
}

/// SplitMix64, as [`tickd_tests::chaos::rng::Rng`], as the rand 0.8 generator openraft asks
/// for. Each [`SimRuntime::thread_rng`] call takes a fresh one from the thread's stream, so the
/// draws follow the order of the calls, which the single-threaded runtime makes repeatable.
#[derive(Debug)]
pub struct SimRng(tickd_tests::chaos::rng::Rng);

impl rand08::RngCore for SimRng {
    fn next_u32(&mut self) -> u32 {
        // The high half: SplitMix64's best-mixed bits.
        u32::try_from(self.0.next_u64() >> 32).unwrap_or(u32::MAX)
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.0.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand08::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// openraft's tokio runtime with seeded randomness.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SimRuntime;

impl AsyncRuntime for SimRuntime {
    type JoinError = tokio::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = tokio::task::JoinHandle<T>;
    type Sleep = tokio::time::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = tokio::time::error::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = tokio::time::Timeout<T>;
    type ThreadLocalRng = SimRng;
    type OneshotSender<T: OptionalSend> = TokioOneShotSender<T>;
    type OneshotReceiver<T: OptionalSend> = tokio::sync::oneshot::Receiver<T>;
    type OneshotReceiverError = tokio::sync::oneshot::error::RecvError;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        tokio::task::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        tokio::time::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        tokio::time::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        join_error.is_panic()
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        let seed = RAFT_RNG.with(|state| {
            let mut stream = tickd_tests::chaos::rng::Rng::new(state.get());
            let seed = stream.next_u64();
            state.set(seed);
            seed
        });
        SimRng(tickd_tests::chaos::rng::Rng::new(seed))
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        (TokioOneShotSender(sender), receiver)
    }
}
