//! The clocks a list filter selects, held apart from the registry so that a read of many
//! clocks walks them after the state's lock is released.

use crate::clock::{Clock, ClockId};
use crate::filter::ClockFilter;
use crate::pair_index::PairIndex;
use crate::records::ClockRecords;

/// The clocks a [`ClockFilter`] selects, taken from a [`Registry`](crate::Registry) with
/// [`select`](crate::Registry::select) and unchanged by whatever is applied after.
///
/// Taking one costs what a filter on one name costs (that name's clocks, found in the name
/// index and copied) or, for any other filter, O(1): the registry's persistent map of clocks,
/// shared and not copied. The API takes a selection under the state's read lock and walks it
/// after releasing the lock, so a list or the statistics of a million clocks does not hold the
/// state machine up for the length of the pass.
#[derive(Clone, Debug)]
pub struct Selection {
    filter: ClockFilter,
    candidates: Candidates,
}

#[derive(Clone, Debug)]
enum Candidates {
    /// The clocks of the one name the filter asks for that match it, in id order.
    Named(Vec<Clock>),
    /// Every clock, by id; the filter is applied while walking.
    All(ClockRecords),
}

impl Selection {
    /// The selection of `filter` among `clocks`, whose name index is `by_pair`.
    pub(crate) fn of(filter: ClockFilter, by_pair: &PairIndex, clocks: &ClockRecords) -> Self {
        let candidates = match filter.name.as_ref().filter(|name| !name.negated) {
            Some(name) => {
                let mut named: Vec<Clock> = by_pair
                    .named(clocks, &name.value)
                    .filter(|clock| filter.matches(clock))
                    .cloned()
                    .collect();
                named.sort_unstable_by(|a, b| a.id.cmp(&b.id));
                Candidates::Named(named)
            }
            None => Candidates::All(clocks.clone()),
        };
        Selection { filter, candidates }
    }

    /// The clocks that match, in id order, from after the id `after` (which need not exist).
    pub fn matching<'a>(
        &'a self,
        after: Option<&ClockId>,
    ) -> Box<dyn Iterator<Item = &'a Clock> + 'a> {
        match &self.candidates {
            Candidates::Named(named) => {
                let start =
                    named.partition_point(|clock| after.is_some_and(|after| clock.id <= *after));
                Box::new(named.iter().skip(start))
            }
            Candidates::All(clocks) => Box::new(
                clocks
                    .clocks_after(after)
                    .filter(|clock| self.filter.matches(clock)),
            ),
        }
    }

    /// One page of the matching clocks: at most `limit` of those after the id `after`, and
    /// whether more match beyond them. A page costs the clocks it passes over, not a pass
    /// over every clock.
    pub fn page(&self, after: Option<&ClockId>, limit: usize) -> (Vec<Clock>, bool) {
        let mut matching = self.matching(after);
        let page: Vec<Clock> = matching.by_ref().take(limit).cloned().collect();
        let more = matching.next().is_some();
        (page, more)
    }
}
