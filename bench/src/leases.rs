//! Scenario: lease and ack beside pop, on one 3-node http cluster.
//!
//! At-least-once costs a second write per tick: the lease hands the tick out, the ack removes
//! it, where a pop does both at once. This measures what that costs a consumer, as round trips
//! per second of `CONSUMERS` concurrent consumers spread over the nodes, each round taking one
//! tick: a lease of one tick then its ack, or a pop.
//!
//! - **1 000 queues**, one waiting tick each: every round takes the tick of its own queue, so
//!   a pop takes exactly one tick too, and the two figures compare round for round.
//! - **One queue** of 1 000 waiting ticks, leased one at a time by all the consumers at once:
//!   the contention of competing consumers on one queue. A pop takes every due tick (up to
//!   100) at once, so its figure on one queue is given in ticks per second, beside the
//!   lease's.
//!
//! The ticks are manual ticks of `@never` clocks, filed before each phase, so that the clocks'
//! own schedule neither adds ticks nor competes for the leader during the measurement.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::Serialize;
use serde_json::{Value, json};
use tickd_tests::TestCluster;

use crate::consumer::now_ms;
use crate::load::{LoadResult, drive};

/// Concurrent consumers.
pub const CONSUMERS: usize = 32;
/// Ticks taken per phase.
const TICKS: usize = 1_000;
/// Concurrent requests that file the manual ticks.
const FILERS: usize = 64;
/// The most pops one phase sends before it gives up on taking its ticks.
const MAX_POPS: usize = 100 * TICKS;

/// One queue layout's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LeasePhase {
    /// Queues the ticks waited in.
    pub queues: usize,
    /// Lease-and-ack rounds, one tick each.
    pub lease_ack: LoadResult,
    /// Pops that took ticks, per second: one tick each with one tick per queue; up to 100 on
    /// one queue.
    pub pops_per_s: f64,
    /// Ticks the pops took per second (the same as `pops_per_s` with one tick per queue).
    pub pop_ticks_per_s: f64,
}

/// The scenario's result.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseRow {
    /// 1 000 queues of one tick.
    pub many: LeasePhase,
    /// One queue of 1 000 ticks.
    pub one: LeasePhase,
}

impl LeaseRow {
    /// Lease-and-ack rounds per second over pops per second, on 1 000 queues.
    pub fn ratio_many(&self) -> f64 {
        crate::stats::ratio(self.many.lease_ack.per_s, self.many.pops_per_s)
    }
}

/// An `@never` http clock: its id and its queue's base URL (`…/api/v1/queues/{id}`).
#[derive(Clone)]
struct Queue {
    clock: String,
    url: String,
}

/// Runs both layouts on `cluster`.
pub async fn run(http: &reqwest::Client, cluster: &TestCluster) -> Result<LeaseRow, String> {
    let apis: Vec<String> = cluster
        .node_ids()
        .into_iter()
        .map(|id| cluster.api_url(id))
        .collect();
    let token = cluster.token().to_string();
    let prefix = format!("lease-{}", now_ms() as u64);
    let mut queues = Vec::with_capacity(TICKS);
    for index in 0..TICKS {
        let api = &apis[index % apis.len()];
        queues.push(register(http, api, &token, &format!("{prefix}-{index}")).await?);
    }
    let queues = Arc::new(queues);
    let many = phase(http, &apis, &token, queues.clone()).await?;
    let one = phase(http, &apis, &token, Arc::new(vec![queues[0].clone()])).await?;
    Ok(LeaseRow { many, one })
}

/// Fills the queues with [`TICKS`] ticks, takes them by lease and ack, fills them again and
/// pops them.
async fn phase(
    http: &reqwest::Client,
    apis: &[String],
    token: &str,
    queues: Arc<Vec<Queue>>,
) -> Result<LeasePhase, String> {
    fill(http, apis, token, &queues).await?;
    let lease_ack = {
        let (http, queues) = (http.clone(), queues.clone());
        drive(CONSUMERS, TICKS, move |index| {
            let (http, queues) = (http.clone(), queues.clone());
            async move {
                // A consumer's unmeasured first round (see `drive`) must take no tick.
                if index >= TICKS {
                    return Ok(());
                }
                let queue = &queues[index % queues.len()];
                lease_and_ack(&http, &queue.url).await
            }
        })
        .await
    };
    check("lease and ack", &lease_ack)?;
    fill(http, apis, token, &queues).await?;
    let (pops, took) = pop_all(http, &queues).await?;
    Ok(LeasePhase {
        queues: queues.len(),
        lease_ack,
        pops_per_s: pops as f64 / took,
        pop_ticks_per_s: TICKS as f64 / took,
    })
}

