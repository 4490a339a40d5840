//! The lease clocks of a chaos run (SPEC §2 "lease and ack"): whatever the run's channel, it
//! also registers [`LEASE_CLOCKS`] `every.1.seconds` http clocks and runs, for each, a
//! consumer in the test process that leases the clock's queue through random running nodes and
//! acks whatever it is handed.
//!
//! The nemesis faults the nodes, never these consumers, so the leases checker
//! ([`check::leases`](crate::chaos::check::leases)) holds them to "every instant acked exactly
//! once": the leader killed with leases open loses no leased tick, and an ack that landed is
//! neither undone nor landed twice. A consumer works one round at a time — a lease, then one
//! ack of every receipt it was handed, retried on other nodes until one answers — so nobody
//! else holds those receipts while it acks them: when a retried ack finds one `unknown` after
//! an attempt whose answer was lost, that attempt acked it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::chaos::history::{AckOutcome, LeasedTick, WatchedClock};
use crate::chaos::rng::Rng;
use crate::chaos::time::{now_ms, parse_rfc3339_ms};
use crate::leases::post;
use crate::{NodeId, TestCluster};

/// Lease clocks each run watches.
pub const LEASE_CLOCKS: usize = 2;
/// Ticks one lease takes at most.
const LEASE_MAX: u64 = 10;
/// How long a lease hides its ticks: short, so that a tick whose lease answer a fault lost
/// comes back within the liveness bound of the heal, before the consumers stop.
const VISIBILITY_MS: u64 = 5_000;
/// How long a consumer retries one ack: past any fault of the nemesis (a leader within
/// [`LEADER_BOUND`](crate::chaos::nemesis::LEADER_BOUND), then the hold).
const ACK_RETRY_FOR: Duration = Duration::from_secs(30);
/// The pause after a lease that handed out nothing or got no answer, and between the attempts
/// of an ack.
const IDLE: Duration = Duration::from_millis(200);

/// The body that registers lease clock `name`.
pub fn registration(name: &str) -> Value {
    json!({
        "name": name,
        "schedule": "every.1.seconds",
        "channel": { "type": "http" },
    })
}

/// A registered lease clock.
#[derive(Debug, Clone)]
pub struct LeaseClock {
    /// The clock as the checkers watch it.
    pub watched: WatchedClock,
    /// Its queue's base URL, `…/api/v1/queues/{id}`.
    queue: String,
}

impl LeaseClock {
    /// The clock whose registration answered `created` at `registered_ms`; `None` when the
    /// answer names no pop URL to lease beside.
    pub fn registered(created: &Value, registered_ms: u64) -> Option<LeaseClock> {
        let pop = created["channel"]["details"]["url"].as_str()?;
        reqwest::Url::parse(pop).ok()?;
        Some(LeaseClock {
            watched: WatchedClock::every_second(created, registered_ms),
            queue: pop.strip_suffix("/pop")?.to_owned(),
        })
    }
}

/// Runs `work` with a consumer leasing each of `clocks` beside it; once `work` is done, lets
/// each consumer finish its round (its ack answered), then returns what `work` returned and
/// every tick the consumers were handed.
pub async fn consume_during<T>(
    cluster: &TestCluster,
    clocks: &[LeaseClock],
    rng: &mut Rng,
    work: impl Future<Output = T>,
) -> (T, Vec<LeasedTick>) {
    let stop = AtomicBool::new(false);
    let consumers: Vec<_> = clocks
        .iter()
        .map(|clock| LeaseConsumer::new(cluster, clock, rng.fork()).run(&stop))
        .collect();
    let (output, handed) = tokio::join!(
        async {
            let output = work.await;
            stop.store(true, Ordering::Relaxed);
            output
        },
        futures::future::join_all(consumers),
    );
    (output, handed.concat())
}

/// The consumer of one lease clock.
struct LeaseConsumer<'a> {
    cluster: &'a TestCluster,
    clock: &'a LeaseClock,
    rng: Rng,
    /// Every tick it was handed, with what its ack came to.
    handed: Vec<LeasedTick>,
}

