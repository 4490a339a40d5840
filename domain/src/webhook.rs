//! The webhook channel's pure parts (SPEC §1, §5): the receiver's URL as tickd accepts it, the
//! per-clock signing secret, the Standard Webhooks signature, and the rule that says which
//! addresses a tick may be sent to.
//!
//! Resolving a name and sending the request are I/O and live with their callers: the API checks
//! a registration's URL ([`WebhookUrl::parse`], then [`address_allowed`] for every address the
//! name resolves to) and the engine checks it again at each delivery, after resolving it anew,
//! so that a name that starts resolving to an internal address later never gets a tick.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Sha256;

use crate::excerpt::Excerpt;

mod failing;

pub use failing::{FailingReceiver, FailingReceivers, MAX_NAMED, MAX_REASON_CHARS};

/// The longest receiver URL accepted, in bytes: every node keeps it with the clock.
pub const MAX_URL_BYTES: usize = 2_048;

/// How many bytes of randomness a signing secret holds (Standard Webhooks asks for 24 to 64).
pub const SECRET_BYTES: usize = 32;

/// The prefix of a secret's text, as Standard Webhooks writes it.
const SECRET_PREFIX: &str = "whsec_";

/// A receiver's URL: `http` or `https`, with a host, without credentials or a fragment, at most
/// [`MAX_URL_BYTES`]. Kept as the text it was registered with, normalised by the URL parser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookUrl(url::Url);

/// Why a webhook URL was refused; says what a valid one looks like.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Not a URL at all.
    #[error("invalid webhook url {input}: {reason}; expected an absolute http:// or https:// URL")]
    Malformed {
        /// What was sent.
        input: Excerpt,
        /// The parser's reason.
        reason: String,
    },
    /// Another scheme than http or https.
    #[error("invalid webhook url: the scheme {scheme:?} is not http or https")]
    Scheme {
        /// The scheme sent.
        scheme: String,
    },
    /// A user name or password in the URL: it would be sent with every tick and shown to
    /// anyone who may read the clock's registration answer.
    #[error(
        "invalid webhook url: it carries credentials (user:password@); a receiver authenticates \
         tickd by the webhook-signature header instead"
    )]
    Credentials,
    /// A fragment, which is never sent and so cannot mean anything.
    #[error("invalid webhook url: it has a fragment (#...), which is never sent")]
    Fragment,
    /// Too long.
    #[error("invalid webhook url: it is {len} bytes long; the limit is {max}", max = MAX_URL_BYTES)]
    TooLong {
        /// The URL's length in bytes.
        len: usize,
    },
}

impl WebhookUrl {
    /// Checks `input` as a receiver URL.
    pub fn parse(input: &str) -> Result<Self, UrlError> {
        if input.len() > MAX_URL_BYTES {
            return Err(UrlError::TooLong { len: input.len() });
        }
        let url = url::Url::parse(input).map_err(|error| UrlError::Malformed {
            input: Excerpt::of(input),
            reason: error.to_string(),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(UrlError::Scheme {
                scheme: url.scheme().to_owned(),
            });
        }
        if url.host().is_none() {
            return Err(UrlError::Malformed {
                input: Excerpt::of(input),
                reason: "it names no host".to_owned(),
            });
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(UrlError::Credentials);
        }
        if url.fragment().is_some() {
            return Err(UrlError::Fragment);
        }
        if url.as_str().len() > MAX_URL_BYTES {
            return Err(UrlError::TooLong {
                len: url.as_str().len(),
            });
        }
        Ok(WebhookUrl(url))
    }

    /// The URL, as requests are sent to it.
    pub fn as_url(&self) -> &url::Url {
        &self.0
    }

    /// The URL's text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The host and port a connection goes to (`example.com:443`), which the engine isolates
    /// receivers by.
    pub fn authority(&self) -> String {
        let host = self.0.host_str().unwrap_or_default();
        match self.0.port_or_known_default() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        }
    }

