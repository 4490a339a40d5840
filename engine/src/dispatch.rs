//! One publisher for the loop, made of one per kind of destination: each tick goes to the
//! publisher of its [`Destination`], and the settlements come back in the ticks' order.
//!
//! A kind whose publisher refuses a publish (RabbitMQ unreachable) or that has none (no broker
//! configured) costs only its own ticks a wait: they settle as [`PublishOutcome::Deferred`]
//! with the loop's retry pause, and the other kind's ticks go out as usual. Only a publish in
//! which every publisher refused is refused as a whole, as a single publisher's would be.

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::{self, BoxFuture};
use tickd_domain::webhook::FailingReceivers;

use crate::decisions::{Outgoing, PUBLISH_RETRY_PAUSE};
use crate::publisher::{Destination, PublishOutcome, Publisher, Refused, Settlement};
use crate::telemetry;

/// The kinds of destination, as the dispatcher groups ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Rabbit,
    Webhook,
}

impl Kind {
    fn of(destination: &Destination) -> Kind {
        match destination {
            Destination::Rabbit { .. } => Kind::Rabbit,
            Destination::Webhook(_) => Kind::Webhook,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Rabbit => "RabbitMQ",
            Kind::Webhook => "webhook",
        }
    }
}

/// The publishers of a node: RabbitMQ when a broker is configured, and webhooks.
#[derive(Clone)]
pub struct Publishers {
    /// RabbitMQ's, if this node has a broker.
    pub rabbit: Option<Arc<dyn Publisher>>,
    /// The webhook publisher.
    pub webhook: Arc<dyn Publisher>,
}

impl Publishers {
    fn of(&self, kind: Kind) -> Option<&Arc<dyn Publisher>> {
        match kind {
            Kind::Rabbit => self.rabbit.as_ref(),
            Kind::Webhook => Some(&self.webhook),
        }
    }

    /// Publishes `ticks`, all of one `kind`; without a publisher of that kind, refuses them.
    async fn publish_kind(
        &self,
        kind: Kind,
        ticks: &[Outgoing],
    ) -> Result<Vec<Settlement>, Refused> {
        let Some(publisher) = self.of(kind) else {
            return Err(Refused(format!(
                "{} ticks wait: this node has no {} publisher (no broker configured)",
                kind.name(),
                kind.name()
            )));
        };
        publisher.publish(ticks).await
    }
}

/// Every tick of a refused kind waits for the retry pause.
fn wait_all(count: usize, refused: &Refused) -> Vec<Settlement> {
    (0..count)
        .map(|_| {
            future::ready(PublishOutcome::Deferred {
                after: PUBLISH_RETRY_PAUSE,
                reason: refused.0.clone(),
            })
            .boxed()
        })
        .collect()
}