/// Pops the queues with [`CONSUMERS`] concurrent consumers, each taking the next queue in turn,
/// until they have taken [`TICKS`] ticks; the pops that took ticks, and the seconds it took.
/// (A pop that finds its queue empty answers from its node's state without a write; on one
/// queue most of them do, so only those that took ticks count as rounds.)
async fn pop_all(http: &reqwest::Client, queues: &Arc<Vec<Queue>>) -> Result<(usize, f64), String> {
    let next = Arc::new(AtomicUsize::new(0));
    let taken = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (http, queues) = (http.clone(), queues.clone());
            let (next, taken) = (next.clone(), taken.clone());
            tokio::spawn(async move {
                let mut rounds = 0usize;
                while taken.load(Ordering::Relaxed) < TICKS {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= MAX_POPS {
                        return Err(format!("{MAX_POPS} pops took fewer than {TICKS} ticks"));
                    }
                    let ticks = pop(&http, &queues[index % queues.len()].url).await?;
                    if ticks > 0 {
                        rounds += 1;
                        taken.fetch_add(ticks, Ordering::Relaxed);
                    }
                }
                Ok(rounds)
            })
        })
        .collect();
    let mut pops = 0;
    for consumer in consumers {
        pops += consumer
            .await
            .map_err(|error| format!("a consumer panicked: {error}"))??;
    }
    let took = started.elapsed().as_secs_f64();
    let taken = taken.load(Ordering::Relaxed);
    if taken != TICKS {
        return Err(format!("the pops took {taken} ticks, not {TICKS}"));
    }
    Ok((pops, took))
}

/// Fails a phase whose rounds failed.
fn check(what: &str, load: &LoadResult) -> Result<(), String> {
    if load.failed > 0 {
        return Err(format!("{} of the {what} rounds failed", load.failed));
    }
    Ok(())
}

/// Registers an `@never` http clock through `api`.
async fn register(
    http: &reqwest::Client,
    api: &str,
    token: &str,
    name: &str,
) -> Result<Queue, String> {
    let body = json!({"name": name, "schedule": "@never"});
    let created: Value = send_json(
        http.post(format!("{api}/api/v1/clocks"))
            .bearer_auth(token)
            .json(&body),
    )
    .await?;
    let clock = created["id"].as_str().ok_or("no clock id")?.to_string();
    let pop = created["channel"]["details"]["url"]
        .as_str()
        .ok_or_else(|| format!("no http channel: {created}"))?;
    let url = pop
        .strip_suffix("/pop")
        .ok_or_else(|| format!("not a pop URL: {pop}"))?
        .to_string();
    Ok(Queue { clock, url })
}

/// Files [`TICKS`] manual ticks, spread evenly over `queues`.
async fn fill(
    http: &reqwest::Client,
    apis: &[String],
    token: &str,
    queues: &Arc<Vec<Queue>>,
) -> Result<(), String> {
    let (http, apis, token, queues) = (
        http.clone(),
        apis.to_vec(),
        token.to_string(),
        queues.clone(),
    );
    let filed = drive(FILERS, TICKS, move |index| {
        let (http, token, queues) = (http.clone(), token.clone(), queues.clone());
        let api = apis[index % apis.len()].clone();
        async move {
            if index >= TICKS {
                return Ok(());
            }
            let clock = &queues[index % queues.len()].clock;
            let url = format!("{api}/api/v1/clocks/{clock}/tick");
            send_json(http.put(url).bearer_auth(&token)).await.map(drop)
        }
    })
    .await;
    check("manual tick", &filed)
}

/// Leases one tick of the queue at `url` and acks it.
async fn lease_and_ack(http: &reqwest::Client, url: &str) -> Result<(), String> {
    let leased: Value = send_json(
        http.post(format!("{url}/lease"))
            .json(&json!({"max": 1, "visibility_ms": 60_000})),
    )
    .await?;
    let receipt = match leased.as_array().map(Vec::as_slice) {
        Some([tick]) => tick["receipt"].as_str().ok_or("a tick without a receipt")?,
        _ => return Err(format!("a lease of one tick got {leased}")),
    };
    let acked: Value = send_json(
        http.post(format!("{url}/ack"))
            .json(&json!({ "receipts": [receipt] })),
    )
    .await?;
    if acked["acked"] != 1 {
        return Err(format!("an ack of one receipt answered {acked}"));
    }
    Ok(())
}

/// Pops the queue at `url`; how many ticks it took.
async fn pop(http: &reqwest::Client, url: &str) -> Result<usize, String> {
    let popped: Value = send_json(http.get(format!("{url}/pop"))).await?;
    popped
        .as_array()
        .map(Vec::len)
        .ok_or_else(|| format!("a pop answered {popped}"))
}

/// Sends a request that must answer 2xx with JSON.
async fn send_json(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body: Value = response.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {body}"));
    }
    Ok(body)
}
