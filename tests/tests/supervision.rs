//! Crash-only supervision (node/src/supervisor.rs): a task of a real node that returns or
//! panics (the engine's loop, the clock monitor, the API listener) makes the node exit
//! non-zero with the task's name and cause in its log, instead of going on without it while
//! its health says UP.
//!
//! The tasks are broken with fail points (`FAILPOINTS`, the `fail` crate), which the debug
//! `tickd` binary the suite builds reads (`cargo test --workspace`; tests/Cargo.toml turns the
//! points on). A binary that ignores `FAILPOINTS` (a release build, or one built with `-p
//! tickd`) fails these tests: the node never exits.

use std::time::Duration;

use tickd_tests::api::{HEALTH_PATH, try_send};
use tickd_tests::{TestCluster, eventually};

/// How long a node may take to notice a dead task and exit, start-up included: the engine's
/// loop runs once the node leads (a second or two after start), the clock monitor within its
/// first round, the listener at its first connection.
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts a one-node cluster whose node is told `failpoints`, waits until it has exited on
/// its own, non-zero, and checks that its log says `said`.
async fn dies_saying(failpoints: &str, said: &str) {
    let cluster = TestCluster::builder()
        .nodes(1)
        .rabbit_uri(None)
        .env("FAILPOINTS", failpoints)
        .wait_ready(false)
        .start()
        .await;
    eventually(
        "the node to exit (is the binary built with fail points, by `cargo test --workspace`?)",
        EXIT_TIMEOUT,
        Duration::from_millis(100),
        || async {
            if !cluster.is_running(1) {
                return Some(());
            }
            // Connections keep coming, as a load balancer's would: the listener's fail point
            // acts on the first one.
            let health = cluster
                .client()
                .get(format!("{}{HEALTH_PATH}", cluster.api_url(1)));
            let _ = try_send(health).await;
            None
        },
    )
    .await;
    let log = cluster.failure_log(1);
    assert!(
        log.contains(said),
        "the node did not say \"{said}\" as it died ({failpoints}):\n{log}"
    );
}

#[tokio::test]
async fn an_engine_that_returns_takes_the_node_down_saying_so() {
    dies_saying("engine-loop=return", "the `engine` task returned").await;
}

#[tokio::test]
async fn an_engine_that_panics_takes_the_node_down_with_the_panic() {
    let said = "the `engine` task panicked: the engine broke";
    dies_saying("engine-loop=panic(the engine broke)", said).await;
}

#[tokio::test]
async fn a_clock_monitor_that_returns_takes_the_node_down() {
    dies_saying("clock-monitor=return", "the `clock monitor` task returned").await;
}

#[tokio::test]
async fn an_api_listener_that_quits_takes_the_node_down() {
    dies_saying("api-listener=return", "the `API listener` task returned").await;
}
