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
