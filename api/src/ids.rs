//! Random identifiers, drawn by the node that proposes a registration.
//!
//! Randomness stays out of the replicated state machine: the proposing node draws the ids and
//! writes them into the command, so every replica applies the same values.

use rand::Rng;
use tickd_domain::{ClockId, QueueId};

/// 128 random bits as 32 lower-case hex digits: URL-safe and unguessable.
fn random_hex() -> String {
    format!("{:032x}", rand::rng().random::<u128>())
}

/// A fresh clock id.
pub fn clock_id() -> ClockId {
    ClockId::new(random_hex())
}

/// A fresh http queue id. It is the capability of the unauthenticated pop route, hence the
/// 128 bits.
pub fn queue_id() -> QueueId {
    QueueId::new(random_hex())
}

/// `N` random bytes: a webhook clock's signing secret.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    rand::rng().fill(&mut bytes[..]);
    bytes
}

/// A fresh lease token: the first part of the lease's receipts, which are the capability of
/// the ack, hence the 128 bits (`tickd_domain::leases`).
pub fn lease_token() -> String {
    random_hex()
}

/// A fresh id for one manual tick, pause or resume: a retry of it carries the same id, so the
/// ledger applies it once (see `tickd_domain::Command::Tick` and `Command::Pause`).
pub fn request() -> String {
    random_hex()
}

/// A fresh id for one pop: a retry of the same pop carries the same id, so the replicated
/// queue answers it with the same ticks (see `tickd_domain::Command::Pop`).
pub fn pop_request() -> String {
    random_hex()
}
