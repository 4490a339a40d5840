//! The seam between the leader's loop and whatever carries ticks to their consumers.
//!
//! The loop ([`crate::duties`]) asks [`crate::decisions`] what is due and hands it to a
//! [`Publisher`], which reports what became of each tick as a [`PublishOutcome`], in tickd's own
//! terms: the loop and the decisions know no broker. RabbitMQ is one publisher
//! ([`crate::rabbit`], the only module that knows lapin); webhooks are another
//! ([`crate::webhook`], the only one that knows HTTP); [`crate::dispatch`] hands each tick to
//! the publisher of its destination.
//!
//! Where a tick goes is its [`Destination`], derived from its clock's channel by one
//! exhaustive match ([`destination`]): a channel added to the domain does not compile here
//! until it says where its ticks go, so no tick of a channel without a publisher is ever
//! dropped in silence.
//!
//! Adding a channel that pushes (the http channel does not: its ticks wait in the replicated
//! queue for a poller) takes a variant of [`Destination`] and its arm in [`destination`], one
//! file that implements [`Publisher`] for it, and its wiring in the node, which hands it to
//! [`crate::run`] (ARCHITECTURE.md, "Adding a channel that pushes").

use std::time::Duration;

use futures::future::BoxFuture;
use tickd_domain::webhook::FailingReceivers;
use tickd_domain::{Channel, Clock, Webhook};

use crate::decisions::Outgoing;

/// Where a tick is delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A RabbitMQ queue, `ticktok-<name>;<schedule>` (Ticktok's channel).
    Rabbit {
        /// The queue's name.
        queue: String,
    },
    /// A receiver's URL, with the clock's signing secret.
    Webhook(Box<Webhook>),
}

/// Where the ticks of `clock` are delivered by a publisher, or `None` when its channel needs
/// none: an http clock's ticks are filed straight into its replicated queue.
pub fn destination(clock: &Clock) -> Option<Destination> {
    match &clock.channel {
        Channel::Rabbit => Some(Destination::Rabbit {
            queue: Channel::rabbit_queue_name(&clock.name, &clock.schedule),
        }),
        Channel::Http { .. } => None,
        Channel::Webhook(webhook) => Some(Destination::Webhook(webhook.clone())),
    }
}

/// What became of one tick handed to a publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// Stored where its consumers read it, `after` the publish (RabbitMQ confirmed it).
    Delivered {
        /// How long after the publish the destination said so.
        after: Duration,
    },
    /// The destination no longer exists (RabbitMQ returned the tick: its queue is gone), so
    /// nobody consumes the clock.
    Unroutable,
    /// Not delivered this time, for the reason given: the tick stays in the outbox and is
    /// published again with its id at the next pass.
    Failed(String),
    /// This attempt failed for the reason given; the tick stays in the outbox and is tried
    /// again with its id once `after` has passed (a webhook's backoff, or its receiver's
    /// `Retry-After`).
    RetryAfter {
        /// How long to wait before the next attempt.
        after: Duration,
        /// Why this attempt failed.
        reason: String,
    },
    /// Not attempted, for the reason given (its receiver is backed off or busy, its kind's
    /// publisher unreachable): the tick stays in the outbox and is offered again once `after`
    /// has passed, without counting as an attempt.
    Deferred {
        /// How long to wait before offering it again.
        after: Duration,
        /// Why it was not attempted.
        reason: String,
    },
    /// The attempts ended without a delivery, for the reason given (a receiver that refused
    /// the tick, or retries that ran out of time): the tick leaves the outbox undelivered.
    GaveUp(String),
    /// Given up without an attempt, for the reason given: its time to be tried ran out while
    /// it waited (for its backoff, an open circuit or a new leader). It leaves the outbox
    /// undelivered, and no attempt is counted for it.
    Expired(String),
}

/// The outcome of one published tick, once the destination has answered.
pub type Settlement = BoxFuture<'static, PublishOutcome>;

/// A publish of which nothing was handed over (the destination is unreachable): every tick
/// stays in the outbox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Carries ticks to a kind of destination.
pub trait Publisher: Send + Sync {
    /// Hands `ticks` over, in order. `Ok` holds one settlement per tick, in the same order,
    /// each resolving once the destination has said what became of its tick; `Err` means none
    /// was handed over.
    fn publish<'a>(
        &'a self,
        ticks: &'a [Outgoing],
    ) -> BoxFuture<'a, Result<Vec<Settlement>, Refused>>;

    /// The receivers whose last attempt failed, for the cluster's status: none for a publisher
    /// that does not judge receivers one by one (RabbitMQ's broker is one destination, whose
    /// outage its own metrics and log report).
    fn failing_receivers(&self) -> FailingReceivers {
        FailingReceivers::default()
    }
}

#[cfg(test)]
mod tests {
    use tickd_domain::{ClockId, ClockStatus, QueueId, Schedule};

    use super::*;

    fn clock(channel: Channel) -> Clock {
        Clock {
            id: ClockId::new("c1".to_owned()),
            name: "orders".into(),
            schedule: Schedule::parse("every.5.seconds").expect("a valid schedule"),
            channel,
            status: ClockStatus::Active,
            overlap: tickd_domain::Overlap::Allow,
        }
    }

    #[test]
    fn a_rabbit_clocks_ticks_go_to_its_ticktok_queue_and_an_http_clocks_to_no_publisher() {
        assert_eq!(
            destination(&clock(Channel::Rabbit)),
            Some(Destination::Rabbit {
                queue: "ticktok-orders;every.5.seconds".to_owned()
            })
        );
        let http = Channel::Http {
            queue_id: QueueId::new("q1".to_owned()),
        };
        assert_eq!(destination(&clock(http)), None);
    }
}
