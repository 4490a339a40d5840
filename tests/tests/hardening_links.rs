//! What a node reachable off loopback hands its clients (issue 43, F8 and F11), against a real
//! `tickd` process whose API listens on every interface (`0.0.0.0`). The test only talks to
//! it over loopback; the wildcard bind is what makes the node "off loopback".
//!
//! - F8: links (`Location`, which carries the token) and poll URLs are built only on a host of
//!   `api_hosts`; a forged `Host` is a 400 that registers nothing, and a node bound to every
//!   interface with no hosts named refuses to start.
//! - F11: clients get `rabbit_client_uri`, never the node's own broker credentials; without it
//!   such a node refuses to start.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HOST, LOCATION};
use serde_json::{Value, json};
use tickd_tests::api::{CLOCKS_PATH, HEALTH_PATH};
use tickd_tests::cluster::{READY_TIMEOUT, tickd_binary};
use tickd_tests::config::{ClusterConfig, TEST_TOKEN, toml_string};
use tickd_tests::{eventually, ports, rabbit, unique_name};
use tokio::process::{Child, Command};

/// The URI the clients of the broker test consume with: another user than the node's.
const CLIENT_URI: &str = "amqp://ticktok-clients:client-password@127.0.0.1:5672/%2f";

/// One node whose API listens on `0.0.0.0` and whose Raft listener stays on loopback.
struct ExposedNode {
    dir: tempfile::TempDir,
    api_port: u16,
    config: ClusterConfig,
}

impl ExposedNode {
    fn new() -> Self {
        let ports = ports::allocate(2);
        let mut config = ClusterConfig::of_listeners([(
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, ports[0])),
            SocketAddr::from((Ipv4Addr::LOCALHOST, ports[1])),
        )]);
        // The test's traffic stays on loopback; plain HTTP keeps the test about links.
        config.settings.push(("insecure".into(), "true".into()));
        Self {
            dir: tempfile::tempdir().expect("a directory for the node"),
            api_port: ports[0],
            config,
        }
    }

    fn setting(mut self, key: &str, toml_value: String) -> Self {
        self.config.settings.push((key.into(), toml_value));
        self
    }

    /// `api_hosts` naming the loopback address the test reaches the node by.
    fn with_loopback_host(self) -> Self {
        let host = toml_string(&format!("127.0.0.1:{}", self.api_port));
        self.setting("api_hosts", format!("[{host}]"))
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.api_port)
    }

    fn spawn(&self) -> Child {
        let path = self.dir.path().join("cluster.toml");
        self.config.write(&path).expect("write cluster.toml");
        let log = |name: &str| {
            std::fs::File::create(self.dir.path().join(name)).expect("a log file for the node")
        };
        Command::new(tickd_binary())
            .args(["--config", &path.display().to_string(), "--node", "1"])
            .env_remove("ACCESS_TOKEN")
            .env_remove("RABBIT_URI")
            .stdin(Stdio::null())
            .stdout(log("stdout.log"))
            .stderr(log("stderr.log"))
            .kill_on_drop(true)
            .spawn()
            .expect("start tickd")
    }

    /// Starts the node and waits until it serves.
    async fn start(&self) -> Child {
        let child = self.spawn();
        let client = client();
        let health = self.url(HEALTH_PATH);
        eventually(
            "the node serves",
            READY_TIMEOUT,
            Duration::from_millis(100),
            || async {
                client
                    .get(&health)
                    .send()
                    .await
                    .is_ok_and(|response| response.status() == StatusCode::OK)
                    .then_some(())
            },
        )
        .await;
        child
    }

    /// Starts the node, expects it to exit with an error, and returns what it said.
    async fn refused(&self) -> String {
        let mut child = self.spawn();
        let status = tokio::time::timeout(READY_TIMEOUT, child.wait())
            .await
            .expect("the node exits instead of serving")
            .expect("wait for the node");
        assert!(!status.success(), "the node exited with success");
        read(&self.dir.path().join("stderr.log"))
    }
}

/// A client as the harness builds them (rustls with ring: the tests' reqwest has no default
/// crypto provider).
fn client() -> reqwest::Client {
    tickd_tests::http::client_builder()
        .build()
        .expect("an HTTP client")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

async fn register(node: &ExposedNode, host: Option<&str>) -> (StatusCode, Option<String>, Value) {
    let mut request = client()
        .post(node.url(CLOCKS_PATH))
        .bearer_auth(TEST_TOKEN)
        .json(&json!({"name": unique_name("links"), "schedule": "every.5.seconds"}));
    if let Some(host) = host {
        request = request.header(HOST, host);
    }
    let response = request.send().await.expect("the node answers");
    let status = response.status();
    let location = response
        .headers()
        .get(LOCATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    (
        status,
        location,
        response.json().await.unwrap_or(Value::Null),
    )
}

async fn clock_count(node: &ExposedNode) -> usize {
    let list: Value = client()
        .get(node.url(CLOCKS_PATH))
        .bearer_auth(TEST_TOKEN)
        .send()
        .await
        .expect("the node answers")
        .json()
        .await
        .expect("a JSON list");
    list.as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn links_off_loopback_are_built_only_on_the_files_hosts() {
    let node = ExposedNode::new().with_loopback_host();
    let _child = node.start().await;

    let (status, location, body) = register(&node, Some("attacker.example")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(location, None);
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("api_hosts"), "{body}");
    assert!(
        !message.contains("attacker"),
        "the forged host is echoed: {body}"
    );
    assert_eq!(
        clock_count(&node).await,
        0,
        "a refused request registered a clock"
    );

    let own = format!("http://127.0.0.1:{}/", node.api_port);
    let (status, location, body) = register(&node, None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let location = location.unwrap_or_default();
    assert!(location.starts_with(&own), "{location}");
    let poll = body["channel"]["details"]["url"]
        .as_str()
        .unwrap_or_default();
    assert!(poll.starts_with(&own), "{body}");
}

#[tokio::test]
async fn a_node_on_every_interface_with_no_hosts_named_refuses_to_start() {
    let said = ExposedNode::new().refused().await;
    assert!(said.contains("api_hosts"), "{said}");
    assert!(said.contains("public_url"), "{said}");
}

#[tokio::test]
async fn clients_off_loopback_get_their_own_broker_uri() {
    let node_uri = rabbit::broker().await;
    let node = ExposedNode::new()
        .with_loopback_host()
        .setting("rabbit_uri", toml_string(&node_uri))
        .setting("rabbit_client_uri", toml_string(CLIENT_URI));
    let _child = node.start().await;
    let (status, _, body) = register(&node, None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["channel"]["details"]["uri"], CLIENT_URI, "{body}");
    assert_eq!(body["channel"]["uri"], CLIENT_URI, "{body}");
    assert!(
        !body.to_string().contains("guest"),
        "the node's credentials reached a client: {body}"
    );
}

#[tokio::test]
async fn a_node_off_loopback_without_a_client_broker_uri_refuses_to_start() {
    let node_uri = rabbit::broker().await;
    let said = ExposedNode::new()
        .with_loopback_host()
        .setting("rabbit_uri", toml_string(&node_uri))
        .refused()
        .await;
    assert!(said.contains("rabbit_client_uri"), "{said}");
    assert!(
        !said.contains("guest:guest"),
        "the node's URI is echoed: {said}"
    );
}
