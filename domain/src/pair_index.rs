//! The index from a clock's identity, its (name, schedule literal) pair, to its id; and from
//! a name to the clocks of that name.
//!
//! A registration must find the clock of its pair, so every clock is indexed by it. Keyed by
//! the pair itself, the index held a second copy of every name and literal; keyed by 64-bit
//! hashes of the name and of the literal, an entry is two numbers and the id (16 bytes). Two names
//! (or literals) may share a hash, so a lookup checks each candidate's own name and literal: a
//! collision costs a comparison, never a wrong answer. The name's hash comes first, so the
//! clocks of one name are one range of the index: a list by name (`?name=`) costs the clocks
//! of that name, not a pass over the registry.

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::clock::{Clock, ClockId};
use crate::shared_map::SharedMap;

/// Clock ids by the hashes of their name and schedule literal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PairIndex {
    entries: BTreeSet<(u64, u64, ClockId)>,
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
        clocks: &'a SharedMap<ClockId, Clock>,
        name: &str,
        literal: &str,
    ) -> Option<&'a Clock> {
        let key = (hash_of(name), hash_of(literal));
        self.entries
            .range((key.0, key.1, ClockId::new(String::new()))..)
            .take_while(|(name, literal, _)| (*name, *literal) == key)
            .filter_map(|(_, _, id)| clocks.get(id))
            .find(|clock| clock.name == name && clock.schedule.as_str() == literal)
    }

    /// The clocks of `clocks` named `name`, in no particular order.
    pub(crate) fn named<'a>(
        &'a self,
        clocks: &'a SharedMap<ClockId, Clock>,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Clock> + 'a {
        let hash = hash_of(name);
        self.entries
            .range((hash, 0, ClockId::new(String::new()))..)
            .take_while(move |(candidate, _, _)| *candidate == hash)
            .filter_map(|(_, _, id)| clocks.get(id))
            .filter(move |clock| clock.name == name)
    }
}

/// The index entry of `clock`: its name's and literal's hashes and its id.
fn entry_of(clock: &Clock) -> (u64, u64, ClockId) {
    (
        hash_of(&clock.name),
        hash_of(clock.schedule.as_str()),
        clock.id.clone(),
    )
}

/// A string's hash. `DefaultHasher::new` has fixed keys, so a hash is the same for the life of
/// the process (the index is rebuilt on load, never stored).
fn hash_of(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Channel, ClockStatus};
    use crate::schedule::Schedule;

    fn clock(id: &str, name: &str, literal: &str) -> Clock {
        Clock {
            id: ClockId::new(id.to_owned()),
            name: name.to_owned(),
            schedule: literal.parse::<Schedule>().expect("a valid literal"),
            status: ClockStatus::Active,
            channel: Channel::Rabbit {
                queue: format!("ticktok-{name};{literal}"),
            },
        }
    }

    fn indexed(clocks: &[Clock]) -> (SharedMap<ClockId, Clock>, PairIndex) {
        let mut index = PairIndex::default();
        for clock in clocks {
            index.insert(clock);
        }
        let by_id = clocks.iter().map(|c| (c.id.clone(), c.clone())).collect();
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
        let (name, literal) = (hash_of("orders"), hash_of("@never"));
        let index = PairIndex {
            entries: [
                (name, literal, first.id.clone()),
                (name, literal, second.id.clone()),
            ]
            .into(),
        };
        let clocks: SharedMap<ClockId, Clock> = [first, second]
            .into_iter()
            .map(|c| (c.id.clone(), c))
            .collect();
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
        let (name, literal) = (hash_of("orders"), hash_of("@never"));
        let index = PairIndex {
            entries: [&same_literal, &same_name, &pair]
                .into_iter()
                .map(|c| (name, literal, c.id.clone()))
                .collect(),
        };
        let clocks: SharedMap<ClockId, Clock> = [same_literal, same_name, pair]
            .into_iter()
            .map(|c| (c.id.clone(), c))
            .collect();
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
        let name = hash_of("orders");
        let index = PairIndex {
            entries: [&orders, &invoices]
                .into_iter()
                .map(|c| (name, hash_of(c.schedule.as_str()), c.id.clone()))
                .collect(),
        };
        let clocks: SharedMap<ClockId, Clock> = [orders, invoices]
            .into_iter()
            .map(|c| (c.id.clone(), c))
            .collect();
        let named: Vec<String> = index
            .named(&clocks, "orders")
            .map(|c| c.id.to_string())
            .collect();
        assert_eq!(named, ["c1"]);
    }
}
