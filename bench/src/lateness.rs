//! Scenario 2: tick lateness, tickd beside the bare ticker.
//!
//! For each population size, tickd (a 3-node cluster) and then the bare ticker (one process,
//! no consensus) deliver the same clocks — half `every.1.seconds`, half `every.10.seconds`,
//! aligned to the epoch as SPEC §5 requires, so every tenth second all of them fire at once —
//! through the same broker to the same consumers. Lateness is the consumer's receipt time
//! minus the tick's `scheduled_at`.
//!
//! One round's ratio of the two p99s has ranged 0.82–1.36 on one build: the broker and two
//! shared cores make every window a draw. The headline size is therefore measured in several
//! rounds, each a fresh tickd cluster followed by the bare ticker, so that the two alternate;
//! the round with the median ratio ([`median_rounds`]) is the headline.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;
use tickd_tests::TestCluster;

use crate::consumer::{Delivery, TickConsumers, now_ms};
use crate::node_metrics;
use crate::population::{self, Population};
use crate::stats::{Percentiles, distribution_ms, ratio};

/// The schedules of a lateness population.
pub const SCHEDULES: [&str; 2] = ["every.1.seconds", "every.10.seconds"];
/// How long the clocks tick before the measurement starts.
const WARM_UP: Duration = Duration::from_secs(3);
/// How long after the window the consumers keep listening for its late ticks.
const GRACE: Duration = Duration::from_secs(3);
/// How long a queue outlives its consumers: long enough for a scenario, short enough that a
/// crashed run does not litter a shared broker for long. A finished scenario deletes its
/// queues.
pub const QUEUE_TTL_MS: u64 = 20 * 60 * 1_000;
/// How many clocks are registered before consumers attach to their queues. A registered clock
/// ticks at once; until its queue has a consumer, the broker stores every persistent tick and
/// then expires it. Ten thousand clocks ticking into unconsumed queues slowed the shared broker
/// until its queue declarations timed out and registration crawled, so each part is consumed
/// as soon as it is registered.
const REGISTER_PART: usize = 500;

/// What one system delivered for one population.
#[derive(Debug, Clone, Serialize)]
pub struct Delivered {
    /// Ticks due in the window (every instant of every clock).
    pub expected: usize,
    /// Distinct ticks of the window received.
    pub received: usize,
    /// Lateness of those ticks.
    pub lateness: Percentiles,
    /// Their lateness's cumulative distribution: `(share, ms)` points, for the plot.
    pub distribution: Vec<(f64, f64)>,
}

/// One row of the lateness table.
#[derive(Debug, Clone, Serialize)]
pub struct LatenessRow {
    /// Active clocks.
    pub clocks: usize,
    /// Which round of this population size, from 1.
    pub round: usize,
    /// tickd's deliveries.
    pub tickd: Delivered,
    /// The p99 of the leader's own publish-time lateness histogram over the warm-up and the
    /// window (the upper bound of its bucket); `None` if the leader changed or kept no
    /// histogram.
    pub node_publish_lateness_p99_ms: Option<f64>,
    /// The bare ticker's deliveries.
    pub baseline: Delivered,
}

impl LatenessRow {
    /// tickd's p99 over the bare ticker's, in this round.
    pub fn p99_ratio(&self) -> f64 {
        ratio(self.tickd.lateness.p99_ms, self.baseline.lateness.p99_ms)
    }
}

/// For each population size, in the order first measured, the round whose p99 ratio is the
/// median of its rounds; of an even number of rounds, the higher of the middle two.
pub fn median_rounds(rows: &[LatenessRow]) -> Vec<&LatenessRow> {
    let mut sizes: Vec<usize> = Vec::new();
    for row in rows {
        if !sizes.contains(&row.clocks) {
            sizes.push(row.clocks);
        }
    }
    sizes
        .into_iter()
        .filter_map(|clocks| {
            let mut rounds: Vec<&LatenessRow> =
                rows.iter().filter(|row| row.clocks == clocks).collect();
            rounds.sort_by(|a, b| a.p99_ratio().total_cmp(&b.p99_ratio()));
            rounds.get(rounds.len() / 2).copied()
        })
        .collect()
}

