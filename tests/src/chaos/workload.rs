//! The clients of a chaos run: registry clients that register, pause, resume, read and list
//! clocks through random nodes, and consumers that receive the ticks of watched clocks (the
//! webhook clocks' receiver is in [`crate::chaos::webhooks`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::chaos::history::{Delivery, Event, Op, OpResult, UnansweredPop};
use crate::chaos::rng::Rng;
use crate::chaos::time::{now_ms, parse_rfc3339_ms};
use crate::rabbit::ResilientConsumer;
use crate::{NodeId, TestCluster};

/// How long a client waits for an answer: past the cluster's 5 s forwarding deadline, so a
/// timeout means the node itself is stuck.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(7);

/// The schedule of the registry clients' clocks: they never tick, so they never expire and
/// the durability checker can demand every one of them at the end.
pub const REGISTRY_SCHEDULE: &str = "@never";

/// Shared, append-only records of a run.
#[derive(Clone, Default)]
pub struct Records {
    events: Arc<Mutex<Vec<Event>>>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    unanswered_pops: Arc<Mutex<Vec<UnansweredPop>>>,
}

impl Records {
    fn push_event(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    /// Records a tick message received by a consumer.
    pub fn push_delivery(&self, message: &Value) {
        self.push_delivery_received_at(message, now_ms());
    }

    /// Records a tick message a consumer received at `received_ms` (ms since the epoch): for
    /// a consumer that stamps its deliveries itself, as the webhook receiver does.
    pub fn push_delivery_received_at(&self, message: &Value, received_ms: u64) {
        let delivery = Delivery {
            clock: message["clock"].as_str().unwrap_or_default().to_string(),
            tick_id: message["tick_id"].as_str().unwrap_or_default().to_string(),
            scheduled_ms: message["scheduled_at"]
                .as_str()
                .and_then(parse_rfc3339_ms)
                .unwrap_or(0),
            manual: message["manual"].as_bool().unwrap_or(false),
            received_ms,
        };
        self.deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(delivery);
    }

    /// Records a pop of `clock`'s queue that got no answer.
    fn push_unanswered_pop(&self, pop: UnansweredPop) {
        self.unanswered_pops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pop);
    }

