//! Scenario 1: registrations through Raft, beside etcd puts of the same size.
//!
//! For each concurrency level, four loads run back to back so that machine noise hits both
//! systems alike: tickd through its followers, tickd through its leader, etcd through its
//! followers, etcd through its leader. Every tickd request registers a distinct clock (one
//! replicated command, fsynced on a majority before the 201); every etcd request puts a
//! distinct key whose value is as long as the registration's body.

use serde::Serialize;
use tickd_tests::TestCluster;

use crate::client::Registration;
use crate::etcd::{self, EtcdCluster};
use crate::load::{LoadResult, drive};

/// The schedule of the registered clocks: their first tick falls after the measurement, so
/// the figure is the registration path alone.
const SCHEDULE: &str = "every.1.hours";

/// Which member of a cluster the clients send to.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// The followers, round robin: every write takes the forwarding hop.
    Followers,
    /// The leader.
    Leader,
}

/// One row of the registration table.
#[derive(Debug, Clone, Serialize)]
pub struct RegisterRow {
    /// `tickd` or `etcd`.
    pub system: &'static str,
    /// Which members the clients sent to.
    pub target: Target,
    /// What the load measured.
    #[serde(flatten)]
    pub load: LoadResult,
}

/// Runs every level against both clusters; `requests` per level and target.
pub async fn run(
    http: &reqwest::Client,
    tickd: &TestCluster,
    etcd: &EtcdCluster,
    levels: &[usize],
    requests: usize,
) -> Result<Vec<RegisterRow>, String> {
    let mut rows = Vec::new();
    for (round, &clients) in levels.iter().enumerate() {
        for target in [Target::Followers, Target::Leader] {
            let urls = tickd_targets(tickd, target).await?;
            let prefix = format!("bench-r{round}-{target:?}");
            let load = tickd_load(http, tickd.token(), urls, prefix, clients, requests).await;
            print_row("tickd", target, &load);
            rows.push(RegisterRow {
                system: "tickd",
                target,
                load,
            });

            let urls = etcd_targets(http, etcd, target).await?;
            let load = etcd_load(
                http,
                urls,
                format!("r{round}-{target:?}"),
                clients,
                requests,
            )
            .await;
            print_row("etcd", target, &load);
            rows.push(RegisterRow {
                system: "etcd",
                target,
                load,
            });
        }
    }
    Ok(rows)
}

fn print_row(system: &str, target: Target, load: &LoadResult) {
    println!(
        "  {system:<5} {target:<9?} clients {:>3}: {:>7.0}/s  p50 {:>6.1} ms  p99 {:>6.1} ms  p99.9 {:>6.1} ms  failed {}",
        load.clients,
        load.per_s,
        load.latency.p50_ms,
        load.latency.p99_ms,
        load.latency.p999_ms,
        load.failed
    );
}

async fn tickd_targets(tickd: &TestCluster, target: Target) -> Result<Vec<String>, String> {
    let leader = tickd
        .leader()
        .await
        .ok_or("the tickd cluster has no leader")?;
    Ok(tickd
        .node_ids()
        .into_iter()
        .filter(|id| (*id == leader) == (target == Target::Leader))
        .map(|id| tickd.api_url(id))
        .collect())
}

async fn etcd_targets(
    http: &reqwest::Client,
    etcd: &EtcdCluster,
    target: Target,
) -> Result<Vec<String>, String> {
    let leader = etcd.leader_index(http).await?;
    Ok(etcd
        .client_urls()
        .iter()
        .enumerate()
        .filter(|(index, _)| (*index == leader) == (target == Target::Leader))
        .map(|(_, url)| url.clone())
        .collect())
}

async fn tickd_load(
    http: &reqwest::Client,
    token: &str,
    urls: Vec<String>,
    prefix: String,
    clients: usize,
    requests: usize,
) -> LoadResult {
    let (http, token) = (http.clone(), token.to_string());
    drive(clients, requests, move |index| {
        let (http, token) = (http.clone(), token.clone());
        let api = urls[index % urls.len()].clone();
        let name = format!("{prefix}-{index}");
        async move {
            let registration = Registration {
                api: &api,
                token: &token,
                name: &name,
                schedule: SCHEDULE,
            };
            registration.send(&http).await.map(drop)
        }
    })
    .await
}

async fn etcd_load(
    http: &reqwest::Client,
    urls: Vec<String>,
    prefix: String,
    clients: usize,
    requests: usize,
) -> LoadResult {
    let http = http.clone();
    drive(clients, requests, move |index| {
        let http = http.clone();
        let url = urls[index % urls.len()].clone();
        let key = format!("bench/{prefix}-{index}");
        // The same bytes a registration of a clock with this name carries.
        let value = Registration {
            api: "",
            token: "",
            name: &key,
            schedule: SCHEDULE,
        }
        .body()
        .to_string();
        async move { etcd::put(&http, &url, &key, value.as_bytes()).await }
    })
    .await
}
