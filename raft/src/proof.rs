//! Proof of membership: how a leader learns that the node it is asked to add holds the cluster
//! secret, without sending the secret (or anything derived from it that could be replayed) to
//! an address that has not proven itself.
//!
//! Every other node-to-node request carries the secret in a header, so the first request to a
//! new address must not: whoever listens there would receive it. Instead the leader sends a
//! fresh random challenge, and the node answers with
//! `HMAC-SHA256(secret, context ‖ challenge ‖ its id ‖ its Raft address)`. Only a holder of
//! the secret can compute it; binding the id and the address means a listener that relays the
//! challenge to a real member gets a proof for that member's id and address, not its own, so
//! it cannot pass as a new node. The challenge is never reused, so an answer cannot be
//! replayed to a later probe.

use hmac::{Hmac, Mac};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::NodeId;
use crate::secret::ClusterSecret;
use crate::status::NodeStatus;

/// The route, on a node's Raft address, that answers a [`Challenge`] without credentials.
pub const PROOF_PATH: &str = "/internal/prove";

/// Domain separation: this MAC proves membership and nothing else.
const CONTEXT: &[u8] = b"tickd membership proof v1";

/// Bytes of randomness in a challenge.
const CHALLENGE_BYTES: usize = 32;

/// The leader's question, sent without credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    /// [`CHALLENGE_BYTES`] random bytes, hex-encoded.
    pub challenge: String,
}

/// A node's answer: who it is, and the proof that it holds the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// The node's own view, as its status route gives it.
    pub status: NodeStatus,
    /// The Raft address the node says it has, bound into the proof.
    pub raft: String,
    /// The MAC, hex-encoded.
    pub proof: String,
}

/// Why a node's answer does not prove membership.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The answer is for another address.
    #[error("it answers for Raft address {claimed}, not {expected}")]
    OtherAddress {
        /// The address the leader was asked to add.
        expected: String,
        /// The address in the answer.
        claimed: String,
    },
    /// The MAC does not match: the node does not hold this cluster's secret.
    #[error("its proof does not match: it does not hold this cluster's secret")]
    Mismatch,
}

impl Challenge {
    /// A fresh challenge, never to be reused.
    pub fn new() -> Self {
        let bytes: [u8; CHALLENGE_BYTES] = rand::rng().random();
        Self {
            challenge: hex(&bytes),
        }
    }

    /// Whether this is a challenge a leader could have sent; anything else is not answered.
    pub fn is_well_formed(&self) -> bool {
        self.challenge.len() == 2 * CHALLENGE_BYTES
            && self.challenge.bytes().all(|byte| byte.is_ascii_hexdigit())
    }
}

impl Default for Challenge {
    fn default() -> Self {
        Self::new()
    }
}

impl Proof {
    /// The answer of node `status.id`, whose Raft address is `raft`, to `challenge`.
    pub fn answer(
        secret: &ClusterSecret,
        challenge: &Challenge,
        status: NodeStatus,
        raft: String,
    ) -> Self {
        let proof = hex(&mac(secret, challenge, status.id, &raft)
            .finalize()
            .into_bytes());
        Self {
            status,
            raft,
            proof,
        }
    }

    /// Checks that this answer to `challenge` comes from a holder of `secret` listening at
    /// `raft` (compared as socket addresses when both parse, so `127.0.0.1:9743` and a
    /// differently spelled equal address agree). The MAC comparison is constant-time.
    pub fn verify(
        &self,
        secret: &ClusterSecret,
        challenge: &Challenge,
        raft: &str,
    ) -> Result<(), ProofError> {
        let same_address = match (
            raft.parse::<std::net::SocketAddr>(),
            self.raft.parse::<std::net::SocketAddr>(),
        ) {
            (Ok(expected), Ok(claimed)) => expected == claimed,
            _ => raft == self.raft,
        };
        if !same_address {
            return Err(ProofError::OtherAddress {
                expected: raft.to_owned(),
                claimed: self.raft.clone(),
            });
        }
        let presented = unhex(&self.proof).ok_or(ProofError::Mismatch)?;
        mac(secret, challenge, self.status.id, &self.raft)
            .verify_slice(&presented)
            .map_err(|_| ProofError::Mismatch)
    }
}

