//! Scenario 5: scale. One cluster holding a large population of hourly clocks (the cron jobs
//! of a whole company), a tenth of them calendar clocks in 50 zones, beside a thousand `every.1.seconds` http clocks that are polled: what
//! the population costs at rest (CPU per node, beside the same node empty), in memory per
//! clock, in registrations per second as it grows, in snapshot size and build time, in a
//! follower's restart to serving and in a list by name; and whether the frequent clocks tick
//! as punctually among the population as on an empty cluster.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use tickd_tests::TestCluster;
use tickd_tests::process::cpu_percent;

use crate::client::Registration;
use crate::consumer::now_ms;
use crate::cpu;
use crate::footprint::{ResidentParts, SNAPSHOT_BUILT, last_snapshot, resident_parts_of_node};
use crate::footprint::{restart_to_serving, rss_of_node, rss_of_nodes};
use crate::node_metrics;
use crate::population::Population;
use crate::stats::{Percentiles, ratio};
use crate::watchers::Watchers;

/// Nine in ten of the population's clocks: hourly, the cron jobs of a company.
const HOURLY: &str = "every.1.hours";
/// The zones of the population's calendar clocks, one in ten of them (issue 44: calendar
/// clocks live in the due index like the others and must not move the floors).
const ZONES: [&str; 50] = [
    "Europe/Berlin",
    "Europe/London",
    "Europe/Paris",
    "Europe/Madrid",
    "Europe/Rome",
    "Europe/Warsaw",
    "Europe/Helsinki",
    "Europe/Athens",
    "Europe/Istanbul",
    "Europe/Moscow",
    "Europe/Dublin",
    "Europe/Lisbon",
    "Africa/Cairo",
    "Africa/Johannesburg",
    "Africa/Lagos",
    "Africa/Casablanca",
    "Africa/Nairobi",
    "Asia/Dubai",
    "Asia/Tehran",
    "Asia/Karachi",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Dhaka",
    "Asia/Bangkok",
    "Asia/Singapore",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Asia/Seoul",
    "Australia/Perth",
    "Australia/Adelaide",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Auckland",
    "Pacific/Chatham",
    "Pacific/Apia",
    "Pacific/Honolulu",
    "America/Anchorage",
    "America/Los_Angeles",
    "America/Denver",
    "America/Phoenix",
    "America/Chicago",
    "America/New_York",
    "America/Havana",
    "America/Halifax",
    "America/St_Johns",
    "America/Sao_Paulo",
    "America/Santiago",
    "America/Bogota",
    "Antarctica/Troll",
    "UTC",
];

/// The population's schedules, cycled through: per zone, nine hourly clocks and one that
/// fires on weekdays at 09:00 there.
fn population_schedules() -> Vec<String> {
    ZONES
        .iter()
        .flat_map(|zone| {
            let mut part = vec![HOURLY.to_owned(); 9];
            part.push(format!("TZ={zone} 0 0 9 * * MON-FRI"));
            part
        })
        .collect()
}
/// The frequent clocks' schedule.
const FREQUENT: &str = "every.1.seconds";
/// How long CPU is sampled at rest.
const IDLE_WINDOW: Duration = Duration::from_secs(10);
/// How long after a window a snapshot build that overlapped it may still be logging its end:
/// longer than the 2.5 s the longest build of a million clocks took here.
const BUILD_GRACE: Duration = Duration::from_secs(5);
/// Windows tried before one that no snapshot build overlaps is given up on.
const REST_ATTEMPTS: usize = 4;
/// How long the frequent clocks' lateness is sampled, after a warm-up.
const LATENESS_WINDOW: Duration = Duration::from_secs(20);
const WARM_UP: Duration = Duration::from_secs(3);
/// How long the population settles (a snapshot, the allocator) before it is measured.
const SETTLE: Duration = Duration::from_secs(15);
/// Population parts whose registration rate is reported one by one.
const PARTS: usize = 4;
/// Reads by name timed on a follower.
const LIST_READS: usize = 50;
/// The long poll's wait, in seconds.
const POLL_WAIT_S: u64 = 5;
/// Concurrent requests when the frequent clocks are registered, paused or resumed.
const CONCURRENCY: usize = 64;

