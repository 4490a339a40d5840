//! `GET /api/v1/events`: the cluster and its clocks, pushed as server-sent events.
//!
//! The dashboard (and any script) keeps one request open and is told what changed, instead of
//! polling the whole clock list. Two kinds of event, each carrying the whole current value:
//! - `cluster`: the body of `GET /api/v1/cluster`, at once, then whenever this node's view of
//!   the leader, the term or the membership changes (checked every [`CHECK_EVERY`]), and
//!   every [`CLUSTER_REFRESH`] besides, for the members' applied indexes and clocks;
//! - `clocks`: the clocks as this node has applied them (not a linearized read: a view, a few
//!   milliseconds behind the leader at most), at once and whenever one is added, removed,
//!   paused or resumed (checked every [`CLOCKS_CHECK_EVERY`]): [`ClocksEvent`], at most
//!   [`MAX_LISTED`] of them in name order;
//! - `stats`: the body of `GET /api/v1/stats` for the same clocks ([`TickStats`]: each clock's
//!   delivered, late, coalesced and dropped ticks, its last tick, and the cluster's deliveries
//!   over the last minutes), at once and whenever it changed (checked every
//!   [`STATS_CHECK_EVERY`]).
//!
//! The streams of a node share what they show ([`StreamViews`]): the cluster's status, the
//! listing of the clocks and the statistics are each built by the first stream that needs
//! them and taken as they are by the others, so that a node probes its peers and passes over
//! its clocks as often whether one dashboard or thirty-two watch it
//! (`tickd_api_stream_views_built_total` counts the builds). The listing is built again only
//! when the clocks changed (the registry's [`ClocksStamp`](tickd_domain::ClocksStamp) moved: a
//! clock added, removed, paused or resumed). Both passes over the clocks run on an image of
//! the registry, on a blocking thread, without the state's lock (which every command waits
//! for: at a million clocks the listing takes a second). A node serves at most
//! [`MAX_STREAMS`] streams at once (one more is answered 503 with `Retry-After`), and at most
//! [`MAX_STREAMS_PER_ADDRESS`] to one client address (one more is a 429), so that one client
//! whose streams never read cannot keep every other out.

use std::collections::BinaryHeap;
use std::collections::hash_map::DefaultHasher;
use std::convert::Infallible;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::{ConnectInfo, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::Serialize;
use tickd_domain::{Channel, Clock, ClockStatus, ClocksStamp, RegistryImage, rfc3339_millis};
use utoipa::ToSchema;

use crate::AppState;
use crate::address_shares::{AddressShare, AddressShares};
use crate::error::{ApiError, ErrorBody};
use crate::long_pass::off_the_runtime;
use crate::routes::cluster::{ClusterStatus, status};
use crate::routes::stats::TickStats;
use crate::shared_view::SharedView;
use crate::slots::{Slot, Slots};
use crate::telemetry::record_stream_view_built;

/// How often a stream looks for a change of the cluster.
pub const CHECK_EVERY: Duration = Duration::from_millis(250);
/// How often a stream looks for a change of the clocks: a pass over the whole registry.
pub const CLOCKS_CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often a stream looks for new tick statistics.
pub const STATS_CHECK_EVERY: Duration = Duration::from_secs(2);
/// How often a `cluster` event is sent even when nothing it is keyed on changed.
pub const CLUSTER_REFRESH: Duration = Duration::from_secs(2);
/// How old a `cluster` event built for another stream may be when a stream sends it: half of
/// [`CLUSTER_REFRESH`], so that the applied indexes a stream shows are never older than its
/// own refresh period, while every stream of a node shares about every second build.
pub const CLUSTER_SHARED_FOR: Duration = Duration::from_secs(1);
/// How old a `stats` event built for another stream may be when a stream sends it: half of
/// [`STATS_CHECK_EVERY`], for the same reason.
pub const STATS_SHARED_FOR: Duration = Duration::from_secs(1);
/// The most clocks a `clocks` event lists.
pub const MAX_LISTED: usize = 1_000;
/// The most event streams one node serves at once.
pub const MAX_STREAMS: usize = 32;
/// The most event streams one client address (an IPv4 address, an IPv6 /64) holds at once on
/// one node: a dashboard needs one per open tab.
pub const MAX_STREAMS_PER_ADDRESS: usize = 4;

/// Each client address's share of this node's event streams.
pub(crate) fn stream_shares() -> AddressShares {
    AddressShares::new(MAX_STREAMS_PER_ADDRESS, "event streams")
}

/// The places for this node's event streams.
pub(crate) fn stream_slots() -> Slots {
    Slots::new(
        MAX_STREAMS,
        "event streams",
        "retry later or use another node",
    )
}

/// The body of a `clocks` event.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClocksEvent {
    /// How many clocks the cluster holds.
    total: usize,
    /// The first [`MAX_LISTED`] of them by name (then schedule).
    clocks: Vec<ClockSummary>,
}

