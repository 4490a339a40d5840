//! Group commit of client writes: the writes that queue up on a node while its earlier
//! proposals are in flight travel together, as one [`Command::Batch`] log entry.
//!
//! openraft 0.9 appends every `client_write` as its own entry, so without this each
//! registration costs the leader one pass of its core loop, one fsync and one replication
//! round, and a follower one HTTP request to the leader. Those per-write costs, not the
//! registry, bounded registrations per second.
//!
//! The rule is the classic group commit: at most [`IN_FLIGHT`] proposals are outstanding per
//! node; while they are, new writes wait in a queue, and the next free slot takes everything
//! waiting (up to [`MAX_BATCH`]) as one proposal. An idle node therefore proposes a write the
//! moment it arrives, alone and unchanged, and a busy one amortises the per-entry costs over
//! as many writes as arrived during one commit. Commands of a batch are applied in the order
//! they were queued, and each caller gets its own command's outcome.

use std::sync::Arc;

use tickd_domain::{Command, Outcome};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use crate::{ReplicaError, Response, telemetry};

/// Proposals one node keeps outstanding. Two keep the pipeline full (one commits while the
/// next gathers) without splitting a burst into many small entries.
const IN_FLIGHT: usize = 2;
/// The most commands in one entry: a few hundred registrations make an entry of tens of
/// kilobytes, far below the RPC body limit, and bound how long one apply holds the state lock.
const MAX_BATCH: usize = 256;
/// Writes that may wait for a slot before callers wait to queue (backpressure on the API).
const QUEUE_DEPTH: usize = 4 * MAX_BATCH;

/// Proposes one command (a single write or a [`Command::Batch`]) within what is left of the
/// forwarding deadline counted from the given instant, which is when its oldest write queued.
pub(crate) trait Propose: Send + Sync + 'static {
    /// Commits `command` through the leader.
    fn propose(
        &self,
        command: Command,
        since: Instant,
    ) -> impl Future<Output = Result<Response, ReplicaError>> + Send;
}

/// A write waiting for a proposal slot, and where its result goes.
struct Queued {
    command: Command,
    queued_at: Instant,
    answer: oneshot::Sender<Result<Response, ReplicaError>>,
}

/// The queue in front of a node's proposals. Cloning it shares the queue.
#[derive(Clone)]
pub(crate) struct Batcher {
    queue: mpsc::Sender<Queued>,
}

impl Batcher {
    /// A queue, and the task that drains it into proposals, for the caller to run for as long
    /// as writes may come. The task ends when the last clone of the batcher is dropped.
    pub(crate) fn new(proposer: impl Propose) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (queue, waiting) = mpsc::channel(QUEUE_DEPTH);
        (Self { queue }, drain(waiting, Arc::new(proposer)))
    }

    /// Queues `command` and waits for its own result.
    pub(crate) async fn submit(&self, command: Command) -> Result<Response, ReplicaError> {
        let (answer, result) = oneshot::channel();
        let queued = Queued {
            command,
            queued_at: Instant::now(),
            answer,
        };
        let stopped = || ReplicaError::Stopped("this node's write queue has stopped".into());
        self.queue.send(queued).await.map_err(|_| stopped())?;
        result.await.map_err(|_| stopped())?
    }
}

/// Takes a free slot, then everything queued by then, and proposes it in a task of its own.
async fn drain<P: Propose>(mut waiting: mpsc::Receiver<Queued>, proposer: Arc<P>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Some(first) = waiting.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match waiting.try_recv() {
                Ok(queued) => batch.push(queued),
                Err(_) => break,
            }
        }
        telemetry::record_write_batch(batch.len());
        let proposer = Arc::clone(&proposer);
        let span = tracing::debug_span!("batch", commands = batch.len());
        tokio::spawn(
            async move {
                settle(batch, proposer.as_ref()).await;
                drop(slot);
            }
            .instrument(span),
        );
    }
}

/// Proposes `batch` and hands every caller its own result. A lone write is proposed as
/// itself, so an idle node's log looks exactly as it would without batching.
async fn settle<P: Propose>(mut batch: Vec<Queued>, proposer: &P) {
    // The queue is first in, first out: the first write is the oldest.
    let since = batch[0].queued_at;
    if batch.len() == 1 {
        let Queued {
            command, answer, ..
        } = batch.remove(0);
        // A caller that gave up no longer listens; its write still commits.
        let _ = answer.send(proposer.propose(command, since).await);
        return;
    }
    let (commands, answers): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|queued| (queued.command, queued.answer))
        .unzip();
    let count = commands.len();
    let results = split(
        proposer.propose(Command::Batch(commands), since).await,
        count,
    );
    for (answer, result) in answers.into_iter().zip(results) {
        let _ = answer.send(result);
    }
}

