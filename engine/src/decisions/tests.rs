//! The decisions stepped through instants and events, without a broker, a cluster or a clock.

use tickd_domain::webhook::SECRET_BYTES;
use tickd_domain::{
    Outcome as Applied, Overlap, QueueId, Schedule, Webhook, WebhookSecret, WebhookUrl,
};

use super::*;
use crate::lease::LEASE;

const MS: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_secs(60);

fn config() -> EngineConfig {
    EngineConfig {
        clock_ttl: TTL,
        catch_up: Duration::from_secs(10),
        http_queue_limit: 100,
    }
}

/// A moment well after the epoch, on a whole second, so that instants are easy to name.
fn start() -> Now {
    Now {
        instant: Instant::now(),
        wall_ms: 1_000_000,
    }
}

fn register(registry: &mut Registry, name: &str, channel: Channel, now: Now) -> ClockId {
    register_with(registry, name, channel, Overlap::Allow, now)
}

fn register_with(
    registry: &mut Registry,
    name: &str,
    channel: Channel,
    overlap: Overlap,
    now: Now,
) -> ClockId {
    let command = Command::Register {
        name: name.to_owned(),
        schedule: Schedule::parse("every.1.seconds").expect("a valid schedule"),
        id: ClockId::new(format!("id-{name}")),
        channel,
        max_clocks: 10_000,
        now_ms: now.wall_ms,
        overlap,
    };
    match registry.apply(command) {
        Applied::Registered {
            clock,
            created: true,
        } => clock.id,
        other => panic!("expected a new clock, got {other:?}"),
    }
}

fn rabbit_clock(registry: &mut Registry, name: &str, now: Now) -> ClockId {
    register(registry, name, Channel::Rabbit, now)
}

/// A webhook clock with `overlap`.
fn webhook_clock(registry: &mut Registry, name: &str, overlap: Overlap, now: Now) -> ClockId {
    let url = WebhookUrl::parse("https://receiver.example/t").expect("a valid url");
    let secret = WebhookSecret::from_bytes([5; SECRET_BYTES]);
    let channel = Channel::Webhook(Box::new(Webhook { url, secret }));
    register_with(registry, name, channel, overlap, now)
}

fn http_clock(registry: &mut Registry, name: &str, now: Now) -> ClockId {
    let queue_id = QueueId::new(format!("queue-{name}"));
    register(registry, name, Channel::Http { queue_id }, now)
}

/// Files every tick up to `through` after `now`, as a committed intent would.
fn file_through(registry: &mut Registry, now: Now, through: Duration) {
    let intent = Intent {
        through_ms: now.after(through).wall_ms,
        now_ms: now.wall_ms,
        catch_up_ms: 10_000,
        queue_limit: 100,
        in_flight_from_ms: None,
    };
    registry.apply(Command::Intend(intent));
}

/// The decisions of a leader that took over at `now` and holds its lease from then (for
/// [`LEASE`]).
fn leading(registry: &Registry, now: Now) -> Decisions {
    let mut decisions = Decisions::new(config(), registry, now);
    decisions.lease_confirmed(now.instant);
    decisions
}

/// What a publisher said of `tick`, published at `at`.
fn settled(tick: &Outgoing, at: Now, outcome: PublishOutcome) -> Settled {
    Settled {
        clock: tick.tick.clock.clone(),
        published_ms: at.wall_ms,
        outcome,
    }
}

/// Settles `tick` at `at` with an `outcome` that ends its attempts; returns the
/// confirmations then waiting.
fn settle_for_good(
    decisions: &mut Decisions,
    registry: &Registry,
    tick: &Outgoing,
    at: Now,
    outcome: PublishOutcome,
) -> Option<Vec<Confirmation>> {
    let again = decisions.settle(tick.key.clone(), settled(tick, at, outcome), at);
    assert!(!again, "the outcome ended the tick's attempts");
    decisions.confirms(registry)
}

fn keys(outgoing: &[Outgoing]) -> Vec<OutboxKey> {
    outgoing.iter().map(|tick| tick.key.clone()).collect()
}

