//! What the leader does that followers do not, as effects: propose intents, renew the lease,
//! hand the outbox to its publishers (RabbitMQ, webhooks) at each tick's instant, confirm what
//! they delivered or gave up, and purge abandoned clocks. What to do at each step is decided by
//! [`Decisions`]; this module owns the timers, the proposals, the publishers and the metrics.
//!
//! One loop, one structure: the replicated outbox is ordered by due instant, so the loop sleeps
//! until the earliest unpublished tick and publishes everything due then. No task per clock.
//!
//! Intents, confirmations and purges take the clients' write path ([`Replica::write`]): they
//! share entries with registrations and pops under load (one append, one fsync, one
//! replication round), and a clock that steps its leader down holds them as it holds every
//! write. Should leadership pass while one is in flight, the write reaches the new leader,
//! which is safe for each: an intent was made while this node's clock was within the bound,
//! and filing is idempotent (the watermark only moves forward and tick ids are fixed by clock
//! and instant), so the new leader files what it would have filed itself, and publishes it
//! at each tick's instant by its own clock; a confirmation reports what the broker did; a
//! purge removes clocks whose queues the broker let expire, and spares paused ones.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use futures::stream::{FuturesUnordered, StreamExt};
use tickd_domain::webhook::FailingReceivers;
use tickd_domain::{Command, Outcome, Registry};
use tickd_raft::Replica;
use tickd_raft::cluster_clock::{ClusterClock, MEASURE_EVERY, Verdict};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, interval, sleep_until};
use tracing::{Instrument, Span, field};

use crate::decisions::{
    Confirmation, Decisions, LEASE_RENEW_EVERY, Now, OutboxKey, Outgoing, Settled, confirm_command,
};
use crate::publisher::{PublishOutcome, Publisher};
use crate::{EngineConfig, telemetry};

/// How often an intent is proposed.
pub const INTENT_EVERY: Duration = Duration::from_millis(200);
/// How often confirmed ticks are removed from the outbox, in one command.
pub const CONFIRM_EVERY: Duration = Duration::from_millis(100);
/// How often the receivers the publisher sees failing are handed to the node's status.
pub const REPORT_RECEIVERS_EVERY: Duration = Duration::from_secs(1);

/// Runs the leader duties whenever this node leads, until `stop` turns true; `publisher`
/// carries the outbox's ticks to their receivers.
pub async fn run(
    replica: Replica,
    publisher: Arc<dyn Publisher>,
    config: EngineConfig,
    mut stop: watch::Receiver<bool>,
) {
    let mut cluster = replica.watch_cluster();
    // The term in which this node last said that its clock keeps it from firing.
    let mut held_in = None;
    loop {
        match role(cluster.leading_term(), replica.clock()) {
            Role::Fire { term, at } => {
                tracing::info!(term, "leading: firing ticks");
                let duties = Duties::new(&replica, publisher.clone(), config.clone(), at);
                let exit = duties.run(term, &mut stop).await;
                // A node that no longer leads publishes nothing, so it sees no receiver fail.
                replica.report_failing_receivers(FailingReceivers::default());
                match exit {
                    Exit::Stop => return,
                    Exit::LostLeadership => {
                        tracing::info!(term, "no longer leading: ticks stop here");
                    }
                    Exit::ClockRefused(verdict) => held(term, &verdict, &mut held_in),
                }
            }
            // The clock monitor is handing leadership over (or the clocks are not yet
            // measured); look again after its next round.
            Role::Hold { term, verdict } => {
                held(term, &verdict, &mut held_in);
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(MEASURE_EVERY) => {}
                }
            }
            Role::Follow => {
                let core_stopped = tokio::select! {
                    _ = stop.changed() => return,
                    changed = cluster.changed() => changed.is_err(),
                };
                if core_stopped {
                    return tickd_raft::failure::idle_until_stop(&mut stop).await;
                }
            }
        }
    }
}

