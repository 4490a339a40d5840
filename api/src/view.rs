//! How a clock looks on the wire (SPEC §1): the exact field names, link order and channel
//! shape Ticktok's clients and dashboard read.

use serde::Serialize;
use tickd_domain::{Channel, Clock, ClockStatus, rfc3339_millis};
use utoipa::ToSchema;

use crate::base_url::BaseUrl;

/// A clock as the API returns it. Ticktok compat: every field, and the order of `links`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Clock)]
pub struct ClockView {
    /// Opaque, URL-safe and stable for the life of the clock.
    id: String,
    /// The name it was registered with: any UTF-8 of 1 to 200 bytes.
    name: String,
    /// The schedule exactly as registered (the literal string is the clock's identity).
    schedule: String,
    /// Ticktok compat: PENDING only in the response to the registration that created the
    /// clock; ACTIVE or PAUSED everywhere else.
    status: ClockStatus,
    /// Only in the response to a registration: where the clock's ticks arrive.
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<ChannelView>,
    /// Absolute URLs, Ticktok compat in their order: `self`, then `resume` (only when
    /// PAUSED), `tick` (always), `pause` (only when not PAUSED).
    links: Vec<Link>,
    /// tickd's: the next scheduled instant, RFC 3339 UTC with milliseconds; null for
    /// `@never`, a paused clock, or an `@at` clock that has fired.
    #[schema(example = "2026-11-30T08:30:00.000Z")]
    next_tick: Option<String>,
    /// tickd's: `next_tick` in the schedule's zone, with its offset (UTC without a `TZ=`).
    #[schema(example = "2026-11-30T09:30:00.000+01:00")]
    next_tick_local: Option<String>,
    /// tickd's (SPEC §5a): the clock's overlap control, `skip` or `buffer_one`; absent for
    /// `allow`, which delivers every instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "skip")]
    overlap: Option<&'static str>,
}

/// A link of a clock to itself or to one of its actions.
#[derive(Debug, Serialize, ToSchema)]
struct Link {
    /// `self`, `resume`, `tick` or `pause`.
    #[schema(value_type = String, example = "self")]
    rel: &'static str,
    /// An absolute URL, based on the request's Host header or the node's `public_url`.
    href: String,
}

/// The channel of a registration response: the typed details, plus the legacy flat `uri` and
/// `queue` fields that older Ticktok clients read.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Channel)]
struct ChannelView {
    /// `rabbit` when the cluster has a RabbitMQ URI configured, `http` otherwise, unless the
    /// registration chose (`http` or `webhook`).
    r#type: ChannelType,
    /// Where to consume the ticks.
    details: ChannelDetails,
    /// Ticktok compat: `details.uri` for a rabbit channel, null for the others.
    uri: Option<String>,
    /// Ticktok compat: `details.queue` for a rabbit channel, null for the others.
    queue: Option<String>,
}

/// The kind of a channel.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum ChannelType {
    /// A RabbitMQ queue.
    Rabbit,
    /// An http poll URL.
    Http,
    /// Ticks `POST`ed to a receiver's URL, signed (Standard Webhooks).
    Webhook,
}

/// Where a channel's ticks are consumed. The three shapes are told apart by their fields (an
/// http channel's details hold nothing but `url`; a webhook's always carry `secret`, null
/// after the registration that created the clock), so the document's `oneOf` has exactly one
/// match for each.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
enum ChannelDetails {
    /// A RabbitMQ queue, declared before the response is sent.
    Rabbit(RabbitDetails),
    /// An http queue.
    Http(HttpDetails),
    /// A webhook.
    Webhook(WebhookDetails),
}

/// A RabbitMQ queue, declared before the response is sent.
#[derive(Debug, Serialize, ToSchema)]
struct RabbitDetails {
    /// The AMQP URI consumers connect to.
    uri: Option<String>,
    /// `ticktok-<name>;<schedule>` (Ticktok compat).
    queue: String,
}

/// An http queue: `GET` this URL (on any node, no token) to pop the waiting ticks.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct HttpDetails {
    /// `{base_url}/api/v1/queues/{queue_id}/pop`.
    url: String,
}

/// A webhook: each tick is `POST`ed to `url`, signed with the clock's secret.
#[derive(Debug, Serialize, ToSchema)]
struct WebhookDetails {
    /// The receiver's URL, as registered.
    url: String,
    /// `whsec_<base64>`, the key of the `webhook-signature` header, in the answer to the
    /// registration that created the clock only (keep it then); null in every other answer.
    #[schema(required = true)]
    secret: Option<String>,
}