/// A registry with one RabbitMQ clock registered at `now` and its ticks filed 3 s ahead.
fn one_ticking_clock(now: Now) -> Registry {
    let mut registry = Registry::new();
    rabbit_clock(&mut registry, "orders", now);
    file_through(&mut registry, now, Duration::from_secs(3));
    registry
}

/// Applies `confirmations` as their committed `Confirm` command would.
fn commit_confirms(registry: &mut Registry, confirmations: Vec<Confirmation>) {
    registry.apply(confirm_command(confirmations));
}

/// Every outbox tick is in exactly one of the decisions' places (ready, in flight,
/// waiting for its next attempt), and nothing else is: what lets `due` and
/// `next_publish_at` read the ready ticks alone instead of scanning past those in flight.
fn assert_partition(decisions: &mut Decisions, registry: &Registry) {
    decisions.look(registry);
    let outbox = registry.ledger().outbox();
    let waiting: HashSet<&OutboxKey> = decisions.waiting.iter().map(|(_, key)| key).collect();
    for key in outbox.keys() {
        let places = [
            decisions.ready.contains(key),
            decisions.in_flight.contains(key),
            waiting.contains(key),
            decisions.lines.is_held(key),
        ];
        assert_eq!(
            places.iter().filter(|place| **place).count(),
            1,
            "{key:?} is (ready, in flight, waiting, held) {places:?}"
        );
    }
    let known =
        decisions.ready.len() + decisions.in_flight.len() + waiting.len() + decisions.lines.held();
    assert_eq!(known, outbox.len(), "a key the outbox no longer holds");
}

#[test]
fn every_outbox_tick_has_one_place_and_one_filed_below_those_in_flight_is_found() {
    let now = start();
    let mut registry = Registry::new();
    let clocks: Vec<ClockId> = (0..3)
        .map(|n| rabbit_clock(&mut registry, &format!("clock-{n}"), now))
        .collect();
    file_through(&mut registry, now, Duration::from_secs(3));
    let mut decisions = leading(&registry, now);
    assert_partition(&mut decisions, &registry);

    // The lease is renewed at every step, as the loop renews it.
    let first = now.after(Duration::from_secs(1));
    decisions.lease_confirmed(first.instant);
    let outgoing = decisions.due(first, &registry);
    assert_eq!(outgoing.len(), 3, "one tick per clock at the first second");
    assert_partition(&mut decisions, &registry);
    decisions.accepted(&outgoing);
    assert_partition(&mut decisions, &registry);
    assert!(decisions.due(first, &registry).is_empty(), "all in flight");

    // One fails outright, one is told to wait, one is delivered.
    let failed = PublishOutcome::Failed("the channel closed".into());
    assert!(decisions.settle(
        outgoing[0].key.clone(),
        settled(&outgoing[0], first, failed),
        first
    ));
    let wait = PublishOutcome::RetryAfter {
        after: Duration::from_secs(5),
        reason: "503".into(),
    };
    assert!(decisions.settle(
        outgoing[1].key.clone(),
        settled(&outgoing[1], first, wait),
        first
    ));
    let delivered = PublishOutcome::Delivered { after: MS };
    let confirmations = settle_for_good(&mut decisions, &registry, &outgoing[2], first, delivered)
        .unwrap_or_default();
    assert_partition(&mut decisions, &registry);
    assert_eq!(
        keys(&decisions.due(first, &registry)),
        vec![outgoing[0].key.clone()],
        "the failed tick at once, the waiting one not yet"
    );

    // A manual tick filed now is due before ticks already in flight at later instants:
    // it is found anyway.
    let later = first.after(Duration::from_secs(1));
    decisions.lease_confirmed(later.instant);
    let in_flight = decisions.due(later, &registry);
    decisions.accepted(&in_flight);
    registry.apply(Command::Tick {
        id: clocks[2].clone(),
        now_ms: first.wall_ms,
        request: None,
    });
    commit_confirms(&mut registry, confirmations);
    assert_partition(&mut decisions, &registry);
    let manual: Vec<Outgoing> = decisions
        .due(later, &registry)
        .into_iter()
        .filter(|tick| tick.tick.manual)
        .collect();
    assert_eq!(
        manual.len(),
        1,
        "the manual tick filed below those in flight"
    );
    assert_eq!(manual[0].tick.clock, clocks[2]);

    // The wait ends: the tick is ready again, with its attempt counted.
    let retried = first.after(Duration::from_secs(5));
    decisions.lease_confirmed(retried.instant);
    assert!(
        !keys(&decisions.due(later, &registry)).contains(&outgoing[1].key),
        "still waiting"
    );
    let again = decisions.due(retried, &registry);
    let retry = again
        .iter()
        .find(|tick| tick.key == outgoing[1].key)
        .unwrap_or_else(|| panic!("the waiting tick is due again: {again:?}"));
    assert_eq!(retry.attempt, 2);
    assert_partition(&mut decisions, &registry);
}