/// Measures one round of one population size on a fresh cluster and then on the bare ticker.
pub async fn run(
    http: &reqwest::Client,
    cluster: &TestCluster,
    rabbit: &str,
    bare_ticker: &Path,
    (clocks, round): (usize, usize),
    window: Duration,
) -> Result<LatenessRow, String> {
    let stamp = now_ms() as u64;
    let tickd_clocks = Population::new(&format!("lat{clocks}-{stamp}"), clocks, &SCHEDULES);
    let queues = tickd_clocks.queues()?;
    let consumers = register_and_consume(http, cluster, rabbit, &tickd_clocks, &queues).await;
    let leader = cluster.leader().await.ok_or("the cluster has no leader")?;
    let (api, token) = (cluster.api_url(leader), cluster.operator_token());
    let before = node_metrics::scrape(http, &api, token).await;
    let tickd = match consumers {
        Ok(consumers) => Ok(measure(consumers, queues.len(), window).await),
        Err(error) => Err(error),
    };
    let after = node_metrics::scrape(http, &api, token).await;
    // Nobody consumes any more: stop the cluster before it floods the queues being deleted.
    cluster.kill_all();
    population::delete_queues(rabbit, &queues).await;
    let tickd = tickd?;
    let node_publish_lateness_p99_ms = match (before, after) {
        (Ok(before), Ok(after)) => node_metrics::publish_lateness_p99_ms(&before, &after),
        _ => None,
    };

    let baseline_clocks = Population::new(&format!("base{clocks}-{stamp}"), clocks, &SCHEDULES);
    let queues = baseline_clocks.queues()?;
    population::declare_queues(rabbit, &queues, QUEUE_TTL_MS).await?;
    let consumers = TickConsumers::start(rabbit, &queues).await?;
    let baseline = with_bare_ticker(bare_ticker, rabbit, &baseline_clocks, async {
        Ok::<_, String>(measure(consumers, queues.len(), window).await)
    })
    .await;
    population::delete_queues(rabbit, &queues).await;
    let row = LatenessRow {
        clocks,
        round,
        tickd,
        node_publish_lateness_p99_ms,
        baseline: baseline??,
    };
    println!(
        "  {clocks:>6} clocks, round {round}: tickd p50 {:.1} p99 {:.1} p99.9 {:.1} ms ({}/{} ticks) | bare ticker p50 {:.1} p99 {:.1} p99.9 {:.1} ms ({}/{}) | p99 ratio {:.2}",
        row.tickd.lateness.p50_ms,
        row.tickd.lateness.p99_ms,
        row.tickd.lateness.p999_ms,
        row.tickd.received,
        row.tickd.expected,
        row.baseline.lateness.p50_ms,
        row.baseline.lateness.p99_ms,
        row.baseline.lateness.p999_ms,
        row.baseline.received,
        row.baseline.expected,
        row.p99_ratio(),
    );
    if let Some(p99) = row.node_publish_lateness_p99_ms {
        println!("          the leader's own publish lateness: p99 <= {p99} ms");
    }
    Ok(row)
}

/// Registers `population` with tickd part by part, consuming each part's queues as soon as
/// it is registered (see [`REGISTER_PART`]).
async fn register_and_consume(
    http: &reqwest::Client,
    cluster: &TestCluster,
    rabbit: &str,
    population: &Population,
    queues: &[String],
) -> Result<TickConsumers, String> {
    let mut consumers = TickConsumers::connect(rabbit).await?;
    let started = std::time::Instant::now();
    let mut ticking = 0;
    for (part, part_queues) in population
        .parts(REGISTER_PART)
        .iter()
        .zip(queues.chunks(REGISTER_PART))
    {
        // Each registered part adds its ticks to the broker's load; a broker that cannot carry
        // the population stops answering tickd's queue declarations in time (tickd answers
        // 503), and how many clocks were ticking by then is its capacity.
        part.register(http, cluster).await.map_err(|error| {
            format!("registration failed once {ticking} clocks were ticking: {error}")
        })?;
        consumers.subscribe(part_queues).await?;
        ticking += part_queues.len();
    }
    println!(
        "  {} clocks registered with tickd and consumed at {:.0}/s",
        queues.len(),
        queues.len() as f64 / started.elapsed().as_secs_f64()
    );
    Ok(consumers)
}

/// Lets `consumers` (on `clocks` queues) warm up, and measures the ticks due in the next
/// `window`.
async fn measure(consumers: TickConsumers, clocks: usize, window: Duration) -> Delivered {
    tokio::time::sleep(WARM_UP).await;
    consumers.drain();
    let from = now_ms();
    let until = from + window.as_secs_f64() * 1e3;
    tokio::time::sleep(window + GRACE).await;
    let deliveries = consumers.drain();
    consumers.stop().await;
    summarize(
        &deliveries,
        expected_ticks(clocks, from, until),
        from,
        until,
    )
}

/// The ticks due in `[from, until)`, counted once each, beside the `expected` count.
pub fn summarize(deliveries: &[Delivery], expected: usize, from: f64, until: f64) -> Delivered {
    let mut seen = std::collections::HashSet::new();
    let lateness: Vec<f64> = deliveries
        .iter()
        .filter(|d| d.scheduled_ms >= from && d.scheduled_ms < until)
        .filter(|d| seen.insert(d.tick_id.clone()))
        .map(Delivery::lateness_ms)
        .collect();
    let received = lateness.len();
    let (lateness, distribution) = distribution_ms(lateness);
    Delivered {
        expected,
        received,
        lateness,
        distribution,
    }
}

