//! Shared leadership confirmations: concurrent linearizable reads on one node share one
//! read-index round.
//!
//! A read index costs the leader a heartbeat round to a quorum. Without sharing, N concurrent
//! reads on a node cost N rounds, and a burst of unauthenticated pops could keep the leader so
//! busy confirming that it lost its lease. Here at most one round per [`ReadRounds`] is in
//! flight at a time:
//!
//! * a reader that arrives while no round runs starts one;
//! * a reader that arrives while a round runs may not use it (that round may have started
//!   before the reader's write was acknowledged, and its index could miss the write), so it
//!   queues for the *next* round, which starts as soon as the running one ends, shared by
//!   every reader that queued meanwhile.
//!
//! So every reader gets the result of a round that started after it arrived, which is what
//! makes the read linearizable, and a node never runs more than one round at a time: a burst
//! of any size costs at most two rounds.
//!
//! A round may also be spaced: it starts no sooner than `spacing` after the previous one
//! started. The replica uses that for reads that are probably bogus (a pop of a queue this
//! node has never heard of), so that a flood of them confirms leadership at most once per
//! spacing.
//!
//! Rounds run in their own task, so a reader that goes away (its client hung up) cannot
//! strand the readers that share its round.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

/// One round: it runs the confirmation and resolves to its result.
type Round<T> = Arc<dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = T> + Send>> + Send + Sync>;

/// Where the readers of one round wait for its result (`None` until it is known).
type Outcome<T> = watch::Sender<Option<T>>;

/// Coalesces concurrent confirmations (see the module documentation).
pub(crate) struct ReadRounds<T> {
    shared: Arc<Mutex<Rounds<T>>>,
    round: Round<T>,
    spacing: Duration,
}

impl<T> Clone for ReadRounds<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            round: self.round.clone(),
            spacing: self.spacing,
        }
    }
}

/// The rounds' bookkeeping.
struct Rounds<T> {
    /// Whether a round is running (or waiting out its spacing).
    running: bool,
    /// The round that readers arriving now will share: it starts when the running one ends.
    next: Option<Outcome<T>>,
    /// When the last round started, for the spacing.
    last_start: Option<Instant>,
    /// How many rounds have started, for tests and metrics.
    started: u64,
}

