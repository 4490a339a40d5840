//! tickd's consensus layer: the Raft type configuration, the replicated state's read model,
//! the authenticated HTTP network between nodes, and [`Replica`], the one handle the rest of
//! the node uses to write and to read linearizably.
//!
//! # Role
//!
//! openraft does the protocol. This crate supplies what openraft leaves to the application,
//! except storage (the `tickd-storage` crate, which depends on this one for [`TypeConfig`]):
//!
//! * [`TypeConfig`]: log entries carry a [`tickd_domain::Command`]; applying one yields a
//!   [`Response`]; nodes are addressed by [`NodeAddr`] (API and Raft addresses), so every node
//!   learns every other node's API address from the membership itself.
//! * [`network`]: the client side of the Raft RPCs, through pooled `reqwest::Client`s that
//!   every kind of node-to-node traffic shares.
//!   A refused connection is reported as `Unreachable`, so openraft backs off instead of
//!   hammering a dead peer; an answer that misses its deadline is not, so a busy follower gets
//!   the next append at once. An append whose entries take longer than openraft's 100 ms
//!   deadline (a large restore, a follower with a slow disk) goes on in a task of its own with a
//!   deadline of its size ([`append_flight`]), and openraft's next attempt waits on it instead
//!   of sending the same entries again.
//! * [`rpc`]: the server side, an axum router on the node's Raft address. Every request must
//!   come from a member ([`peer_auth`]): over plain HTTP it carries the cluster secret
//!   ([`secret`]); under mutual TLS the listener has verified the caller's certificate. A
//!   request that is neither is refused with 403 before it is parsed, so it cannot change
//!   anything.
//! * [`Replica`]: proposes commands, forwarding them to the leader when this node is not it,
//!   and makes local reads linearizable with a read index obtained from the leader. Writes
//!   that queue up while earlier ones are in flight are proposed together as one log entry
//!   (`batching`), so one append, fsync and replication round carries many of them. With
//!   [`view`] it is the façade the API and the engine use: they name no openraft type.
//! * [`telemetry`]: this node's role, term and indexes, forwarded requests and the replicated
//!   state's size, as metrics.
//! * [`progress`]: the leader's judgement of replication's progress: a follower that takes no
//!   entry for ten seconds is reported, and a leader that commits nothing for as long reports
//!   DOWN.
//! * [`leader_loss`]: a follower campaigns as soon as a majority of the voters has not heard
//!   the leader for openraft's vote lease (asked in a pre-vote), instead of waiting out its
//!   election timer on top: failover in about 700 ms instead of about 1 100.
//! * [`failure`]: tells when openraft's core stopped on an error, so that the node reports
//!   DOWN and exits instead of lingering.
//! * [`proof`]: how a node proves it holds the cluster secret without anyone sending it to an
//!   unproven address (the first contact when a node is added).
//! * [`unsupported`]: recognises a replicated entry this binary cannot apply (a command kind
//!   or cluster level of a newer release) and halts the node loudly instead of letting
//!   replication to it stop without a word; [`level_monitor`] raises the cluster level once
//!   every voter supports it, so that this does not happen in a rolling upgrade.
//! * [`membership`]: adds (learner first, then voter) and removes members at runtime, on the
//!   leader, reached through the same forwarding as writes.
//!
//! # Invariants
//!
//! * A command is proposed by exactly one leader. A follower never re-forwards what it
//!   receives on its internal write route, so two nodes with stale views cannot bounce a
//!   request between them: the hop limit is one by construction.
//! * A read served after [`Replica::linearize`] returns reflects every write acknowledged
//!   anywhere before the read began.
//!
//! # Neighbours
//!
//! Above: `tickd-api` (HTTP routes) and the `tickd` binary, which wires storage, network and
//! API together. Below: `tickd-domain`, the pure registry this state machine replicates.

pub mod append_flight;
mod batching;
pub mod clock_monitor;
pub mod cluster_clock;
pub mod failure;
pub mod leader_loss;
pub mod level_monitor;
pub mod membership;
pub mod network;
pub mod peer_auth;
pub mod progress;
pub mod proof;
pub mod replica;
pub mod rpc;
pub mod secret;
pub mod snapshot_pace;
pub mod state;
pub mod status;
pub mod telemetry;
pub mod timing;
mod types;
pub mod unsupported;
pub mod view;
pub mod wall_clock;

pub use replica::{MembershipAnswer, Replica, ReplicaError};
pub use state::{ReplicatedState, StateHandle, StateImage};
pub use types::{NodeAddr, NodeId, Response, TypeConfig};
pub use view::{ClusterView, ClusterWatch, CoreStopped, LogPosition, Role};

/// The openraft instance of tickd.
pub type Raft = openraft::Raft<TypeConfig>;
