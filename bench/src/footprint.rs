//! Scenario 4: footprint. How much memory a node needs per active clock, how large its
//! snapshot is and how long it takes to build, and how long a node holding that state takes
//! from restart to serving reads again.

use std::time::{Duration, Instant};

use serde::Serialize;
use tickd_tests::TestCluster;

use crate::consumer::now_ms;
use crate::population::Population;

/// The footprint clocks' schedule. The clocks use the http channel and tick once an hour, so
/// the figure is what the cluster keeps per registered, active clock (the registry, the tick
/// cursor, the indexes), not ticks waiting for a consumer: a hundred thousand RabbitMQ queues
/// are beyond the shared broker of a two-core machine (ten thousand already took it minutes to
/// declare), and a hundred thousand unpolled http queues would measure their backlog.
const SCHEDULE: &str = "every.1.hours";
/// How long the clocks tick before memory is read, so the outbox is in its steady state.
const SETTLE: Duration = Duration::from_secs(15);
/// How long a restarted node may take to serve.
const RESTART_TIMEOUT: Duration = Duration::from_secs(120);

/// What the footprint scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct FootprintResult {
    /// Active clocks.
    pub clocks: usize,
    /// Resident memory of each node before any clock was registered, bytes.
    pub rss_empty_bytes: Vec<u64>,
    /// Resident memory of each node with every clock active, bytes.
    pub rss_bytes: Vec<u64>,
    /// The largest node's resident memory divided by the clock count.
    pub bytes_per_clock: f64,
    /// The largest node's growth from empty, divided by the clock count.
    pub marginal_bytes_per_clock: f64,
    /// The size of the last snapshot the leader built, bytes.
    pub snapshot_bytes: u64,
    /// How long building (serializing and fsyncing) it took, ms.
    pub snapshot_build_ms: u64,
    /// From restarting a SIGKILLed follower to its first answered read, ms.
    pub restart_to_serving_ms: f64,
}

/// Registers `clocks` clocks on `cluster` (an http-channel cluster) and measures it.
pub async fn run(
    http: &reqwest::Client,
    cluster: &TestCluster,
    clocks: usize,
) -> Result<FootprintResult, String> {
    let rss_empty_bytes = rss_of_nodes(cluster)?;
    let population = Population::new(&format!("foot-{}", now_ms() as u64), clocks, &[SCHEDULE]);
    let load = population.register(http, cluster).await?;
    println!("  {clocks} clocks registered at {:.0}/s", load.per_s);
    measure(http, cluster, clocks, rss_empty_bytes, &population).await
}

async fn measure(
    http: &reqwest::Client,
    cluster: &TestCluster,
    clocks: usize,
    rss_empty_bytes: Vec<u64>,
    population: &Population,
) -> Result<FootprintResult, String> {
    tokio::time::sleep(SETTLE).await;
    let rss_bytes = rss_of_nodes(cluster)?;
    let largest = rss_bytes.iter().copied().max().unwrap_or_default();
    let growth = rss_bytes
        .iter()
        .zip(&rss_empty_bytes)
        .map(|(now, empty)| now.saturating_sub(*empty))
        .max()
        .unwrap_or_default();
    let leader = cluster
        .leader()
        .await
        .ok_or("no leader to read the snapshot of")?;
    let (snapshot_bytes, snapshot_build_ms) = last_snapshot(&cluster.log(leader))
        .ok_or("the leader built no snapshot (is snapshot_every below the entries written?)")?;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .ok_or("a cluster of one has no follower to restart")?;
    let restart_to_serving_ms = restart_to_serving(http, cluster, follower, population).await?;
    Ok(FootprintResult {
        clocks,
        rss_empty_bytes,
        bytes_per_clock: largest as f64 / clocks as f64,
        marginal_bytes_per_clock: growth as f64 / clocks as f64,
        rss_bytes,
        snapshot_bytes,
        snapshot_build_ms,
        restart_to_serving_ms,
    })
}