    /// The address the URL names literally (`http://10.0.0.1/`, `http://[::1]/`), if it names
    /// one rather than a host name: such a URL is never resolved, so it is checked as it is.
    pub fn literal_address(&self) -> Option<IpAddr> {
        match self.0.host()? {
            url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
            url::Host::Domain(_) => None,
        }
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for WebhookUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for WebhookUrl {
    /// A URL read from the log, a snapshot or a backup is checked as a registration's is.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        WebhookUrl::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A clock's signing secret: [`SECRET_BYTES`] random bytes drawn by the node that proposed the
/// registration, shown once in its answer as `whsec_<base64>`. Its `Debug` form is redacted, so
/// that no log line, panic or error carries it.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret([u8; SECRET_BYTES]);

/// Why a secret's text was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid webhook secret: expected whsec_ followed by the base64 of {SECRET_BYTES} bytes")]
pub struct SecretError;

impl WebhookSecret {
    /// The secret made of `bytes` (drawn at random by the caller: the domain draws nothing).
    pub fn from_bytes(bytes: [u8; SECRET_BYTES]) -> Self {
        WebhookSecret(bytes)
    }

    /// The secret as Standard Webhooks writes it: `whsec_<base64>`. For the registration's
    /// answer, the replicated state and backups only.
    pub fn expose(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(self.0))
    }

    /// Reads a secret written by [`WebhookSecret::expose`].
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let encoded = text.strip_prefix(SECRET_PREFIX).ok_or(SecretError)?;
        let bytes = STANDARD.decode(encoded).map_err(|_| SecretError)?;
        let bytes: [u8; SECRET_BYTES] = bytes.try_into().map_err(|_| SecretError)?;
        Ok(WebhookSecret(bytes))
    }

    /// The `webhook-signature` header of a message (Standard Webhooks, version 1): the base64 of
    /// the HMAC-SHA256 of `id.timestamp.body`, keyed with the secret's bytes.
    pub fn sign(&self, id: &str, timestamp_s: u64, body: &[u8]) -> String {
        signature(&self.0, id, timestamp_s, body)
    }
}

/// The Standard Webhooks signature of a message with a key of any length.
fn signature(key: &[u8], id: &str, timestamp_s: u64, body: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

impl Serialize for WebhookSecret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.expose())
    }
}

impl<'de> Deserialize<'de> for WebhookSecret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        WebhookSecret::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Where a webhook clock's ticks go and how they are signed. Boxed in [`crate::Channel`], so
/// that clocks of the other channels stay as small as they were.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    /// The receiver.
    pub url: WebhookUrl,
    /// The signing secret.
    pub secret: WebhookSecret,
}

/// Whether a tick may be sent to `address` (SPEC §5): a public unicast address, unless
/// `allow_private` (the cluster file's `webhook_allow_private`) lets every address through.
///
/// Refused: the unspecified address, loopback, link-local (169.254.0.0/16 holds cloud metadata
/// services), the private ranges (10/8, 172.16/12, 192.168/16), shared address space
/// (100.64/10), benchmarking (198.18/15), reserved (240/4) and broadcast, multicast,
/// unique-local (fc00::/7), site-local (fec0::/10), and the IPv4-mapped, IPv4-compatible
/// and NAT64 (64:ff9b::/96) forms of every refused IPv4 address.
pub fn address_allowed(address: IpAddr, allow_private: bool) -> bool {
    allow_private || is_public(address)
}

