//! The pollers of a simulated run's http clock: each pops the clock's queue through a node
//! drawn from the seed, as the API's pop does (`api/src/routes/queues.rs`), and records what
//! it got for the tick checker and for the rule only pops have: each tick reaches exactly one
//! poller ([`popped_twice`]).
//!
//! A pop follows production's path: the node stamps it with the earliest the majority's time
//! may be (`ClusterClock::earliest_now_ms`), proposes `Command::Pop` through the write path,
//! and a pop whose answer was lost leaves its request id with that node, whose next pop of the
//! queue proposes it again, so the ledger answers it with the batch it took
//! (`api/src/unanswered_pops.rs`; a crash forgets it, as the process's memory is lost).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tickd_domain::{ClockId, Command, Outcome, QueueId};
use tickd_raft::NodeId;
use tickd_tests::chaos::history::{Delivery, UnansweredPop, Violation};
use tickd_tests::chaos::rng::Rng;
use tokio::time::Instant;

use crate::client;
use crate::log_store::lock;
use crate::workload::draw_request;
use crate::world::World;

/// The name the exactly-once rule of pops reports under.
pub const CHECKER: &str = "pop-once";

/// What the pollers of one queue share.
#[derive(Default)]
pub struct Polled {
    /// The ticks the pops returned, as the tick checker reads deliveries.
    pub deliveries: Mutex<Vec<Delivery>>,
    /// The pops that got no answer: they may have taken ticks nobody saw.
    pub unanswered: Mutex<Vec<UnansweredPop>>,
    /// Each node incarnation's unanswered pop, by (node, incarnation): its request id.
    remembered: Mutex<BTreeMap<(NodeId, u64), String>>,
}

/// One poller of an http clock's queue.
pub struct Poller {
    /// Its number, in the trace.
    pub number: usize,
    /// Its choices.
    pub rng: Rng,
    /// The world.
    pub world: Arc<World>,
    /// How many nodes there are (ids 1..=nodes).
    pub nodes: u64,
    /// The clock whose queue it pops.
    pub clock: ClockId,
    /// The queue.
    pub queue: QueueId,
    /// What it shares with the other pollers.
    pub polled: Arc<Polled>,
    /// When it stops.
    pub until: Instant,
}

impl Poller {
    /// Pops once through `node`; a node that is down refuses the connection, which pops
    /// nothing and is not recorded.
    async fn pop(&mut self, node: NodeId) {
        let Some(running) = self.world.node(node) else {
            return;
        };
        let incarnation = (node, running.incarnation);
        let remembered = lock(&self.polled.remembered).remove(&incarnation);
        let request = match remembered {
            Some(request) => request,
            None => draw_request(&mut self.rng),
        };
        let start_ms = self.world.true_ms();
        let command = Command::Pop {
            queue: self.queue.clone(),
            now_ms: running.clock.earliest_now_ms(),
            request: request.clone(),
        };
        let answer = client::write(&self.world, node, command).await;
        let received_ms = self.world.true_ms();
        let shown = match &answer {
            Ok(Outcome::Popped(ticks)) => ticks
                .iter()
                .map(|tick| tick.id.to_string())
                .collect::<Vec<_>>()
                .join(","),
            other => format!("{other:?}"),
        };
        self.world.record(format_args!(
            "poller {} node {node}: pop {request} -> [{shown}]",
            self.number
        ));
        match answer {
            Ok(Outcome::Popped(ticks)) => {
                let mut deliveries = lock(&self.polled.deliveries);
                deliveries.extend(ticks.into_iter().map(|tick| Delivery {
                    clock: tick.clock.to_string(),
                    tick_id: tick.id.to_string(),
                    scheduled_ms: tick.due_at_ms,
                    manual: tick.manual,
                    received_ms,
                }));
            }
            Ok(_) | Err(_) => {
                if self.world.is_running(node, incarnation.1) {
                    lock(&self.polled.remembered).insert(incarnation, request);
                }
                lock(&self.polled.unanswered).push(UnansweredPop {
                    clock: self.clock.to_string(),
                    start_ms,
                    end_ms: received_ms,
                });
            }
        }
    }

    /// Pops until `until`, every 50 to 400 ms.
    pub async fn run(mut self) {
        while Instant::now() < self.until {
            let node = 1 + self.rng.below(self.nodes);
            self.pop(node).await;
            tokio::time::sleep(Duration::from_millis(50 + self.rng.below(350))).await;
        }
    }
}

/// The ticks returned more than once, by two pops or twice by one (a tick filed twice): each
/// reached a poller again, which an http queue never allows (a pop is answered only after the
/// write that removed its ticks committed, and a tick is filed once).
pub fn popped_twice(deliveries: &[Delivery]) -> Vec<Violation> {
    let mut pops: HashMap<&str, Vec<u64>> = HashMap::new();
    for delivery in deliveries {
        pops.entry(&delivery.tick_id)
            .or_default()
            .push(delivery.received_ms);
    }
    let mut twice: Vec<(&str, Vec<u64>)> = pops
        .into_iter()
        .filter(|(_, received)| received.len() > 1)
        .collect();
    twice.sort_unstable();
    twice
        .into_iter()
        .map(|(tick, received)| Violation {
            checker: CHECKER,
            detail: format!(
                "tick {tick} was returned {} times, received at {received:?}",
                received.len()
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(tick_id: &str, received_ms: u64) -> Delivery {
        Delivery {
            clock: "c".to_string(),
            tick_id: tick_id.to_string(),
            scheduled_ms: 1_000,
            manual: false,
            received_ms,
        }
    }

    #[test]
    fn a_tick_returned_twice_is_a_violation_and_distinct_ticks_are_not() {
        let once = [delivery("c-1000", 5), delivery("c-2000", 6)];
        assert!(popped_twice(&once).is_empty());
        let twice = [
            delivery("c-1000", 5),
            delivery("c-2000", 6),
            delivery("c-1000", 9),
        ];
        let found = popped_twice(&twice);
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("c-1000"), "{}", found[0].detail);
        assert!(found[0].detail.contains("[5, 9]"), "{}", found[0].detail);
    }
}
