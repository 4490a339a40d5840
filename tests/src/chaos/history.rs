//! What a chaos run records: every client operation with its timing and result, every tick a
//! consumer received (for a lease clock: every tick a lease handed out, with what its ack
//! answered), and the faults injected. The checkers turn this into a verdict.
//!
//! Times are milliseconds since the Unix epoch, read from the same machine clock the nodes
//! use, so they compare directly with a tick's scheduled instant.

use crate::chaos::nemesis::FaultKind;

/// A client operation on the clock registry, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `POST /api/v1/clocks` for (`name`, the workload's schedule).
    Register {
        /// The clock name.
        name: String,
    },
    /// `PUT /api/v1/clocks/{id}/pause`.
    Pause {
        /// The clock id.
        id: String,
    },
    /// `PUT /api/v1/clocks/{id}/resume`.
    Resume {
        /// The clock id.
        id: String,
    },
    /// `GET /api/v1/clocks/{id}`.
    Get {
        /// The clock id.
        id: String,
    },
    /// `GET /api/v1/clocks?name=…`.
    ListByName {
        /// The clock name.
        name: String,
    },
}

/// What the operation returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// 201 from a registration: the clock's id and the status shown (PENDING when created).
    Registered {
        /// The clock id.
        id: String,
        /// The status in the response body.
        status: String,
    },
    /// 200 from pause, resume or get: the clock's status.
    Status(String),
    /// 200 from a list: the (id, status) of every clock listed.
    Listed(Vec<(String, String)>),
    /// 404: no such clock.
    NotFound,
    /// No definite answer (503, a timeout, a broken connection): the operation may or may not
    /// have taken effect.
    Indeterminate(String),
}

/// One operation with its timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Which client ran it (a client runs one operation at a time).
    pub client: usize,
    /// Which node it was sent to.
    pub node: u64,
    /// The operation.
    pub op: Op,
    /// When it was sent.
    pub start_ms: u64,
    /// When the answer arrived (for an indeterminate result: when the client gave up).
    pub end_ms: u64,
    /// The answer.
    pub result: OpResult,
}

/// One tick as a consumer received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The clock id in the message.
    pub clock: String,
    /// The message's `tick_id`.
    pub tick_id: String,
    /// The message's `scheduled_at`, in ms since the epoch.
    pub scheduled_ms: u64,
    /// The message's `manual` flag.
    pub manual: bool,
    /// When the consumer received it.
    pub received_ms: u64,
}

/// One tick a lease handed to the consumer of a lease clock (SPEC §2 "lease and ack"), and what
/// the consumer's ack of it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedTick {
    /// The clock whose queue was leased (the consumer's, not the message's: a tick of another
    /// clock in this queue then shows as a foreign id).
    pub clock: String,
    /// The message's `tick_id`.
    pub tick_id: String,
    /// The message's `scheduled_at`, in ms since the epoch.
    pub scheduled_ms: u64,
    /// The message's `deliveries`: 1 the first time the tick is handed out, one more each time
    /// its lease ran out and it was handed out again.
    pub deliveries: u64,
    /// The message's `skipped`: how many instants just before this one were coalesced into it
    /// (SPEC §5), so that a consumer sees every gap.
    pub skipped: u64,
    /// The receipt the lease gave with it.
    pub receipt: String,
    /// When the lease answered.
    pub leased_ms: u64,
    /// What the ack of `receipt` came to.
    pub ack: AckOutcome,
}

/// What a consumer's ack of one receipt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckOutcome {
    /// An ack answered 200 and did not refuse the receipt.
    Acked,
    /// An ack retried after an attempt whose answer was lost (a node killed mid-request, a
    /// 503) refused the receipt as `unknown`. Nobody else held it (the consumer acks what it
    /// leased before it leases again), so the lost attempt acked it.
    AckedByLostAttempt,
    /// Refused for this reason: `expired` when the lease ran out first (the tick comes back,
    /// one delivery more), or what made the answer unreadable.
    Refused(String),
    /// No node answered the ack within the consumer's retry time: it may or may not have
    /// acked the receipt.
    Unanswered,
}

