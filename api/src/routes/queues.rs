//! The http channel (SPEC §2): `GET /api/v1/queues/{queue_id}/pop`, and the at-least-once
//! routes beside it, [`lease`] and [`ack`].
//!
//! No token: the unguessable queue id is the capability. The due ticks are returned and
//! removed through one Raft write, so each reaches exactly one poller whichever node it asks;
//! a poll that finds nothing costs no write. A pop whose outcome this node never learned, or
//! whose poller left before the answer, is replayed by the queue's next pop on this node
//! ([`crate::unanswered_pops`]). `?wait=N` (N ≤ 30) holds the request until a
//! tick is due or N seconds pass. A lease waits the same way ([`poll`]); it removes nothing,
//! so it needs no replay.
//!
//! # Cheap for what is not there
//!
//! An unauthenticated route must not let anyone make the cluster work. A pop of a queue this
//! node has applied goes through one shared leadership confirmation ([`tickd_raft::Replica::linearize`],
//! shared by every concurrent read on the node). A pop of a queue this node does not know is
//! answered 404 from its applied state, without asking the leader, unless the queue might be
//! new — a well-formed id, which this node may simply not have applied yet (a clock registered
//! a moment ago through another node). Only then does the pop confirm, through the throttled
//! rounds ([`tickd_raft::Replica::linearize_throttled`]): a flood of made-up ids costs the leader at most
//! one confirmation per node per [`tickd_raft::replica::THROTTLED_READ_SPACING`]. Leases and
//! acks resolve their queue the same way ([`known_queue`]).
//!
//! A long poll waits on its own queue's changes ([`tickd_raft::state::queue_changes`]), not on
//! every Raft event, and at most `max_long_polls` wait at once on a node
//! ([`crate::polls::LongPolls`]); a poll over that cap is answered at once, as without `wait`.
//! Errors a pop can provoke are logged at most once per [`LOG_EVERY`], with a count.

pub mod ack;
pub mod lease;

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use tickd_domain::{Command, Excerpt, Outcome, QueueId, TickMessage};
use tickd_raft::ReplicaError;
use tokio::time::{Instant, sleep_until};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::log_limit::{LOG_EVERY, LogLimit};
use crate::telemetry;

/// Queue routes that no leader answered in time (503), logged at most once per [`LOG_EVERY`].
static UNSERVED: LogLimit = LogLimit::new(LOG_EVERY);
/// Queue writes that had an outcome their route cannot have.
static UNEXPECTED: LogLimit = LogLimit::new(LOG_EVERY);

/// The longest `?wait` accepted, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 30;

