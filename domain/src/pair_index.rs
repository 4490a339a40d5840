//! The index from a clock's identity, its (name, schedule literal) pair, to its id; and from
//! a name to the clocks of that name.
//!
//! A registration must find the clock of its pair, so every clock is indexed by it. Keyed by
//! the pair itself, the index held a second copy of every name and literal; an entry is now
//! one 64-bit key and the id (24 bytes): the high 48 bits are the name's hash, the low 16 the
//! literal's. Two pairs may share a key, so a lookup checks each candidate's own name and
//! literal: a collision costs a comparison, never a wrong answer. The name's bits come first,
//! so the clocks of one name are one range of the index: a list by name (`?name=`) costs the
//! clocks of that name (and of any name that shares its 48 bits), not a pass over the
//! registry. The literal needs few bits: one name has few schedules.

use std::ops::RangeInclusive;

use crate::clock::{Clock, ClockId};
use crate::key_hash::key_hash;
use crate::packed_set::PackedSet;
use crate::records::ClockRecords;

/// The bits of a key that come from the literal's hash; the rest come from the name's.
const LITERAL_BITS: u32 = 16;

/// The literal's part of a key.
const LITERAL_MASK: u64 = (1 << LITERAL_BITS) - 1;

/// Clock ids by a key made of their name's and schedule literal's hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PairIndex {
    entries: PackedSet<(u64, ClockId)>,
}

impl PairIndex {
    /// Indexes `clock` under its pair.
    pub(crate) fn insert(&mut self, clock: &Clock) {
        self.entries.insert(entry_of(clock));
    }

    /// Removes `clock` from the index.
    pub(crate) fn remove(&mut self, clock: &Clock) {
        self.entries.remove(&entry_of(clock));
    }

    /// The clock of `clocks` whose pair is (`name`, `literal`), if any.
    pub(crate) fn find<'a>(
        &self,
        clocks: &'a ClockRecords,
        name: &str,
        literal: &str,
    ) -> Option<&'a Clock> {
        let key = pair_key(name, literal);
        self.candidates(clocks, key..=key)
            .find(|clock| &*clock.name == name && clock.schedule.as_str() == literal)
    }

    /// The clocks of `clocks` named `name`, in no particular order.
    pub(crate) fn named<'a>(
        &'a self,
        clocks: &'a ClockRecords,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Clock> + 'a {
        let first = pair_key(name, "") & !LITERAL_MASK;
        self.candidates(clocks, first..=first | LITERAL_MASK)
            .filter(move |clock| &*clock.name == name)
    }

    /// The clocks filed under the keys of `keys`.
    fn candidates<'a>(
        &self,
        clocks: &'a ClockRecords,
        keys: RangeInclusive<u64>,
    ) -> impl Iterator<Item = &'a Clock> {
        let (first, last) = keys.into_inner();
        self.entries
            .iter_from(&(first, ClockId::new(String::new())))
            .take_while(move |(key, _)| *key <= last)
            .filter_map(|(_, id)| clocks.get(id))
    }
}

/// The index entry of `clock`: its pair's key and its id.
fn entry_of(clock: &Clock) -> (u64, ClockId) {
    (
        pair_key(&clock.name, clock.schedule.as_str()),
        clock.id.clone(),
    )
}

