//! Webhooks as the engine's publisher of [`Destination::Webhook`] ticks (SPEC §5): each tick
//! `POST`ed as its JSON message to its clock's URL, signed as Standard Webhooks specifies,
//! `webhook-id` = its `tick_id`.
//!
//! One attempt per publish; what follows is the loop's, from the [`PublishOutcome`] each
//! attempt settles as:
//!
//! * a 2xx is [`PublishOutcome::Delivered`];
//! * a 4xx other than 408 and 429 is [`PublishOutcome::GaveUp`] at once: the receiver refused
//!   the tick, and asking again would not change its mind;
//! * anything else (another status, a redirect, which is never followed, no answer within the
//!   attempt timeout, a refused connection or address) is [`PublishOutcome::RetryAfter`] an
//!   exponential backoff with jitter ([`backoff`]), or the receiver's `Retry-After` if it
//!   asks for longer, until `retry_for` after the tick's instant; then it is given up, and a
//!   tick handed over after that time (it waited for its backoff, an open circuit or a new
//!   leader) is [`PublishOutcome::Expired`] without an attempt.
//!
//! The outbox keeps every tick until it is delivered or given up, and the decisions keep the
//! waits: a new leader tries every unconfirmed tick again at once, with the same
//! `webhook-id`. Isolation, per receiver and in total, is `receivers`'s.

mod receivers;
mod resolver;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::FutureExt as _;
use futures::future::{self, BoxFuture};
use rand::Rng as _;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use tickd_domain::webhook::{FailingReceivers, address_allowed};
use tickd_domain::{Tick, Webhook};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::decisions::Outgoing;
use crate::publisher::{Destination, PublishOutcome, Publisher, Refused, Settlement};
use crate::telemetry;

pub use receivers::{CIRCUIT_FAILURES, CIRCUIT_OPEN, CIRCUIT_OPEN_MAX};

use receivers::{Admission, Change, Receivers};
use resolver::PublicResolver;

/// The first backoff; each failed attempt doubles it, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two attempts of one tick (a receiver's `Retry-After` may ask for
/// longer, within the retry time).
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How much of a receiver's answer is read: enough for the reason of a failure in the log.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024;
/// How long a connection may take to open, within the attempt's timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The webhook settings of the cluster file.
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// How long after its instant a tick is still tried (`webhook_retry_for_ms`).
    pub retry_for: Duration,
    /// How long one attempt may take, answer read included (`webhook_timeout_ms`).
    pub attempt_timeout: Duration,
    /// Whether ticks may go to loopback, private and other internal addresses
    /// (`webhook_allow_private`).
    pub allow_private: bool,
    /// Attempts at once to one receiver (host and port).
    pub per_receiver: usize,
    /// Ticks admitted for one receiver, running or waiting for one of its slots.
    pub admitted_per_receiver: usize,
    /// Attempts at once to all receivers together.
    pub total: usize,
}

/// Why the webhook client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the webhook HTTP client: {0}")]
pub struct ClientError(String);

