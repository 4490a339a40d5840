//! Scenario 1: registrations through Raft, beside etcd puts of the same size.
//!
//! For each concurrency level and each target (the followers, then the leader), the loads run
//! back to back so that machine noise hits every system alike: each tickd cluster in turn
//! (plain HTTP, then HTTPS with mutual TLS between the nodes), then etcd. Every tickd request
//! registers a distinct clock (one replicated command, fsynced on a majority before the 201);
//! every etcd request puts a distinct key whose value is as long as the registration's body.

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

/// A tickd cluster under load and the client that speaks to it (over TLS, for a cluster with
/// TLS on).
pub struct Tickd<'a> {
    /// The row label: [`PLAIN`] or [`TLS`].
    pub system: &'static str,
    /// The cluster.
    pub cluster: &'a TestCluster,
    /// A client that trusts the cluster.
    pub http: &'a reqwest::Client,
}

/// The label of the plain-HTTP cluster's rows.
pub const PLAIN: &str = "tickd";
/// The label of the rows of the cluster with TLS on its API and mutual TLS between its nodes.
pub const TLS: &str = "tickd-tls";

/// One row of the registration table.
#[derive(Debug, Clone, Serialize)]
pub struct RegisterRow {
    /// [`PLAIN`], [`TLS`] or `etcd`.
    pub system: &'static str,
    /// Which members the clients sent to.
    pub target: Target,
    /// What the load measured.
    #[serde(flatten)]
    pub load: LoadResult,
}

/// Runs every level against every cluster; `requests` per level and target. `http` is
/// etcd's client.
pub async fn run(
    http: &reqwest::Client,
    tickds: &[Tickd<'_>],
    etcd: &EtcdCluster,
    levels: &[usize],
    requests: usize,
) -> Result<Vec<RegisterRow>, String> {
    let mut rows = Vec::new();
    for (round, &clients) in levels.iter().enumerate() {
        for target in [Target::Followers, Target::Leader] {
            for tickd in tickds {
                let urls = tickd_targets(tickd.cluster, target).await?;
                let prefix = format!("bench-r{round}-{target:?}");
                let token = tickd.cluster.token();
                let load = tickd_load(tickd.http, token, urls, prefix, clients, requests).await;
                print_row(tickd.system, target, &load);
                rows.push(RegisterRow {
                    system: tickd.system,
                    target,
                    load,
                });
            }

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
        "  {system:<9} {target:<9?} clients {:>3}: {:>7.0}/s  p50 {:>6.1} ms  p99 {:>6.1} ms  p99.9 {:>6.1} ms  failed {}",
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
                webhook: None,
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
            webhook: None,
        }
        .body()
        .to_string();
        async move { etcd::put(&http, &url, &key, value.as_bytes()).await }
    })
    .await
}
