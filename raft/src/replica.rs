//! [`Replica`]: write anywhere, read anywhere.
//!
//! A write is proposed locally when this node leads and forwarded to the leader's internal
//! write route otherwise. While an election runs there is no leader to forward to, so the
//! replica retries with capped exponential backoff until the forwarding deadline; then the
//! caller gets [`ReplicaError::NoLeader`], which the API turns into a 503 with `Retry-After`.
//!
//! A read is made linearizable with a read index: the leader confirms it still leads with a
//! quorum and names its commit index; this node waits until it has applied that index and then
//! reads its own copy. Reads cost one round trip to the leader and no log write, and
//! concurrent reads on one node share that round trip ([`read_rounds`]): a burst of reads costs
//! the leader at most two confirmations, never one per read.

mod read_rounds;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, ClientWriteError, ForwardToLeader, RaftError};
use tickd_domain::webhook::FailingReceivers;
use tickd_domain::{Command, Outcome};
use tokio::time::{Instant, sleep};
use tracing::{Span, field};

use self::read_rounds::ReadRounds;
use crate::batching::{Batcher, Propose};
use crate::cluster_clock::ClusterClock;
use crate::leader_loss::LeaderContact;
use crate::membership::{self, CATCH_UP_TIMEOUT, Members, MembershipChange, MembershipError, Step};
use crate::network::{
    MEMBERSHIP_PATH, PeerTransport, READ_INDEX_PATH, STATUS_PATH, TransportError, WRITE_PATH,
};
use crate::progress::{ProgressCell, ReplicationProgress};
use crate::status::{NodeStatus, ReceiverReports};
use crate::telemetry;
use crate::view::{ClusterView, ClusterWatch};
use crate::{NodeAddr, NodeId, Raft, Response, StateHandle};

/// The first pause before retrying when no leader is known; it doubles up to
/// [`MAX_RETRY_BACKOFF`].
const FIRST_RETRY_BACKOFF: Duration = Duration::from_millis(25);
/// The longest pause between two attempts: an election takes about a second, so waiting
/// longer than this between attempts would only add latency.
const MAX_RETRY_BACKOFF: Duration = Duration::from_millis(400);
/// How long a membership change may take, end to end: a new node's catch-up, two membership
/// commits, and an election's worth of retries when the leader changes meanwhile. It replaces
/// the forwarding deadline, which is sized for one commit.
const MEMBERSHIP_DEADLINE: Duration = CATCH_UP_TIMEOUT.saturating_add(Duration::from_secs(15));
/// The least time between two starts of the read-index rounds of
/// [`Replica::linearize_throttled`], the reads that are probably bogus (a pop of a queue this
/// node has never heard of): a flood of them costs the leader at most ten confirmations a
/// second from each node, and a genuine read of that kind (a queue registered a moment ago on
/// another node) waits at most this much longer.
pub const THROTTLED_READ_SPACING: Duration = Duration::from_millis(100);

/// How many times a large entry's bytes are handled one after another before it commits and
/// its writer hears back: sent to the leader and decoded there, encoded into the leader's log,
/// encoded for the followers' appends, decoded and appended by the followers (in parallel, so
/// once), and decoded into the registry at apply. A 16 MiB restore through a follower of a
/// debug build missed a deadline of one pass (10 s) on a loaded two-core machine, and took
/// 23 s end to end once given more; at five, it is given 25 s, and a 32 MiB restore 45 s,
/// inside the listeners' 60 s request timeout.
const LARGE_ENTRY_PASSES: u64 = 5;

/// What one read-index round yields: the leader's commit index (`None` when the log is empty).
type ReadIndex = Result<Option<u64>, ReplicaError>;

/// Why a write or a linearizable read could not be served.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReplicaError {
    /// No leader accepted the request before the forwarding deadline.
    #[error(
        "no leader could be reached within {} ms ({reason}); the cluster is electing a \
         leader or has lost its majority, retry shortly",
        waited.as_millis()
    )]
    NoLeader {
        /// How long the replica tried.
        waited: Duration,
        /// The last obstacle, for the operator.
        reason: String,
    },
    /// The local Raft node has stopped (shutdown or a storage failure).
    #[error("this node's consensus module has stopped: {0}")]
    Stopped(String),
    /// This node does not lead, or a quorum did not confirm that it still does.
    #[error("this node cannot confirm that it leads: {0}")]
    NotLeading(String),
}

