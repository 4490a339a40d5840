//! A 3-node etcd cluster on loopback, the reference the registration figures are compared to.
//!
//! etcd is the Raft-replicated store platform teams already trust; it is started from the
//! Debian package `etcd-server` (`scripts/bench` installs it), with its data in a temporary
//! directory and every port on 127.0.0.1. Puts go through etcd's JSON gateway (`/v3/kv/put`)
//! with the same HTTP client tickd's registrations use.

use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use tempfile::TempDir;
use tickd_tests::ports;

/// How long the cluster may take to elect a leader and answer on every member.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running etcd cluster; dropping it kills every member.
pub struct EtcdCluster {
    members: Vec<Child>,
    client_urls: Vec<String>,
    _dir: TempDir,
}

impl EtcdCluster {
    /// Starts `size` members and waits until they agree on a leader.
    pub async fn start(size: usize, http: &reqwest::Client) -> Result<EtcdCluster, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("a directory for etcd: {e}"))?;
        let ports = ports::allocate(size * 2);
        let peer_url = |i: usize| format!("http://127.0.0.1:{}", ports[2 * i + 1]);
        let client_urls: Vec<String> = (0..size)
            .map(|i| format!("http://127.0.0.1:{}", ports[2 * i]))
            .collect();
        let initial_cluster = (0..size)
            .map(|i| format!("etcd{i}={}", peer_url(i)))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            members: Vec::new(),
            client_urls: client_urls.clone(),
            _dir: dir,
        };
        for (i, client_url) in client_urls.iter().enumerate() {
            let log = File::create(cluster._dir.path().join(format!("etcd{i}.log")))
                .map_err(|e| format!("etcd's log file: {e}"))?;
            let log_err = log
                .try_clone()
                .map_err(|e| format!("etcd's log file: {e}"))?;
            let child = Command::new("etcd")
                .arg(format!("--name=etcd{i}"))
                .arg(format!(
                    "--data-dir={}",
                    cluster._dir.path().join(format!("etcd{i}")).display()
                ))
                .arg(format!("--listen-client-urls={client_url}"))
                .arg(format!("--advertise-client-urls={client_url}"))
                .arg(format!("--listen-peer-urls={}", peer_url(i)))
                .arg(format!("--initial-advertise-peer-urls={}", peer_url(i)))
                .arg(format!("--initial-cluster={initial_cluster}"))
                .arg("--initial-cluster-state=new")
                .arg("--initial-cluster-token=tickd-bench")
                .arg("--logger=zap")
                .arg("--log-level=warn")
                .env_remove("ETCDCTL_API")
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(log_err))
                .spawn()
                .map_err(|e| {
                    format!(
                        "cannot start etcd ({e}); install it with `apt-get install -y etcd-server`"
                    )
                })?;
            cluster.members.push(child);
        }
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            match cluster.leader_index(http).await {
                Ok(_) => return Ok(cluster),
                Err(reason) if tokio::time::Instant::now() > deadline => {
                    return Err(format!(
                        "etcd did not elect a leader in {START_TIMEOUT:?}: {reason}"
                    ));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// The client URL of every member.
    pub fn client_urls(&self) -> &[String] {
        &self.client_urls
    }

    /// Which member leads, as an index into [`EtcdCluster::client_urls`]; an error until
    /// every member answers and they agree.
    pub async fn leader_index(&self, http: &reqwest::Client) -> Result<usize, String> {
        let mut leader = None;
        let mut member_ids = Vec::new();
        for url in &self.client_urls {
            let status: Value = http
                .post(format!("{url}/v3/maintenance/status"))
                .json(&json!({}))
                .send()
                .await
                .map_err(|e| format!("{url}: {e}"))?
                .json()
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let said = status["leader"].as_str().unwrap_or("0").to_string();
            if said == "0" || leader.as_ref().is_some_and(|l| *l != said) {
                return Err(format!("{url} reports leader {said:?}"));
            }
            leader = Some(said);
            member_ids.push(
                status["header"]["member_id"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
        }
        let leader = leader.unwrap_or_default();
        member_ids
            .iter()
            .position(|id| *id == leader)
            .ok_or_else(|| format!("no member has the leader's id {leader}"))
    }
}

/// Puts `value` under `key` through the member at `url`.
pub async fn put(http: &reqwest::Client, url: &str, key: &str, value: &[u8]) -> Result<(), String> {
    let body = json!({ "key": STANDARD.encode(key), "value": STANDARD.encode(value) });
    let response = http
        .post(format!("{url}/v3/kv/put"))
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!(
            "etcd answered {status}: {}",
            response.text().await.unwrap_or_default()
        ))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            let _ = member.kill();
            let _ = member.wait();
        }
    }
}