/// What the scale scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleResult {
    /// Hourly clocks registered.
    pub clocks: usize,
    /// `every.1.seconds` http clocks beside them.
    pub frequent_clocks: usize,
    /// Registrations per second of each part of the population, in order, with the clock
    /// count after it.
    pub register_per_s: Vec<(usize, f64)>,
    /// Each node's CPU at rest with no clock, percent of one core.
    pub idle_cpu_empty_pct: Vec<f64>,
    /// Each node's CPU at rest with the population (the frequent clocks paused), in a window
    /// that no snapshot build overlapped (see [`at_rest`]).
    pub idle_cpu_pct: Vec<f64>,
    /// Windows at rest that a node's snapshot build overlapped, each measured again; all
    /// [`REST_ATTEMPTS`] of them means that `idle_cpu_pct` holds a build.
    pub idle_windows_with_snapshot: usize,
    /// Each node's resident memory with no clock, bytes: the part of `bytes_per_clock` that
    /// is the binary, RocksDB's buffers and the runtime, whatever the population.
    pub rss_empty_bytes: Vec<u64>,
    /// Each node's resident memory with the population, bytes.
    pub rss_bytes: Vec<u64>,
    /// The largest node's resident memory divided by the clocks it holds.
    pub bytes_per_clock: f64,
    /// Where each node's resident memory is, with the population: see [`NodeMemory`].
    pub memory: Vec<NodeMemory>,
    /// The restarted follower's resident memory, bytes, once it serves and has settled: a node
    /// that loaded the population from its snapshot rather than grown with it.
    pub rss_restarted_bytes: u64,
    /// That divided by the clocks it holds.
    pub bytes_per_clock_restarted: f64,
    /// The size of the last snapshot the leader built, bytes.
    pub snapshot_bytes: u64,
    /// How long building it took, ms.
    pub snapshot_build_ms: u64,
    /// From restarting a SIGKILLed follower to its first answered read, ms.
    pub restart_to_serving_ms: f64,
    /// `GET /api/v1/clocks?name=…` on a follower, one request at a time.
    pub list_by_name: Percentiles,
    /// The frequent clocks' lateness (long-poll receipt minus `scheduled_at`) on the cluster
    /// before the population was registered.
    pub frequent_lateness_empty: Percentiles,
    /// The same among the population.
    pub frequent_lateness: Percentiles,
    /// The same again while dashboards and scrapes watch every node ([`Watchers`]).
    pub frequent_lateness_watched: Percentiles,
}

/// One node's resident memory with the population, in parts: anonymous memory and mapped file
/// pages (from the kernel), and of the anonymous memory, what RocksDB says the Raft log's
/// memtables and block cache hold (from the node's metrics). The rest of the anonymous memory
/// is the replicated state, the runtime and what the allocator keeps.
#[derive(Debug, Clone, Serialize)]
pub struct NodeMemory {
    /// From the kernel.
    #[serde(flatten)]
    pub resident: ResidentParts,
    /// The log's memtables, bytes.
    pub log_memtables_bytes: Option<u64>,
    /// The log's block cache, bytes.
    pub log_block_cache_bytes: Option<u64>,
}

/// In megabytes, for the progress lines.
impl std::fmt::Display for NodeMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mb = |bytes: Option<u64>| match bytes {
            Some(bytes) => format!("{:.1}", bytes as f64 / 1e6),
            None => "?".to_owned(),
        };
        write!(
            f,
            "{} MB anonymous (of which the log's memtables {} MB, its block cache {} MB), {} MB \
             of mapped files",
            mb(Some(self.resident.anonymous_bytes)),
            mb(self.log_memtables_bytes),
            mb(self.log_block_cache_bytes),
            mb(Some(self.resident.file_bytes)),
        )
    }
}

impl ScaleResult {
    /// The busiest node's CPU at rest with the population.
    pub fn idle_cpu_max_pct(&self) -> f64 {
        self.idle_cpu_pct.iter().copied().fold(0.0, f64::max)
    }

