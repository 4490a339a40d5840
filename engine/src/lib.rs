//! The tick engine: how the leader turns schedules into delivered ticks.
//!
//! # The promise, and how it is kept
//!
//! A tick is published only after the leader has committed its intent to fire it (SPEC §7).
//! The leader proposes an intent a little ahead of time ([`decisions::LOOKAHEAD`]): applying it
//! files every tick due in the window into the replicated ledger (`tickd_domain::TickLedger`),
//! so the publish at the instant itself needs no consensus round. RabbitMQ and webhook ticks
//! wait in the ledger's outbox until the broker confirms them or their receiver takes them; the leader then commits a `Confirm` that
//! removes them, in batches. A new leader finds the unconfirmed ticks in the outbox and
//! publishes them again with the same ids: no tick is lost, and a repeat is recognizable.
//!
//! Publishing needs the leader's [`lease`](lease::Lease), renewed through a quorum, so a
//! deposed, partitioned or stopped leader publishes nothing new. What carries a tick to its
//! consumers is a [`Publisher`] (see [`publisher`]): the loop and its decisions speak of
//! destinations and outcomes, never of a broker.
//!
//! Http ticks need no publisher: the intent files them in the clock's replicated queue and a
//! poll pops them (see `tickd-api`).
//!
//! # Decisions apart from effects
//!
//! [`decisions`] holds every rule above (lease, publish, confirm, re-delivery, purge) as a
//! plain struct stepped with the time and the applied registry; [`duties`] is the loop that
//! owns the timers, the proposals, the publisher and the metrics, and asks it what to do. The
//! rules are unit-tested without a broker or a cluster; the loop is tested end to end.
//!
//! # Neighbours
//!
//! Below: `tickd-raft` (the `Replica` to propose and read through) and `tickd-domain` (the
//! ledger). lapin is known only to [`rabbit`], RabbitMQ's [`Publisher`]; HTTP only to
//! [`webhook`], the webhooks'; [`dispatch`] hands each tick to the publisher of its
//! destination. The `tickd` binary starts [`run`] on every node; it acts only while the node
//! leads.
//!
//! # What operators see
//!
//! [`telemetry`] counts filed, late, coalesced, published, delivered and re-delivered ticks
//! through the `metrics` facade; the binary decides where they go. Each tick's way through
//! the leader is a `tracing` span: `intent` (the log index that filed it), then one `tick`
//! span per publish that also covers the broker's confirmation, then `ack` (the `Confirm`
//! entry that removed it from the outbox).

pub mod decisions;
pub mod dispatch;
pub mod duties;
pub mod lease;
pub mod publisher;
pub mod rabbit;
pub mod telemetry;
pub mod webhook;

use std::time::Duration;

pub use dispatch::Publishers;
pub use duties::run;
pub use publisher::Publisher;
pub use rabbit::{Broker, BrokerEndpoint, BrokerError};
pub use webhook::{WebhookSettings, Webhooks};

/// Settings of the tick engine (`cluster.toml`).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// An active clock whose channel has no consumer for this long is removed (SPEC §6); also
    /// the `x-expires` of RabbitMQ queues.
    pub clock_ttl: Duration,
    /// Ticks missed by more than this are coalesced (SPEC §7).
    pub catch_up: Duration,
    /// The most ticks an http queue keeps; older ones are dropped and counted.
    pub http_queue_limit: u64,
}

impl EngineConfig {
    /// Abandoned clocks are looked for four times per TTL, so one is removed at most a
    /// quarter TTL late.
    fn purge_every(&self) -> Duration {
        (self.clock_ttl / 4).max(Duration::from_millis(250))
    }
}