/// This node's handle on the cluster: propose, read, inspect.
#[derive(Clone)]
pub struct Replica {
    route: LeaderRoute,
    state: StateHandle,
    /// Client writes queue here and are proposed in batches (see [`crate::batching`]).
    writes: Batcher,
    /// The read-index rounds that concurrent linearizable reads share.
    reads: ReadRounds<ReadIndex>,
    /// The spaced rounds of [`Self::linearize_throttled`].
    throttled_reads: ReadRounds<ReadIndex>,
    /// The leader's latest judgement of replication's progress (see [`crate::progress`]).
    progress: ProgressCell,
    /// Why this node is about to exit, once it is (see [`Self::mark_failed`]).
    failed: Arc<OnceLock<String>>,
    /// The webhook receivers the engine last reported failing (see
    /// [`Self::report_failing_receivers`]).
    receiver_reports: ReceiverReports,
    /// When this node last accepted a leader's append (see [`crate::leader_loss`]).
    leader_contact: LeaderContact,
}

/// How this node reaches the leader: itself when it leads, else the leader's internal routes.
/// It is the part of a [`Replica`] that the write batcher's task owns, so that the task holds
/// no handle on its own queue.
#[derive(Clone)]
struct LeaderRoute {
    id: NodeId,
    raft: Raft,
    transport: PeerTransport,
    /// Refuses writes while this node leads with a clock beyond the bound.
    clock: ClusterClock,
    /// How long one request may wait for a leader.
    deadline: Duration,
}

/// How the leader's internal write route says no.
type WriteRefusal = RaftError<NodeId, ClientWriteError<NodeId, NodeAddr>>;
/// How the leader's read-index route says no.
type ReadRefusal = RaftError<NodeId, CheckIsLeaderError<NodeId, NodeAddr>>;
/// What the leader's membership route answers: the change's result, or why it could not try
/// (it no longer leads).
pub type MembershipAnswer = Result<Result<Members, MembershipError>, String>;

/// The result of one attempt: either final, or worth retrying for the given reason.
enum Attempt<T> {
    Done(Result<T, ReplicaError>),
    Retry(String),
}

impl Replica {
    /// Wires a replica. `deadline` bounds how long one write or read may wait for a leader;
    /// `clock` is this node's view of the cluster's clocks (measured by
    /// `crate::clock_monitor`).
    ///
    /// Also returns the task that proposes the queued writes, for the caller to run for the
    /// node's life (the node's supervisor does); it ends once every clone of the replica is
    /// dropped.
    pub fn new(
        id: NodeId,
        raft: Raft,
        state: StateHandle,
        transport: PeerTransport,
        deadline: Duration,
        clock: ClusterClock,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let route = LeaderRoute {
            id,
            raft,
            transport,
            clock,
            deadline,
        };
        let (writes, proposals) = Batcher::new(route.clone());
        let replica = Self {
            writes,
            reads: read_index_rounds(&route, Duration::ZERO),
            throttled_reads: read_index_rounds(&route, THROTTLED_READ_SPACING),
            route,
            state,
            progress: ProgressCell::default(),
            failed: Arc::default(),
            receiver_reports: ReceiverReports::default(),
            leader_contact: LeaderContact::default(),
        };
        (replica, proposals)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.route.id
    }

    /// The local openraft instance, for this crate's monitors; the rest of the node sees
    /// consensus through [`Self::cluster`], [`Self::watch_cluster`] and the writes and reads
    /// below.
    pub(crate) fn raft(&self) -> &Raft {
        &self.route.raft
    }

    /// This node's view of the cluster now.
    pub fn cluster(&self) -> ClusterView {
        let mut view = ClusterView::of(&self.route.raft.metrics().borrow());
        if view.failure.is_none() {
            view.failure = self.failed.get().cloned();
        }
        view
    }

    /// Records that this node failed outside its consensus core (a task of the node died)
    /// and is about to exit: from now on [`Self::cluster`] says so, and health answers DOWN,
    /// as it does when the core fails. The first cause is kept.
    pub fn mark_failed(&self, cause: String) {
        let _ = self.failed.set(cause);
    }

    /// Wakes on every change of [`Self::cluster`], every applied entry included.
    pub fn watch_cluster(&self) -> ClusterWatch {
        ClusterWatch::new(self.route.raft.metrics())
    }

