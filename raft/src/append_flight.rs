//! An append that outlives openraft's deadline.
//!
//! openraft 0.9 gives every AppendEntries the heartbeat interval (100 ms) as its deadline and
//! drops the call when it passes (`replication/mod.rs`). An entry that takes longer to encode,
//! send, decode and fsync was therefore sent again from scratch on the next attempt, and again,
//! and never arrived: a valid 30 MiB restore, or a follower whose disk takes 150 ms per fsync,
//! stopped every commit after it for good.
//!
//! [`AppendFlight`] separates the two deadlines. The RPC runs in a task of its own with a
//! deadline that follows its size and the follower's measured append latency
//! ([`flight_deadline`]); openraft waits on it for as long as its own deadline lasts. When
//! openraft asks again for a range that starts where the flight's does (it does within a
//! heartbeat, after reporting the timeout), it waits on the same RPC instead of starting
//! another, and the flight's answer is cut to the range asked for. While openraft waits again
//! on a flight, the follower is sent an empty append (a heartbeat) at most once per heartbeat
//! interval, so that it keeps hearing its leader and does not call an election while it is
//! still writing what it was sent.
//!
//! Why this is safe: a flight's answer is the follower's answer to a request of this leader's
//! term starting at the same previous entry, so by Raft's log matching a success for entries
//! up to `last` is a success for any prefix of them; a longer range is answered with
//! `PartialSuccess` up to what the flight carried, which openraft takes as progress and
//! follows with the rest.

use std::time::Duration;

use openraft::LogId;
use openraft::error::{RPCError, RaftError};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{NodeAddr, NodeId, TypeConfig};

/// The least time a flight is given, whatever its size: five heartbeats, so that a follower
/// that stalls for a moment (an fsync, a compaction, a busy core) is waited for rather than
/// sent the same entries again.
pub const FLIGHT_FLOOR: Duration = Duration::from_millis(500);
/// The most time a flight is given. Past it the follower is taken as gone: the next attempt
/// starts afresh, and the replication monitor ([`crate::progress`]) has long since reported it.
/// The largest entry tickd writes (a 32 MiB restore) needs about 8 s at the assumed
/// [`SLOWEST_BYTES_PER_SECOND`].
pub const FLIGHT_CEILING: Duration = Duration::from_secs(30);
/// The slowest a follower is assumed to take an append's bytes end to end (send, decode,
/// write): a debug build on a loaded two-core machine decodes JSON at about this rate.
pub const SLOWEST_BYTES_PER_SECOND: u64 = 4 * 1024 * 1024;
/// How many typical round trips a flight is given on top of its bytes' time.
const ROUND_TRIPS_OF_SLACK: u32 = 4;

/// The deadline of an append of `bytes` to a follower whose appends have lately taken
/// `typical`: the bytes' time at [`SLOWEST_BYTES_PER_SECOND`] plus four typical round trips
/// (which hold the follower's fsync), at least [`FLIGHT_FLOOR`] and at most [`FLIGHT_CEILING`].
pub fn flight_deadline(bytes: usize, typical: Duration) -> Duration {
    let bytes_ms = (bytes as u64).saturating_mul(1_000) / SLOWEST_BYTES_PER_SECOND;
    let slack = typical
        .saturating_mul(ROUND_TRIPS_OF_SLACK)
        .max(FLIGHT_FLOOR);
    slack
        .saturating_add(Duration::from_millis(bytes_ms))
        .min(FLIGHT_CEILING)
}

/// What an append RPC answers, as openraft wants it.
pub type AppendAnswer =
    Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>>;

/// Which entries a request carries: a flight answers a later request only if it was sent in
/// the same term after the same entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendRange {
    vote: openraft::Vote<NodeId>,
    prev: Option<LogId<NodeId>>,
    last: Option<LogId<NodeId>>,
}

impl AppendRange {
    /// The range `request` carries.
    pub fn of(request: &AppendEntriesRequest<TypeConfig>) -> Self {
        Self {
            vote: request.vote,
            prev: request.prev_log_id,
            last: request
                .entries
                .last()
                .map(|entry| entry.log_id)
                .or(request.prev_log_id),
        }
    }

    /// Whether an answer to `self` says something true about `other`: same term, same
    /// previous entry.
    fn answers(&self, other: &AppendRange) -> bool {
        self.vote == other.vote && self.prev == other.prev
    }