    /// Every unanswered pop so far.
    pub fn unanswered_pops(&self) -> Vec<UnansweredPop> {
        self.unanswered_pops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every operation so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every delivery so far.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Sends one operation to `node` and classifies the answer.
pub async fn perform(cluster: &TestCluster, node: NodeId, op: &Op) -> OpResult {
    let (method, path, body) = match op {
        Op::Register { name } => (
            Method::POST,
            "/api/v1/clocks".to_string(),
            Some(json!({ "name": name, "schedule": REGISTRY_SCHEDULE })),
        ),
        Op::Pause { id } => (Method::PUT, format!("/api/v1/clocks/{id}/pause"), None),
        Op::Resume { id } => (Method::PUT, format!("/api/v1/clocks/{id}/resume"), None),
        Op::Get { id } => (Method::GET, format!("/api/v1/clocks/{id}"), None),
        Op::ListByName { name } => {
            let query: String = url_encode(name);
            (Method::GET, format!("/api/v1/clocks?name={query}"), None)
        }
    };
    let mut request = crate::api::authed(cluster, method, node, &path).timeout(CLIENT_TIMEOUT);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let reply = match crate::api::try_send(request).await {
        Ok(reply) => reply,
        Err(error) => return OpResult::Indeterminate(crate::api::describe(&error)),
    };
    let (status, _, body) = reply;
    let status_of = |clock: &Value| clock["status"].as_str().unwrap_or_default().to_string();
    match (op, status) {
        (Op::Register { .. }, StatusCode::CREATED) => OpResult::Registered {
            id: body["id"].as_str().unwrap_or_default().to_string(),
            status: status_of(&body),
        },
        (Op::ListByName { .. }, StatusCode::OK) => OpResult::Listed(
            body.as_array()
                .map(|clocks| {
                    clocks
                        .iter()
                        .map(|clock| {
                            (
                                clock["id"].as_str().unwrap_or_default().to_string(),
                                status_of(clock),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
        ),
        (_, StatusCode::OK) => OpResult::Status(status_of(&body)),
        (_, StatusCode::NOT_FOUND) => OpResult::NotFound,
        (_, other) => OpResult::Indeterminate(format!("HTTP {other}: {body}")),
    }
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// One registry client: random operations on a small pool of names until `until_ms`, which
/// its caller may move (a scripted fault ends the workload once it has healed); the operation
/// in flight then still completes and is recorded.
pub async fn registry_client(
    cluster: &TestCluster,
    client: usize,
    names: &[String],
    ids: &Mutex<BTreeMap<String, String>>,
    mut rng: Rng,
    until_ms: &AtomicU64,
    records: &Records,
) {
    let nodes = cluster.node_ids();
    while now_ms() < until_ms.load(Ordering::Relaxed) {
        let name = rng.pick(names).clone();
        let known = ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&name)
            .cloned();
        let op = match (rng.below(100), known) {
            (0..30, _) | (_, None) => Op::Register { name: name.clone() },
            (30..45, Some(id)) => Op::Pause { id },
            (45..60, Some(id)) => Op::Resume { id },
            (60..80, Some(id)) => Op::Get { id },
            _ => Op::ListByName { name: name.clone() },
        };
        let node = *rng.pick(&nodes);
        let start_ms = now_ms();
        let result = perform(cluster, node, &op).await;
        let end_ms = now_ms();
        if let OpResult::Registered { id, .. } = &result {
            ids.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name, id.clone());
        }
        records.push_event(Event {
            client,
            node,
            op,
            start_ms,
            end_ms,
            result,
        });
        tokio::time::sleep(Duration::from_millis(20 + rng.below(80))).await;
    }
}

/// Receives a watched clock's ticks until dropped or aborted.
pub enum Consumer {
    /// A RabbitMQ consumer that reconnects across broker outages.
    Rabbit(ResilientConsumer),
    /// An http poller that asks a random node each time.
    Http(tokio::task::JoinHandle<()>),
}

impl Consumer {
    /// Starts consuming the clock registered with `created` (the POST response body). A
    /// RabbitMQ consumer connects to `broker_uri` when given (the broker itself, past the gate
    /// that holds tickd back), else to the URI the channel names.
    pub fn start(
        cluster: &TestCluster,
        created: &Value,
        broker_uri: Option<&str>,
        mut rng: Rng,
        records: Records,
    ) -> Consumer {
        let details = &created["channel"]["details"];
        if created["channel"]["type"] == "rabbit" {
            let uri = broker_uri.unwrap_or_else(|| details["uri"].as_str().unwrap_or_default());
            let queue = details["queue"].as_str().unwrap_or_default();
            return Consumer::Rabbit(ResilientConsumer::start_with(uri, queue, move |message| {
                records.push_delivery(message)
            }));
        }
        let url = details["url"].as_str().unwrap_or_default().to_string();
        let clock = created["id"].as_str().unwrap_or_default().to_string();
        let nodes: Vec<(NodeId, String)> = cluster
            .node_ids()
            .into_iter()
            .map(|node| (node, crate::api::on_node(cluster, node, &url)))
            .collect();
        let client = cluster.client().clone();
        Consumer::Http(tokio::spawn(async move {
            loop {
                let (_, url) = rng.pick(&nodes).clone();
                let start_ms = now_ms();
                let reply = client
                    .get(format!("{url}?wait=1"))
                    .timeout(CLIENT_TIMEOUT)
                    .send()
                    .await;
                let ticks = match reply {
                    Ok(reply) => match reply.json::<Value>().await {
                        Ok(Value::Array(ticks)) => Some(ticks),
                        _ => None,
                    },
                    Err(_) => None,
                };
                match ticks {
                    Some(ticks) => ticks.iter().for_each(|tick| records.push_delivery(tick)),
                    None => {
                        records.push_unanswered_pop(UnansweredPop {
                            clock: clock.clone(),
                            start_ms,
                            end_ms: now_ms(),
                        });
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }))
    }

    /// The RabbitMQ consumer, for a broker restart to wait for; `None` for an http poller.
    pub fn rabbit(&self) -> Option<&ResilientConsumer> {
        match self {
            Consumer::Rabbit(consumer) => Some(consumer),
            Consumer::Http(_) => None,
        }
    }

    /// Stops consuming.
    pub fn stop(self) {
        match self {
            Consumer::Rabbit(consumer) => drop(consumer),
            Consumer::Http(task) => task.abort(),
        }
    }
}
