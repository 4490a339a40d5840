//! The hosts a node builds links on (SPEC §1, `base_url`), resolved from the cluster file.
//!
//! A `Location` header carries the access token and an http channel's poll URL is a
//! capability; both are built on the request's `Host` unless the node has a `public_url`. A
//! node that listens only on loopback trusts any `Host` (only this machine reaches it, and
//! Ticktok's clients say `localhost` or `127.0.0.1` as they please). A node reachable from the
//! network builds links only on hosts of `api_hosts`, by default the `api` addresses of the
//! cluster file, which are the names its operator already chose for the nodes.

use std::net::SocketAddr;

use tickd_api::LinkHosts;

/// The ports a client leaves out of its `Host` header.
const DEFAULT_PORTS: [&str; 2] = [":80", ":443"];

/// The allow-list for a node whose API is bound to `bound`: the file's `api_hosts` when it
/// has them, any host on loopback, else every node's `api` address (and, on port 80 or 443,
/// the host alone). A node bound to every interface (`0.0.0.0`, `::`) has no address a
/// client would write, so it needs `api_hosts` (or a `public_url`, which the caller checks
/// first).
pub(super) fn link_hosts<'a>(
    api_hosts: Option<&'a [String]>,
    api_addresses: impl IntoIterator<Item = &'a String>,
    bound: SocketAddr,
) -> Result<LinkHosts, String> {
    if let Some(hosts) = api_hosts {
        if let Some(bad) = hosts.iter().find(|host| !is_host(host)) {
            return Err(format!(
                "`api_hosts` holds {bad:?}, which is not a host or host:port as a client's Host \
                 header writes it"
            ));
        }
        if hosts.is_empty() {
            return Err(
                "`api_hosts` is empty: no request could get a link; list the hosts clients use \
                 to reach the nodes, or remove it"
                    .to_owned(),
            );
        }
        return Ok(LinkHosts::only(hosts.iter().map(String::as_str)));
    }
    if bound.ip().is_loopback() {
        return Ok(LinkHosts::Any);
    }
    if bound.ip().is_unspecified() {
        return Err(format!(
            "the API listens on every interface ({bound}) and the file names no host clients \
             reach it by: links and poll URLs carry the access token and capabilities, so they \
             are built only on known hosts. List them in `api_hosts` (as clients write the Host \
             header: \"tickd.example:9643\"), or set the node's `public_url`"
        ));
    }
    let mut hosts = Vec::new();
    for address in api_addresses {
        hosts.push(address.as_str());
        if let Some(host) = DEFAULT_PORTS
            .iter()
            .find_map(|port| address.strip_suffix(port))
        {
            hosts.push(host);
        }
    }
    Ok(LinkHosts::only(hosts))
}

/// A `Host` header's shape: a name, an IPv4 address or a bracketed IPv6 address, with an
/// optional port.
fn is_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 261
        && host
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b".-:[]".contains(&byte))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses() -> Vec<String> {
        vec!["10.0.0.1:9643".to_owned(), "tickd-2.example:443".to_owned()]
    }

    #[test]
    fn loopback_admits_any_host_and_the_network_only_the_files_addresses() {
        let loopback: SocketAddr = "127.0.0.1:9643".parse().expect("valid in this test");
        assert_eq!(
            link_hosts(None, &addresses(), loopback).expect("valid in this test"),
            LinkHosts::Any
        );
        let exposed: SocketAddr = "10.0.0.1:9643".parse().expect("valid in this test");
        assert_eq!(
            link_hosts(None, &addresses(), exposed).expect("valid in this test"),
            LinkHosts::only(["10.0.0.1:9643", "tickd-2.example:443", "tickd-2.example"])
        );
    }

    #[test]
    fn api_hosts_replace_the_default_even_on_loopback() {
        let loopback: SocketAddr = "127.0.0.1:9643".parse().expect("valid in this test");
        let listed = vec!["tickd.example".to_owned()];
        assert_eq!(
            link_hosts(Some(&listed), &addresses(), loopback).expect("valid in this test"),
            LinkHosts::only(["tickd.example"])
        );
    }

    #[test]
    fn every_interface_needs_api_hosts() {
        let everywhere: SocketAddr = "0.0.0.0:9643".parse().expect("valid in this test");
        let error = link_hosts(None, &addresses(), everywhere).expect_err("refused in this test");
        assert!(error.contains("api_hosts"), "{error}");
        let listed = vec!["tickd.example:9643".to_owned()];
        assert!(link_hosts(Some(&listed), &addresses(), everywhere).is_ok());
    }

    #[test]
    fn api_hosts_must_be_hosts() {
        let bound: SocketAddr = "10.0.0.1:9643".parse().expect("valid in this test");
        for bad in [vec![], vec!["https://x".to_owned()], vec![String::new()]] {
            assert!(
                link_hosts(Some(&bad), &addresses(), bound).is_err(),
                "{bad:?}"
            );
        }
    }
}