    /// How much later the frequent clocks tick among the population than without it (p99).
    pub fn lateness_vs_empty_p99(&self) -> f64 {
        ratio(
            self.frequent_lateness.p99_ms,
            self.frequent_lateness_empty.p99_ms,
        )
    }

    /// The same while the cluster is watched.
    pub fn watched_lateness_vs_empty_p99(&self) -> f64 {
        ratio(
            self.frequent_lateness_watched.p99_ms,
            self.frequent_lateness_empty.p99_ms,
        )
    }
}

/// The nodes' CPU in a window at rest, and how many windows a snapshot build overlapped.
struct Rest {
    cpu_pct: Vec<f64>,
    windows_with_snapshot: usize,
}

/// Measures the nodes' CPU at rest in a window that no snapshot build overlaps.
///
/// A build re-encodes the whole registry (1.3 s of a core at a million clocks), and this
/// cluster snapshots every 1 000 entries, a tenth of a node's default, so that its last
/// snapshot holds nearly the whole population: at rest (five intents a second) each node
/// builds one every 200 s, and the first comes soon after the population is in, so a window
/// often holds some node's build, which read 9–13 % of a core at a million. What a node costs
/// at rest is the window without; a build's cost is `snapshot_build_ms` once every
/// `snapshot_every` entries, reported apart. A build overlapped the window when its end is
/// logged between the window's start and [`BUILD_GRACE`] after its end; such a window is
/// measured again, and after [`REST_ATTEMPTS`] the last one is kept as it is.
async fn at_rest(cluster: &TestCluster, pids: &[u32]) -> Result<Rest, String> {
    let builds = || -> Vec<usize> {
        cluster
            .node_ids()
            .into_iter()
            .map(|id| cluster.log(id).matches(SNAPSHOT_BUILT).count())
            .collect()
    };
    let mut windows_with_snapshot = 0;
    loop {
        let before = builds();
        let cpu_pct = cpu_percent(pids, IDLE_WINDOW).await?;
        tokio::time::sleep(BUILD_GRACE).await;
        let overlapped = builds() != before;
        windows_with_snapshot += usize::from(overlapped);
        if !overlapped || windows_with_snapshot == REST_ATTEMPTS {
            return Ok(Rest {
                cpu_pct,
                windows_with_snapshot,
            });
        }
    }
}