/// The handler.
#[utoipa::path(
    get,
    path = "/api/v1/queues/{queue_id}/pop",
    tag = "queues",
    security(()),
    summary = "Pop every waiting tick of an http channel",
    description = "No token (Ticktok compat): the unguessable queue id is the capability. \
        Returns every tick due in the queue and removes them, `[]` when none (Ticktok \
        compat); each tick reaches exactly one poller, whichever node it asks.",
    params(
        ("queue_id" = String, Path, description = "The queue id from the channel's URL"),
        ("wait" = Option<u64>, Query, minimum = 0, maximum = 30,
            description = "Seconds to hold the request until a tick is due (tickd's extension)"),
    ),
    responses(
        (status = 200, description = "The due ticks, oldest first, at most 100; the rest wait \
            for the next pop", body = Vec<TickMessage>),
        (status = 400, description = "`wait` is not a whole number from 0 to 30",
            body = ErrorBody),
        (status = 404, description = "No such queue, or its clock was removed",
            body = ErrorBody),
        (status = 503, description = "No leader reachable", body = ErrorBody),
    ),
)]
pub async fn pop(
    State(app): State<AppState>,
    Path(queue): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<TickMessage>>, ApiError> {
    let wait = wait_from(query.as_deref())?;
    let queue = known_queue(&app, queue).await?;
    let popped = poll(&app, &queue, wait, |now_ms| {
        let (app, queue) = (app.clone(), queue.clone());
        async move {
            let attempt = app.pops.begin(&queue);
            let popped = app
                .replica
                .write(Command::Pop {
                    request: attempt.request(),
                    queue,
                    now_ms,
                })
                .await
                .map_err(unserved)?;
            attempt.answered();
            match popped {
                Outcome::Popped(ticks) if !ticks.is_empty() => {
                    telemetry::record_popped(ticks.len());
                    Ok(Take::Got(ticks.iter().map(|tick| tick.message()).collect()))
                }
                Outcome::Popped(_) => Ok(Take::Missed),
                Outcome::NotFound => Ok(Take::Gone),
                other => Err(unexpected(&other)),
            }
        }
    })
    .await?;
    Ok(Json(popped.unwrap_or_default()))
}

/// What one attempt of a poll at taking the available ticks came to.
pub(crate) enum Take<T> {
    /// It took them.
    Got(T),
    /// Another poller took them first: wait for the next ones.
    Missed,
    /// The queue was not found: look again (it answers 404 if its clock is gone).
    Gone,
}

/// Resolves a queue id from the path for a poll, pop or ack: a queue this node has applied,
/// or one it may not have applied yet, confirmed through the leader (see the module
/// documentation); any other is a 404 without asking the leader.
pub(crate) async fn known_queue(app: &AppState, queue: String) -> Result<QueueId, ApiError> {
    let queue = QueueId::new(queue);
    let known = app
        .replica
        .state()
        .read()
        .registry
        .clock_of_queue(&queue)
        .is_some();
    if !known && !might_be_drawn(&queue.text()) {
        return Err(no_such_queue(&queue));
    }
    let linearized = if known {
        app.replica.linearize().await
    } else {
        app.replica.linearize_throttled().await
    };
    linearized.map_err(unserved)?;
    Ok(queue)
}

/// Waits up to `wait` (as `?wait` allows; see the module documentation) until `queue` has
/// ticks available and `take` takes them with a write stamped with the earliest the
/// majority's time may be. `None` when none came: the poll counts as a sign of life of the
/// queue's consumer.
pub(crate) async fn poll<T, F>(
    app: &AppState,
    queue: &QueueId,
    wait: Duration,
    mut take: impl FnMut(u64) -> F,
) -> Result<Option<T>, ApiError>
where
    F: Future<Output = Result<Take<T>, ApiError>>,
{
    // Over the cap, the poll is answered at once, as without `wait`.
    let held = if wait.is_zero() {
        None
    } else {
        app.long_polls.try_hold()
    };
    let wait = if held.is_some() { wait } else { Duration::ZERO };
    let deadline = Instant::now() + wait;
    // Watch before reading, so that a change between the read and the wait is not missed.
    let mut changes = held
        .as_ref()
        .map(|_| app.replica.state().watch_queue(queue));
    loop {
        let now = app.replica.clock().earliest_now_ms();
        let (available, next_due) = {
            let state = app.replica.state().read();
            let registry = &state.registry;
            if registry.clock_of_queue(queue).is_none() {
                return Err(no_such_queue(queue));
            }
            let ledger = registry.ledger();
            (
                ledger.due_in_queue(queue, now),
                ledger.next_due_in_queue(queue),
            )
        };
        if available > 0 {
            match take(now).await? {
                Take::Got(taken) => return Ok(Some(taken)),
                Take::Missed => {}
                Take::Gone => continue,
            }
        }
        if Instant::now() >= deadline {
            app.polls.polled(queue);
            return Ok(None);
        }
        // Wake when the next tick becomes available, when the state changes, or at the
        // deadline.
        let until_due =
            next_due.map(|at| Instant::now() + Duration::from_millis(at.saturating_sub(now)));
        let wake = until_due.map_or(deadline, |at| at.min(deadline));
        match changes.as_mut() {
            Some(changes) => tokio::select! {
                _ = sleep_until(wake) => {}
                _ = changes.changed() => {}
            },
            None => sleep_until(wake).await,
        }
    }
}

/// The error of a write whose outcome a queue route cannot have, logged at most once per
/// [`LOG_EVERY`].
pub(crate) fn unexpected(outcome: &Outcome) -> ApiError {
    if let Some(suppressed) = UNEXPECTED.admit() {
        tracing::error!(
            ?outcome,
            suppressed,
            "a queue's write had an unexpected outcome"
        );
    }
    ApiError::not_found("the queue disappeared during the poll")
}

/// The 404 of an unknown queue.
pub(crate) fn no_such_queue(queue: &QueueId) -> ApiError {
    ApiError::not_found(format!(
        "there is no queue {}: its clock may have been removed after going unconsumed for \
         the clock TTL; register the clock again",
        Excerpt::of(&queue.text())
    ))
}

/// The 503 of a queue route no leader answered in time, logged at most once per
/// [`LOG_EVERY`].
pub(crate) fn unserved(error: ReplicaError) -> ApiError {
    if let Some(suppressed) = UNSERVED.admit() {
        tracing::warn!(%error, suppressed, "a queue route could not be served");
    }
    error.into()
}

/// Whether `id` could be a queue id a node drew: what `crate::ids::queue_id` draws (32 hex
/// digits), or what a restored backup may hold (32 to 64 URL-safe characters). An id that
/// could not be one is answered 404 without asking the leader, even by a node that lags.
fn might_be_drawn(id: &str) -> bool {
    (32..=64).contains(&id.len())
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// Parses `?wait=N` (seconds, 0..=30); other keys are ignored.
pub(crate) fn wait_from(query: Option<&str>) -> Result<Duration, ApiError> {
    let query = query.unwrap_or_default();
    let Some((_, value)) = form_urlencoded::parse(query.as_bytes()).find(|(key, _)| key == "wait")
    else {
        return Ok(Duration::ZERO);
    };
    match value.parse::<u64>() {
        Ok(seconds) if seconds <= MAX_WAIT_SECONDS => Ok(Duration::from_secs(seconds)),
        _ => Err(ApiError::bad_request(format!(
            "wait must be a whole number of seconds from 0 to {MAX_WAIT_SECONDS}, not {}",
            Excerpt::of(&value)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_bounded_and_numeric() {
        assert_eq!(wait_from(None), Ok(Duration::ZERO));
        assert_eq!(wait_from(Some("wait=5")), Ok(Duration::from_secs(5)));
        assert_eq!(wait_from(Some("x=1&wait=30")), Ok(Duration::from_secs(30)));
        for bad in ["wait=31", "wait=-1", "wait=1.5", "wait=", "wait=soon"] {
            assert!(wait_from(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_ids_a_node_could_have_drawn_might_be_new() {
        assert!(might_be_drawn("0123456789abcdef0123456789abcdef"));
        assert!(might_be_drawn(&"Q-_9".repeat(16)));
        for bogus in [
            "",
            "1",
            "abc",
            &"a".repeat(31),
            &"a".repeat(65),
            "../etc/passwd",
        ] {
            assert!(!might_be_drawn(bogus), "{bogus:?}");
        }
        assert!(!might_be_drawn("0123456789abcdef0123456789abcde/"));
    }
}
