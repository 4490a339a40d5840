//! How a node knows that a node-to-node request comes from a member.
//!
//! Two ways, chosen once per cluster by its file:
//!
//! * **Plain HTTP** (loopback, or a file that says `insecure = true`): every request carries
//!   the cluster secret in [`SECRET_HEADER`](crate::secret::SECRET_HEADER), and the Raft router
//!   refuses a request without it. Anyone who can read the link can read the secret, which is
//!   why this mode is refused off loopback unless the operator insists.
//! * **Mutual TLS**: the Raft listener (in the `tickd` binary) completes the TLS handshake,
//!   which proves the caller holds a certificate of the cluster's CA, then checks that the
//!   certificate names a current member (its node id and that member's Raft host), and only
//!   then lets a request through — marked with [`VerifiedPeer`]. No secret travels: the
//!   certificate is the credential, and it is never sent anywhere, only proven.
//!
//! The listener and the router are in different crates; [`VerifiedPeer`] is the seam between
//! them, so the router never parses a certificate and the listener never knows a route.

use crate::NodeId;
use crate::secret::ClusterSecret;

/// How this node's Raft router authenticates the node calling it.
#[derive(Clone, Debug)]
pub enum PeerAuth {
    /// Each request must carry the cluster secret (plain HTTP).
    Secret(ClusterSecret),
    /// The listener verified the caller's certificate and identity before the request reached
    /// the router; a request without a [`VerifiedPeer`] extension did not come through it and
    /// is refused.
    Certificate,
}

/// The member a request on the Raft port came from, as proven by its TLS certificate. Set by
/// the listener on every request of a connection whose certificate named a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifiedPeer(pub NodeId);
