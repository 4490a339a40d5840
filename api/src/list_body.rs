//! The body of `GET /api/v1/clocks`: a JSON array of [`ClockView`]s, encoded off the runtime's
//! workers from a [`Selection`] taken under the state's lock.
//!
//! A page (`limit`, at most [`MAX_PAGE`](crate::routes::clocks::MAX_PAGE) clocks) is encoded
//! whole before the response starts, since its `Link` header says whether more follow. An
//! unpaged list — Ticktok's shape, every match — is encoded [`RUN`] clocks at a time as the
//! client reads it: a list of a million clocks is some 300 MB of JSON, which a node must not
//! hold once per request that asks for it.
//!
//! What an unpaged list does hold is its [`Selection`]: an image of the clocks as they were
//! when it began, so that a slow reader sees one consistent list. The image costs nothing
//! while the registry stands still, but every node of it the registry changes afterwards is
//! copied, and in an hour of a population's ticks that is every node: up to a second registry
//! per list. So a node sends at most [`MAX_UNPAGED_LISTS`] of them at once (one more is a 503
//! with `Retry-After`), each for at most [`UNPAGED_LIST_DEADLINE`] (the body is cut after it),
//! and one whose client stops reading is cut by the listener's write timeout
//! (`write_timeout_ms`), which drops the image with the connection.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use tickd_domain::{Clock, ClockId, Selection};

use crate::base_url::BaseUrl;
use crate::error::ApiError;
use crate::long_pass::off_the_runtime;
use crate::slots::{Slot, Slots};
use crate::view::ClockView;

/// How many clocks one run of an unpaged list encodes: about 150 KB of JSON, a millisecond of
/// work, which the client's reading paces.
const RUN: usize = 512;

/// The most unpaged lists one node sends at once.
pub const MAX_UNPAGED_LISTS: usize = 4;

/// The longest one unpaged list may take to be read: a million clocks, some 300 MB, at
/// 0.5 MB/s. A list cut by it ends before its closing `]`, so the client sees an error, not a
/// short list.
pub const UNPAGED_LIST_DEADLINE: Duration = Duration::from_secs(600);

/// The places for this node's unpaged lists.
pub(crate) fn unpaged_slots() -> Slots {
    Slots::new(
        MAX_UNPAGED_LISTS,
        "unpaged lists of the clocks",
        "retry later, use another node, or page the list with ?limit=",
    )
}

/// One page of `selection`: at most `limit` clocks after `after`, encoded as a whole array, and
/// the id of its last clock when more match beyond it.
pub(crate) async fn page(
    selection: Selection,
    base: BaseUrl,
    now_ms: u64,
    after: Option<ClockId>,
    limit: usize,
) -> Result<(Vec<u8>, Option<ClockId>), ApiError> {
    off_the_runtime("listing the clocks", move || {
        let (clocks, more) = selection.page(after.as_ref(), limit);
        let mut body = vec![b'['];
        encode(&clocks, &base, now_ms, &mut body, true)?;
        body.push(b']');
        let last = clocks.last().filter(|_| more).map(|clock| clock.id.clone());
        Ok((body, last))
    })
    .await?
}

/// Every clock of `selection` after `after`, as a body that encodes the next [`RUN`] clocks
/// each time the connection asks for more. A client that stops reading stops the walk; one
/// that goes away drops it, and with it `slot` and the selection. The selection keeps the
/// clocks it was taken with, so a slow reader sees one consistent list; the walk ends with an
/// error once `deadline` has passed.
pub(crate) fn streamed(
    selection: Selection,
    base: BaseUrl,
    now_ms: u64,
    after: Option<ClockId>,
    slot: Slot,
    deadline: Instant,
) -> Body {
    let walk = Walk {
        selection,
        base,
        now_ms,
        after,
        opened: false,
        deadline,
        _slot: slot,
    };
    let runs = futures::stream::unfold(Some(walk), |walk| async move {
        let walk = walk?;
        let run = off_the_runtime("listing the clocks", move || walk.next_run())
            .await
            .and_then(|run| run);
        Some(match run {
            Ok((bytes, rest)) => (Ok(bytes), rest),
            Err(error) => {
                // The status is sent; all a failure can do now is cut the body short.
                tracing::warn!(error = error.message(), "a streamed list of clocks failed");
                (
                    Err(std::io::Error::other(error.message().to_string())),
                    None,
                )
            }
        })
    });
    Body::from_stream(runs)
}

/// Where a streamed list stands.
struct Walk {
    selection: Selection,
    base: BaseUrl,
    /// The instant the list shows each clock's `next_tick` from: when it began.
    now_ms: u64,
    /// The last clock sent, if any.
    after: Option<ClockId>,
    /// Whether the array's `[` is sent.
    opened: bool,
    /// When the walk gives up.
    deadline: Instant,
    /// Held for the walk's life: its place among [`MAX_UNPAGED_LISTS`].
    _slot: Slot,
}

impl Walk {
    /// The next run's bytes, and the walk that goes on after it unless the array is closed.
    fn next_run(mut self) -> Result<(Vec<u8>, Option<Walk>), ApiError> {
        if Instant::now() >= self.deadline {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the list was not read within {} s, the most an unpaged list may take; \
                     page it with ?limit=",
                    UNPAGED_LIST_DEADLINE.as_secs()
                ),
            ));
        }
        let (clocks, more) = self.selection.page(self.after.as_ref(), RUN);
        let mut bytes = Vec::new();
        let first = !self.opened;
        if first {
            bytes.push(b'[');
            self.opened = true;
        }
        encode(&clocks, &self.base, self.now_ms, &mut bytes, first)?;
        if !more {
            bytes.push(b']');
            return Ok((bytes, None));
        }
        self.after = clocks.last().map(|clock| clock.id.clone());
        Ok((bytes, Some(self)))
    }
}

