//! `tickd-sim` (run by `scripts/simulate`): runs seeds of the simulated cluster and reports
//! what the checkers found.
//!
//! `--seeds N` runs seeds `--first` .. `--first + N` and ends with `N seeds, V violations`;
//! `--seed S` runs one and prints `trace <hash>`, and with `--trace` the trace itself. A seed
//! with a violation prints the command that replays it. The exit status is 1 if any seed broke
//! a guarantee.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use clap::Parser;
use tickd_sim::{Options, SeedReport, run_seed};

/// Deterministic simulation of a tickd cluster.
#[derive(Debug, Parser)]
#[command(name = "tickd-sim")]
struct Args {
    /// Run this many seeds, from --first on.
    #[arg(long, default_value_t = 1, conflicts_with = "seed")]
    seeds: u64,
    /// The first seed of --seeds.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// Run this one seed and print its trace's hash.
    #[arg(long)]
    seed: Option<u64>,
    /// With --seed: print the trace, one event per line.
    #[arg(long, requires = "seed")]
    trace: bool,
    /// Simulated seconds of faults and workload per seed (at least 30).
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Seeds run at once, each on a thread of its own (a seed's run never depends on it);
    /// by default one per core.
    #[arg(long)]
    jobs: Option<usize>,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    nodes: u64,
}

fn replay(report: &SeedReport, args: &Args) -> String {
    format!(
        "scripts/simulate --seed {} --seconds {} --nodes {}",
        report.seed, args.seconds, args.nodes
    )
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = Options {
        seconds: args.seconds,
        nodes: args.nodes,
        keep_trace: args.trace,
        ..Options::default()
    };
    let seeds: Vec<u64> = match args.seed {
        Some(seed) => vec![seed],
        None => (args.first..args.first.saturating_add(args.seeds)).collect(),
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .clamp(1, seeds.len().max(1));
    let started = Instant::now();
    let reports = match run_all(&seeds, &options, jobs) {
        Ok(reports) => reports,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(2);
        }
    };
    let mut totals = Totals::default();
    for report in &reports {
        totals.add(report);
        if args.seed.is_some() {
            for line in &report.trace {
                println!("{line}");
            }
            println!("trace {}", report.trace_hash);
        }
        if !report.violations.is_empty() {
            println!(
                "seed {}: {} violation(s); replay: {}",
                report.seed,
                report.violations.len(),
                replay(report, &args)
            );
            for violation in &report.violations {
                println!("  {}: {}", violation.checker, violation.detail);
            }
        }
    }
    let real = started.elapsed().as_secs_f64();
    let simulated = totals.simulated_ms as f64 / 1000.0;
    println!(
        "simulated {:.2} cluster-hours ({simulated:.0} s) in {real:.1} s: {:.0} simulated seconds per real second",
        simulated / 3600.0,
        simulated / real.max(1e-9)
    );
    println!(
        "faults {}, operations {}, ticks checked {} ({} delivered), messages {} ({} lost), fsyncs {} ({} writes lost to crashes)",
        totals.faults,
        totals.operations,
        totals.ticks_expected,
        totals.ticks_delivered,
        totals.messages.0,
        totals.messages.1,
        totals.disk.0,
        totals.disk.1
    );
    println!("{} seeds, {} violations", seeds.len(), totals.violations);
    if totals.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs `seeds` on `jobs` threads, each taking the next seed not yet taken; the reports come
/// back in seed order.
fn run_all(seeds: &[u64], options: &Options, jobs: usize) -> Result<Vec<SeedReport>, String> {
    let next = AtomicUsize::new(0);
    let reports = Mutex::new(Vec::with_capacity(seeds.len()));
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                while let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let report = run_seed(seed, options)
                        .map_err(|why| format!("seed {seed}: the simulation could not run: {why}"));
                    reports
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(report);
                }
            });
        }
    });
    let mut reports = reports
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    reports.sort_by_key(|report| report.seed);
    Ok(reports)
}

/// Figures summed over the seeds.
#[derive(Default)]
struct Totals {
    simulated_ms: u64,
    faults: u64,
    operations: u64,
    ticks_expected: u64,
    ticks_delivered: u64,
    messages: (u64, u64),
    disk: (u64, u64),
    violations: u64,
}

impl Totals {
    fn add(&mut self, report: &SeedReport) {
        let sum = |a: u64, b: u64| a.saturating_add(b);
        self.simulated_ms = sum(self.simulated_ms, report.simulated_ms);
        self.faults = sum(self.faults, report.faults);
        self.operations = sum(self.operations, report.operations);
        self.ticks_expected = sum(self.ticks_expected, report.ticks_expected);
        self.ticks_delivered = sum(self.ticks_delivered, report.ticks_delivered);
        self.messages = (
            sum(self.messages.0, report.messages.0),
            sum(self.messages.1, report.messages.1),
        );
        self.disk = (
            sum(self.disk.0, report.disk.0),
            sum(self.disk.1, report.disk.1),
        );
        self.violations = sum(
            self.violations,
            u64::try_from(report.violations.len()).unwrap_or(u64::MAX),
        );
    }
}