/// One clock in a `clocks` event.
#[derive(Debug, Serialize, ToSchema)]
struct ClockSummary {
    id: String,
    name: String,
    schedule: String,
    /// `ACTIVE` or `PAUSED`.
    status: ClockStatus,
    /// `rabbit` or `http`; the queue itself is given only to the registration.
    channel: &'static str,
    /// The next scheduled instant, in Unix milliseconds; absent for `@never`, while paused
    /// and once an `@at` clock has fired.
    next_at_ms: Option<u64>,
    /// The same instant as RFC 3339 UTC with milliseconds (`next_tick` of the resource).
    next_tick: Option<String>,
    /// The same instant in the schedule's zone, with its offset.
    next_tick_local: Option<String>,
    /// The schedule's zone: its `TZ=` zone, else UTC.
    zone: String,
}

impl ClockSummary {
    fn of(clock: &Clock, now_ms: u64) -> Self {
        let next_at_ms = match clock.status {
            ClockStatus::Paused => None,
            _ => clock.schedule.next_instant_after(now_ms),
        };
        ClockSummary {
            id: clock.id.to_string(),
            name: clock.name.to_string(),
            schedule: clock.schedule.as_str().to_owned(),
            status: clock.status,
            channel: match clock.channel {
                Channel::Rabbit => "rabbit",
                Channel::Http { .. } => "http",
                Channel::Webhook(_) => "webhook",
            },
            next_at_ms,
            next_tick: next_at_ms.map(rfc3339_millis),
            next_tick_local: next_at_ms.and_then(|next| clock.schedule.local_time(next)),
            zone: clock.schedule.zone_name().to_owned(),
        }
    }
}

