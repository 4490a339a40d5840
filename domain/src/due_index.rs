//! The active clocks by the next instant an intent must file for them, so that an intent
//! visits only the clocks due in its window: the cost of a quiet cluster follows the ticks due,
//! not the clocks registered (a hundred thousand hourly clocks used to cost every node a
//! fifth of a core, scanned five times a second).
//!
//! Derived, like the other indexes: rebuilt from the clocks and the ledger when a registry is
//! loaded, never serialized, and kept exact by apply (registration, resume, pause, purge,
//! restore, and every intent for the clocks it visited).

use crate::clock::ClockId;
use crate::packed_set::PackedSet;

/// Active clocks with an interval schedule, by their next instant to file.
///
/// A clock's key is not kept anywhere else: the registry computes it from the clock, its
/// cursor and the intent watermark (`Registry::due_key`), before and after a command changes
/// them. A map from clock to instant here cost another entry per clock, about 40 bytes, and
/// the key kept in the cursor 8.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DueIndex {
    by_instant: PackedSet<(u64, ClockId)>,
}

impl DueIndex {
    /// Moves `clock` from `previous`, the instant it was filed under, to `next`; `None` for
    /// either means out of the index (paused, removed, `@never`, or a schedule that ends
    /// before the end of time).
    pub(crate) fn set(&mut self, clock: &ClockId, previous: Option<u64>, next: Option<u64>) {
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
        self.by_instant.len()
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
        index.set(&id("b"), None, Some(2_000));
        index.set(&id("a"), None, Some(3_000));
        index.set(&id("c"), None, Some(1_000));
        assert_eq!(index.due_through(2_000), vec![id("c"), id("b")]);
        index.set(&id("c"), Some(1_000), Some(5_000));
        index.set(&id("b"), Some(2_000), None);
        index.set(&id("b"), None, None);
        assert_eq!(index.due_through(10_000), vec![id("a"), id("c")]);
        assert_eq!(index.len(), 2);
        assert!(index.due_through(2_999).is_empty());
    }
}