#[test]
fn the_intent_reaches_the_lookahead_with_the_configured_limits() {
    let now = start();
    let intent = Decisions::new(config(), &Registry::new(), now).intent(now);
    assert_eq!(
        intent,
        Intent {
            through_ms: now.wall_ms + 600,
            now_ms: now.wall_ms,
            catch_up_ms: 10_000,
            queue_limit: 100,
            in_flight_from_ms: None,
        }
    );
}

#[test]
fn the_intent_spares_the_ticks_a_consumer_may_hold_until_they_leave_the_outbox() {
    let now = start();
    let mut registry = one_ticking_clock(now);
    // Taking over 2.5 s later, the leader inherits the ticks of 1 and 2 s, which the
    // previous leader may have published.
    let takeover = now.after(Duration::from_millis(2_500));
    let mut decisions = leading(&registry, takeover);
    let first = now.wall_ms + 1_000;
    assert_eq!(decisions.intent(takeover).in_flight_from_ms, Some(first));
    // Published again, they are in flight until their confirmation is committed.
    let outgoing = decisions.due(takeover, &registry);
    assert_eq!(outgoing.len(), 2);
    decisions.accepted(&outgoing);
    assert_eq!(decisions.intent(takeover).in_flight_from_ms, Some(first));
    for tick in &outgoing {
        let delivered = settled(tick, takeover, PublishOutcome::Delivered { after: MS });
        assert!(!decisions.settle(tick.key.clone(), delivered, takeover));
    }
    let confirmed = decisions.confirms(&registry).unwrap_or_default();
    assert_eq!(
        decisions.intent(takeover).in_flight_from_ms,
        Some(first),
        "settled but not yet confirmed in the log, they are still in the outbox"
    );
    commit_confirms(&mut registry, confirmed);
    assert_eq!(decisions.confirms(&registry), None);
    assert_eq!(decisions.intent(takeover).in_flight_from_ms, None);
}

#[test]
fn a_confirmation_that_did_not_commit_goes_into_the_next_command() {
    let now = start();
    let mut registry = one_ticking_clock(now);
    let at = now.after(Duration::from_millis(1_500));
    let mut decisions = leading(&registry, at);
    let outgoing = decisions.due(at, &registry);
    assert_eq!(outgoing.len(), 1);
    decisions.accepted(&outgoing);
    let delivered = settled(&outgoing[0], at, PublishOutcome::Delivered { after: MS });
    assert!(!decisions.settle(outgoing[0].key.clone(), delivered, at));
    let first = decisions.confirms(&registry).unwrap_or_default();
    assert_eq!(first.len(), 1);
    // Its command timed out: the next one carries it, and once applied the tick is gone.
    decisions.confirm_again(first.clone());
    assert_eq!(decisions.confirms(&registry), Some(first.clone()));
    commit_confirms(&mut registry, first);
    assert_eq!(decisions.confirms(&registry), None);
    assert_eq!(decisions.intent(at).in_flight_from_ms, None);
}

