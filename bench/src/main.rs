//! `bench`: tickd measured side by side with etcd and with a bare ticker, in one run.
//!
//! Run it through `scripts/bench [--quick]`, which builds everything in release mode first.
//! Six scenarios run in order, each on fresh release-built 3-node clusters on 127.0.0.1:
//! registrations ([`register`], plain and with TLS, beside etcd), tick lateness
//! ([`lateness`], beside the bare ticker), failover ([`failover`], plain and with TLS),
//! footprint ([`footprint`]), scale ([`scale`], a large population at rest beside frequent
//! clocks, and the same cluster empty), webhook lateness ([`webhook`], beside the bare
//! sender) and lease-and-ack round trips ([`leases`], beside pops). The run prints a table per
//! scenario and the headline figures, writes them all to `target/bench/latest.json` and the
//! plots beside it ([`plots`]), and exits non-zero when a floor of the issue does not hold.

mod client;
mod consumer;
mod cpu;
mod etcd;
mod failover;
mod footprint;
mod lateness;
mod leases;
mod load;
mod node_metrics;
mod plots;
mod population;
mod receiver;
mod register;
mod report;
mod scale;
mod stats;
mod watchers;
mod webhook;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tickd_tests::TestCluster;
use tickd_tests::rabbit::BROKER_URI;

use crate::report::Report;

/// Benchmarks tickd against etcd and a bare ticker on this machine.
#[derive(Debug, Parser)]
struct Args {
    /// The reduced profile (under 20 minutes on two cores).
    #[arg(long)]
    quick: bool,
    /// Only these scenarios (register, lateness, failover, footprint, scale, webhook, lease);
    /// all by default.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Where to write the results.
    #[arg(long, default_value = "target/bench/latest.json")]
    out: PathBuf,
    /// The RabbitMQ broker the tick scenarios publish through.
    #[arg(long, default_value = BROKER_URI)]
    rabbit: String,
}

/// The sizes of a run.
struct Profile {
    name: &'static str,
    client_levels: &'static [usize],
    requests_per_level: usize,
    lateness_clocks: &'static [usize],
    lateness_window: Duration,
    /// Rounds of the headline size ([`report::HEADLINE_CLOCKS`]), tickd and the bare ticker
    /// alternating; the other sizes are measured once.
    lateness_rounds: usize,
    failover_clocks: usize,
    failover_kills: usize,
    footprint_clocks: usize,
    scale_clocks: usize,
    scale_frequent_clocks: usize,
    /// Webhook clocks, all posting to one receiver (measured over `lateness_window`).
    webhook_clocks: usize,
}

const QUICK: Profile = Profile {
    name: "quick",
    client_levels: &[1, 16, 64, 256],
    requests_per_level: 2_000,
    lateness_clocks: &[1_000, 10_000],
    lateness_window: Duration::from_secs(20),
    lateness_rounds: 3,
    failover_clocks: 1_000,
    failover_kills: 5,
    footprint_clocks: 100_000,
    scale_clocks: 200_000,
    scale_frequent_clocks: 1_000,
    webhook_clocks: 1_000,
};

const FULL: Profile = Profile {
    name: "full",
    client_levels: &[1, 16, 64, 256],
    requests_per_level: 10_000,
    lateness_clocks: &[1_000, 10_000, 100_000],
    lateness_window: Duration::from_secs(40),
    lateness_rounds: 3,
    failover_clocks: 1_000,
    failover_kills: 20,
    footprint_clocks: 100_000,
    scale_clocks: 1_000_000,
    scale_frequent_clocks: 1_000,
    webhook_clocks: 10_000,
};

