//! The webhook clocks of a chaos run (SPEC §1, §5): whatever the run's channel, it also
//! registers [`WEBHOOK_CLOCKS`] `every.1.seconds` clocks whose ticks the leader POSTs to a
//! [`Receiver`] in the test process.
//!
//! The nemesis never touches the receiver (it faults the nodes, their links and their clocks,
//! and the broker), so the ticks checker holds these clocks to the strict rule
//! ([`check_strict`](crate::chaos::check::ticks::check_strict)): every instant delivered, within
//! the liveness bound of the last heal. The receiver answers 200 to everything; what it
//! received (2xx-answered, repeats included) goes into the run's [`Records`] like any other
//! consumer's deliveries, stamped with the time it arrived.

use std::time::Instant;

use serde_json::{Value, json};

use crate::chaos::history::Violation;
use crate::chaos::time::now_ms;
use crate::chaos::workload::Records;
use crate::webhook::Receiver;

/// Webhook clocks each run watches.
pub const WEBHOOK_CLOCKS: usize = 2;

/// The receiver of a run's webhook clocks.
pub struct WebhookWatch {
    receiver: Receiver,
    /// When it started, on the monotonic clock and in ms since the epoch: the receiver stamps
    /// deliveries with an [`Instant`], the checkers compare epoch milliseconds.
    started: (Instant, u64),
}

impl WebhookWatch {
    /// Starts a receiver on loopback (the cluster must allow private receivers:
    /// `webhook_allow_private = true`).
    pub async fn start() -> WebhookWatch {
        let receiver = Receiver::start().await;
        WebhookWatch {
            receiver,
            started: (Instant::now(), now_ms()),
        }
    }

    /// The body that registers clock `name` on this receiver.
    pub fn registration(&self, name: &str) -> Value {
        json!({
            "name": name,
            "schedule": "every.1.seconds",
            "channel": { "type": "webhook", "url": self.receiver.url() },
        })
    }

    /// Records every delivery answered 2xx that arrived up to `until_ms` (what the receiver
    /// received while the run consumed), each as many times as it came. Returns a violation
    /// for each whose `webhook-id` header is not the `tick_id` of its body (SPEC §5).
    pub fn record_into(&self, records: &Records, until_ms: u64) -> Vec<Violation> {
        let (started, started_ms) = self.started;
        let mut violations = Vec::new();
        for delivery in self.receiver.deliveries() {
            let elapsed = delivery.at.saturating_duration_since(started).as_millis();
            let received_ms = started_ms.saturating_add(u64::try_from(elapsed).unwrap_or(0));
            if !(200..300).contains(&delivery.answered) || received_ms > until_ms {
                continue;
            }
            let tick = delivery.tick();
            if tick["tick_id"].as_str() != Some(delivery.id.as_str()) {
                violations.push(Violation {
                    checker: crate::chaos::check::ticks::CHECKER,
                    detail: format!(
                        "webhook delivery received at {received_ms} with webhook-id {:?} carries \
                         tick_id {}: body {}",
                        delivery.id, tick["tick_id"], delivery.body
                    ),
                });
            }
            records.push_delivery_received_at(&tick, received_ms);
        }
        violations
    }
}
