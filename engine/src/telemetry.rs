//! The engine's metrics: what the leader did with ticks, recorded through the `metrics`
//! facade.
//!
//! The counters count this node's own work while it led, since it started: Prometheus sums
//! them over the nodes and `rate()` absorbs restarts. Which node counted a tick therefore
//! tells who fired it. The names are constants so that recording and describing cannot drift
//! apart; [`describe`] is called once by the binary after it installs a recorder, and
//! registers every metric at zero so that a node exports them before its first tick.

use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use tickd_domain::Filed;

use crate::publisher::PublishOutcome;

/// Scheduled ticks filed for delivery by the intents this node proposed as leader (fired).
pub const TICKS_FILED: &str = "tickd_ticks_filed_total";
/// Of the filed ticks, those filed after their instant: a leader change or a stall.
pub const TICKS_LATE: &str = "tickd_ticks_late_total";
/// Missed ticks older than the catch-up window, folded into a later tick.
pub const TICKS_COALESCED: &str = "tickd_ticks_coalesced_total";
/// Ticks dropped from full http queues.
pub const TICKS_DROPPED: &str = "tickd_ticks_dropped_total";
/// Clocks the committed intents visited: what firing costs, which the due index keeps to
/// the clocks due rather than the clocks registered.
pub const INTENT_CLOCKS_VISITED: &str = "tickd_intent_clocks_visited_total";
/// Ticks handed to a publisher (RabbitMQ, or a webhook attempt), first deliveries and repeats
/// alike.
pub const TICKS_PUBLISHED: &str = "tickd_ticks_published_total";
/// Ticks delivered: confirmed by the broker as stored in their clock's queue, or taken by their
/// webhook receiver (2xx).
pub const TICKS_DELIVERED: &str = "tickd_ticks_delivered_total";
/// Ticks published again after a failover (see `record_redelivered`).
pub const TICKS_REDELIVERED: &str = "tickd_ticks_redelivered_total";
/// Ticks the broker returned because their clock's queue no longer exists.
pub const TICKS_UNROUTABLE: &str = "tickd_ticks_unroutable_total";
/// Publishes that failed or were not confirmed; those ticks are published again.
pub const TICK_PUBLISH_FAILURES: &str = "tickd_tick_publish_failures_total";
/// How late a tick was handed to its publisher, after its instant.
pub const TICK_PUBLISH_LATENESS: &str = "tickd_tick_publish_lateness_seconds";
/// From handing a tick over to its delivery (the broker's confirmation, the receiver's 2xx).
pub const TICK_CONFIRM_DURATION: &str = "tickd_tick_confirm_duration_seconds";
/// Whether this node holds a live connection to RabbitMQ.
pub const RABBITMQ_CONNECTED: &str = "tickd_rabbitmq_connected";
/// Webhook attempts by `result`: `delivered` (2xx), `failed` (retried: another status, no
/// answer, no connection) or `refused` (a 4xx that ends the tick's attempts).
pub const WEBHOOK_ATTEMPTS: &str = "tickd_webhook_attempts_total";
/// Webhook ticks given up: refused by their receiver, or not delivered within
/// `webhook_retry_for_ms`.
pub const WEBHOOK_GIVEN_UP: &str = "tickd_webhook_ticks_given_up_total";
/// Webhook ticks held back without an attempt: their receiver's circuit was open, or it had
/// the most ticks in flight it may have.
pub const WEBHOOK_DEFERRED: &str = "tickd_webhook_ticks_deferred_total";
/// Webhook receivers whose circuit is open on this node: they failed every recent attempt.
pub const WEBHOOK_RECEIVERS_FAILING: &str = "tickd_webhook_receivers_failing";
/// The results [`WEBHOOK_ATTEMPTS`] is labelled with.
const ATTEMPT_RESULTS: [&str; 3] = ["delivered", "failed", "refused"];

