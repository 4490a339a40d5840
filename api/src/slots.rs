//! A fixed number of places for one kind of long-lived response, so that clients cannot make a
//! node hold more of them than it was sized for: event streams, each a task that wakes four
//! times a second, and unpaged lists, each holding an image of the clocks as they were when it
//! began (which the registry pays for in copied nodes as it changes, up to a whole registry
//! per list).

use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// The places for one kind of response; cloning shares them.
#[derive(Clone)]
pub(crate) struct Slots {
    free: Arc<Semaphore>,
    max: usize,
    /// What a place holds, plural, for the refusal: "event streams".
    what: &'static str,
    /// What a refused client may do instead, for the refusal.
    advice: &'static str,
}

/// A taken place, given back when dropped: the response holds it for its life.
pub(crate) type Slot = OwnedSemaphorePermit;

impl Slots {
    pub(crate) fn new(max: usize, what: &'static str, advice: &'static str) -> Self {
        Slots {
            free: Arc::new(Semaphore::new(max)),
            max,
            what,
            advice,
        }
    }

    /// A place, or a 503 (with `Retry-After`) that says the node is at its most and what to do.
    pub(crate) fn take(&self) -> Result<Slot, ApiError> {
        self.free.clone().try_acquire_owned().map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "this node serves {} {} already; {}",
                    self.max, self.what, self.advice
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_refused_at_the_most_and_given_back_when_dropped() {
        let slots = Slots::new(2, "lists", "retry later");
        let first = slots.take().expect("a first place");
        let _second = slots.take().expect("a second place");
        let refused = slots.take().expect_err("no third place");
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            refused.message(),
            "this node serves 2 lists already; retry later"
        );
        drop(first);
        assert!(slots.take().is_ok(), "a dropped place is free again");
    }
}
