//! Scenario: webhook lateness, tickd beside the bare sender.
//!
//! tickd (a fresh 3-node cluster) and then the bare sender (one process, no consensus) post
//! the ticks of the same number of `every.1.seconds` webhook clocks to the same receiver in
//! this process ([`WebhookReceiver`]), through HTTP clients with the same settings. Lateness
//! is the receiver's arrival time minus the tick's `scheduled_at`, once per `tick_id`.
//!
//! Every clock posts to the one receiver, so both senders are held to the engine's 32
//! attempts at once per receiver: the figure is what a receiver that takes every clock of a
//! cluster sees, the case where a sender's own overhead per tick shows most.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tickd_tests::TestCluster;

use crate::consumer::now_ms;
use crate::cpu::{self, CpuMeter};
use crate::lateness::{self, Delivered};
use crate::population::Population;
use crate::receiver::WebhookReceiver;
use crate::report::{CpuPerTick, WebhookRow};
use crate::stats::ratio;

/// The schedule of every webhook clock.
pub const SCHEDULE: &str = "every.1.seconds";
/// How long the clocks tick before the measurement starts: both senders open their 32
/// connections to the receiver in their first second, and tickd's leader works off the ticks
/// its clocks' registrations left behind.
const WARM_UP: Duration = Duration::from_secs(5);
/// How long after the window the receiver keeps counting its late ticks. Longer than the
/// lateness scenario's: a webhook tick that finds its receiver busy waits a second before
/// tickd asks again, and a failed attempt is retried after 0.5 to 1 s, then 1 to 2 s; ten
/// seconds leave room for a few of those rounds.
const GRACE: Duration = Duration::from_secs(10);

/// Measures `clocks` webhook clocks on `cluster` (which allows private receivers), then the
/// bare sender with as many.
pub async fn run(
    http: &reqwest::Client,
    cluster: &TestCluster,
    bare_sender: &Path,
    clocks: usize,
    window: Duration,
) -> Result<WebhookRow, String> {
    let receiver = WebhookReceiver::start().await?;
    let population = Population::new(
        &format!("hook{clocks}-{}", now_ms() as u64),
        clocks,
        &[SCHEDULE],
    );
    let started = Instant::now();
    population
        .register_webhooks(http, cluster, &receiver.url())
        .await?;
    println!(
        "  {clocks} webhook clocks registered with tickd at {:.0}/s",
        clocks as f64 / started.elapsed().as_secs_f64()
    );
    let (tickd, tickd_cpu) = measure(&receiver, clocks, window, &cpu::node_pids(cluster)?).await?;
    // Stop the cluster before the baseline: its posts would share the receiver with it.
    cluster.kill_all();
    nothing_delivered("tickd", &tickd)?;

    let mut sender = Command::new(bare_sender);
    sender
        .arg("--url")
        .arg(receiver.url())
        .arg("--clocks")
        .arg(clocks.to_string());
    let (baseline, baseline_cpu) = lateness::while_running(sender, |pid| async move {
        measure(&receiver, clocks, window, &[pid]).await
    })
    .await??;

    nothing_delivered("the bare sender", &baseline)?;
    let row = WebhookRow {
        clocks,
        p99_ratio: ratio(tickd.lateness.p99_ms, baseline.lateness.p99_ms),
        tickd,
        baseline,
        tickd_cpu,
        baseline_cpu,
    };
    print_table(&row);
    Ok(row)
}

/// Lets the senders warm up, then counts the ticks due in the next `window` of `clocks`
/// clocks, with their lateness, and what the window cost `senders` (the processes that send
/// the ticks) and the receiver in CPU.
async fn measure(
    receiver: &WebhookReceiver,
    clocks: usize,
    window: Duration,
    senders: &[u32],
) -> Result<(Delivered, CpuPerTick), String> {
    tokio::time::sleep(WARM_UP).await;
    receiver.drain();
    let from = now_ms();
    let until = from + window.as_secs_f64() * 1e3;
    let sending = CpuMeter::start(senders)?;
    let receiving = CpuMeter::start(&[std::process::id()])?;
    tokio::time::sleep(window).await;
    let (sent, received) = (sending.used()?, receiving.used()?);
    tokio::time::sleep(GRACE).await;
    let deliveries = receiver.drain();
    let expected = clocks * lateness::instants(1_000.0, from, until);
    let per_tick_us = |seconds: f64| 1e6 * seconds / expected.max(1) as f64;
    let cpu = CpuPerTick {
        sender_us: per_tick_us(sent),
        receiver_us: per_tick_us(received),
    };
    Ok((lateness::summarize(&deliveries, expected, from, until), cpu))
}

/// Fails a system that delivered nothing: its p99 would be a 0 that divides into a ratio
/// that passes any floor.
fn nothing_delivered(system: &str, delivered: &Delivered) -> Result<(), String> {
    if delivered.received == 0 {
        return Err(format!(
            "{system} delivered none of the window's {} ticks",
            delivered.expected
        ));
    }
    Ok(())
}

fn print_table(row: &WebhookRow) {
    println!(
        "  {:<12} {:>8} {:>8} {:>8} {:>8}  {:>17}",
        "system", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "received/expected"
    );
    for (system, delivered) in [("tickd", &row.tickd), ("bare sender", &row.baseline)] {
        let lateness = &delivered.lateness;
        println!(
            "  {system:<12} {:>8.1} {:>8.1} {:>8.1} {:>8.1}  {:>17}",
            lateness.p50_ms,
            lateness.p99_ms,
            lateness.p999_ms,
            lateness.max_ms,
            format!("{}/{}", delivered.received, delivered.expected),
        );
    }
    println!(
        "  {} clocks: p99 ratio tickd / bare sender {:.2}",
        row.clocks, row.p99_ratio
    );
    println!(
        "  CPU per tick of the window: tickd's nodes {:.1} µs (receiver {:.1}), bare sender \
         {:.1} µs (receiver {:.1}); with the receiver, ratio {:.2}",
        row.tickd_cpu.sender_us,
        row.tickd_cpu.receiver_us,
        row.baseline_cpu.sender_us,
        row.baseline_cpu.receiver_us,
        row.cpu_ratio(),
    );
}
