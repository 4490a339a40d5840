//! At most a few long-lived responses of one kind per client address, so that one client
//! cannot take every place a node has for them.
//!
//! A node serves [`crate::routes::events::MAX_STREAMS`] event streams at once. A stream whose
//! client never reads holds its place until the socket's buffers fill and the write timeout
//! fires, which at an event every two seconds takes minutes: one client that opened all of
//! them kept the dashboard out for that long (the second hostile probe's N7). Each address
//! (an IPv4 address, or an IPv6 /64 as [`crate::strangers`] keys it) may hold only its share.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;

use crate::error::ApiError;
use crate::strangers::Key;

/// The places each client address holds, for one kind of response; cloning shares them.
#[derive(Clone)]
pub(crate) struct AddressShares {
    held: Arc<Mutex<HashMap<Key, usize>>>,
    per_address: usize,
    /// What a place holds, plural, for the refusal: "event streams".
    what: &'static str,
}

/// One address's place, given back when dropped.
pub(crate) struct AddressShare {
    held: Arc<Mutex<HashMap<Key, usize>>>,
    key: Key,
}

impl AddressShares {
    pub(crate) fn new(per_address: usize, what: &'static str) -> Self {
        Self {
            held: Arc::default(),
            per_address,
            what,
        }
    }

    /// A place for a client at `ip`, or a 429 that says how many it holds already.
    pub(crate) fn take(&self, ip: IpAddr) -> Result<AddressShare, ApiError> {
        let key = Key::of(ip);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(key).or_insert(0);
        if *count >= self.per_address {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "this address holds {} {} of this node already, its most; close one first",
                    self.per_address, self.what
                ),
            ));
        }
        *count += 1;
        Ok(AddressShare {
            held: self.held.clone(),
            key,
        })
    }
}

impl Drop for AddressShare {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn an_address_holds_its_share_and_no_more_and_gets_it_back() {
        let shares = AddressShares::new(2, "streams");
        let one = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let other = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
        let first = shares.take(one).expect("a first place");
        let _second = shares.take(one).expect("a second place");
        let refused = shares.take(one).err().expect("no third place");
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            shares.take(other).is_ok(),
            "another address has its own share"
        );
        drop(first);
        assert!(shares.take(one).is_ok(), "a dropped place is free again");
    }
}
