//! Requests that carry no valid token, limited per client address.
//!
//! The API's document, open metrics, unknown paths and wrong tokens cost a node a little each,
//! and anyone who reaches the port may send them; a token guesser sends nothing else. Each
//! client address gets a bucket (governor's GCRA): `rate` such requests a second, `burst` at
//! once. Once it is empty the address's requests without a valid token get a 429 with
//! `Retry-After`, before any work. A request with a valid token (access or operator) is not
//! counted here, so a stranger behind the same NAT cannot lock a client out; but a request to
//! an operator route without the operator token is charged when it is refused
//! ([`Strangers::charge`]), whatever else it carries, so an access-token holder cannot guess
//! the operator token at full speed either.
//!
//! Pops, leases and acks are left alone: the queue id is their credential and clients poll
//! often (a worker with a thousand http clocks pops, or leases and acks, a thousand times a
//! second from one address), while an unknown queue is already answered cheaply
//! (`crate::routes::queues::known_queue`, `crate::unanswered_pops`). So is health: a load
//! balancer that shares an address with a flood of strangers must still see its node UP.
//!
//! The buckets are bounded ([`MAX_TRACKED_ADDRESSES`]): when the table is full, buckets that
//! have refilled are dropped (at most once per [`SWEEP_EVERY`]), and if it is still full, the
//! addresses without room share one overflow bucket. An IPv6 client is keyed by its /64,
//! which one host usually holds whole.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock, Reference as _};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::auth::AccessToken;
use crate::error::ApiError;
use crate::standing::Standing;

/// Default of `unauthenticated_rate_per_second`.
pub const DEFAULT_RATE_PER_SECOND: u32 = 50;
/// Default of `unauthenticated_burst`.
pub const DEFAULT_BURST: u32 = 200;
/// The most client addresses with a bucket of their own.
pub const MAX_TRACKED_ADDRESSES: usize = 16_384;
/// The least time between two sweeps of a full table.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// The pop route, never limited here.
const POP_ROUTE: &str = "/api/v1/queues/{queue_id}/pop";
/// The lease route, never limited here.
const LEASE_ROUTE: &str = "/api/v1/queues/{queue_id}/lease";
/// The ack route, never limited here.
const ACK_ROUTE: &str = "/api/v1/queues/{queue_id}/ack";
/// The routes whose credential is the queue id in their path: never limited here, and one
/// that finds its queue proves its connection.
pub(crate) const QUEUE_ROUTES: [&str; 3] = [POP_ROUTE, LEASE_ROUTE, ACK_ROUTE];
/// The health route, never limited here: it reads this node's own metrics and nothing else.
const HEALTH_ROUTE: &str = "/mgmt/health";
/// Routes whose requests are never counted besides [`QUEUE_ROUTES`].
const UNCOUNTED_ROUTES: [&str; 1] = [HEALTH_ROUTE];

/// How many requests without a valid token one address may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrangerQuota {
    /// Requests per second, sustained; 0 turns the limit off.
    pub rate_per_second: u32,
    /// Requests at once, after a pause; at least 1 when the limit is on.
    pub burst: u32,
}

impl Default for StrangerQuota {
    fn default() -> Self {
        Self {
            rate_per_second: DEFAULT_RATE_PER_SECOND,
            burst: DEFAULT_BURST,
        }
    }
}

impl StrangerQuota {
    /// governor's quota; `None` when the limit is off.
    fn quota(self) -> Option<Quota> {
        let rate = NonZeroU32::new(self.rate_per_second)?;
        let burst = NonZeroU32::new(self.burst).unwrap_or(NonZeroU32::MIN);
        Some(Quota::per_second(rate).allow_burst(burst))
    }
}

/// Whose bucket a request draws from: a client address as one host usually holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    V4(u32),
    /// The first 64 bits of an IPv6 address.
    V6(u64),
    /// Every address that found the table full.
    Overflow,
}