#[test]
fn publishing_waits_once_the_most_ticks_await_the_broker() {
    let now = start();
    let mut registry = Registry::new();
    for n in 0..11 {
        rabbit_clock(&mut registry, &format!("clock-{n}"), now);
    }
    // 35 minutes without a leader: 2 100 late ticks per clock, filed one by one.
    let later = now.after(Duration::from_secs(2_100));
    registry.apply(Command::Intend(Intent {
        through_ms: later.wall_ms,
        now_ms: later.wall_ms,
        catch_up_ms: 3_600_000,
        queue_limit: 100,
        in_flight_from_ms: None,
    }));
    assert!(registry.ledger().outbox().len() > MAX_IN_FLIGHT);
    let mut decisions = leading(&registry, later);
    let mut published = 0;
    // Bounded: passes that kept handing out the same ticks would fail the count below
    // instead of running forever.
    for _ in 0..=MAX_IN_FLIGHT.div_ceil(MAX_PUBLISH_BATCH) {
        let outgoing = decisions.due(later, &registry);
        if outgoing.is_empty() {
            break;
        }
        decisions.accepted(&outgoing);
        published += outgoing.len();
    }
    assert_eq!(
        published, MAX_IN_FLIGHT,
        "nothing beyond the bound is published"
    );
    assert_eq!(
        decisions.next_publish_at(later, &registry),
        later.instant + IDLE_WAKE,
        "at the bound the loop waits instead of spinning"
    );
    // One tick settled and removed from the outbox makes room for one more.
    let first = registry.ledger().outbox().keys().next().cloned();
    let first = first.unwrap_or_else(|| panic!("an outbox tick"));
    let delivered = Settled {
        clock: registry.ledger().outbox()[&first].clock.clone(),
        published_ms: later.wall_ms,
        outcome: PublishOutcome::Delivered { after: MS },
    };
    assert!(!decisions.settle(first.clone(), delivered, later));
    let confirmed = decisions.confirms(&registry).unwrap_or_default();
    commit_confirms(&mut registry, confirmed);
    assert_eq!(decisions.confirms(&registry), None);
    assert_eq!(decisions.due(later, &registry).len(), 1);
}

#[test]
fn nothing_is_published_before_the_lease_is_confirmed() {
    let now = start();
    let registry = one_ticking_clock(now);
    let mut decisions = Decisions::new(config(), &registry, now);
    let first_due = now.after(Duration::from_secs(1));
    assert!(decisions.due(first_due, &registry).is_empty());
    // Not in a busy loop: the next look waits for a renewal.
    assert_eq!(
        decisions.next_publish_at(first_due, &registry),
        first_due.instant + LEASE_RENEW_EVERY
    );
    let renewed = first_due.after(LEASE_RENEW_EVERY);
    decisions.lease_confirmed(renewed.instant);
    assert_eq!(decisions.due(renewed, &registry).len(), 1);
}

#[test]
fn nothing_is_published_once_the_lease_has_run_out() {
    let now = start();
    let registry = one_ticking_clock(now);
    let mut decisions = Decisions::new(config(), &registry, now);
    let asked_at = now.after(Duration::from_secs(1) - LEASE);
    decisions.lease_confirmed(asked_at.instant);
    assert!(
        decisions
            .due(now.after(Duration::from_secs(1)), &registry)
            .is_empty(),
        "a lease asked for {LEASE:?} before the tick's instant has run out at it"
    );

    let mut decisions = Decisions::new(config(), &registry, now);
    decisions.lease_confirmed(asked_at.after(MS).instant);
    assert_eq!(
        decisions
            .due(now.after(Duration::from_secs(1)), &registry)
            .len(),
        1
    );
}

#[test]
fn a_lost_lease_stops_publishing_at_once() {
    let now = start();
    let registry = one_ticking_clock(now);
    let instant = now.after(Duration::from_secs(1));
    let mut decisions = leading(&registry, instant);
    decisions.lease_lost();
    assert!(decisions.due(instant, &registry).is_empty());
}

#[test]
fn a_tick_is_published_at_its_instant_and_not_a_millisecond_before() {
    let now = start();
    let registry = one_ticking_clock(now);
    let instant = now.after(Duration::from_secs(1));
    let early = now.after(Duration::from_secs(1) - MS);
    let mut decisions = leading(&registry, early);
    assert!(decisions.due(early, &registry).is_empty());
    // The loop sleeps exactly until then (the idle wake is longer than 1 ms).
    assert_eq!(decisions.next_publish_at(early, &registry), instant.instant);
    let outgoing = decisions.due(instant, &registry);
    assert_eq!(outgoing.len(), 1);
    assert_eq!(outgoing[0].tick.due_at_ms, instant.wall_ms);
    assert_eq!(
        outgoing[0].destination,
        Destination::Rabbit {
            queue: "ticktok-orders;every.1.seconds".to_owned()
        }
    );
    assert!(
        !outgoing[0].redelivery,
        "the tick was filed ahead of its instant"
    );
}

