//! `tickd certs`: the TLS material of a cluster, made in minutes.
//!
//! A cluster's TLS rests on one private CA that only the operator holds: `ca.crt` goes to
//! every machine, `ca.key` to none. Each node gets one certificate, `CN=tickd-node-<id>`,
//! naming every host (DNS name or IP address) its peers and clients reach it by, with both
//! the serverAuth and the clientAuth purpose: the same certificate serves the node's
//! listeners and presents the node when it calls its peers, whose TLS code reads the node id
//! from the common name ([`NODE_CN_PREFIX`]). Operators get client certificates,
//! `CN=tickd-client-<name>`, which authenticate a caller and can never serve. The model is
//! `cockroach cert create-ca / create-node` and `consul tls ca create`.
//!
//! Nothing is ever overwritten: a CA key replaced by accident would orphan every certificate
//! it signed. Every input (days, id, hosts, name, the CA pair) is checked and every target
//! file is checked to be absent before anything is made, so a refused command writes
//! nothing. Keys are ECDSA P-256 (rcgen's default on ring), which every TLS 1.2 and 1.3 peer
//! accepts. How the files are written is [`files`]'s business; what a valid host or client
//! name is, [`names`]'s.

mod files;
mod names;

use std::io;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

use crate::certs::files::Pair;
pub use crate::certs::names::Host;

/// The subject common name of the CA `create-ca` makes.
pub const CA_COMMON_NAME: &str = "tickd cluster CA";

/// A node certificate's common name is this prefix and the node id (`tickd-node-3`): the
/// node's TLS code takes a peer's id from it, so the convention is exact.
pub const NODE_CN_PREFIX: &str = "tickd-node-";

/// A client certificate's common name is this prefix and the client's name (`tickd-client-ops`).
pub const CLIENT_CN_PREFIX: &str = "tickd-client-";

/// The CA's certificate file in a certificates directory, as `create-ca` names it.
pub const CA_CERT_FILE: &str = "ca.crt";

/// The CA's key file in a certificates directory, as `create-ca` names it.
pub const CA_KEY_FILE: &str = "ca.key";

/// A CA's default validity: ten years, since replacing it means re-issuing every
/// certificate of the cluster.
pub const CA_DAYS: u32 = 3650;

/// A node's or client's default validity: one year, so a key that leaks stops working
/// within a year, and renewing is one command and a restart.
pub const LEAF_DAYS: u32 = 365;

/// The longest validity `--days` may ask for (100 years): far enough for any use, near
/// enough that no date overflows.
const MAX_DAYS: u32 = 36_500;

/// How long before its making a certificate becomes valid: a machine whose clock lags the
/// one that made it by up to an hour still accepts it at once.
const BACKDATE: Duration = Duration::hours(1);