/// The webhook publisher.
#[derive(Clone)]
pub struct Webhooks {
    client: reqwest::Client,
    settings: WebhookSettings,
    receivers: Arc<Mutex<Receivers>>,
    total: Arc<Semaphore>,
    user_agent: String,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    /// A publisher with `settings` that trusts `tls`'s roots for `https` (the system's and
    /// `webhook_ca_file`'s, as the node builds it). `node` names this node in the User-Agent.
    pub fn new(
        settings: WebhookSettings,
        tls: rustls::ClientConfig,
        node: &str,
    ) -> Result<Self, ClientError> {
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.attempt_timeout)
            .connect_timeout(CONNECT_TIMEOUT.min(settings.attempt_timeout))
            .pool_max_idle_per_host(settings.per_receiver)
            .dns_resolver(Arc::new(PublicResolver {
                allow_private: settings.allow_private,
            }))
            .build()
            .map_err(|error| ClientError(error.to_string()))?;
        Ok(Webhooks {
            client,
            receivers: Arc::new(Mutex::new(Receivers::new(
                settings.per_receiver,
                settings.admitted_per_receiver,
            ))),
            total: Arc::new(Semaphore::new(settings.total.max(1))),
            settings,
            user_agent: format!("tickd/{} ({node})", env!("CARGO_PKG_VERSION")),
        })
    }

    /// The receivers' state, whatever a panicking holder left: every change to it is one
    /// step that leaves it consistent.
    fn receivers(&self) -> std::sync::MutexGuard<'_, Receivers> {
        self.receivers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The settlement of one tick to `webhook`, its `attempt`-th by this leader, handed over
    /// at `now_ms` by the majority's time.
    fn settlement(&self, tick: &Tick, webhook: &Webhook, attempt: u32, now_ms: u64) -> Settlement {
        let deadline_ms = tick
            .due_at_ms
            .saturating_add(duration_ms(self.settings.retry_for));
        if now_ms >= deadline_ms {
            telemetry::record_webhook_given_up();
            return ready(PublishOutcome::Expired(format!(
                "not delivered within webhook_retry_for_ms ({} ms) of its instant",
                duration_ms(self.settings.retry_for)
            )));
        }
        if let Some(address) = webhook.url.literal_address()
            && !address_allowed(address, self.settings.allow_private)
        {
            let outcome = self.retry(
                attempt,
                None,
                Deadline {
                    at_ms: deadline_ms,
                    now_ms,
                },
                format!(
                    "{address} is not a public address; ticks are not sent to internal \
                     addresses unless the cluster file sets webhook_allow_private = true"
                ),
            );
            telemetry::record_webhook_attempt(Some(false), &outcome);
            return ready(outcome);
        }
        let receiver = webhook.url.authority();
        let slots = match self.receivers().admit(&receiver, Instant::now()) {
            Admission::Go(slots) => slots,
            Admission::Wait { after, reason } => {
                telemetry::record_webhook_deferred();
                return ready(PublishOutcome::Deferred {
                    after,
                    reason: reason.to_owned(),
                });
            }
        };
        let this = self.clone();
        let (tick, webhook) = (tick.clone(), webhook.clone());
        let handed_over = Instant::now();
        let task = tokio::spawn(async move {
            // The receiver's own slot first: a tick that waits for its receiver must not hold
            // one of the slots every receiver shares.
            let slot = slots.acquire().await;
            let total = this.total.acquire().await;
            // The majority's time now: the hand-over's, and what the monotonic clock says has
            // passed since.
            let at = |instant: Instant| {
                now_ms.saturating_add(duration_ms(instant.saturating_duration_since(handed_over)))
            };
            let started = Instant::now();
            let answer = this.request(&tick, &webhook, at(started)).send().await;
            let elapsed = started.elapsed();
            let deadline = Deadline {
                at_ms: deadline_ms,
                now_ms: at(Instant::now()),
            };
            let (healthy, outcome) = match answer {
                Ok(response) => this.answered(response, elapsed, attempt, deadline).await,
                Err(error) => (
                    Some(false),
                    this.retry(attempt, None, deadline, describe(&error)),
                ),
            };
            // The answer is read: the next attempts may go while this one is accounted for.
            drop((total, slot));
            telemetry::record_webhook_attempt(healthy, &outcome);
            match this
                .receivers()
                .finished(&receiver, healthy, reason_of(&outcome), Instant::now())
            {
                Change::None => {}
                Change::StartedFailing => tracing::warn!(
                    receiver = %receiver,
                    reason = %reason_of(&outcome),
                    "a webhook receiver failed a delivery; its ticks are retried with backoff"
                ),
                Change::Opened => tracing::warn!(
                    receiver = %receiver,
                    failures = CIRCUIT_FAILURES,
                    reason = %reason_of(&outcome),
                    "a webhook receiver keeps failing: its ticks are held back and it is probed \
                     now and then (circuit open)"
                ),
            }
            telemetry::record_webhook_circuits(this.receivers().open_circuits());
            outcome
        });
        task.map(|joined| {
            joined.unwrap_or_else(|error| PublishOutcome::RetryAfter {
                after: FIRST_BACKOFF,
                reason: format!("the attempt's task ended: {error}"),
            })
        })
        .boxed()
    }

    /// The signed request of `tick` to `webhook`, sent at `now_ms`.
    fn request(&self, tick: &Tick, webhook: &Webhook, now_ms: u64) -> reqwest::RequestBuilder {
        let body = serde_json::to_vec(&tick.message()).unwrap_or_default();
        let id = tick.id.to_string();
        let timestamp_s = now_ms / 1_000;
        let signature = webhook.secret.sign(&id, timestamp_s, &body);
        self.client
            .post(webhook.url.as_url().clone())
            .header(CONTENT_TYPE, "application/json")
            .header(reqwest::header::USER_AGENT, &self.user_agent)
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp_s.to_string())
            .header("webhook-signature", signature)
            .body(body)
    }

    /// What an answer means, with the receiver's health: a 2xx delivers; a 4xx but 408 and
    /// 429 refuses the tick for good (the receiver is up); anything else is retried.
    async fn answered(
        &self,
        mut response: reqwest::Response,
        elapsed: Duration,
        attempt: u32,
        deadline: Deadline,
    ) -> (Option<bool>, PublishOutcome) {
        let status = response.status();
        let asked_wait = retry_after(response.headers());
        // Read even after a success: a connection is pooled again only once its answer is.
        let excerpt = read_excerpt(&mut response).await;
        if status.is_success() {
            return (Some(true), PublishOutcome::Delivered { after: elapsed });
        }
        let reason = if excerpt.is_empty() {
            format!("the receiver answered {status}")
        } else {
            format!("the receiver answered {status}: {excerpt}")
        };
        if refuses_for_good(status) {
            return (None, PublishOutcome::GaveUp(reason));
        }
        (
            Some(false),
            self.retry(attempt, asked_wait, deadline, reason),
        )
    }

    /// The retry after a failed `attempt`: the backoff, or the receiver's `asked_wait` if
    /// longer; given up if the next attempt would come after the deadline.
    fn retry(
        &self,
        attempt: u32,
        asked_wait: Option<Duration>,
        deadline: Deadline,
        reason: String,
    ) -> PublishOutcome {
        let wait =
            backoff(attempt, rand::rng().random::<f64>()).max(asked_wait.unwrap_or_default());
        if deadline.now_ms.saturating_add(duration_ms(wait)) >= deadline.at_ms {
            return PublishOutcome::GaveUp(format!(
                "{reason}; the next attempt would come after webhook_retry_for_ms ({} ms) of \
                 its instant",
                duration_ms(self.settings.retry_for)
            ));
        }
        PublishOutcome::RetryAfter {
            after: wait,
            reason,
        }
    }
}

