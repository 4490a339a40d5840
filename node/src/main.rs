//! `tickd`: one node of a replicated clock service, and the admin commands that operate one.
//!
//! With no arguments it runs a single node on 127.0.0.1:9643 with its data in `./data`; with
//! `--config cluster.toml --node ID` it runs node ID of the cluster described in the file.
//! With a subcommand (`cluster`, `clocks`, `backup`, `restore`) it is an admin client of a
//! running cluster instead (see [`cli`]); `tickd certs` makes a cluster's TLS files
//! (see [`certs`]).

mod bootstrap;
mod broker;
mod certs;
mod cli;
mod config;
mod credentials;
mod listener;
mod log_throttle;
mod node;
mod ordinal;
mod supervisor;
mod telemetry;
mod tls;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use tracing_subscriber::filter::dynamic_filter_fn;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::config::{Environment, NodeConfig};

/// How long the process waits for blocking tasks (fsyncs, snapshot writes) once the node has
/// stopped, before it exits regardless.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// A replicated clock service: register a clock, receive its ticks, exactly once.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    /// Operate a running cluster, or make its certificates, instead of running a node.
    #[command(subcommand)]
    command: Option<cli::Command>,

    /// The cluster file (see the shipped cluster.toml). Without it, tickd runs a single node
    /// on 127.0.0.1:9643 with its data in ./data.
    #[arg(long, env = "TICKD_CONFIG")]
    config: Option<PathBuf>,

    /// Which node of the cluster file this process is. Without it, the host name's ordinal
    /// plus one, as a StatefulSet names its pods (tickd-2 runs node 3).
    #[arg(long, env = "TICKD_NODE", requires = "config")]
    node: Option<u64>,

    /// Log filter, in `tracing` syntax (for example `info` or `tickd=debug,openraft=info`).
    #[arg(long, env = "TICKD_LOG", default_value = "info,openraft=warn")]
    log: String,

    /// Write log lines as JSON objects.
    #[arg(long, env = "TICKD_LOG_JSON")]
    log_json: bool,
}

fn main() -> ExitCode {
    // Every TLS configuration tickd builds names ring explicitly; this makes it the default for
    // the rest too (reqwest is built without a provider of its own). Installing can only fail
    // when one is installed already, which is then as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut cli = Cli::parse();
    if let Some(command) = cli.command.take() {
        return cli::run(command);
    }
    // A node's files hold every http queue id (the capability to pop that queue's ticks), its
    // credentials and its log: whatever it creates, RocksDB's files included, is its user's
    // alone, as the Debian unit's `UMask=0077` makes it. The admin commands above keep the
    // modes they choose (a certificate is 0644).
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    init_logging(&cli);
    // The fault injection of the test suite: a debug build reads `FAILPOINTS` (for example
    // `engine-loop=panic`; tests/tests/supervision.rs). A release build never reads it, so its
    // fail points, compiled in by a workspace build, never fire.
    let _failpoints = cfg!(debug_assertions).then(fail::FailScenario::setup);
    let config = match (&cli.config, cli.node) {
        (Some(path), id) => node_id(id).and_then(|id| {
            NodeConfig::from_file(path, id, &Environment::read()).map_err(|error| error.to_string())
        }),
        (None, _) => Ok(NodeConfig::single_node()),
    };
    let result = config.and_then(|config| {
        let runtime = tokio::runtime::Runtime::new()
            .map_err(|error| format!("cannot start the async runtime: {error}"))?;
        let result = runtime.block_on(node::run(config));
        // A node leaving on a fault may have a blocking task stuck on its disk (an fsync
        // that never returns): exit anyway instead of waiting for it.
        runtime.shutdown_timeout(SHUTDOWN_GRACE);
        result.map_err(|error| error.to_string())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tickd: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The node id given, or else the one the host name's ordinal names ([`ordinal`]).
fn node_id(given: Option<u64>) -> Result<u64, String> {
    if let Some(id) = given {
        return Ok(id);
    }
    let host = ordinal::host_name();
    let id = ordinal::node_of_host(&host)?;
    tracing::info!(id, host, "node id from the host name's ordinal");
    Ok(id)
}

fn init_logging(cli: &Cli) {
    let filter = EnvFilter::try_new(&cli.log).unwrap_or_else(|error| {
        eprintln!(
            "tickd: ignoring the log filter {:?} ({error}); using `info`",
            cli.log
        );
        EnvFilter::new("info")
    });
    // openraft's repeated warnings, one line per call site per 10 s (see `log_throttle`);
    // dynamic, since a plain `filter_fn`'s answer is cached per call site.
    let throttle = log_throttle::Throttle::default();
    let throttled = dynamic_filter_fn(move |metadata, _| throttle.admits(metadata, Instant::now()));
    // Colours only on a terminal: in a file or a journal the escape codes are noise that
    // breaks every grep for `key=value`.
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    if cli.log_json {
        registry.with(lines.json().with_filter(throttled)).init();
    } else {
        registry.with(lines.with_filter(throttled)).init();
    }
}
