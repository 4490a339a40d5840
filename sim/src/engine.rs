//! The leader's duties in the simulation: the engine's real decisions
//! ([`tickd_engine::decisions::Decisions`]: the lease, what is due, what to confirm, what to
//! intend) stepped by a loop of the simulation's own, which proposes straight to the local
//! openraft and publishes to the simulated broker through the `Publisher` seam.
//!
//! The loop follows production's (`engine/src/duties.rs`) step for step: the lease asked first
//! and renewed every [`LEASE_RENEW_EVERY`], an intent every [`INTENT_EVERY`] with at most one
//! in flight, a `Confirm` every [`CONFIRM_EVERY`] whose failure puts its confirmations back,
//! due ticks published as the decisions say. Intents and confirmations take the clients' write
//! path ([`client::write`]), retries after a lost answer included, so one may be applied twice,
//! as in production. What it leaves out is what the simulation has no
//! use for: metrics, logs, the purge of abandoned clocks (the workload's clocks are never
//! abandoned) and the report of failing webhook receivers.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use openraft::{Raft, ServerState};
use tickd_domain::{Command, Registry};
use tickd_engine::EngineConfig;
use tickd_engine::Publisher;
use tickd_engine::decisions::{
    Confirmation, Decisions, LEASE_RENEW_EVERY, Now, OutboxKey, Settled, confirm_command,
};
use tickd_engine::duties::{CONFIRM_EVERY, INTENT_EVERY};
use tickd_raft::cluster_clock::{ClusterClock, MEASURE_EVERY};
use tickd_raft::{NodeId, StateHandle};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::broker::SimPublisher;
use crate::client;
use crate::log_store::lock;
use crate::runtime::SimConfig;
use crate::world::World;

/// How often a node that does not lead looks whether it does now.
const FOLLOWER_LOOK_EVERY: Duration = Duration::from_millis(20);

/// The engine of one incarnation of a node.
pub struct Engine {
    /// The world it lives in.
    pub world: Arc<World>,
    /// The node.
    pub me: NodeId,
    /// Its incarnation: the loop ends once another runs.
    pub incarnation: u64,
    /// The node's openraft.
    pub raft: Raft<SimConfig>,
    /// The node's applied state.
    pub state: StateHandle,
    /// The node's cluster clock: ticks are stamped and published by the majority's time.
    pub clock: ClusterClock,
    /// The engine's settings.
    pub config: EngineConfig,
}