impl<T: Clone + Send + Sync + 'static> ReadRounds<T> {
    /// Rounds that run `round`, each starting at least `spacing` after the previous one.
    pub(crate) fn new<F, Fut>(spacing: Duration, round: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        Self {
            shared: Arc::new(Mutex::new(Rounds {
                running: false,
                next: None,
                last_start: None,
                started: 0,
            })),
            round: Arc::new(move || Box::pin(round())),
            spacing,
        }
    }

    /// The result of a round that started after this call. `None` when the round's task died
    /// without a result (it panicked, or the runtime is shutting down).
    pub(crate) async fn confirm(&self) -> Option<T> {
        let mut outcome = {
            let mut rounds = self.lock();
            if rounds.running {
                rounds
                    .next
                    .get_or_insert_with(|| watch::channel(None).0)
                    .subscribe()
            } else {
                rounds.running = true;
                let (outcome, receiver) = watch::channel(None);
                tokio::spawn(self.clone().run(outcome));
                receiver
            }
        };
        let result = outcome.wait_for(Option::is_some).await.ok()?;
        result.clone()
    }

    /// How many rounds have started so far.
    #[cfg(test)]
    pub(crate) fn started(&self) -> u64 {
        self.lock().started
    }

    /// Runs rounds back to back while readers queue for them, then stops.
    async fn run(self, first: Outcome<T>) {
        // If a round panics, the readers queued for the next one must not wait forever: the
        // guard drops their channel (they get `None`) and lets the next reader start afresh.
        let _reset = ResetOnPanic(self.shared.clone());
        let mut outcome = first;
        loop {
            let start_at = self.lock().last_start.map(|last| last + self.spacing);
            if let Some(at) = start_at {
                sleep_until(at).await;
            }
            {
                let mut rounds = self.lock();
                rounds.last_start = Some(Instant::now());
                rounds.started += 1;
            }
            let result = (self.round)().await;
            outcome.send_replace(Some(result));
            let mut rounds = self.lock();
            match rounds.next.take() {
                Some(next) => outcome = next,
                None => {
                    rounds.running = false;
                    return;
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Rounds<T>> {
        lock(&self.shared)
    }
}

fn lock<T>(shared: &Mutex<Rounds<T>>) -> MutexGuard<'_, Rounds<T>> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Clears the running round if its task unwinds.
struct ResetOnPanic<T>(Arc<Mutex<Rounds<T>>>);

impl<T> Drop for ResetOnPanic<T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut rounds = lock(&self.0);
            rounds.running = false;
            rounds.next = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// Rounds that take `takes` and return their own sequence number (1, 2, …).
    fn numbered(takes: Duration, spacing: Duration) -> ReadRounds<u64> {
        let count = Arc::new(AtomicU64::new(0));
        ReadRounds::new(spacing, move || {
            let count = count.clone();
            async move {
                let number = count.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(takes).await;
                number
            }
        })
    }

    #[tokio::test]
    async fn a_lone_reader_starts_its_own_round() {
        let rounds = numbered(Duration::from_millis(10), Duration::ZERO);
        assert_eq!(rounds.confirm().await, Some(1));
        assert_eq!(
            rounds.confirm().await,
            Some(2),
            "a later read never reuses a round"
        );
        assert_eq!(rounds.started(), 2);
    }

    #[tokio::test]
    async fn a_burst_shares_at_most_two_rounds() {
        let rounds = numbered(Duration::from_millis(300), Duration::ZERO);
        let first = tokio::spawn({
            let rounds = rounds.clone();
            async move { rounds.confirm().await }
        });
        // Let the first round start, then 500 readers arrive while it runs.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let burst: Vec<_> = (0..500)
            .map(|_| {
                let rounds = rounds.clone();
                tokio::spawn(async move { rounds.confirm().await })
            })
            .collect();
        assert_eq!(first.await.ok().flatten(), Some(1));
        for reader in burst {
            // They arrived after round 1 started, so they must get round 2.
            assert_eq!(reader.await.ok().flatten(), Some(2));
        }
        assert_eq!(rounds.started(), 2);
    }

    #[tokio::test]
    async fn readers_that_arrive_together_share_the_round_they_start() {
        let rounds = numbered(Duration::from_millis(100), Duration::ZERO);
        let together: Vec<_> = (0..100)
            .map(|_| {
                let rounds = rounds.clone();
                tokio::spawn(async move { rounds.confirm().await })
            })
            .collect();
        let mut got = Vec::new();
        for reader in together {
            got.push(reader.await.ok().flatten());
        }
        // One starts round 1; the others arrived while it ran and share round 2.
        assert_eq!(got.iter().filter(|result| **result == Some(1)).count(), 1);
        assert_eq!(got.iter().filter(|result| **result == Some(2)).count(), 99);
        assert_eq!(rounds.started(), 2);
    }

    #[tokio::test]
    async fn every_reader_gets_a_round_that_started_after_it_arrived() {
        let in_flight = Arc::new(AtomicU64::new(0));
        let most_in_flight = Arc::new(AtomicU64::new(0));
        let rounds = {
            let (in_flight, most_in_flight) = (in_flight.clone(), most_in_flight.clone());
            ReadRounds::new(Duration::ZERO, move || {
                let (in_flight, most_in_flight) = (in_flight.clone(), most_in_flight.clone());
                async move {
                    let started = Instant::now();
                    let now_in_flight = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most_in_flight.fetch_max(now_in_flight, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(7)).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    started
                }
            })
        };
        let readers: Vec<_> = (0..60u64)
            .map(|i| {
                let rounds = rounds.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(i * 3 % 40)).await;
                    let arrived = Instant::now();
                    let started = rounds.confirm().await;
                    (arrived, started)
                })
            })
            .collect();
        for reader in readers {
            let (arrived, started) = reader.await.expect("the reader finished");
            let started = started.expect("a result");
            assert!(
                started >= arrived,
                "a round that started before the read was used"
            );
        }
        assert_eq!(
            most_in_flight.load(Ordering::SeqCst),
            1,
            "one round at a time"
        );
        assert!(rounds.started() < 60, "readers shared rounds");
    }

    #[tokio::test]
    async fn spaced_rounds_start_at_most_once_per_spacing() {
        let rounds = numbered(Duration::from_millis(1), Duration::from_millis(50));
        let begun = Instant::now();
        for expected in 1..=5 {
            assert_eq!(rounds.confirm().await, Some(expected));
        }
        // Rounds 2 to 5 each waited for the spacing after the one before.
        assert!(begun.elapsed() >= Duration::from_millis(200));
        assert_eq!(rounds.started(), 5);
    }

    #[tokio::test]
    async fn a_reader_that_goes_away_strands_nobody() {
        let rounds = numbered(Duration::from_millis(10), Duration::ZERO);
        let starter = tokio::spawn({
            let rounds = rounds.clone();
            async move { rounds.confirm().await }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        starter.abort();
        assert_eq!(rounds.confirm().await, Some(2));
    }

    #[tokio::test]
    async fn a_round_that_panics_leaves_the_next_reader_a_fresh_round() {
        let calls = Arc::new(AtomicU64::new(0));
        let rounds = {
            let calls = calls.clone();
            ReadRounds::new(Duration::ZERO, move || {
                let calls = calls.clone();
                async move {
                    let call = calls.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    assert!(call > 0, "the first round fails");
                    call
                }
            })
        };
        assert_eq!(
            rounds.confirm().await,
            None,
            "the reader learns there is no result"
        );
        assert_eq!(rounds.confirm().await, Some(1));
    }
}