/// Registers the help text and unit of every engine metric with the installed recorder,
/// and registers each metric at zero.
pub fn describe() {
    describe_counter!(
        TICKS_FILED,
        "Scheduled ticks filed for delivery by the intents this node proposed as leader"
    );
    describe_counter!(
        TICKS_LATE,
        "Filed ticks that were already due when filed (a leader change or a stall)"
    );
    describe_counter!(
        TICKS_COALESCED,
        "Missed ticks older than the catch-up window, folded into a later tick"
    );
    describe_counter!(
        TICKS_DROPPED,
        "Ticks dropped from full http queues (http_queue_limit)"
    );
    describe_counter!(
        INTENT_CLOCKS_VISITED,
        "Clocks the intents this node proposed as leader visited: those due in each intent's \
         window, not every clock registered"
    );
    describe_counter!(
        TICKS_PUBLISHED,
        "Ticks this node handed to RabbitMQ or to a webhook attempt"
    );
    describe_counter!(
        TICKS_DELIVERED,
        "Ticks delivered: confirmed by RabbitMQ, or taken by their webhook receiver (2xx)"
    );
    describe_counter!(
        TICKS_REDELIVERED,
        "Ticks inherited from the previous leader, already due at the takeover and published \
         again: consumers may see them twice, with the same tick_id"
    );
    describe_counter!(
        TICKS_UNROUTABLE,
        "Ticks the broker returned because the clock's queue expired (the clock is purged)"
    );
    describe_counter!(
        TICK_PUBLISH_FAILURES,
        "Publishes that failed or were not confirmed; the ticks stay in the outbox"
    );
    describe_histogram!(
        TICK_PUBLISH_LATENESS,
        Unit::Seconds,
        "How long after its instant a tick was handed to RabbitMQ or a webhook attempt"
    );
    describe_histogram!(
        TICK_CONFIRM_DURATION,
        Unit::Seconds,
        "From handing a tick over to its delivery: the broker's confirmation or the receiver's 2xx"
    );
    describe_gauge!(
        RABBITMQ_CONNECTED,
        "1 while this node holds a live RabbitMQ connection, 0 otherwise (the leader opens it \
         at its first publish)"
    );
    describe_counter!(
        WEBHOOK_ATTEMPTS,
        "Webhook attempts by result: delivered (2xx), failed (retried later) or refused (a 4xx \
         that ends the tick's attempts)"
    );
    describe_counter!(
        WEBHOOK_GIVEN_UP,
        "Webhook ticks given up: refused by their receiver or not delivered within \
         webhook_retry_for_ms"
    );
    describe_counter!(
        WEBHOOK_DEFERRED,
        "Webhook ticks held back without an attempt: their receiver's circuit was open or it \
         had the most ticks in flight"
    );
    describe_gauge!(
        WEBHOOK_RECEIVERS_FAILING,
        "Webhook receivers this node backs off as a whole (circuit open) after failed attempts"
    );
    // The exporter renders a metric only once it has been recorded, and these are recorded
    // only by a leader that ticks. Every node exports them from the start instead: an alert
    // such as `increase(tickd_ticks_dropped_total[15m]) > 0` sees no increase when the first
    // drop creates the series, and a follower's 0 is part of a sum over the nodes.
    // Incrementing by zero keeps a value recorded earlier.
    for name in [
        TICKS_FILED,
        TICKS_LATE,
        TICKS_COALESCED,
        TICKS_DROPPED,
        INTENT_CLOCKS_VISITED,
        TICKS_PUBLISHED,
        TICKS_DELIVERED,
        TICKS_REDELIVERED,
        TICKS_UNROUTABLE,
        TICK_PUBLISH_FAILURES,
        WEBHOOK_GIVEN_UP,
        WEBHOOK_DEFERRED,
    ] {
        counter!(name).increment(0);
    }
    for result in ATTEMPT_RESULTS {
        counter!(WEBHOOK_ATTEMPTS, "result" => result).increment(0);
    }
    gauge!(WEBHOOK_RECEIVERS_FAILING).increment(0.0);
    let _ = histogram!(TICK_PUBLISH_LATENESS);
    let _ = histogram!(TICK_CONFIRM_DURATION);
    gauge!(RABBITMQ_CONNECTED).increment(0.0);
}

/// Counts what one committed intent filed.
pub(crate) fn record_filed(filed: &Filed) {
    counter!(TICKS_FILED).increment(filed.ticks);
    counter!(TICKS_LATE).increment(filed.late);
    counter!(TICKS_COALESCED).increment(filed.coalesced);
    counter!(TICKS_DROPPED).increment(filed.dropped);
    counter!(INTENT_CLOCKS_VISITED).increment(filed.visited);
}

/// Counts one tick handed to its publisher, `lateness` after its instant.
pub(crate) fn record_published(lateness: Duration) {
    counter!(TICKS_PUBLISHED).increment(1);
    record_seconds(TICK_PUBLISH_LATENESS, lateness);
}

/// Counts one tick whose previous leader may have published it already: it was in the outbox
/// and due when this node took over, so its confirmation had not been committed.
pub(crate) fn record_redelivered() {
    counter!(TICKS_REDELIVERED).increment(1);
}

/// Counts one tick delivered `after` its publish.
pub(crate) fn record_delivered(after: Duration) {
    counter!(TICKS_DELIVERED).increment(1);
    record_seconds(TICK_CONFIRM_DURATION, after);
}

/// Counts one tick returned by the broker: its queue is gone.
pub(crate) fn record_unroutable() {
    counter!(TICKS_UNROUTABLE).increment(1);
}

/// Counts one failed or unconfirmed publish.
pub(crate) fn record_publish_failure() {
    counter!(TICK_PUBLISH_FAILURES).increment(1);
}

/// Records whether this node is connected to RabbitMQ.
pub(crate) fn record_connected(connected: bool) {
    gauge!(RABBITMQ_CONNECTED).set(if connected { 1.0 } else { 0.0 });
}

/// Counts one webhook attempt: `healthy` as the receivers' circuit takes it (`Some(true)` for
/// a delivery, `None` for a refusal, `Some(false)` for a failure) and the tick given up if
/// `outcome` says so.
pub(crate) fn record_webhook_attempt(healthy: Option<bool>, outcome: &PublishOutcome) {
    let result = match healthy {
        Some(true) => "delivered",
        None => "refused",
        Some(false) => "failed",
    };
    counter!(WEBHOOK_ATTEMPTS, "result" => result).increment(1);
    if matches!(outcome, PublishOutcome::GaveUp(_)) {
        record_webhook_given_up();
    }
}

/// Counts one webhook tick given up without an attempt (its retry time had run out).
pub(crate) fn record_webhook_given_up() {
    counter!(WEBHOOK_GIVEN_UP).increment(1);
}

/// Counts one webhook tick held back without an attempt.
pub(crate) fn record_webhook_deferred() {
    counter!(WEBHOOK_DEFERRED).increment(1);
}

/// Records how many webhook receivers have an open circuit.
pub(crate) fn record_webhook_circuits(open: usize) {
    gauge!(WEBHOOK_RECEIVERS_FAILING).set(u32::try_from(open).unwrap_or(u32::MAX));
}

/// Records a duration in seconds, the unit of every engine histogram.
fn record_seconds(name: &'static str, value: Duration) {
    histogram!(name).record(value.as_secs_f64());
}
