//! The wall clock that stamps commands.
//!
//! The replicated state machine never reads a clock; the node that proposes a command reads
//! this one and writes the time into the command, so every replica applies the same value.
//!
//! [`WallClock`] is the seam through which the cluster clock reads it: the host's clock in a
//! node, a simulated one (true time plus the node's own offset) in the deterministic
//! simulation (`sim/`), where a read of the host's clock would make a seed's run differ.

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the system clock is set before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A source of wall-clock readings, in milliseconds since the Unix epoch.
#[derive(Clone)]
pub struct WallClock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl WallClock {
    /// The host's clock ([`now_ms`]).
    pub fn host() -> Self {
        WallClock(Arc::new(now_ms))
    }

    /// A clock that reads `read`.
    pub fn new(read: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        WallClock(Arc::new(read))
    }

    /// The current reading.
    pub fn now_ms(&self) -> u64 {
        (self.0)()
    }
}

impl fmt::Debug for WallClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WallClock").field(&self.now_ms()).finish()
    }
}