    /// The answer to `flight` (sent for `self`) cut to `asked`: a success beyond the asked
    /// range is a success of it, a success short of it a partial one.
    #[allow(
        clippy::result_large_err,
        reason = "openraft's RPC error, as its network trait returns it"
    )]
    fn cut(&self, asked: &AppendRange, answer: AppendAnswer) -> AppendAnswer {
        let reached = match answer? {
            AppendEntriesResponse::Success => self.last,
            AppendEntriesResponse::PartialSuccess(matching) => matching,
            other => return Ok(other),
        };
        Ok(if reached >= asked.last {
            AppendEntriesResponse::Success
        } else {
            AppendEntriesResponse::PartialSuccess(reached)
        })
    }
}

/// One append RPC in its own task.
struct Flight {
    range: AppendRange,
    task: JoinHandle<AppendAnswer>,
    started: Instant,
    /// Whether openraft's deadline passed while it waited on this flight.
    carried: bool,
}

/// The append in flight to one follower, if any, and how long its appends have lately taken.
#[derive(Default)]
pub struct AppendFlight {
    flight: Option<Flight>,
    /// A moving average of successful appends' round trips, `None` before the first.
    typical: Option<Duration>,
    /// When the follower was last sent a heartbeat while a flight went on.
    last_keepalive: Option<Instant>,
}

/// What [`AppendFlight::prepare`] decided for a request.
pub enum Boarding {
    /// No flight answers this request: start one, its deadline [`flight_deadline`] of its size
    /// and [`AppendFlight::typical`].
    Start,
    /// A flight answers it; `keepalive` says whether to send the follower a heartbeat now.
    Join {
        /// Send an empty append now, so that the follower keeps hearing its leader.
        keepalive: bool,
    },
}

impl AppendFlight {
    /// How long appends to this follower have lately taken (the heartbeat interval before any
    /// has been measured).
    pub fn typical(&self) -> Duration {
        self.typical
            .unwrap_or(Duration::from_millis(crate::timing::HEARTBEAT_MS))
    }

    /// Decides whether `asked` joins the flight in progress. A flight that cannot answer it (a
    /// new term, a different previous entry: openraft backed up after a conflict) is
    /// abandoned.
    pub fn prepare(&mut self, asked: &AppendRange, now: Instant) -> Boarding {
        if let Some(flight) = &mut self.flight {
            if flight.range.answers(asked) {
                flight.carried = true;
                let heartbeat = Duration::from_millis(crate::timing::HEARTBEAT_MS);
                let keepalive = self
                    .last_keepalive
                    .is_none_or(|at| now.saturating_duration_since(at) >= heartbeat);
                if keepalive {
                    self.last_keepalive = Some(now);
                }
                return Boarding::Join { keepalive };
            }
            flight.task.abort();
            self.flight = None;
        }
        Boarding::Start
    }

    /// Records a flight just spawned for `range`.
    pub fn depart(&mut self, range: AppendRange, task: JoinHandle<AppendAnswer>, now: Instant) {
        self.flight = Some(Flight {
            range,
            task,
            started: now,
            carried: false,
        });
        self.last_keepalive = None;
    }

    /// Waits for the flight's answer and cuts it to `asked`. Cancel-safe: when openraft's
    /// deadline drops this future, the flight goes on and the next request may join it. The
    /// second value is how long the flight took, and whether it outlived openraft's deadline.
    pub async fn land(&mut self, asked: &AppendRange) -> (AppendAnswer, Option<(Duration, bool)>) {
        let Some(flight) = self.flight.as_mut() else {
            return (Err(lost("no append in flight")), None);
        };
        let joined = (&mut flight.task).await;
        let Some(flight) = self.flight.take() else {
            return (Err(lost("the append in flight vanished")), None);
        };
        let took = flight.started.elapsed();
        let answer = match joined {
            Ok(answer) => answer,
            Err(error) => return (Err(lost(&error.to_string())), None),
        };
        if answer.is_ok() {
            self.typical = Some(match self.typical {
                None => took,
                Some(before) => (before * 4 + took) / 5,
            });
        }
        (
            flight.range.cut(asked, answer),
            Some((took, flight.carried)),
        )
    }
}

impl Drop for AppendFlight {
    /// A flight of a replication stream that has ended (a new term, this node stepped down)
    /// answers nobody.
    fn drop(&mut self) {
        if let Some(flight) = &self.flight {
            flight.task.abort();
        }
    }
}

