//! The index from an http queue to the clock that owns it, so that a poll finds its clock.
//!
//! Keyed by the queue id itself, an entry was two ids (32 bytes); it is now the queue id's
//! 64-bit hash and the clock's id (24 bytes). Two queue ids may share a hash, so a lookup
//! checks each candidate clock's own queue: a collision costs a comparison, never a wrong
//! clock.

use crate::clock::{Channel, Clock, ClockId, QueueId};
use crate::key_hash::key_hash;
use crate::packed_set::PackedSet;
use crate::records::ClockRecords;

/// Clock ids by the hash of their http queue's id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct QueueIndex {
    entries: PackedSet<(u64, ClockId)>,
}

impl QueueIndex {
    /// Indexes the clock `clock` under `queue`, its queue.
    pub(crate) fn insert(&mut self, queue: &QueueId, clock: &ClockId) {
        self.entries.insert((key_hash(queue), clock.clone()));
    }

    /// Removes the clock `clock` from under `queue`.
    pub(crate) fn remove(&mut self, queue: &QueueId, clock: &ClockId) {
        self.entries.remove(&(key_hash(queue), clock.clone()));
    }

    /// The clock of `clocks` whose http queue is `queue`, if any.
    pub(crate) fn find<'a>(&self, clocks: &'a ClockRecords, queue: &QueueId) -> Option<&'a Clock> {
        let key = key_hash(queue);
        self.entries
            .iter_from(&(key, ClockId::new(String::new())))
            .take_while(|(candidate, _)| *candidate == key)
            .filter_map(|(_, id)| clocks.get(id))
            .find(|clock| matches!(&clock.channel, Channel::Http { queue_id } if queue_id == queue))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ClockStatus;
    use crate::schedule::Schedule;

    fn clock(id: &str, queue: &str) -> Clock {
        Clock {
            id: ClockId::new(id.to_owned()),
            name: format!("clock {id}").into(),
            schedule: "@never".parse::<Schedule>().expect("a valid literal"),
            status: ClockStatus::Active,
            channel: Channel::Http {
                queue_id: QueueId::new(queue.to_owned()),
            },
            overlap: crate::Overlap::Allow,
        }
    }

    fn queue(id: &str) -> QueueId {
        QueueId::new(id.to_owned())
    }

    fn by_id(clocks: Vec<Clock>) -> ClockRecords {
        clocks.into_iter().collect()
    }

    #[test]
    fn finds_the_clock_of_a_queue_until_it_is_removed() {
        let clocks = by_id(vec![clock("c1", "q1"), clock("c2", "q2")]);
        let mut index = QueueIndex::default();
        index.insert(&queue("q1"), &ClockId::new("c1".into()));
        index.insert(&queue("q2"), &ClockId::new("c2".into()));
        let found =
            |index: &QueueIndex, id| index.find(&clocks, &queue(id)).map(|c| c.id.to_string());
        assert_eq!(found(&index, "q1").as_deref(), Some("c1"));
        assert_eq!(found(&index, "q2").as_deref(), Some("c2"));
        assert_eq!(found(&index, "q3"), None);
        index.remove(&queue("q1"), &ClockId::new("c1".into()));
        assert_eq!(found(&index, "q1"), None);
        assert_eq!(found(&index, "q2").as_deref(), Some("c2"));
    }

    #[test]
    fn queues_that_share_a_hash_are_told_apart_by_the_clock_s_own_queue() {
        // Force a collision: both clocks under the hash of "q1", the other clock first.
        let clocks = by_id(vec![clock("c1", "q2"), clock("c2", "q1")]);
        let key = key_hash(&queue("q1"));
        let index = QueueIndex {
            entries: [
                (key, ClockId::new("c1".into())),
                (key, ClockId::new("c2".into())),
            ]
            .into_iter()
            .collect(),
        };
        let found = index.find(&clocks, &queue("q1")).map(|c| c.id.to_string());
        assert_eq!(found.as_deref(), Some("c2"));
        assert!(index.find(&clocks, &queue("q3")).is_none());
    }
}
