//! TLS for the node's two listeners and for its calls to peers (rustls, with ring as the
//! crypto provider).
//!
//! One certificate per node (`cert_file`, `key_file`), signed by the cluster's CA (`ca_file`;
//! `tickd certs` makes all three), serves three purposes:
//!
//! * the **API listener** presents it to clients (who trust the CA, or a CA above it); client
//!   certificates are asked for only when the file says `api_require_client_cert = true`;
//! * the **Raft listener** presents it to peers and *requires* theirs: the handshake accepts
//!   only a certificate chained to the cluster CA, valid now, with the client-auth usage;
//! * **calls to peers** present it as this node's client certificate and trust only the
//!   cluster CA, checking that the peer's certificate is valid for the host being dialled
//!   and names the node being dialled ([`PeerCertificates`]).
//!
//! A handshake proves a certificate of the cluster; it does not yet say *which* member.
//! The dialling side knows whom it called, and its verifier checks the id during the
//! handshake, before anything is sent. The listening side learns the id only from the
//! certificate: [`identify`] checks it after the handshake: the certificate's subject must be
//! `CN=tickd-node-<id>` for an id of the current membership, and the certificate must be valid
//! for that member's Raft host (its DNS name or IP address as the membership advertises it).
//! So a node removed from the cluster, a certificate made for another cluster's node 2, or node
//! 2's certificate presented from node 3's address are all refused, even though each chains to
//! a trusted CA. On one host every member shares 127.0.0.1, so there the host check cannot tell
//! members apart and the id alone does; across machines both hold.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};
use tickd_raft::network::PeerTls;
use tickd_raft::{NodeAddr, NodeId};

use crate::certs::NODE_CN_PREFIX;

/// The only application protocol the listeners speak (see `crate::listener`).
const HTTP1: &[u8] = b"http/1.1";

/// Where a node's TLS material lives, as the cluster file names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster CA's certificate (PEM): the only root peers are checked against.
    pub ca: PathBuf,
    /// This node's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// This node's private key (PEM).
    pub key: PathBuf,
    /// Whether API clients must present a certificate of the cluster CA too.
    pub api_require_client_cert: bool,
}

/// Everything TLS a node runs with, built once at start-up.
#[derive(Debug)]
pub struct NodeTls {
    /// The API listener's configuration.
    pub api: Arc<rustls::ServerConfig>,
    /// The Raft listener's configuration: a client certificate of the cluster CA is required.
    pub raft: Arc<rustls::ServerConfig>,
    /// The configurations of calls to peers: the cluster CA as the only root, this node's
    /// certificate as its client identity, the node dialled named by the peer's certificate.
    pub peers: Arc<PeerCertificates>,
}

/// What calls to peers are checked with: [`PeerTls`] for the Raft crate's transport.
#[derive(Debug)]
pub struct PeerCertificates {
    /// The configuration every peer's starts from (its verifier is replaced per peer).
    base: rustls::ClientConfig,
    /// The standard check: chained to the cluster CA, valid now, valid for the host dialled.
    webpki: Arc<WebPkiServerVerifier>,
}

impl PeerTls for PeerCertificates {
    fn client_config(&self, peer: NodeId) -> rustls::ClientConfig {
        let mut config = self.base.clone();
        config
            .dangerous()
            .set_certificate_verifier(Arc::new(DialledPeer {
                webpki: self.webpki.clone(),
                id: peer,
            }));
        // A resumed session shows no certificate, and the session cache (shared by the clones
        // of `base`) is keyed by host alone. It is safe because rustls resumes a session only
        // under the verifier that checked it (the same `Arc`), and each peer's is its own: a
        // session made with node 3 is never resumed when node 2 is dialled at its host.
        config
    }
}

/// The verifier of a call to node `id`: WebPKI's checks, then the certificate's node id. A
/// member's certificate is valid for its own host, and members may share one (a single
/// machine, containers behind one address): without the id, another member, or a removed
/// node whose certificate has not expired, listening at a member's address would be sent
/// that member's log.
#[derive(Debug)]
struct DialledPeer {
    webpki: Arc<WebPkiServerVerifier>,
    id: NodeId,
}