/// A leader whose one clock's first tick is due at the returned instant and was handed
/// to the broker then.
fn one_tick_in_flight() -> (Registry, Decisions, Now, Vec<Outgoing>) {
    let now = start();
    let registry = one_ticking_clock(now);
    let instant = now.after(Duration::from_secs(1));
    let mut decisions = leading(&registry, instant);
    let outgoing = decisions.due(instant, &registry);
    decisions.accepted(&outgoing);
    (registry, decisions, instant, outgoing)
}

#[test]
fn a_tick_in_flight_is_not_published_twice() {
    let (registry, mut decisions, instant, _) = one_tick_in_flight();
    assert!(decisions.due(instant, &registry).is_empty());
    // The next wake is for the next tick, not the one in flight (capped by the idle wake).
    assert_eq!(
        decisions.next_publish_at(instant, &registry),
        instant.instant + IDLE_WAKE
    );
}

#[test]
fn a_tick_the_broker_did_not_confirm_is_published_again() {
    let (registry, mut decisions, instant, outgoing) = one_tick_in_flight();
    let key = outgoing[0].key.clone();
    let failed = settled(&outgoing[0], instant, PublishOutcome::Failed("nack".into()));
    assert!(decisions.settle(key.clone(), failed, instant));
    assert_eq!(keys(&decisions.due(instant, &registry)), vec![key]);
    assert_eq!(
        decisions.confirms(&registry),
        None,
        "a failed tick is not confirmed"
    );
}

#[test]
fn a_tick_to_retry_waits_for_its_backoff_then_goes_again_as_the_next_attempt() {
    let (registry, mut decisions, instant, outgoing) = one_tick_in_flight();
    assert_eq!(outgoing[0].attempt, 1);
    let key = outgoing[0].key.clone();
    let backoff = Duration::from_secs(2);
    for attempt in 1..=2 {
        let at = instant.after(backoff * (attempt - 1));
        decisions.lease_confirmed(at.instant);
        let failed = PublishOutcome::RetryAfter {
            after: backoff,
            reason: "500".into(),
        };
        assert!(decisions.settle(key.clone(), settled(&outgoing[0], at, failed), at));
        let early = at.after(backoff - MS);
        decisions.lease_confirmed(early.instant);
        assert!(
            !keys(&decisions.due(early, &registry)).contains(&key),
            "no attempt before the backoff has passed"
        );
        let ready = at.after(backoff);
        decisions.lease_confirmed(ready.instant);
        let again = decisions.due(ready, &registry);
        decisions.accepted(&again);
        let again: Vec<_> = again.iter().filter(|tick| tick.key == key).collect();
        assert_eq!(
            again.len(),
            1,
            "the tick goes again once its backoff has passed"
        );
        assert_eq!(again[0].attempt, attempt + 1);
    }
    assert_eq!(decisions.confirms(&registry), None, "a retried tick stays");
    let delivered = PublishOutcome::Delivered { after: MS };
    let at = instant.after(backoff * 2);
    decisions.settle(key.clone(), settled(&outgoing[0], at, delivered), at);
    assert_eq!(
        decisions.confirms(&registry),
        Some(vec![Confirmation {
            key,
            published_ms: Some(at.wall_ms),
            attempts: 3,
            settled_ms: None
        }]),
        "two failed attempts, then the one that delivered"
    );
}