    /// What this node says of itself on its status route, its clock's reading and the
    /// receivers it sees failing included.
    pub fn own_status(&self) -> NodeStatus {
        NodeStatus::of(&self.cluster())
            .with_clock(self.clock())
            .with_failing_receivers(self.receiver_reports.get())
    }

    /// Records the webhook receivers the leader's engine sees failing (an empty report once it
    /// stops leading): the node's status carries them, so that the cluster's status on any
    /// node, and the dashboard, show which receiver holds ticks back.
    pub fn report_failing_receivers(&self, report: FailingReceivers) {
        self.receiver_reports.set(report);
    }

    /// Asks a quorum whether this node still leads, here and without forwarding: the
    /// leader's own question before it acts alone (the engine's lease). `Ok` once a quorum
    /// answered yes.
    pub async fn confirm_leadership(&self) -> Result<(), ReplicaError> {
        match self.route.raft.get_read_log_id().await {
            Ok(_) => Ok(()),
            Err(RaftError::Fatal(fatal)) => Err(ReplicaError::Stopped(fatal.to_string())),
            Err(RaftError::APIError(refusal)) => Err(ReplicaError::NotLeading(refusal.to_string())),
        }
    }

    /// When this node last accepted a leader's append: the Raft router records it, the early
    /// campaign ([`crate::leader_loss`]) reads it.
    pub(crate) fn leader_contact(&self) -> &LeaderContact {
        &self.leader_contact
    }

    /// The applied state. Reads from it are linearizable only after [`Self::linearize`].
    pub fn state(&self) -> &StateHandle {
        &self.state
    }

    /// The cluster's clock as this node measures it: the time to stamp and compare ticks with.
    pub fn clock(&self) -> &ClusterClock {
        &self.route.clock
    }

    /// Whether replication progresses, as this node last judged it (empty unless it leads).
    pub fn progress(&self) -> ReplicationProgress {
        self.progress.get()
    }

    pub(crate) fn progress_cell(&self) -> &ProgressCell {
        &self.progress
    }

    /// The transport shared with the Raft network.
    pub fn transport(&self) -> &PeerTransport {
        &self.route.transport
    }

    /// Commits `command` through the leader and returns the registry's outcome.
    ///
    /// Writes that arrive while this node's earlier proposals are in flight share a log entry
    /// with them ([`crate::batching`]); the outcome is still this command's own.
    ///
    /// The span names the command's kind (never its contents) and, once committed, the log
    /// index: the same index appears on every node's `apply` span, which ties this request
    /// to the entry the leader proposed for it.
    #[tracing::instrument(skip_all, fields(command = command.kind(), index = field::Empty))]
    pub async fn write(&self, command: Command) -> Result<Outcome, ReplicaError> {
        let response = self.writes.submit(command).await?;
        if let Some(index) = response.index {
            Span::current().record("index", index);
        }
        tracing::debug!("committed");
        response.outcome.ok_or_else(|| {
            ReplicaError::Stopped("the state machine returned no outcome for a command".into())
        })
    }

    /// Commits a command whose entry is large (a restore of `bytes`), alone rather than in a
    /// batch, with the forwarding deadline extended by [`LARGE_ENTRY_PASSES`] times the time
    /// its bytes take at [`crate::append_flight::SLOWEST_BYTES_PER_SECOND`]: forwarding it,
    /// appending it, replicating it and applying it each take longer in proportion, one after
    /// the other, and a deadline sized for one registration would give up on a restore that
    /// is still on its way (the client would get a 503 for a restore that then commits).
    pub async fn write_large(
        &self,
        command: Command,
        bytes: usize,
    ) -> Result<Outcome, ReplicaError> {
        let transfer_ms = (bytes as u64)
            .saturating_mul(1_000)
            .saturating_mul(LARGE_ENTRY_PASSES)
            / crate::append_flight::SLOWEST_BYTES_PER_SECOND;
        let deadline = self
            .route
            .deadline
            .saturating_add(Duration::from_millis(transfer_ms));
        let response = with_retries(deadline, |remaining| {
            self.route.try_write(command.clone(), remaining)
        })
        .await?;
        response.outcome.ok_or_else(|| {
            ReplicaError::Stopped("the state machine returned no outcome for a command".into())
        })
    }

