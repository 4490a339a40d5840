//! A test cluster's certificates, made the way an operator makes them: with `tickd certs`.
//!
//! [`Pki::create`] runs `tickd certs create-ca` in a folder; [`Pki::node`] and
//! [`Pki::client`] run `create-node` and `create-client` against that CA. Going through the
//! binary keeps the tests honest about the subcommand: a TLS test cluster forms only if the
//! certificates it hands out are the ones nodes accept.
//!
//! [`Pki::client_config`] is the rustls configuration of a test's HTTPS client: the CA as the
//! only root, and optionally a certificate to present.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::NodeId;
use crate::cluster::tickd_binary;

/// A certificate file and the file of its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// The private key (PEM).
    pub key: PathBuf,
}

/// A cluster CA in a folder, and the certificates made with it.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// Makes a new CA in `dir` (created if missing) with `tickd certs create-ca`.
    ///
    /// # Panics
    ///
    /// When the command fails.
    pub fn create(dir: &Path) -> Pki {
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        pki.certs(&["create-ca"]);
        pki
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The folder of every file.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes node `id`'s certificate for `hosts` with `tickd certs create-node`.
    ///
    /// # Panics
    ///
    /// When the command fails (a certificate for `id` exists already, say).
    pub fn node(&self, id: NodeId, hosts: &[&str]) -> Identity {
        let id_arg = id.to_string();
        let mut args = vec!["create-node", "--id", &id_arg];
        for host in hosts {
            args.extend(["--host", host]);
        }
        self.certs(&args);
        Identity {
            cert: self.dir.join(format!("node-{id}.crt")),
            key: self.dir.join(format!("node-{id}.key")),
        }
    }

    /// Makes a client certificate named `name` with `tickd certs create-client`.
    ///
    /// # Panics
    ///
    /// When the command fails.
    pub fn client(&self, name: &str) -> Identity {
        self.certs(&["create-client", "--name", name]);
        Identity {
            cert: self.dir.join(format!("client-{name}.crt")),
            key: self.dir.join(format!("client-{name}.key")),
        }
    }

    /// A client configuration trusting only this CA, presenting `identity` if given.
    ///
    /// # Panics
    ///
    /// When a file cannot be read or rustls refuses it.
    pub fn client_config(&self, identity: Option<&Identity>) -> rustls::ClientConfig {
        client_config(&self.ca(), identity)
    }

    fn certs(&self, args: &[&str]) {
        let output = Command::new(tickd_binary())
            .arg("certs")
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .output()
            .unwrap_or_else(|error| panic!("run `tickd certs {}`: {error}", args.join(" ")));
        assert!(
            output.status.success(),
            "`tickd certs {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// A client configuration trusting only the CA in `ca`, presenting `identity` if given.
///
/// # Panics
///
/// When a file cannot be read or rustls refuses it.
pub fn client_config(ca: &Path, identity: Option<&Identity>) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for certificate in read_certificates(ca) {
        roots
            .add(certificate)
            .expect("the CA certificate as a root");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("rustls' default protocol versions")
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(identity) => {
            let key = PrivateKeyDer::from_pem_file(&identity.key)
                .unwrap_or_else(|error| panic!("read {}: {error}", identity.key.display()));
            builder
                .with_client_auth_cert(read_certificates(&identity.cert), key)
                .expect("a usable client certificate and key")
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

fn read_certificates(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .unwrap_or_else(|error| panic!("read the certificates of {}: {error}", path.display()))
}
