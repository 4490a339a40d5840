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

/// Starts a one-node cluster whose node is told `failpoints`, and returns its log once it has
/// exited on its own, non-zero.
async fn exit_log(failpoints: &str) -> (TestCluster, String) {
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
    let exit = cluster.last_exit(1).expect("the node exited");
    assert!(
        !exit.success(),
        "the node exited with {exit}, not a failure"
    );
    let log = cluster.log(1);
    (cluster, log)
}

#[tokio::test]
async fn an_engine_that_returns_takes_the_node_down_saying_so() {
    let (_cluster, log) = exit_log("engine-loop=return").await;
    assert!(
        log.contains("the `engine` task returned"),
        "the node did not name its dead task:\n{log}"
    );
}

#[tokio::test]
async fn an_engine_that_panics_takes_the_node_down_with_the_panic() {
    let (_cluster, log) = exit_log("engine-loop=panic(the engine broke)").await;
    assert!(
        log.contains("the `engine` task panicked: the engine broke"),
        "the node did not say how its task died:\n{log}"
    );
}

#[tokio::test]
async fn a_clock_monitor_that_returns_takes_the_node_down() {
    let (_cluster, log) = exit_log("clock-monitor=return").await;
    assert!(
        log.contains("the `clock monitor` task returned"),
        "the node did not name its dead task:\n{log}"
    );
}

#[tokio::test]
async fn an_api_listener_that_quits_takes_the_node_down() {
    let (_cluster, log) = exit_log("api-listener=return").await;
    assert!(
        log.contains("the `API listener` task returned"),
        "the node did not name its dead task:\n{log}"
    );
}
