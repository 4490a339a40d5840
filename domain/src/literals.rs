//! One copy of each schedule literal in use, shared by every clock of that schedule.
//!
//! A registration parses its schedule into a literal of its own; kept as it came, a hundred
//! thousand `every.1.hours` clocks held a hundred thousand copies of `every.1.hours`. The
//! registry passes each stored schedule through [`Literals::share`], so the clocks of one
//! schedule hold one copy (a [`Schedule`] clone is a reference count).
//!
//! A cache, not state: it is not serialized, it is rebuilt as clocks are loaded, and two
//! registries with the same clocks are equal whatever it holds.

use std::collections::HashSet;

use crate::schedule::Schedule;

/// The schedules of the registry's clocks, each once.
#[derive(Clone, Debug, Default)]
pub(crate) struct Literals {
    in_use: HashSet<Schedule>,
}

impl Literals {
    /// `schedule`, holding the registry's copy of its literal (which it becomes if there is
    /// none yet).
    pub(crate) fn share(&mut self, schedule: Schedule) -> Schedule {
        match self.in_use.get(&schedule) {
            Some(shared) => shared.clone(),
            None => {
                self.in_use.insert(schedule.clone());
                schedule
            }
        }
    }

    /// Takes back the last copy of `schedule` that a removed clock held: the literal is
    /// forgotten when nothing else holds it. A copy held elsewhere (a tick, an answer on its
    /// way) keeps it until a later release or reuse.
    pub(crate) fn release(&mut self, schedule: Schedule) {
        let Some(kept) = self.in_use.take(&schedule) else {
            return;
        };
        drop(schedule);
        if !kept.is_only_copy() {
            self.in_use.insert(kept);
        }
    }

    /// How many literals are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.in_use.len()
    }
}

/// Always equal: see the module's documentation.
impl PartialEq for Literals {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for Literals {}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(literal: &str) -> Schedule {
        literal.parse().expect("a valid literal")
    }

    #[test]
    fn clocks_of_one_schedule_share_its_literal() {
        let mut literals = Literals::default();
        let first = literals.share(schedule("every.1.hours"));
        let second = literals.share(schedule("every.1.hours"));
        assert_eq!(first, second);
        assert!(std::ptr::eq(first.as_str(), second.as_str()), "one copy");
        let other = literals.share(schedule("every.60.minutes"));
        assert!(!std::ptr::eq(first.as_str(), other.as_str()));
        assert_eq!(literals.len(), 2);
        // Every clock holds its schedule: one pointer, whatever the literal.
        assert_eq!(size_of::<Schedule>(), size_of::<usize>());
    }

    #[test]
    fn a_literal_is_forgotten_with_its_last_clock() {
        let mut literals = Literals::default();
        let first = literals.share(schedule("every.1.hours"));
        let second = literals.share(schedule("every.1.hours"));
        literals.release(first);
        assert_eq!(literals.len(), 1, "the second clock still uses it");
        literals.release(second);
        assert_eq!(literals.len(), 0);
    }

    #[test]
    fn a_copy_held_elsewhere_keeps_the_literal() {
        let mut literals = Literals::default();
        let clock = literals.share(schedule("@never"));
        let tick = clock.clone();
        literals.release(clock);
        assert_eq!(literals.len(), 1);
        let again = literals.share(schedule("@never"));
        assert!(
            std::ptr::eq(again.as_str(), tick.as_str()),
            "reused, not copied again"
        );
    }
}