/// Appends `clocks` to `out` as array elements; `first` when none precedes them.
fn encode(
    clocks: &[Clock],
    base: &BaseUrl,
    now_ms: u64,
    out: &mut Vec<u8>,
    first: bool,
) -> Result<(), ApiError> {
    for (index, clock) in clocks.iter().enumerate() {
        if index > 0 || !first {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, &ClockView::of(clock, base, now_ms)).map_err(|error| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding the list failed: {error}"),
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use tickd_domain::{Channel, ClockFilter, Command, QueueId, Registry, Schedule};

    use super::*;

    /// A registry of `count` http clocks, `c0000`… in id order, every other one named `even`.
    fn registry_of(count: usize) -> Registry {
        let mut registry = Registry::new();
        for n in 0..count {
            // One schedule per clock: a name and a schedule are one clock.
            let schedule = Schedule::parse(&format!("every.{}.seconds", n + 1))
                .unwrap_or_else(|error| panic!("{error}"));
            registry.apply(Command::Register {
                name: if n % 2 == 0 { "even" } else { "odd" }.to_owned(),
                schedule,
                id: ClockId::new(format!("c{n:04}")),
                channel: Channel::Http {
                    queue_id: QueueId::new(format!("q{n:04}")),
                },
                max_clocks: u64::MAX,
                now_ms: 0,
                overlap: tickd_domain::Overlap::Allow,
            });
        }
        registry
    }

    fn base() -> BaseUrl {
        BaseUrl("http://node".to_owned())
    }

    async fn streamed_bytes(selection: Selection, after: Option<ClockId>) -> Vec<u8> {
        let slot = unpaged_slots()
            .take()
            .unwrap_or_else(|error| panic!("{error:?}"));
        let deadline = Instant::now() + UNPAGED_LIST_DEADLINE;
        axum::body::to_bytes(
            streamed(selection, base(), 0, after, slot, deadline),
            usize::MAX,
        )
        .await
        .unwrap_or_else(|error| panic!("{error}"))
        .to_vec()
    }

    fn ids(body: &[u8]) -> Vec<String> {
        let views: Vec<serde_json::Value> =
            serde_json::from_slice(body).unwrap_or_else(|error| panic!("{error}"));
        views
            .iter()
            .map(|view| view["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn a_streamed_list_is_the_whole_array_across_runs() {
        let count = 2 * RUN + 3;
        let registry = registry_of(count);
        let every = || registry.select(ClockFilter::default());
        let streamed = streamed_bytes(every(), None).await;
        let (whole, last) = page(every(), base(), 0, None, usize::MAX)
            .await
            .unwrap_or_else(|error| panic!("{}", error.message()));
        assert_eq!(streamed, whole);
        assert_eq!(last, None);
        let expected: Vec<String> = (0..count).map(|n| format!("c{n:04}")).collect();
        assert_eq!(ids(&streamed), expected);
    }

    #[tokio::test]
    async fn a_streamed_list_keeps_its_filter_and_starting_point() {
        let registry = registry_of(RUN + 10);
        let even = ClockFilter::from_pairs([("name".to_owned(), "even".to_owned())])
            .unwrap_or_else(|error| panic!("{error}"));
        let body = streamed_bytes(
            registry.select(even),
            Some(ClockId::new("c0100".to_owned())),
        )
        .await;
        let expected: Vec<String> = (101..RUN + 10)
            .filter(|n| n % 2 == 0)
            .map(|n| format!("c{n:04}"))
            .collect();
        assert_eq!(ids(&body), expected);
    }

    #[tokio::test]
    async fn a_list_past_its_deadline_is_cut_before_its_end_and_gives_back_its_place() {
        let registry = registry_of(2 * RUN);
        let slots = unpaged_slots();
        let slot = slots.take().unwrap_or_else(|error| panic!("{error:?}"));
        let mut body = streamed(
            registry.select(ClockFilter::default()),
            base(),
            0,
            None,
            slot,
            Instant::now(),
        )
        .into_data_stream();
        let first = body.next().await.expect("an item");
        let error = first.expect_err("the deadline has passed: no run is sent");
        assert!(
            error.to_string().contains("not read within 600 s"),
            "{error}"
        );
        assert!(body.next().await.is_none(), "nothing follows the error");
        drop(body);
        let all: Result<Vec<Slot>, ApiError> =
            (0..MAX_UNPAGED_LISTS).map(|_| slots.take()).collect();
        assert!(all.is_ok(), "the cut list gave its place back");
    }

    #[tokio::test]
    async fn an_empty_list_is_an_empty_array() {
        let registry = registry_of(0);
        let body = streamed_bytes(registry.select(ClockFilter::default()), None).await;
        assert_eq!(body, b"[]");
    }

    #[tokio::test]
    async fn a_page_names_its_last_clock_only_when_more_follow() {
        let registry = registry_of(5);
        let every = || registry.select(ClockFilter::default());
        let (body, last) = page(every(), base(), 0, None, 2)
            .await
            .unwrap_or_else(|error| panic!("{}", error.message()));
        assert_eq!(ids(&body), ["c0000", "c0001"]);
        assert_eq!(last, Some(ClockId::new("c0001".to_owned())));
        let (body, last) = page(
            every(),
            base(),
            0,
            Some(ClockId::new("c0002".to_owned())),
            2,
        )
        .await
        .unwrap_or_else(|error| panic!("{}", error.message()));
        assert_eq!(ids(&body), ["c0003", "c0004"]);
        assert_eq!(last, None);
    }
}
