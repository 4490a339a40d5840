//! The node's metrics recorder: the one place that knows the Prometheus exporter.
//!
//! Every crate records through the `metrics` facade and describes its own metrics; this module
//! installs the recorder those records reach, registers every crate's descriptions, keeps the
//! recorder's upkeep going, and hands the API the closure that renders a scrape. The exporter
//! runs no listener of its own: `/metrics` is a route of the API, behind its token.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tickd_api::RenderMetrics;
use tickd_raft::StateHandle;
use tickd_storage::{DiskReserve, LogMemory};
use tokio::sync::watch;

/// Bucket bounds, in seconds, of every duration histogram, from a sub-millisecond fsync to a
/// tick published a minute late (the default catch-up window).
const SECONDS_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Bucket bounds of the write-batch histogram, in commands per proposal: 1 is an idle node,
/// the top bucket the batch limit.
const COMMANDS_BUCKETS: [f64; 9] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// How often the recorder drains histogram samples that no scrape has collected, so that
/// memory stays bounded when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the process-wide recorder and describes every metric of every crate.
pub fn install() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets(&SECONDS_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full(tickd_raft::telemetry::WRITE_BATCH.to_string()),
            &COMMANDS_BUCKETS,
        )?
        .install_recorder()?;
    tickd_raft::telemetry::describe();
    tickd_storage::telemetry::describe();
    tickd_engine::telemetry::describe();
    tickd_api::telemetry::describe();
    Ok(handle)
}

/// The closure behind `GET /metrics`: it measures the replicated state and the log's memory,
/// then renders every metric.
pub fn renderer(handle: PrometheusHandle, state: StateHandle, log: LogMemory) -> RenderMetrics {
    let gauges = tickd_raft::telemetry::StateGauges::default();
    Arc::new(move || {
        gauges.record(&state);
        log.record();
        handle.render()
    })
}

/// Runs the recorder's upkeep, and measures the data directory's free space, until `stop`
/// turns true.
pub async fn upkeep(handle: PrometheusHandle, disk: DiskReserve, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(UPKEEP_EVERY);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = ticks.tick() => {
                handle.run_upkeep();
                if let Err(error) = disk.free_bytes() {
                    tracing::warn!(%error, "cannot measure the data directory's free space");
                }
            }
        }
    }
}
