//! Group commit: one thread that fsyncs RocksDB's write-ahead log for every waiter at once.
//!
//! Writers put their data into RocksDB first (unsynced, so it is readable at once) and then
//! enqueue a [`Waiter`]. The thread takes every waiter queued so far, fsyncs the WAL once and
//! completes them all. While one fsync runs, the next batch accumulates: under load each fsync
//! covers many appends, and the fsync never runs on an async worker thread.
//!
//! The queue is unbounded by design: openraft bounds how many appends are in flight (it waits
//! for their callbacks), and a vote save waits for its own completion.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use openraft::storage::LogFlushed;
use rocksdb::DB;
use tickd_raft::TypeConfig;
use tokio::sync::oneshot;

use crate::telemetry;

/// Someone waiting for their writes to be on disk.
pub enum Waiter {
    /// An append: openraft's callback, and when the append began (for its latency metric).
    Append(LogFlushed<TypeConfig>, Instant),
    /// Any other write (a vote): a channel to wake the writer.
    Write(oneshot::Sender<io::Result<()>>),
}

/// Owner of the syncing thread. Dropping it stops the thread and waits for it, so the thread
/// never outlives the store: RocksDB is closed before the store is gone, not by a stray thread
/// racing the process's exit.
pub struct WalSync {
    queue: Option<mpsc::Sender<Waiter>>,
    fsyncs: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<()>>,
}

impl WalSync {
    /// Starts the thread for `db`.
    pub fn start(db: Arc<DB>) -> io::Result<Self> {
        let (queue, waiting) = mpsc::channel();
        let fsyncs = Arc::new(AtomicU64::new(0));
        let counted = fsyncs.clone();
        let thread = thread::Builder::new()
            .name("tickd-wal-sync".into())
            .spawn(move || run(&db, &waiting, &counted))?;
        Ok(Self {
            queue: Some(queue),
            fsyncs,
            thread: Some(thread),
        })
    }

    /// How many fsyncs the thread has done: fewer than the writes it made durable whenever
    /// writes arrived together.
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    /// Completes `waiter` once everything written before this call is fsynced.
    pub fn enqueue(&self, waiter: Waiter) {
        let sent = match &self.queue {
            Some(queue) => queue.send(waiter).map_err(|mpsc::SendError(waiter)| waiter),
            None => Err(waiter),
        };
        if let Err(waiter) = sent {
            complete(waiter, &Err("the WAL sync thread has stopped".to_string()));
        }
    }

    /// Waits until everything written before this call is fsynced.
    pub async fn sync(&self) -> io::Result<()> {
        let (done, wait) = oneshot::channel();
        self.enqueue(Waiter::Write(done));
        wait.await
            .map_err(|_| io::Error::other("the WAL sync thread dropped a waiter"))?
    }
}

impl Drop for WalSync {
    fn drop(&mut self) {
        // Closing the queue ends the thread's loop once it has completed every waiter.
        self.queue.take();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the WAL sync thread panicked");
        }
    }
}

fn run(db: &DB, waiting: &mpsc::Receiver<Waiter>, fsyncs: &AtomicU64) {
    while let Ok(first) = waiting.recv() {
        let mut batch = vec![first];
        batch.extend(waiting.try_iter());
        let started = Instant::now();
        let synced = db
            .flush_wal(fsync_wanted())
            .map_err(|error| error.to_string());
        telemetry::record_fsync(started.elapsed());
        fsyncs.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = &synced {
            tracing::error!(%error, "fsync of the Raft WAL failed");
        }
        for waiter in batch {
            complete(waiter, &synced);
        }
    }
}

/// Whether the WAL is fsynced, as it always is; test builds only (the `fail` crate's
/// `failpoints` feature) may say `raft-wal-fsync=return`, which writes the WAL out without
/// fsyncing it: the negative control of the power-loss tests (tests/tests/power_loss.rs),
/// which must then see acknowledged writes lost.
fn fsync_wanted() -> bool {
    fail::fail_point!("raft-wal-fsync", |_| false);
    true
}

fn complete(waiter: Waiter, synced: &Result<(), String>) {
    let result = synced.clone().map_err(io::Error::other);
    match waiter {
        Waiter::Append(callback, since) => {
            telemetry::record_append(since.elapsed());
            callback.log_io_completed(result);
        }
        // The writer may have given up waiting; nothing is lost by not telling it.
        Waiter::Write(done) => drop(done.send(result)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn concurrent_writers_share_fsyncs() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let db = Arc::new(DB::open_default(dir.path()).expect("open RocksDB"));
        let wal = Arc::new(WalSync::start(db.clone()).expect("start the sync thread"));
        let writers = (0..200u32).map(|index| {
            let (db, wal) = (db.clone(), wal.clone());
            tokio::spawn(async move {
                db.put(index.to_be_bytes(), b"v").expect("write");
                wal.sync().await
            })
        });
        for writer in futures::future::join_all(writers).await {
            writer
                .expect("the writer ran")
                .expect("its write is durable");
        }
        let fsyncs = wal.fsyncs();
        assert!(
            (1..200).contains(&fsyncs),
            "200 concurrent writers took {fsyncs} fsyncs"
        );
    }

    #[tokio::test]
    async fn a_writer_alone_gets_an_fsync_of_its_own() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let db = Arc::new(DB::open_default(dir.path()).expect("open RocksDB"));
        let wal = WalSync::start(db.clone()).expect("start the sync thread");
        assert_eq!(wal.fsyncs(), 0, "nothing to sync yet");
        for index in 0..3u32 {
            db.put(index.to_be_bytes(), b"v").expect("write");
            wal.sync().await.expect("its write is durable");
        }
        assert_eq!(
            wal.fsyncs(),
            3,
            "one after the other, the writes share nothing"
        );
    }
}
