//! A closed-loop load driver: `clients` concurrent clients share `total` requests, each
//! client sending its next request as soon as the previous one is answered.
//!
//! tickd and etcd are driven by this same function with the same client library, so the
//! figures differ only by the server.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::stats::Percentiles;

/// What one load level measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadResult {
    /// Concurrent clients.
    pub clients: usize,
    /// Requests answered with success.
    pub succeeded: usize,
    /// Requests that failed (the first few reasons are printed).
    pub failed: usize,
    /// Successful requests per second of wall time.
    pub per_s: f64,
    /// Latency of successful requests.
    pub latency: Percentiles,
}

/// Sends `total` requests from `clients` concurrent clients; `request(i)` sends request `i`
/// and says whether it succeeded.
///
/// Each client first sends one request that is neither timed nor counted (index `total +
/// client`, so it names nothing a measured request names): it opens the client's connection,
/// a TCP and for HTTPS a TLS handshake, so the figures are those of a warm connection pool, as
/// a long-running client has, for every system alike.
pub async fn drive<F, Fut>(clients: usize, total: usize, request: F) -> LoadResult
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let request = Arc::new(request);
    let warm = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let next = next.clone();
            let request = request.clone();
            let warm = warm.clone();
            tokio::spawn(async move {
                let _ = request(total + client).await;
                warm.wait().await;
                let mut latencies = Vec::new();
                let mut failures = Vec::new();
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= total {
                        break;
                    }
                    let sent = Instant::now();
                    match request(index).await {
                        Ok(()) => latencies.push(sent.elapsed()),
                        Err(reason) => failures.push(reason),
                    }
                }
                (latencies, failures)
            })
        })
        .collect();
    warm.wait().await;
    let started = Instant::now();
    let mut latencies: Vec<Duration> = Vec::with_capacity(total);
    let mut failures = Vec::new();
    for task in tasks {
        match task.await {
            Ok((mut ok, mut failed)) => {
                latencies.append(&mut ok);
                failures.append(&mut failed);
            }
            Err(error) => failures.push(format!("a client task failed: {error}")),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    for reason in failures.iter().take(3) {
        eprintln!("  request failed: {reason}");
    }
    LoadResult {
        clients,
        succeeded: latencies.len(),
        failed: failures.len(),
        per_s: latencies.len() as f64 / elapsed.max(f64::EPSILON),
        latency: Percentiles::of(&latencies),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_request_is_sent_once_and_failures_are_counted() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        let result = drive(4, 100, move |index| {
            let sink = sink.clone();
            async move {
                sink.lock().map_err(|e| e.to_string())?.push(index);
                if index % 10 == 0 {
                    Err(format!("request {index} refused"))
                } else {
                    Ok(())
                }
            }
        })
        .await;
        let mut indices = seen.lock().expect("not poisoned").clone();
        indices.sort_unstable();
        // The measured requests, then one warm-up request per client.
        assert_eq!(indices, (0..104).collect::<Vec<_>>());
        assert_eq!((result.succeeded, result.failed), (90, 10));
        assert_eq!(result.latency.count, 90);
        assert!(result.per_s > 0.0);
    }
}