/// Why a `tickd certs` command made nothing. Every message names the file or flag to fix.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file the command would write exists already.
    #[error(
        "{} already exists; remove it or use another --dir (tickd certs never overwrites a \
         file: a replaced CA key would orphan every certificate it signed)",
        .path.display()
    )]
    Exists {
        /// The existing file.
        path: PathBuf,
    },
    /// A CA file could not be read.
    #[error("cannot read the CA {what} {}: {source}; make the CA with `tickd certs create-ca`, \
             or name its files with --ca-cert and --ca-key", .path.display())]
    Unreadable {
        /// "certificate" or "key".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What reading it said.
        source: io::Error,
    },
    /// A CA file holds something that cannot sign.
    #[error("{}: {reason}", .path.display())]
    InvalidCa {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The CA key is not the key of the CA certificate.
    #[error(
        "the CA key {} does not belong to the CA certificate {}; pass the pair that \
         `tickd certs create-ca` wrote together (--ca-cert, --ca-key)",
        .key.display(), .cert.display()
    )]
    KeyMismatch {
        /// The certificate.
        cert: PathBuf,
        /// The key that does not match it.
        key: PathBuf,
    },
    /// The CA certificate is no longer valid: nothing it signs would verify.
    #[error(
        "the CA certificate {} expired on {}; make a new CA (in another --dir) and new \
         certificates for every node",
        .path.display(), utc(*.not_after)
    )]
    CaExpired {
        /// The certificate.
        path: PathBuf,
        /// When it expired.
        not_after: OffsetDateTime,
    },
    /// `create-node` was given no host.
    #[error("name at least one --host: each DNS name and IP address the node is reached by")]
    NoHost,
    /// A `--host` is neither a DNS name nor an IP address.
    #[error("--host {host:?} {reason}")]
    Host {
        /// The host as given.
        host: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A client `--name` is not one tickd accepts.
    #[error("--name {name:?} {reason}")]
    Name {
        /// The name as given.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Node ids start at 1.
    #[error("--id 0 is no node id: ids start at 1, as in the cluster file")]
    NodeId,
    /// `--days` is out of range.
    #[error("--days {days} is out of range: give 1 to {MAX_DAYS}")]
    Days {
        /// The days asked for.
        days: u32,
    },
    /// A file or directory could not be written.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// rcgen could not make a key or sign a certificate.
    #[error("cannot make the {what}: {source}")]
    Generate {
        /// What was being made.
        what: &'static str,
        /// rcgen's error.
        source: rcgen::Error,
    },
}

impl CertError {
    /// The process's exit code: 2 for anything the operator's input decides (as for usage
    /// errors), 1 for a failure of the machine (a disk that cannot be written).
    pub fn exit_code(&self) -> u8 {
        match self {
            CertError::Write { .. } | CertError::Generate { .. } => 1,
            _ => 2,
        }
    }
}

/// Where `create-node` and `create-client` find the CA that signs.
#[derive(Debug, Clone)]
pub struct CaFiles {
    /// The CA certificate (PEM).
    pub cert: PathBuf,
    /// The CA's private key (PEM).
    pub key: PathBuf,
}

impl CaFiles {
    /// The CA as `create-ca` wrote it into `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        CaFiles {
            cert: dir.join(CA_CERT_FILE),
            key: dir.join(CA_KEY_FILE),
        }
    }
}

/// What a command made, for the operator's summary.
#[derive(Debug)]
pub struct Issued {
    /// The private key file (mode 0600).
    pub key: PathBuf,
    /// The certificate file (mode 0644).
    pub cert: PathBuf,
    /// The certificate's subject common name.
    pub common_name: String,
    /// The hosts the certificate names (none for a CA or a client).
    pub hosts: Vec<Host>,
    /// When the certificate expires.
    pub not_after: OffsetDateTime,
    /// When the signing CA expires, if that is before the certificate does: from then on the
    /// certificate verifies nowhere, whatever its own date says.
    pub ca_expires_first: Option<OffsetDateTime>,
}

/// `tickd certs create-ca`: a self-signed CA, `DIR/ca.crt` and `DIR/ca.key`, that may sign
/// end-entity certificates only (path length 0).
pub fn create_ca(dir: &Path, days: u32) -> Result<Issued, CertError> {
    let mut params = certificate_params(CA_COMMON_NAME, days)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let files = Pair::new(dir, "ca");
    files.refuse_existing()?;
    let key = generate_key()?;
    let cert = params
        .self_signed(&key)
        .map_err(|source| CertError::Generate {
            what: "CA certificate",
            source,
        })?;
    files.write(&key.serialize_pem(), &cert.pem())?;
    Ok(Issued {
        key: files.key,
        cert: files.cert,
        common_name: CA_COMMON_NAME.to_owned(),
        hosts: Vec::new(),
        not_after: params.not_after,
        ca_expires_first: None,
    })
}

/// `tickd certs create-node`: node `id`'s certificate, `DIR/node-<id>.crt` and
/// `DIR/node-<id>.key`, for its listeners and its calls to peers, naming each of `hosts`.
pub fn create_node(
    dir: &Path,
    ca: &CaFiles,
    id: u64,
    hosts: &[String],
    days: u32,
) -> Result<Issued, CertError> {
    if id == 0 {
        return Err(CertError::NodeId);
    }
    let hosts = names::parse_hosts(hosts)?;
    let common_name = format!("{NODE_CN_PREFIX}{id}");
    let mut params = certificate_params(&common_name, days)?;
    params.subject_alt_names = hosts.iter().map(Host::san).collect();
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    issue(dir, &format!("node-{id}"), ca, common_name, params, hosts)
}

