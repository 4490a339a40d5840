//! What the leader does that followers do not: propose intents, hold the lease, publish the
//! outbox to RabbitMQ at each tick's instant, confirm what the broker confirmed, and purge
//! abandoned clocks.
//!
//! One loop, one structure: the replicated outbox is ordered by due instant, so the loop sleeps
//! until the earliest unpublished tick and publishes everything due then. No task per clock.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use futures::FutureExt as _;
use futures::stream::{FuturesUnordered, StreamExt};
use openraft::ServerState;
use tickd_domain::{Channel, ClockId, ClockStatus, Command, Intent, TickId};
use tickd_raft::{Raft, Replica, wall_clock};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, interval, sleep_until};
use tracing::{Instrument, Span, field};

use crate::lease::Lease;
use crate::rabbit::{Broker, RECONNECT_PAUSE};
use crate::{EngineConfig, telemetry};

/// How far ahead of the clock intents are committed: several commit latencies, so that the
/// publish at an instant never waits for consensus.
pub const LOOKAHEAD: Duration = Duration::from_millis(600);
/// How often an intent is proposed.
pub const INTENT_EVERY: Duration = Duration::from_millis(200);
/// How often the lease is renewed (it lasts [`crate::lease::LEASE`]).
pub const LEASE_RENEW_EVERY: Duration = Duration::from_millis(100);
/// How often confirmed ticks are removed from the outbox, in one command.
pub const CONFIRM_EVERY: Duration = Duration::from_millis(100);
/// The most ticks published in one pass. A larger instant goes out in several passes, one
/// right after the other: each pass is bounded by the broker's operation timeout, which ten
/// thousand messages to a busy broker exceeded (the whole burst then failed and was published
/// again, loading the broker further), and the loop serves intents and the lease in between.
pub const MAX_PUBLISH_BATCH: usize = 2_000;

/// The key of an outbox tick.
type OutboxKey = (u64, TickId);

/// Runs the leader duties whenever this node leads, until `stop` turns true.
pub async fn run(
    replica: Replica,
    broker: Option<Broker>,
    config: EngineConfig,
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
            let duties = Duties::new(&replica, broker.clone(), config.clone());
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
    lease: Lease,
    /// Outbox ticks handed to the broker by this leader and still in the outbox: either
    /// awaiting the broker's confirmation or awaiting the `Confirm` command that removes them.
    /// A failed publish leaves the set, so the tick is published again.
    in_flight: HashSet<OutboxKey>,
    /// Clocks whose queue the broker reported missing: nobody consumed them for the TTL.
    abandoned: BTreeSet<ClockId>,
    /// Confirmed ticks waiting for the next `Confirm` command.
    confirmed: Vec<OutboxKey>,
    /// Outbox ticks that were already due when this leader took over: the previous leader may
    /// have published them without its confirmation being committed, so publishing one is
    /// counted as a re-delivery after failover. Ticks filed ahead of their instant are not
    /// here: no leader publishes a tick before its instant.
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
    /// Stored in the clock's queue, confirmed this long after the publish.
    Delivered(Duration),
    /// Returned: the clock's queue no longer exists.
    Unroutable(ClockId),
    /// Refused (a nack) or the confirmation was lost.
    Failed(String),
}

type Confirming =
    FuturesUnordered<std::pin::Pin<Box<dyn Future<Output = (OutboxKey, Settled)> + Send>>>;