impl Key {
    /// The key of `ip`: an IPv4 address (mapped ones too), or an IPv6 address's /64.
    pub(crate) fn of(ip: IpAddr) -> Key {
        match ip {
            IpAddr::V4(v4) => Key::V4(v4.into()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Key::V4(v4.into()),
                None => Key::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

type Buckets<C> =
    RateLimiter<Key, DefaultKeyedStateStore<Key>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// The buckets of one node's API listener.
pub struct Strangers<C: Clock = DefaultClock> {
    /// `None` when the limit is off.
    buckets: Option<Buckets<C>>,
    last_sweep: Mutex<Option<C::Instant>>,
    client: AccessToken,
    operator: AccessToken,
}

impl Strangers {
    /// Buckets for `quota`; a request with `client` or `operator` is never limited.
    pub fn new(quota: StrangerQuota, client: AccessToken, operator: AccessToken) -> Arc<Self> {
        Arc::new(Self::with_clock(
            quota,
            client,
            operator,
            DefaultClock::default(),
        ))
    }
}

impl<C: Clock> Strangers<C> {
    fn with_clock(
        quota: StrangerQuota,
        client: AccessToken,
        operator: AccessToken,
        clock: C,
    ) -> Self {
        Self {
            buckets: quota
                .quota()
                .map(|quota| RateLimiter::new(quota, DefaultKeyedStateStore::default(), clock)),
            last_sweep: Mutex::new(None),
            client,
            operator,
        }
    }

    /// Counts one request from `ip`: `Err` with the wait when its bucket is empty.
    fn admit(&self, ip: IpAddr) -> Result<(), Duration> {
        let Some(buckets) = &self.buckets else {
            return Ok(());
        };
        let key = self.room_for(buckets, Key::of(ip));
        buckets
            .check_key(&key)
            .map_err(|refused| refused.wait_time_from(buckets.clock().now()))
    }

    /// `key`, or [`Key::Overflow`] when the table has no room for more addresses.
    fn room_for(&self, buckets: &Buckets<C>, key: Key) -> Key {
        if buckets.len() < MAX_TRACKED_ADDRESSES {
            return key;
        }
        let now = buckets.clock().now();
        let due = {
            let mut last = self
                .last_sweep
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let due =
                last.is_none_or(|last| Duration::from(now.duration_since(last)) >= SWEEP_EVERY);
            if due {
                *last = Some(now);
            }
            due
        };
        if due {
            buckets.retain_recent();
        }
        if buckets.len() < MAX_TRACKED_ADDRESSES {
            key
        } else {
            Key::Overflow
        }
    }

    fn credentialed(&self, request: &Request) -> bool {
        // Both are compared, so timing does not reveal which token matched.
        self.client.admits(request) | self.operator.admits(request)
    }
}

impl Strangers {
    /// Counts `request` against its address whatever it carries: for a request refused for
    /// the wrong token on a route that needs another (the operator routes). `Some` 429 once
    /// the address has sent too many.
    pub(crate) fn charge(&self, request: &Request) -> Option<Response> {
        let address = client_address(request)?;
        let wait = self.admit(address).err()?;
        crate::telemetry::record_stranger_refused();
        Some(too_many(wait))
    }
}

/// The address a request came from, when the listener recorded it.
fn client_address(request: &Request) -> Option<IpAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| address.ip())
}

/// The middleware: counts each request without a valid token against its address, and
/// refuses it with a 429 once the address has sent too many. Pops, leases, acks and health
/// are never counted: the queue id is the credential of the first three, and a load balancer
/// behind the same address as a flood of strangers must still see its node healthy. A
/// request with a valid token, or one of [`QUEUE_ROUTES`] that finds its queue, proves its
/// connection ([`Standing`]).
pub async fn limit(
    State(strangers): State<Arc<Strangers>>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|route| route.as_str().to_owned());
    let standing = request.extensions().get::<Standing>().cloned();
    if route
        .as_deref()
        .is_some_and(|route| QUEUE_ROUTES.contains(&route))
    {
        // The queue id is the credential: a request that finds its queue proves the connection.
        let response = next.run(request).await;
        if response.status().is_success()
            && let Some(standing) = standing
        {
            standing.prove();
        }
        return response;
    }
    let exempt = route
        .as_deref()
        .is_some_and(|route| UNCOUNTED_ROUTES.contains(&route));
    if strangers.credentialed(&request) {
        if let Some(standing) = standing {
            standing.prove();
        }
        return next.run(request).await;
    }
    let Some(address) = client_address(&request).filter(|_| !exempt) else {
        return next.run(request).await;
    };
    match strangers.admit(address) {
        Ok(()) => next.run(request).await,
        Err(wait) => {
            crate::telemetry::record_stranger_refused();
            too_many(wait)
        }
    }
}

fn too_many(wait: Duration) -> Response {
    let seconds = wait.as_secs().saturating_add(1);
    let mut response = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "too many requests without a valid token from this address (health checks, wrong \
             tokens, unknown paths); retry in {seconds} s, or send the access token"
        ),
    )
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use governor::clock::FakeRelativeClock;

    use super::*;

    fn strangers(
        rate_per_second: u32,
        burst: u32,
    ) -> (Strangers<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        let quota = StrangerQuota {
            rate_per_second,
            burst,
        };
        let strangers = Strangers::with_clock(
            quota,
            AccessToken::new("client"),
            AccessToken::new("operator"),
            clock.clone(),
        );
        (strangers, clock)
    }

    fn v4(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(n))
    }

    #[test]
    fn either_token_or_both_make_a_request_credentialed() {
        let (strangers, _) = strangers(1, 1);
        let with = |authorization: &str| {
            axum::http::Request::builder()
                .uri("/x")
                .header(header::AUTHORIZATION, authorization)
                .body(axum::body::Body::empty())
                .expect("a request")
        };
        assert!(strangers.credentialed(&with("Bearer client")));
        assert!(strangers.credentialed(&with("Bearer operator")));
        let both = axum::http::Request::builder()
            .uri("/x?access_token=client")
            .header(header::AUTHORIZATION, "Bearer operator")
            .body(axum::body::Body::empty())
            .expect("a request");
        assert!(strangers.credentialed(&both));
        assert!(!strangers.credentialed(&with("Bearer neither")));
    }

    #[test]
    fn a_burst_then_the_rate_per_address() {
        let (limit, clock) = strangers(10, 3);
        for _ in 0..3 {
            assert_eq!(limit.admit(v4(1)), Ok(()));
        }
        let wait = limit.admit(v4(1)).expect_err("the burst is spent");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        assert_eq!(limit.admit(v4(2)), Ok(()), "buckets are per address");
        clock.advance(Duration::from_millis(100));
        assert_eq!(
            limit.admit(v4(1)),
            Ok(()),
            "one more after a tenth of a second"
        );
        assert!(limit.admit(v4(1)).is_err());
    }

    #[test]
    fn a_rate_of_zero_turns_the_limit_off() {
        let (limit, _) = strangers(0, 0);
        for _ in 0..10_000 {
            assert_eq!(limit.admit(v4(1)), Ok(()));
        }
    }

    #[test]
    fn an_ipv6_host_is_keyed_by_its_slash_64_and_a_mapped_ipv4_as_ipv4() {
        let one: Ipv6Addr = "2001:db8:1:2::1".parse().expect("an address");
        let other: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().expect("an address");
        let elsewhere: Ipv6Addr = "2001:db8:1:3::1".parse().expect("an address");
        assert_eq!(Key::of(one.into()), Key::of(other.into()));
        assert_ne!(Key::of(one.into()), Key::of(elsewhere.into()));
        let mapped = Ipv4Addr::new(192, 0, 2, 7);
        assert_eq!(
            Key::of(mapped.to_ipv6_mapped().into()),
            Key::of(mapped.into())
        );
    }

    #[test]
    fn a_full_table_drops_refilled_buckets_and_otherwise_shares_one() {
        let (limit, clock) = strangers(1, 2);
        let tracked = u32::try_from(MAX_TRACKED_ADDRESSES).expect("fits");
        for address in 0..tracked {
            assert_eq!(limit.admit(v4(address)), Ok(()));
        }
        // No bucket has refilled: newcomers share the overflow bucket, two at once.
        assert_eq!(limit.admit(v4(tracked)), Ok(()));
        assert_eq!(limit.admit(v4(tracked + 1)), Ok(()));
        assert!(
            limit.admit(v4(tracked + 2)).is_err(),
            "the overflow bucket is shared"
        );
        // Once they have refilled, a sweep makes room and a newcomer has its own bucket again.
        clock.advance(Duration::from_secs(5));
        assert_eq!(limit.admit(v4(tracked + 3)), Ok(()));
        let buckets = limit.buckets.as_ref().expect("the limit is on");
        assert!(buckets.len() < 10, "{} buckets kept", buckets.len());
    }
}
