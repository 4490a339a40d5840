//! What the leader does that followers do not: propose intents, hold the lease, publish the
//! outbox to RabbitMQ at each tick's instant, confirm what the broker confirmed, and purge
//! abandoned clocks.
//!
//! One loop, one structure: the replicated outbox is ordered by due instant, so the loop sleeps
//! until the earliest unpublished tick and publishes everything due then. No task per clock.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use openraft::ServerState;
use tickd_domain::{Channel, ClockId, ClockStatus, Command, Intent, TickId};
use tickd_raft::{Raft, Replica, wall_clock};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, interval, sleep_until};

use crate::lease::Lease;
use crate::rabbit::{Broker, RECONNECT_PAUSE};
use crate::{Counters, EngineConfig};

/// How far ahead of the clock intents are committed: several commit latencies, so that the
/// publish at an instant never waits for consensus.
pub const LOOKAHEAD: Duration = Duration::from_millis(600);
/// How often an intent is proposed.
pub const INTENT_EVERY: Duration = Duration::from_millis(200);
/// How often the lease is renewed (it lasts [`crate::lease::LEASE`]).
pub const LEASE_RENEW_EVERY: Duration = Duration::from_millis(100);
/// How often confirmed ticks are removed from the outbox, in one command.
pub const CONFIRM_EVERY: Duration = Duration::from_millis(100);
/// The most ticks published in one pass, so that a long backlog does not starve the loop.
pub const MAX_PUBLISH_BATCH: usize = 10_000;

/// The key of an outbox tick.
type OutboxKey = (u64, TickId);

