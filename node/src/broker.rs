//! Which RabbitMQ a node talks to, and whom it trusts there.
//!
//! The URI comes from `RABBIT_URI` or the file's `rabbit_uri`; `amqps://` turns TLS on, with
//! the system's roots and, when the file names one, `rabbit_ca_file` as trust anchors. Both
//! are checked once at start-up, so that a typo stops the node with a message instead of
//! surfacing later as "RabbitMQ unreachable" on every registration.

use std::net::IpAddr;
use std::path::Path;

use lapin::uri::{AMQPScheme, AMQPUri};
use tickd_engine::BrokerEndpoint;

use crate::tls::{self, TlsError};

/// Why the broker settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BrokerConfigError {
    /// The URI is not an AMQP URI. The URI itself is not repeated: it may hold a password.
    #[error(
        "the RabbitMQ URI (RABBIT_URI or `rabbit_uri`) is not an AMQP URI ({0}); write it as \
         amqp://user:password@host:5672/%2f, or amqps://… for TLS"
    )]
    Unparsable(String),
    /// A CA file is named, but nothing would use it.
    #[error(
        "`rabbit_ca_file` is set but the RabbitMQ URI is not amqps://: the CA is used only for \
         TLS to the broker; write the URI as amqps://host:5671/… or remove `rabbit_ca_file`"
    )]
    CaWithoutTls,
    /// The CA file cannot be read or holds no certificate.
    #[error(transparent)]
    Ca(#[from] TlsError),
    /// `rabbit_client_uri` is not an AMQP URI; like the node's URI, it is not repeated.
    #[error(
        "`rabbit_client_uri` is not an AMQP URI ({0}); write it as \
         amqp://client-user:password@host:5672/%2f, the URI clients consume with"
    )]
    ClientUnparsable(String),
    /// `rabbit_client_uri` is set, but the node has no broker.
    #[error(
        "`rabbit_client_uri` is set but the node has no RabbitMQ URI (RABBIT_URI or \
         `rabbit_uri`): clients get http channels; set both or remove `rabbit_client_uri`"
    )]
    ClientWithoutBroker,
    /// The node would hand its own broker credentials to clients on the network.
    #[error(
        "this node's API is reachable off loopback and the cluster file has no \
         `rabbit_client_uri`: every registration would hand clients the node's own RabbitMQ \
         credentials. Create a RabbitMQ user for clients (it needs only to consume the \
         ticktok-* queues) and set `rabbit_client_uri` to its URI"
    )]
    ClientUriMissing,
}

/// The broker this node uses, if any: `uri` (already chosen between the environment and the
/// file) with the certificates of `ca_file` added to the system's roots for `amqps://`.
pub fn endpoint(
    uri: Option<String>,
    ca_file: Option<&Path>,
) -> Result<Option<BrokerEndpoint>, BrokerConfigError> {
    let Some(uri) = uri else {
        return match ca_file {
            Some(_) => Err(BrokerConfigError::CaWithoutTls),
            None => Ok(None),
        };
    };
    let parsed: AMQPUri = uri.parse().map_err(BrokerConfigError::Unparsable)?;
    let ca_pem = match (&parsed.scheme, ca_file) {
        (AMQPScheme::AMQP, Some(_)) => return Err(BrokerConfigError::CaWithoutTls),
        (AMQPScheme::AMQPS, Some(path)) => Some(tls::read_ca_pem(path)?),
        (_, None) => None,
    };
    if parsed.scheme == AMQPScheme::AMQP && !is_loopback(&parsed.authority.host) {
        tracing::warn!(
            host = %parsed.authority.host,
            "RabbitMQ is reached over plain amqp:// off loopback: its credentials and every \
             tick cross the network in clear; use amqps:// unless the network is trusted"
        );
    }
    Ok(Some(BrokerEndpoint { uri, ca_pem }))
}