impl Engine {
    fn leading_term(&self) -> Option<u64> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        (metrics.state == ServerState::Leader).then_some(metrics.current_term)
    }

    fn alive(&self) -> bool {
        self.world.is_running(self.me, self.incarnation)
    }

    /// The majority's time, as production's duties read it (`ClusterClock::firing_now_ms`);
    /// `None` while this node's clock may not fire ticks (unmeasured, or beyond the bound).
    fn now(&self) -> Option<Now> {
        let wall_ms = self.clock.firing_now_ms().ok()?;
        Some(Now {
            instant: Instant::now(),
            wall_ms,
        })
    }

    fn read<T>(&self, decide: impl FnOnce(&Registry) -> T) -> T {
        decide(&self.state.read().registry)
    }

    /// Runs until the incarnation ends: leads whenever openraft says this node leads and its
    /// clock may fire; a leader whose clock may not holds until its monitor's next round.
    pub async fn run(self) {
        while self.alive() {
            match (self.leading_term(), self.now()) {
                (Some(term), Some(at)) => self.lead(term, at).await,
                (Some(_), None) => tokio::time::sleep(MEASURE_EVERY).await,
                (None, _) => tokio::time::sleep(FOLLOWER_LOOK_EVERY).await,
            }
        }
    }

    async fn renew_lease(&self, decisions: &mut Decisions) {
        let asked_at = Instant::now();
        match self.raft.get_read_log_id().await {
            Ok(_) => decisions.lease_confirmed(asked_at),
            Err(_) => decisions.lease_lost(),
        }
    }

    /// One term of leadership, from `at`, until it ends or the clock may no longer fire.
    async fn lead(&self, term: u64, at: Now) {
        self.world
            .record(format_args!("node {} leads term {term}", self.me));
        let publisher = SimPublisher {
            world: self.world.clone(),
            node: self.me,
            term,
        };
        let mut decisions = self.read(|registry| Decisions::new(self.config.clone(), registry, at));
        let mut confirming: FuturesUnordered<BoxFuture<'static, (OutboxKey, Settled)>> =
            FuturesUnordered::new();
        let (unconfirmed_sender, mut unconfirmed) = mpsc::unbounded_channel::<Vec<Confirmation>>();
        let mut intent_in_flight: Option<JoinHandle<()>> = None;
        self.renew_lease(&mut decisions).await;
        let start = Instant::now();
        let (mut next_renew, mut next_intent, mut next_confirm) =
            (start + LEASE_RENEW_EVERY, start, start + CONFIRM_EVERY);
        while self.alive() && self.leading_term() == Some(term) {
            let Some(at) = self.now() else {
                break;
            };
            let wake = self
                .read(|registry| decisions.next_publish_at(at, registry))
                .min(next_renew)
                .min(next_intent)
                .min(next_confirm)
                .min(at.instant + FOLLOWER_LOOK_EVERY);
            tokio::select! {
                biased;
                Some((key, settled)) = confirming.next() => {
                    // As production: a clock that may no longer fire dates the settlement by
                    // the publish, and the loop ends at its next step.
                    let at = self.now().unwrap_or(Now {
                        instant: Instant::now(),
                        wall_ms: settled.published_ms,
                    });
                    decisions.settle(key, settled, at);
                }
                Some(confirmations) = unconfirmed.recv() => decisions.confirm_again(confirmations),
                () = sleep_until(wake) => {}
            }
            let instant = Instant::now();
            if instant >= next_renew {
                self.renew_lease(&mut decisions).await;
                next_renew = instant + LEASE_RENEW_EVERY;
            }
            if instant >= next_intent {
                next_intent = instant + INTENT_EVERY;
                if intent_in_flight
                    .as_ref()
                    .is_none_or(|task| task.is_finished())
                {
                    let intent = decisions.intent(at);
                    let (world, me) = (self.world.clone(), self.me);
                    intent_in_flight = Some(tokio::spawn(async move {
                        let _outcome = client::write(&world, me, Command::Intend(intent)).await;
                    }));
                }
            }
            if instant >= next_confirm {
                next_confirm = instant + CONFIRM_EVERY;
                if let Some(confirmations) = self.read(|registry| decisions.confirms(registry)) {
                    let (world, me) = (self.world.clone(), self.me);
                    let sender = unconfirmed_sender.clone();
                    tokio::spawn(async move {
                        let command = confirm_command(confirmations.clone());
                        match client::write_at(&world, me, command).await {
                            Ok((_, index)) => {
                                let mut confirmed = lock(&world.confirmed);
                                for confirmation in confirmations {
                                    confirmed.insert(confirmation.key.1.to_string(), index);
                                }
                            }
                            Err(_) => {
                                let _closed = sender.send(confirmations);
                            }
                        }
                    });
                }
            }
            let Some(at) = self.now() else {
                break;
            };
            let outgoing = self.read(|registry| decisions.due(at, registry));
            if outgoing.is_empty() {
                continue;
            }
            match publisher.publish(&outgoing).await {
                Ok(settlements) => {
                    decisions.accepted(&outgoing);
                    for (tick, settlement) in outgoing.into_iter().zip(settlements) {
                        confirming.push(
                            async move {
                                let outcome = settlement.await;
                                let key: OutboxKey = tick.key;
                                let settled = Settled {
                                    clock: tick.tick.clock,
                                    published_ms: tick.now_ms,
                                    outcome,
                                };
                                (key, settled)
                            }
                            .boxed(),
                        );
                    }
                }
                Err(_refused) => decisions.publish_failed(at),
            }
        }
        if let Some(task) = intent_in_flight {
            task.abort();
        }
    }
}