fn is_public(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (18..20).contains(&b))
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return is_public_v4(v4);
    }
    let first = ip.segments()[0];
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || (first & 0xffc0) == 0xfec0)
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`) or
/// NAT64 (`64:ff9b::a.b.c.d`) IPv6 address: each reaches that IPv4 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = ip.segments();
    let [.., a, b, c, d] = ip.octets();
    let low = Ipv4Addr::new(a, b, c, d);
    let high_zero = segments[..5].iter().all(|segment| *segment == 0);
    let mapped = high_zero && segments[5] == 0xffff;
    let compatible = high_zero && segments[5] == 0 && !ip.is_loopback() && !ip.is_unspecified();
    let nat64 = segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    (mapped || compatible || nat64).then_some(low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receiver_url_is_http_or_https_with_a_host_and_no_credentials() {
        let accepted = [
            "https://example.com/hooks/tick",
            "http://example.com:8080/",
            "https://203.0.113.7/x?y=1",
            "http://[2001:db8::1]/",
        ];
        for url in accepted {
            assert!(WebhookUrl::parse(url).is_ok(), "{url} should be accepted");
        }
        let refused = [
            ("ftp://example.com/", "scheme"),
            ("https://user:pw@example.com/", "credentials"),
            ("https://user@example.com/", "credentials"),
            ("https://example.com/#part", "fragment"),
            ("example.com/hook", "absolute"),
            ("file:///etc/passwd", "scheme"),
            ("", "absolute"),
        ];
        for (url, says) in refused {
            let error = WebhookUrl::parse(url).expect_err(url).to_string();
            assert!(error.contains(says), "{url}: {error}");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(matches!(
            WebhookUrl::parse(&long),
            Err(UrlError::TooLong { .. })
        ));
        let prefix = "https://example.com/";
        let at_the_limit = format!("{prefix}{}", "a".repeat(MAX_URL_BYTES - prefix.len()));
        let accepted = WebhookUrl::parse(&at_the_limit).expect("a URL of exactly the limit");
        assert_eq!(accepted.as_url().as_str().len(), MAX_URL_BYTES);
    }

    #[test]
    fn a_url_names_its_authority_and_its_literal_address() {
        let url = WebhookUrl::parse("https://Example.COM/a").expect("valid");
        assert_eq!(url.authority(), "example.com:443");
        assert_eq!(url.literal_address(), None);
        let url = WebhookUrl::parse("http://[::ffff:127.0.0.1]:81/").expect("valid");
        assert_eq!(url.authority(), "[::ffff:7f00:1]:81");
        assert_eq!(
            url.literal_address(),
            Some("::ffff:127.0.0.1".parse().expect("an address"))
        );
    }

    #[test]
    fn only_public_unicast_addresses_are_allowed_unless_private_ones_are() {
        let refused = [
            "127.0.0.1",
            "127.255.0.9",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "100.64.0.1",
            "198.18.0.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ];
        for address in refused {
            let ip: IpAddr = address.parse().expect("an address");
            assert!(!address_allowed(ip, false), "{address} must be refused");
            assert!(
                address_allowed(ip, true),
                "{address} is allowed when private ones are"
            );
        }
        let public = [
            "8.8.8.8",
            "203.0.113.7",
            "100.128.0.1",
            "172.32.0.1",
            "2001:4860::8888",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ];
        for address in public {
            let ip: IpAddr = address.parse().expect("an address");
            assert!(address_allowed(ip, false), "{address} is public");
        }
    }

    /// The signature of Standard Webhooks' own test vector (its README and libraries): secret
    /// `whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw`, id `msg_p5jXN8AQM9LWM0D4loKWxJek`, timestamp
    /// 1614265330 and body `{"test": 2432232314}`.
    #[test]
    fn a_signature_matches_the_standard_webhooks_test_vector() {
        let key = STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .expect("the vector's key is base64");
        let signature = signature(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_secret_reads_back_from_its_text_and_never_debugs() {
        let secret = WebhookSecret::from_bytes([7; SECRET_BYTES]);
        let text = secret.expose();
        assert!(text.starts_with("whsec_"), "{text}");
        assert_eq!(WebhookSecret::parse(&text), Ok(secret.clone()));
        assert!(!format!("{secret:?}").contains(&text[6..]));
        assert_eq!(WebhookSecret::parse("whsec_AAAA"), Err(SecretError));
        assert_eq!(WebhookSecret::parse("AAAA"), Err(SecretError));
    }
}