/// The AMQP URI handed to clients in their channel (SPEC §1): `client_uri` when the file sets
/// one; the node's own `node_uri` only when the API listens on loopback, where the clients are
/// this machine's and the default stays Ticktok's (clients consume with the server's URI).
/// Off loopback the node's credentials would reach every client on the network, so a URI of
/// the clients' own is required.
pub fn client_uri(
    node_uri: Option<&str>,
    client_uri: Option<String>,
    api_on_loopback: bool,
) -> Result<Option<String>, BrokerConfigError> {
    match (node_uri, client_uri) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(BrokerConfigError::ClientWithoutBroker),
        (Some(_), Some(client)) => {
            client
                .parse::<AMQPUri>()
                .map_err(BrokerConfigError::ClientUnparsable)?;
            Ok(Some(client))
        }
        (Some(node), None) if api_on_loopback => Ok(Some(node.to_owned())),
        (Some(_), None) => Err(BrokerConfigError::ClientUriMissing),
    }
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_uri_and_no_ca_is_the_http_channel() {
        assert!(matches!(endpoint(None, None), Ok(None)));
    }

    #[test]
    fn a_ca_file_without_amqps_is_refused() {
        let ca = Path::new("/nonexistent/ca.crt");
        for uri in [
            None,
            Some("amqp://guest:guest@127.0.0.1:5672/%2f".to_owned()),
        ] {
            assert!(
                matches!(
                    endpoint(uri, Some(ca)),
                    Err(BrokerConfigError::CaWithoutTls)
                ),
                "a CA that nothing uses is a mistake worth stopping for"
            );
        }
    }

    #[test]
    fn an_unparsable_uri_is_refused_without_echoing_it() {
        let error = endpoint(Some("http://user:hunter2@host".to_owned()), None)
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(error.contains("not an AMQP URI"), "{error}");
        assert!(!error.contains("hunter2"), "the password leaked: {error}");
    }

    #[test]
    fn an_unreadable_ca_file_is_refused() {
        let uri = Some("amqps://guest:guest@127.0.0.1:5671/%2f".to_owned());
        let error = endpoint(uri, Some(Path::new("/nonexistent/ca.crt")));
        assert!(matches!(error, Err(BrokerConfigError::Ca(_))), "{error:?}");
    }

    #[test]
    fn amqps_keeps_the_uri_and_the_ca() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ca = crate::certs::create_ca(dir.path(), 30).expect("a CA").cert;
        let uri = "amqps://guest:guest@rabbit.example:5671/%2f".to_owned();
        let endpoint = endpoint(Some(uri.clone()), Some(&ca))
            .expect("a valid amqps endpoint")
            .expect("a broker");
        assert_eq!(endpoint.uri, uri);
        assert!(
            endpoint
                .ca_pem
                .is_some_and(|pem| pem.contains("BEGIN CERTIFICATE"))
        );
    }

    #[test]
    fn clients_get_the_nodes_uri_only_on_loopback() {
        let node = "amqp://tickd:node-secret@10.0.0.9:5672/%2f";
        let client = "amqp://clients:client-pass@10.0.0.9:5672/%2f".to_owned();
        assert_eq!(
            client_uri(Some(node), None, true).ok().flatten().as_deref(),
            Some(node)
        );
        assert!(matches!(
            client_uri(Some(node), None, false),
            Err(BrokerConfigError::ClientUriMissing)
        ));
        for on_loopback in [true, false] {
            assert_eq!(
                client_uri(Some(node), Some(client.clone()), on_loopback)
                    .ok()
                    .flatten(),
                Some(client.clone())
            );
        }
        assert!(matches!(client_uri(None, None, false), Ok(None)));
        assert!(matches!(
            client_uri(None, Some(client), true),
            Err(BrokerConfigError::ClientWithoutBroker)
        ));
        let error = client_uri(Some(node), Some("http://u:hunter2@h".to_owned()), true)
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(error.contains("rabbit_client_uri"), "{error}");
        assert!(!error.contains("hunter2"), "the password leaked: {error}");
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        for host in ["localhost", "127.0.0.1", "[::1]", "::1", "LOCALHOST"] {
            assert!(is_loopback(host), "{host}");
        }
        for host in ["rabbit.example", "10.0.0.5", "[2001:db8::1]"] {
            assert!(!is_loopback(host), "{host}");
        }
    }
}
