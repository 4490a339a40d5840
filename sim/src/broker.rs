//! The simulated broker, behind the engine's `Publisher` seam: it takes a leader's ticks,
//! hands each to its consumer (recorded as a [`Delivery`] for the tick checker) and confirms it
//! after a delay, unless its weather says otherwise: a stalled broker confirms late, a
//! refusing one takes nothing, and now and then a confirmation is lost (the channel closed
//! before it came), so the tick is published again under its id.
//!
//! Every publish is also judged on the spot, by two rules the chaos suite cannot see from
//! outside: a leader that publishes while another node leads in a later term has outlived its
//! lease, which the engine's lease forbids; and a node that publishes a tick whose `Confirm` it
//! has already applied found the tick filed again, which the ledger's watermark forbids (a tick
//! is redelivered under its id only when its confirmation never committed, SPEC §7).

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use openraft::ServerState;
use tickd_engine::Publisher;
use tickd_engine::decisions::Outgoing;
use tickd_engine::publisher::{PublishOutcome, Refused, Settlement};
use tickd_raft::NodeId;
use tickd_tests::chaos::history::{Delivery, Violation};
use tickd_tests::chaos::rng::Rng;

use crate::log_store::lock;
use crate::world::World;

/// The broker's faults in force.
#[derive(Debug, Clone, Copy, Default)]
pub struct BrokerWeather {
    /// Every publish is refused (the broker is unreachable).
    pub refusing: bool,
    /// Confirmations come this much later.
    pub stall_ms: u64,
}

/// What the broker saw.
pub struct Broker {
    rng: Rng,
    /// Its faults in force.
    pub weather: BrokerWeather,
    /// Every tick a consumer received.
    pub deliveries: Vec<Delivery>,
    /// Publishes by a leader whose term had passed: each breaks the lease rule.
    pub deposed: Vec<Violation>,
    /// Ticks published again by a node that had applied their confirmation.
    pub republished: Vec<Violation>,
}

impl Broker {
    /// A broker whose delays are drawn from `rng`.
    pub fn new(rng: Rng) -> Self {
        Broker {
            rng,
            weather: BrokerWeather::default(),
            deliveries: Vec::new(),
            deposed: Vec::new(),
            republished: Vec::new(),
        }
    }
}

/// One leadership's publisher: the node and term it publishes for.
pub struct SimPublisher {
    /// The world the broker is in.
    pub world: Arc<World>,
    /// The publishing leader.
    pub node: NodeId,
    /// Its term.
    pub term: u64,
}

impl SimPublisher {
    /// The last entry the publishing node applied.
    fn applied_index(&self) -> u64 {
        self.world.node(self.node).map_or(0, |running| {
            running.state.read().last_applied.map_or(0, |id| id.index)
        })
    }

    /// A later term's leader, if one leads now.
    fn successor(&self) -> Option<(NodeId, u64)> {
        lock(&self.world.running)
            .iter()
            .filter(|(id, _)| **id != self.node)
            .find_map(|(id, running)| {
                let metrics = running.raft.metrics();
                let metrics = metrics.borrow();
                (metrics.state == ServerState::Leader && metrics.current_term > self.term)
                    .then_some((*id, metrics.current_term))
            })
    }
}

impl Publisher for SimPublisher {
    fn publish<'a>(
        &'a self,
        ticks: &'a [Outgoing],
    ) -> BoxFuture<'a, Result<Vec<Settlement>, Refused>> {
        async move {
            let received_ms = self.world.true_ms();
            let successor = self.successor();
            let mut broker = lock(&self.world.broker);
            if broker.weather.refusing {
                return Err(Refused("the broker refuses connections".to_string()));
            }
            if let Some((leader, term)) = successor {
                broker.deposed.push(Violation {
                    checker: "lease",
                    detail: format!(
                        "node {} published {} tick(s) in term {} at {received_ms} while node \
                         {leader} led in term {term}",
                        self.node,
                        ticks.len(),
                        self.term
                    ),
                });
            }
            let applied = self.applied_index();
            {
                let confirmed = lock(&self.world.confirmed);
                for outgoing in ticks {
                    let id = outgoing.tick.id.to_string();
                    if let Some(&index) = confirmed.get(&id)
                        && applied >= index
                    {
                        broker.republished.push(Violation {
                            checker: "exactly-once",
                            detail: format!(
                                "node {} published tick {id} in term {} at {received_ms}, after \
                                 applying the Confirm (entry {index}) that took it out of the \
                                 outbox: it was filed again",
                                self.node, self.term
                            ),
                        });
                    }
                }
            }
            let stall = broker.weather.stall_ms;
            let mut settlements = Vec::with_capacity(ticks.len());
            for outgoing in ticks {
                broker.deliveries.push(Delivery {
                    clock: outgoing.tick.clock.to_string(),
                    tick_id: outgoing.tick.id.to_string(),
                    scheduled_ms: outgoing.tick.due_at_ms,
                    manual: outgoing.tick.manual,
                    received_ms,
                });
                let after = Duration::from_millis(1 + broker.rng.below(5) + stall);
                let lost = broker.rng.below(100) == 0;
                settlements.push(
                    async move {
                        tokio::time::sleep(after).await;
                        if lost {
                            PublishOutcome::Failed("the channel closed before the confirm".into())
                        } else {
                            PublishOutcome::Delivered { after }
                        }
                    }
                    .boxed(),
                );
            }
            drop(broker);
            self.world.record(format_args!(
                "publish node {} term {} ticks {}",
                self.node,
                self.term,
                ticks
                    .iter()
                    .map(|outgoing| outgoing.tick.id.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ));
            Ok(settlements)
        }
        .boxed()
    }
}
