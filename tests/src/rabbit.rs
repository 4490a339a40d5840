//! The tests' side of RabbitMQ: finding the broker, and consumers that record every delivery.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use serde_json::Value;

/// The machine's broker.
pub const BROKER_URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// The broker's URI if it is reachable. Under `CI=true` a missing broker fails the test;
/// elsewhere the test is skipped with a message.
pub async fn broker() -> Option<String> {
    let connected = tokio::time::timeout(
        Duration::from_secs(5),
        Connection::connect(BROKER_URI, ConnectionProperties::default()),
    )
    .await;
    match connected {
        Ok(Ok(connection)) => {
            let _ = connection.close(200, "probe".into()).await;
            Some(BROKER_URI.to_string())
        }
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!(
                "RabbitMQ is not reachable at {BROKER_URI}; CI must provide it (.ci/run starts it)"
            )
        }
        _ => {
            eprintln!(
                "skipped: RabbitMQ is not reachable at {BROKER_URI} (start it with `rabbitmq-server -detached`)"
            );
            None
        }
    }
}

/// One received message.
#[derive(Debug, Clone)]
pub struct Received {
    /// The JSON body.
    pub body: Value,
    /// `message_id`.
    pub message_id: Option<String>,
    /// `app_id`: which node published it.
    pub app_id: Option<String>,
    /// `expiration`.
    pub expiration: Option<String>,
    /// `content_type`.
    pub content_type: Option<String>,
    /// `delivery_mode`.
    pub delivery_mode: Option<u8>,
    /// When the consumer received it.
    pub at: Instant,
    /// Which consumer received it.
    pub consumer: usize,
}

impl Received {
    /// The tick id of the body.
    pub fn tick_id(&self) -> &str {
        self.body["tick_id"].as_str().unwrap_or_default()
    }
}

/// Consumers on one queue, recording every delivery.
pub struct Consumers {
    received: Arc<Mutex<Vec<Received>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    connections: Vec<Connection>,
}

impl Consumers {
    /// Starts `count` competing consumers on `queue` (each on its own connection), acking
    /// every message.
    pub async fn start(uri: &str, queue: &str, count: usize) -> Consumers {
        let received = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let mut connections = Vec::new();
        for consumer_index in 0..count {
            let connection = Connection::connect(uri, ConnectionProperties::default())
                .await
                .expect("connect a consumer to RabbitMQ");
            let channel = connection
                .create_channel()
                .await
                .expect("a consumer channel");
            let mut consumer = channel
                .basic_consume(
                    queue.into(),
                    format!("test-consumer-{consumer_index}").as_str().into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .expect("consume the clock's queue (tickd must have declared it)");
            let sink = received.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(Ok(delivery)) = consumer.next().await {
                    let properties = &delivery.properties;
                    let record = Received {
                        body: serde_json::from_slice(&delivery.data).unwrap_or(Value::Null),
                        message_id: properties.message_id().as_ref().map(|v| v.to_string()),
                        app_id: properties.app_id().as_ref().map(|v| v.to_string()),
                        expiration: properties.expiration().as_ref().map(|v| v.to_string()),
                        content_type: properties.content_type().as_ref().map(|v| v.to_string()),
                        delivery_mode: *properties.delivery_mode(),
                        at: Instant::now(),
                        consumer: consumer_index,
                    };
                    sink.lock().unwrap_or_else(|p| p.into_inner()).push(record);
                    let _ = delivery.ack(BasicAckOptions::default()).await;
                }
            }));
            connections.push(connection);
        }
        Consumers {
            received,
            tasks,
            connections,
        }
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops consuming.
    pub async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        for connection in self.connections {
            let _ = connection.close(200, "done".into()).await;
        }
    }
}
