//! The clocks a tick scenario runs: their names and schedules, registering them with tickd,
//! and the RabbitMQ queues that go with them.

use futures::StreamExt;
use futures::stream;
use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties};
use tickd_domain::{Channel, Schedule};
use tickd_tests::TestCluster;

use crate::client::Registration;
use crate::load::{LoadResult, drive};

/// Concurrent clients that register a population, and concurrent queue operations.
const CONCURRENCY: usize = 64;

/// How many queues one channel deletes, one after the other, while the other channels delete
/// theirs.
const DELETE_CHUNK: usize = 500;

/// How often a clock's registration is tried before the scenario gives up.
const ATTEMPTS: usize = 5;
/// The pause between two attempts.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// A set of clocks: `(name, schedule)` pairs with distinct names.
#[derive(Debug, Clone)]
pub struct Population {
    clocks: Vec<(String, String)>,
}

impl Population {
    /// `count` clocks named `<prefix>-<i>`, cycling through `schedules`.
    pub fn new(prefix: &str, count: usize, schedules: &[&str]) -> Population {
        let clocks = (0..count)
            .map(|i| {
                (
                    format!("{prefix}-{i}"),
                    schedules[i % schedules.len()].to_string(),
                )
            })
            .collect();
        Population { clocks }
    }

    /// The population in consecutive parts of at most `size` clocks.
    pub fn parts(&self, size: usize) -> Vec<Population> {
        self.clocks
            .chunks(size.max(1))
            .map(|clocks| Population {
                clocks: clocks.to_vec(),
            })
            .collect()
    }

    /// The name of one clock of the population, to read it back by.
    pub fn last_name(&self) -> &str {
        self.clocks.last().map_or("", |(name, _)| name.as_str())
    }

    /// The clocks' RabbitMQ queue names, as tickd names them.
    pub fn queues(&self) -> Result<Vec<String>, String> {
        self.clocks
            .iter()
            .map(|(name, literal)| {
                let schedule = Schedule::parse(literal).map_err(|e| format!("{literal}: {e}"))?;
                Ok(Channel::rabbit_queue_name(name, &schedule))
            })
            .collect()
    }

    /// The population as the bare ticker reads it: `name<TAB>schedule` lines.
    pub fn to_lines(&self) -> String {
        self.clocks
            .iter()
            .map(|(name, schedule)| format!("{name}\t{schedule}\n"))
            .collect()
    }

    /// Registers every clock with `cluster`, spreading the requests over its nodes.
    pub async fn register(
        &self,
        http: &reqwest::Client,
        cluster: &TestCluster,
    ) -> Result<LoadResult, String> {
        self.register_to(http, cluster, None).await
    }

    /// Registers every clock with `cluster` as a webhook clock whose ticks go to `url`.
    pub async fn register_webhooks(
        &self,
        http: &reqwest::Client,
        cluster: &TestCluster,
        url: &str,
    ) -> Result<LoadResult, String> {
        self.register_to(http, cluster, Some(url.to_string())).await
    }

    /// Registers every clock, with the cluster's default channel or, given a receiver URL, as
    /// a webhook clock.
    async fn register_to(
        &self,
        http: &reqwest::Client,
        cluster: &TestCluster,
        webhook: Option<String>,
    ) -> Result<LoadResult, String> {
        let urls: Vec<String> = cluster
            .node_ids()
            .into_iter()
            .map(|id| cluster.api_url(id))
            .collect();
        let (http, token, clocks) = (
            http.clone(),
            cluster.token().to_string(),
            self.clocks.clone(),
        );
        let load = drive(CONCURRENCY, clocks.len(), move |index| {
            let (http, token, webhook) = (http.clone(), token.clone(), webhook.clone());
            let api = urls[index % urls.len()].clone();
            // Past the population: a client's unmeasured first request, which only opens its
            // connection (see `drive`).
            let clock = clocks.get(index).cloned();
            async move {
                let Some((name, schedule)) = clock else {
                    let health = http.get(format!("{api}/mgmt/health")).send().await;
                    return health.map(drop).map_err(|e| format!("{api}: {e}"));
                };
                let registration = Registration {
                    api: &api,
                    token: &token,
                    name: &name,
                    schedule: &schedule,
                    webhook: webhook.as_deref(),
                };
                // Registering is idempotent (for a webhook clock too: the same URL joins the
                // same clock), so a 503 during an election is simply retried, as a client
                // would.
                let mut outcome = registration.send(&http).await.map(drop);
                for _ in 1..ATTEMPTS {
                    if outcome.is_ok() {
                        break;
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                    outcome = registration.send(&http).await.map(drop);
                }
                outcome
            }
        })
        .await;
        if load.failed > 0 {
            return Err(format!(
                "{} of {} registrations failed",
                load.failed,
                self.clocks.len()
            ));
        }
        Ok(load)
    }
}

/// Declares `queues` the way tickd does (durable, expiring `ttl_ms` after their last
/// consumer leaves): the bare ticker's queues, so both systems deliver into the same kind.
pub async fn declare_queues(uri: &str, queues: &[String], ttl_ms: u64) -> Result<(), String> {
    let connection = connect(uri).await?;
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| format!("a channel: {e}"))?;
    let mut arguments = FieldTable::default();
    arguments.insert(
        ShortString::from("x-expires"),
        AMQPValue::LongLongInt(i64::try_from(ttl_ms).unwrap_or(i64::MAX)),
    );
    let results: Vec<Result<(), String>> = stream::iter(queues)
        .map(|queue| {
            let (channel, arguments) = (channel.clone(), arguments.clone());
            async move {
                let options = QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                };
                channel
                    .queue_declare(queue.as_str().into(), options, arguments)
                    .await
                    .map(drop)
                    .map_err(|e| format!("declaring {queue}: {e}"))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let _ = connection.close(200, "declared".into()).await;
    results.into_iter().collect()
}

/// Deletes `queues` from the broker, so that a run leaves nothing behind on a shared broker.
/// Best effort: a queue that is already gone is fine.
pub async fn delete_queues(uri: &str, queues: &[String]) {
    let Ok(connection) = connect(uri).await else {
        return;
    };
    // A delete is synchronous on its channel, and a failed one closes it: the chunks go side by
    // side, each on a channel of its own.
    let chunks = queues.chunks(DELETE_CHUNK).map(|chunk| {
        let connection = &connection;
        async move {
            let Ok(channel) = connection.create_channel().await else {
                return;
            };
            for queue in chunk {
                let deleted = channel
                    .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                    .await;
                if deleted.is_err() {
                    return;
                }
            }
        }
    });
    futures::future::join_all(chunks).await;
    let _ = connection.close(200, "cleaned up".into()).await;
}

async fn connect(uri: &str) -> Result<Connection, String> {
    Connection::connect(uri, ConnectionProperties::default())
        .await
        .map_err(|e| format!("cannot connect to RabbitMQ: {e}"))
}
