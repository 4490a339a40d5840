//! A black-box fault-injection suite in the spirit of Jepsen and etcd's robustness tests:
//! real `tickd` processes, a real RabbitMQ (a private one the nemesis may stop), a client
//! workload, a nemesis, and checkers that turn a run's history into a verdict.
//!
//! * [`workload`]: registry clients (register, pause, resume, read, list through random
//!   nodes, on a few shared names so that they collide) and consumers of watched clocks.
//! * [`webhooks`]: the webhook clocks every run watches besides those of its channel, and
//!   the receiver in the test process their ticks are POSTed to.
//! * [`leases`]: the lease clocks every run also watches, http clocks whose consumers in the
//!   test process lease their ticks through random running nodes and ack whatever they are
//!   handed, retrying an ack on other nodes when a node fails.
//! * [`nemesis`]: SIGKILL and SIGSTOP of leaders and followers, power losses (of the leader,
//!   a follower or every node: their disks drop every write not fsynced), full-cluster
//!   crashes, broker outages. Every run's nodes keep their data on power-loss filesystems
//!   ([`crate::power`]), and every run ends with a power loss of every node before its state
//!   is read.
//! * [`check`]: durability of acknowledged writes, linearizability of the registry history,
//!   the tick guarantees (nothing lost, repeats keep their id, paused clocks stay silent; for
//!   the webhook clocks, whose receiver no fault touches, every instant within the liveness
//!   bound of the last heal; for the lease clocks, every instant acked exactly once), and
//!   liveness after the last fault.
//!
//! Every random choice derives from the seed. A run's seed also picks its channel: even seeds
//! use RabbitMQ, odd ones http; every run also has its webhook clocks and its lease clocks. Timing is not deterministic — the system under test is real —
//! so a replay repeats the choices, not the interleaving.

pub mod check;
pub mod history;
pub mod leases;
pub mod nemesis;
pub mod rng;
pub mod run;
pub mod scripted;
pub mod time;
pub mod webhooks;
pub mod workload;

use std::fmt::Write as _;

pub use run::{RunReport, run_one};

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// How many runs.
    pub runs: u64,
    /// Seconds of workload and faults per run.
    pub seconds: u64,
    /// The seed of the first run; run `i` uses `seed + i`.
    pub seed: u64,
}

/// Runs every run of `options`, printing each run's line as it finishes.
pub async fn run(options: Options) -> Vec<RunReport> {
    let mut reports = Vec::new();
    for index in 0..options.runs {
        let seed = options.seed.wrapping_add(index);
        let report = run_one(seed, options.seconds).await;
        println!("{}", report_line(&report));
        if !report.violations.is_empty() {
            println!("  run with seed {seed} FAILED:");
            for violation in &report.violations {
                println!("  - [{}] {}", violation.checker, violation.detail);
            }
            println!(
                "  replay: scripts/chaos --runs 1 --seconds {} --seed {seed}",
                options.seconds
            );
        }
        reports.push(report);
    }
    reports
}

/// The table header. The columns from `expected` to `dup` count the ticks of the clocks of
/// the run's channel; `webhook e/d/l/d` the webhook clocks' expected, delivered, lost and
/// duplicated ticks; `lease e/a/l/r` the lease clocks' expected and acked instants, the lost
/// ones, and the ticks handed out again after their lease ran out.
pub fn header() -> String {
    format!(
        "{:>6} {:>7} {:>6} {:>5} {:>9} {:>9} {:>5} {:>6} {:>5} {:>8} {:>9} {:>15} {:>15}  {}",
        "seed",
        "channel",
        "faults",
        "ops",
        "expected",
        "delivered",
        "lost",
        "unseen",
        "dup",
        "gap_ms",
        "leader_ms",
        "webhook e/d/l/d",
        "lease e/a/l/r",
        "verdict"
    )
}

/// One run's row.
pub fn report_line(report: &RunReport) -> String {
    let ticks = &report.ticks;
    let hooks = &report.webhook_ticks;
    let leased = &report.lease_ticks;
    format!(
        "{:>6} {:>7} {:>6} {:>5} {:>9} {:>9} {:>5} {:>6} {:>5} {:>8} {:>9} {:>15} {:>15}  {}",
        report.seed,
        format!("{:?}", report.channel).to_lowercase(),
        report.faults.len(),
        report.operations,
        ticks.expected,
        ticks.delivered,
        ticks.lost,
        ticks.unobserved,
        ticks.duplicated,
        ticks.longest_gap_ms,
        report.max_time_to_leader_ms(),
        format!(
            "{}/{}/{}/{}",
            hooks.expected, hooks.delivered, hooks.lost, hooks.duplicated
        ),
        format!(
            "{}/{}/{}/{}",
            leased.expected, leased.acked, leased.lost, leased.redelivered
        ),
        if report.violations.is_empty() {
            "ok"
        } else {
            "FAILED"
        },
    )
}

/// The closing summary: the faults of every run and a totals line ("… lost N …", then the
/// webhook clocks' and the lease clocks' own figures).
pub fn summary(reports: &[RunReport]) -> String {
    let mut out = String::new();
    for report in reports {
        let faults: Vec<&str> = report
            .faults
            .iter()
            .map(|fault| fault.what.as_str())
            .collect();
        let loss = report.final_loss;
        let _ = writeln!(
            out,
            "seed {}: {}; then the final power loss of every node (dropped {} unsynced bytes in \
             {} files, {} directory entries)",
            report.seed,
            faults.join("; "),
            loss.bytes,
            loss.files,
            loss.entries
        );
    }
    let sum = |field: fn(&RunReport) -> u64| reports.iter().map(field).sum::<u64>();
    let _ = writeln!(
        out,
        "total: {} runs, {} faults, {} operations, ticks expected {}, delivered {}, lost {}, unobserved {}, duplicated {}, violations {}; webhook ticks expected {}, delivered {}, lost {}, duplicated {}; lease ticks expected {}, acked {}, coalesced {}, lost {}, acked twice {}, redelivered {}, acked by a lost attempt {}",
        reports.len(),
        sum(|r| r.faults.len() as u64),
        sum(|r| r.operations as u64),
        sum(|r| r.ticks.expected),
        sum(|r| r.ticks.delivered),
        sum(|r| r.ticks.lost),
        sum(|r| r.ticks.unobserved),
        sum(|r| r.ticks.duplicated),
        sum(|r| r.violations.len() as u64),
        sum(|r| r.webhook_ticks.expected),
        sum(|r| r.webhook_ticks.delivered),
        sum(|r| r.webhook_ticks.lost),
        sum(|r| r.webhook_ticks.duplicated),
        sum(|r| r.lease_ticks.expected),
        sum(|r| r.lease_ticks.acked),
        sum(|r| r.lease_ticks.coalesced),
        sum(|r| r.lease_ticks.lost),
        sum(|r| r.lease_ticks.acked_twice),
        sum(|r| r.lease_ticks.redelivered),
        sum(|r| r.lease_ticks.acked_by_lost_attempt),
    );
    out
}