impl<'a> Duties<'a> {
    fn new(replica: &'a Replica, broker: Option<Broker>, config: EngineConfig) -> Self {
        let now = wall_clock::now_ms();
        let inherited = replica
            .state()
            .read()
            .registry
            .ledger()
            .outbox
            .keys()
            .take_while(|(due_at, _)| *due_at <= now)
            .cloned()
            .collect();
        Self {
            replica,
            raft: replica.raft().clone(),
            broker,
            config,
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
        // When to publish next. Finding it scans the outbox past the ticks in flight, so it is
        // recomputed only when that can change it: an applied entry, a publish, a failure.
        let mut wake_at: Option<Instant> = None;
        loop {
            {
                let current = metrics.borrow_and_update();
                if current.state != ServerState::Leader || current.current_term != term {
                    return Exit::LostLeadership;
                }
            }
            let wake = *wake_at.get_or_insert_with(|| self.next_publish_at());
            tokio::select! {
                _ = stop.changed() => return Exit::Stop,
                _ = metrics.changed() => wake_at = None,
                _ = intents.tick() => self.propose_intent(),
                _ = renewals.tick() => { self.lease.renew(&self.raft).await; }
                _ = sleep_until(wake) => {
                    self.publish_due(&mut confirming).await;
                    wake_at = None;
                }
                Some((key, settled)) = confirming.next() => {
                    if self.settle_ready(key, settled, &mut confirming) {
                        wake_at = None;
                    }
                }
                _ = confirms.tick() => self.propose_confirms(),
                _ = purges.tick() => self.purge_abandoned(),
            }
        }
    }

    /// Settles one confirmation and every other one that is ready: a burst of ten thousand
    /// confirmations costs one pass of the loop, not ten thousand. Says whether a tick must
    /// be published again.
    fn settle_ready(
        &mut self,
        key: OutboxKey,
        settled: Settled,
        confirming: &mut Confirming,
    ) -> bool {
        let mut republish = self.settle(key, settled);
        while let Some(Some((key, settled))) = confirming.next().now_or_never() {
            republish |= self.settle(key, settled);
        }
        republish
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
        let span = tracing::debug_span!(
            "intent",
            through_ms = intent.through_ms,
            index = field::Empty,
            filed = field::Empty,
        );
        self.intent_in_flight = Some(tokio::spawn(
            async move {
                match raft.client_write(Command::Intend(intent)).await {
                    Ok(written) => {
                        Span::current().record("index", written.log_id.index);
                        if let Some(tickd_domain::Outcome::Filed(filed)) = written.data.outcome {
                            Span::current().record("filed", filed.ticks);
                            telemetry::record_filed(&filed);
                            tracing::debug!(late = filed.late, "intent committed");
                        }
                    }
                    Err(error) => tracing::debug!(%error, "intent not committed"),
                }
            }
            .instrument(span),
        ));
    }

    /// Publishes every outbox tick that is due and not in flight, if the lease holds.
    async fn publish_due(&mut self, confirming: &mut Confirming) {
        let Some(broker) = self.broker.clone() else {
            return;
        };
        if !self.lease.holds() {
            // Look again once the lease has had a chance to be renewed, not in a busy loop.
            self.publish_paused_until = Some(Instant::now() + LEASE_RENEW_EVERY);
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
        let mut deliverable = Vec::with_capacity(due.len());
        for (key, tick, queue) in due {
            match queue {
                Some(queue) => deliverable.push((key, tick, queue)),
                // The clock is gone: nothing to deliver to.
                None => self.confirmed.push(key),
            }
        }
        if deliverable.is_empty() {
            return;
        }
        let burst: Vec<(&str, &tickd_domain::Tick)> = deliverable
            .iter()
            .map(|(_, tick, queue)| (queue.as_str(), tick))
            .collect();
        let published_at = Instant::now();
        let confirmations = match broker.publish(&burst).await {
            Ok(confirmations) => confirmations,
            Err(error) => {
                telemetry::record_publish_failure();
                tracing::warn!(%error, "RabbitMQ publish failed; the ticks stay in the outbox");
                self.publish_paused_until = Some(Instant::now() + RECONNECT_PAUSE);
                return;
            }
        };
        for ((key, tick, _), confirmation) in deliverable.into_iter().zip(confirmations) {
            self.in_flight.insert(key.clone());
            let redelivery = self.inherited.remove(&key);
            if redelivery {
                telemetry::record_redelivered();
            }
            let lateness_ms = now.saturating_sub(tick.due_at_ms);
            telemetry::record_published(Duration::from_millis(lateness_ms));
            // One span per tick, open until the broker settles it: a tick's line in the log
            // carries its id, its clock and how late it went out.
            let span = tracing::debug_span!(
                "tick",
                tick = %tick.id,
                clock = %tick.clock,
                due_at_ms = tick.due_at_ms,
                lateness_ms,
                redelivery,
            );
            let clock = tick.clock;
            confirming.push(Box::pin(
                async move {
                    let settled = match confirmation.await {
                        Ok(lapin::Confirmation::Ack(None)) => {
                            Settled::Delivered(published_at.elapsed())
                        }
                        Ok(lapin::Confirmation::Ack(Some(_))) => Settled::Unroutable(clock),
                        Ok(other) => Settled::Failed(format!("{other:?}")),
                        Err(error) => Settled::Failed(error.to_string()),
                    };
                    tracing::debug!(?settled, "the broker settled the tick");
                    (key, settled)
                }
                .instrument(span),
            ));
        }
    }

    /// Records what the broker said about one tick; true if it must be published again.
    fn settle(&mut self, key: OutboxKey, settled: Settled) -> bool {
        match settled {
            Settled::Delivered(after) => {
                telemetry::record_delivered(after);
                self.confirmed.push(key);
                false
            }
            Settled::Unroutable(clock) => {
                // Nobody can receive it: the tick is done, and the clock is abandoned.
                telemetry::record_unroutable();
                self.confirmed.push(key);
                self.abandoned.insert(clock);
                false
            }
            Settled::Failed(reason) => {
                telemetry::record_publish_failure();
                tracing::warn!(tick = %key.1, %reason, "a tick was not confirmed; it will be published again");
                self.in_flight.remove(&key);
                true
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
        // The last step of a tick: the entry that takes it out of the outbox for good.
        let span = tracing::debug_span!("ack", ticks = ticks.len(), index = field::Empty);
        tokio::spawn(
            async move {
                match raft.client_write(Command::Confirm { ticks }).await {
                    Ok(written) => {
                        Span::current().record("index", written.log_id.index);
                        tracing::debug!("confirmed ticks left the outbox");
                    }
                    // The ticks stay in the outbox and will be published again with the same
                    // ids.
                    Err(error) => tracing::debug!(%error, "confirmation not committed"),
                }
            }
            .instrument(span),
        );
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
