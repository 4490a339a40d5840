//! The active clocks by the next instant an intent must file for them, so that an intent
//! visits only the clocks due in its window: the cost of a quiet cluster follows the ticks due,
//! not the clocks registered (a hundred thousand hourly clocks used to cost every node a
//! fifth of a core, scanned five times a second).
//!
//! Derived, like the other indexes: rebuilt from the clocks and the ledger when a registry is
//! loaded, never serialized, and kept exact by apply (registration, resume, pause, purge,
//! restore, and every intent for the clocks it visited).

use std::collections::{BTreeSet, HashMap};

use crate::clock::ClockId;

/// Active clocks with an interval schedule, by their next instant to file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DueIndex {
    by_instant: BTreeSet<(u64, ClockId)>,
    /// Each indexed clock's instant: its key in `by_instant`.
    of_clock: HashMap<ClockId, u64>,
}

impl DueIndex {
    /// Files `clock` under `next`, or takes it out of the index when it has no next instant
    /// (paused, removed, `@never`, or a schedule that ends before the end of time).
    pub(crate) fn set(&mut self, clock: &ClockId, next: Option<u64>) {
        let previous = match next {
            Some(instant) => self.of_clock.insert(clock.clone(), instant),
            None => self.of_clock.remove(clock),
        };
        if previous == next {
            return;
        }
        if let Some(previous) = previous {
            self.by_instant.remove(&(previous, clock.clone()));
        }
        if let Some(instant) = next {
            self.by_instant.insert((instant, clock.clone()));
        }
    }

    /// The clocks whose next instant is at or before `through_ms`, soonest first.
    pub(crate) fn due_through(&self, through_ms: u64) -> Vec<ClockId> {
        self.by_instant
            .iter()
            .take_while(|(instant, _)| *instant <= through_ms)
            .map(|(_, clock)| clock.clone())
            .collect()
    }

    /// How many clocks the index holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.of_clock.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(id: &str) -> ClockId {
        ClockId::new(id.to_owned())
    }

    #[test]
    fn clocks_come_out_by_instant_and_moving_one_leaves_no_trace() {
        let mut index = DueIndex::default();
        index.set(&id("b"), Some(2_000));
        index.set(&id("a"), Some(3_000));
        index.set(&id("c"), Some(1_000));
        assert_eq!(index.due_through(2_000), vec![id("c"), id("b")]);
        index.set(&id("c"), Some(5_000));
        index.set(&id("b"), None);
        index.set(&id("b"), None);
        assert_eq!(index.due_through(10_000), vec![id("a"), id("c")]);
        assert_eq!(index.len(), 2);
        assert!(index.due_through(2_999).is_empty());
    }
}
