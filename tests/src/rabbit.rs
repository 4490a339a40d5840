//! The tests' side of RabbitMQ: finding the broker, and consumers that record every delivery.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions};
use lapin::tcp::OwnedTLSConfig;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use serde_json::Value;

use crate::cluster::{NodeId, TestCluster};
use crate::proxy::{LinkMode, LinkProxy};

/// The machine's broker.
pub const BROKER_URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// The same broker on its TLS listener, which `scripts/test` adds (`ensure_rabbitmq_tls`).
pub const TLS_BROKER_URI: &str = "amqps://guest:guest@127.0.0.1:5671/%2f";

/// The CA that signed the TLS listener's certificate: no system root trusts it.
pub const TLS_BROKER_CA: &str = "/etc/rabbitmq/tickd-tls/ca.pem";

/// How long a connection a test needs once may take to open. A loaded two-core machine has
/// been seen taking over 3 s for a handshake with the shared broker.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one attempt of a connection that is retried at once may take. A broker that is
/// booting accepts TCP before it answers AMQP, and such a handshake may never complete: a
/// reconnecting consumer must give up on it quickly and try again, or it misses the ticks the
/// broker delivers meanwhile (they expire after one interval, SPEC §5).
const RETRIED_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// Connects to `uri`, bounded by `timeout`. An `amqps://` URI trusts [`TLS_BROKER_CA`]: the
/// only TLS broker the tests use is the machine's.
async fn connect(uri: &str, timeout: Duration) -> Result<Connection, String> {
    let tls = if uri.starts_with("amqps://") {
        let pem = std::fs::read_to_string(TLS_BROKER_CA)
            .map_err(|error| format!("cannot read {TLS_BROKER_CA}: {error}"))?;
        OwnedTLSConfig {
            identity: None,
            cert_chain: Some(pem),
        }
    } else {
        OwnedTLSConfig::default()
    };
    let runtime = lapin::runtime::default_runtime().map_err(|error| error.to_string())?;
    match tokio::time::timeout(
        timeout,
        Connection::connect_with_config(uri, ConnectionProperties::default(), tls, runtime),
    )
    .await
    {
        Ok(connected) => connected.map_err(|error| error.to_string()),
        Err(_) => Err(format!("no AMQP handshake within {timeout:?}")),
    }
}

/// The shared broker's URI, once it has answered an AMQP handshake.
///
/// # Panics
///
/// When the broker does not answer: a test of delivery never passes without one. `scripts/test`
/// starts it (and installs it where it is absent).
pub async fn broker() -> String {
    reachable(BROKER_URI).await
}

/// The shared broker's `amqps://` URI, once it has answered a TLS and AMQP handshake that
/// trusted [`TLS_BROKER_CA`].
///
/// # Panics
///
/// When it does not: `scripts/test` adds the TLS listener (and its CA) where it is missing.
pub async fn tls_broker() -> String {
    reachable(TLS_BROKER_URI).await
}

