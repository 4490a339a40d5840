//! Retries of manual ticks: a manual tick applied twice is filed once.
//!
//! A node forwards `POST /api/v1/clocks/{id}/tick` to the leader as a [`crate::Command::Tick`],
//! and sends the same command again when it cannot tell whether the first attempt committed
//! (the leader died after committing it, or lost its office with the entry in flight), so both
//! may commit. Without a record, the clock's consumer would get two ticks for one request.
//!
//! Each attempt carries the request id the node drew when the client asked. The ledger keeps
//! the last [`REMEMBERED_MANUAL_TICKS`] request ids of each clock, and a manual tick whose
//! request it keeps files nothing. Several, not one: a node's writes travel to the leader in
//! batches, a batch is retried whole, and two manual ticks of one clock in one batch must both
//! be recognised. From cluster level 3 ([`crate::Level::replays_manual_ticks`]); below it a request id is
//! ignored, as releases before it ignore the field.

use std::collections::VecDeque;

use crate::clock::ClockId;
use crate::ticks::TickLedger;

/// How many manual tick requests of one clock the ledger remembers.
pub const REMEMBERED_MANUAL_TICKS: usize = 16;

/// The longest request id apply accepts, in bytes: a node draws 32 hex digits.
pub const MAX_TICK_REQUEST_BYTES: usize = 64;

/// The request ids of one clock's latest manual ticks, oldest first.
pub type ManualRequests = VecDeque<String>;

impl TickLedger {
    /// Whether a manual tick of `clock` with `request` was filed already.
    pub(crate) fn is_retried_tick(&self, clock: &ClockId, request: &str) -> bool {
        self.manual_requests
            .get(clock)
            .is_some_and(|requests| requests.iter().any(|seen| seen == request))
    }

    /// Remembers `request` as the latest manual tick of `clock`, forgetting the oldest past
    /// [`REMEMBERED_MANUAL_TICKS`].
    pub(crate) fn remember_tick(&mut self, clock: &ClockId, request: String) {
        let requests = self.manual_requests.entry(clock.clone()).or_default();
        requests.push_back(request);
        while requests.len() > REMEMBERED_MANUAL_TICKS {
            requests.pop_front();
        }
    }
}