/// Runs the scenario on `cluster`, a fresh http-channel cluster.
pub async fn run(
    http: &reqwest::Client,
    cluster: &TestCluster,
    clocks: usize,
    frequent_clocks: usize,
) -> Result<ScaleResult, String> {
    let pids = cpu::node_pids(cluster)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_cpu_empty_pct = at_rest(cluster, &pids).await?.cpu_pct;
    let rss_empty_bytes = rss_of_nodes(cluster)?;
    println!(
        "  at rest, empty: {idle_cpu_empty_pct:.1?} % of a core, {:?} MB resident",
        megabytes(&rss_empty_bytes)
    );

    let prefix = format!("scale-{}", now_ms() as u64);
    let frequent = register_frequent(http, cluster, &prefix, frequent_clocks).await?;
    let frequent_lateness_empty = lateness(http, cluster, &frequent).await?;
    println!("  frequent clocks on the empty cluster: {frequent_lateness_empty:?}");
    act_on_all(http, cluster, &frequent, "pause").await?;

    let schedules = population_schedules();
    let schedules: Vec<&str> = schedules.iter().map(String::as_str).collect();
    let population = Population::new(&format!("{prefix}-hourly"), clocks, &schedules);
    let mut register_per_s = Vec::new();
    let mut registered = 0;
    for part in population.parts(clocks.div_ceil(PARTS)) {
        let load = part.register(http, cluster).await?;
        registered += load.succeeded;
        println!(
            "  {registered} clocks, the last part at {:.0}/s",
            load.per_s
        );
        register_per_s.push((registered, load.per_s));
    }
    tokio::time::sleep(SETTLE).await;
    let rest = at_rest(cluster, &pids).await?;
    let idle_cpu_pct = rest.cpu_pct;
    println!(
        "  at rest with {clocks} clocks: {idle_cpu_pct:.1?} % of a core ({} windows of {REST_ATTEMPTS} \
         overlapped a snapshot build and were dropped, the last kept if all did)",
        rest.windows_with_snapshot
    );
    let rss_bytes = rss_of_nodes(cluster)?;
    println!("  resident: {:?} MB", megabytes(&rss_bytes));
    let memory = memory_of_nodes(http, cluster).await?;
    for (id, node) in cluster.node_ids().into_iter().zip(&memory) {
        println!("  node {id}: {node}");
    }
    let largest = rss_bytes.iter().copied().max().unwrap_or_default();
    let bytes_per_clock = largest as f64 / (clocks + frequent_clocks) as f64;
    let leader = cluster.leader().await.ok_or("no leader")?;
    let (snapshot_bytes, snapshot_build_ms) =
        last_snapshot(&cluster.log(leader)).ok_or("the leader built no snapshot")?;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .ok_or("a cluster of one has no follower")?;
    let list_by_name = list_by_name(http, cluster, follower, population.last_name()).await?;

    act_on_all(http, cluster, &frequent, "resume").await?;
    let frequent_lateness = lateness(http, cluster, &frequent).await?;
    println!("  frequent clocks among the population: {frequent_lateness:?}");
    let watchers = Watchers::start(http, cluster);
    let frequent_lateness_watched = lateness(http, cluster, &frequent).await;
    watchers.stop()?;
    let frequent_lateness_watched = frequent_lateness_watched?;
    println!("  the same, watched by dashboards and scrapes: {frequent_lateness_watched:?}");
    act_on_all(http, cluster, &frequent, "pause").await?;
    let restart_to_serving_ms = restart_to_serving(http, cluster, follower, &population).await?;
    tokio::time::sleep(SETTLE).await;
    let rss_restarted_bytes = rss_of_node(cluster, follower)?;
    let bytes_per_clock_restarted = rss_restarted_bytes as f64 / (clocks + frequent_clocks) as f64;
    println!(
        "  the restarted follower, settled: {:?} MB resident",
        megabytes(&[rss_restarted_bytes])
    );

    Ok(ScaleResult {
        clocks,
        frequent_clocks,
        register_per_s,
        idle_cpu_empty_pct,
        idle_cpu_pct,
        idle_windows_with_snapshot: rest.windows_with_snapshot,
        rss_empty_bytes,
        rss_bytes,
        bytes_per_clock,
        memory,
        rss_restarted_bytes,
        bytes_per_clock_restarted,
        snapshot_bytes,
        snapshot_build_ms,
        restart_to_serving_ms,
        list_by_name,
        frequent_lateness_empty,
        frequent_lateness,
        frequent_lateness_watched,
    })
}

/// Bytes as megabytes with one decimal, for the progress lines.
fn megabytes(bytes: &[u64]) -> Vec<f64> {
    bytes
        .iter()
        .map(|bytes| (*bytes as f64 / 1e5).round() / 10.0)
        .collect()
}

/// Each node's memory in parts ([`NodeMemory`]).
async fn memory_of_nodes(
    http: &reqwest::Client,
    cluster: &TestCluster,
) -> Result<Vec<NodeMemory>, String> {
    let mut memory = Vec::new();
    for id in cluster.node_ids() {
        let resident = resident_parts_of_node(cluster, id)?;
        let scrape =
            node_metrics::scrape(http, &cluster.api_url(id), cluster.operator_token()).await?;
        let (log_memtables_bytes, log_block_cache_bytes) = node_metrics::log_memory_bytes(&scrape);
        memory.push(NodeMemory {
            resident,
            log_memtables_bytes,
            log_block_cache_bytes,
        });
    }
    Ok(memory)
}

/// A frequent clock: its id and its pop URL.
struct Frequent {
    id: String,
    url: String,
}

