//! An ordered set of small entries whose memory follows its length: the registry's indexes.
//!
//! The indexes hold one 24-byte entry per clock each, keyed by a hash or by an instant every
//! hourly clock shares, so their entries arrive in random order. A B-tree filled in random order
//! keeps its nodes about two thirds full (a full node splits into two half-full ones), and the
//! standard library's nodes of eleven entries cost about 40 bytes an entry that way: three
//! indexes, 120 bytes a clock, a third of it empty slots.
//!
//! Here the entries are kept in sorted blocks of at most [`BLOCK_MAX`] entries, each block a
//! vector whose capacity grows [`GROWTH`] entries at a time rather than doubling, and gives back
//! what a removal leaves beyond twice that. A block costs its entries, a few spare slots and one
//! allocation, whatever order the entries came in. Finding a block is a binary search over the
//! blocks' last entries; an insert or a removal moves at most a block's entries (12 KiB).
//!
//! Equality is the entries': two sets holding the same entries are equal whatever their blocks.

use std::fmt;

/// The most entries a block holds; a block that grows past it is split in two.
const BLOCK_MAX: usize = 512;

/// How many entries a full block's capacity grows by, and the spare capacity a block may keep
/// beyond twice this after removals.
const GROWTH: usize = 16;

/// A block smaller than this is merged with a neighbour when the two fit in half a block, so
/// that removals do not leave a trail of nearly empty blocks.
const MERGE_BELOW: usize = BLOCK_MAX / 4;

/// An ordered set kept as sorted blocks (see the module's documentation).
///
/// Invariants: no block is empty; each block is sorted and every entry of a block is below
/// every entry of the next; `len` is the number of entries.
#[derive(Clone)]
pub(crate) struct PackedSet<T> {
    blocks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for PackedSet<T> {
    fn default() -> Self {
        PackedSet {
            blocks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Ord> PackedSet<T> {
    /// Adds `value`; `false` if the set held it already (and it is left as it was).
    pub(crate) fn insert(&mut self, value: T) -> bool {
        if self.blocks.is_empty() {
            self.blocks.push(Vec::with_capacity(GROWTH));
        }
        // A value above every entry goes to the last block.
        let index = self.block_for(&value).min(self.blocks.len() - 1);
        let block = &mut self.blocks[index];
        let Err(at) = block.binary_search(&value) else {
            return false;
        };
        if block.len() == block.capacity() {
            block.reserve_exact(GROWTH);
        }
        block.insert(at, value);
        self.len += 1;
        if block.len() > BLOCK_MAX {
            let upper = block.split_off(block.len() / 2);
            block.shrink_to(block.len() + GROWTH);
            self.blocks.insert(index + 1, upper);
        }
        true
    }

    /// Removes `value`; `false` if the set did not hold it.
    pub(crate) fn remove(&mut self, value: &T) -> bool {
        let index = self.block_for(value);
        let Some(block) = self.blocks.get_mut(index) else {
            return false;
        };
        let Ok(at) = block.binary_search(value) else {
            return false;
        };
        block.remove(at);
        self.len -= 1;
        if block.is_empty() {
            self.blocks.remove(index);
        } else if block.len() < MERGE_BELOW {
            self.merge_around(index);
        } else if block.capacity() - block.len() > 2 * GROWTH {
            block.shrink_to(block.len() + GROWTH);
        }
        true
    }

    /// The entries from `first` (which need not be in the set) on, in order.
    pub(crate) fn iter_from<'a>(&'a self, first: &T) -> impl Iterator<Item = &'a T> + use<'a, T> {
        let index = self.block_for(first);
        let (start, rest) = match self.blocks.get(index) {
            Some(block) => (
                &block[block.partition_point(|entry| entry < first)..],
                &self.blocks[index + 1..],
            ),
            None => (&[][..], &[][..]),
        };
        start.iter().chain(rest.iter().flatten())
    }

    /// The entries, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.blocks.iter().flatten()
    }

    /// How many entries the set holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first block whose last entry is at or above `value`; the number of blocks if none.
    fn block_for(&self, value: &T) -> usize {
        self.blocks
            .partition_point(|block| block.last().is_some_and(|last| last < value))
    }

    /// Merges the small block at `index` into a neighbour, if the two fit in half a block; else
    /// gives back its spare capacity.
    fn merge_around(&mut self, index: usize) {
        let fits = |other: Option<&Vec<T>>, small: usize| {
            other.is_some_and(|other| other.len() + small <= BLOCK_MAX / 2)
        };
        let small = self.blocks[index].len();
        let lower = if fits(self.blocks.get(index + 1), small) {
            Some(index)
        } else if index > 0 && fits(self.blocks.get(index - 1), small) {
            Some(index - 1)
        } else {
            None
        };
        match lower {
            Some(lower) => {
                let upper = self.blocks.remove(lower + 1);
                let merged = &mut self.blocks[lower];
                merged.reserve_exact(upper.len());
                merged.extend(upper);
            }
            None => {
                let block = &mut self.blocks[index];
                block.shrink_to(block.len() + GROWTH);
            }
        }
    }
}

impl<T: Ord> FromIterator<T> for PackedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(entries: I) -> Self {
        let mut set = PackedSet::default();
        for entry in entries {
            set.insert(entry);
        }
        set
    }
}

impl<T: Ord> PartialEq for PackedSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T: Ord> Eq for PackedSet<T> {}

impl<T: fmt::Debug> fmt::Debug for PackedSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.blocks.iter().flatten()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// Equality is the entries': sets of one length but other entries differ, and sets built
    /// in different orders (so with other blocks) are equal.
    #[test]
    fn sets_are_equal_by_their_entries_alone() {
        let ascending: PackedSet<u32> = (0..2_000).collect();
        let descending: PackedSet<u32> = (0..2_000).rev().collect();
        assert!(ascending.blocks.len() > 1, "the sets span several blocks");
        assert_eq!(ascending, descending);
        let shifted: PackedSet<u32> = (1..2_001).collect();
        assert_eq!(shifted.len(), ascending.len());
        assert_ne!(ascending, shifted);
        let shorter: PackedSet<u32> = (0..1_999).collect();
        assert_ne!(ascending, shorter);
    }

