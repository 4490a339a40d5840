//! RabbitMQ, through one lapin connection per node.
//!
//! [`Broker`] keeps one connection with one channel in confirm mode for publishing ticks
//! (many publishes in flight, each confirmed asynchronously) and a few channels for queue
//! declarations. The session lock is held only to find the live session, never across a round
//! trip, so registrations arriving together declare their queues concurrently: a declaration
//! is a synchronous AMQP method, one at a time per channel, and RabbitMQ serves each channel
//! in its own process. A failed operation drops the connection only if it is broken (closed,
//! or one of its channels closed); a broker that is merely slow keeps its connection, because
//! reconnecting would make it redo the work in flight and slow it further. The next operation
//! after a drop reconnects, at most once per [`RECONNECT_PAUSE`], so a broker outage costs a
//! failed attempt now and then, never a busy loop. Ticks that could not be published stay in
//! the replicated outbox and are retried.
//!
//! An `amqps://` URI connects through rustls (ring), trusting the system's roots and the
//! certificates of [`BrokerEndpoint::ca_pem`]; the broker's certificate must name the URI's host.
//!
//! The connection's state is the `tickd_rabbitmq_connected` gauge, set at every change this
//! client sees: a connection opened, found dead, or dropped after a failed operation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::tcp::OwnedTLSConfig;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, PublisherConfirm,
};
use tickd_domain::Tick;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::decisions::Outgoing;
use crate::publisher::{Destination, PublishOutcome, Publisher, Refused, Settlement};
use crate::telemetry;

/// The least time between two connection attempts.
pub const RECONNECT_PAUSE: Duration = Duration::from_millis(500);
/// The longest a connection attempt or one operation may take. A broker that is starting
/// accepts TCP before it answers AMQP; without a bound, the leader's loop would hang on it
/// (and with it the intents and the lease).
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(2);
/// How many channels declare queues side by side.
const DECLARE_CHANNELS: usize = 8;

/// Why a broker operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BrokerError {
    /// The broker is unreachable or refused the connection.
    #[error("RabbitMQ at the configured URI is unreachable: {0}")]
    Unreachable(String),
    /// A connection attempt failed recently; the next one waits.
    #[error("RabbitMQ was unreachable a moment ago; retrying shortly")]
    Backoff,
    /// The broker refused an operation.
    #[error("RabbitMQ refused {what}: {reason}")]
    Refused {
        /// The operation.
        what: String,
        /// The broker's reason.
        reason: String,
    },
}

/// One live connection and its channels, shared out of the lock with each operation.
struct Session {
    /// Which connection this is, so that a failure drops only the connection it happened on.
    generation: u64,
    /// Kept to report the connection's state; dropping the last reference closes the channels.
    connection: Connection,
    publish: Channel,
    declare: Vec<Channel>,
}

impl Session {
    /// Whether the connection and every channel are open. A channel the broker closed (after
    /// a refused declaration, say) cannot be used again, so the session is replaced.
    fn healthy(&self) -> bool {
        self.connection.status().connected()
            && self.publish.status().connected()
            && self
                .declare
                .iter()
                .all(|channel| channel.status().connected())
    }
}

/// Where the broker is, and whom to trust there.
#[derive(Clone)]
pub struct BrokerEndpoint {
    /// `amqp://` or `amqps://`, with credentials and virtual host.
    pub uri: String,
    /// PEM certificates trusted for `amqps://` beside the system's roots (`rabbit_ca_file`):
    /// the CA of a broker whose certificate no public CA signed.
    pub ca_pem: Option<String>,
}