/// The handler.
#[utoipa::path(
    get,
    path = "/api/v1/events",
    tag = "cluster",
    summary = "The cluster and its clocks, pushed as server-sent events",
    description = "`text/event-stream`. A `cluster` event (the body of `GET /api/v1/cluster`) \
        at once, on every change of leader, term or membership and every 2 s; a `clocks` event \
        (`ClocksEvent`: the total and the first 1 000 clocks by name, with channel kind and \
        next instant) at once and whenever a clock is added, removed, paused or resumed; a \
        `stats` event (`TickStats`, the body of `GET /api/v1/stats` for the same clocks) at \
        once and whenever it changed, checked every 2 s. Comments keep an idle stream alive. \
        At most 32 streams per node, 4 per client address.",
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream",
            body = ClocksEvent),
        (status = 403, description = "Missing or wrong access token", body = ErrorBody),
        (status = 429, description = "This client address holds 4 streams of this node already",
            body = ErrorBody),
        (status = 503, description = "The node serves its most streams already",
            body = ErrorBody),
    ),
)]
pub async fn events(
    State(app): State<AppState>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let share = client
        .map(|Extension(ConnectInfo(address))| app.event_streams_per_address.take(address.ip()))
        .transpose()?;
    let permit = app.event_streams.take()?;
    let watcher = Watcher {
        app,
        _permit: permit,
        _share: share,
        cluster_key: None,
        cluster_sent: None,
        listing: None,
        clocks_hash: None,
        clocks_checked: None,
        stats_hash: None,
        stats_checked: None,
        ticker: tokio::time::interval(CHECK_EVERY),
    };
    let stream = futures::stream::unfold(watcher, |mut watcher| async move {
        let event = watcher.next_event().await;
        Some((Ok(event), watcher))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// One stream's memory of what it sent.
struct Watcher {
    app: AppState,
    /// Held for the stream's life: its slot among [`MAX_STREAMS`].
    _permit: Slot,
    /// Held for the stream's life: its place among its address's [`MAX_STREAMS_PER_ADDRESS`].
    _share: Option<AddressShare>,
    cluster_key: Option<ClusterKey>,
    cluster_sent: Option<Instant>,
    /// The clocks as of the registry's last stamp this stream saw.
    listing: Option<Arc<Listing>>,
    /// The hash of the clocks last sent.
    clocks_hash: Option<u64>,
    clocks_checked: Option<Instant>,
    stats_hash: Option<u64>,
    stats_checked: Option<Instant>,
    ticker: tokio::time::Interval,
}

/// What every event stream of a node shows, each built once for all of them.
#[derive(Default)]
pub(crate) struct StreamViews {
    /// The `cluster` event, by what it is sent on a change of.
    cluster: SharedView<ClusterKey, ClusterStatus>,
    /// The clocks, by the registry's stamp when they were listed.
    listing: SharedView<ClocksStamp, Listing>,
    /// The `stats` event: by time alone, so that streams whose listings differ for a moment
    /// (one saw a new clock, another not yet) do not take turns building it. The statistics
    /// are those of the listing of the stream that built them.
    stats: SharedView<(), EncodedStats>,
}

/// What a `cluster` event is sent on a change of.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ClusterKey {
    leader: Option<u64>,
    term: u64,
    /// Where the membership in force was written: a new one is a new entry.
    membership: Option<tickd_raft::LogPosition>,
}

impl Watcher {
    async fn next_event(&mut self) -> Event {
        loop {
            self.ticker.tick().await;
            let key = cluster_key(&self.app);
            let refresh = self
                .cluster_sent
                .is_none_or(|sent| sent.elapsed() >= CLUSTER_REFRESH);
            if refresh || self.cluster_key.as_ref() != Some(&key) {
                self.cluster_key = Some(key.clone());
                self.cluster_sent = Some(Instant::now());
                let app = &self.app;
                let build = |()| async {
                    record_stream_view_built("cluster");
                    Ok::<_, Infallible>(status(app).await)
                };
                let current = || (cluster_key(app), ());
                let views = &app.stream_views;
                let Ok(body) = views.cluster.get(CLUSTER_SHARED_FOR, current, build).await;
                return json_event("cluster", &*body);
            }
            let clocks_due = self
                .clocks_checked
                .is_none_or(|checked| checked.elapsed() >= CLOCKS_CHECK_EVERY);
            if clocks_due {
                self.clocks_checked = Some(Instant::now());
                self.refresh_listing().await;
                if let Some((hash, body)) = self.clocks_if_changed() {
                    self.clocks_hash = Some(hash);
                    return json_event("clocks", &body);
                }
            }
            let stats_due = self
                .stats_checked
                .is_none_or(|checked| checked.elapsed() >= STATS_CHECK_EVERY);
            if stats_due {
                self.stats_checked = Some(Instant::now());
                self.refresh_listing().await;
                if let Some(stats) = self.stats().await
                    && self.stats_hash != Some(stats.hash)
                {
                    self.stats_hash = Some(stats.hash);
                    return Event::default().event("stats").data(stats.json.clone());
                }
            }
        }
    }

    /// The `stats` event, encoded: the figures of the clocks a `clocks` event lists, gathered
    /// from an image on a blocking thread (a thousand clocks' statistics, which the state's
    /// lock would hold every command up for), and shared with every other stream.
    async fn stats(&self) -> Option<Arc<EncodedStats>> {
        let listing = self.listing.clone();
        let app = &self.app;
        let current = || ((), app.replica.state().read().registry.image());
        let build = |image: RegistryImage| async move {
            record_stream_view_built("stats");
            let now_ms = app.replica.clock().now_ms();
            off_the_runtime("an event stream's statistics", move || {
                EncodedStats::of(&image, listing.as_deref(), now_ms)
            })
            .await
            .map_err(|error| error.message().to_owned())?
        };
        match app
            .stream_views
            .stats
            .get(STATS_SHARED_FOR, current, build)
            .await
        {
            Ok(stats) => Some(stats),
            Err(error) => {
                tracing::warn!(%error, "an event stream could not gather the statistics");
                None
            }
        }
    }

    /// Brings the listing up to the registry's clocks: a pass over all of them, on an image
    /// and a blocking thread, when the stamp moved since any stream's last one; nothing
    /// otherwise.
    async fn refresh_listing(&mut self) {
        let stamp = self.app.replica.state().read().registry.clocks_stamp();
        if self
            .listing
            .as_ref()
            .is_some_and(|listing| listing.stamp == stamp)
        {
            return;
        }
        let current = || {
            let state = self.app.replica.state().read();
            let stamp = state.registry.clocks_stamp();
            (stamp, (stamp, state.registry.image()))
        };
        let build = |(stamp, image): (ClocksStamp, RegistryImage)| async move {
            record_stream_view_built("listing");
            off_the_runtime("an event stream's listing of the clocks", move || {
                Listing::of(stamp, &image)
            })
            .await
        };
        match self
            .app
            .stream_views
            .listing
            .get(Duration::MAX, current, build)
            .await
        {
            Ok(listing) => self.listing = Some(listing),
            // The pass cannot panic; should it, the stream goes on with what it showed.
            Err(error) => tracing::warn!(
                error = error.message(),
                "an event stream could not list the clocks"
            ),
        }
    }

    /// The `clocks` event when the clocks differ from the last one sent.
    fn clocks_if_changed(&self) -> Option<(u64, ClocksEvent)> {
        let listing = self.listing.as_ref()?;
        if self.clocks_hash == Some(listing.hash) {
            return None;
        }
        let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        let clocks = listing
            .listed
            .iter()
            .map(|clock| ClockSummary::of(clock, now_ms))
            .collect();
        Some((
            listing.hash,
            ClocksEvent {
                total: listing.total,
                clocks,
            },
        ))
    }
}

/// What this node's `cluster` event is sent on a change of, now.
fn cluster_key(app: &AppState) -> ClusterKey {
    let view = app.replica.cluster();
    ClusterKey {
        leader: view.leader,
        term: view.term,
        membership: view.membership_at,
    }
}

/// A `stats` event's body, and a hash of it: a stream sends it when the hash differs from
/// that of the last one it sent.
struct EncodedStats {
    hash: u64,
    json: String,
}

impl EncodedStats {
    /// The statistics of the clocks `listing` lists, as of `image`: for a blocking thread.
    fn of(image: &RegistryImage, listing: Option<&Listing>, now_ms: u64) -> Result<Self, String> {
        let (listed, total) =
            listing.map_or((&[][..], 0), |listing| (&listing.listed[..], listing.total));
        let body = TickStats::of(image, listed, total, now_ms);
        let json = serde_json::to_string(&body)
            .map_err(|error| format!("could not encode the statistics: {error}"))?;
        let mut hasher = DefaultHasher::new();
        json.hash(&mut hasher);
        Ok(EncodedStats {
            hash: hasher.finish(),
            json,
        })
    }
}

/// What a stream shows of the clocks, as of one stamp of the registry.
struct Listing {
    /// The registry's clocks stamp when it was taken.
    stamp: ClocksStamp,
    /// A hash of every clock's id and status: a `clocks` event is sent when it changes, not
    /// when a clock was paused and resumed between two checks.
    hash: u64,
    /// How many clocks there are.
    total: usize,
    /// The first [`MAX_LISTED`] of them by name, then schedule.
    listed: Vec<Clock>,
}

impl Listing {
    /// Two passes over every clock of `image`: for a blocking thread.
    fn of(stamp: ClocksStamp, image: &RegistryImage) -> Listing {
        let mut hasher = DefaultHasher::new();
        for clock in image.clocks() {
            (&clock.id, clock.status).hash(&mut hasher);
        }
        Listing {
            stamp,
            hash: hasher.finish(),
            total: image.len(),
            listed: first_by_name(image.clocks(), MAX_LISTED)
                .into_iter()
                .cloned()
                .collect(),
        }
    }
}

/// The first `limit` clocks by name, then schedule, in that order. One pass with a bounded
/// heap: the caller holds the state's read lock, which apply waits for, for O(n log limit),
/// not for a sort of every clock.
fn first_by_name<'a>(clocks: impl Iterator<Item = &'a Clock>, limit: usize) -> Vec<&'a Clock> {
    let mut first: BinaryHeap<ByName<'a>> = BinaryHeap::with_capacity(limit.saturating_add(1));
    for clock in clocks {
        first.push(ByName(clock));
        if first.len() > limit {
            first.pop();
        }
    }
    first
        .into_sorted_vec()
        .into_iter()
        .map(|ByName(clock)| clock)
        .collect()
}

