//! The black-box test harness of tickd.
//!
//! Tests here treat tickd the way an operator and a client do: they write a
//! `cluster.toml`, start real `tickd` processes (`tickd --config FILE --node
//! ID`), and talk to them over HTTP. Nothing of the node's code is linked in,
//! so what passes here passes for the shipped binary, RocksDB and all.
//!
//! The pieces:
//! - [`cluster`]: [`TestCluster`] starts N nodes in a temporary directory,
//!   waits until they are ready, and kills (SIGKILL), stops (SIGSTOP),
//!   resumes, terminates (SIGTERM), wipes and restarts them one by one.
//! - [`api`]: thin helpers for the HTTP API (`register`, `list`, `action`, …)
//!   that return status, headers and JSON body without judging them.
//! - [`wait`]: [`eventually`], the one way to wait for a state.
//! - [`ports`] and [`config`]: free loopback ports, and the `cluster.toml` writer.
//! - [`tools`]: the external tools some tests drive, or a failure naming how to install them.
//! - [`http`]: the one way a test builds an HTTP client.
//! - [`rig`]: the multi-host rig, each node in a network namespace of its own on a private
//!   bridge, with real partitions and a packet capture of the bridge.
//! - [`membership`]: membership changes through the API, checked.
//! - [`browser`]: a headless Chromium over WebDriver, for the dashboard.
//! - [`releases`]: earlier releases of tickd built from the repository's history, to upgrade
//!   a cluster from.
//! - [`webhook`]: a scripted webhook receiver, and the check of its deliveries' signatures
//!   with the Standard Webhooks project's own library.
//! - [`timing`]: the failover and election bounds every test waits by, derived from tickd's
//!   configuration.
//!
//! Three rules hold throughout:
//! - **Real processes.** Each node is a child process with its own data
//!   directory and log file (`node<ID>.log`, kept across restarts). A test
//!   that panics prints the tail of every log; a dropped cluster leaves no
//!   process behind.
//! - **Loopback only.** Every address is on 127.0.0.1, or on the private
//!   segment of a [`rig`] inside network namespaces the test made itself, and
//!   the HTTP client ignores proxy variables; no test sends a packet off the
//!   machine.
//! - **Every wait is bounded.** Start-up, leader election, health, SIGTERM
//!   and every request have a timeout, and a timeout panics with what was
//!   awaited and what was last seen, so a broken node fails a test instead of
//!   hanging the suite.
//!
//! The binary is `TICKD_BIN` if set, else `target/<profile>/tickd`, which
//! `cargo test --workspace` builds (see [`cluster::tickd_binary`]).
//!
//! All async functions need a Tokio runtime (`#[tokio::test]`).

pub mod api;
pub mod browser;
pub mod chaos;
pub mod cluster;
pub mod config;
pub mod gaps;
pub mod http;
pub mod leases;
pub mod local_names;
pub mod membership;
pub mod pki;
pub mod ports;
pub mod power;
pub mod process;
pub mod proxy;
pub mod rabbit;
pub mod releases;
pub mod rig;
pub mod skew;
pub mod timing;
pub mod tools;
pub mod wait;
pub mod webhook;

pub use cluster::{NodeId, NodeState, TestCluster, TestClusterBuilder};
pub use wait::eventually;

/// A name no other test or earlier run uses: RabbitMQ queues are durable and shared between
/// tests and runs, and a clock's queue is named after the clock.
pub fn unique_name(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    format!("{name}-{}-{nanos}", std::process::id())
}
