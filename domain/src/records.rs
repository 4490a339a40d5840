//! The registry's clocks, one record each: the clock and its ledger cursor together.
//!
//! Kept as two maps by id (the clocks, and the ledger's cursors), every clock paid for its id
//! twice and for an entry in a second B-tree, which bought nothing: every command that reads a
//! cursor has found its clock first. One set of records, ordered by the id each record holds
//! once, keeps both, 26 bytes a clock smaller (`registry-bytes`, 200 000 http clocks).
//!
//! The set is persistent ([`imbl::OrdSet`], like [`crate::SharedMap`]): an image of it costs
//! O(1), so a snapshot and an off-lock reader share it. It has no in-place access, and a
//! record's place depends on its id, so a record changes by being taken out and put back
//! ([`ClockRecords::modify`]); the id cannot change that way, only the status and the cursor.
//! Both halves cost O(log n), as the lookup did, and copy no node that no image shares.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::ops::Bound;

use crate::clock::{Clock, ClockId, ClockStatus};
use crate::ticks::Cursor;

/// One clock and its cursor (`None` only for a clock loaded from a snapshot that lacked one:
/// such a clock never ticks).
///
/// Ordered and compared by the clock's id alone, so that the set finds a record by its id
/// ([`Borrow`] requires the two to agree); [`ClockRecords::same_as`] compares contents.
#[derive(Clone, Debug)]
pub(crate) struct ClockRecord {
    clock: Clock,
    cursor: Option<Cursor>,
}

impl Borrow<ClockId> for ClockRecord {
    fn borrow(&self) -> &ClockId {
        &self.clock.id
    }
}

impl PartialEq for ClockRecord {
    fn eq(&self, other: &Self) -> bool {
        self.clock.id == other.clock.id
    }
}

impl Eq for ClockRecord {}

impl PartialOrd for ClockRecord {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ClockRecord {
    fn cmp(&self, other: &Self) -> Ordering {
        self.clock.id.cmp(&other.clock.id)
    }
}

/// What [`ClockRecords::modify`] may change of a record: not its clock's id.
pub(crate) struct RecordMut<'a> {
    /// The clock's status.
    pub(crate) status: &'a mut ClockStatus,
    /// The clock's cursor.
    pub(crate) cursor: &'a mut Option<Cursor>,
}

/// The clocks of a registry with their cursors, ordered by id.
#[derive(Clone, Debug, Default)]
pub(crate) struct ClockRecords {
    records: imbl::OrdSet<ClockRecord>,
}

impl ClockRecords {
    /// The clock with this id.
    pub fn get(&self, id: &ClockId) -> Option<&Clock> {
        self.records.get(id).map(|record| &record.clock)
    }

    /// The cursor of the clock with this id.
    pub fn cursor(&self, id: &ClockId) -> Option<&Cursor> {
        self.records.get(id)?.cursor.as_ref()
    }

    /// The clock with this id and its cursor.
    pub fn with_cursor(&self, id: &ClockId) -> Option<(&Clock, Option<&Cursor>)> {
        let record = self.records.get(id)?;
        Some((&record.clock, record.cursor.as_ref()))
    }

    /// Whether a clock has this id.
    pub fn contains(&self, id: &ClockId) -> bool {
        self.records.contains(id)
    }

    /// How many clocks there are.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there is no clock.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The clocks, ordered by id.
    pub fn clocks(&self) -> impl Iterator<Item = &Clock> {
        self.records.iter().map(|record| &record.clock)
    }

    /// The clocks with their cursors, ordered by id.
    pub fn with_cursors(&self) -> impl Iterator<Item = (&Clock, Option<&Cursor>)> {
        self.records
            .iter()
            .map(|record| (&record.clock, record.cursor.as_ref()))
    }