impl Publisher for Webhooks {
    fn publish<'a>(
        &'a self,
        ticks: &'a [Outgoing],
    ) -> BoxFuture<'a, Result<Vec<Settlement>, Refused>> {
        let settlements = ticks
            .iter()
            .map(|outgoing| match &outgoing.destination {
                Destination::Webhook(webhook) => {
                    self.settlement(&outgoing.tick, webhook, outgoing.attempt, outgoing.now_ms)
                }
                Destination::Rabbit { .. } => ready(PublishOutcome::Failed(
                    "a RabbitMQ tick was handed to the webhook publisher".into(),
                )),
            })
            .collect();
        future::ready(Ok(settlements)).boxed()
    }

    fn failing_receivers(&self) -> FailingReceivers {
        self.receivers().failing(Instant::now())
    }
}

/// When a tick's attempts end, and the majority's time now, in milliseconds since the epoch.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at_ms: u64,
    now_ms: u64,
}

/// Whether an answer `status` refuses the tick for good: a 4xx, but for 408 (Request Timeout)
/// and 429 (Too Many Requests), which ask to be tried again later.
fn refuses_for_good(status: StatusCode) -> bool {
    status.is_client_error()
        && status != StatusCode::REQUEST_TIMEOUT
        && status != StatusCode::TOO_MANY_REQUESTS
}

