//! What a certificate may name: a node's hosts and a client's name.
//!
//! A node's `--host` becomes one subject alternative name: an IP address an IP SAN, anything
//! else a DNS SAN, which must be a host name of RFC 1123 labels. Wildcards are refused: a
//! certificate for `*.example.com` would let one node's key impersonate every other node,
//! while the cluster's mutual TLS counts on each name belonging to one member. A client's
//! name ends up in a file name and a common name, so it is kept to a safe alphabet.

use std::fmt;
use std::net::IpAddr;

use rcgen::SanType;
use rcgen::string::Ia5String;

use crate::certs::CertError;

/// The longest DNS name, in characters (RFC 1035: 255 octets on the wire, 253 as text).
const MAX_DNS_NAME: usize = 253;

/// The longest DNS label (RFC 1035).
const MAX_LABEL: usize = 63;

/// The longest client name: it becomes part of a file name and of a common name, whose
/// X.520 upper bound is 64 characters.
const MAX_CLIENT_NAME: usize = 64;

/// One name a node certificate vouches for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A host name, checked against the name a peer dials (ASCII, as X.509 stores it).
    Dns(Ia5String),
    /// An address, checked against the address a peer dials.
    Ip(IpAddr),
}

impl Host {
    /// The subject alternative name that carries it.
    pub fn san(&self) -> SanType {
        match self {
            Host::Dns(name) => SanType::DnsName(name.clone()),
            Host::Ip(address) => SanType::IpAddress(*address),
        }
    }

    /// Reads one `--host`: an IP address, else a DNS name.
    fn parse(host: &str) -> Result<Host, CertError> {
        let refuse = |reason| CertError::Host {
            host: host.to_owned(),
            reason,
        };
        if let Ok(address) = host.parse::<IpAddr>() {
            if address.is_unspecified() {
                return Err(refuse(
                    "is the unspecified address, which no peer can dial; name the machine's \
                     own address",
                ));
            }
            return Ok(Host::Ip(address));
        }
        check_dns_name(host).map_err(refuse)?;
        let name = Ia5String::try_from(host).map_err(|_| refuse("is not ASCII"))?;
        Ok(Host::Dns(name))
    }
}

impl fmt::Display for Host {
    /// OpenSSL's notation: `DNS:node1.example.com`, `IP:10.0.0.1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Dns(name) => write!(f, "DNS:{}", name.as_str()),
            Host::Ip(address) => write!(f, "IP:{address}"),
        }
    }
}

/// Reads every `--host`; at least one is needed, or the certificate could serve nowhere.
pub(super) fn parse_hosts(hosts: &[String]) -> Result<Vec<Host>, CertError> {
    if hosts.is_empty() {
        return Err(CertError::NoHost);
    }
    hosts.iter().map(|host| Host::parse(host)).collect()
}

/// Checks a client's `--name`: 1 to 64 characters of `A-Z a-z 0-9 . _ -`, which is safe in
/// a file name and a common name and cannot climb out of the directory.
pub(super) fn check_client_name(name: &str) -> Result<(), CertError> {
    let refuse = |reason| CertError::Name {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() || name.len() > MAX_CLIENT_NAME {
        return Err(refuse("must be 1 to 64 characters long"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(refuse("may hold only the characters A-Z a-z 0-9 . _ -"));
    }
    if name.starts_with('.') {
        return Err(refuse("must not start with a dot"));
    }
    Ok(())
}

/// Checks a host name: dot-separated labels of 1 to 63 letters, digits and hyphens, no
/// label starting or ending with a hyphen (RFC 1123), at most 253 characters, and a last
/// label that is not all digits (so a mistyped address such as `10.0.0.256` is not taken
/// for a name).
fn check_dns_name(name: &str) -> Result<(), &'static str> {
    if name.contains('*') {
        return Err(
            "is a wildcard; name each host exactly, so that one node's certificate cannot \
             stand for another",
        );
    }
    if name.is_empty() || name.len() > MAX_DNS_NAME {
        return Err("is not a host name: give 1 to 253 characters");
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(
                "is not a host name: it has an empty label (two dots, or a dot at an \
                        end)",
            );
        }
        if label.len() > MAX_LABEL {
            return Err("is not a host name: a label is longer than 63 characters");
        }
        if !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(
                "is neither an IP address nor a host name: a host name holds only letters, \
                 digits, hyphens and dots",
            );
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("is not a host name: a label starts or ends with a hyphen");
        }
    }
    if name
        .rsplit('.')
        .next()
        .is_some_and(|top| top.chars().all(|c| c.is_ascii_digit()))
    {
        return Err("is neither an IP address nor a host name (its last label is all digits)");
    }
    Ok(())
}