    /// Returns once this node has applied every write acknowledged before the call.
    ///
    /// Concurrent calls share one leadership confirmation ([`read_rounds`]): each uses a
    /// round that started after it was called.
    #[tracing::instrument(skip_all, fields(read_index = field::Empty))]
    pub async fn linearize(&self) -> Result<(), ReplicaError> {
        self.linearize_in(&self.reads).await
    }

    /// [`Self::linearize`] for reads that are probably bogus: its shared rounds start at most
    /// once per [`THROTTLED_READ_SPACING`], so a flood of such reads cannot keep the leader
    /// confirming. The guarantee is the same; the read may wait up to the spacing longer.
    #[tracing::instrument(skip_all, fields(read_index = field::Empty))]
    pub async fn linearize_throttled(&self) -> Result<(), ReplicaError> {
        self.linearize_in(&self.throttled_reads).await
    }

    async fn linearize_in(&self, rounds: &ReadRounds<ReadIndex>) -> Result<(), ReplicaError> {
        let route = &self.route;
        let index = rounds.confirm().await.unwrap_or_else(|| {
            Err(ReplicaError::Stopped(
                "the read-index round ended without a result".into(),
            ))
        })?;
        let Some(index) = index else {
            return Ok(());
        };
        Span::current().record("read_index", index);
        let applied = self.state.read().last_applied.map(|log_id| log_id.index);
        if applied.is_some_and(|applied| applied >= index) {
            return Ok(());
        }
        route
            .raft
            .wait(Some(route.deadline))
            .applied_index_at_least(Some(index), "linearizable read")
            .await
            .map(|_| ())
            .map_err(|error| ReplicaError::NoLeader {
                waited: route.deadline,
                reason: format!("applying up to the read index {index}: {error}"),
            })
    }

    /// Adds or removes a member through the leader (see [`membership`]). The outer error says
    /// that no leader could be reached; the inner one that the leader refused the change, in
    /// which case nothing changed.
    pub async fn change_membership(
        &self,
        change: MembershipChange,
    ) -> Result<Result<Members, MembershipError>, ReplicaError> {
        with_retries(MEMBERSHIP_DEADLINE, |remaining| {
            self.route.try_change_membership(change.clone(), remaining)
        })
        .await
    }

    /// Asks peer `id` (advertised as `node`) for its own status.
    pub async fn peer_status(
        &self,
        id: NodeId,
        node: &NodeAddr,
        timeout: Duration,
    ) -> Result<NodeStatus, TransportError> {
        let transport = &self.route.transport;
        transport
            .get(id, transport.address_of(id, node), STATUS_PATH, timeout)
            .await
    }
}

impl Propose for LeaderRoute {
    async fn propose(&self, command: Command, since: Instant) -> Result<Response, ReplicaError> {
        let deadline = self.deadline.saturating_sub(since.elapsed());
        with_retries(deadline, |remaining| {
            self.try_write(command.clone(), remaining)
        })
        .await
    }
}

/// Read-index rounds through `route`, each bounded by its forwarding deadline.
fn read_index_rounds(route: &LeaderRoute, spacing: Duration) -> ReadRounds<ReadIndex> {
    let route = route.clone();
    ReadRounds::new(spacing, move || {
        let route = route.clone();
        async move { with_retries(route.deadline, |remaining| route.try_read_index(remaining)).await }
    })
}

/// Runs `attempt` until it is done or `deadline` has passed, backing off between tries.
async fn with_retries<T, F, Fut>(deadline: Duration, mut attempt: F) -> Result<T, ReplicaError>
where
    F: FnMut(Duration) -> Fut,
    Fut: Future<Output = Attempt<T>>,
{
    let started = Instant::now();
    let give_up_at = started + deadline;
    let mut backoff = FIRST_RETRY_BACKOFF;
    loop {
        let remaining = give_up_at.saturating_duration_since(Instant::now());
        // A leader that lost its quorum accepts a proposal and never commits it: every
        // attempt is bounded by what is left of the deadline.
        let reason = match tokio::time::timeout(remaining, attempt(remaining)).await {
            Ok(Attempt::Done(result)) => return result,
            Ok(Attempt::Retry(reason)) => reason,
            Err(_) => "no quorum confirmed the request in time".to_string(),
        };
        if Instant::now() + backoff >= give_up_at {
            return Err(ReplicaError::NoLeader {
                waited: started.elapsed(),
                reason,
            });
        }
        tracing::debug!(%reason, backoff_ms = backoff.as_millis() as u64, "retrying");
        sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
    }
}