/// Where ticks of rabbit channels are consumed: the URI handed to clients.
#[derive(Debug, Clone)]
pub struct ChannelContext<'a> {
    /// The AMQP URI consumers connect to, when the cluster uses RabbitMQ.
    pub rabbit_uri: Option<&'a str>,
}

impl ClockView {
    /// A clock as listed or read: no channel.
    pub fn of(clock: &Clock, base: &BaseUrl, now_ms: u64) -> Self {
        Self::with_status(clock, clock.status, base, now_ms)
    }

    /// A clock as registered: with its channel, and with its status as the response shows it
    /// (PENDING for a clock this request `created`, for Ticktok compatibility). A webhook
    /// clock's secret is shown only to the registration that created it.
    pub fn registered(
        clock: &Clock,
        created: bool,
        base: &BaseUrl,
        context: &ChannelContext<'_>,
        now_ms: u64,
    ) -> Self {
        let shown_status = if created {
            ClockStatus::Pending
        } else {
            clock.status
        };
        let mut view = Self::with_status(clock, shown_status, base, now_ms);
        view.channel = Some(channel_view(clock, base, context, created));
        view
    }

    fn with_status(clock: &Clock, status: ClockStatus, base: &BaseUrl, now_ms: u64) -> Self {
        let next = (clock.status != ClockStatus::Paused)
            .then(|| clock.schedule.next_instant_after(now_ms))
            .flatten();
        Self {
            id: clock.id.to_string(),
            name: clock.name.to_string(),
            schedule: clock.schedule.to_string(),
            status,
            channel: None,
            links: links(clock, status, base),
            next_tick: next.map(rfc3339_millis),
            next_tick_local: next.and_then(|next| clock.schedule.local_time(next)),
            overlap: (!clock.overlap.is_allow()).then(|| clock.overlap.as_str()),
        }
    }
}

/// The URL of a clock, the target of `self` and the base of the action links.
pub fn clock_url(base: &BaseUrl, id: &str) -> String {
    format!("{}/api/v1/clocks/{id}", base.0)
}

/// Links in the compat order: self, resume (when paused), tick, pause (when not paused).
fn links(clock: &Clock, status: ClockStatus, base: &BaseUrl) -> Vec<Link> {
    let this = clock_url(base, &clock.id.text());
    let paused = status == ClockStatus::Paused;
    let mut links = vec![Link {
        rel: "self",
        href: this.clone(),
    }];
    if paused {
        links.push(action_link("resume", &this));
    }
    links.push(action_link("tick", &this));
    if !paused {
        links.push(action_link("pause", &this));
    }
    links
}

fn action_link(rel: &'static str, clock_url: &str) -> Link {
    Link {
        rel,
        href: format!("{clock_url}/{rel}"),
    }
}