async fn register_frequent(
    http: &reqwest::Client,
    cluster: &TestCluster,
    prefix: &str,
    count: usize,
) -> Result<Vec<Frequent>, String> {
    let nodes = cluster.node_ids();
    let token = cluster.token().to_string();
    let registered: Vec<Result<Frequent, String>> = futures::stream::iter(0..count)
        .map(|n| {
            let api = cluster.api_url(nodes[n % nodes.len()]);
            let (token, name) = (token.clone(), format!("{prefix}-frequent-{n}"));
            async move {
                let body = Registration {
                    api: &api,
                    token: &token,
                    name: &name,
                    schedule: FREQUENT,
                    webhook: None,
                }
                .send(http)
                .await?;
                let field = |value: &Value| value.as_str().map(str::to_owned);
                Ok(Frequent {
                    id: field(&body["id"]).ok_or("a clock without an id")?,
                    url: field(&body["channel"]["details"]["url"]).ok_or("no pop url")?,
                })
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    registered.into_iter().collect()
}

/// Pauses or resumes every frequent clock.
async fn act_on_all(
    http: &reqwest::Client,
    cluster: &TestCluster,
    clocks: &[Frequent],
    action: &str,
) -> Result<(), String> {
    let api = cluster.api_url(cluster.node_ids()[0]);
    let results: Vec<Result<(), String>> = futures::stream::iter(clocks)
        .map(|clock| {
            let url = format!("{api}/api/v1/clocks/{}/{action}", clock.id);
            async move {
                let response = http
                    .put(&url)
                    .bearer_auth(cluster.token())
                    .send()
                    .await
                    .map_err(|e| format!("{url}: {e}"))?;
                match response.status().is_success() {
                    true => Ok(()),
                    false => Err(format!("{url} answered {}", response.status())),
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Long-polls every frequent clock, one poller each spread over the nodes, and measures each
/// received tick's lateness during [`LATENESS_WINDOW`] after [`WARM_UP`].
async fn lateness(
    http: &reqwest::Client,
    cluster: &TestCluster,
    clocks: &[Frequent],
) -> Result<Percentiles, String> {
    let samples = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let nodes = cluster.node_ids();
    let pollers: Vec<_> = clocks
        .iter()
        .enumerate()
        .map(|(n, clock)| {
            let url = tickd_tests::api::on_node(cluster, nodes[n % nodes.len()], &clock.url);
            let (http, samples) = (http.clone(), samples.clone());
            tokio::spawn(async move {
                let url = format!("{url}?wait={POLL_WAIT_S}");
                while started.elapsed() < WARM_UP + LATENESS_WINDOW {
                    let Ok(response) = http.get(&url).send().await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let Ok(ticks) = response.json::<Vec<Value>>().await else {
                        continue;
                    };
                    let received = now_ms();
                    if started.elapsed() < WARM_UP {
                        continue;
                    }
                    let late = ticks.iter().filter_map(|tick| {
                        let at = tick["scheduled_at"].as_str()?;
                        let scheduled = chrono::DateTime::parse_from_rfc3339(at).ok()?;
                        Some(received - scheduled.timestamp_millis() as f64)
                    });
                    if let Ok(mut samples) = samples.lock() {
                        samples.extend(late);
                    }
                }
            })
        })
        .collect();
    for poller in pollers {
        poller.await.map_err(|e| format!("a poller failed: {e}"))?;
    }
    let samples = std::mem::take(&mut *samples.lock().map_err(|e| e.to_string())?);
    if samples.is_empty() {
        return Err("the frequent clocks delivered no tick".into());
    }
    Ok(Percentiles::of_ms(samples))
}

/// Times `GET /api/v1/clocks?name=…` on `node`, one request at a time.
async fn list_by_name(
    http: &reqwest::Client,
    cluster: &TestCluster,
    node: u64,
    name: &str,
) -> Result<Percentiles, String> {
    let url = format!("{}/api/v1/clocks?name={name}", cluster.api_url(node));
    let mut took = Vec::with_capacity(LIST_READS);
    for _ in 0..LIST_READS {
        let started = Instant::now();
        let response = http
            .get(&url)
            .bearer_auth(cluster.token())
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url} answered {}", response.status()));
        }
        response.bytes().await.map_err(|e| format!("{url}: {e}"))?;
        took.push(started.elapsed());
    }
    Ok(Percentiles::of(&took))
}