/// How long the footprint scenario's unpolled clocks live before they count as abandoned.
const FOOTPRINT_CLOCK_TTL_MS: u64 = 30 * 60 * 1_000;
/// Log entries between the footprint cluster's snapshots. Registrations share entries under
/// load (group commit), so 100 000 of them make a few thousand entries, not 100 000: the
/// leader must snapshot often enough to have built one of nearly the whole registry.
const FOOTPRINT_SNAPSHOT_EVERY: u64 = 1_000;

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("bench: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(report) if report.failed.is_empty() && report.floors_missed.is_empty() => {
            ExitCode::SUCCESS
        }
        Ok(report) if report.failed.is_empty() => ExitCode::from(2),
        Ok(_) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("bench: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<Report, String> {
    let profile = if args.quick { &QUICK } else { &FULL };
    let wanted = |scenario: &str| args.only.is_empty() || args.only.iter().any(|s| s == scenario);
    let http = client::http_client(None)?;
    let bare_ticker = beside_this_binary("bare-ticker")?;
    let bare_sender = beside_this_binary("bare-sender")?;
    let mut report = Report {
        profile: profile.name.to_string(),
        ..Report::default()
    };

    if wanted("register") {
        println!(
            "== registrations through Raft, plain and with TLS, beside etcd ({} requests per level)",
            profile.requests_per_level
        );
        let plain = loaded_cluster().start().await;
        let tls = loaded_cluster().tls().start().await;
        let rows = registrations(&http, &plain, &tls, profile).await;
        if let Some(rows) = report.record("register", rows) {
            report.registrations = rows;
        }
    }
    if wanted("lateness") {
        println!(
            "== tick lateness, beside a bare ticker ({:?} windows)",
            profile.lateness_window
        );
        for &clocks in profile.lateness_clocks {
            let rounds = if clocks == report::HEADLINE_CLOCKS {
                profile.lateness_rounds
            } else {
                1
            };
            for round in 1..=rounds {
                let cluster = rabbit_cluster(&args.rabbit).start().await;
                let window = profile.lateness_window;
                let (ticker, rabbit) = (&bare_ticker, &args.rabbit);
                let row =
                    lateness::run(&http, &cluster, rabbit, ticker, (clocks, round), window).await;
                if let Some(row) = report.record(&format!("lateness {clocks} round {round}"), row) {
                    report.lateness.push(row);
                }
            }
        }
    }
    if wanted("failover") {
        let (clocks, kills) = (profile.failover_clocks, profile.failover_kills);
        println!("== failover: {kills} leader kills, {clocks} clocks");
        let cluster = rabbit_cluster(&args.rabbit).start().await;
        let failover = failover::run(&http, &cluster, &args.rabbit, clocks, kills).await;
        drop(cluster);
        report.failover = report.record("failover", failover);

        println!("== failover with TLS: {kills} leader kills, {clocks} clocks");
        let cluster = rabbit_cluster(&args.rabbit).tls().start().await;
        let failover = match client::http_client(cluster.pki()) {
            Ok(https) => failover::run(&https, &cluster, &args.rabbit, clocks, kills).await,
            Err(error) => Err(error),
        };
        report.failover_tls = report.record("failover with TLS", failover);
    }
    if wanted("footprint") {
        println!("== footprint: {} clocks", profile.footprint_clocks);
        // Nobody polls the footprint clocks: they must outlive the scenario.
        let cluster = TestCluster::builder()
            .nodes(3)
            .rabbit_uri(None)
            .clock_ttl_ms(FOOTPRINT_CLOCK_TTL_MS)
            .snapshot_every(FOOTPRINT_SNAPSHOT_EVERY)
            .start()
            .await;
        let footprint = footprint::run(&http, &cluster, profile.footprint_clocks).await;
        if let Ok(footprint) = &footprint {
            println!("  {footprint:?}");
        }
        report.footprint = report.record("footprint", footprint);
    }
    if wanted("scale") {
        let (clocks, frequent) = (profile.scale_clocks, profile.scale_frequent_clocks);
        println!("== scale: {clocks} hourly clocks beside {frequent} polled every.1.seconds");
        // The benchmark's one process holds a long poll per frequent clock: the caps on
        // connections per address and on polls per node are raised above that, and the
        // clock limit (1 000 000 by default) above the population.
        let cluster = TestCluster::builder()
            .nodes(3)
            .rabbit_uri(None)
            .max_clocks(u64::try_from(2 * (clocks + frequent)).unwrap_or(u64::MAX))
            .clock_ttl_ms(FOOTPRINT_CLOCK_TTL_MS)
            .snapshot_every(FOOTPRINT_SNAPSHOT_EVERY)
            .setting("api_max_connections", "4096")
            .setting("api_max_connections_per_address", "2048")
            .setting("max_long_polls", "2048")
            .start()
            .await;
        let scale = scale::run(&http, &cluster, clocks, frequent).await;
        report.scale = report.record("scale", scale);
    }
    if wanted("webhook") {
        let (clocks, window) = (profile.webhook_clocks, profile.lateness_window);
        println!("== webhook lateness, beside a bare sender ({clocks} clocks, {window:?} windows)");
        // The receiver is on loopback, which tickd refuses to post to unless told otherwise.
        let cluster = loaded_cluster()
            .setting("webhook_allow_private", "true")
            .start()
            .await;
        let row = webhook::run(&http, &cluster, &bare_sender, clocks, window).await;
        report.webhook = report.record("webhook", row);
    }
    if wanted("lease") {
        println!(
            "== lease and ack beside pop ({} consumers; 1 000 queues, then one)",
            leases::CONSUMERS
        );
        let cluster = loaded_cluster().start().await;
        let row = leases::run(&http, &cluster).await;
        if let Ok(row) = &row {
            for phase in [&row.many, &row.one] {
                println!(
                    "  {} queue(s): lease+ack {:.0}/s (p50 {:.1} ms, p99 {:.1} ms); pops {:.0}/s, \
                     {:.0} ticks/s",
                    phase.queues,
                    phase.lease_ack.per_s,
                    phase.lease_ack.latency.p50_ms,
                    phase.lease_ack.latency.p99_ms,
                    phase.pops_per_s,
                    phase.pop_ticks_per_s
                );
            }
        }
        report.lease = report.record("lease", row);
    }

    report.finished_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    report.conclude();
    report.print();
    write(&args.out, &report)?;
    println!("results written to {}", args.out.display());
    let beside = args.out.parent().unwrap_or(std::path::Path::new("."));
    for plot in plots::draw(&report, beside)? {
        println!("plot drawn: {}", plot.display());
    }
    Ok(report)
}

