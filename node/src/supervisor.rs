//! The node's long-lived tasks, owned by one supervisor: crash-only.
//!
//! Every task a node runs for its whole life (the two listeners, the engine, the monitors,
//! the reporters, the replica's write queue) is spawned here under a name, and none of them
//! ends before the node is told to stop. One that returns or panics earlier has left the
//! node without something it promises (ticks, a listener, a judgement of its clock) while
//! the rest would go on answering UP. The supervisor turns that into the exit a storage
//! failure takes ([`tickd_raft::failure`]): [`Supervisor::failure`] names the task and its
//! cause, the node marks itself failed (health answers DOWN) and exits non-zero, and the
//! service manager's restart recovers from the durable log. Nothing is restarted in
//! process: a task that died may have left its state half-changed, a fresh process has not.
//!
//! A few tasks are meant to finish (forming the cluster): they are spawned with
//! [`Supervisor::spawn_once`], and only a panic of theirs is a failure.

use std::collections::HashMap;
use std::fmt::Display;
use std::time::Duration;

use tokio::task::{self, JoinError, JoinSet};

/// How long [`Supervisor::stop`] waits for the tasks to end once the node is told to stop:
/// the listeners finish their open requests, long polls included (at most 30 s each).
pub const STOP_GRACE: Duration = Duration::from_secs(40);

/// What a supervised task may end with: nothing, or an error that says why it stopped.
pub trait TaskEnd: Send + 'static {
    /// Why the task stopped, when it says.
    fn cause(self) -> Option<String>;
}

impl TaskEnd for () {
    fn cause(self) -> Option<String> {
        None
    }
}

impl<E: Display + Send + 'static> TaskEnd for Result<(), E> {
    fn cause(self) -> Option<String> {
        self.err().map(|error| error.to_string())
    }
}

/// A supervised task ended before the node was told to stop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the `{task}` task {how}")]
pub struct TaskFailure {
    /// The task's name.
    pub task: &'static str,
    /// How it ended: returned, returned an error, or panicked, with the message.
    pub how: String,
}

/// How a task is expected to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lifetime {
    /// Runs until the node stops.
    Node,
    /// Finishes its job; only a panic is a failure.
    Once,
}

/// Owns the node's tasks; see the module's documentation.
#[derive(Default)]
pub struct Supervisor {
    tasks: JoinSet<Option<String>>,
    names: HashMap<task::Id, (&'static str, Lifetime)>,
}

impl Supervisor {
    /// Runs `work` until the node stops: its end before then is a [`TaskFailure`].
    pub fn spawn<T: TaskEnd>(
        &mut self,
        name: &'static str,
        work: impl Future<Output = T> + Send + 'static,
    ) {
        self.start(name, Lifetime::Node, work);
    }

    /// Runs `work`, which finishes its job and ends: only a panic is a [`TaskFailure`], or an
    /// error it ends with.
    pub fn spawn_once<T: TaskEnd>(
        &mut self,
        name: &'static str,
        work: impl Future<Output = T> + Send + 'static,
    ) {
        self.start(name, Lifetime::Once, work);
    }

    fn start<T: TaskEnd>(
        &mut self,
        name: &'static str,
        lifetime: Lifetime,
        work: impl Future<Output = T> + Send + 'static,
    ) {
        let handle = self.tasks.spawn(async move { work.await.cause() });
        self.names.insert(handle.id(), (name, lifetime));
    }

    /// Waits for the first task to fail, and says which and how. Never returns while every
    /// task runs (or has finished its job). Cancel-safe: a `select!` may drop it and call it
    /// again without losing a failure.
    pub async fn failure(&mut self) -> TaskFailure {
        loop {
            let Some(joined) = self.tasks.join_next_with_id().await else {
                // Nothing left to supervise: nothing can fail any more.
                return std::future::pending().await;
            };
            if let Some(failure) = self.judge(joined) {
                return failure;
            }
        }
    }

    /// What one task's end means: `None` when it was allowed to end.
    fn judge(
        &mut self,
        joined: Result<(task::Id, Option<String>), JoinError>,
    ) -> Option<TaskFailure> {
        let (id, how) = match joined {
            Ok((id, None)) => (id, None),
            Ok((id, Some(cause))) => (id, Some(format!("stopped on an error: {cause}"))),
            Err(error) => (error.id(), Some(ended_abnormally(error))),
        };
        let (task, lifetime) = self
            .names
            .remove(&id)
            .unwrap_or(("unnamed", Lifetime::Node));
        let how = match (how, lifetime) {
            (Some(how), _) => how,
            (None, Lifetime::Node) => "returned: it must run until the node stops".to_owned(),
            (None, Lifetime::Once) => return None,
        };
        Some(TaskFailure { task, how })
    }