/// The key of a (name, literal) pair: the name's hash in the high bits, the literal's in the
/// low [`LITERAL_BITS`].
fn pair_key(name: &str, literal: &str) -> u64 {
    (key_hash(name) & !LITERAL_MASK) | (key_hash(literal) & LITERAL_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Channel, ClockStatus};
    use crate::schedule::Schedule;

    fn clock(id: &str, name: &str, literal: &str) -> Clock {
        Clock {
            id: ClockId::new(id.to_owned()),
            name: name.into(),
            schedule: literal.parse::<Schedule>().expect("a valid literal"),
            status: ClockStatus::Active,
            channel: Channel::Rabbit,
            overlap: crate::Overlap::Allow,
        }
    }

    /// The clocks by id, as the registry keeps them.
    fn by_id<const N: usize>(clocks: [Clock; N]) -> ClockRecords {
        clocks.into_iter().collect()
    }

    /// The ids of `clocks`, in the order they come.
    fn ids<'a>(clocks: impl Iterator<Item = &'a Clock>) -> Vec<String> {
        clocks.map(|c| c.id.to_string()).collect()
    }

    fn indexed(clocks: &[Clock]) -> (ClockRecords, PairIndex) {
        let mut index = PairIndex::default();
        for clock in clocks {
            index.insert(clock);
        }
        let by_id = clocks.iter().cloned().collect();
        (by_id, index)
    }

    #[test]
    fn finds_the_clock_of_a_pair_and_nothing_else() {
        let (clocks, index) = indexed(&[
            clock("c1", "ab", "every.1.seconds"),
            clock("c2", "a", "every.1.seconds"),
        ]);
        let found = |name, literal| index.find(&clocks, name, literal).map(|c| c.id.to_string());
        assert_eq!(found("ab", "every.1.seconds").as_deref(), Some("c1"));
        assert_eq!(found("a", "every.1.seconds").as_deref(), Some("c2"));
        assert_eq!(found("a", "every.2.seconds"), None);
        assert_eq!(found("abevery.1.seconds", ""), None);
    }

    #[test]
    fn a_removed_clock_is_not_found() {
        let orders = clock("c1", "orders", "@never");
        let (clocks, mut index) = indexed(std::slice::from_ref(&orders));
        index.remove(&orders);
        assert!(index.find(&clocks, "orders", "@never").is_none());
        assert_eq!(index, PairIndex::default());
    }

    #[test]
    fn clocks_that_share_a_hash_are_told_apart_by_their_pair() {
        // Force a collision: file both clocks under one hash, as two pairs could be.
        let first = clock("c1", "orders", "@never");
        let second = clock("c2", "invoices", "@never");
        let key = pair_key("orders", "@never");
        let index = PairIndex {
            entries: [(key, first.id.clone()), (key, second.id.clone())]
                .into_iter()
                .collect(),
        };
        let clocks = by_id([first, second]);
        let found = index
            .find(&clocks, "orders", "@never")
            .map(|c| c.id.to_string());
        assert_eq!(found.as_deref(), Some("c1"));
    }

    #[test]
    fn a_colliding_clock_must_match_both_name_and_literal() {
        // Under one forced hash: a clock with the literal but another name, one with the name
        // but another literal, and the pair itself, last in id order.
        let same_literal = clock("c1", "invoices", "@never");
        let same_name = clock("c2", "orders", "every.1.seconds");
        let pair = clock("c3", "orders", "@never");
        let key = pair_key("orders", "@never");
        let index = PairIndex {
            entries: [&same_literal, &same_name, &pair]
                .into_iter()
                .map(|c| (key, c.id.clone()))
                .collect(),
        };
        let clocks = by_id([same_literal, same_name, pair]);
        let found = |name, literal| index.find(&clocks, name, literal).map(|c| c.id.to_string());
        assert_eq!(found("orders", "@never").as_deref(), Some("c3"));
        assert_eq!(found("receipts", "every.1.seconds"), None);
    }

    #[test]
    fn finds_every_clock_of_a_name_and_only_those() {
        let (clocks, index) = indexed(&[
            clock("c1", "orders", "@never"),
            clock("c2", "orders", "every.1.seconds"),
            clock("c3", "order", "@never"),
            clock("c4", "invoices", "@never"),
        ]);
        let named = |name| {
            let mut ids: Vec<String> = index
                .named(&clocks, name)
                .map(|c| c.id.to_string())
                .collect();
            ids.sort_unstable();
            ids
        };
        assert_eq!(named("orders"), ["c1", "c2"]);
        assert_eq!(named("order"), ["c3"]);
        assert!(named("receipts").is_empty());
    }

    #[test]
    fn a_name_that_shares_a_hash_is_told_apart() {
        // Force a collision of names: both clocks under the hash of "orders".
        let orders = clock("c1", "orders", "@never");
        let invoices = clock("c2", "invoices", "@never");
        let index = PairIndex {
            entries: [&orders, &invoices]
                .into_iter()
                .map(|c| (pair_key("orders", c.schedule.as_str()), c.id.clone()))
                .collect(),
        };
        let clocks = by_id([orders, invoices]);
        let named = ids(index.named(&clocks, "orders"));
        assert_eq!(named, ["c1"]);
    }

    #[test]
    fn a_name_covers_every_literal_key_and_no_neighbour() {
        // The clocks of one name under the lowest and the highest literal bits, and a clock
        // of that name filed just past the name's range, as another name's hash could put it.
        let low = clock("c1", "orders", "@never");
        let high = clock("c2", "orders", "every.1.seconds");
        let outside = clock("c3", "orders", "every.2.seconds");
        let prefix = pair_key("orders", "") & !LITERAL_MASK;
        let index = PairIndex {
            entries: [
                (prefix, low.id.clone()),
                (prefix | LITERAL_MASK, high.id.clone()),
                (prefix.wrapping_add(LITERAL_MASK + 1), outside.id.clone()),
            ]
            .into_iter()
            .collect(),
        };
        let clocks = by_id([low, high, outside]);
        let named = ids(index.named(&clocks, "orders"));
        assert_eq!(named, ["c1", "c2"]);
    }
}