    /// The clocks ordered by id from after `after` (which need not exist), or from the first.
    pub fn clocks_after<'a>(
        &'a self,
        after: Option<&ClockId>,
    ) -> impl Iterator<Item = &'a Clock> + use<'a> {
        let start = after.cloned().map_or(Bound::Unbounded, Bound::Excluded);
        self.records
            .range::<_, ClockId>((start, Bound::Unbounded))
            .map(|record| &record.clock)
    }

    /// Whether both hold the same clocks with the same cursors.
    pub(crate) fn same_as(&self, other: &ClockRecords) -> bool {
        self.len() == other.len()
            && self
                .records
                .iter()
                .zip(other.records.iter())
                .all(|(a, b)| a.clock == b.clock && a.cursor == b.cursor)
    }

    /// Whether `other` is an unchanged image of these records, sharing all of them.
    #[cfg(test)]
    pub(crate) fn ptr_eq(&self, other: &ClockRecords) -> bool {
        self.records.ptr_eq(&other.records)
    }

    /// Stores a clock whose id no record holds (a record with its id would be replaced).
    pub(crate) fn insert(&mut self, clock: Clock, cursor: Option<Cursor>) {
        self.records.insert(ClockRecord { clock, cursor });
    }

    /// Removes the clock with this id and returns it.
    pub(crate) fn remove(&mut self, id: &ClockId) -> Option<Clock> {
        self.records.remove(id).map(|record| record.clock)
    }

    /// Changes the status or the cursor of the clock with this id, and returns what `change`
    /// returned; `None` when no clock has the id.
    pub(crate) fn modify<R>(
        &mut self,
        id: &ClockId,
        change: impl FnOnce(RecordMut<'_>) -> R,
    ) -> Option<R> {
        let mut record = self.records.remove(id)?;
        let result = change(RecordMut {
            status: &mut record.clock.status,
            cursor: &mut record.cursor,
        });
        self.records.insert(record);
        Some(result)
    }

    /// Changes every cursor, in id order.
    pub(crate) fn modify_each_cursor(&mut self, mut change: impl FnMut(&mut Cursor)) {
        let ids: Vec<ClockId> = self.clocks().map(|clock| clock.id.clone()).collect();
        for id in &ids {
            self.modify_cursor(id, &mut change);
        }
    }

    /// Changes the cursor of the clock with this id, if it has one.
    pub(crate) fn modify_cursor(&mut self, id: &ClockId, change: impl FnOnce(&mut Cursor)) {
        self.modify(id, |record| record.cursor.as_mut().map(change));
    }
}

/// Clocks without cursors, for the tests of what reads only the clocks (the indexes).
#[cfg(test)]
impl FromIterator<Clock> for ClockRecords {
    fn from_iter<I: IntoIterator<Item = Clock>>(clocks: I) -> Self {
        let mut records = ClockRecords::default();
        for clock in clocks {
            records.insert(clock, None);
        }
        records
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Channel, QueueId};
    use crate::schedule::Schedule;

    fn clock(id: &str) -> Clock {
        Clock {
            id: ClockId::new(id.to_owned()),
            name: format!("clock {id}").into(),
            schedule: "every.5.seconds"
                .parse::<Schedule>()
                .expect("a valid literal"),
            status: ClockStatus::Active,
            channel: Channel::Http {
                queue_id: QueueId::new(format!("queue-of-{id}-0000000000000000")),
            },
            overlap: crate::Overlap::Allow,
        }
    }

    fn records(ids: &[&str]) -> ClockRecords {
        let mut records = ClockRecords::default();
        for id in ids {
            records.insert(clock(id), Some(Cursor::starting(1_000)));
        }
        records
    }

    #[test]
    fn records_are_found_by_id_and_walked_in_id_order() {
        let records = records(&["c", "a", "b"]);
        let ids: Vec<String> = records.clocks().map(|clock| clock.id.to_string()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        let after_a: Vec<String> = records
            .clocks_after(Some(&ClockId::new("a".into())))
            .map(|clock| clock.id.to_string())
            .collect();
        assert_eq!(after_a, ["b", "c"]);
        assert_eq!(
            records.get(&ClockId::new("b".into())).map(|c| &*c.name),
            Some("clock b")
        );
        assert!(records.get(&ClockId::new("d".into())).is_none());
        assert_eq!(records.len(), 3);
    }

    #[test]
    fn modify_changes_status_and_cursor_and_leaves_an_image_as_it_was() {
        let mut live = records(&["a", "b"]);
        let image = live.clone();
        let b = ClockId::new("b".into());
        let found = live.modify(&b, |record| {
            *record.status = ClockStatus::Paused;
            if let Some(cursor) = record.cursor.as_mut() {
                cursor.last_activity_ms = 5_000;
            }
        });
        assert_eq!(found, Some(()));
        live.modify_cursor(&b, |cursor| cursor.ticks_from_ms = 7_000);
        assert_eq!(live.get(&b).map(|c| c.status), Some(ClockStatus::Paused));
        let cursor = live.cursor(&b).expect("b has a cursor");
        assert_eq!(
            (cursor.ticks_from_ms, cursor.last_activity_ms),
            (7_000, 5_000)
        );
        assert_eq!(live.len(), 2, "nothing added or lost");
        assert_eq!(image.get(&b).map(|c| c.status), Some(ClockStatus::Active));
        assert_eq!(image.cursor(&b).map(|c| c.ticks_from_ms), Some(1_000));
        assert!(!live.same_as(&image));
        assert!(live.modify(&ClockId::new("z".into()), |_| ()).is_none());
    }

    #[test]
    fn same_as_compares_cursors_too() {
        let one = records(&["a"]);
        let mut other = records(&["a"]);
        assert!(one.same_as(&other));
        other.modify_cursor(&ClockId::new("a".into()), |cursor| {
            cursor.last_activity_ms = 9
        });
        assert!(!one.same_as(&other), "a cursor differs");
        let mut without = ClockRecords::default();
        without.insert(clock("a"), None);
        assert!(!one.same_as(&without), "a cursor is missing");
    }
}