/// A 3-node http cluster for the registration load: the benchmark's one process stands in for
/// many client machines, so the per-address connection cap (128 by default, against a
/// hostile client) is raised above the widest level, as the cap on all connections is.
fn loaded_cluster() -> tickd_tests::TestClusterBuilder {
    TestCluster::builder()
        .nodes(3)
        .rabbit_uri(None)
        .setting("api_max_connections", "4096")
        .setting("api_max_connections_per_address", "2048")
}

/// The registration scenario: both tickd clusters and etcd, level by level.
async fn registrations(
    http: &reqwest::Client,
    plain: &TestCluster,
    tls: &TestCluster,
    profile: &Profile,
) -> Result<Vec<register::RegisterRow>, String> {
    let https = client::http_client(tls.pki())?;
    let etcd = etcd::EtcdCluster::start(3, http).await?;
    let tickds = [
        register::Tickd {
            system: register::PLAIN,
            cluster: plain,
            http,
        },
        register::Tickd {
            system: register::TLS,
            cluster: tls,
            http: &https,
        },
    ];
    let (levels, requests) = (profile.client_levels, profile.requests_per_level);
    register::run(http, &tickds, &etcd, levels, requests).await
}

/// A 3-node cluster that delivers through `rabbit`, with room for every clock of a run.
fn rabbit_cluster(rabbit: &str) -> tickd_tests::TestClusterBuilder {
    TestCluster::builder()
        .nodes(3)
        .rabbit_uri(Some(rabbit.to_string()))
        .clock_ttl_ms(lateness::QUEUE_TTL_MS)
}

fn write(path: &std::path::Path, report: &Report) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    std::fs::write(path, json + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A binary built beside this one (`target/release/`).
fn beside_this_binary(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the path of this binary: {e}"))?;
    let path = exe.with_file_name(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing; run the benchmarks through scripts/bench",
            path.display()
        ))
    }
}
