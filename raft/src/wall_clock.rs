//! The wall clock that stamps commands.
//!
//! The replicated state machine never reads a clock; the node that proposes a command reads
//! this one and writes the time into the command, so every replica applies the same value.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the system clock is set before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
