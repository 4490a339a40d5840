//! The simulated network between nodes: openraft's RPCs, and the writes a node forwards to its
//! leader, cross it as messages whose fate (delay, loss, a copy) the [`World`]'s weather draws.
//!
//! A lost request or answer leaves the sender waiting until its deadline, as a dropped packet
//! does; a request to a node that is down fails after one delay, as a refused connection
//! does. Every failure is a plain network error, never openraft's `Unreachable`: that one
//! makes a replication stream back off in a `select!` that tokio resolves at random when both
//! sides are ready at once, the one randomness the simulation cannot seed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{Raft, RaftNetwork, RaftNetworkFactory};
use tickd_raft::{NodeAddr, NodeId};

use crate::runtime::SimConfig;
use crate::world::{Fate, Running, World};

/// How a message exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum Failure<E> {
    /// The request or its answer was lost, or the receiver is down.
    #[error("{0}")]
    Network(&'static str),
    /// The receiver answered with an error.
    #[error("the receiver refused: {0}")]
    Remote(E),
}

/// Sends a request from `from` to `to` and waits for its answer, through the weather:
/// `handle` is what the receiver's running incarnation does with it (and with a copy, if one
/// is delivered). Gives up at `deadline` after a loss. `from` is the sending incarnation: a
/// request it sent before it crashed is never delivered.
pub async fn exchange<T, E, F, Fut>(
    world: &Arc<World>,
    (from, incarnation): (NodeId, u64),
    to: NodeId,
    deadline: Duration,
    handle: F,
) -> Result<T, Failure<E>>
where
    F: Fn(Running) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let started = tokio::time::Instant::now();
    let give_up = |why| async move {
        tokio::time::sleep_until(started + deadline).await;
        Err(Failure::Network(why))
    };
    let fate = crate::log_store::lock(&world.network).route(from, to);
    let (delay, copy) = match fate {
        Fate::Lost => return give_up("the request was lost").await,
        Fate::Delivered(delay) => (delay, None),
        Fate::Duplicated(delay, again) => (delay, Some(again)),
    };
    tokio::time::sleep(delay).await;
    if !world.is_running(from, incarnation) {
        return give_up("the sender crashed").await;
    }
    let Some(receiver) = world.node(to) else {
        return Err(Failure::Network("the receiver is down"));
    };
    if crate::log_store::lock(&world.network).is_cut(from, to) {
        return give_up("the link was cut while the request crossed it").await;
    }
    let handle = Arc::new(handle);
    if let Some(again) = copy {
        let (world, handle) = (world.clone(), handle.clone());
        tokio::spawn(async move {
            tokio::time::sleep(again.saturating_sub(delay)).await;
            if let Some(receiver) = world.node(to) {
                let _ignored = handle(receiver).await;
            }
        });
    }
    let answer = handle(receiver).await;
    let fate = crate::log_store::lock(&world.network).route(to, from);
    match fate {
        Fate::Lost => give_up("the answer was lost").await,
        Fate::Delivered(delay) | Fate::Duplicated(delay, _) => {
            tokio::time::sleep(delay).await;
            answer.map_err(Failure::Remote)
        }
    }
}

/// openraft's network factory of one incarnation of a node.
pub struct SimNetwork {
    /// The world the messages cross.
    pub world: Arc<World>,
    /// The sender.
    pub me: NodeId,
    /// Its incarnation.
    pub incarnation: u64,
}

/// A connection from one node to another.
pub struct Link {
    world: Arc<World>,
    from: (NodeId, u64),
    to: NodeId,
}

impl RaftNetworkFactory<SimConfig> for SimNetwork {
    type Network = Link;

    async fn new_client(&mut self, target: NodeId, _node: &NodeAddr) -> Link {
        Link {
            world: self.world.clone(),
            from: (self.me, self.incarnation),
            to: target,
        }
    }
}

fn rpc_error<E: std::error::Error>(
    to: NodeId,
    failure: Failure<RaftError<NodeId, E>>,
) -> RPCError<NodeId, NodeAddr, RaftError<NodeId, E>> {
    match failure {
        Failure::Network(why) => RPCError::Network(NetworkError::new(&std::io::Error::other(why))),
        Failure::Remote(error) => RPCError::RemoteError(RemoteError::new(to, error)),
    }
}

impl Link {
    /// Sends one RPC through the weather; `handle` is what the receiver's openraft does with
    /// it (and with a copy).
    async fn call<Req, Resp, E, F, Fut>(
        &self,
        rpc: Req,
        option: &RPCOption,
        handle: F,
    ) -> Result<Resp, RPCError<NodeId, NodeAddr, RaftError<NodeId, E>>>
    where
        Req: Clone + Send + Sync + 'static,
        Resp: Send + 'static,
        E: std::error::Error + Send + 'static,
        F: Fn(Raft<SimConfig>, Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, RaftError<NodeId, E>>> + Send + 'static,
    {
        exchange(
            &self.world,
            self.from,
            self.to,
            option.hard_ttl(),
            move |node| handle(node.raft, rpc.clone()),
        )
        .await
        .map_err(|failure| rpc_error(self.to, failure))
    }
}

impl RaftNetwork<SimConfig> for Link {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<SimConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        self.call(rpc, &option, |raft, rpc| async move {
            raft.append_entries(rpc).await
        })
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<SimConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeAddr, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(rpc, &option, |raft, rpc| async move {
            raft.install_snapshot(rpc).await
        })
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        self.call(
            rpc,
            &option,
            |raft, rpc| async move { raft.vote(rpc).await },
        )
        .await
    }
}
