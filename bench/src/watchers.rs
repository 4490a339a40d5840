//! People and tools watching a cluster: dashboards holding `GET /api/v1/events` open and a
//! Prometheus scraping `/metrics`, on every node. Both read every clock of the registry; the
//! scale scenario measures the frequent clocks' lateness again while they watch, to show what
//! watching costs among a large population.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tickd_tests::TestCluster;
use tokio::task::JoinHandle;

/// Event streams held open on each node (a node serves at most 32).
const STREAMS_PER_NODE: usize = 2;
/// How often each node's `/metrics` is scraped: Prometheus's default is every 15 s, so this is
/// fifteen Prometheuses.
const SCRAPE_EVERY: Duration = Duration::from_secs(1);

/// The watchers of one cluster, until [`Watchers::stop`].
pub struct Watchers {
    tasks: Vec<JoinHandle<()>>,
    /// How many event streams were opened.
    streams: usize,
    /// Streams that received at least one chunk.
    streams_seen: Arc<AtomicUsize>,
    /// Chunks of event stream received, over all streams.
    events: Arc<AtomicUsize>,
    /// Scrapes answered 200, over all nodes.
    scrapes: Arc<AtomicUsize>,
    /// Scrapes that failed or were answered otherwise.
    failed_scrapes: Arc<AtomicUsize>,
}

impl Watchers {
    /// Starts watching every node of `cluster`.
    pub fn start(http: &reqwest::Client, cluster: &TestCluster) -> Watchers {
        let events = Arc::new(AtomicUsize::new(0));
        let streams_seen = Arc::new(AtomicUsize::new(0));
        let scrapes = Arc::new(AtomicUsize::new(0));
        let failed_scrapes = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        let mut streams = 0;
        for node in cluster.node_ids() {
            let api = cluster.api_url(node);
            for _ in 0..STREAMS_PER_NODE {
                streams += 1;
                let request = http
                    .get(format!("{api}/api/v1/events"))
                    .bearer_auth(cluster.token())
                    .timeout(Duration::from_secs(3_600));
                let (events, streams_seen) = (events.clone(), streams_seen.clone());
                tasks.push(tokio::spawn(async move {
                    let Ok(mut response) = request.send().await else {
                        return;
                    };
                    if !response.status().is_success() {
                        return;
                    }
                    let mut seen = false;
                    while let Ok(Some(_)) = response.chunk().await {
                        events.fetch_add(1, Ordering::Relaxed);
                        if !seen {
                            seen = true;
                            streams_seen.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
            let request = http
                .get(format!("{api}/metrics"))
                .bearer_auth(cluster.operator_token());
            let (scrapes, failed_scrapes) = (scrapes.clone(), failed_scrapes.clone());
            tasks.push(tokio::spawn(async move {
                let mut every = tokio::time::interval(SCRAPE_EVERY);
                loop {
                    every.tick().await;
                    let Some(request) = request.try_clone() else {
                        return;
                    };
                    let answered = match request.send().await {
                        Ok(response) if response.status().is_success() => {
                            response.bytes().await.is_ok()
                        }
                        _ => false,
                    };
                    let count = if answered { &scrapes } else { &failed_scrapes };
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        Watchers {
            streams,
            tasks,
            streams_seen,
            events,
            scrapes,
            failed_scrapes,
        }
    }

    /// Stops watching; an error if a stream received nothing or a scrape failed, since the
    /// figure measured meanwhile would then not be what it claims.
    pub fn stop(self) -> Result<(), String> {
        for task in &self.tasks {
            task.abort();
        }
        let events = self.events.load(Ordering::Relaxed);
        let seen = self.streams_seen.load(Ordering::Relaxed);
        let scrapes = self.scrapes.load(Ordering::Relaxed);
        let failed = self.failed_scrapes.load(Ordering::Relaxed);
        println!("  watched: {events} event chunks received, {scrapes} scrapes answered");
        if seen < self.streams {
            return Err(format!(
                "{} of {} event streams received nothing while they watched",
                self.streams - seen,
                self.streams
            ));
        }
        if scrapes == 0 || failed > 0 {
            return Err(format!(
                "{failed} of {} scrapes of /metrics failed while they watched",
                scrapes + failed
            ));
        }
        Ok(())
    }
}
