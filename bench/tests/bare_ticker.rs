//! The bare ticker is the floor the lateness figures are divided by: it must tick like tickd
//! (epoch-aligned instants, the same message) or the ratio means nothing.

use std::process::{Command, Stdio};
use std::time::Duration;

use futures::StreamExt;
use lapin::options::{BasicConsumeOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use serde_json::Value;
use tickd_tests::rabbit::broker;
use tickd_tests::unique_name;

#[tokio::test]
async fn the_bare_ticker_publishes_aligned_ticks_in_tickds_format() {
    let uri = broker().await;
    let name = unique_name("bare");
    let queue = format!("ticktok-{name};every.1.seconds");
    let connection = Connection::connect(&uri, ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("a channel");
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare the clock's queue");
    let mut consumer = channel
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
        .expect("consume the clock's queue");

    let clocks = tempfile::NamedTempFile::new().expect("a clocks file");
    std::fs::write(clocks.path(), format!("{name}\tevery.1.seconds\n")).expect("write the clocks");
    let mut ticker = Command::new(env!("CARGO_BIN_EXE_bare-ticker"))
        .arg("--uri")
        .arg(&uri)
        .arg("--clocks")
        .arg(clocks.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the bare ticker");

    let mut instants = Vec::new();
    for _ in 0..2 {
        let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .expect("a tick within 10 s")
            .expect("the consumer is open")
            .expect("a delivery");
        let body: Value = serde_json::from_slice(&delivery.data).expect("a JSON tick");
        assert_eq!(body["name"], name.as_str());
        assert_eq!(body["schedule"], "every.1.seconds");
        let scheduled =
            chrono::DateTime::parse_from_rfc3339(body["scheduled_at"].as_str().unwrap_or(""))
                .expect("scheduled_at is RFC 3339");
        let instant = scheduled.timestamp_millis();
        assert_eq!(
            instant % 1_000,
            0,
            "instants are aligned to the second: {body}"
        );
        let tick_id = body["tick_id"].as_str().unwrap_or("");
        assert!(
            tick_id.ends_with(&format!("-{instant}")),
            "tick id {tick_id:?}"
        );
        assert_eq!(
            delivery
                .properties
                .message_id()
                .as_ref()
                .map(|id| id.as_str()),
            Some(tick_id)
        );
        instants.push(instant);
    }
    assert_eq!(
        instants[1] - instants[0],
        1_000,
        "one tick per second: {instants:?}"
    );

    let _ = ticker.kill();
    let _ = ticker.wait();
    let _ = channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = connection.close(200, "done".into()).await;
}