    /// What a sequence of operations does to the set.
    #[derive(Clone, Debug)]
    enum Op {
        Insert(u16),
        Remove(u16),
        /// Inserts a run of consecutive values, as appends at one end do.
        InsertRun(u16, u16),
        /// Removes every value in a range, as a purge of many clocks does.
        RemoveRange(u16, u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u16>().prop_map(Op::Insert),
            3 => any::<u16>().prop_map(Op::Remove),
            1 => (any::<u16>(), 0..2_000u16).prop_map(|(from, n)| Op::InsertRun(from, n)),
            1 => (any::<u16>(), 0..4_000u16).prop_map(|(from, n)| Op::RemoveRange(from, n)),
        ]
    }

    /// Checks the invariants the module documents, and that the blocks hold no more spare
    /// capacity than the growth policy allows.
    fn assert_well_formed(set: &PackedSet<u16>) {
        let mut previous: Option<u16> = None;
        let mut count = 0;
        for block in &set.blocks {
            assert!(!block.is_empty(), "an empty block was kept");
            assert!(
                block.len() <= BLOCK_MAX,
                "a block of {} entries",
                block.len()
            );
            assert!(
                block.capacity() <= block.len() + 2 * GROWTH,
                "a block of {} entries kept capacity {}",
                block.len(),
                block.capacity()
            );
            for &entry in block {
                assert!(previous < Some(entry), "{previous:?} before {entry}");
                previous = Some(entry);
                count += 1;
            }
        }
        assert_eq!(set.len(), count);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The packed set answers exactly as the standard library's set does, for any sequence
        /// of inserts and removals.
        #[test]
        fn behaves_as_a_btree_set(ops in proptest::collection::vec(op(), 1..200), probes in proptest::collection::vec(any::<u16>(), 8)) {
            let mut packed = PackedSet::default();
            let mut oracle = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Insert(value) => prop_assert_eq!(packed.insert(value), oracle.insert(value)),
                    Op::Remove(value) => prop_assert_eq!(packed.remove(&value), oracle.remove(&value)),
                    Op::InsertRun(from, n) => {
                        for value in (from..=u16::MAX).take(usize::from(n)) {
                            prop_assert_eq!(packed.insert(value), oracle.insert(value));
                        }
                    }
                    Op::RemoveRange(from, n) => {
                        for value in (from..=u16::MAX).take(usize::from(n)) {
                            prop_assert_eq!(packed.remove(&value), oracle.remove(&value));
                        }
                    }
                }
                assert_well_formed(&packed);
            }
            prop_assert!(packed.iter().eq(oracle.iter()));
            for probe in probes {
                prop_assert!(packed.iter_from(&probe).eq(oracle.range(probe..)));
            }
        }
    }

    #[test]
    fn random_inserts_fill_the_blocks() {
        let mut set = PackedSet::default();
        let mut value: u32 = 1;
        for _ in 0..100_000 {
            value ^= value << 13;
            value ^= value >> 17;
            value ^= value << 5;
            set.insert(value);
        }
        let fill = fill(&set);
        assert!(fill > 0.95, "the blocks are {fill:.3} full");
    }

    /// Entries that arrive in ascending runs, each entry at the end of its run, as a loaded
    /// registry's due index gets them (by instant, then id, walked in id order).
    #[test]
    fn ordered_runs_fill_the_blocks() {
        let mut set = PackedSet::default();
        for id in 0..100_000u32 {
            set.insert((id % 7, id));
        }
        let fill = fill(&set);
        assert!(fill > 0.93, "the blocks are {fill:.3} full");
    }

    /// The share of the blocks' capacity that holds entries.
    fn fill<T>(set: &PackedSet<T>) -> f64 {
        let capacity: usize = set.blocks.iter().map(Vec::capacity).sum();
        set.len as f64 / capacity as f64
    }

    #[test]
    fn sets_with_the_same_entries_are_equal_whatever_their_blocks() {
        let mut ascending = PackedSet::default();
        let mut descending = PackedSet::default();
        for value in 0..2_000u32 {
            ascending.insert(value);
            descending.insert(1_999 - value);
        }
        assert_ne!(ascending.blocks.len(), 0);
        assert_eq!(ascending, descending);
        descending.remove(&7);
        assert_ne!(ascending, descending);
        assert_eq!(format!("{:?}", PackedSet::<u8>::default()), "{}");
    }
}
