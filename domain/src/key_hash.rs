//! The 64-bit hash the derived indexes file their entries under (`pair_index`, `queue_index`).

use std::hash::{DefaultHasher, Hash, Hasher};

/// A value's hash. `DefaultHasher::new` has fixed keys, so a hash is the same for the life of
/// the process; the indexes are rebuilt on load, never stored, so it need not be the same
/// across releases. Two values may share a hash: every index checks its candidates.
pub(crate) fn key_hash<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}
