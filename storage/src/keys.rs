//! Column families and keys of the Raft database.

/// Log entries, keyed by [`log_key`].
pub const LOG_CF: &str = "log";
/// Small records: vote, last purged log id, committed log id.
pub const META_CF: &str = "meta";

/// Key of the saved vote in [`META_CF`].
pub const VOTE: &[u8] = b"vote";
/// Key of the last purged log id in [`META_CF`].
pub const LAST_PURGED: &[u8] = b"last_purged";
/// Key of the committed log id in [`META_CF`].
pub const COMMITTED: &[u8] = b"committed";

/// Big-endian, so RocksDB's byte order is the log's order.
pub fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The inverse of [`log_key`]; `None` for a key that is not 8 bytes (a corrupted database).
pub fn log_index(key: &[u8]) -> Option<u64> {
    key.try_into().ok().map(u64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_in_log_order() {
        let indexes = [0, 1, 255, 256, 65_536, u64::MAX / 2, u64::MAX];
        for pair in indexes.windows(2) {
            assert!(log_key(pair[0]) < log_key(pair[1]));
        }
        for index in indexes {
            assert_eq!(log_index(&log_key(index)), Some(index));
        }
        assert_eq!(log_index(b"short"), None);
    }
}
