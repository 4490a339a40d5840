//! The cluster secret that authenticates node-to-node traffic.

use std::fmt;

use subtle::ConstantTimeEq;

/// The HTTP header that carries the secret on every Raft and internal request.
pub const SECRET_HEADER: &str = "x-tickd-secret";

/// The node-to-node secret of `cluster.toml`.
///
/// Its `Debug` output is redacted so that it can never reach a log line by accident.
#[derive(Clone)]
pub struct ClusterSecret(String);

impl ClusterSecret {
    /// Wraps the configured secret.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The value to send in [`SECRET_HEADER`].
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Compares in constant time, so a peer cannot learn the secret byte by byte from
    /// response timings.
    pub fn matches(&self, presented: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(presented).into()
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_only_the_exact_secret() {
        let secret = ClusterSecret::new("s3cret");
        assert!(secret.matches(b"s3cret"));
        assert!(!secret.matches(b"s3cre"));
        assert!(!secret.matches(b"s3cret!"));
        assert!(!secret.matches(b""));
    }

    #[test]
    fn debug_never_shows_the_secret() {
        assert!(!format!("{:?}", ClusterSecret::new("s3cret")).contains("s3cret"));
    }
}