impl std::fmt::Debug for BrokerEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URI may hold credentials.
        f.debug_struct("BrokerEndpoint")
            .field("tls_roots_added", &self.ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

/// This node's RabbitMQ client.
#[derive(Clone)]
pub struct Broker {
    endpoint: Arc<BrokerEndpoint>,
    app_id: String,
    queue_ttl: Duration,
    session: Arc<Mutex<Option<Arc<Session>>>>,
    last_attempt: Arc<Mutex<Option<Instant>>>,
    generations: Arc<AtomicU64>,
    next_declare: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URI may hold credentials.
        f.debug_struct("Broker")
            .field("queue_ttl", &self.queue_ttl)
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// A client for `endpoint`; queues it declares expire after `queue_ttl` without
    /// consumers. `app_id` names this node in every message it publishes, so that an operator
    /// (and the failover tests) can tell which leader published a tick.
    pub fn new(endpoint: BrokerEndpoint, queue_ttl: Duration, app_id: String) -> Self {
        Self {
            endpoint: Arc::new(endpoint),
            app_id,
            queue_ttl,
            session: Arc::new(Mutex::new(None)),
            last_attempt: Arc::new(Mutex::new(None)),
            generations: Arc::new(AtomicU64::new(0)),
            next_declare: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Declares a clock's queue: durable, expiring after the clock TTL without consumers
    /// (`x-expires`). Idempotent; it also re-creates a queue that expired.
    pub async fn declare_queue(&self, queue: &str) -> Result<(), BrokerError> {
        let mut arguments = FieldTable::default();
        let ttl = i64::try_from(self.queue_ttl.as_millis()).unwrap_or(i64::MAX);
        arguments.insert(ShortString::from("x-expires"), AMQPValue::LongLongInt(ttl));
        let options = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        let turn = self.next_declare.fetch_add(1, Ordering::Relaxed);
        self.with_session(|session| {
            let channel = session.declare[turn % session.declare.len()].clone();
            let queue = ShortString::from(queue);
            async move {
                channel
                    .queue_declare(queue, options, arguments)
                    .await
                    .map(|_| ())
            }
        })
        .await
        .map_err(|error| refused(format!("declaring queue {queue:?}"), error))
    }

    /// Publishes ticks to their clocks' queues in one burst and returns the broker's pending
    /// confirmation of each, in order.
    ///
    /// Every message is handed to the connection before the first is awaited, so a thousand
    /// ticks due at the same instant leave in a few socket writes instead of a thousand round
    /// trips through lapin's I/O loop. If any publish fails, the whole burst is reported
    /// failed: ticks that did reach the broker are published again later with the same ids.
    ///
    /// Publishes are `mandatory`: if a queue no longer exists (it expired because nobody
    /// consumed it), the broker returns the message with its confirmation, which tells the
    /// leader that the clock is abandoned without a query that would itself renew the queue.
    async fn send(&self, ticks: &[(&str, &Tick)]) -> Result<Vec<PublisherConfirm>, BrokerError> {
        let messages: Vec<(ShortString, Vec<u8>, BasicProperties)> = ticks
            .iter()
            .map(|(queue, tick)| {
                (
                    ShortString::from(*queue),
                    payload(tick),
                    self.properties(tick),
                )
            })
            .collect();
        self.with_session(|session| {
            let channel = session.publish.clone();
            async move {
                let publishes = messages.into_iter().map(|(queue, payload, properties)| {
                    let channel = channel.clone();
                    async move {
                        let options = BasicPublishOptions {
                            mandatory: true,
                            ..BasicPublishOptions::default()
                        };
                        channel
                            .basic_publish(
                                ShortString::from(""),
                                queue,
                                options,
                                &payload,
                                properties,
                            )
                            .await
                    }
                });
                futures::future::join_all(publishes)
                    .await
                    .into_iter()
                    .collect()
            }
        })
        .await
        .map_err(|error| refused(format!("publishing {} ticks", ticks.len()), error))
    }

    /// The AMQP properties of a tick's message: its id (the same on every delivery), the
    /// publishing node, and an expiry that keeps at most one scheduled tick per queue.
    fn properties(&self, tick: &Tick) -> BasicProperties {
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from("application/json"))
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(tick.id.as_str()))
            .with_app_id(ShortString::from(self.app_id.as_str()))
            .with_timestamp(tick.due_at_ms / 1000);
        match tick.expiry_ms() {
            Some(expiry) => properties.with_expiration(ShortString::from(expiry.to_string())),
            None => properties,
        }
    }

    /// Runs `operation` on the live session; a failure that left the session broken drops it,
    /// so that the next operation reconnects.
    async fn with_session<F, Fut, T>(&self, operation: F) -> Result<T, SessionError>
    where
        F: FnOnce(&Session) -> Fut,
        Fut: Future<Output = lapin::Result<T>>,
    {
        let session = self.connected().await.map_err(SessionError::Broker)?;
        let pending = operation(&session);
        let reason = match tokio::time::timeout(OPERATION_TIMEOUT, pending).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {} ms", OPERATION_TIMEOUT.as_millis()),
        };
        if session.healthy() {
            return Err(SessionError::Lapin(reason));
        }
        let mut guard = self.session.lock().await;
        if guard
            .as_ref()
            .is_some_and(|live| live.generation == session.generation)
        {
            *guard = None;
            telemetry::record_connected(false);
        }
        Err(SessionError::Lapin(reason))
    }

    /// The live session, connecting first if there is none (or it died).
    async fn connected(&self) -> Result<Arc<Session>, BrokerError> {
        let mut guard = self.session.lock().await;
        if let Some(session) = guard.as_ref()
            && session.healthy()
        {
            return Ok(session.clone());
        }
        if guard.take().is_some() {
            telemetry::record_connected(false);
        }
        {
            let mut last = self.last_attempt.lock().await;
            if last.is_some_and(|at| at.elapsed() < RECONNECT_PAUSE) {
                return Err(BrokerError::Backoff);
            }
            *last = Some(Instant::now());
        }
        let session = Arc::new(self.connect().await.inspect_err(|_| {
            telemetry::record_connected(false);
        })?);
        *guard = Some(session.clone());
        telemetry::record_connected(true);
        tracing::info!("connected to RabbitMQ");
        Ok(session)
    }

    async fn connect(&self) -> Result<Session, BrokerError> {
        tokio::time::timeout(OPERATION_TIMEOUT, self.open_session())
            .await
            .unwrap_or_else(|_| {
                Err(BrokerError::Unreachable(format!(
                    "no AMQP handshake within {} ms",
                    OPERATION_TIMEOUT.as_millis()
                )))
            })
    }

    async fn open_session(&self) -> Result<Session, BrokerError> {
        let unreachable = |error: lapin::Error| BrokerError::Unreachable(error.to_string());
        let tls = OwnedTLSConfig {
            identity: None,
            cert_chain: self.endpoint.ca_pem.clone(),
        };
        let runtime = lapin::runtime::default_runtime().map_err(unreachable)?;
        let connection = Connection::connect_with_config(
            &self.endpoint.uri,
            ConnectionProperties::default(),
            tls,
            runtime,
        )
        .await
        .map_err(unreachable)?;
        let publish = connection.create_channel().await.map_err(unreachable)?;
        publish
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(unreachable)?;
        let mut declare = Vec::with_capacity(DECLARE_CHANNELS);
        for _ in 0..DECLARE_CHANNELS {
            declare.push(connection.create_channel().await.map_err(unreachable)?);
        }
        Ok(Session {
            generation: self.generations.fetch_add(1, Ordering::Relaxed),
            connection,
            publish,
            declare,
        })
    }
}