impl AckOutcome {
    /// Whether the receipt was acked: answered so, or by the lost attempt before.
    pub fn is_acked(&self) -> bool {
        matches!(self, AckOutcome::Acked | AckOutcome::AckedByLostAttempt)
    }
}

impl std::fmt::Display for AckOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AckOutcome::Acked => write!(f, "acked"),
            AckOutcome::AckedByLostAttempt => {
                write!(f, "acked by an attempt whose answer was lost")
            }
            AckOutcome::Refused(reason) => write!(f, "refused ({reason})"),
            AckOutcome::Unanswered => write!(f, "ack unanswered"),
        }
    }
}

/// A clock whose scheduled ticks the run watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedClock {
    /// The clock id.
    pub id: String,
    /// The interval of its schedule, in ms.
    pub interval_ms: u64,
    /// When its registration was acknowledged: its first tick is the first instant after.
    pub registered_ms: u64,
    /// Pauses of the clock: (pause acknowledged at, resume sent at — `None` if never resumed).
    /// No scheduled tick due strictly between the two may be delivered.
    pub paused: Vec<(u64, Option<u64>)>,
    /// Stretches (from, to] in which a pause or resume was in flight (sent, not yet
    /// acknowledged): the cluster may or may not deliver the ticks due then, so they are
    /// neither expected nor forbidden.
    pub unsettled: Vec<(u64, u64)>,
}

impl WatchedClock {
    /// An `every.1.seconds` clock whose registration answered `created` at `registered_ms`,
    /// not yet paused.
    pub fn every_second(created: &serde_json::Value, registered_ms: u64) -> WatchedClock {
        WatchedClock {
            id: created["id"].as_str().unwrap_or_default().to_string(),
            interval_ms: 1_000,
            registered_ms,
            paused: Vec::new(),
            unsettled: Vec::new(),
        }
    }
}

/// An http pop of a watched clock's queue that got no answer (a transport error, a timeout or
/// an error status): it may have removed ticks that then reached nobody. SPEC §7 keeps http
/// ticks "until popped", and a pop whose answer is lost is still a pop, so the ticks it may
/// have taken are reported as unobserved, not lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnansweredPop {
    /// The clock whose queue was popped.
    pub clock: String,
    /// When the request was sent.
    pub start_ms: u64,
    /// When the poller gave up on it.
    pub end_ms: u64,
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Which kind of fault was done (a fault that found no leader is a crash of every node).
    pub kind: FaultKind,
    /// What was done, for the summary ("kill -9 leader 2").
    pub what: String,
    /// When it began.
    pub start_ms: u64,
    /// When it was healed.
    pub healed_ms: u64,
    /// Whether the fault took the leader away, and how soon the nodes agreed on another.
    pub leader: LeaderRecovery,
}

impl Fault {
    /// How long the cluster took to have a (new) leader after the fault began, if it lost one
    /// and found another.
    pub fn time_to_leader_ms(&self) -> Option<u64> {
        match self.leader {
            LeaderRecovery::Elected { after_ms } => Some(after_ms),
            LeaderRecovery::Kept | LeaderRecovery::NotWithin { .. } => None,
        }
    }
}

/// What became of the leader across a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderRecovery {
    /// The fault did not touch the leader (a follower, the broker).
    Kept,
    /// The leader was lost and the running nodes agreed on one `after_ms` after the fault.
    Elected {
        /// From the fault's start to the agreement.
        after_ms: u64,
    },
    /// The leader was lost and no leader was agreed on within `bound_ms`: a liveness
    /// violation.
    NotWithin {
        /// The bound that passed.
        bound_ms: u64,
    },
}

/// A broken guarantee, for the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which checker found it.
    pub checker: &'static str,
    /// What was wrong, with the evidence.
    pub detail: String,
}