/// Runs the leader duties whenever this node leads, until `stop` turns true.
pub async fn run(
    replica: Replica,
    broker: Option<Broker>,
    config: EngineConfig,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let mut metrics = replica.raft().metrics();
    loop {
        let leading = {
            let current = metrics.borrow_and_update();
            (current.state == ServerState::Leader).then_some(current.current_term)
        };
        if let Some(term) = leading {
            tracing::info!(term, "leading: firing ticks");
            let duties = Duties::new(&replica, broker.clone(), config.clone(), counters.clone());
            if duties.run(term, &mut stop).await == Exit::Stop {
                return;
            }
            tracing::info!(term, "no longer leading: ticks stop here");
            continue;
        }
        tokio::select! {
            _ = stop.changed() => return,
            changed = metrics.changed() => if changed.is_err() { return },
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Exit {
    LostLeadership,
    Stop,
}

struct Duties<'a> {
    replica: &'a Replica,
    raft: Raft,
    broker: Option<Broker>,
    config: EngineConfig,
    counters: Arc<Counters>,
    lease: Lease,
    /// Outbox ticks handed to the broker by this leader and still in the outbox: either
    /// awaiting the broker's confirmation or awaiting the `Confirm` command that removes them.
    /// A failed publish leaves the set, so the tick is published again.
    in_flight: HashSet<OutboxKey>,
    /// Clocks whose queue the broker reported missing: nobody consumed them for the TTL.
    abandoned: BTreeSet<ClockId>,
    /// Confirmed ticks waiting for the next `Confirm` command.
    confirmed: Vec<OutboxKey>,
    /// Outbox ticks that existed when this leader took over: publishing one is a
    /// re-delivery after failover.
    inherited: BTreeSet<OutboxKey>,
    /// The proposal of the last intent, so that at most one is in flight.
    intent_in_flight: Option<JoinHandle<()>>,
    /// After a failed publish, no new attempt before this instant: a broker outage costs one
    /// attempt per reconnect pause, not a busy loop.
    publish_paused_until: Option<Instant>,
}

/// What the broker said about one published tick.
#[derive(Debug)]
enum Settled {
    /// Stored in the clock's queue.
    Delivered,
    /// Returned: the clock's queue no longer exists.
    Unroutable(ClockId),
    /// Refused (a nack) or the confirmation was lost.
    Failed(String),
}

type Confirming =
    FuturesUnordered<std::pin::Pin<Box<dyn Future<Output = (OutboxKey, Settled)> + Send>>>;

impl<'a> Duties<'a> {
    fn new(
        replica: &'a Replica,
        broker: Option<Broker>,
        config: EngineConfig,
        counters: Arc<Counters>,
    ) -> Self {
        let inherited = replica
            .state()
            .read()
            .registry
            .ledger()
            .outbox
            .keys()
            .cloned()
            .collect();
        Self {
            replica,
            raft: replica.raft().clone(),
            broker,
            config,
            counters,
            lease: Lease::default(),
            in_flight: HashSet::new(),
            abandoned: BTreeSet::new(),
            confirmed: Vec::new(),
            inherited,
            intent_in_flight: None,
            publish_paused_until: None,
        }
    }

    async fn run(mut self, term: u64, stop: &mut watch::Receiver<bool>) -> Exit {
        // Every applied entry and every role change updates the metrics: one watch wakes the
        // loop for both.
        let mut metrics = self.raft.metrics();
        let mut intents = interval(INTENT_EVERY);
        let mut renewals = interval(LEASE_RENEW_EVERY);
        let mut confirms = interval(CONFIRM_EVERY);
        let mut purges = interval(self.config.purge_every());
        let mut confirming = Confirming::new();
        self.lease.renew(&self.raft).await;
        loop {
            {
                let current = metrics.borrow_and_update();
                if current.state != ServerState::Leader || current.current_term != term {
                    return Exit::LostLeadership;
                }
            }
            let wake_at = self.next_publish_at();
            tokio::select! {
                _ = stop.changed() => return Exit::Stop,
                _ = metrics.changed() => {}
                _ = intents.tick() => self.propose_intent(),
                _ = renewals.tick() => { self.lease.renew(&self.raft).await; }
                _ = sleep_until(wake_at) => self.publish_due(&mut confirming).await,
                Some((key, confirmed)) = confirming.next() => self.settle(key, confirmed),
                _ = confirms.tick() => self.propose_confirms(),
                _ = purges.tick() => self.purge_abandoned(),
            }
        }
    }

    /// When the earliest unpublished outbox tick falls due (soon, if one is due already).
    fn next_publish_at(&self) -> Instant {
        let idle = Instant::now() + Duration::from_millis(250);
        if self.broker.is_none() {
            return idle;
        }
        let state = self.replica.state().read();
        let next = state
            .registry
            .ledger()
            .outbox
            .keys()
            .find(|key| !self.in_flight.contains(*key))
            .map(|(due_at, _)| *due_at);
        let Some(due_at) = next else {
            return idle;
        };
        let now = wall_clock::now_ms();
        let wait = Duration::from_millis(due_at.saturating_sub(now));
        let due = (Instant::now() + wait).min(idle);
        self.publish_paused_until
            .map_or(due, |paused| due.max(paused))
    }

    fn propose_intent(&mut self) {
        if self
            .intent_in_flight
            .as_ref()
            .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let now_ms = wall_clock::now_ms();
        let intent = Intent {
            through_ms: now_ms + u64::try_from(LOOKAHEAD.as_millis()).unwrap_or(600),
            now_ms,
            catch_up_ms: self.config.catch_up_ms(),
            queue_limit: self.config.http_queue_limit,
        };
        let raft = self.raft.clone();
        let counters = self.counters.clone();
        self.intent_in_flight = Some(tokio::spawn(async move {
            match raft.client_write(Command::Intend(intent)).await {
                Ok(written) => {
                    if let Some(tickd_domain::Outcome::Filed(filed)) = written.data.outcome {
                        counters.record_filed(&filed);
                    }
                }
                Err(error) => tracing::debug!(%error, "intent not committed"),
            }
        }));
    }

    /// Publishes every outbox tick that is due and not in flight, if the lease holds.
    async fn publish_due(&mut self, confirming: &mut Confirming) {
        let Some(broker) = self.broker.clone() else {
            return;
        };
        if !self.lease.holds() {
            return;
        }
        let now = wall_clock::now_ms();
        let due: Vec<(OutboxKey, tickd_domain::Tick, Option<String>)> = {
            let state = self.replica.state().read();
            let registry = &state.registry;
            registry
                .ledger()
                .outbox
                .iter()
                .take_while(|((due_at, _), _)| *due_at <= now)
                .filter(|(key, _)| !self.in_flight.contains(*key))
                .take(MAX_PUBLISH_BATCH)
                .map(|(key, tick)| {
                    let queue = match registry.get(&tick.clock).map(|clock| &clock.channel) {
                        Some(Channel::Rabbit { queue }) => Some(queue.clone()),
                        _ => None,
                    };
                    (key.clone(), tick.clone(), queue)
                })
                .collect()
        };
        for (key, tick, queue) in due {
            let Some(queue) = queue else {
                // The clock is gone: nothing to deliver to.
                self.confirmed.push(key);
                continue;
            };
            match broker.publish(&queue, &tick).await {
                Ok(confirmation) => {
                    self.in_flight.insert(key.clone());
                    if self.inherited.remove(&key) {
                        self.counters.redelivered.fetch_add(1, Ordering::Relaxed);
                    }
                    let lateness = now.saturating_sub(tick.due_at_ms);
                    self.counters.record_publish_lateness(lateness);
                    let clock = tick.clock.clone();
                    confirming.push(Box::pin(async move {
                        let settled = match confirmation.await {
                            Ok(lapin::Confirmation::Ack(None)) => Settled::Delivered,
                            Ok(lapin::Confirmation::Ack(Some(_))) => Settled::Unroutable(clock),
                            Ok(other) => Settled::Failed(format!("{other:?}")),
                            Err(error) => Settled::Failed(error.to_string()),
                        };
                        (key, settled)
                    }));
                }
                Err(error) => {
                    tracing::warn!(%error, "RabbitMQ publish failed; the tick stays in the outbox");
                    self.publish_paused_until = Some(Instant::now() + RECONNECT_PAUSE);
                    return;
                }
            }
        }
    }

    fn settle(&mut self, key: OutboxKey, settled: Settled) {
        match settled {
            Settled::Delivered => {
                self.counters.delivered.fetch_add(1, Ordering::Relaxed);
                self.confirmed.push(key);
            }
            Settled::Unroutable(clock) => {
                // Nobody can receive it: the tick is done, and the clock is abandoned.
                self.confirmed.push(key);
                self.abandoned.insert(clock);
            }
            Settled::Failed(reason) => {
                tracing::warn!(tick = %key.1, %reason, "a tick was not confirmed; it will be published again");
                self.in_flight.remove(&key);
            }
        }
    }

    fn propose_confirms(&mut self) {
        {
            // Forget what has left the outbox: those ticks are settled for good.
            let state = self.replica.state().read();
            let outbox = &state.registry.ledger().outbox;
            self.in_flight.retain(|key| outbox.contains_key(key));
        }
        if self.confirmed.is_empty() {
            return;
        }
        let ticks = std::mem::take(&mut self.confirmed);
        let raft = self.raft.clone();
        tokio::spawn(async move {
            if let Err(error) = raft.client_write(Command::Confirm { ticks }).await {
                // The ticks stay in the outbox and will be published again with the same ids.
                tracing::debug!(%error, "confirmation not committed");
            }
        });
    }

    /// Proposes the removal of active clocks nobody consumes (SPEC §6): http clocks not
    /// polled for the clock TTL, RabbitMQ clocks whose queue the broker reported missing.
    fn purge_abandoned(&mut self) {
        let now = wall_clock::now_ms();
        let ttl = self.config.clock_ttl_ms();
        let mut abandoned: Vec<ClockId> = std::mem::take(&mut self.abandoned).into_iter().collect();
        {
            let state = self.replica.state().read();
            let registry = &state.registry;
            let idle_http = registry.clocks().filter(|clock| {
                let idle_since = registry
                    .ledger()
                    .cursors
                    .get(&clock.id)
                    .map_or(0, |cursor| cursor.last_activity_ms);
                clock.status == ClockStatus::Active
                    && matches!(clock.channel, Channel::Http { .. })
                    && now.saturating_sub(idle_since) >= ttl
            });
            abandoned.extend(idle_http.map(|clock| clock.id.clone()));
        }
        if abandoned.is_empty() {
            return;
        }
        tracing::info!(clocks = abandoned.len(), "purging clocks nobody consumes");
        let raft = self.raft.clone();
        tokio::spawn(async move {
            if let Err(error) = raft
                .client_write(Command::Purge { clocks: abandoned })
                .await
            {
                tracing::debug!(%error, "purge not committed");
            }
        });
    }
}