/// A tick's message body (SPEC §5).
fn payload(tick: &Tick) -> Vec<u8> {
    serde_json::to_vec(&tick.message()).unwrap_or_default()
}

/// RabbitMQ as the engine's publisher of [`Destination::Rabbit`] ticks: the burst goes out as
/// `Broker::send` sends it, and each broker confirmation becomes the tick's [`PublishOutcome`].
impl Publisher for Broker {
    fn publish<'a>(
        &'a self,
        ticks: &'a [Outgoing],
    ) -> BoxFuture<'a, Result<Vec<Settlement>, Refused>> {
        Box::pin(async move {
            let mut messages: Vec<(&str, &Tick)> = Vec::with_capacity(ticks.len());
            for outgoing in ticks {
                match &outgoing.destination {
                    Destination::Rabbit { queue } => {
                        messages.push((queue.as_str(), &outgoing.tick))
                    }
                    // The dispatcher hands each publisher its own ticks only.
                    Destination::Webhook(_) => {
                        return Err(Refused(
                            "a webhook tick was handed to the RabbitMQ publisher".into(),
                        ));
                    }
                }
            }
            let sent_at = Instant::now();
            let confirmations = self
                .send(&messages)
                .await
                .map_err(|error| Refused(error.to_string()))?;
            Ok(confirmations
                .into_iter()
                .map(|confirmation| Box::pin(settle(confirmation, sent_at)) as Settlement)
                .collect())
        })
    }
}

/// What the broker's confirmation of one tick, sent at `sent_at`, says became of it.
async fn settle(confirmation: PublisherConfirm, sent_at: Instant) -> PublishOutcome {
    match confirmation.await {
        // Stored in the queue.
        Ok(Confirmation::Ack(None)) => PublishOutcome::Delivered {
            after: sent_at.elapsed(),
        },
        // Returned with its acknowledgement: a mandatory publish to a queue that is gone.
        Ok(Confirmation::Ack(Some(_))) => PublishOutcome::Unroutable,
        Ok(other) => PublishOutcome::Failed(format!("{other:?}")),
        Err(error) => PublishOutcome::Failed(error.to_string()),
    }
}

/// A failure inside [`Broker::with_session`].
enum SessionError {
    Broker(BrokerError),
    Lapin(String),
}

fn refused(what: String, error: SessionError) -> BrokerError {
    match error {
        SessionError::Broker(error) => error,
        SessionError::Lapin(reason) => BrokerError::Refused { what, reason },
    }
}