fn channel_view(
    clock: &Clock,
    base: &BaseUrl,
    context: &ChannelContext<'_>,
    reveal_secret: bool,
) -> ChannelView {
    match &clock.channel {
        Channel::Rabbit => {
            let uri = context.rabbit_uri.map(str::to_string);
            let queue = Channel::rabbit_queue_name(&clock.name, &clock.schedule);
            ChannelView {
                r#type: ChannelType::Rabbit,
                details: ChannelDetails::Rabbit(RabbitDetails {
                    uri: uri.clone(),
                    queue: queue.clone(),
                }),
                uri,
                queue: Some(queue),
            }
        }
        Channel::Http { queue_id } => ChannelView {
            r#type: ChannelType::Http,
            details: ChannelDetails::Http(HttpDetails {
                url: format!("{}/api/v1/queues/{queue_id}/pop", base.0),
            }),
            uri: None,
            queue: None,
        },
        Channel::Webhook(webhook) => ChannelView {
            r#type: ChannelType::Webhook,
            details: ChannelDetails::Webhook(WebhookDetails {
                url: webhook.url.to_string(),
                secret: reveal_secret.then(|| webhook.secret.expose()),
            }),
            uri: None,
            queue: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickd_domain::{ClockId, QueueId, Schedule};

    fn clock(status: ClockStatus, channel: Channel) -> Clock {
        Clock {
            id: ClockId::new("c1".into()),
            name: "backup".into(),
            schedule: Schedule::parse("every.5.seconds").expect("valid"),
            status,
            channel,
            overlap: tickd_domain::Overlap::Allow,
        }
    }

    fn rels(view: &ClockView) -> Vec<&str> {
        view.links.iter().map(|link| link.rel).collect()
    }

    #[test]
    fn links_follow_the_compat_order() {
        let base = BaseUrl("http://h:1".into());
        let http = Channel::Http {
            queue_id: QueueId::new("q".into()),
        };
        let active = ClockView::of(&clock(ClockStatus::Active, http.clone()), &base, 0);
        assert_eq!(rels(&active), ["self", "tick", "pause"]);
        assert_eq!(active.links[0].href, "http://h:1/api/v1/clocks/c1");
        assert_eq!(active.links[2].href, "http://h:1/api/v1/clocks/c1/pause");
        let paused = ClockView::of(&clock(ClockStatus::Paused, http), &base, 0);
        assert_eq!(rels(&paused), ["self", "resume", "tick"]);
        assert_eq!(paused.next_tick, None, "a paused clock has no next tick");
        assert!(active.next_tick.is_some());
    }

    #[test]
    fn overlap_control_is_shown_only_when_a_clock_has_it() {
        let base = BaseUrl("http://h:1".into());
        let http = Channel::Http {
            queue_id: QueueId::new("q".into()),
        };
        let mut skipping = clock(ClockStatus::Active, http);
        let every = serde_json::to_value(ClockView::of(&skipping, &base, 0)).expect("json");
        assert_eq!(every.get("overlap"), None);
        skipping.overlap = tickd_domain::Overlap::Skip;
        let skip = serde_json::to_value(ClockView::of(&skipping, &base, 0)).expect("json");
        assert_eq!(skip["overlap"], "skip");
    }

    #[test]
    fn channels_carry_details_and_legacy_fields() {
        let base = BaseUrl("http://h:1".into());
        let rabbit = Channel::Rabbit;
        let context = ChannelContext {
            rabbit_uri: Some("amqp://guest:guest@127.0.0.1:5672/%2f"),
        };
        let view = ClockView::registered(
            &clock(ClockStatus::Active, rabbit),
            true,
            &base,
            &context,
            0,
        );
        let json = serde_json::to_value(&view).expect("serializes");
        assert_eq!(json["status"], "PENDING");
        assert_eq!(json["next_tick"], "1970-01-01T00:00:05.000Z");
        assert_eq!(json["next_tick_local"], "1970-01-01T00:00:05.000+00:00");
        assert_eq!(json["channel"]["type"], "rabbit");
        assert_eq!(
            json["channel"]["details"]["queue"],
            "ticktok-backup;every.5.seconds"
        );
        assert_eq!(
            json["channel"]["queue"],
            json["channel"]["details"]["queue"]
        );
        assert_eq!(json["channel"]["uri"], json["channel"]["details"]["uri"]);

        let http = Channel::Http {
            queue_id: QueueId::new("q1".into()),
        };
        let view = ClockView::registered(
            &clock(ClockStatus::Active, http),
            false,
            &base,
            &ChannelContext { rabbit_uri: None },
            0,
        );
        let json = serde_json::to_value(&view).expect("serializes");
        assert_eq!(
            json["channel"]["details"]["url"],
            "http://h:1/api/v1/queues/q1/pop"
        );
        assert!(json["channel"]["uri"].is_null() && json["channel"]["queue"].is_null());
        assert_eq!(
            json["status"], "ACTIVE",
            "a joined clock shows its own status"
        );
    }

    #[test]
    fn a_webhook_channel_shows_its_secret_only_to_the_registration_that_created_it() {
        let base = BaseUrl("http://h:1".into());
        let secret = tickd_domain::WebhookSecret::from_bytes([9; 32]);
        let webhook = Channel::Webhook(Box::new(tickd_domain::Webhook {
            url: tickd_domain::WebhookUrl::parse("https://receiver.example/ticks")
                .expect("a valid url"),
            secret: secret.clone(),
        }));
        let clock = clock(ClockStatus::Active, webhook);
        let context = ChannelContext { rabbit_uri: None };
        let created = serde_json::to_value(ClockView::registered(&clock, true, &base, &context, 0))
            .expect("serializes");
        assert_eq!(created["channel"]["type"], "webhook");
        assert_eq!(
            created["channel"]["details"]["url"],
            "https://receiver.example/ticks"
        );
        assert_eq!(created["channel"]["details"]["secret"], secret.expose());
        assert!(created["channel"]["uri"].is_null() && created["channel"]["queue"].is_null());
        let joined = serde_json::to_value(ClockView::registered(&clock, false, &base, &context, 0))
            .expect("serializes");
        assert_eq!(
            joined["channel"]["details"]["url"],
            "https://receiver.example/ticks"
        );
        assert!(joined["channel"]["details"]["secret"].is_null(), "{joined}");
    }
}
