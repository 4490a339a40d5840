//! Scenario 3: failover. Leaders are killed with SIGKILL while 1 000 `every.1.seconds`
//! clocks tick; each kill is timed to the first tick the new leader delivers, and at the end
//! every instant of every clock in the run must have arrived. The killed node is restarted
//! and has caught up before the next kill, so every kill is one fault in a healthy cluster.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;
use tickd_tests::TestCluster;

use crate::consumer::{Delivery, TickConsumers, now_ms};
use crate::population::{self, Population};
use crate::stats::Percentiles;

/// The schedule of every failover clock.
const SCHEDULE: &str = "every.1.seconds";
/// How long the clocks tick before the first kill, and after the last restart.
const SETTLE: Duration = Duration::from_secs(3);
/// How long a new leader may take to deliver before the kill counts as failed.
const NEW_LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a restarted node may take to rejoin and catch up.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the consumers wait for the last ticks of the run.
const GRACE: Duration = Duration::from_secs(3);

/// What the failover scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverResult {
    /// Leaders killed.
    pub kills: usize,
    /// From each kill to the first tick delivered by the next leader.
    pub to_first_tick: Percentiles,
    /// Instants in the run with no delivery.
    pub lost_ticks: usize,
    /// Deliveries beyond the first of a tick (same tick id, re-published after a failover).
    pub repeated_ticks: usize,
    /// Ticks due in the run.
    pub expected_ticks: usize,
}

/// Kills the leader `kills` times while `clocks` clocks tick.
pub async fn run(
    http: &reqwest::Client,
    cluster: &TestCluster,
    rabbit: &str,
    clocks: usize,
    kills: usize,
) -> Result<FailoverResult, String> {
    let population = Population::new(&format!("fail-{}", now_ms() as u64), clocks, &[SCHEDULE]);
    population.register(http, cluster).await?;
    let queues = population.queues()?;
    let consumers = TickConsumers::start(rabbit, &queues).await?;
    let result = kill_leaders(cluster, &consumers, clocks, kills).await;
    consumers.stop().await;
    population::delete_queues(rabbit, &queues).await;
    result
}

async fn kill_leaders(
    cluster: &TestCluster,
    consumers: &TickConsumers,
    clocks: usize,
    kills: usize,
) -> Result<FailoverResult, String> {
    tokio::time::sleep(SETTLE).await;
    consumers.drain();
    let from = now_ms();
    let mut deliveries: Vec<Delivery> = Vec::new();
    let mut to_first_tick = Vec::new();
    for kill in 0..kills {
        // Spread the kills over the second, so that they land at every phase of the tick.
        let phase = Duration::from_millis((kill as u64 * 370) % 1_000);
        tokio::time::sleep(phase).await;
        let leader = cluster
            .leader()
            .await
            .ok_or("the cluster has no leader before a kill")?;
        let killed_at = now_ms();
        cluster.kill(leader);
        let old_publisher = format!("tickd-node-{leader}");
        let first = first_tick_after(consumers, &mut deliveries, killed_at, &old_publisher).await?;
        let elapsed = first - killed_at;
        println!(
            "  kill {:>2}: node {leader}, first tick from the new leader after {elapsed:.0} ms",
            kill + 1
        );
        to_first_tick.push(elapsed);
        cluster.restart(leader);
        cluster.wait_ready(RECOVERY_TIMEOUT).await;
        // Each kill is a single fault: the next one waits until the restarted node's log has
        // caught up, or the cluster would be failing over with one healthy follower.
        cluster.wait_caught_up(leader, RECOVERY_TIMEOUT).await;
    }
    tokio::time::sleep(SETTLE).await;
    let until = now_ms();
    tokio::time::sleep(GRACE).await;
    deliveries.extend(consumers.drain());
    let tally = tally(&deliveries, clocks, from, until);
    Ok(FailoverResult {
        kills,
        to_first_tick: Percentiles::of_ms(to_first_tick),
        lost_ticks: tally.lost,
        repeated_ticks: tally.repeated,
        expected_ticks: tally.expected,
    })
}

/// Waits for the first delivery received after `killed_at` from a publisher other than
/// `old_publisher`, keeping every delivery seen meanwhile; its receipt time.
async fn first_tick_after(
    consumers: &TickConsumers,
    deliveries: &mut Vec<Delivery>,
    killed_at: f64,
    old_publisher: &str,
) -> Result<f64, String> {
    let deadline = tokio::time::Instant::now() + NEW_LEADER_TIMEOUT;
    loop {
        let batch = consumers.drain();
        let first = batch
            .iter()
            .filter(|d| d.received_ms > killed_at && d.publisher != old_publisher)
            .map(|d| d.received_ms)
            .reduce(f64::min);
        deliveries.extend(batch);
        if let Some(first) = first {
            return Ok(first);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "no tick from a new leader within {NEW_LEADER_TIMEOUT:?} of a kill"
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

struct Tally {
    expected: usize,
    lost: usize,
    repeated: usize,
}

/// Checks every instant of every clock due in `[from, until)` against the deliveries.
fn tally(deliveries: &[Delivery], clocks: usize, from: f64, until: f64) -> Tally {
    let mut received: HashMap<&str, HashSet<u64>> = HashMap::new();
    let mut repeated = 0;
    for delivery in deliveries {
        let instants = received.entry(delivery.clock.as_str()).or_default();
        if !instants.insert(delivery.scheduled_ms as u64) {
            repeated += 1;
        }
    }
    let first = (from / 1e3).ceil() as u64;
    let last = ((until - 1.0) / 1e3).floor() as u64;
    let instants: Vec<u64> = (first..=last).map(|second| second * 1_000).collect();
    let expected = clocks * instants.len();
    let present: usize = received
        .values()
        .map(|seen| {
            instants
                .iter()
                .filter(|instant| seen.contains(instant))
                .count()
        })
        .sum();
    Tally {
        expected,
        lost: expected - present.min(expected),
        repeated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(clock: &str, second: u64) -> Delivery {
        Delivery {
            clock: clock.into(),
            tick_id: format!("{clock}-{}", second * 1_000),
            scheduled_ms: (second * 1_000) as f64,
            received_ms: (second * 1_000 + 3) as f64,
            publisher: "tickd-node-1".into(),
        }
    }

    #[test]
    fn a_missing_instant_is_lost_and_a_repeat_is_counted() {
        let deliveries = [
            delivery("a", 1),
            delivery("a", 2),
            delivery("a", 2),
            delivery("b", 1),
            // b's instant 2 never arrived; instant 3 is outside the window.
            delivery("b", 3),
        ];
        let tally = tally(&deliveries, 2, 1_000.0, 3_000.0);
        assert_eq!((tally.expected, tally.lost, tally.repeated), (4, 1, 1));
    }

    #[test]
    fn a_clock_that_never_ticked_loses_every_instant() {
        let tally = tally(&[delivery("a", 1)], 2, 1_000.0, 2_000.0);
        assert_eq!((tally.expected, tally.lost), (2, 1));
    }
}