/// How many instants of a lateness population fall in `[from, until)`.
fn expected_ticks(clocks: usize, from: f64, until: f64) -> usize {
    // The population cycles through the schedules: clocks 0, 2, 4… tick every second.
    let every_second = clocks.div_ceil(2);
    every_second * instants(1_000.0, from, until)
        + (clocks - every_second) * instants(10_000.0, from, until)
}

/// How many multiples of `interval_ms` (an epoch-aligned schedule's instants) fall in
/// `[from, until)`; the bounds carry fractions of a ms.
pub fn instants(interval_ms: f64, from: f64, until: f64) -> usize {
    let first = (from / interval_ms).ceil();
    let last = (until / interval_ms).ceil() - 1.0;
    (last - first + 1.0).max(0.0) as usize
}

/// Runs `work` while the bare ticker publishes `clocks`.
async fn with_bare_ticker<T>(
    binary: &Path,
    rabbit: &str,
    clocks: &Population,
    work: impl Future<Output = T>,
) -> Result<T, String> {
    let file = tempfile::NamedTempFile::new().map_err(|e| format!("a clocks file: {e}"))?;
    std::fs::write(file.path(), clocks.to_lines()).map_err(|e| format!("the clocks file: {e}"))?;
    let mut ticker = Command::new(binary);
    ticker
        .arg("--uri")
        .arg(rabbit)
        .arg("--clocks")
        .arg(file.path());
    while_running(ticker, |_| work).await
}

/// Runs `work` (handed the baseline's process id) while `command` (a baseline that runs until
/// it is killed) runs; an early exit of the baseline fails the measurement, which would
/// otherwise count its silence.
pub async fn while_running<T, Work: Future<Output = T>>(
    mut command: Command,
    work: impl FnOnce(u32) -> Work,
) -> Result<T, String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let result = work(child.id()).await;
    let exited = child.try_wait().ok().flatten();
    let _ = child.kill();
    let _ = child.wait();
    match exited {
        Some(status) => Err(format!("{program} exited early ({status})")),
        None => Ok(result),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_ticks_count_every_instant_in_the_window() {
        // 10 s from a 10-s boundary: 10 instants per every-second clock, 1 per every-10-s one.
        assert_eq!(expected_ticks(4, 20_000.0, 30_000.0), 2 * 10 + 2);
        // Half-open: an instant at `until` belongs to the next window.
        assert_eq!(expected_ticks(1, 1_000.0, 2_000.0), 1);
        assert_eq!(expected_ticks(3, 500.0, 1_500.0), 2);
        // A window that starts a fraction of a ms after an instant still holds every instant
        // up to its end (20 s hold two 10-s instants, whatever the phase).
        assert_eq!(expected_ticks(2, 10_000.5, 30_000.5), 20 + 2);
    }

    #[test]
    fn a_repeated_tick_counts_once_and_ticks_outside_the_window_not_at_all() {
        let delivery = |tick_id: &str, scheduled_ms: f64, received_ms: f64| Delivery {
            clock: "c".into(),
            tick_id: tick_id.into(),
            scheduled_ms,
            received_ms,
            publisher: "p".into(),
        };
        let deliveries = [
            delivery("a", 1_000.0, 1_004.0),
            delivery("a", 1_000.0, 1_500.0),
            delivery("b", 2_000.0, 2_010.0),
            delivery("c", 9_000.0, 9_001.0),
        ];
        let summary = summarize(
            &deliveries,
            expected_ticks(1, 1_000.0, 3_000.0),
            1_000.0,
            3_000.0,
        );
        assert_eq!((summary.expected, summary.received), (2, 2));
        assert_eq!(summary.lateness.max_ms, 10.0);
    }

    fn round(clocks: usize, round: usize, tickd_p99: f64, baseline_p99: f64) -> LatenessRow {
        let delivered = |p99_ms| Delivered {
            expected: 1,
            received: 1,
            lateness: Percentiles {
                p99_ms,
                ..Percentiles::default()
            },
            distribution: Vec::new(),
        };
        LatenessRow {
            clocks,
            round,
            tickd: delivered(tickd_p99),
            node_publish_lateness_p99_ms: None,
            baseline: delivered(baseline_p99),
        }
    }

    #[test]
    fn the_headline_round_is_the_one_with_the_median_ratio_for_each_size() {
        let rows = [
            round(1_000, 1, 50.0, 40.0),
            round(10_000, 1, 130.0, 100.0),
            round(10_000, 2, 80.0, 100.0),
            round(10_000, 3, 300.0, 300.0),
            round(100_000, 1, 10.0, 10.0),
            round(100_000, 2, 30.0, 10.0),
        ];
        let medians: Vec<(usize, usize)> = median_rounds(&rows)
            .into_iter()
            .map(|row| (row.clocks, row.round))
            .collect();
        // 10 000: ratios 1.3, 0.8, 1.0, so round 3; of two rounds, the higher ratio.
        assert_eq!(medians, [(1_000, 1), (10_000, 3), (100_000, 2)]);
        assert!(median_rounds(&[]).is_empty());
    }
}