/// Why a peer's certificate, valid for the host dialled, is not the node dialled's.
#[derive(thiserror::Error)]
enum NotDialled {
    #[error("the peer's certificate names node {named}, but node {dialled} was dialled")]
    OtherNode { dialled: NodeId, named: NodeId },
    #[error("the peer's certificate names no node ({why}), but node {dialled} was dialled")]
    NoNode { dialled: NodeId, why: String },
}

/// The message itself: rustls shows a verifier's own error with `Debug`, in the reason a
/// refused handshake gives ("invalid peer certificate: Other(OtherError(…))"), which is what
/// reaches the log.
impl std::fmt::Debug for NotDialled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl ServerCertVerifier for DialledPeer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let dialled = self.id;
        let refusal = match node_id_of(end_entity) {
            Ok(named) if named == dialled => return Ok(verified),
            Ok(named) => NotDialled::OtherNode { dialled, named },
            Err(why) => NotDialled::NoNode { dialled, why },
        };
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            OtherError(Arc::new(refusal)),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// TLS material that cannot be used. Every message names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("cannot read the {what} {path}: {message}")]
    Unreadable {
        /// Which file this is (CA certificate, node certificate, node key).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A certificate file holds no certificate.
    #[error("the {what} {path} holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)")]
    Empty {
        /// Which file this is.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// rustls refused the material: a key that does not match the certificate, a CA
    /// certificate it cannot use as a trust anchor.
    #[error("{what}: {message} (make the files with `tickd certs`, see docs/tls.md)")]
    Refused {
        /// What was being built.
        what: &'static str,
        /// rustls' explanation.
        message: String,
    },
}

/// The crypto provider of every TLS configuration tickd builds.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads the files and builds the listeners' and the peer client's configurations.
pub fn load(files: &TlsFiles) -> Result<NodeTls, TlsError> {
    let roots = read_roots(&files.ca)?;
    let (chain, key) = read_identity(Holder::Node, &files.cert, &files.key)?;
    let provider = provider();
    let client_verifier = |optional: bool| {
        let builder = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
        let builder = if optional {
            builder.allow_unauthenticated()
        } else {
            builder
        };
        builder.build().map_err(|error| TlsError::Refused {
            what: "the client certificate check",
            message: error.to_string(),
        })
    };
    let server = |verifier| -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(refused("the server configuration"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(refused("the node certificate and key"))?;
        config.alpn_protocols = vec![HTTP1.to_vec()];
        Ok(Arc::new(config))
    };
    let api_verifier = if files.api_require_client_cert {
        client_verifier(false)?
    } else {
        WebPkiClientVerifier::no_client_auth()
    };
    let api = server(api_verifier)?;
    let raft = server(client_verifier(false)?)?;
    let webpki = server_verifier(roots)?;
    let peers = Arc::new(PeerCertificates {
        base: client_config(webpki.clone(), Some((chain, key)))?,
        webpki,
    });
    Ok(NodeTls { api, raft, peers })
}

/// A client configuration that trusts only the CA in `ca` and, with `identity` (certificate
/// and key files), presents that certificate: the admin CLI's, for a node with TLS.
pub fn client_config_from_files(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, TlsError> {
    let identity = identity
        .map(|(cert, key)| read_identity(Holder::Client, cert, key))
        .transpose()?;
    client_config(server_verifier(read_roots(ca)?)?, identity)
}

/// The configuration of webhook deliveries to `https` receivers: the system's roots, plus
/// the certificates of `ca_file` (`webhook_ca_file`) for receivers whose certificate no public
/// CA signed. A host without a system bundle (the Debian package only recommends
/// ca-certificates) still starts: it says so, and `https` deliveries fail until one exists.
pub fn webhook_client_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    if let Some(error) = system.errors.first() {
        tracing::warn!(%error, "some of the system's CA certificates could not be read");
    }
    roots.add_parsable_certificates(system.certs);
    if let Some(path) = ca_file {
        for certificate in read_certificates("webhook CA certificate", path)? {
            roots.add(certificate).map_err(|error| TlsError::Refused {
                what: "the webhook CA certificate",
                message: error.to_string(),
            })?;
        }
    }
    if roots.is_empty() {
        tracing::warn!(
            "no CA certificate to verify https webhook receivers with: install the system's \
             (ca-certificates) or set webhook_ca_file; https deliveries fail until then"
        );
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(refused("the webhook client configuration"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![HTTP1.to_vec()];
    Ok(config)
}

type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// Whose certificate and key a pair of files holds, for messages.
#[derive(Debug, Clone, Copy)]
enum Holder {
    Node,
    Client,
}

impl Holder {
    fn certificate(self) -> &'static str {
        match self {
            Holder::Node => "node certificate",
            Holder::Client => "client certificate",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Holder::Node => "node key",
            Holder::Client => "client key",
        }
    }
}

/// The standard check of a server's certificate: chained to one of `roots`, valid now, valid
/// for the host dialled.
fn server_verifier(roots: Arc<RootCertStore>) -> Result<Arc<WebPkiServerVerifier>, TlsError> {
    WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|error| TlsError::Refused {
            what: "the server certificate check",
            message: error.to_string(),
        })
}

fn client_config(
    verifier: Arc<WebPkiServerVerifier>,
    identity: Option<Identity>,
) -> Result<rustls::ClientConfig, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(refused("the client configuration"))?
        .with_webpki_verifier(verifier);
    let mut config = match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(refused("the certificate and key as a client identity"))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![HTTP1.to_vec()];
    Ok(config)
}

fn refused(what: &'static str) -> impl Fn(rustls::Error) -> TlsError {
    move |error| TlsError::Refused {
        what,
        message: error.to_string(),
    }
}

/// The text of a CA file for a client that takes PEM (lapin, for `amqps://`), once every
/// certificate in it has been parsed: such a client skips what it cannot parse, silently.
pub fn read_ca_pem(path: &Path) -> Result<String, TlsError> {
    read_roots(path)?;
    std::fs::read_to_string(path).map_err(|error| TlsError::Unreadable {
        what: "CA certificate",
        path: path.to_path_buf(),
        message: error.to_string(),
    })
}

/// The CA certificates in `path`, as the only trust anchors.
fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates("CA certificate", path)? {
        roots.add(certificate).map_err(|error| TlsError::Refused {
            what: "the CA certificate",
            message: error.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

/// A certificate chain and its key; `whose` names them in messages ("node", "client").
fn read_identity(whose: Holder, cert: &Path, key: &Path) -> Result<Identity, TlsError> {
    let chain = read_certificates(whose.certificate(), cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|error| TlsError::Unreadable {
        what: whose.key(),
        path: key.to_path_buf(),
        message: error.to_string(),
    })?;
    Ok((chain, key))
}

fn read_certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let unreadable = |message: String| TlsError::Unreadable {
        what,
        path: path.to_path_buf(),
        message,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|error| unreadable(error.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| unreadable(error.to_string()))?;
    if certificates.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(certificates)
}

/// Why a peer that completed the TLS handshake is not let in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityRefusal {
    /// No certificate was presented (the Raft listener's handshake requires one, so this is
    /// only reached if that requirement were lifted).
    #[error("no certificate")]
    NoCertificate,
    /// The certificate does not name a node: its subject is not `CN=tickd-node-<id>`.
    #[error("the certificate names no node ({0})")]
    NoNodeId(String),
    /// The certificate names a node that is not a member.
    #[error("the certificate names node {0}, which is not a member")]
    NotAMember(NodeId),
    /// The certificate names a member but is not valid for that member's Raft host.
    #[error("the certificate names node {id} but is not valid for its host {host}")]
    WrongHost {
        /// The member the certificate names.
        id: NodeId,
        /// The host of that member's advertised Raft address.
        host: String,
    },
}

impl IdentityRefusal {
    /// The `reason` label of the refusal metric.
    pub fn label(&self) -> &'static str {
        match self {
            IdentityRefusal::NoCertificate => "no_certificate",
            IdentityRefusal::NoNodeId(_) => "no_node_id",
            IdentityRefusal::NotAMember(_) => "not_a_member",
            IdentityRefusal::WrongHost { .. } => "wrong_host",
        }
    }
}

/// The node id a certificate's subject names (`CN=tickd-node-<id>`).
pub fn node_id_of(certificate: &CertificateDer<'_>) -> Result<NodeId, String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref())
        .map_err(|error| format!("not an X.509 certificate: {error}"))?;
    let common_name = parsed
        .subject()
        .iter_common_name()
        .next()
        .ok_or("no common name")?
        .as_str()
        .map_err(|error| format!("a common name that is not text: {error}"))?;
    common_name
        .strip_prefix(NODE_CN_PREFIX)
        .and_then(canonical_id)
        .ok_or_else(|| format!("common name {common_name:?} is not {NODE_CN_PREFIX}<id>"))
}

/// A node id written as `tickd certs` writes it: decimal digits, no sign, no leading zero.
/// `tickd-node-02` or `tickd-node-+2` is not node 2: one member, one name.
fn canonical_id(digits: &str) -> Option<NodeId> {
    let id = digits.parse::<NodeId>().ok()?;
    (id.to_string() == digits).then_some(id)
}

/// The member a peer's verified certificate chain names, checked against `members` (the
/// current membership, or the cluster file's nodes before this node has joined one).
pub fn identify(
    chain: Option<&[CertificateDer<'_>]>,
    members: &BTreeMap<NodeId, NodeAddr>,
) -> Result<NodeId, IdentityRefusal> {
    let leaf = chain
        .and_then(|chain| chain.first())
        .ok_or(IdentityRefusal::NoCertificate)?;
    let id = node_id_of(leaf).map_err(IdentityRefusal::NoNodeId)?;
    let member = members.get(&id).ok_or(IdentityRefusal::NotAMember(id))?;
    let host = host_of(&member.raft);
    let wrong_host = || IdentityRefusal::WrongHost {
        id,
        host: host.to_string(),
    };
    let name = ServerName::try_from(host).map_err(|_| wrong_host())?;
    let end_entity = webpki::EndEntityCert::try_from(leaf).map_err(|_| wrong_host())?;
    end_entity
        .verify_is_valid_for_subject_name(&name)
        .map_err(|_| wrong_host())?;
    Ok(id)
}

/// The host part of `host:port` (without the brackets of an IPv6 address).
pub fn host_of(address: &str) -> &str {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _port)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    use rustls::HandshakeKind;
    use rustls::pki_types::PrivatePkcs8KeyDer;

    use super::*;

    fn authority() -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "tickd cluster CA");
        CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key"))
            .expect("a CA certificate")
    }

    fn certificate(
        ca: &CertifiedIssuer<'static, KeyPair>,
        common_name: &str,
        hosts: &[&str],
    ) -> CertificateDer<'static> {
        let hosts: Vec<String> = hosts.iter().map(|host| host.to_string()).collect();
        let mut params = CertificateParams::new(hosts).expect("parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params
            .signed_by(&KeyPair::generate().expect("a key"), ca)
            .expect("a signed certificate")
            .der()
            .clone()
    }

    fn members(entries: &[(NodeId, &str)]) -> BTreeMap<NodeId, NodeAddr> {
        entries
            .iter()
            .map(|(id, raft)| {
                let node = NodeAddr {
                    api: "127.0.0.1:1".into(),
                    raft: raft.to_string(),
                };
                (*id, node)
            })
            .collect()
    }

    #[test]
    fn a_member_is_identified_by_its_id_and_its_raft_host() {
        let ca = authority();
        let by_name = certificate(&ca, "tickd-node-2", &["node2.tickd.test"]);
        let by_ip = certificate(&ca, "tickd-node-3", &["10.213.0.3"]);
        let cluster = members(&[
            (1, "node1.tickd.test:9743"),
            (2, "node2.tickd.test:9743"),
            (3, "10.213.0.3:9743"),
        ]);
        assert_eq!(identify(Some(&[by_name]), &cluster), Ok(2));
        assert_eq!(identify(Some(&[by_ip]), &cluster), Ok(3));
    }

    #[test]
    fn a_certificate_of_the_ca_that_names_no_member_is_refused() {
        let ca = authority();
        let cluster = members(&[(1, "node1.tickd.test:9743"), (2, "node2.tickd.test:9743")]);
        let removed = certificate(&ca, "tickd-node-4", &["node4.tickd.test"]);
        assert_eq!(
            identify(Some(&[removed]), &cluster),
            Err(IdentityRefusal::NotAMember(4))
        );
        // Node 2's id on a certificate for another host: not node 2's certificate.
        let elsewhere = certificate(&ca, "tickd-node-2", &["node4.tickd.test"]);
        assert_eq!(
            identify(Some(&[elsewhere]), &cluster),
            Err(IdentityRefusal::WrongHost {
                id: 2,
                host: "node2.tickd.test".into()
            })
        );
        let client = certificate(&ca, "tickd-client-ops", &[]);
        assert!(matches!(
            identify(Some(&[client]), &cluster),
            Err(IdentityRefusal::NoNodeId(_))
        ));
        assert_eq!(
            identify(None, &cluster),
            Err(IdentityRefusal::NoCertificate)
        );
        assert_eq!(
            identify(Some(&[]), &cluster),
            Err(IdentityRefusal::NoCertificate)
        );
    }

    #[test]
    fn the_node_id_is_read_from_the_common_name_only() {
        let ca = authority();
        for (name, expected) in [
            ("tickd-node-17", Ok(17)),
            ("tickd-node-", Err(())),
            ("tickd-node-x", Err(())),
            ("node-17", Err(())),
            ("tickd-node-17 ", Err(())),
            ("tickd-node-017", Err(())),
            ("tickd-node-+17", Err(())),
            ("tickd-node-0", Ok(0)),
        ] {
            let id = node_id_of(&certificate(&ca, name, &["a.test"])).map_err(|_| ());
            assert_eq!(id, expected, "{name:?}");
        }
        assert!(node_id_of(&CertificateDer::from(vec![0u8; 8])).is_err());
    }

    /// A certificate and key for node `id` on 127.0.0.1, signed by `ca`, for both ends of a
    /// handshake.
    fn node_identity(ca: &CertifiedIssuer<'static, KeyPair>, id: NodeId) -> Identity {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{NODE_CN_PREFIX}{id}"));
        let key = KeyPair::generate().expect("a key");
        let certificate = params.signed_by(&key, ca).expect("a signed certificate");
        let key = PrivatePkcs8KeyDer::from(key.serialize_der());
        (vec![certificate.der().clone()], key.into())
    }

    /// A server on 127.0.0.1 presenting `identity`.
    fn server(identity: Identity) -> Arc<rustls::ServerConfig> {
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(identity.0, identity.1)
            .expect("a server configuration");
        Arc::new(config)
    }

    /// Runs a TLS handshake in memory: the client's configuration is `client`, dialling
    /// 127.0.0.1, and the server is `server`. What the client's side says of it: a full
    /// handshake or a resumed one, or why it refused. The server's session tickets reach the
    /// client, so a later handshake with the same client configuration may resume.
    fn handshake(
        client: rustls::ClientConfig,
        server: Arc<rustls::ServerConfig>,
    ) -> Result<HandshakeKind, rustls::Error> {
        let name = ServerName::try_from("127.0.0.1").expect("a server name");
        let mut client = rustls::Connection::from(
            rustls::ClientConnection::new(Arc::new(client), name).expect("a client connection"),
        );
        let mut server = rustls::Connection::from(
            rustls::ServerConnection::new(server).expect("a server connection"),
        );
        // Bytes from one end to the other, until the other has taken them all; then what the
        // receiving end made of them.
        let pass = |from: &mut rustls::Connection, to: &mut rustls::Connection| {
            let mut bytes = Vec::new();
            while from.wants_write() {
                from.write_tls(&mut bytes).expect("writing to memory");
            }
            let mut unread = &bytes[..];
            while !unread.is_empty() {
                to.read_tls(&mut unread).expect("reading from memory");
            }
            to.process_new_packets().map(|_| ())
        };
        for _ in 0..4 {
            pass(&mut client, &mut server).expect("the server takes the client's messages");
            pass(&mut server, &mut client)?;
            if !client.is_handshaking() {
                // The client's last flight, and the tickets the server sends in return.
                pass(&mut client, &mut server).expect("the server takes the client's finish");
                pass(&mut server, &mut client)?;
                return client
                    .handshake_kind()
                    .ok_or(rustls::Error::HandshakeNotComplete);
            }
        }
        panic!("the handshake did not end in four round trips");
    }

    #[test]
    fn a_call_to_a_peer_accepts_only_the_certificate_that_names_the_node_dialled() {
        let ca = authority();
        let mut roots = RootCertStore::empty();
        roots.add(ca.der().clone()).expect("the CA as a root");
        let webpki = server_verifier(Arc::new(roots)).expect("a verifier");
        let peers = PeerCertificates {
            base: client_config(webpki.clone(), Some(node_identity(&ca, 1))).expect("a config"),
            webpki,
        };
        let node3 = server(node_identity(&ca, 3));

        // Node 3's certificate, valid for the host dialled, is node 3's: dialling node 3
        // takes it, dialling node 2 at the same host does not, though node 3 would resume
        // the session it just gave node 3's dialler (a resumption shows no certificate).
        let to_node3 = peers.client_config(3);
        assert_eq!(
            handshake(to_node3.clone(), node3.clone()),
            Ok(HandshakeKind::Full)
        );
        assert_eq!(
            handshake(to_node3, node3.clone()),
            Ok(HandshakeKind::Resumed),
            "node 3's dialler resumes its session"
        );
        let refusal = handshake(peers.client_config(2), node3)
            .expect_err("node 3's certificate is no certificate of node 2");
        assert!(
            refusal
                .to_string()
                .contains("names node 3, but node 2 was dialled"),
            "{refusal}"
        );

        // A certificate of the CA that names no node (an operator's client certificate).
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, "tickd-client-ops");
        let key = KeyPair::generate().expect("a key");
        let operator = params.signed_by(&key, &ca).expect("a signed certificate");
        let operator: Identity = (
            vec![operator.der().clone()],
            PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        );
        let refusal = handshake(peers.client_config(2), server(operator))
            .expect_err("a certificate that names no node is no node's");
        assert!(refusal.to_string().contains("names no node"), "{refusal}");

        // WebPKI's own checks still come first: another CA's node 2 (a CA of the same name,
        // another key) is refused as not signed by the cluster's.
        let stranger = node_identity(&authority(), 2);
        let refusal = handshake(peers.client_config(2), server(stranger))
            .expect_err("another CA's certificate");
        assert!(
            matches!(
                refusal,
                rustls::Error::InvalidCertificate(CertificateError::BadSignature)
            ),
            "{refusal}"
        );
    }

    #[test]
    fn the_host_of_an_address() {
        assert_eq!(host_of("127.0.0.1:9743"), "127.0.0.1");
        assert_eq!(host_of("node1.tickd.test:9743"), "node1.tickd.test");
        assert_eq!(host_of("[::1]:9743"), "::1");
        assert_eq!(host_of("bare"), "bare");
    }
}