fn mac(secret: &ClusterSecret, challenge: &Challenge, id: NodeId, raft: &str) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.expose().as_bytes())
        .expect("HMAC takes keys of any length");
    // Length prefixes keep the fields apart: no two (challenge, id, address) triples encode
    // to the same message.
    for field in [CONTEXT, challenge.challenge.as_bytes(), raft.as_bytes()] {
        mac.update(&(field.len() as u64).to_be_bytes());
        mac.update(field);
    }
    mac.update(&id.to_be_bytes());
    mac
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(id: NodeId) -> NodeStatus {
        NodeStatus {
            id,
            role: "learner".to_owned(),
            term: 0,
            leader: None,
            last_applied: None,
            initialized: false,
            wall_ms: None,
            clock: None,
            version: None,
            levels: None,
            zone_database: None,
            failing_receivers: None,
        }
    }

    #[test]
    fn a_holder_of_the_secret_proves_itself_at_its_own_address() {
        let secret = ClusterSecret::new("s3cret");
        let challenge = Challenge::new();
        assert!(challenge.is_well_formed());
        let answer = Proof::answer(&secret, &challenge, status(4), "127.0.0.1:9746".to_owned());
        assert_eq!(answer.verify(&secret, &challenge, "127.0.0.1:9746"), Ok(()));
        assert!(!answer.proof.contains("s3cret"));
    }

    #[test]
    fn a_wrong_secret_an_old_challenge_or_a_relayed_proof_is_refused() {
        let secret = ClusterSecret::new("s3cret");
        let challenge = Challenge::new();
        let address = "127.0.0.1:9746";
        let stranger = Proof::answer(
            &ClusterSecret::new("guess"),
            &challenge,
            status(4),
            address.to_owned(),
        );
        assert_eq!(
            stranger.verify(&secret, &challenge, address),
            Err(ProofError::Mismatch)
        );
        let replayed = Proof::answer(&secret, &Challenge::new(), status(4), address.to_owned());
        assert_eq!(
            replayed.verify(&secret, &challenge, address),
            Err(ProofError::Mismatch)
        );
        // A listener relays the challenge to member 2 and passes its answer off as its own.
        let relayed = Proof::answer(&secret, &challenge, status(2), "127.0.0.1:9744".to_owned());
        assert!(matches!(
            relayed.verify(&secret, &challenge, address),
            Err(ProofError::OtherAddress { .. })
        ));
        let mut claimed = relayed.clone();
        claimed.raft = address.to_owned();
        assert_eq!(
            claimed.verify(&secret, &challenge, address),
            Err(ProofError::Mismatch),
            "the address is bound into the proof"
        );
        let mut other_id = Proof::answer(&secret, &challenge, status(4), address.to_owned());
        other_id.status.id = 5;
        assert_eq!(
            other_id.verify(&secret, &challenge, address),
            Err(ProofError::Mismatch),
            "the id is bound into the proof"
        );
        let mut garbled = stranger;
        garbled.proof = "zz".to_owned();
        assert_eq!(
            garbled.verify(&secret, &challenge, address),
            Err(ProofError::Mismatch)
        );
    }

    #[test]
    fn addresses_are_compared_as_socket_addresses_or_else_as_text() {
        let secret = ClusterSecret::new("s3cret");
        let challenge = Challenge::new();
        // The same IPv6 address, spelled two ways.
        let answer = Proof::answer(&secret, &challenge, status(4), "[::1]:9746".to_owned());
        assert_eq!(
            answer.verify(&secret, &challenge, "[0:0:0:0:0:0:0:1]:9746"),
            Ok(())
        );
        // Host names do not parse as socket addresses: the text must match.
        let named = "node-4.tickd.test:9746";
        let answer = Proof::answer(&secret, &challenge, status(4), named.to_owned());
        assert_eq!(answer.verify(&secret, &challenge, named), Ok(()));
        assert!(matches!(
            answer.verify(&secret, &challenge, "node-5.tickd.test:9746"),
            Err(ProofError::OtherAddress { .. })
        ));
    }

    #[test]
    fn a_proof_that_is_not_whole_bytes_of_hex_is_refused_without_a_panic() {
        let secret = ClusterSecret::new("s3cret");
        let challenge = Challenge::new();
        let address = "127.0.0.1:9746";
        let mut answer = Proof::answer(&secret, &challenge, status(4), address.to_owned());
        for garbled in ["abc", "éé", "0"] {
            answer.proof = garbled.to_owned();
            assert_eq!(
                answer.verify(&secret, &challenge, address),
                Err(ProofError::Mismatch),
                "{garbled:?}"
            );
        }
    }

    #[test]
    fn only_a_challenge_a_leader_could_send_is_well_formed() {
        for bad in ["", "00", &"g".repeat(64), &"0".repeat(65), &"é".repeat(32)] {
            let challenge = Challenge {
                challenge: bad.to_owned(),
            };
            assert!(!challenge.is_well_formed(), "{bad:?}");
        }
    }
}