fn lost(why: &str) -> RPCError<NodeId, NodeAddr, RaftError<NodeId>> {
    RPCError::Network(openraft::error::NetworkError::new(
        &anyerror::AnyError::error(why),
    ))
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, Vote};

    use super::*;

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn range(prev: u64, last: u64) -> AppendRange {
        AppendRange {
            vote: Vote::new_committed(2, 1),
            prev: Some(log_id(2, prev)),
            last: Some(log_id(2, last)),
        }
    }

    #[test]
    fn the_deadline_follows_size_and_latency_between_floor_and_ceiling() {
        let quick = Duration::from_millis(5);
        assert_eq!(flight_deadline(100, quick), FLIGHT_FLOOR);
        // 32 MiB at 4 MiB/s: 8 s on top of the floor.
        assert_eq!(
            flight_deadline(32 * 1024 * 1024, quick),
            FLIGHT_FLOOR + Duration::from_secs(8)
        );
        // A follower whose appends take 400 ms (a slow fsync) gets four of them.
        assert_eq!(
            flight_deadline(100, Duration::from_millis(400)),
            Duration::from_millis(1_600)
        );
        assert_eq!(flight_deadline(usize::MAX, quick), FLIGHT_CEILING);
        assert_eq!(flight_deadline(100, Duration::MAX), FLIGHT_CEILING);
    }

    #[test]
    fn an_answer_is_cut_to_the_range_asked() {
        let flown = range(10, 20);
        assert!(matches!(
            flown.cut(&range(10, 20), Ok(AppendEntriesResponse::Success)),
            Ok(AppendEntriesResponse::Success)
        ));
        assert!(matches!(
            flown.cut(&range(10, 15), Ok(AppendEntriesResponse::Success)),
            Ok(AppendEntriesResponse::Success)
        ));
        match flown.cut(&range(10, 30), Ok(AppendEntriesResponse::Success)) {
            Ok(AppendEntriesResponse::PartialSuccess(reached)) => {
                assert_eq!(reached, Some(log_id(2, 20)));
            }
            other => panic!("expected a partial success up to 20, got {other:?}"),
        }
        assert!(matches!(
            flown.cut(&range(10, 30), Ok(AppendEntriesResponse::Conflict)),
            Ok(AppendEntriesResponse::Conflict)
        ));
    }

    #[tokio::test]
    async fn a_request_from_the_same_entry_joins_the_flight_and_another_abandons_it() {
        let mut flights = AppendFlight::default();
        let now = Instant::now();
        assert!(matches!(
            flights.prepare(&range(10, 20), now),
            Boarding::Start
        ));
        let never = tokio::spawn(std::future::pending::<AppendAnswer>());
        let abort = never.abort_handle();
        flights.depart(range(10, 20), never, now);
        // The same previous entry, more entries: joins, with a heartbeat to the follower.
        assert!(matches!(
            flights.prepare(&range(10, 25), now),
            Boarding::Join { keepalive: true }
        ));
        // Again within a heartbeat: joins without another heartbeat.
        assert!(matches!(
            flights.prepare(&range(10, 25), now),
            Boarding::Join { keepalive: false }
        ));
        // openraft backed up after a conflict: the flight answers nothing it asks now.
        assert!(matches!(
            flights.prepare(&range(5, 25), now),
            Boarding::Start
        ));
        tokio::task::yield_now().await;
        assert!(abort.is_finished(), "the abandoned flight is aborted");
    }

    #[tokio::test]
    async fn a_flight_dropped_by_a_deadline_is_landed_by_the_next_attempt() {
        let mut flights = AppendFlight::default();
        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = answered.await;
            Ok(AppendEntriesResponse::Success)
        });
        flights.depart(range(10, 20), task, Instant::now());
        // openraft's deadline: the first wait is dropped before the answer.
        let first =
            tokio::time::timeout(Duration::from_millis(20), flights.land(&range(10, 20))).await;
        assert!(first.is_err(), "the follower has not answered yet");
        let _ = answer.send(());
        let (landed, took) = flights.land(&range(10, 20)).await;
        assert!(matches!(landed, Ok(AppendEntriesResponse::Success)));
        assert!(took.is_some());
        assert!(
            flights.typical() < Duration::from_secs(5),
            "the round trip is measured"
        );
    }
}