impl<'a> LeaseConsumer<'a> {
    fn new(cluster: &'a TestCluster, clock: &'a LeaseClock, rng: Rng) -> LeaseConsumer<'a> {
        LeaseConsumer {
            cluster,
            clock,
            rng,
            handed: Vec::new(),
        }
    }

    /// Leases and acks, a round at a time, until `stop` is set.
    async fn run(mut self, stop: &AtomicBool) -> Vec<LeasedTick> {
        while !stop.load(Ordering::Relaxed) {
            self.round().await;
        }
        self.handed
    }

    /// One lease through a random running node, then the ack of everything it handed out. A
    /// lease whose answer is lost may have handed out ticks: they come back, one delivery
    /// more, once its visibility has run out.
    async fn round(&mut self) {
        let Some(node) = self.running_node() else {
            tokio::time::sleep(IDLE).await;
            return;
        };
        let body = json!({ "max": LEASE_MAX, "visibility_ms": VISIBILITY_MS });
        let ticks = match post(self.cluster, node, &self.clock.queue, "lease", &body).await {
            Ok((StatusCode::OK, _, Value::Array(ticks))) if !ticks.is_empty() => ticks,
            _ => {
                tokio::time::sleep(IDLE).await;
                return;
            }
        };
        let leased_ms = now_ms();
        let receipts: Vec<&str> = ticks
            .iter()
            .map(|tick| tick["receipt"].as_str().unwrap_or_default())
            .collect();
        let acks = self.ack_anywhere(node, &receipts).await;
        for (tick, ack) in ticks.iter().zip(acks) {
            let handed = leased_tick(&self.clock.watched.id, tick, leased_ms, ack);
            self.handed.push(handed);
        }
    }

    /// Acks `receipts` through `node`, then through random running nodes, until one answers
    /// 200 or [`ACK_RETRY_FOR`] has passed; what became of each receipt.
    async fn ack_anywhere(&mut self, node: NodeId, receipts: &[&str]) -> Vec<AckOutcome> {
        let body = json!({ "receipts": receipts });
        let started = Instant::now();
        let mut node = Some(node);
        let mut answer_lost = false;
        while started.elapsed() < ACK_RETRY_FOR {
            if let Some(via) = node {
                match post(self.cluster, via, &self.clock.queue, "ack", &body).await {
                    Ok((StatusCode::OK, _, answer)) => {
                        return ack_outcomes(receipts, &answer, answer_lost);
                    }
                    // A 503 (a failover, a forwarding deadline) may have committed too.
                    Ok(_) | Err(_) => answer_lost = true,
                }
            }
            tokio::time::sleep(IDLE).await;
            node = self.running_node();
        }
        vec![AckOutcome::Unanswered; receipts.len()]
    }

    /// A random node the nemesis has not killed or stopped, if any.
    fn running_node(&mut self) -> Option<NodeId> {
        let running = self.cluster.running_ids();
        (!running.is_empty()).then(|| *self.rng.pick(&running))
    }
}

/// What the ack `answer` (`{"acked": n, "refused": [{"receipt", "reason"}]}`) says of each of
/// `receipts`. After an attempt whose answer was lost, `unknown` means that attempt acked it.
/// An answer of another shape, or whose count disagrees with its refusals, acked nothing the
/// consumer can tell: each receipt is refused with the answer as the reason.
fn ack_outcomes(receipts: &[&str], answer: &Value, answer_lost: bool) -> Vec<AckOutcome> {
    let refusals: Option<Vec<(&str, &str)>> = answer["refused"].as_array().map(|refused| {
        refused
            .iter()
            .map(|refusal| {
                let field = |name: &str| refusal[name].as_str().unwrap_or_default();
                (field("receipt"), field("reason"))
            })
            .collect()
    });
    let consistent = |refusals: &Vec<(&str, &str)>| {
        let acked = receipts.len().checked_sub(refusals.len());
        answer["acked"].as_u64() == acked.and_then(|n| u64::try_from(n).ok())
    };
    let Some(refusals) = refusals.filter(consistent) else {
        let unreadable = AckOutcome::Refused(format!("unreadable answer {answer}"));
        return vec![unreadable; receipts.len()];
    };
    receipts
        .iter()
        .map(
            |receipt| match refusals.iter().find(|(r, _)| r == receipt) {
                None => AckOutcome::Acked,
                Some((_, "unknown")) if answer_lost => AckOutcome::AckedByLostAttempt,
                Some((_, reason)) => AckOutcome::Refused((*reason).to_owned()),
            },
        )
        .collect()
}

/// The record of `tick`, a message a lease of `clock`'s queue handed out at `leased_ms`. A
/// missing field is recorded empty or 0, for the checker to judge.
fn leased_tick(clock: &str, tick: &Value, leased_ms: u64, ack: AckOutcome) -> LeasedTick {
    let text = |field: &str| tick[field].as_str().unwrap_or_default().to_owned();
    let number = |field: &str| tick[field].as_u64().unwrap_or_default();
    LeasedTick {
        clock: clock.to_owned(),
        tick_id: text("tick_id"),
        scheduled_ms: tick["scheduled_at"]
            .as_str()
            .and_then(parse_rfc3339_ms)
            .unwrap_or(0),
        deliveries: number("deliveries"),
        skipped: number("skipped"),
        receipt: text("receipt"),
        leased_ms,
        ack,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ack_answer_tells_each_receipt_apart() {
        let answer = json!({"acked": 1, "refused": [
            {"receipt": "b.1", "reason": "expired"},
            {"receipt": "c.1", "reason": "unknown"},
        ]});
        let receipts = ["a.1", "b.1", "c.1"];
        let refused = |reason: &str| AckOutcome::Refused(reason.to_owned());
        assert_eq!(
            ack_outcomes(&receipts, &answer, false),
            [AckOutcome::Acked, refused("expired"), refused("unknown")]
        );
        assert_eq!(
            ack_outcomes(&receipts, &answer, true),
            [
                AckOutcome::Acked,
                refused("expired"),
                AckOutcome::AckedByLostAttempt
            ]
        );
        // A count that disagrees with the refusals, or no refusals at all: nothing is known.
        for odd in [json!({"acked": 2, "refused": []}), json!({"error": "x"})] {
            assert!(
                ack_outcomes(&receipts, &odd, false)
                    .iter()
                    .all(|outcome| matches!(outcome, AckOutcome::Refused(why) if why.contains("unreadable"))),
                "{odd}"
            );
        }
    }
}