/// The wait after a failed `attempt` (1 for the first): [`FIRST_BACKOFF`] doubled for each
/// attempt before it, at most [`MAX_BACKOFF`], with "equal jitter": half of it fixed and the
/// other half scaled by `jitter` (a random number in [0, 1)), so that the ticks of a receiver
/// that failed them together do not come back together.
pub fn backoff(attempt: u32, jitter: f64) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    let full = FIRST_BACKOFF
        .saturating_mul(1u32 << doublings)
        .min(MAX_BACKOFF);
    let half = full / 2;
    half + half.mul_f64(jitter.clamp(0.0, 1.0))
}

/// The wait a `Retry-After` header asks for: seconds, or an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

/// At most [`MAX_RESPONSE_BYTES`] of an answer's body, as text for a log line; the rest is
/// never read.
async fn read_excerpt(response: &mut reqwest::Response) -> String {
    let mut read = Vec::new();
    while read.len() < MAX_RESPONSE_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => read.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    read.truncate(MAX_RESPONSE_BYTES);
    let text = String::from_utf8_lossy(&read);
    let text: String = text.chars().take(200).collect();
    text.trim().to_owned()
}

/// An error with its causes, as one line: reqwest's own says only "error sending request".
fn describe(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "no answer within webhook_timeout_ms".to_owned()
    } else {
        error.to_string()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Why an attempt failed, for the log.
fn reason_of(outcome: &PublishOutcome) -> &str {
    match outcome {
        PublishOutcome::RetryAfter { reason, .. }
        | PublishOutcome::Deferred { reason, .. }
        | PublishOutcome::GaveUp(reason)
        | PublishOutcome::Expired(reason)
        | PublishOutcome::Failed(reason) => reason,
        PublishOutcome::Delivered { .. } | PublishOutcome::Unroutable => "",
    }
}

fn ready(outcome: PublishOutcome) -> Settlement {
    future::ready(outcome).boxed()
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;
    use tickd_domain::{ClockId, Schedule, WebhookSecret, WebhookUrl};

    use super::*;

    const HOUR_MS: u64 = 3_600_000;

    fn publisher() -> Webhooks {
        publisher_allowing_private(true)
    }

    fn publisher_allowing_private(allow_private: bool) -> Webhooks {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("the default protocol versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let settings = WebhookSettings {
            retry_for: Duration::from_millis(HOUR_MS),
            attempt_timeout: Duration::from_secs(2),
            allow_private,
            per_receiver: 2,
            admitted_per_receiver: 10,
            total: 4,
        };
        Webhooks::new(settings, tls, "test").expect("a client")
    }

    /// A leader's own clock may jump before its clock monitor notices; the retry time is
    /// judged by the time the loop handed the tick over (the majority's), so such a jump gives
    /// nothing up. The tick here is due in 1970: by this machine's clock its hour is long gone.
    #[tokio::test]
    async fn the_retry_time_is_judged_by_the_time_handed_over_never_the_nodes_own_clock() {
        let webhooks = publisher();
        let webhook = Webhook {
            // Port 9 on loopback refuses the connection: a failed attempt.
            url: WebhookUrl::parse("http://127.0.0.1:9/hook").expect("a valid url"),
            secret: WebhookSecret::from_bytes([3; tickd_domain::webhook::SECRET_BYTES]),
        };
        let schedule = Schedule::parse("every.1.seconds").expect("a schedule");
        let due_ms = 1_000_000;
        let tick = Tick::scheduled(&ClockId::new("c1".to_owned()), "n", &schedule, due_ms);
        let within = webhooks
            .settlement(&tick, &webhook, 1, due_ms + HOUR_MS - 60_000)
            .await;
        assert!(
            matches!(within, PublishOutcome::RetryAfter { .. }),
            "a minute before the hour is up, a failed attempt is retried: {within:?}"
        );
        let after = webhooks
            .settlement(&tick, &webhook, 1, due_ms + HOUR_MS)
            .await;
        assert!(
            matches!(after, PublishOutcome::Expired(_)),
            "an hour after its instant, a tick is given up without an attempt: {after:?}"
        );
    }

    fn webhook_to(url: &str) -> Webhook {
        Webhook {
            url: WebhookUrl::parse(url).expect("a valid url"),
            secret: WebhookSecret::from_bytes([3; tickd_domain::webhook::SECRET_BYTES]),
        }
    }

    fn tick_due_at(due_ms: u64) -> Tick {
        let schedule = Schedule::parse("every.1.seconds").expect("a schedule");
        Tick::scheduled(&ClockId::new("c1".to_owned()), "n", &schedule, due_ms)
    }

    /// SPEC §5's address rule at delivery, for a URL that names an address: without
    /// `webhook_allow_private`, loopback is refused before any connection is made; with it, the
    /// attempt is made (port 9 refuses it), and the receiver is reported failing with why.
    #[tokio::test]
    async fn an_internal_address_is_refused_before_connecting_unless_private_ones_are_allowed() {
        let webhook = webhook_to("http://127.0.0.1:9/hook");
        let due_ms = 1_000_000;
        let strict = publisher_allowing_private(false);
        match strict
            .settlement(&tick_due_at(due_ms), &webhook, 1, due_ms)
            .await
        {
            PublishOutcome::RetryAfter { reason, .. } => assert!(
                reason.starts_with("127.0.0.1 is not a public address"),
                "{reason}"
            ),
            other => panic!("a loopback receiver is refused, not {other:?}"),
        }
        assert_eq!(strict.failing_receivers().count, 0, "no attempt was made");

        let open = publisher_allowing_private(true);
        match open
            .settlement(&tick_due_at(due_ms), &webhook, 1, due_ms)
            .await
        {
            PublishOutcome::RetryAfter { reason, .. } => {
                assert!(reason.contains("Connection refused"), "{reason}");
            }
            other => panic!("a refused connection is retried, not {other:?}"),
        }
        let failing = open.failing_receivers();
        assert_eq!(failing.count, 1, "{failing:?}");
        assert_eq!(failing.longest[0].receiver, "127.0.0.1:9");
        assert!(
            failing.longest[0].last_error.contains("Connection refused"),
            "{failing:?}"
        );
    }

    /// The signed request: Standard Webhooks' three headers, `webhook-id` = `tick_id`, the
    /// timestamp in seconds of the time handed over, and the tick's message as the body.
    #[test]
    fn a_request_carries_the_tick_signed_at_the_time_handed_over() {
        let webhooks = publisher();
        let webhook = webhook_to("https://hooks.example.com/tick");
        let tick = tick_due_at(1_000_000);
        let request = webhooks
            .request(&tick, &webhook, 1_234_567)
            .build()
            .expect("a request");
        let header = |name: &str| {
            request.headers()[name]
                .to_str()
                .expect("a text header")
                .to_owned()
        };
        let body = request
            .body()
            .and_then(reqwest::Body::as_bytes)
            .expect("a body in memory")
            .to_vec();
        assert_eq!(request.url().as_str(), "https://hooks.example.com/tick");
        assert_eq!(header("webhook-id"), tick.id.to_string());
        assert_eq!(header("webhook-timestamp"), "1234");
        assert_eq!(
            header("webhook-signature"),
            webhook.secret.sign(&tick.id.to_string(), 1_234, &body)
        );
        assert_eq!(header("content-type"), "application/json");
        let message: tickd_domain::TickMessage =
            serde_json::from_slice(&body).expect("the body is the tick's message");
        assert_eq!(message, tick.message());
    }

    fn answer(status: u16, retry_after: Option<&str>, body: &str) -> reqwest::Response {
        let mut builder = http::Response::builder().status(status);
        if let Some(wait) = retry_after {
            builder = builder.header(RETRY_AFTER, wait);
        }
        reqwest::Response::from(builder.body(body.to_owned()).expect("an answer"))
    }

    /// What each answer means: a 2xx delivers; a 4xx but 408 and 429 gives up at once with
    /// the receiver's words; the rest is retried, after the receiver's `Retry-After` when it
    /// asks for longer than the backoff.
    #[tokio::test]
    async fn answers_deliver_refuse_for_good_or_are_retried() {
        let webhooks = publisher();
        let deadline = Deadline {
            at_ms: HOUR_MS,
            now_ms: 0,
        };
        let judge = |status, wait, body| {
            let webhooks = webhooks.clone();
            async move {
                webhooks
                    .answered(
                        answer(status, wait, body),
                        Duration::from_millis(5),
                        1,
                        deadline,
                    )
                    .await
            }
        };
        assert_eq!(
            judge(204, None, "").await,
            (
                Some(true),
                PublishOutcome::Delivered {
                    after: Duration::from_millis(5)
                }
            )
        );
        assert_eq!(
            judge(404, None, " no such hook \n").await,
            (
                None,
                PublishOutcome::GaveUp("the receiver answered 404 Not Found: no such hook".into())
            )
        );
        for status in [408, 429, 500, 503, 302] {
            let (healthy, outcome) = judge(status, None, "").await;
            assert_eq!(healthy, Some(false), "{status}");
            assert!(
                matches!(&outcome, PublishOutcome::RetryAfter { after, .. } if *after <= FIRST_BACKOFF),
                "{status} is retried after the first backoff: {outcome:?}"
            );
        }
        let (_, asked) = judge(503, Some("120"), "").await;
        assert!(
            matches!(asked, PublishOutcome::RetryAfter { after, .. } if after == Duration::from_secs(120)),
            "{asked:?}"
        );
        let long_answer = "x".repeat(3 * MAX_RESPONSE_BYTES);
        let (_, cut) = judge(500, None, &long_answer).await;
        let PublishOutcome::RetryAfter { reason, .. } = cut else {
            panic!("a 500 is retried: {cut:?}");
        };
        assert_eq!(
            reason.matches('x').count(),
            200,
            "the log keeps 200 characters"
        );
    }

    #[test]
    fn every_4xx_but_408_and_429_refuses_a_tick_for_good() {
        for code in [400, 401, 403, 404, 409, 410, 413, 422, 499] {
            let status = StatusCode::from_u16(code).expect("a status");
            assert!(refuses_for_good(status), "{code}");
        }
        for code in [200, 204, 302, 307, 408, 429, 500, 502, 503, 504] {
            let status = StatusCode::from_u16(code).expect("a status");
            assert!(!refuses_for_good(status), "{code}");
        }
    }

    #[test]
    fn the_backoff_doubles_to_its_cap_with_half_of_it_jittered() {
        let secs = |attempt, jitter| backoff(attempt, jitter).as_secs_f64();
        assert_eq!(secs(1, 0.0), 0.5);
        assert_eq!(secs(1, 1.0), 1.0);
        assert_eq!(secs(2, 0.0), 1.0);
        assert_eq!(secs(3, 0.5), 3.0);
        assert_eq!(secs(7, 1.0), 60.0, "64 s capped at a minute");
        assert_eq!(
            secs(u32::MAX, 0.0),
            30.0,
            "no overflow on a huge attempt count"
        );
    }

    #[test]
    fn retry_after_is_read_as_seconds_or_a_date() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        let later = SystemTime::now() + Duration::from_secs(120);
        let date = httpdate::fmt_http_date(later);
        headers.insert(RETRY_AFTER, HeaderValue::from_str(&date).expect("a header"));
        let asked = retry_after(&headers).expect("a date is a wait");
        assert!(
            (Duration::from_secs(118)..=Duration::from_secs(120)).contains(&asked),
            "{asked:?}"
        );
        headers.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&headers), None);
    }
}
