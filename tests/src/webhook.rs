//! A webhook receiver for the tests: an HTTP (or HTTPS) server on loopback that records every
//! delivery (its Standard Webhooks headers and its body, as sent) and answers as the test
//! scripts it, and the check of recorded signatures with the Standard Webhooks project's own library
//! (`tests/webhook/verify.py`, PyPI's `standardwebhooks`), never with tickd's code.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::pki::Identity;
use crate::tools;

/// One delivery as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The `webhook-id` header.
    pub id: String,
    /// The `webhook-timestamp` header.
    pub timestamp: String,
    /// The `webhook-signature` header.
    pub signature: String,
    /// The body, as sent.
    pub body: String,
    /// The status this receiver answered it with.
    pub answered: u16,
    /// When it arrived.
    pub at: Instant,
    /// When it arrived, in milliseconds since the Unix epoch: to compare with its tick's
    /// instant.
    pub received_ms: u64,
    /// The `webhook-id`s of the earlier deliveries still waiting for their answer when it
    /// arrived (a receiver that [answers late](Receiver::answering_after)).
    pub overlapping: Vec<String>,
}

impl Delivery {
    /// The body as JSON (the tick message).
    pub fn tick(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// How the receiver answers the `n`-th delivery (from 0) of each `webhook-id`.
pub type Script = Arc<dyn Fn(&str, usize) -> StatusCode + Send + Sync>;

struct Shared {
    deliveries: Mutex<Vec<Delivery>>,
    script: Mutex<Script>,
    /// How long each answer takes.
    delay: Duration,
    /// The `webhook-id`s of the deliveries waiting for their answer.
    answering: Mutex<Vec<String>>,
}

impl Shared {
    fn deliveries(&self) -> MutexGuard<'_, Vec<Delivery>> {
        self.deliveries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn answering(&self) -> MutexGuard<'_, Vec<String>> {
        self.answering
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A receiver on `127.0.0.1`, answering `POST /hook`.
pub struct Receiver {
    address: SocketAddr,
    shared: Arc<Shared>,
    /// Its TLS configuration when it serves https.
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: Mutex<Option<oneshot::Sender<()>>>,
}

impl Receiver {
    /// A receiver that answers 200 to every delivery.
    pub async fn start() -> Receiver {
        Self::scripted(Arc::new(|_, _| StatusCode::OK)).await
    }

    /// A receiver that answers as `script` says.
    pub async fn scripted(script: Script) -> Receiver {
        Self::listen(script, None, Duration::ZERO).await
    }

    /// A receiver that answers 200 to every delivery, each `delay` after it arrived: a
    /// receiver busy with each tick for that long.
    pub async fn answering_after(delay: Duration) -> Receiver {
        Self::listen(Arc::new(|_, _| StatusCode::OK), None, delay).await
    }

    /// A receiver that answers 200 to every delivery over https, with `identity`'s
    /// certificate (one `tickd certs create-node --host 127.0.0.1` made, say).
    pub async fn start_tls(identity: &Identity) -> Receiver {
        Self::listen(
            Arc::new(|_, _| StatusCode::OK),
            Some(server_config(identity)),
            Duration::ZERO,
        )
        .await
    }

    async fn listen(
        script: Script,
        tls: Option<Arc<rustls::ServerConfig>>,
        delay: Duration,
    ) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the receiver");
        let address = listener.local_addr().expect("the receiver's address");
        let shared = Arc::new(Shared {
            deliveries: Mutex::new(Vec::new()),
            script: Mutex::new(script),
            delay,
            answering: Mutex::new(Vec::new()),
        });
        let receiver = Receiver {
            address,
            shared,
            tls,
            shutdown: Mutex::new(None),
        };
        receiver.serve(listener);
        receiver
    }

    fn serve(&self, listener: TcpListener) {
        let (stop, stopped) = oneshot::channel::<()>();
        *self
            .shutdown
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stop);
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(self.shared.clone());
        let stopped = async {
            let _ = stopped.await;
        };
        match &self.tls {
            None => tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(stopped)
                    .await;
            }),
            Some(tls) => {
                let listener = TlsListener {
                    tcp: listener,
                    acceptor: tokio_rustls::TlsAcceptor::from(tls.clone()),
                };
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(stopped)
                        .await;
                })
            }
        };
    }

    /// The URL ticks are sent to.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/hook", self.address)
    }

    /// The URL under another host name that resolves to the receiver (`localhost`).
    pub fn url_by_name(&self, host: &str) -> String {
        format!("http://{host}:{}/hook", self.address.port())
    }

    /// Stops answering: connections are refused until [`Receiver::resume`].
    pub fn go_down(&self) {
        if let Some(stop) = self
            .shutdown
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = stop.send(());
        }
    }

    /// Listens again on the same port.
    pub async fn resume(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match TcpListener::bind(self.address).await {
                Ok(listener) => return self.serve(listener),
                Err(error) if Instant::now() < deadline => {
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => panic!(
                    "the receiver cannot listen on {} again: {error}",
                    self.address
                ),
            }
        }
    }

    /// Every delivery so far, in order of arrival.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.deliveries().clone()
    }

    /// The deliveries answered 2xx, one per `webhook-id` (the first), in order of arrival.
    pub fn delivered(&self) -> Vec<Delivery> {
        let mut seen = std::collections::HashSet::new();
        self.deliveries()
            .into_iter()
            .filter(|delivery| (200..300).contains(&delivery.answered))
            .filter(|delivery| seen.insert(delivery.id.clone()))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.go_down();
    }
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let id = header("webhook-id");
    let script = shared
        .script
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let overlapping = shared.answering().clone();
    shared.answering().push(id.clone());
    // Counted out when the answer goes, or when the sender hung up first.
    let _answering = Answering {
        shared: &shared,
        id: id.clone(),
    };
    let status = {
        let mut deliveries = shared.deliveries();
        let earlier = deliveries
            .iter()
            .filter(|delivery| delivery.id == id)
            .count();
        let status = script(&id, earlier);
        deliveries.push(Delivery {
            id,
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
            body: String::from_utf8_lossy(&body).into_owned(),
            answered: status.as_u16(),
            at: Instant::now(),
            received_ms: crate::chaos::time::now_ms(),
            overlapping,
        });
        status
    };
    tokio::time::sleep(shared.delay).await;
    status
}

