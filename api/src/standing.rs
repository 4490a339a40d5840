//! Whether a connection has shown that it belongs to a client.
//!
//! The API listener holds at most `api_max_connections` connections. Anyone who reaches the
//! port can open them without a token, and a few addresses once filled the cap so that a
//! client with a valid token was served 1 % of the time (the second hostile probe's N2). The
//! listener therefore gives each connection a [`Standing`], the API marks it proven when one of
//! its requests carries a valid token or pops a queue that exists, and a full listener closes
//! its oldest connection that has proven nothing to admit a new one. A client connects and
//! sends its request at once; a flood has to outrun that to keep it out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One connection's standing, shared by the listener that holds the connection and the
/// requests it carries (as a request extension).
#[derive(Clone, Debug, Default)]
pub struct Standing(Arc<AtomicBool>);

impl Standing {
    /// A request of this connection carried a valid token, or popped a queue that exists.
    pub fn prove(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether any request of this connection has proven it.
    pub fn is_proven(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