impl Publisher for Publishers {
    fn publish<'a>(
        &'a self,
        ticks: &'a [Outgoing],
    ) -> BoxFuture<'a, Result<Vec<Settlement>, Refused>> {
        async move {
            let Some(first) = ticks.first() else {
                return Ok(Vec::new());
            };
            let first_kind = Kind::of(&first.destination);
            // The usual pass holds one kind: its slice goes as it is, without a copy.
            if ticks
                .iter()
                .all(|tick| Kind::of(&tick.destination) == first_kind)
            {
                return self.publish_kind(first_kind, ticks).await;
            }
            let mut settlements: Vec<Option<Settlement>> = ticks.iter().map(|_| None).collect();
            let mut refusals = Vec::new();
            for kind in [Kind::Rabbit, Kind::Webhook] {
                let (positions, group): (Vec<usize>, Vec<Outgoing>) = ticks
                    .iter()
                    .enumerate()
                    .filter(|(_, tick)| Kind::of(&tick.destination) == kind)
                    .map(|(position, tick)| (position, tick.clone()))
                    .unzip();
                if group.is_empty() {
                    continue;
                }
                let group_settlements = match self.publish_kind(kind, &group).await {
                    Ok(settlements) => settlements,
                    Err(refused) => {
                        telemetry::record_publish_failure();
                        tracing::warn!(%refused, "a publish failed; its ticks stay in the outbox");
                        let waits = wait_all(group.len(), &refused);
                        refusals.push(refused);
                        waits
                    }
                };
                for (position, settlement) in positions.into_iter().zip(group_settlements) {
                    settlements[position] = Some(settlement);
                }
            }
            if refusals.len() == 2 {
                let reasons: Vec<String> = refusals.into_iter().map(|refused| refused.0).collect();
                return Err(Refused(reasons.join("; ")));
            }
            Ok(settlements
                .into_iter()
                .map(|settlement| {
                    settlement.unwrap_or_else(|| {
                        future::ready(PublishOutcome::Failed(
                            "a publisher answered for fewer ticks than it was given".into(),
                        ))
                        .boxed()
                    })
                })
                .collect())
        }
        .boxed()
    }

    fn failing_receivers(&self) -> FailingReceivers {
        self.webhook.failing_receivers()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tickd_domain::webhook::{FailingReceiver, SECRET_BYTES};
    use tickd_domain::{ClockId, Schedule, Tick, Webhook, WebhookSecret, WebhookUrl};

    use super::*;

    /// A publisher that records what it is handed and settles each tick as failed with its
    /// own name and the tick's id, so that a test can tell who settled what; or refuses, or
    /// answers for one tick fewer than it was given.
    struct Recording {
        name: &'static str,
        refuse: bool,
        one_short: bool,
        handed: Mutex<Vec<String>>,
    }

    impl Recording {
        fn build(name: &'static str, refuse: bool, one_short: bool) -> Arc<Self> {
            Arc::new(Recording {
                name,
                refuse,
                one_short,
                handed: Mutex::default(),
            })
        }

        fn new(name: &'static str) -> Arc<Self> {
            Recording::build(name, false, false)
        }

        fn refusing(name: &'static str) -> Arc<Self> {
            Recording::build(name, true, false)
        }

        fn one_short(name: &'static str) -> Arc<Self> {
            Recording::build(name, false, true)
        }

        fn handed(&self) -> Vec<String> {
            self.handed.lock().expect("the record").clone()
        }
    }

    impl Publisher for Recording {
        fn publish<'a>(
            &'a self,
            ticks: &'a [Outgoing],
        ) -> BoxFuture<'a, Result<Vec<Settlement>, Refused>> {
            self.handed
                .lock()
                .expect("the record")
                .extend(ticks.iter().map(|outgoing| outgoing.tick.id.to_string()));
            if self.refuse {
                return future::ready(Err(Refused(format!("{} is down", self.name)))).boxed();
            }
            let answered = ticks.len() - usize::from(self.one_short);
            let settlements = ticks[..answered]
                .iter()
                .map(|outgoing| {
                    let outcome =
                        PublishOutcome::Failed(format!("{} {}", self.name, outgoing.tick.id));
                    future::ready(outcome).boxed()
                })
                .collect();
            future::ready(Ok(settlements)).boxed()
        }

        fn failing_receivers(&self) -> FailingReceivers {
            FailingReceivers::of(vec![FailingReceiver {
                receiver: format!("{}:443", self.name),
                failures: 1,
                failing_for_ms: 0,
                circuit_open: false,
                last_error: String::new(),
            }])
        }
    }

    fn rabbit() -> Destination {
        Destination::Rabbit {
            queue: "ticktok-n;every.1.seconds".to_owned(),
        }
    }

    fn webhook() -> Destination {
        Destination::Webhook(Box::new(Webhook {
            url: WebhookUrl::parse("https://hooks.example.com/tick").expect("a valid url"),
            secret: WebhookSecret::from_bytes([7; SECRET_BYTES]),
        }))
    }

    /// A tick due at `second` (its id says which) bound for `destination`.
    fn outgoing(second: u64, destination: Destination) -> Outgoing {
        let schedule = Schedule::parse("every.1.seconds").expect("a schedule");
        let tick = Tick::scheduled(
            &ClockId::new("c".to_owned()),
            "n",
            &schedule,
            second * 1_000,
        );
        Outgoing {
            key: (tick.due_at_ms, tick.id.clone()),
            tick,
            destination,
            redelivery: false,
            attempt: 1,
            now_ms: second * 1_000,
        }
    }

    async fn outcomes(settlements: Vec<Settlement>) -> Vec<PublishOutcome> {
        future::join_all(settlements).await
    }

    fn failed(by: &str, second: u64) -> PublishOutcome {
        PublishOutcome::Failed(format!("{by} c-{}", second * 1_000))
    }

    #[tokio::test]
    async fn each_tick_goes_to_the_publisher_of_its_kind_and_settles_in_its_own_place() {
        let (rabbit_publisher, webhook_publisher) =
            (Recording::new("rabbit"), Recording::new("hook"));
        let publishers = Publishers {
            rabbit: Some(rabbit_publisher.clone()),
            webhook: webhook_publisher.clone(),
        };
        let ticks = [
            outgoing(1, webhook()),
            outgoing(2, rabbit()),
            outgoing(3, webhook()),
            outgoing(4, rabbit()),
        ];
        let settlements = publishers
            .publish(&ticks)
            .await
            .expect("both kinds publish");
        assert_eq!(
            outcomes(settlements).await,
            [
                failed("hook", 1),
                failed("rabbit", 2),
                failed("hook", 3),
                failed("rabbit", 4)
            ]
        );
        assert_eq!(rabbit_publisher.handed(), ["c-2000", "c-4000"]);
        assert_eq!(webhook_publisher.handed(), ["c-1000", "c-3000"]);

        let webhooks_only = [outgoing(5, webhook()), outgoing(6, webhook())];
        let settlements = publishers.publish(&webhooks_only).await.expect("published");
        assert_eq!(
            outcomes(settlements).await,
            [failed("hook", 5), failed("hook", 6)]
        );
        assert_eq!(rabbit_publisher.handed().len(), 2, "RabbitMQ is not asked");
        assert_eq!(
            publishers.failing_receivers().longest[0].receiver,
            "hook:443",
            "the failing receivers are the webhook publisher's"
        );
    }

    #[tokio::test]
    async fn a_kind_without_a_publisher_or_refused_waits_while_the_other_goes_out() {
        let webhook_publisher = Recording::new("hook");
        let without_broker = Publishers {
            rabbit: None,
            webhook: webhook_publisher.clone(),
        };
        let mixed = [outgoing(1, rabbit()), outgoing(2, webhook())];
        let settlements = without_broker
            .publish(&mixed)
            .await
            .expect("webhooks publish");
        let outcomes_now = outcomes(settlements).await;
        match &outcomes_now[0] {
            PublishOutcome::Deferred { after, reason } => {
                assert_eq!(*after, PUBLISH_RETRY_PAUSE);
                assert!(reason.contains("no RabbitMQ publisher"), "{reason}");
            }
            other => panic!("a RabbitMQ tick without a broker waits, not {other:?}"),
        }
        assert_eq!(outcomes_now[1], failed("hook", 2));

        let refused = without_broker
            .publish(&[outgoing(3, rabbit())])
            .await
            .err()
            .expect("a publish of RabbitMQ ticks alone is refused without a broker");
        assert!(refused.0.contains("no broker configured"), "{}", refused.0);

        let both_down = Publishers {
            rabbit: Some(Recording::refusing("rabbit")),
            webhook: Recording::refusing("hook"),
        };
        let refused = both_down
            .publish(&mixed)
            .await
            .err()
            .expect("every publisher refused: the publish is refused");
        assert_eq!(refused.0, "rabbit is down; hook is down");
    }

    #[tokio::test]
    async fn a_publisher_that_answers_for_fewer_ticks_fails_the_rest() {
        let publishers = Publishers {
            rabbit: Some(Recording::new("rabbit")),
            webhook: Recording::one_short("hook"),
        };
        let mixed = [
            outgoing(1, rabbit()),
            outgoing(2, webhook()),
            outgoing(3, webhook()),
        ];
        let settlements = publishers.publish(&mixed).await.expect("published");
        let outcomes_now = outcomes(settlements).await;
        assert_eq!(outcomes_now[..2], [failed("rabbit", 1), failed("hook", 2)]);
        assert!(
            matches!(&outcomes_now[2], PublishOutcome::Failed(reason) if reason.contains("fewer ticks")),
            "{:?}",
            outcomes_now[2]
        );
    }
}