impl LeaderRoute {
    async fn try_write(&self, command: Command, remaining: Duration) -> Attempt<Response> {
        if let Some(reason) = self.clock.stepping_down(&self.raft) {
            return Attempt::Retry(reason);
        }
        match self.raft.client_write(command.clone()).await {
            Ok(written) => Attempt::Done(Ok(written.data)),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                self.ask_leader::<_, _, WriteRefusal>(&forward, WRITE_PATH, &command, remaining)
                    .await
            }
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(error))) => {
                Attempt::Retry(error.to_string())
            }
            Err(RaftError::Fatal(fatal)) => {
                Attempt::Done(Err(ReplicaError::Stopped(fatal.to_string())))
            }
        }
    }

    async fn try_read_index(&self, remaining: Duration) -> Attempt<Option<u64>> {
        // Confirming leadership sends heartbeats, which would keep a leader that is handing
        // over in office.
        if let Some(reason) = self.clock.stepping_down(&self.raft) {
            return Attempt::Retry(reason);
        }
        match self.raft.get_read_log_id().await {
            Ok((read_log_id, _applied)) => Attempt::Done(Ok(read_log_id.map(|id| id.index))),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward))) => {
                self.ask_leader::<_, _, ReadRefusal>(&forward, READ_INDEX_PATH, &(), remaining)
                    .await
            }
            Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(error))) => {
                Attempt::Retry(error.to_string())
            }
            Err(RaftError::Fatal(fatal)) => {
                Attempt::Done(Err(ReplicaError::Stopped(fatal.to_string())))
            }
        }
    }

    async fn try_change_membership(
        &self,
        change: MembershipChange,
        remaining: Duration,
    ) -> Attempt<Result<Members, MembershipError>> {
        match membership::change_here(&self.raft, &self.transport, change.clone()).await {
            Step::Done(result) => Attempt::Done(Ok(result)),
            Step::Forward(forward) => {
                self.ask_leader::<_, _, String>(&forward, MEMBERSHIP_PATH, &change, remaining)
                    .await
            }
            Step::Retry(reason) => Attempt::Retry(reason),
            Step::Stopped(reason) => Attempt::Done(Err(ReplicaError::Stopped(reason))),
        }
    }

    /// Sends `body` to the leader named by `forward` on one of its internal routes. Any
    /// failure (no known leader, a refusal, an unreachable leader) is worth a retry: the
    /// cluster may be in the middle of an election.
    #[tracing::instrument(name = "forward", skip_all, fields(route = path, leader = field::Empty))]
    async fn ask_leader<Req, Resp, Refusal>(
        &self,
        forward: &ForwardToLeader<NodeId, NodeAddr>,
        path: &'static str,
        body: &Req,
        remaining: Duration,
    ) -> Attempt<Resp>
    where
        Req: serde::Serialize,
        Resp: serde::de::DeserializeOwned,
        Refusal: serde::de::DeserializeOwned + std::fmt::Display,
    {
        let Some((leader, node)) = self.remote_leader(forward) else {
            return Attempt::Retry("no leader is known".into());
        };
        Span::current().record("leader", leader);
        let address = self.transport.address_of(leader, &node);
        let started = Instant::now();
        let answer: Result<Result<Resp, Refusal>, TransportError> = self
            .transport
            .post(leader, address, path, body, remaining)
            .await;
        let (result, attempt) = match answer {
            Ok(Ok(response)) => ("ok", Attempt::Done(Ok(response))),
            Ok(Err(refusal)) => (
                "declined",
                Attempt::Retry(format!("the leader declined: {refusal}")),
            ),
            Err(error) => ("unreachable", Attempt::Retry(error.to_string())),
        };
        telemetry::record_forwarded(path, result, started.elapsed());
        tracing::debug!(result, "forwarded to the leader");
        attempt
    }

    /// The leader named by a `ForwardToLeader` error, unless it is unknown or this node
    /// itself (a node that just lost leadership may still name itself).
    fn remote_leader(
        &self,
        forward: &ForwardToLeader<NodeId, NodeAddr>,
    ) -> Option<(NodeId, NodeAddr)> {
        match (forward.leader_id, &forward.leader_node) {
            (Some(leader), Some(node)) if leader != self.id => Some((leader, node.clone())),
            _ => None,
        }
    }
}
