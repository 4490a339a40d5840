//! The API's metrics and the root span of every request.
//!
//! [`observe`] wraps every route: it opens the `request` span that the replica's `write`,
//! `forward` and `linearize` spans nest under, and counts the request by route, method and
//! status once it is answered. The route is axum's [`MatchedPath`], the template
//! (`/api/v1/clocks/{id}`), never the raw path: raw paths hold clock ids and http queue ids
//! (a consumer's capability), and would give every clock its own time series. The query
//! string, which may hold the access token, is never recorded. [`describe`] registers the
//! unlabelled metrics at zero, so that a node exports them before their first event.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use metrics::{Unit, counter, describe_counter, describe_histogram, histogram};
use tracing::{Instrument, field};

/// Requests answered, by route, method and status.
pub const REQUESTS: &str = "tickd_api_requests_total";
/// How long requests took to answer, by route and method.
pub const REQUEST_DURATION: &str = "tickd_api_request_duration_seconds";
/// Http-channel ticks handed to pollers (delivered).
pub const TICKS_POPPED: &str = "tickd_ticks_popped_total";

/// Http-channel ticks handed out by leases, by `delivery`: `first`, or `again` after a lease
/// ran out.
pub const TICKS_LEASED: &str = "tickd_ticks_leased_total";
/// Leased ticks acked.
pub const TICKS_ACKED: &str = "tickd_ticks_acked_total";

/// Requests refused with a 429 because their address sent too many without a valid token.
pub const STRANGERS_REFUSED: &str = "tickd_api_strangers_refused_total";

/// Views built for this node's event streams, by `view`: `cluster`, `listing` (of the clocks)
/// or `stats`. One build serves every stream open at the time, so the rate stays the same
/// however many dashboards watch.
pub const STREAM_VIEWS_BUILT: &str = "tickd_api_stream_views_built_total";

/// The route label of a request that matched no route (it got a 404).
const UNMATCHED: &str = "unmatched";

/// Registers the help text and unit of every API metric with the installed recorder, and
/// registers the unlabelled ones at zero.
pub fn describe() {
    describe_counter!(
        REQUESTS,
        "API requests answered by this node, by route template, method and status"
    );
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "How long this node took to answer API requests, by route template and method \
         (long polls included)"
    );
    describe_counter!(
        TICKS_POPPED,
        "Http-channel ticks this node handed to pollers"
    );
    describe_counter!(
        TICKS_LEASED,
        "Http-channel ticks this node handed out by leases, by delivery: first, or again \
         after a lease ran out without an ack (a consumer that never acks shows here)"
    );
    describe_counter!(TICKS_ACKED, "Leased ticks acked through this node");
    describe_counter!(
        STRANGERS_REFUSED,
        "Requests this node refused with a 429 because their address had sent too many \
         without a valid token (unauthenticated_rate_per_second, unauthenticated_burst)"
    );
    describe_counter!(
        STREAM_VIEWS_BUILT,
        "Views this node built for its event streams (the dashboard's), by view: cluster, \
         listing or stats; every stream open at the time shares each one"
    );
    // The exporter renders a metric only once it has been recorded; a node no poller has
    // reached yet must still export its pops at zero, so that a sum over the nodes and an
    // alert on the increase see every node. The request metrics are labelled by route and
    // appear with the first request.
    counter!(TICKS_POPPED).increment(0);
    counter!(TICKS_LEASED, "delivery" => "first").increment(0);
    counter!(TICKS_LEASED, "delivery" => "again").increment(0);
    counter!(TICKS_ACKED).increment(0);
    counter!(STRANGERS_REFUSED).increment(0);
    for view in ["cluster", "listing", "stats"] {
        counter!(STREAM_VIEWS_BUILT, "view" => view).increment(0);
    }
}

/// Middleware: one span per request, and its count and latency once answered.
pub async fn observe(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_string(), |path| path.as_str().to_string());
    let method = method_label(request.method());
    let span = tracing::info_span!("request", method, route = %route, status = field::Empty);
    let started = Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    span.record("status", status);
    span.in_scope(|| {
        tracing::debug!(took_ms = took.as_millis() as u64, "answered");
    });
    counter!(
        REQUESTS,
        "route" => route.clone(),
        "method" => method,
        "status" => status.to_string()
    )
    .increment(1);
    histogram!(REQUEST_DURATION, "route" => route, "method" => method).record(took.as_secs_f64());
    response
}

/// Counts a request refused by [`crate::strangers`].
pub(crate) fn record_stranger_refused() {
    counter!(STRANGERS_REFUSED).increment(1);
}

/// Counts one view built for the event streams.
pub(crate) fn record_stream_view_built(view: &'static str) {
    counter!(STREAM_VIEWS_BUILT, "view" => view).increment(1);
}

/// Counts ticks handed to a poller.
pub(crate) fn record_popped(ticks: usize) {
    counter!(TICKS_POPPED).increment(ticks as u64);
}

/// Counts ticks handed out by a lease, first deliveries apart from later ones.
pub(crate) fn record_leased(ticks: &[tickd_domain::LeasedTick]) {
    let again = ticks.iter().filter(|tick| tick.deliveries > 1).count();
    let first = ticks.len().saturating_sub(again);
    counter!(TICKS_LEASED, "delivery" => "first").increment(first as u64);
    counter!(TICKS_LEASED, "delivery" => "again").increment(again as u64);
}

/// Counts acked ticks.
pub(crate) fn record_acked(ticks: u64) {
    counter!(TICKS_ACKED).increment(ticks);
}

/// The method as a label; methods outside HTTP's standard set share one label, so that a
/// client cannot create time series at will.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    }
}