/// A clock ordered by name, then schedule: the order of a `clocks` event.
struct ByName<'a>(&'a Clock);

impl ByName<'_> {
    fn key(&self) -> (&str, &str) {
        (&self.0.name, self.0.schedule.as_str())
    }
}

impl PartialEq for ByName<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for ByName<'_> {}

impl PartialOrd for ByName<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByName<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

fn json_event(kind: &str, body: &impl Serialize) -> Event {
    match Event::default().event(kind).json_data(body) {
        Ok(event) => event,
        // Serializing these plain structs cannot fail; say so on the stream if it ever does.
        Err(error) => Event::default()
            .event("error")
            .data(format!("could not encode the {kind} event: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use tickd_domain::{ClockId, QueueId, Schedule};

    use super::*;

    fn clock(id: &str, name: &str, schedule: &str) -> Clock {
        Clock {
            id: ClockId::new(id.to_owned()),
            name: name.into(),
            schedule: Schedule::parse(schedule).expect("a schedule"),
            status: ClockStatus::Active,
            channel: Channel::Http {
                queue_id: QueueId::new(format!("queue-{id}")),
            },
            overlap: tickd_domain::Overlap::Allow,
        }
    }

    #[test]
    fn the_first_clocks_by_name_then_schedule_are_kept_in_order() {
        let clocks = [
            clock("a", "mail", "every.5.seconds"),
            clock("b", "backup", "@never"),
            clock("c", "mail", "every.1.hours"),
            clock("d", "zebra", "@never"),
            clock("e", "audit", "@never"),
        ];
        let names = |limit| -> Vec<String> {
            first_by_name(clocks.iter(), limit)
                .iter()
                .map(|clock| format!("{} {}", clock.name, clock.schedule.as_str()))
                .collect()
        };
        assert_eq!(
            names(3),
            ["audit @never", "backup @never", "mail every.1.hours"]
        );
        assert_eq!(names(10).len(), 5);
        assert!(names(0).is_empty());
    }
}
