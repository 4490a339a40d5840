//! The webhook client's name resolver: the system's, with every address that SPEC §5 refuses
//! taken out of the answer.
//!
//! The check belongs here, between resolving and connecting, not before the request: a name
//! checked first and resolved again by the client could answer differently the second time
//! (DNS rebinding). The client connects only to the addresses this resolver returns, so a
//! name that starts resolving to an internal address fails its delivery with a message that
//! says so. A URL that names an address literally is never resolved; the publisher checks it
//! itself ([`tickd_domain::WebhookUrl::literal_address`]).

use std::net::SocketAddr;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tickd_domain::webhook::address_allowed;

/// Resolves names and keeps only the addresses a tick may go to.
#[derive(Debug, Clone, Copy)]
pub struct PublicResolver {
    /// `webhook_allow_private`: every address is allowed.
    pub allow_private: bool,
}

/// Why a name yields no address a tick may go to.
#[derive(Debug, thiserror::Error)]
#[error(
    "{name} resolves only to addresses that are not public ({addresses}); ticks are not sent \
     to loopback, private, link-local or other internal addresses unless the cluster file sets \
     webhook_allow_private = true"
)]
pub struct NotPublic {
    name: String,
    addresses: String,
}

impl Resolve for PublicResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = resolved
                .iter()
                .copied()
                .filter(|address| address_allowed(address.ip(), allow_private))
                .collect();
            if allowed.is_empty() {
                let addresses: Vec<String> = resolved
                    .iter()
                    .map(|address| address.ip().to_string())
                    .collect();
                let refused = NotPublic {
                    name: host,
                    addresses: addresses.join(", "),
                };
                return Err(Box::new(refused) as _);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}