#[test]
fn a_deferred_tick_waits_without_counting_an_attempt() {
    let (registry, mut decisions, instant, outgoing) = one_tick_in_flight();
    let key = outgoing[0].key.clone();
    let wait = Duration::from_secs(1);
    let deferred = PublishOutcome::Deferred {
        after: wait,
        reason: "circuit open".into(),
    };
    assert!(decisions.settle(
        key.clone(),
        settled(&outgoing[0], instant, deferred),
        instant
    ));
    let early = instant.after(wait - MS);
    decisions.lease_confirmed(early.instant);
    assert!(!keys(&decisions.due(early, &registry)).contains(&key));
    let ready = instant.after(wait);
    decisions.lease_confirmed(ready.instant);
    let again = decisions.due(ready, &registry);
    let again: Vec<_> = again.iter().filter(|tick| tick.key == key).collect();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 1, "a deferral is not an attempt");
}

#[test]
fn a_tick_given_up_leaves_the_outbox_as_received_by_nobody() {
    let (registry, mut decisions, instant, outgoing) = one_tick_in_flight();
    let key = outgoing[0].key.clone();
    let gave_up = PublishOutcome::GaveUp("404 Not Found".into());
    assert_eq!(
        settle_for_good(&mut decisions, &registry, &outgoing[0], instant, gave_up),
        Some(vec![Confirmation {
            key,
            published_ms: None,
            attempts: 1,
            settled_ms: None
        }])
    );
    assert!(
        decisions
            .due(instant.after(IDLE_WAKE), &registry)
            .is_empty()
    );
}

#[test]
fn a_tick_that_expires_while_it_waits_is_given_up_without_another_attempt() {
    let (registry, mut decisions, instant, outgoing) = one_tick_in_flight();
    let key = outgoing[0].key.clone();
    let failed = PublishOutcome::RetryAfter {
        after: Duration::from_secs(1),
        reason: "503".into(),
    };
    assert!(decisions.settle(key.clone(), settled(&outgoing[0], instant, failed), instant));
    let later = instant.after(Duration::from_secs(1));
    decisions.lease_confirmed(later.instant);
    let again: Vec<Outgoing> = decisions
        .due(later, &registry)
        .into_iter()
        .filter(|tick| tick.key == key)
        .collect();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 2);
    decisions.accepted(&again);
    let expired = PublishOutcome::Expired("webhook_retry_for_ms ran out".into());
    assert_eq!(
        settle_for_good(&mut decisions, &registry, &again[0], later, expired),
        Some(vec![Confirmation {
            key,
            published_ms: None,
            attempts: 1,
            settled_ms: None
        }]),
        "the one failed attempt, and none for the expiry"
    );
}

#[test]
fn a_refused_publish_pauses_publishing_then_offers_the_same_ticks() {
    let now = start();
    let registry = one_ticking_clock(now);
    let mut decisions = leading(&registry, now);
    let instant = now.after(Duration::from_secs(1));
    decisions.lease_confirmed(instant.instant);
    let refused = keys(&decisions.due(instant, &registry));
    assert_eq!(refused.len(), 1);
    decisions.publish_failed(instant);
    assert_eq!(
        decisions.next_publish_at(instant, &registry),
        instant.instant + PUBLISH_RETRY_PAUSE
    );
    let before = instant.after(PUBLISH_RETRY_PAUSE - MS);
    decisions.lease_confirmed(before.instant);
    assert!(decisions.due(before, &registry).is_empty());
    let after = instant.after(PUBLISH_RETRY_PAUSE);
    assert_eq!(keys(&decisions.due(after, &registry)), refused);
}

