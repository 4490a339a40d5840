//! The checks of a cluster file that protect its users from themselves: credentials that would
//! be useless or public, addresses that are not `host:port`, plain HTTP or the cluster secret
//! in clear off loopback, bounds of the values the replicated state depends on.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tickd_domain::leases::{DEFAULT_MAX_DELIVERIES, MAX_MAX_DELIVERIES};
use tickd_raft::NodeId;
use tickd_raft::cluster_clock::DEFAULT_MAX_CLOCK_OFFSET;

use super::{ClusterFile, Problem, lookup};
use crate::tls::TlsFiles;

/// The API token of the sample `cluster.toml` in the repository: public, so refused when any
/// address of the file is off loopback.
const SHIPPED_TOKEN: &str = "ticktok-zY3wpR";
/// The largest `max_clock_offset_ms` accepted: an hour.
const MAX_CLOCK_OFFSET_MS: u64 = 3_600_000;
/// The node-to-node secret of the sample `cluster.toml`: public, refused like the token.
const SHIPPED_SECRET: &str = "change-me";
/// The operator token of the sample `cluster.toml`: public, refused like the token.
const SHIPPED_OPERATOR_TOKEN: &str = "operator-sample";

/// Refuses what would make a cluster's credentials useless: a multi-node file without a token
/// (each node would generate its own, and a client could use only one node), and the sample
/// file's public token or secret on a cluster reachable from another machine.
pub(super) fn check_credentials(file: &ClusterFile, exposed: Option<&str>) -> Result<(), Problem> {
    if file.node.len() > 1 && file.token.is_none() {
        return Err(Problem::Invalid(format!(
            "it describes {} nodes but sets no `token`: each node would generate a token of \
             its own and accept only that one. Add `token = \"...\"`, or set ACCESS_TOKEN (one \
             long random value for the whole cluster, e.g. from `openssl rand -hex 24`)",
            file.node.len()
        )));
    }
    let Some(exposed) = exposed else {
        return Ok(());
    };
    if file.secret.as_deref() == Some(SHIPPED_SECRET) {
        return Err(Problem::Invalid(format!(
            "`secret` is the sample's \"{SHIPPED_SECRET}\", which anyone can read, and {exposed} \
             is off loopback: set `secret` to a long random value of your own (e.g. from \
             `openssl rand -hex 32`), the same in every node's file"
        )));
    }
    if file.token.as_deref() == Some(SHIPPED_TOKEN) {
        return Err(Problem::Invalid(format!(
            "`token` is the sample's \"{SHIPPED_TOKEN}\", which anyone can read, and {exposed} \
             is off loopback: set `token` to a long random value of your own (e.g. from \
             `openssl rand -hex 24`) and give it to your clients"
        )));
    }
    if file.operator_token.as_deref() == Some(SHIPPED_OPERATOR_TOKEN) {
        return Err(Problem::Invalid(format!(
            "`operator_token` is the sample's \"{SHIPPED_OPERATOR_TOKEN}\", which anyone can \
             read, and {exposed} is off loopback: set `operator_token` to a long random value \
             of your own (e.g. from `openssl rand -hex 24`) and give it only to operators"
        )));
    }
    Ok(())
}

/// The operator token may change the membership and copy every queue id: it must not be the
/// access token, which every client holds. A multi-node file may leave it out (a file written
/// for v0.1.0 has none): the node then refuses the operator's routes, since a token generated
/// per node would differ from node to node.
pub(super) fn check_operator_token(file: &ClusterFile) -> Result<(), Problem> {
    match &file.operator_token {
        Some(operator) if operator.is_empty() => Err(Problem::Invalid(
            "`operator_token` is empty; remove it or set a value".into(),
        )),
        Some(operator) if file.token.as_ref() == Some(operator) => Err(Problem::Invalid(
            "`operator_token` is the same as `token`: every client would be an operator. Set \
             `operator_token` to a long random value of its own (e.g. from `openssl rand -hex \
             24`) and give it only to operators"
                .into(),
        )),
        _ => Ok(()),
    }
}

