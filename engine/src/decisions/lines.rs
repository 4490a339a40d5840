//! The outbox ticks of clocks with overlap control (SPEC §5a), which go out one at a time.

use std::collections::{BTreeSet, HashMap};

use tickd_domain::ClockId;

use super::OutboxKey;

/// Per clock with overlap control, the one outbox tick that may be handed to a publisher (its
/// *head*) and those held behind it. A held tick may not go out while the head is
/// unacknowledged: the replicated `Confirm` of the head decides which of them are skipped
/// (`tickd_domain::overlap`), and the first left becomes the head once the head has left the
/// outbox. A new leader rebuilds the lines from the outbox alone, so it neither starts a held
/// tick early nor forgets one.
///
/// A tick filed older than its clock's head (a manual tick filed while the head, filed ahead,
/// is not due yet) waits behind it too: it goes out once the head is settled.
#[derive(Debug, Default)]
pub(super) struct Lines {
    /// Each clock's head.
    heads: HashMap<ClockId, OutboxKey>,
    /// Each clock's held ticks, in due order; no entry for a clock that holds none.
    behind: HashMap<ClockId, BTreeSet<OutboxKey>>,
    /// The clock of every key above, to place a removed key.
    clocks: HashMap<OutboxKey, ClockId>,
}

impl Lines {
    /// A tick of `clock` entered the outbox: true if it is the clock's head, which may go out
    /// once due; false if it is held behind the head.
    pub(super) fn filed(&mut self, key: &OutboxKey, clock: &ClockId) -> bool {
        self.clocks.insert(key.clone(), clock.clone());
        if self.heads.contains_key(clock) {
            let line = self.behind.entry(clock.clone()).or_default();
            line.insert(key.clone());
            false
        } else {
            self.heads.insert(clock.clone(), key.clone());
            true
        }
    }

    /// `key` left the outbox. Returns the tick that becomes its clock's head, if `key` was a
    /// head and the clock holds another.
    pub(super) fn removed(&mut self, key: &OutboxKey) -> Option<OutboxKey> {
        let clock = self.clocks.remove(key)?;
        if self.heads.get(&clock) != Some(key) {
            if let Some(line) = self.behind.get_mut(&clock) {
                line.remove(key);
                if line.is_empty() {
                    self.behind.remove(&clock);
                }
            }
            return None;
        }
        self.heads.remove(&clock);
        let line = self.behind.get_mut(&clock)?;
        let next = line.pop_first();
        if line.is_empty() {
            self.behind.remove(&clock);
        }
        let next = next?;
        self.heads.insert(clock, next.clone());
        Some(next)
    }

    /// Whether `key` is the head of a clock with overlap control: its settlement is its
    /// acknowledgement.
    pub(super) fn is_head(&self, key: &OutboxKey) -> bool {
        self.clocks
            .get(key)
            .is_some_and(|clock| self.heads.get(clock) == Some(key))
    }

    /// Whether `key` is held behind its clock's head.
    #[cfg(test)]
    pub(super) fn is_held(&self, key: &OutboxKey) -> bool {
        self.clocks.contains_key(key) && !self.is_head(key)
    }

    /// How many ticks are held.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.behind.values().map(BTreeSet::len).sum()
    }
}
