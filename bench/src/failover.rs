//! Scenario 3: failover. Leaders are killed with SIGKILL while 1 000 `every.1.seconds`
//! clocks tick; each kill is timed to the first tick the new leader delivers, and at the end
//! every instant of every clock in the run must have arrived. The killed node is restarted
//! and has caught up before the next kill, so every kill is one fault in a healthy cluster.
//!
//! Each kill is also broken into phases ([`Timeline`]), from the new leader's log (the
//! engine's `leading: firing ticks` and `leading: a quorum confirmed the lease` lines, whose
//! timestamps are the same machine's clock as the kill's) and from the first tick itself:
//! whether it was a tick the dead leader had left unconfirmed, published at once, or the next
//! instant, waited for.

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
    /// From each kill until a survivor's engine saw itself lead: the followers noticing the
    /// silence, and the election.
    pub to_leading: Percentiles,
    /// From leading until a quorum confirmed the new leader's lease.
    pub leading_to_lease: Percentiles,
    /// From the lease until the first tick arrived: an intent, the wait for a due instant,
    /// the publish.
    pub lease_to_first_tick: Percentiles,
    /// Each kill's phases.
    pub timelines: Vec<Timeline>,
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
    let mut timelines = Vec::new();
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
        let logs: Vec<String> = cluster
            .node_ids()
            .into_iter()
            .filter(|id| *id != leader)
            .map(|id| cluster.log(id))
            .collect();
        let timeline = Timeline::of(killed_at, &first, &logs);
        println!("  kill {:>2}: node {leader}, {timeline}", kill + 1);
        to_first_tick.push(timeline.first_tick_ms);
        timelines.push(timeline);
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
    let phase = |between: fn(&Timeline) -> Option<f64>| {
        Percentiles::of_ms(timelines.iter().filter_map(between).collect())
    };
    Ok(FailoverResult {
        kills,
        to_first_tick: Percentiles::of_ms(to_first_tick),
        to_leading: phase(|timeline| timeline.leading_ms),
        leading_to_lease: phase(|timeline| Some(timeline.lease_ms? - timeline.leading_ms?)),
        lease_to_first_tick: phase(|timeline| Some(timeline.first_tick_ms - timeline.lease_ms?)),
        timelines,
        lost_ticks: tally.lost,
        repeated_ticks: tally.repeated,
        expected_ticks: tally.expected,
    })
}

/// Waits for the first delivery received after `killed_at` from a publisher other than
/// `old_publisher`, keeping every delivery seen meanwhile.
async fn first_tick_after(
    consumers: &TickConsumers,
    deliveries: &mut Vec<Delivery>,
    killed_at: f64,
    old_publisher: &str,
) -> Result<Delivery, String> {
    let deadline = tokio::time::Instant::now() + NEW_LEADER_TIMEOUT;
    loop {
        let batch = consumers.drain();
        let first = batch
            .iter()
            .filter(|d| d.received_ms > killed_at && d.publisher != old_publisher)
            .min_by(|one, other| one.received_ms.total_cmp(&other.received_ms))
            .cloned();
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

/// One kill's phases, in milliseconds from the kill.
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    /// When a survivor's engine logged that it leads; `None` if no log said so.
    pub leading_ms: Option<f64>,
    /// When the new leader logged its first lease; `None` if its log did not say so.
    pub lease_ms: Option<f64>,
    /// When the first tick from the new leader arrived.
    pub first_tick_ms: f64,
    /// When that tick was due: before the kill, a tick the dead leader left unconfirmed (sent
    /// again at once); after the lease, an instant the new leader had to wait for.
    pub first_tick_due_ms: f64,
}

/// What the engine logs when it starts to lead, and when its lease first holds.
const LEADING_LINE: &str = "leading: firing ticks";
const LEASE_LINE: &str = "leading: a quorum confirmed the lease";

impl Timeline {
    /// The phases of the kill at `killed_at` (Unix ms), from the survivors' `logs` and the
    /// first tick that followed.
    fn of(killed_at: f64, first: &Delivery, logs: &[String]) -> Timeline {
        let after_kill = |line: &str| {
            logs.iter()
                .filter_map(|log| logged_after(log, line, killed_at))
                .reduce(f64::min)
                .map(|at| at - killed_at)
        };
        Timeline {
            leading_ms: after_kill(LEADING_LINE),
            lease_ms: after_kill(LEASE_LINE),
            first_tick_ms: first.received_ms - killed_at,
            first_tick_due_ms: first.scheduled_ms - killed_at,
        }
    }
}

impl std::fmt::Display for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |phase: Option<f64>| phase.map_or("?".to_owned(), |ms| format!("{ms:.0}"));
        write!(
            f,
            "leading after {} ms, lease at {} ms, first tick at {:.0} ms (due at {:.0} ms)",
            at(self.leading_ms),
            at(self.lease_ms),
            self.first_tick_ms,
            self.first_tick_due_ms
        )
    }
}

/// The Unix time in ms of the first line of `log` that holds `message` and was written after
/// `after`: a node's log lines begin with an RFC 3339 timestamp.
fn logged_after(log: &str, message: &str, after: f64) -> Option<f64> {
    log.lines()
        .filter(|line| line.contains(message))
        .filter_map(|line| {
            let stamp = line.split_whitespace().next()?;
            let at = chrono::DateTime::parse_from_rfc3339(stamp).ok()?;
            Some(at.timestamp_micros() as f64 / 1e3)
        })
        .find(|at| *at > after)
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
    fn a_kill_is_timed_from_the_first_lines_logged_after_it() {
        let logs = [
            "2026-11-29T18:00:00.500000Z  INFO tickd_engine::duties: leading: firing ticks term=3\n\
             2026-11-29T18:00:02.250000Z  INFO tickd_engine::duties: leading: firing ticks term=5\n\
             2026-11-29T18:00:02.300000Z  INFO tickd_engine::duties: leading: a quorum confirmed \
             the lease; publishing\n"
                .to_owned(),
            "2026-11-29T18:00:03.000000Z  INFO tickd_engine::duties: leading: firing ticks term=6\n"
                .to_owned(),
        ];
        let killed_at = chrono::DateTime::parse_from_rfc3339("2026-11-29T18:00:01Z")
            .map(|at| at.timestamp_millis() as f64)
            .expect("a time");
        let first = Delivery {
            received_ms: killed_at + 1_400.0,
            scheduled_ms: killed_at + 1_000.0,
            ..delivery("a", 1)
        };
        let timeline = Timeline::of(killed_at, &first, &logs);
        assert_eq!(timeline.leading_ms, Some(1_250.0));
        assert_eq!(timeline.lease_ms, Some(1_300.0));
        assert_eq!(
            (timeline.first_tick_ms, timeline.first_tick_due_ms),
            (1_400.0, 1_000.0)
        );
        assert_eq!(Timeline::of(killed_at, &first, &[]).leading_ms, None);
    }

    #[test]
    fn a_clock_that_never_ticked_loses_every_instant() {
        let tally = tally(&[delivery("a", 1)], 2, 1_000.0, 2_000.0);
        assert_eq!((tally.expected, tally.lost), (2, 1));
    }
}