#[test]
fn delivered_and_returned_ticks_are_confirmed_in_one_command() {
    let now = start();
    let mut registry = Registry::new();
    rabbit_clock(&mut registry, "orders", now);
    let gone = rabbit_clock(&mut registry, "invoices", now);
    file_through(&mut registry, now, Duration::from_secs(3));
    let instant = now.after(Duration::from_secs(1));
    let mut decisions = leading(&registry, instant);
    let outgoing = decisions.due(instant, &registry);
    decisions.accepted(&outgoing);
    assert_eq!(outgoing.len(), 2);
    for tick in &outgoing {
        let outcome = if tick.tick.clock == gone {
            PublishOutcome::Unroutable
        } else {
            PublishOutcome::Delivered { after: MS }
        };
        assert!(!decisions.settle(tick.key.clone(), settled(tick, instant, outcome), instant));
    }
    let published = |key: &OutboxKey| {
        let delivered = outgoing
            .iter()
            .any(|o| &o.key == key && o.tick.clock != gone);
        delivered.then_some(instant.wall_ms)
    };
    let expected = keys(&outgoing)
        .into_iter()
        .map(|key| Confirmation {
            published_ms: published(&key),
            key,
            attempts: 1,
            settled_ms: None,
        })
        .collect();
    assert_eq!(decisions.confirms(&registry), Some(expected));
    assert_eq!(
        decisions.confirms(&registry),
        None,
        "each tick is confirmed once"
    );
    // The returned tick's clock has no queue any more: nobody consumes it.
    assert_eq!(decisions.abandoned(instant, &registry), Some(vec![gone]));
    assert_eq!(decisions.abandoned(instant, &registry), None);
}

#[test]
fn a_large_instant_goes_out_in_bounded_passes() {
    let now = start();
    let mut registry = Registry::new();
    for index in 0..=MAX_PUBLISH_BATCH {
        rabbit_clock(&mut registry, &format!("clock{index}"), now);
    }
    file_through(&mut registry, now, Duration::from_secs(1));
    let instant = now.after(Duration::from_secs(1));
    let mut decisions = leading(&registry, instant);
    let first = decisions.due(instant, &registry);
    assert_eq!(first.len(), MAX_PUBLISH_BATCH);
    decisions.accepted(&first);
    assert_eq!(decisions.due(instant, &registry).len(), 1);
}

#[test]
fn ticks_due_at_takeover_count_as_redeliveries_once() {
    let registered = start();
    let mut registry = Registry::new();
    rabbit_clock(&mut registry, "orders", registered);
    file_through(&mut registry, registered, Duration::from_secs(3));
    // The previous leader stopped after 2.5 s: the ticks of 1 s and 2 s may have gone out.
    let takeover = registered.after(Duration::from_millis(2_500));
    let mut decisions = leading(&registry, takeover);
    let later = registered.after(Duration::from_secs(3));
    decisions.lease_confirmed(later.instant);
    let outgoing = decisions.due(later, &registry);
    let redelivered: Vec<(u64, bool)> = outgoing
        .iter()
        .map(|tick| (tick.tick.due_at_ms - registered.wall_ms, tick.redelivery))
        .collect();
    assert_eq!(
        redelivered,
        vec![(1_000, true), (2_000, true), (3_000, false)]
    );

    decisions.accepted(&outgoing);
    let first = outgoing[0].key.clone();
    let lost = settled(
        &outgoing[0],
        later,
        PublishOutcome::Failed("connection lost".into()),
    );
    decisions.settle(first, lost, later);
    let again = decisions.due(later, &registry);
    assert_eq!(again.len(), 1);
    assert!(!again[0].redelivery, "a re-delivery is counted once");
}

#[test]
fn idle_http_clocks_are_purged_after_the_ttl_and_paused_or_rabbit_ones_are_kept() {
    let now = start();
    let mut registry = Registry::new();
    let idle = http_clock(&mut registry, "idle", now);
    let paused = http_clock(&mut registry, "paused", now);
    registry.apply(Command::Pause {
        id: paused,
        now_ms: now.wall_ms,
        request: None,
    });
    http_clock(&mut registry, "recent", now.after(Duration::from_secs(1)));
    rabbit_clock(&mut registry, "rabbit", now);
    let mut decisions = leading(&registry, now);
    assert_eq!(decisions.abandoned(now.after(TTL - MS), &registry), None);
    assert_eq!(
        decisions.abandoned(now.after(TTL), &registry),
        Some(vec![idle])
    );
}

/// The ticks due at `at` for a leader whose lease a quorum confirmed at `at`.
fn due_leading(decisions: &mut Decisions, at: Now, registry: &Registry) -> Vec<Outgoing> {
    decisions.lease_confirmed(at.instant);
    decisions.due(at, registry)
}

/// The instants (in seconds after `start`) of `outgoing`.
fn seconds(outgoing: &[Outgoing], start: Now) -> Vec<u64> {
    let since = |tick: &Outgoing| (tick.key.0 - start.wall_ms) / 1_000;
    outgoing.iter().map(since).collect()
}