/// SIGKILLs `node`, restarts it, and times it until it answers a read of the population.
pub(crate) async fn restart_to_serving(
    http: &reqwest::Client,
    cluster: &TestCluster,
    node: u64,
    population: &Population,
) -> Result<f64, String> {
    cluster.kill(node);
    let started = Instant::now();
    cluster.restart(node);
    let url = format!(
        "{}/api/v1/clocks?name={}",
        cluster.api_url(node),
        population.last_name()
    );
    while started.elapsed() < RESTART_TIMEOUT {
        let answer = http
            .get(&url)
            .bearer_auth(cluster.token())
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        if let Ok(response) = answer
            && response.status().is_success()
            && let Ok(body) = response.json::<serde_json::Value>().await
            && body.as_array().is_some_and(|clocks| !clocks.is_empty())
        {
            return Ok(started.elapsed().as_secs_f64() * 1e3);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!(
        "node {node} did not serve within {RESTART_TIMEOUT:?} of its restart"
    ))
}

pub(crate) fn rss_of_nodes(cluster: &TestCluster) -> Result<Vec<u64>, String> {
    cluster
        .node_ids()
        .into_iter()
        .map(|id| rss_of_node(cluster, id))
        .collect()
}

/// The resident memory of node `id`, bytes.
pub(crate) fn rss_of_node(cluster: &TestCluster, id: u64) -> Result<u64, String> {
    let pid = cluster.pid(id).ok_or(format!("node {id} is not running"))?;
    rss_bytes(pid)
}

/// Where a process's resident memory is: what it allocated, and the pages of files it maps
/// (its binary's code above all), from `/proc/<pid>/smaps_rollup`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ResidentParts {
    /// Anonymous memory: the heap, the stacks, RocksDB's buffers.
    pub anonymous_bytes: u64,
    /// Pages of mapped files: the executable's code and data, shared libraries.
    pub file_bytes: u64,
}

/// The resident parts of node `id`.
pub(crate) fn resident_parts_of_node(
    cluster: &TestCluster,
    id: u64,
) -> Result<ResidentParts, String> {
    let pid = cluster.pid(id).ok_or(format!("node {id} is not running"))?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .map_err(|e| format!("reading the memory map of process {pid}: {e}"))?;
    parse_parts(&rollup).ok_or(format!("no Rss or Anonymous line for process {pid}"))
}

fn parse_parts(rollup: &str) -> Option<ResidentParts> {
    let kib = |field: &str| -> Option<u64> {
        let line = rollup.lines().find(|line| line.starts_with(field))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let (rss, anonymous) = (kib("Rss:")? * 1024, kib("Anonymous:")? * 1024);
    Some(ResidentParts {
        anonymous_bytes: anonymous,
        file_bytes: rss.saturating_sub(anonymous),
    })
}

/// A process's resident set size, from `/proc/<pid>/status`.
fn rss_bytes(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("reading the memory of process {pid}: {e}"))?;
    parse_rss(&status).ok_or(format!("no VmRSS line for process {pid}"))
}

fn parse_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What a node logs when it has built a snapshot (`tickd_storage`'s state machine).
pub(crate) const SNAPSHOT_BUILT: &str = "snapshot built";

/// The size and build time of the last snapshot a node's log reports.
pub(crate) fn last_snapshot(log: &str) -> Option<(u64, u64)> {
    let line = log
        .lines()
        .rev()
        .find(|line| line.contains(SNAPSHOT_BUILT))?;
    let field = |name: &str| -> Option<u64> {
        let start = line.find(&format!("{name}="))? + name.len() + 1;
        line[start..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((field("bytes")?, field("elapsed_ms")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_in_kibibytes() {
        let status = "Name:\ttickd\nVmPeak:\t  900 kB\nVmRSS:\t   2048 kB\nThreads:\t9\n";
        assert_eq!(parse_rss(status), Some(2 * 1024 * 1024));
        assert_eq!(parse_rss("Name:\ttickd\n"), None);
    }

    #[test]
    fn resident_parts_split_anonymous_from_file_pages() {
        let rollup = "\
55d0c0000000-7ffc00000000 ---p 00000000 00:00 0                          [rollup]
Rss:              121500 kB
Pss:              120000 kB
Anonymous:         99900 kB
";
        let parts = parse_parts(rollup).expect("both lines");
        assert_eq!(parts.anonymous_bytes, 99_900 * 1024);
        assert_eq!(parts.file_bytes, 21_600 * 1024);
        assert!(parse_parts("Rss: 5 kB\n").is_none());
    }

    #[test]
    fn the_last_snapshot_line_wins() {
        let log = "\
2026-11-22T01:00:00Z  INFO tickd_storage: snapshot built snapshot=1-1-10-ab bytes=100 elapsed_ms=3
2026-11-22T01:00:01Z  INFO tickd_storage: something else
2026-11-22T01:00:02Z  INFO tickd_storage: snapshot built snapshot=1-1-20-cd bytes=2500 elapsed_ms=41
";
        assert_eq!(last_snapshot(log), Some((2500, 41)));
        assert_eq!(last_snapshot("no snapshots here"), None);
    }
}
