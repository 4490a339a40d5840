//! What a node does with a client's request: a write is proposed to the local openraft and,
//! on a follower, forwarded to the leader openraft names across the simulated network, retried
//! with a pause until a leader answers or the deadline passes (production's `Replica::write`,
//! 5 s); a read is answered by the leader after a read barrier.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tickd_domain::{ClockId, Command, Outcome};
use tickd_raft::NodeId;
use tokio::time::Instant;

use crate::network::{Failure, exchange};
use crate::world::{Running, World};

/// How long a node tries to get a write committed before the client is told 503.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// The pause between two tries while no leader is known or the leader does not answer.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// How long a forwarded request may wait for its answer.
const FORWARD_DEADLINE: Duration = Duration::from_secs(1);

/// Why a request got no definite answer.
pub type Indeterminate = String;

/// Where one try of a request went.
enum Try<T> {
    Answered(T),
    /// Not the leader; openraft names this one, if it knows one.
    Elsewhere(Option<NodeId>),
    Failed(String),
}

fn leader_hint<T>(
    error: RaftError<NodeId, ClientWriteError<NodeId, tickd_raft::NodeAddr>>,
) -> Try<T> {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => {
            Try::Elsewhere(forward.leader_id)
        }
        other => Try::Failed(other.to_string()),
    }
}

/// A write's outcome and the index of the entry that carried it.
pub type Written = (Outcome, u64);

async fn propose(node: &Running, command: Command) -> Try<Written> {
    // As production's replica: a leader whose clock is beyond the bound is handing over and
    // refuses writes.
    if let Some(reason) = node.clock.stepping_down(&node.raft) {
        return Try::Failed(reason);
    }
    match node.raft.client_write(command).await {
        Ok(written) => match written.data.outcome {
            Some(outcome) => Try::Answered((outcome, written.log_id.index)),
            None => Try::Failed("the entry had no outcome".to_string()),
        },
        Err(error) => leader_hint(error),
    }
}

/// Proposes `command` through `node`, as a client's write sent to it.
pub async fn write(
    world: &Arc<World>,
    node: NodeId,
    command: Command,
) -> Result<Outcome, Indeterminate> {
    write_at(world, node, command)
        .await
        .map(|(outcome, _)| outcome)
}

/// [`write`], with the index of the entry that carried the command.
pub async fn write_at(
    world: &Arc<World>,
    node: NodeId,
    command: Command,
) -> Result<Written, Indeterminate> {
    let deadline = Instant::now() + WRITE_DEADLINE;
    let mut last = String::from("no leader answered");
    while Instant::now() < deadline {
        let Some(local) = world.node(node) else {
            return Err("the node is down".to_string());
        };
        let tried = match propose(&local, command.clone()).await {
            Try::Elsewhere(Some(leader)) if leader != node => {
                let command = command.clone();
                match exchange(
                    world,
                    (node, local.incarnation),
                    leader,
                    FORWARD_DEADLINE,
                    move |leader| {
                        let command = command.clone();
                        async move {
                            match propose(&leader, command).await {
                                Try::Answered(outcome) => Ok(outcome),
                                Try::Elsewhere(_) => Err("the leader moved".to_string()),
                                Try::Failed(why) => Err(why),
                            }
                        }
                    },
                )
                .await
                {
                    Ok(outcome) => Try::Answered(outcome),
                    Err(Failure::Network(why)) => Try::Failed(why.to_string()),
                    Err(Failure::Remote(why)) => Try::Failed(why),
                }
            }
            other => other,
        };
        match tried {
            Try::Answered(outcome) => return Ok(outcome),
            Try::Elsewhere(_) => last = "no leader known".to_string(),
            Try::Failed(why) => last = why,
        }
        world.record(format_args!(
            "node {node}: {} tried again: {last}",
            command.kind()
        ));
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    Err(last)
}

/// What a read found: the clock's status, or the clock of a name.
pub type Found = Option<(ClockId, &'static str)>;

/// Reads through `node` after the leader's read barrier: `look` runs on the leader's applied
/// state once the barrier has passed.
pub async fn read(
    world: &Arc<World>,
    node: NodeId,
    look: fn(&tickd_domain::Registry, &str) -> Found,
    key: String,
) -> Result<Found, Indeterminate> {
    let Some(local) = world.node(node) else {
        return Err("the node is down".to_string());
    };
    let leader = local.raft.metrics().borrow().current_leader;
    let Some(leader) = leader else {
        return Err("no leader known".to_string());
    };
    let barrier_then_look = move |leader: Running| {
        let key = key.clone();
        async move {
            if let Some(reason) = leader.clock.stepping_down(&leader.raft) {
                return Err(reason);
            }
            leader
                .raft
                .ensure_linearizable()
                .await
                .map_err(|error| error.to_string())?;
            Ok(look(&leader.state.read().registry, &key))
        }
    };
    if leader == node {
        return barrier_then_look(local).await;
    }
    exchange(
        world,
        (node, local.incarnation),
        leader,
        FORWARD_DEADLINE,
        barrier_then_look,
    )
    .await
    .map_err(|failure| failure.to_string())
}