#[test]
fn a_clock_with_overlap_control_has_one_tick_out_and_the_confirmation_decides_those_behind() {
    let now = start();
    let mut registry = Registry::new();
    webhook_clock(&mut registry, "one-at-a-time", Overlap::Skip, now);
    webhook_clock(&mut registry, "every-instant", Overlap::Allow, now);
    file_through(&mut registry, now, Duration::from_secs(6));
    let mut decisions = leading(&registry, now);
    assert_partition(&mut decisions, &registry);

    let first = now.after(Duration::from_secs(1));
    let outgoing = due_leading(&mut decisions, first, &registry);
    assert_eq!(seconds(&outgoing, now), [1, 1], "both clocks' first tick");
    decisions.accepted(&outgoing);
    let (held, free) = if outgoing[0].tick.clock.to_string() == "id-one-at-a-time" {
        (&outgoing[0], &outgoing[1])
    } else {
        (&outgoing[1], &outgoing[0])
    };

    // While its first tick is out, the overlap clock's next instants wait; the other's go.
    let third = now.after(Duration::from_secs(3));
    let outgoing = due_leading(&mut decisions, third, &registry);
    assert_eq!(seconds(&outgoing, now), [2, 3]);
    assert!(
        outgoing
            .iter()
            .all(|tick| tick.tick.clock == free.tick.clock)
    );
    decisions.accepted(&outgoing);
    assert_partition(&mut decisions, &registry);

    // Its receiver answers at 3.5 s: the confirmation carries that instant, and the
    // instants of 2 s and 3 s are skipped when it is applied.
    let answered = now.after(Duration::from_millis(3_500));
    let delivered = PublishOutcome::Delivered { after: MS };
    let confirmations =
        settle_for_good(&mut decisions, &registry, held, answered, delivered).unwrap_or_default();
    let settled_ms: Vec<Option<u64>> = confirmations.iter().map(|c| c.settled_ms).collect();
    assert_eq!(settled_ms, [Some(answered.wall_ms)]);
    commit_confirms(&mut registry, confirmations);
    assert_partition(&mut decisions, &registry);
    assert!(
        due_leading(&mut decisions, answered, &registry).is_empty(),
        "4 s is not due"
    );
    let fourth = now.after(Duration::from_secs(4));
    let outgoing = due_leading(&mut decisions, fourth, &registry);
    let of_held: Vec<&Outgoing> = outgoing
        .iter()
        .filter(|tick| tick.tick.clock == held.tick.clock)
        .collect();
    assert_eq!(of_held.len(), 1, "{outgoing:?}");
    assert_eq!(of_held[0].tick.due_at_ms, fourth.wall_ms);
    assert_eq!(of_held[0].tick.skipped, 2);
}

#[test]
fn a_new_leader_holds_the_ticks_behind_an_unconfirmed_one_and_a_purge_releases_nothing() {
    let now = start();
    let mut registry = Registry::new();
    let clock = webhook_clock(&mut registry, "one-at-a-time", Overlap::BufferOne, now);
    file_through(&mut registry, now, Duration::from_secs(4));
    // The leader takes over at 3.5 s: the previous one may have the tick of 1 s out.
    let takeover = now.after(Duration::from_millis(3_500));
    let mut decisions = leading(&registry, takeover);
    assert_partition(&mut decisions, &registry);
    let outgoing = due_leading(&mut decisions, takeover, &registry);
    assert_eq!(seconds(&outgoing, now), [1]);
    assert!(outgoing[0].redelivery);
    decisions.accepted(&outgoing);
    assert!(due_leading(&mut decisions, takeover, &registry).is_empty());

    // The clock purged with its ticks: nothing is left held or ready.
    registry.apply(Command::Purge {
        clocks: vec![clock],
    });
    assert_partition(&mut decisions, &registry);
    assert_eq!(decisions.lines.held(), 0);
    let later = now.after(Duration::from_secs(5));
    assert!(due_leading(&mut decisions, later, &registry).is_empty());
}