/// Why `address` is not `host:port`, if it is not: the host an IP address (IPv6 in brackets)
/// or a DNS name, the port a number.
pub(super) fn check_host_port(address: &str) -> Result<(), String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or("is not a host:port address")?;
    port.parse::<u16>()
        .map_err(|_| format!("has no port number after its host ({port:?})"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let plausible_name = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        });
    if host.parse::<IpAddr>().is_ok() || plausible_name {
        Ok(())
    } else {
        Err("is not a host:port address (the host an IP address or a DNS name)".into())
    }
}

/// `max_deliveries`: at least 1 (a tick is handed out once at least) and at most
/// [`MAX_MAX_DELIVERIES`], which the replicated state enforces too.
pub(super) fn max_deliveries(file: &ClusterFile) -> Result<u32, Problem> {
    match file.max_deliveries {
        None => Ok(DEFAULT_MAX_DELIVERIES),
        Some(count @ 1..=MAX_MAX_DELIVERIES) => Ok(count),
        Some(count) => Err(Problem::Invalid(format!(
            "`max_deliveries` is {count}; it must be between 1 and {MAX_MAX_DELIVERIES} (the \
             default is {DEFAULT_MAX_DELIVERIES})"
        ))),
    }
}

/// `max_clock_offset_ms`: at least 1 ms (a bound of 0 would stop every node at the first
/// measurement error) and at most an hour (beyond that the bound guards nothing).
pub(super) fn max_clock_offset(file: &ClusterFile) -> Result<Duration, Problem> {
    match file.max_clock_offset_ms {
        None => Ok(DEFAULT_MAX_CLOCK_OFFSET),
        Some(ms @ 1..=MAX_CLOCK_OFFSET_MS) => Ok(Duration::from_millis(ms)),
        Some(ms) => Err(Problem::Invalid(format!(
            "`max_clock_offset_ms` is {ms}; it must be between 1 and {MAX_CLOCK_OFFSET_MS} \
             (the default is {} ms)",
            DEFAULT_MAX_CLOCK_OFFSET.as_millis()
        ))),
    }
}

/// Refuses plain HTTP on an address off loopback unless the file says `insecure = true`:
/// tokens, the cluster secret and every clock would cross the network in clear.
pub(super) fn check_exposure<'a>(
    file: &ClusterFile,
    id: NodeId,
    tls: &Option<TlsFiles>,
    listeners: impl IntoIterator<Item = (&'a String, SocketAddr)>,
) -> Result<(), Problem> {
    if tls.is_some() || file.insecure == Some(true) {
        return Ok(());
    }
    match listeners
        .into_iter()
        .find(|(_, bound)| !bound.ip().is_loopback())
    {
        Some((address, bound)) => Err(Problem::Invalid(format!(
            "node {id} would serve plain HTTP on {address} ({bound}), off loopback: tokens, \
             the cluster secret and every clock would cross the network in clear. Turn TLS on \
             (`ca_file`, and `cert_file`/`key_file` per node; `tickd certs` makes them), or \
             set `insecure = true` if the network is private and trusted"
        ))),
        None => Ok(()),
    }
}

/// Refuses to send the cluster secret in clear to a peer off loopback: over plain HTTP every
/// node-to-node call carries it, so each peer's Raft address (or the `dial` address that
/// replaces it) must be on loopback unless TLS is on or the file says `insecure = true`. A
/// name that does not resolve here, or resolves to any address off loopback, counts as off.
pub(super) fn check_peer_exposure<'a>(
    file: &ClusterFile,
    id: NodeId,
    tls: &Option<TlsFiles>,
    peers: impl IntoIterator<Item = (NodeId, &'a String)>,
) -> Result<(), Problem> {
    if tls.is_some() || file.insecure == Some(true) {
        return Ok(());
    }
    let off_loopback = |address: &String| {
        let resolved = lookup(address).unwrap_or_default();
        resolved.is_empty() || resolved.iter().any(|ip| !ip.ip().is_loopback())
    };
    match peers.into_iter().find(|(_, address)| off_loopback(address)) {
        Some((peer, address)) => Err(Problem::Invalid(format!(
            "node {id} would send the cluster secret in clear to node {peer} at {address}, \
             which is (or may be) off loopback: every node-to-node call over plain HTTP carries \
             it. Turn TLS on (`ca_file`, and `cert_file`/`key_file` per node; `tickd certs` \
             makes them), or set `insecure = true` if the network is private and trusted"
        ))),
        None => Ok(()),
    }
}