/// A delivery waiting for its answer, listed in `Shared::answering` while it lives.
struct Answering<'a> {
    shared: &'a Shared,
    id: String,
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        let mut answering = self.shared.answering();
        if let Some(index) = answering.iter().position(|id| *id == self.id) {
            answering.swap_remove(index);
        }
    }
}

/// The TLS configuration of a receiver that presents `identity`'s certificate.
fn server_config(identity: &Identity) -> Arc<rustls::ServerConfig> {
    let chain = CertificateDer::pem_file_iter(&identity.cert)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .unwrap_or_else(|error| panic!("read {}: {error}", identity.cert.display()));
    let key = PrivateKeyDer::from_pem_file(&identity.key)
        .unwrap_or_else(|error| panic!("read {}: {error}", identity.key.display()));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("rustls' default protocol versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("a usable receiver certificate and key");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A TCP listener whose connections are served once their TLS handshake succeeds; a failed
/// handshake (a client that does not trust the certificate) only ends its connection.
struct TlsListener {
    tcp: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((socket, address)) = self.tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            if let Ok(Ok(stream)) =
                tokio::time::timeout(Duration::from_secs(5), self.acceptor.accept(socket)).await
            {
                return (stream, address);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A receiver that accepts connections and never answers: each is held open until the test
/// ends.
pub struct Silent {
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Silent {
    /// Starts one on a loopback port.
    pub async fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the silent receiver");
        let address = listener.local_addr().expect("its address");
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        Silent { address, task }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.address)
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Checks every delivery's signature with the Standard Webhooks library, keyed with `secret`
/// (the clock's, as its registration returned it); returns how many it verified. Fails when
/// the library or Python is missing, or the library refuses one.
pub async fn verify_with_standard_webhooks(secret: &str, deliveries: &[Delivery]) -> usize {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("webhook/verify.py");
    let python = tools::require("python");
    let mut child = tokio::process::Command::new(&python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", python.display()));
    let mut input = String::new();
    for delivery in deliveries {
        let line = json!({
            "secret": secret,
            "headers": {
                "webhook-id": delivery.id,
                "webhook-timestamp": delivery.timestamp,
                "webhook-signature": delivery.signature,
            },
            "body": delivery.body,
        });
        input.push_str(&line.to_string());
        input.push('\n');
    }
    let mut stdin = child.stdin.take().expect("the verifier's stdin");
    stdin
        .write_all(input.as_bytes())
        .await
        .expect("the deliveries reach the verifier");
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the verifier finishes within a minute")
        .expect("the verifier runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Standard Webhooks library refused a delivery ({}): {}{}",
        output.status,
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|error| panic!("the verifier's report {stdout:?}: {error}"));
    report["verified"]
        .as_u64()
        .and_then(|count| usize::try_from(count).ok())
        .expect("a count of verified deliveries")
}