    /// Waits, after the node was told to stop, for every task to end, up to `grace`; the
    /// tasks still running then are named in the log and aborted. A task that ends with an
    /// error or a panic meanwhile is logged too.
    pub async fn stop(mut self, grace: Duration) {
        let ended = tokio::time::timeout(grace, async {
            while let Some(joined) = self.tasks.join_next_with_id().await {
                let (id, problem) = match joined {
                    Ok((id, cause)) => (id, cause),
                    Err(error) => (error.id(), Some(ended_abnormally(error))),
                };
                let (task, _) = self
                    .names
                    .remove(&id)
                    .unwrap_or(("unnamed", Lifetime::Node));
                if let Some(problem) = problem {
                    tracing::warn!(task, problem, "a task stopped badly during shutdown");
                }
            }
        })
        .await;
        if ended.is_err() {
            let running: Vec<&str> = self.names.values().map(|(name, _)| *name).collect();
            tracing::warn!(
                ?running,
                grace_s = grace.as_secs(),
                "tasks still running after the shutdown grace; aborting them"
            );
            self.tasks.abort_all();
        }
    }
}

/// A join error in words: the panic's message, or that the task was cancelled.
fn ended_abnormally(error: JoinError) -> String {
    if error.is_cancelled() {
        return "was cancelled".to_owned();
    }
    let payload = error.into_panic();
    let message = payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    format!("panicked: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that panics with `message`.
    async fn panics(message: &'static str) {
        panic!("{message}");
    }

    async fn first_failure(supervisor: &mut Supervisor) -> Option<TaskFailure> {
        within(Duration::from_secs(5), supervisor).await
    }

    async fn within(wait: Duration, supervisor: &mut Supervisor) -> Option<TaskFailure> {
        tokio::time::timeout(wait, supervisor.failure()).await.ok()
    }

    #[tokio::test]
    async fn a_task_that_returns_is_a_failure_named_after_it() {
        let mut supervisor = Supervisor::default();
        supervisor.spawn("lasting", std::future::pending::<()>());
        supervisor.spawn("engine", async {});
        let failure = first_failure(&mut supervisor).await.expect("a failure");
        assert_eq!(failure.task, "engine");
        assert!(failure.how.starts_with("returned"), "{failure}");
    }

    #[tokio::test]
    async fn a_panic_is_a_failure_with_its_message() {
        let mut supervisor = Supervisor::default();
        supervisor.spawn("monitor", panics("the clock went backwards"));
        let failure = first_failure(&mut supervisor).await.expect("a failure");
        assert_eq!(failure.task, "monitor");
        assert_eq!(failure.how, "panicked: the clock went backwards");
        assert_eq!(
            failure.to_string(),
            "the `monitor` task panicked: the clock went backwards"
        );
    }

    #[tokio::test]
    async fn an_error_is_a_failure_with_its_cause() {
        let mut supervisor = Supervisor::default();
        supervisor.spawn("listener", async {
            Err::<(), _>(std::io::Error::other("too many open files"))
        });
        let failure = first_failure(&mut supervisor).await.expect("a failure");
        assert_eq!(failure.how, "stopped on an error: too many open files");
    }

    #[tokio::test]
    async fn a_job_may_finish_but_not_panic() {
        let mut supervisor = Supervisor::default();
        supervisor.spawn_once("bootstrap", async {});
        let finished = within(Duration::from_millis(300), &mut supervisor).await;
        assert_eq!(finished, None, "a job that finished");
        supervisor.spawn_once("bootstrap", panics("no members"));
        let failure = first_failure(&mut supervisor).await.expect("a failure");
        assert_eq!(failure.how, "panicked: no members");
    }

    #[tokio::test]
    async fn stop_waits_for_tasks_and_aborts_those_past_the_grace() {
        let mut supervisor = Supervisor::default();
        let (ended, ends) = tokio::sync::oneshot::channel();
        supervisor.spawn("quick", async {
            task::yield_now().await;
            let _ = ended.send(());
        });
        let (dropped, drops) = tokio::sync::oneshot::channel::<()>();
        supervisor.spawn("stuck", async move {
            let _held = dropped;
            std::future::pending::<()>().await;
        });
        supervisor.stop(Duration::from_millis(200)).await;
        assert_eq!(ends.await, Ok(()), "the quick task ran to its end");
        assert!(drops.await.is_err(), "the stuck task was aborted");
    }
}
