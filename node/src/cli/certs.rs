//! `tickd certs …`: the command line of [`crate::certs`], and what it tells the operator.
//!
//! Unlike the other admin commands it talks to no node: it makes files on this machine.
//! What it prints says where each file must go, since that is the step operators get wrong.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::certs::{self, CaFiles, CertError, Issued};

/// Where the files go when `--dir` is not given: a directory of their own, made 0700.
const DEFAULT_DIR: &str = "certs";

/// `tickd certs …`.
#[derive(Debug, Subcommand)]
#[expect(
    clippy::enum_variant_names,
    reason = "clap derives the subcommands people type from these names: create-ca, create-node"
)]
pub enum CertsCommand {
    /// Make the cluster's CA: DIR/ca.crt (copy it to every machine) and DIR/ca.key (keep it
    /// off the nodes, and safe: whoever holds it can make members).
    CreateCa {
        /// The directory to write to (created 0700 if missing).
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        /// How many days the CA is valid.
        #[arg(long, default_value_t = certs::CA_DAYS)]
        days: u32,
    },
    /// Make node N's certificate and key, DIR/node-N.crt and DIR/node-N.key, signed by the
    /// CA: it serves the node's API and Raft listeners and authenticates it to its peers.
    CreateNode {
        /// The node's id, as in the cluster file.
        #[arg(long)]
        id: u64,
        /// A DNS name or IP address the node is reached by; repeat it for each one (the
        /// `raft`, `api` and `public_url` hosts of the cluster file).
        #[arg(long = "host", value_name = "NAME|IP", required = true)]
        hosts: Vec<String>,
        /// The directory and the CA.
        #[command(flatten)]
        signer: Signer,
        /// How many days the certificate is valid.
        #[arg(long, default_value_t = certs::LEAF_DAYS)]
        days: u32,
    },
    /// Make a client certificate and key, DIR/client-NAME.crt and .key, signed by the CA:
    /// it authenticates an operator or a program, and cannot serve.
    CreateClient {
        /// Who holds it: 1 to 64 characters of A-Z a-z 0-9 . _ -
        #[arg(long)]
        name: String,
        /// The directory and the CA.
        #[command(flatten)]
        signer: Signer,
        /// How many days the certificate is valid.
        #[arg(long, default_value_t = certs::LEAF_DAYS)]
        days: u32,
    },
}

/// Where a signed certificate goes and which CA signs it.
#[derive(Debug, Args)]
pub struct Signer {
    /// The directory to write to (created 0700 if missing); the CA is read from it too
    /// unless --ca-cert and --ca-key say otherwise.
    #[arg(long, default_value = DEFAULT_DIR)]
    dir: PathBuf,
    /// The CA certificate [default: DIR/ca.crt].
    #[arg(long, value_name = "FILE")]
    ca_cert: Option<PathBuf>,
    /// The CA's private key [default: DIR/ca.key].
    #[arg(long, value_name = "FILE")]
    ca_key: Option<PathBuf>,
}

impl Signer {
    fn ca(&self) -> CaFiles {
        let in_dir = CaFiles::in_dir(&self.dir);
        CaFiles {
            cert: self.ca_cert.clone().unwrap_or(in_dir.cert),
            key: self.ca_key.clone().unwrap_or(in_dir.key),
        }
    }
}

/// Runs a `tickd certs` command; prints what it wrote or why it wrote nothing.
pub fn run(command: CertsCommand) -> ExitCode {
    match execute(command) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("tickd: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

fn execute(command: CertsCommand) -> Result<String, CertError> {
    match command {
        CertsCommand::CreateCa { dir, days } => {
            let issued = certs::create_ca(&dir, days)?;
            Ok(summary(
                &issued,
                "keep it on this machine, never on a node",
                "copy it to every machine, and name it in the cluster file as ca_file",
            ))
        }
        CertsCommand::CreateNode {
            id,
            hosts,
            signer,
            days,
        } => {
            let issued = certs::create_node(&signer.dir, &signer.ca(), id, &hosts, days)?;
            Ok(summary(
                &issued,
                &format!("copy it to node {id}'s machine only (its key_file)"),
                &format!("copy it to node {id}'s machine (its cert_file)"),
            ))
        }
        CertsCommand::CreateClient { name, signer, days } => {
            let issued = certs::create_client(&signer.dir, &signer.ca(), &name, days)?;
            Ok(summary(
                &issued,
                &format!("give it to {name} only"),
                "client authentication only",
            ))
        }
    }
}

/// Two lines, one per file, with where each goes; and a warning when the CA expires first.
fn summary(issued: &Issued, key_goes: &str, cert_goes: &str) -> String {
    let mut subject = format!("CN={}", issued.common_name);
    for host in &issued.hosts {
        subject.push_str(&format!(", {host}"));
    }
    let mut text = format!(
        "wrote {} (private, mode 0600): {key_goes}\nwrote {} ({subject}; expires {}): \
         {cert_goes}",
        issued.key.display(),
        issued.cert.display(),
        certs::utc(issued.not_after),
    );
    if let Some(ca_expiry) = issued.ca_expires_first {
        text.push_str(&format!(
            "\nnote: the CA expires first, on {}; from then on this certificate verifies \
             nowhere",
            certs::utc(ca_expiry)
        ));
    }
    text
}