/// `tickd certs create-client`: an operator's or a program's certificate,
/// `DIR/client-<name>.crt` and `.key`, that authenticates a caller and cannot serve.
pub fn create_client(dir: &Path, ca: &CaFiles, name: &str, days: u32) -> Result<Issued, CertError> {
    names::check_client_name(name)?;
    let common_name = format!("{CLIENT_CN_PREFIX}{name}");
    let mut params = certificate_params(&common_name, days)?;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    issue(
        dir,
        &format!("client-{name}"),
        ca,
        common_name,
        params,
        Vec::new(),
    )
}

/// A date as operators read it: `2026-07-01 14:05 UTC`.
pub fn utc(at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02} UTC",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute()
    )
}

/// Parameters with the subject `CN=<common_name>`, valid from an hour ago for `days` days,
/// explicitly not a CA, and identifying their issuer's key (so a verifier finds the CA by
/// key, not only by name).
fn certificate_params(common_name: &str, days: u32) -> Result<CertificateParams, CertError> {
    if !(1..=MAX_DAYS).contains(&days) {
        return Err(CertError::Days { days });
    }
    let now = OffsetDateTime::now_utc();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.not_before = now - BACKDATE;
    params.not_after = now + Duration::days(i64::from(days));
    params.is_ca = IsCa::ExplicitNoCa;
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

/// Signs `params` (made for `common_name`) with the CA into `DIR/<stem>.crt` and `.key`,
/// once nothing is in the way.
fn issue(
    dir: &Path,
    stem: &str,
    ca: &CaFiles,
    common_name: String,
    params: CertificateParams,
    hosts: Vec<Host>,
) -> Result<Issued, CertError> {
    let files = Pair::new(dir, stem);
    files.refuse_existing()?;
    let signer = Signer::load(ca)?;
    let key = generate_key()?;
    let cert = params
        .signed_by(&key, &signer.issuer)
        .map_err(|source| CertError::Generate {
            what: "certificate",
            source,
        })?;
    files.write(&key.serialize_pem(), &cert.pem())?;
    Ok(Issued {
        key: files.key,
        cert: files.cert,
        common_name,
        hosts,
        not_after: params.not_after,
        ca_expires_first: (signer.not_after < params.not_after).then_some(signer.not_after),
    })
}

fn generate_key() -> Result<KeyPair, CertError> {
    KeyPair::generate().map_err(|source| CertError::Generate {
        what: "private key",
        source,
    })
}

/// A CA read back from its files and checked fit to sign.
struct Signer {
    issuer: Issuer<'static, KeyPair>,
    not_after: OffsetDateTime,
}

impl Signer {
    /// Reads the CA pair and checks that the certificate is a CA's, still valid, and that
    /// the key is its key: a certificate signed by another key would verify nowhere.
    fn load(ca: &CaFiles) -> Result<Signer, CertError> {
        let read = |path: &PathBuf, what| {
            std::fs::read_to_string(path).map_err(|source| CertError::Unreadable {
                what,
                path: path.clone(),
                source,
            })
        };
        let cert_pem = read(&ca.cert, "certificate")?;
        let key_pem = read(&ca.key, "key")?;
        let invalid = |path: &PathBuf, reason: String| CertError::InvalidCa {
            path: path.clone(),
            reason,
        };
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
            .map_err(|error| invalid(&ca.cert, format!("holds no PEM certificate ({error})")))?;
        let certificate = pem
            .parse_x509()
            .map_err(|error| invalid(&ca.cert, format!("is not an X.509 certificate ({error})")))?;
        if !certificate.is_ca() {
            return Err(invalid(
                &ca.cert,
                "is not a CA certificate (its basic constraints do not say CA:TRUE); pass \
                 the ca.crt that `tickd certs create-ca` wrote"
                    .into(),
            ));
        }
        let not_after = certificate.validity().not_after.to_datetime();
        if not_after <= OffsetDateTime::now_utc() {
            return Err(CertError::CaExpired {
                path: ca.cert.clone(),
                not_after,
            });
        }
        let key = KeyPair::from_pem(&key_pem)
            .map_err(|error| invalid(&ca.key, format!("is not a PEM private key ({error})")))?;
        if certificate.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(CertError::KeyMismatch {
                cert: ca.cert.clone(),
                key: ca.key.clone(),
            });
        }
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key)
            .map_err(|error| invalid(&ca.cert, format!("cannot sign with this CA ({error})")))?;
        Ok(Signer { issuer, not_after })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use webpki::KeyUsage;

    use super::*;

    /// A fresh directory with a CA in `certs/`.
    fn with_ca() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().expect("a temporary directory");
        let dir = root.path().join("certs");
        create_ca(&dir, CA_DAYS).expect("create-ca");
        (root, dir)
    }

    fn der(path: &Path) -> CertificateDer<'static> {
        CertificateDer::from_pem_file(path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
    }

    /// Verifies `cert` against the CA `ca` for `usage`, the way rustls checks a peer.
    fn verify(cert: &Path, ca: &Path, usage: KeyUsage) -> Result<(), webpki::Error> {
        let ca = der(ca);
        let anchor = webpki::anchor_from_trusted_cert(&ca)?;
        let leaf = der(cert);
        let leaf = webpki::EndEntityCert::try_from(&leaf)?;
        leaf.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &[anchor],
            &[],
            UnixTime::now(),
            usage,
            None,
            None,
        )
        .map(drop)
    }

    /// Verifies `cert` as a TLS server reached as `host`.
    fn verify_server(cert: &Path, ca: &Path, host: &str) -> Result<(), webpki::Error> {
        verify(cert, ca, KeyUsage::server_auth())?;
        let leaf = der(cert);
        let name = ServerName::try_from(host.to_owned()).expect("a server name");
        webpki::EndEntityCert::try_from(&leaf)?.verify_is_valid_for_subject_name(&name)
    }

    /// The subject common name and whether basic constraints say CA:TRUE.
    fn subject_of(path: &Path) -> (String, bool) {
        let der = der(path);
        let (_, certificate) = x509_parser::parse_x509_certificate(&der).expect("X.509");
        let common_name = certificate
            .subject()
            .iter_common_name()
            .next()
            .and_then(|name| name.as_str().ok())
            .expect("a common name")
            .to_owned();
        (common_name, certificate.is_ca())
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read the directory")
            .map(|entry| {
                entry
                    .expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into()
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn node_certificate_serves_each_host_and_calls_peers() {
        let (_root, dir) = with_ca();
        let ca = CaFiles::in_dir(&dir);
        let hosts = ["127.0.0.1", "node7.tickd.test", "::1"].map(String::from);
        let issued = create_node(&dir, &ca, 7, &hosts, LEAF_DAYS).expect("create-node");
        assert_eq!(issued.cert, dir.join("node-7.crt"));
        assert_eq!(issued.key, dir.join("node-7.key"));
        for host in &hosts {
            verify_server(&issued.cert, &ca.cert, host)
                .unwrap_or_else(|error| panic!("serves as {host}: {error}"));
        }
        verify(&issued.cert, &ca.cert, KeyUsage::client_auth()).expect("calls peers");
        for stranger in ["node8.tickd.test", "127.0.0.2", "tickd.test"] {
            assert!(
                verify_server(&issued.cert, &ca.cert, stranger).is_err(),
                "must not serve as {stranger}"
            );
        }
        assert_eq!(subject_of(&issued.cert), ("tickd-node-7".to_owned(), false));
        assert_eq!(issued.common_name, "tickd-node-7");

        // Another cluster's CA does not vouch for it.
        let (_other_root, other) = with_ca();
        assert!(
            verify(
                &issued.cert,
                &other.join(CA_CERT_FILE),
                KeyUsage::client_auth()
            )
            .is_err()
        );
    }

    #[test]
    fn client_certificate_authenticates_and_never_serves() {
        let (_root, dir) = with_ca();
        let ca = CaFiles::in_dir(&dir);
        let issued = create_client(&dir, &ca, "ops.team-1_a", LEAF_DAYS).expect("create-client");
        assert_eq!(issued.cert, dir.join("client-ops.team-1_a.crt"));
        verify(&issued.cert, &ca.cert, KeyUsage::client_auth()).expect("a client");
        assert!(
            matches!(
                verify(&issued.cert, &ca.cert, KeyUsage::server_auth()),
                Err(webpki::Error::RequiredEkuNotFoundContext(_))
            ),
            "a client certificate must not serve"
        );
        assert_eq!(
            subject_of(&issued.cert),
            ("tickd-client-ops.team-1_a".to_owned(), false)
        );
    }

    #[test]
    fn ca_is_a_ca_that_signs_only_end_entities() {
        let (_root, dir) = with_ca();
        let der = der(&dir.join(CA_CERT_FILE));
        let (_, ca) = x509_parser::parse_x509_certificate(&der).expect("X.509");
        assert_eq!(
            subject_of(&dir.join(CA_CERT_FILE)),
            (CA_COMMON_NAME.to_owned(), true)
        );
        let constraints = ca
            .basic_constraints()
            .expect("parsed")
            .expect("present")
            .value;
        assert_eq!(constraints.path_len_constraint, Some(0));
        let usage = ca.key_usage().expect("parsed").expect("present").value;
        assert!(usage.key_cert_sign() && usage.crl_sign(), "{usage}");
        assert!(!usage.digital_signature(), "{usage}");
        let days = (ca.validity().not_after.to_datetime() - OffsetDateTime::now_utc()).whole_days();
        assert!((3649..=3650).contains(&days), "{days} days");
    }

    #[test]
    fn files_have_their_modes_and_are_never_overwritten() {
        let (_root, dir) = with_ca();
        assert_eq!(mode(&dir), 0o700, "a new directory is the owner's alone");
        assert_eq!(mode(&dir.join(CA_KEY_FILE)), 0o600);
        assert_eq!(mode(&dir.join(CA_CERT_FILE)), 0o644);
        let ca = CaFiles::in_dir(&dir);
        let node = create_node(&dir, &ca, 1, &["10.0.0.1".into()], 30).expect("create-node");
        let client = create_client(&dir, &ca, "ops", 30).expect("create-client");
        for issued in [&node, &client] {
            assert_eq!(mode(&issued.key), 0o600, "{}", issued.key.display());
            assert_eq!(mode(&issued.cert), 0o644, "{}", issued.cert.display());
        }

        let before: Vec<Vec<u8>> = listing(&dir)
            .iter()
            .map(|name| std::fs::read(dir.join(name)).expect("read"))
            .collect();
        let names = listing(&dir);
        let refused = [
            create_ca(&dir, CA_DAYS).map(drop),
            create_node(&dir, &ca, 1, &["10.0.0.9".into()], 30).map(drop),
            create_client(&dir, &ca, "ops", 30).map(drop),
        ];
        for (result, file) in refused
            .into_iter()
            .zip(["ca.key", "node-1.key", "client-ops.key"])
        {
            match result {
                Err(CertError::Exists { path }) => assert_eq!(path, dir.join(file)),
                other => panic!("{file}: expected a refusal, got {other:?}"),
            }
        }
        // A certificate alone in the way is refused too (the key would be orphaned).
        std::fs::write(dir.join("node-2.crt"), "mine").expect("write");
        assert!(matches!(
            create_node(&dir, &ca, 2, &["10.0.0.2".into()], 30),
            Err(CertError::Exists { path }) if path == dir.join("node-2.crt")
        ));
        std::fs::remove_file(dir.join("node-2.crt")).expect("remove");
        let after: Vec<Vec<u8>> = listing(&dir)
            .iter()
            .map(|name| std::fs::read(dir.join(name)).expect("read"))
            .collect();
        assert_eq!(
            listing(&dir),
            names,
            "no file added, no temporary file left"
        );
        assert!(before == after, "no file changed");
    }

    #[test]
    fn bad_input_is_refused_before_anything_is_written() {
        let (_root, dir) = with_ca();
        let ca = CaFiles::in_dir(&dir);
        let untouched = listing(&dir);
        let long_label = format!("{}.tickd.test", "a".repeat(64));
        let long_name = format!("{}.test", "a.".repeat(125));
        for host in [
            "*.tickd.test",
            "node*.tickd.test",
            "",
            "-node.tickd.test",
            "node-.tickd.test",
            "node..tickd.test",
            "node.tickd.test.",
            "node_1.tickd.test",
            "nöde.tickd.test",
            "node 1",
            "10.0.0.256",
            "1.2.3",
            "0.0.0.0",
            "::",
            "[::1]",
            "10.0.0.1:9743",
            long_label.as_str(),
            long_name.as_str(),
        ] {
            let result = create_node(&dir, &ca, 1, &["node1.tickd.test".into(), host.into()], 30);
            assert!(
                matches!(&result, Err(CertError::Host { host: refused, .. }) if refused == host),
                "--host {host:?}: {result:?}"
            );
        }
        assert!(matches!(
            create_node(&dir, &ca, 1, &[], 30),
            Err(CertError::NoHost)
        ));
        assert!(matches!(
            create_node(&dir, &ca, 0, &["10.0.0.1".into()], 30),
            Err(CertError::NodeId)
        ));
        for days in [0, MAX_DAYS + 1] {
            assert!(matches!(
                create_node(&dir, &ca, 1, &["10.0.0.1".into()], days),
                Err(CertError::Days { .. })
            ));
        }
        let too_long = "a".repeat(65);
        for name in [
            "",
            "a b",
            "ops/x",
            "../ops",
            "öps",
            "ops:1",
            too_long.as_str(),
        ] {
            let result = create_client(&dir, &ca, name, 30);
            assert!(
                matches!(&result, Err(CertError::Name { name: refused, .. }) if refused == name),
                "--name {name:?}: {result:?}"
            );
        }
        assert!(
            create_client(&dir, &ca, &"a".repeat(64), 30).is_ok(),
            "64 characters"
        );
        std::fs::remove_file(dir.join(format!("client-{}.crt", "a".repeat(64)))).expect("rm");
        std::fs::remove_file(dir.join(format!("client-{}.key", "a".repeat(64)))).expect("rm");
        assert_eq!(listing(&dir), untouched);
    }

    #[test]
    fn a_signer_that_is_missing_mismatched_or_no_ca_is_refused() {
        let (_root, dir) = with_ca();
        let (_other_root, other) = with_ca();
        let out = dir.join("out");
        let hosts = ["10.0.0.1".to_owned()];
        let node = |ca: &CaFiles| create_node(&out, ca, 1, &hosts, 30);

        let missing = CaFiles::in_dir(&dir.join("nowhere"));
        assert!(matches!(
            node(&missing),
            Err(CertError::Unreadable {
                what: "certificate",
                ..
            })
        ));
        let mismatched = CaFiles {
            cert: dir.join(CA_CERT_FILE),
            key: other.join(CA_KEY_FILE),
        };
        assert!(matches!(
            node(&mismatched),
            Err(CertError::KeyMismatch { .. })
        ));
        let swapped = CaFiles {
            cert: dir.join(CA_KEY_FILE),
            key: dir.join(CA_CERT_FILE),
        };
        assert!(matches!(node(&swapped), Err(CertError::InvalidCa { .. })));
        let leaf = create_node(&other, &CaFiles::in_dir(&other), 2, &hosts, 30).expect("leaf");
        let not_a_ca = CaFiles {
            cert: leaf.cert,
            key: leaf.key,
        };
        assert!(matches!(node(&not_a_ca), Err(CertError::InvalidCa { .. })));
        assert!(!out.exists(), "nothing written, not even the directory");
    }
}
