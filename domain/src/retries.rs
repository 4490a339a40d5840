//! Retries of manual ticks, pauses and resumes: each applied twice takes effect once.
//!
//! A node forwards `POST /api/v1/clocks/{id}/tick` (or `…/pause`, `…/resume`) to the leader as
//! a [`crate::Command::Tick`] (or `Pause`, `Resume`), and sends the same command again when it
//! cannot tell whether the first attempt committed (the leader died after committing it, or
//! lost its office with the entry in flight), so both may commit. Without a record, the
//! clock's consumer would get two ticks for one request; and a pause applied again after
//! another client's resume would undo that acknowledged resume (the deterministic simulation
//! found it: a history no order of single pauses and resumes explains).
//!
//! Each attempt carries the request id the node drew when the client asked. The ledger keeps
//! the last [`REMEMBERED_REQUESTS`] request ids of each clock, and a command whose request it
//! keeps changes nothing: a manual tick files nothing, a pause or resume answers the status it
//! set the first time. Several, not one: a node's writes travel to the leader in batches, a
//! batch is retried whole, and two requests on one clock in one batch must both be recognised.
//! From cluster level 3 ([`crate::Level::replays_requests`]); below it a request id is ignored,
//! as releases before it ignore the field.

use std::collections::VecDeque;

use crate::clock::ClockId;
use crate::ticks::TickLedger;

/// How many requests (manual ticks, pauses, resumes) of one clock the ledger remembers.
pub const REMEMBERED_REQUESTS: usize = 16;

/// The longest request id apply accepts, in bytes: a node draws 32 hex digits.
pub const MAX_REQUEST_BYTES: usize = 64;

/// The request ids of one clock's latest manual ticks, pauses and resumes, oldest first.
pub type RecentRequests = VecDeque<String>;

impl TickLedger {
    /// Whether a request of `clock` with id `request` was applied already.
    pub(crate) fn is_retried(&self, clock: &ClockId, request: &str) -> bool {
        self.manual_requests
            .get(clock)
            .is_some_and(|requests| requests.iter().any(|seen| seen == request))
    }

    /// Remembers `request` as the latest request applied to `clock`, forgetting the oldest past
    /// [`REMEMBERED_REQUESTS`].
    pub(crate) fn remember_request(&mut self, clock: &ClockId, request: String) {
        let requests = self.manual_requests.entry(clock.clone()).or_default();
        requests.push_back(request);
        while requests.len() > REMEMBERED_REQUESTS {
            requests.pop_front();
        }
    }
}