async fn reachable(uri: &str) -> String {
    match connect(uri, HANDSHAKE_TIMEOUT).await {
        Ok(connection) => {
            let _ = connection.close(200, "probe".into()).await;
            uri.to_string()
        }
        Err(error) => panic!(
            "RabbitMQ is not reachable at {uri} ({error}); run the suite with `scripts/test`, \
             which starts it (with its TLS listener)"
        ),
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

/// What a consumer records of one delivery.
fn record(delivery: &lapin::message::Delivery, consumer: usize) -> Received {
    let properties = &delivery.properties;
    Received {
        body: serde_json::from_slice(&delivery.data).unwrap_or(Value::Null),
        message_id: properties.message_id().as_ref().map(|v| v.to_string()),
        app_id: properties.app_id().as_ref().map(|v| v.to_string()),
        expiration: properties.expiration().as_ref().map(|v| v.to_string()),
        content_type: properties.content_type().as_ref().map(|v| v.to_string()),
        delivery_mode: *properties.delivery_mode(),
        at: Instant::now(),
        consumer,
    }
}

/// Consumers on one queue, recording every delivery.
pub struct Consumers {
    received: Arc<Mutex<Vec<Received>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    connections: Vec<Connection>,
}

impl Consumers {
    /// One consumer on `queue`, or the error that prevented it, for a caller that retries at
    /// once: bounded by [`RETRIED_HANDSHAKE_TIMEOUT`].
    async fn start_checked(
        uri: &str,
        queue: &str,
    ) -> Result<(lapin::Consumer, Connection), String> {
        let connection = connect(uri, RETRIED_HANDSHAKE_TIMEOUT).await?;
        let attempt = async {
            let channel = connection.create_channel().await?;
            let consumer = channel
                .basic_consume(
                    queue.into(),
                    "".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await?;
            Ok::<_, lapin::Error>((consumer, connection))
        };
        match tokio::time::timeout(RETRIED_HANDSHAKE_TIMEOUT, attempt).await {
            Ok(result) => result.map_err(|error| error.to_string()),
            Err(_) => Err(format!("no consumer within {RETRIED_HANDSHAKE_TIMEOUT:?}")),
        }
    }

    /// Registers a clock through `node` of a cluster that uses the broker at `uri`, and starts
    /// one consumer on its queue.
    ///
    /// # Panics
    ///
    /// When the registration is not a 201 with a RabbitMQ channel.
    pub async fn of_new_clock(
        cluster: &TestCluster,
        node: NodeId,
        name: &str,
        schedule: &str,
        uri: &str,
    ) -> Consumers {
        let (status, _, clock) = crate::api::register(cluster, node, name, schedule).await;
        assert_eq!(status, reqwest::StatusCode::CREATED, "{clock}");
        let queue = clock["channel"]["details"]["queue"]
            .as_str()
            .unwrap_or_else(|| panic!("a RabbitMQ channel: {clock}"));
        Consumers::start(uri, queue, 1).await
    }

    /// Starts `count` competing consumers on `queue` (each on its own connection), acking
    /// every message.
    pub async fn start(uri: &str, queue: &str, count: usize) -> Consumers {
        let received = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let mut connections = Vec::new();
        for consumer_index in 0..count {
            let connection = connect(uri, HANDSHAKE_TIMEOUT)
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
                    sink.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(record(&delivery, consumer_index));
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

/// How long a private broker may take to start on a loaded two-core machine.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A RabbitMQ node of the test's own on a spare loopback port, so that a test may stop and
/// start a broker without touching the machine's shared one. Its data directory survives a
/// stop, so durable queues and persistent messages come back with it.
struct PrivateBroker {
    dir: tempfile::TempDir,
    port: u16,
    dist_port: u16,
    process: Option<std::process::Child>,
}

impl PrivateBroker {
    /// Starts a broker and waits (at most [`START_TIMEOUT`]) until it accepts AMQP connections.
    async fn start() -> PrivateBroker {
        let dir = tempfile::tempdir().expect("a directory for the private broker");
        let ports = crate::ports::allocate(2);
        let config = format!(
            "listeners.tcp.default = 127.0.0.1:{}\nloopback_users = none\n",
            ports[0]
        );
        std::fs::write(dir.path().join("rabbitmq.conf"), config).expect("write the broker config");
        std::fs::write(dir.path().join("enabled_plugins"), "[].\n").expect("write the plugin list");
        let mut broker = PrivateBroker {
            dir,
            port: ports[0],
            dist_port: ports[1],
            process: None,
        };
        broker.restart().await;
        broker
    }

    /// Whether the broker process runs (it was not stopped).
    fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// The AMQP URI of this broker.
    fn uri(&self) -> String {
        amqp_uri(self.address())
    }

    /// The broker's AMQP listener, for the gate in front of it.
    fn address(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Starts the broker again after [`Self::stop`], and waits until it accepts connections.
    async fn restart(&mut self) {
        assert!(
            self.process.is_none(),
            "the private broker is running already"
        );
        let root = self.dir.path();
        let executable = ["/usr/lib/rabbitmq/bin/rabbitmq-server", "rabbitmq-server"]
            .into_iter()
            .find(|candidate| {
                !candidate.starts_with('/') || std::path::Path::new(candidate).exists()
            })
            .unwrap_or("rabbitmq-server");
        let log = std::fs::File::create(root.join("broker.out")).expect("the broker's output file");
        let child = std::process::Command::new(executable)
            .env(
                "RABBITMQ_NODENAME",
                format!("tickdtest{}@localhost", self.port),
            )
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", root.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", root.join("log"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                root.join("enabled_plugins"),
            )
            .env("RABBITMQ_CONFIG_FILE", root.join("rabbitmq"))
            .env("RABBITMQ_PID_FILE", root.join("pid"))
            .stdout(log.try_clone().expect("the broker's output file"))
            .stderr(log)
            .spawn()
            .expect("start a private RabbitMQ (rabbitmq-server)");
        self.process = Some(child);
        let uri = self.uri();
        let started = crate::wait::poll_until(START_TIMEOUT, Duration::from_millis(250), || {
            let uri = uri.clone();
            async move {
                let connection = connect(&uri, RETRIED_HANDSHAKE_TIMEOUT).await.ok()?;
                let _ = connection.close(200, "probe".into()).await;
                Some(())
            }
        })
        .await;
        if let Err(reason) = started {
            let output = std::fs::read_to_string(root.join("broker.out")).unwrap_or_default();
            let lines: Vec<&str> = output.lines().collect();
            let tail = lines[lines.len().saturating_sub(30)..].join("\n");
            panic!(
                "the private RabbitMQ on port {} did not accept connections within {:?} \
                 ({reason}); its output ends:\n{tail}",
                self.port, START_TIMEOUT
            );
        }
    }

    /// Stops the broker and waits until its VM is gone: `rabbitmqctl stop` (which returns once
    /// the Erlang VM has exited), then SIGTERM and, after 20 s, SIGKILL.
    fn stop(&mut self) {
        let Some(mut child) = self.process.take() else {
            return;
        };
        let node = format!("tickdtest{}@localhost", self.port);
        let _ = std::process::Command::new("timeout")
            .args(["30", "rabbitmqctl", "-q", "-n", &node, "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long consumers may take to attach again to a restarted broker before the test gives up.
const REATTACH_TIMEOUT: Duration = Duration::from_secs(60);

/// A private RabbitMQ node (`PrivateBroker`) that tickd reaches through a gate (a [`LinkProxy`]) the test controls,
/// while the test's consumers connect to the broker directly.
///
/// It settles a race the test would otherwise lose on a loaded machine. A scheduled tick
/// expires one interval after the broker takes it (SPEC §5). Had tickd reached a restarted
/// broker before the test's consumers did, it would publish the outage's ticks into queues
/// nobody consumed, they could expire there, and the test would blame tickd for its own
/// consumers' slowness. So the gate stays shut from the stop until every consumer is attached
/// again.
pub struct GatedBroker {
    broker: PrivateBroker,
    gate: LinkProxy,
}

impl GatedBroker {
    /// Starts a private broker and an open gate in front of it.
    pub async fn start() -> GatedBroker {
        let broker = PrivateBroker::start().await;
        let listen = std::net::SocketAddr::from(([127, 0, 0, 1], crate::ports::allocate(1)[0]));
        let gate = LinkProxy::start(listen, broker.address())
            .await
            .expect("a gate in front of the private broker");
        GatedBroker { broker, gate }
    }

    /// The URI to configure tickd with: through the gate.
    pub fn gated_uri(&self) -> String {
        amqp_uri(self.gate.address())
    }

    /// The URI the test's consumers use: the broker itself.
    pub fn uri(&self) -> String {
        self.broker.uri()
    }

    /// Whether the broker process runs (it was not stopped).
    pub fn is_running(&self) -> bool {
        self.broker.is_running()
    }

    /// Stops the broker as `PrivateBroker::stop` does (tickd sees a real shutdown), then
    /// shuts the gate.
    pub fn stop(&mut self) {
        self.broker.stop();
        self.gate.set(LinkMode::Drop);
    }

    /// Starts the broker again, waits until each of `consumers` has attached to it, and only
    /// then opens the gate to tickd.
    ///
    /// # Panics
    ///
    /// When a consumer has not attached within [`REATTACH_TIMEOUT`]: the harness, not tickd,
    /// has failed then.
    pub async fn restart_then_open(&mut self, consumers: &[&ResilientConsumer]) {
        let before: Vec<usize> = consumers.iter().map(|c| c.attachments()).collect();
        self.broker.restart().await;
        crate::wait::eventually(
            "the test's consumers attached to the restarted broker",
            REATTACH_TIMEOUT,
            Duration::from_millis(20),
            || {
                let all_back = consumers
                    .iter()
                    .zip(&before)
                    .all(|(consumer, before)| consumer.attachments() > *before);
                async move { all_back.then_some(()) }
            },
        )
        .await;
        self.gate.set(LinkMode::Pass);
    }
}

/// The guest AMQP URI of a broker (or of the gate in front of one) listening at `address`.
fn amqp_uri(address: std::net::SocketAddr) -> String {
    format!("amqp://guest:guest@{address}/%2f")
}

/// A consumer that reconnects whenever the broker goes away, recording every delivery.
pub struct ResilientConsumer {
    received: Arc<Mutex<Vec<Received>>>,
    attachments: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl ResilientConsumer {
    /// Consumes `queue` at `uri`, reconnecting every 100 ms while the broker is away.
    pub fn start(uri: &str, queue: &str) -> ResilientConsumer {
        Self::start_with(uri, queue, |_| {})
    }

    /// Like [`Self::start`], and also hands every message body to `on_message`.
    pub fn start_with(
        uri: &str,
        queue: &str,
        on_message: impl Fn(&Value) + Send + 'static,
    ) -> ResilientConsumer {
        let received = Arc::new(Mutex::new(Vec::new()));
        let attachments = Arc::new(AtomicUsize::new(0));
        let (uri, queue, sink) = (uri.to_string(), queue.to_string(), received.clone());
        let attached = attachments.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok((mut consumer, connection)) = Consumers::start_checked(&uri, &queue).await
                {
                    attached.fetch_add(1, Ordering::SeqCst);
                    while let Some(Ok(delivery)) = consumer.next().await {
                        let record = record(&delivery, 0);
                        on_message(&record.body);
                        sink.lock().unwrap_or_else(|p| p.into_inner()).push(record);
                        let _ = delivery.ack(BasicAckOptions::default()).await;
                    }
                    drop(connection);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        ResilientConsumer {
            received,
            attachments,
            task,
        }
    }

    /// How many times the consumer has attached to the queue: one more after each broker
    /// restart, once it consumes again.
    pub fn attachments(&self) -> usize {
        self.attachments.load(Ordering::SeqCst)
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for ResilientConsumer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
