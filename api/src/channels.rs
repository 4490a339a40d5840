//! Readiness of channels: a clock's RabbitMQ queue must exist when its registration returns
//! (SPEC §2), so clients can consume without declaring it.
//!
//! The API does not speak AMQP itself; the node hands it a [`QueueDeclarer`] (backed by the
//! tick engine's broker client) when the cluster uses RabbitMQ.

use futures::future::BoxFuture;

/// Declares a clock's queue on the broker.
pub trait QueueDeclarer: Send + Sync {
    /// Declares `queue` (idempotent); the error says why the broker could not be reached.
    fn declare<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<(), String>>;
}
