//! The receiving end of the tick scenarios: AMQP consumers on every clock's queue that stamp
//! each delivery with its receipt time.
//!
//! Consumers auto-acknowledge (`no_ack`), so the broker pushes without waiting for the
//! benchmark, and share a few channels of one connection: the receiver's own cost stays small
//! and equal for tickd and for the bare ticker.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::stream;
use lapin::options::BasicConsumeOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use serde::Deserialize;

/// How many channels the consumers are spread over.
const CHANNELS: usize = 16;
/// How many `basic.consume` calls are in flight at once while subscribing.
const SUBSCRIBE_CONCURRENCY: usize = 256;

/// One received tick.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The tick's clock id.
    pub clock: String,
    /// The tick id.
    pub tick_id: String,
    /// The instant it was due, Unix ms.
    pub scheduled_ms: f64,
    /// When it arrived here, Unix ms.
    pub received_ms: f64,
    /// The publisher's `app_id` (which tickd node, or the bare ticker).
    pub publisher: String,
}

impl Delivery {
    /// Receipt time minus `scheduled_at`.
    pub fn lateness_ms(&self) -> f64 {
        self.received_ms - self.scheduled_ms
    }

    /// The delivery of the tick message `data`, received at `received_ms` from `publisher`;
    /// `None` if `data` is not a tick message. Every channel's consumer reads ticks this way.
    pub fn read(data: &[u8], received_ms: f64, publisher: String) -> Option<Delivery> {
        let body = serde_json::from_slice::<Body>(data).ok()?;
        let scheduled = chrono::DateTime::parse_from_rfc3339(&body.scheduled_at).ok()?;
        Some(Delivery {
            clock: body.clock,
            tick_id: body.tick_id,
            scheduled_ms: scheduled.timestamp_millis() as f64,
            received_ms,
            publisher,
        })
    }
}

#[derive(Deserialize)]
struct Body {
    clock: String,
    tick_id: String,
    scheduled_at: String,
}

/// Consumers on a set of queues, recording every delivery.
pub struct TickConsumers {
    connection: Connection,
    channels: Vec<Channel>,
    received: Arc<Mutex<Vec<Delivery>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl TickConsumers {
    /// Subscribes to every queue in `queues`.
    pub async fn start(uri: &str, queues: &[String]) -> Result<TickConsumers, String> {
        let mut consumers = Self::connect(uri).await?;
        consumers.subscribe(queues).await?;
        Ok(consumers)
    }

    /// Consumers on no queue yet: [`Self::subscribe`] adds them.
    pub async fn connect(uri: &str) -> Result<TickConsumers, String> {
        let connection = Connection::connect(uri, ConnectionProperties::default())
            .await
            .map_err(|e| format!("cannot connect the consumers to RabbitMQ: {e}"))?;
        let mut channels: Vec<Channel> = Vec::new();
        for _ in 0..CHANNELS {
            channels.push(
                connection
                    .create_channel()
                    .await
                    .map_err(|e| format!("a consumer channel: {e}"))?,
            );
        }
        Ok(TickConsumers {
            connection,
            channels,
            received: Arc::new(Mutex::new(Vec::new())),
            tasks: Vec::new(),
        })
    }

    /// Subscribes to every queue in `queues` as well.
    pub async fn subscribe(&mut self, queues: &[String]) -> Result<(), String> {
        let channels = &self.channels;
        let first = self.tasks.len();
        let subscriptions = stream::iter(queues.iter().enumerate())
            .map(|(index, queue)| {
                let channel = channels[(first + index) % CHANNELS].clone();
                let queue = queue.clone();
                async move {
                    channel
                        .basic_consume(
                            queue.as_str().into(),
                            "".into(),
                            BasicConsumeOptions {
                                no_ack: true,
                                ..BasicConsumeOptions::default()
                            },
                            FieldTable::default(),
                        )
                        .await
                        .map_err(|e| format!("consuming {queue}: {e}"))
                }
            })
            .buffer_unordered(SUBSCRIBE_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        for subscription in subscriptions {
            let mut consumer = subscription?;
            let sink = self.received.clone();
            self.tasks.push(tokio::spawn(async move {
                while let Some(Ok(delivery)) = consumer.next().await {
                    let received_ms = now_ms();
                    let publisher = delivery
                        .properties
                        .app_id()
                        .as_ref()
                        .map(|id| id.to_string())
                        .unwrap_or_default();
                    if let Some(tick) = Delivery::read(&delivery.data, received_ms, publisher) {
                        sink.lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(tick);
                    }
                }
            }));
        }
        Ok(())
    }

    /// Takes everything received so far.
    pub fn drain(&self) -> Vec<Delivery> {
        std::mem::take(&mut *self.received.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Stops consuming and closes the connection.
    pub async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        let closing = self.connection.close(200, "benchmark done".into());
        let _ = tokio::time::timeout(Duration::from_secs(10), closing).await;
    }
}

/// The wall clock, in Unix milliseconds with sub-millisecond precision.
pub fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64() * 1e3)
}