/// What this node's engine does now.
#[derive(Debug)]
enum Role {
    /// It leads in `term` with a clock that may fire: the leader's duties, from `at`.
    Fire { term: u64, at: Now },
    /// It leads in `term`, but its clock may not fire ticks: no intent, no publish.
    Hold { term: u64, verdict: Verdict },
    /// It does not lead: nothing until that changes.
    Follow,
}

/// The engine's role for a node that leads in `leading` (if at all) with `clock`.
fn role(leading: Option<u64>, clock: &ClusterClock) -> Role {
    match (leading, now(clock)) {
        (None, _) => Role::Follow,
        (Some(term), Ok(at)) => Role::Fire { term, at },
        (Some(term), Err(verdict)) => Role::Hold { term, verdict },
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Exit {
    LostLeadership,
    /// This node's clock may no longer fire ticks (see `tickd_raft::cluster_clock`).
    ClockRefused(Verdict),
    Stop,
}

/// The two clocks, read once per step: the monotonic one, and the majority's time as far as
/// it may have come (`ClusterClock::firing_now_ms`). `Err` when this node's clock may not
/// fire ticks.
fn now(clock: &ClusterClock) -> Result<Now, Verdict> {
    clock.firing_now_ms().map(|wall_ms| Now {
        instant: Instant::now(),
        wall_ms,
    })
}

/// Says, once per term, why this leader fires nothing.
fn held(term: u64, verdict: &Verdict, held_in: &mut Option<u64>) {
    if *held_in != Some(term) {
        *held_in = Some(term);
        tracing::warn!(
            term,
            ?verdict,
            "leading, but this node's clock may not fire ticks: no intents and no publishing \
             until it agrees with the majority's or another node takes over"
        );
    }
}

struct Duties<'a> {
    replica: &'a Replica,
    clock: ClusterClock,
    publisher: Arc<dyn Publisher>,
    decisions: Decisions,
    /// How often abandoned clocks are looked for.
    purge_every: Duration,
    /// The proposal of the last intent, so that at most one is in flight.
    intent_in_flight: Option<JoinHandle<()>>,
    /// Given-up ticks are logged at most once per [`GIVEN_UP_LOG_EVERY`]: a receiver that
    /// refuses every tick of ten thousand clocks must not write ten thousand lines a second.
    given_up: GivenUpLog,
    /// Whether a quorum has confirmed this leadership's lease yet: the first confirmation is
    /// logged, the moment a new leader may publish (a failover's timeline reads it).
    lease_held: bool,
}

/// How often given-up ticks are logged at most.
const GIVEN_UP_LOG_EVERY: Duration = Duration::from_secs(10);

/// The given-up ticks not yet logged, and when the last line was written.
#[derive(Default)]
struct GivenUpLog {
    unlogged: u64,
    logged_at: Option<Instant>,
}

impl GivenUpLog {
    /// Counts one given-up tick; says whether to log it now, with how many were left unlogged
    /// before it.
    fn note(&mut self, now: Instant) -> Option<u64> {
        if self
            .logged_at
            .is_some_and(|at| now.duration_since(at) < GIVEN_UP_LOG_EVERY)
        {
            self.unlogged = self.unlogged.saturating_add(1);
            return None;
        }
        self.logged_at = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

type Confirming =
    FuturesUnordered<std::pin::Pin<Box<dyn Future<Output = (OutboxKey, Settled)> + Send>>>;

impl<'a> Duties<'a> {
    fn new(
        replica: &'a Replica,
        publisher: Arc<dyn Publisher>,
        config: EngineConfig,
        at: Now,
    ) -> Self {
        let purge_every = config.purge_every();
        let decisions = Decisions::new(config, &replica.state().read().registry, at);
        Self {
            replica,
            clock: replica.clock().clone(),
            publisher,
            decisions,
            purge_every,
            intent_in_flight: None,
            given_up: GivenUpLog::default(),
            lease_held: false,
        }
    }

    /// Runs `decide` over the applied registry, under its read lock.
    fn read<T>(&mut self, decide: impl FnOnce(&mut Decisions, &Registry) -> T) -> T {
        let state = self.replica.state().read();
        decide(&mut self.decisions, &state.registry)
    }

    async fn run(mut self, term: u64, stop: &mut watch::Receiver<bool>) -> Exit {
        // Every applied entry and every role change changes the view: one watch wakes the
        // loop for both.
        let mut cluster = self.replica.watch_cluster();
        let mut intents = interval(INTENT_EVERY);
        let mut renewals = interval(LEASE_RENEW_EVERY);
        let mut confirms = interval(CONFIRM_EVERY);
        let mut purges = interval(self.purge_every);
        let mut reports = interval(REPORT_RECEIVERS_EVERY);
        let mut confirming = Confirming::new();
        // Confirmations whose command did not commit, back for the next one.
        let (unconfirmed_sender, mut unconfirmed) = mpsc::unbounded_channel();
        self.renew_lease().await;
        // When to publish next: recomputed only when that can change it (an applied entry, a
        // publish, a failure), and then at the cost of what changed in the outbox.
        let mut wake_at: Option<Instant> = None;
        loop {
            // Test builds only (the `fail` crate's `failpoints` feature): the engine dies.
            fail::fail_point!("engine-loop", |_| Exit::Stop);
            if cluster.leading_term() != Some(term) {
                return Exit::LostLeadership;
            }
            let at = match now(&self.clock) {
                Ok(at) => at,
                Err(verdict) => return Exit::ClockRefused(verdict),
            };
            let wake = match wake_at {
                Some(wake) => wake,
                None => *wake_at.insert(
                    self.read(|decisions, registry| decisions.next_publish_at(at, registry)),
                ),
            };
            tokio::select! {
                _ = stop.changed() => return Exit::Stop,
                _ = cluster.changed() => wake_at = None,
                _ = intents.tick() => self.propose_intent(),
                _ = renewals.tick() => self.renew_lease().await,
                _ = sleep_until(wake) => {
                    self.publish_due(&mut confirming).await;
                    wake_at = None;
                }
                Some((key, settled)) = confirming.next() => {
                    if self.settle_ready(key, settled, &mut confirming) {
                        wake_at = None;
                    }
                }
                _ = confirms.tick() => self.propose_confirms(&unconfirmed_sender),
                Some(confirmations) = unconfirmed.recv() => {
                    self.decisions.confirm_again(confirmations);
                }
                _ = purges.tick() => self.purge_abandoned(),
                _ = reports.tick() => self
                    .replica
                    .report_failing_receivers(self.publisher.failing_receivers()),
            }
        }
    }

    /// Asks a quorum to confirm leadership; the lease runs from the question.
    async fn renew_lease(&mut self) {
        let asked_at = Instant::now();
        match self.replica.confirm_leadership().await {
            Ok(_) => {
                self.decisions.lease_confirmed(asked_at);
                if !self.lease_held {
                    self.lease_held = true;
                    tracing::info!("leading: a quorum confirmed the lease; publishing");
                }
            }
            Err(error) => {
                tracing::debug!(%error, "leadership not confirmed; the lease is dropped");
                self.decisions.lease_lost();
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

    fn settle(&mut self, key: OutboxKey, settled: Settled) -> bool {
        match &settled.outcome {
            PublishOutcome::Delivered { after } => telemetry::record_delivered(*after),
            PublishOutcome::Unroutable => telemetry::record_unroutable(),
            PublishOutcome::Failed(reason) => {
                telemetry::record_publish_failure();
                tracing::warn!(tick = %key.1, %reason, "a tick was not confirmed; it will be published again");
            }
            // The publisher that retries says why, once per receiver rather than per tick.
            PublishOutcome::RetryAfter { after, reason }
            | PublishOutcome::Deferred { after, reason } => {
                tracing::debug!(tick = %key.1, ?after, %reason, "a tick will be tried again");
            }
            PublishOutcome::GaveUp(reason) | PublishOutcome::Expired(reason) => {
                if let Some(unlogged) = self.given_up.note(Instant::now()) {
                    tracing::warn!(
                        tick = %key.1,
                        clock = %settled.clock,
                        %reason,
                        unlogged,
                        "a tick was given up (unlogged: those given up since the last such line)"
                    );
                }
            }
        }
        // A node whose clock may no longer fire leaves the loop at its next step; until then
        // the tick's publish instant stands in for the majority's time: a settlement dated
        // early decides fewer instants behind an acknowledged tick, never more.
        let at = now(&self.clock).unwrap_or(Now {
            instant: Instant::now(),
            wall_ms: settled.published_ms,
        });
        self.decisions.settle(key, settled, at)
    }

    fn propose_intent(&mut self) {
        if self
            .intent_in_flight
            .as_ref()
            .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let Ok(at) = now(&self.clock) else {
            return;
        };
        let intent = self.decisions.intent(at);
        let replica = self.replica.clone();
        // The replica's `write` span inside this one carries the entry's index.
        let span = tracing::debug_span!(
            "intent",
            through_ms = intent.through_ms,
            filed = field::Empty,
        );
        self.intent_in_flight = Some(tokio::spawn(
            async move {
                match replica.write(Command::Intend(intent)).await {
                    Ok(Outcome::Filed(filed)) => {
                        Span::current().record("filed", filed.ticks);
                        telemetry::record_filed(&filed);
                        tracing::debug!(late = filed.late, "intent committed");
                    }
                    Ok(other) => {
                        tracing::warn!(?other, "an intent was answered as another command")
                    }
                    Err(error) => tracing::debug!(%error, "intent not committed"),
                }
            }
            .instrument(span),
        ));
    }

    /// Publishes what the decisions say is due, and follows each tick until the publisher
    /// settles it.
    async fn publish_due(&mut self, confirming: &mut Confirming) {
        let Ok(at) = now(&self.clock) else {
            return;
        };
        let publisher = self.publisher.clone();
        let outgoing = self.read(|decisions, registry| decisions.due(at, registry));
        if outgoing.is_empty() {
            return;
        }
        let settlements = match publisher.publish(&outgoing).await {
            Ok(settlements) => settlements,
            Err(refused) => {
                telemetry::record_publish_failure();
                tracing::warn!(%refused, "the publish failed; the ticks stay in the outbox");
                if let Ok(at) = now(&self.clock) {
                    self.decisions.publish_failed(at);
                }
                return;
            }
        };
        self.decisions.accepted(&outgoing);
        for (
            Outgoing {
                key,
                tick,
                redelivery,
                ..
            },
            settlement,
        ) in outgoing.into_iter().zip(settlements)
        {
            if redelivery {
                telemetry::record_redelivered();
            }
            let lateness_ms = at.wall_ms.saturating_sub(tick.due_at_ms);
            telemetry::record_published(Duration::from_millis(lateness_ms));
            // One span per tick, open until the publisher settles it: a tick's line in the log
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
            let published_ms = at.wall_ms;
            confirming.push(Box::pin(
                async move {
                    let settled = Settled {
                        clock,
                        published_ms,
                        outcome: settlement.await,
                    };
                    tracing::debug!(?settled, "the tick was settled");
                    (key, settled)
                }
                .instrument(span),
            ));
        }
    }

    fn propose_confirms(&mut self, unconfirmed: &mpsc::UnboundedSender<Vec<Confirmation>>) {
        let Some(confirmed) = self.read(Decisions::confirms) else {
            return;
        };
        let again = unconfirmed.clone();
        let retry = confirmed.clone();
        let confirm = confirm_command(confirmed);
        let replica = self.replica.clone();
        // The last step of a tick: the entry that takes it out of the outbox for good.
        let span = tracing::debug_span!("ack", ticks = retry.len());
        tokio::spawn(
            async move {
                match replica.write(confirm).await {
                    Ok(_) => tracing::debug!("confirmed ticks left the outbox"),
                    // Proposed again with the next confirmations; should this node have lost
                    // the leadership, the next leader publishes the ticks again, same ids.
                    Err(error) => {
                        tracing::debug!(%error, "confirmation not committed; proposed again");
                        // The loop may have ended meanwhile: then nobody needs them.
                        let _ = again.send(retry);
                    }
                }
            }
            .instrument(span),
        );
    }

    /// Proposes the removal of the active clocks nobody consumes (SPEC §6).
    fn purge_abandoned(&mut self) {
        let Ok(at) = now(&self.clock) else {
            return;
        };
        let Some(clocks) = self.read(|decisions, registry| decisions.abandoned(at, registry))
        else {
            return;
        };
        tracing::info!(clocks = clocks.len(), "purging clocks nobody consumes");
        let replica = self.replica.clone();
        tokio::spawn(async move {
            if let Err(error) = replica.write(Command::Purge { clocks }).await {
                tracing::debug!(%error, "purge not committed");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tickd_raft::cluster_clock::{PeerOffset, Round};

    use super::*;

    /// `max_clock_offset_ms`.
    const BOUND: Duration = Duration::from_millis(250);
    /// This node's wall clock during the round below: far from the real one, so that a reading
    /// of the real clock cannot pass for the majority's time.
    const WALL_MS: u64 = 1_000_000_000_000;

    /// A clock after one round in which both peers of a three-voter cluster read `offset_ms`
    /// ahead of this node, each measured to within 1 ms.
    fn measured(offset_ms: i64) -> ClusterClock {
        let clock = ClusterClock::new(BOUND);
        let reading = PeerOffset {
            offset_ms,
            uncertainty_ms: 1,
        };
        let at = Instant::now();
        let round = Round {
            offsets: BTreeMap::from([(2, reading), (3, reading)]),
            unclocked: 0,
            voters: 3,
            began: (WALL_MS, at),
            ended: (WALL_MS, at),
        };
        assert!(clock.record(round), "the round is taken");
        clock
    }

    #[test]
    fn a_node_that_does_not_lead_fires_nothing_whatever_its_clock() {
        for clock in [ClusterClock::new(BOUND), measured(0), measured(5_000)] {
            assert!(matches!(role(None, &clock), Role::Follow), "{clock:?}");
        }
    }

    #[test]
    fn a_leader_within_the_bound_fires_by_the_majoritys_time() {
        let Role::Fire { term, at } = role(Some(4), &measured(100)) else {
            panic!("a leader 100 ms behind both peers (bound 250 ms) fires");
        };
        assert_eq!(term, 4);
        // The majority's reading (100 ms ahead) less its uncertainty, plus the time since.
        let earliest = WALL_MS + 99;
        assert!(
            (earliest..earliest + 1_000).contains(&at.wall_ms),
            "fires at {} instead of the majority's time {earliest}",
            at.wall_ms
        );
    }

    #[test]
    fn a_leader_unmeasured_or_beyond_the_bound_holds_its_ticks() {
        let Role::Hold { term, verdict } = role(Some(4), &ClusterClock::new(BOUND)) else {
            panic!("a leader whose clock was never measured fires nothing");
        };
        assert_eq!((term, verdict), (4, Verdict::Unmeasured));
        for offset_ms in [5_000, -5_000, 252] {
            let Role::Hold { verdict, .. } = role(Some(4), &measured(offset_ms)) else {
                panic!("a leader {offset_ms} ms off both peers (bound 250 ms) fires nothing");
            };
            assert!(
                matches!(
                    verdict,
                    Verdict::Beyond {
                        agreeing: 1,
                        voters: 3,
                        ..
                    }
                ),
                "{offset_ms} ms: {verdict:?}"
            );
        }
    }

    #[test]
    fn given_up_ticks_are_logged_at_most_once_per_period_with_the_count_between() {
        let mut log = GivenUpLog::default();
        let start = Instant::now();
        assert_eq!(log.note(start), Some(0), "the first one is logged");
        for _ in 0..5 {
            assert_eq!(log.note(start + GIVEN_UP_LOG_EVERY / 2), None);
        }
        assert_eq!(
            log.note(start + GIVEN_UP_LOG_EVERY),
            Some(5),
            "a period later, one line says how many went unlogged"
        );
    }
}
