//! The cluster secret that authenticates node-to-node traffic, and [`CredentialDigest`], the
//! comparison every credential check of the node (this secret, the API token) goes through.

use std::fmt;

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

/// A credential kept as its SHA-256 digest, for comparisons that reveal nothing through their
/// timing: neither the credential's bytes nor its length.
///
/// A byte-wise constant-time comparison (`subtle`'s `ct_eq` on slices) still returns at once
/// when the lengths differ, so a client could learn the secret's length by timing requests
/// of growing length. Here the presented value is hashed (its own length is the client's to
/// know) and the two 32-byte digests are compared in constant time; the expected digest is
/// computed once, so no work depends on the expected credential's length.
#[derive(Clone)]
pub struct CredentialDigest([u8; 32]);

impl CredentialDigest {
    /// The digest of the credential in force.
    pub fn of(credential: &[u8]) -> Self {
        Self(Sha256::digest(credential).into())
    }

    /// Whether `presented` is the credential, in time independent of the credential.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented).into();
        self.0.ct_eq(&presented).into()
    }
}

impl fmt::Debug for CredentialDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CredentialDigest(<redacted>)")
    }
}

/// The HTTP header that carries the secret on every Raft and internal request.
pub const SECRET_HEADER: &str = "x-tickd-secret";

/// The node-to-node secret of `cluster.toml`.
///
/// Its `Debug` output is redacted so that it can never reach a log line by accident.
#[derive(Clone)]
pub struct ClusterSecret {
    secret: String,
    digest: CredentialDigest,
}

impl ClusterSecret {
    /// Wraps the configured secret.
    pub fn new(secret: impl Into<String>) -> Self {
        let secret = secret.into();
        let digest = CredentialDigest::of(secret.as_bytes());
        Self { secret, digest }
    }

    /// The value to send in [`SECRET_HEADER`].
    pub fn expose(&self) -> &str {
        &self.secret
    }

    /// Compares through [`CredentialDigest`], so a peer learns neither the secret's bytes nor
    /// its length from response timings.
    pub fn matches(&self, presented: &[u8]) -> bool {
        self.digest.matches(presented)
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
        assert!(!secret.matches(b"s3cret\0"));
    }

    #[test]
    fn a_digest_matches_only_its_credential() {
        let digest = CredentialDigest::of(b"token");
        assert!(digest.matches(b"token"));
        for other in [&b""[..], b"toke", b"tokens", b"TOKEN", &[0u8; 64]] {
            assert!(!digest.matches(other), "{other:?}");
        }
        assert!(!format!("{digest:?}").contains("token"));
    }

    #[test]
    fn debug_never_shows_the_secret() {
        assert!(!format!("{:?}", ClusterSecret::new("s3cret")).contains("s3cret"));
    }
}