/// One result per command of a batch of `count`: each outcome of the batch with the entry's
/// index, or the batch's error for every command.
fn split(
    result: Result<Response, ReplicaError>,
    count: usize,
) -> Vec<Result<Response, ReplicaError>> {
    match result {
        Ok(Response {
            outcome: Some(Outcome::Batch(outcomes)),
            index,
        }) if outcomes.len() == count => outcomes
            .into_iter()
            .map(|outcome| {
                Ok(Response {
                    outcome: Some(outcome),
                    index,
                })
            })
            .collect(),
        Ok(_) => {
            let error = ReplicaError::Stopped(format!(
                "the state machine did not answer a batch of {count} commands with one \
                 outcome per command; the leader runs an incompatible version"
            ));
            vec![Err(error); count]
        }
        Err(error) => vec![Err(error); count],
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use tickd_domain::{Channel, ClockId, QueueId, Schedule};

    use super::*;

    /// Applies what it is given to a real registry after a pause as long as a commit, and
    /// remembers the size of every proposal.
    #[derive(Default)]
    struct SlowRegistry {
        registry: Mutex<tickd_domain::Registry>,
        proposals: Mutex<Vec<usize>>,
    }

    impl Propose for Arc<SlowRegistry> {
        async fn propose(
            &self,
            command: Command,
            _since: Instant,
        ) -> Result<Response, ReplicaError> {
            let size = match &command {
                Command::Batch(commands) => commands.len(),
                _ => 1,
            };
            self.proposals.lock().expect("proposals").push(size);
            tokio::time::sleep(Duration::from_millis(20)).await;
            let outcome = self.registry.lock().expect("registry").apply(command);
            Ok(Response {
                outcome: Some(outcome),
                index: Some(1),
            })
        }
    }

    fn tick(id: &str) -> Command {
        Command::Tick {
            id: ClockId::new(id.to_owned()),
            now_ms: 0,
            request: None,
        }
    }

    #[tokio::test]
    async fn an_idle_node_proposes_a_write_alone_and_unchanged() {
        let registry = Arc::new(SlowRegistry::default());
        let (batcher, proposals) = Batcher::new(Arc::clone(&registry));
        tokio::spawn(proposals);
        for _ in 0..3 {
            let response = batcher.submit(tick("missing")).await;
            assert_eq!(
                response.ok().and_then(|r| r.outcome),
                Some(Outcome::NotFound)
            );
        }
        assert_eq!(
            *registry.proposals.lock().expect("proposals"),
            vec![1, 1, 1]
        );
    }

    #[tokio::test]
    async fn writes_that_queue_behind_full_slots_share_an_entry_and_keep_their_outcomes() {
        let registry = Arc::new(SlowRegistry::default());
        let (batcher, proposals) = Batcher::new(Arc::clone(&registry));
        tokio::spawn(proposals);
        // Every write registers a clock of its own, so every outcome in a batch differs and
        // a caller handed another caller's outcome sees the wrong id and name.
        let writers: Vec<_> = (0..50)
            .map(|n| {
                let batcher = batcher.clone();
                tokio::spawn(async move {
                    let command = Command::Register {
                        name: format!("clock-{n}"),
                        schedule: Schedule::parse("every.1.seconds").expect("a schedule"),
                        id: ClockId::new(format!("id-{n}")),
                        channel: Channel::Http {
                            queue_id: QueueId::new(format!("queue-{n}")),
                        },
                        max_clocks: 1_000,
                        now_ms: n,
                        overlap: tickd_domain::Overlap::Allow,
                    };
                    batcher.submit(command).await
                })
            })
            .collect();
        for (n, writer) in writers.into_iter().enumerate() {
            let response = writer.await.expect("writer task");
            let outcome = response.ok().and_then(|r| r.outcome);
            let Some(Outcome::Registered {
                clock,
                created: true,
            }) = &outcome
            else {
                panic!("writer {n}: a new clock, got {outcome:?}");
            };
            assert_eq!(
                (clock.id.to_string(), &*clock.name),
                (format!("id-{n}"), format!("clock-{n}").as_str()),
                "writer {n} got another write's outcome"
            );
        }
        let proposals = registry.proposals.lock().expect("proposals").clone();
        assert_eq!(proposals.iter().sum::<usize>(), 50, "{proposals:?}");
        assert!(
            proposals.len() <= 2 * IN_FLIGHT + 1,
            "50 writes behind {IN_FLIGHT} slots took {} proposals: {proposals:?}",
            proposals.len()
        );
    }

    #[test]
    fn a_failed_batch_fails_every_write_and_a_malformed_answer_is_an_error() {
        let error = ReplicaError::Stopped("gone".into());
        let results = split(Err(error), 3);
        assert_eq!(results.len(), 3);
        assert!(results.iter().all(Result::is_err));
        let short = Response {
            outcome: Some(Outcome::Batch(vec![Outcome::NotFound])),
            index: Some(4),
        };
        assert!(split(Ok(short), 2).iter().all(Result::is_err));
        let whole = Response {
            outcome: Some(Outcome::Batch(vec![Outcome::NotFound, Outcome::Touched])),
            index: Some(4),
        };
        let outcomes: Vec<_> = split(Ok(whole), 2)
            .into_iter()
            .map(|result| result.ok().and_then(|r| r.outcome))
            .collect();
        assert_eq!(
            outcomes,
            vec![Some(Outcome::NotFound), Some(Outcome::Touched)]
        );
    }
}
