//! The admin commands of `tickd`: `cluster`, `clocks`, `backup` and `restore`.
//!
//! Each talks to one node's REST API over HTTP, like `etcdctl` or `consul members`: any node
//! will do, since every node forwards writes to the leader and serves linearizable reads. The
//! output is a table for people, or with `--json` the API's own JSON for scripts. Failures
//! exit non-zero with one line on stderr that says what to check: the address for an
//! unreachable node, the token for a 403, the API's message for anything else.
//!
//! `certs` is the exception: it talks to no node but makes the cluster's TLS files on this
//! machine ([`crate::certs`]).
//!
//! One module per group of commands; [`client`] is the only one that speaks HTTP.

mod backup;
mod certs;
mod client;
mod clocks;
mod cluster;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::cli::client::{AdminClient, CliError, Credential};
use crate::cli::clocks::Action;

/// The API address the commands use when neither `--api` nor `TICKD_API` is given: the
/// single-node default.
const DEFAULT_API: &str = "http://127.0.0.1:9643";

/// A subcommand of `tickd`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// An admin command of a running cluster.
    #[command(flatten)]
    Admin(AdminCommand),
    /// Make the cluster's TLS files: a CA, one certificate per node, client certificates.
    Certs {
        /// What to make.
        #[command(subcommand)]
        command: certs::CertsCommand,
    },
}

/// An admin command.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Show or change the cluster's membership.
    Cluster {
        /// Which node to ask, and how.
        #[command(flatten)]
        target: Target,
        /// What to do.
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// List, read, pause, resume or tick clocks.
    Clocks {
        /// Which node to ask, and how.
        #[command(flatten)]
        target: Target,
        /// What to do.
        #[command(subcommand)]
        command: ClocksCommand,
    },
    /// Write a consistent copy of the cluster's clocks and undelivered ticks to a file.
    Backup {
        /// Which node to ask, and how.
        #[command(flatten)]
        target: Target,
        /// The file to write (replaced atomically).
        #[arg(long)]
        out: PathBuf,
    },
    /// Seed a freshly formed cluster, which must hold no clock, from a backup file.
    Restore {
        /// Which node to ask, and how.
        #[command(flatten)]
        target: Target,
        /// The backup file written by `tickd backup`.
        #[arg(long = "in", value_name = "FILE")]
        input: PathBuf,
    },
}

/// `tickd cluster …`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// The leader, the term, and every member's role and progress.
    Status,
    /// Add a running node (started with `join = true` in its cluster file) as a voter. It
    /// catches up as a learner first.
    ///
    /// The new node's addresses are `--node-api` and `--node-raft`, because `--api` names the
    /// node this command talks to, as in every other command.
    AddNode {
        /// The new node's id.
        #[arg(long)]
        id: u64,
        /// The new node's API address, ip:port.
        #[arg(long, value_name = "IP:PORT")]
        node_api: String,
        /// The new node's Raft address, ip:port.
        #[arg(long, value_name = "IP:PORT")]
        node_raft: String,
    },
    /// Take a member out of the cluster (the leader too: it steps down).
    RemoveNode {
        /// The member's id.
        id: u64,
    },
}

/// `tickd clocks …`.
#[derive(Debug, Subcommand)]
pub enum ClocksCommand {
    /// Every clock.
    List,
    /// One clock.
    Get {
        /// The clock's id.
        id: String,
    },
    /// Stop a clock's scheduled ticks.
    Pause {
        /// The clock's id.
        id: String,
    },
    /// Restart a paused clock's scheduled ticks.
    Resume {
        /// The clock's id.
        id: String,
    },
    /// Deliver one tick to a clock now.
    Tick {
        /// The clock's id.
        id: String,
    },
}

/// The node to talk to and how to print: accepted before or after the subcommand.
#[derive(Debug, Args)]
pub struct Target {
    /// The API of any node of the cluster.
    #[arg(long, global = true, env = "TICKD_API", default_value = DEFAULT_API)]
    api: String,
    /// The cluster's access token, for the clock commands and `cluster status`.
    #[arg(long, global = true, env = "ACCESS_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The cluster's operator token, for membership changes, backup and restore.
    #[arg(long, global = true, env = "OPERATOR_TOKEN", hide_env_values = true)]
    operator_token: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// The CA certificate (PEM) that signed the node's certificate, for a node with TLS: the
    /// only authority trusted, and `--api` defaults to `https://` with it.
    #[arg(long, global = true, env = "TICKD_CA_FILE", value_name = "PEM")]
    ca_file: Option<PathBuf>,
    /// A client certificate (PEM) for a node that requires one (`api_require_client_cert`);
    /// `tickd certs create-client` makes it. Needs --ca-file and --client-key.
    #[arg(long, global = true, env = "TICKD_CLIENT_CERT", value_name = "PEM",
          requires_all = ["client_key", "ca_file"])]
    client_cert: Option<PathBuf>,
    /// The key of --client-cert (PEM).
    #[arg(
        long,
        global = true,
        env = "TICKD_CLIENT_KEY",
        value_name = "PEM",
        requires = "client_cert"
    )]
    client_key: Option<PathBuf>,
}

/// What a command prints: the JSON for `--json`, the text otherwise.
pub struct Output {
    json: Value,
    text: String,
}

/// Runs a subcommand; prints its output or its error and returns the exit code.
pub fn run(command: Command) -> ExitCode {
    match command {
        Command::Admin(command) => run_admin(command),
        Command::Certs { command } => certs::run(command),
    }
}

/// Runs an admin command against the node `--api` names.
fn run_admin(command: AdminCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tickd: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let json = target_of(&command).json;
    match runtime.block_on(execute(command)) {
        Ok(output) => {
            if json {
                let pretty = serde_json::to_string_pretty(&output.json)
                    .unwrap_or_else(|_| output.json.to_string());
                println!("{pretty}");
            } else {
                println!("{}", output.text);
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("tickd: {error}");
            match error {
                CliError::Usage(_) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn target_of(command: &AdminCommand) -> &Target {
    match command {
        AdminCommand::Cluster { target, .. }
        | AdminCommand::Clocks { target, .. }
        | AdminCommand::Backup { target, .. }
        | AdminCommand::Restore { target, .. } => target,
    }
}

/// Whether a command needs the operator token rather than the access token.
fn needs_operator(command: &AdminCommand) -> bool {
    match command {
        AdminCommand::Cluster { command, .. } => !matches!(command, ClusterCommand::Status),
        AdminCommand::Clocks { .. } => false,
        AdminCommand::Backup { .. } | AdminCommand::Restore { .. } => true,
    }
}

async fn execute(command: AdminCommand) -> Result<Output, CliError> {
    let target = target_of(&command);
    let (credential, token) = if needs_operator(&command) {
        (Credential::Operator, target.operator_token.clone())
    } else {
        (Credential::Client, target.token.clone())
    };
    let tls = match &target.ca_file {
        Some(ca) => Some(
            crate::tls::client_config_from_files(
                ca,
                target
                    .client_cert
                    .as_deref()
                    .zip(target.client_key.as_deref()),
            )
            .map_err(|error| CliError::Usage(error.to_string()))?,
        ),
        None => None,
    };
    let client = AdminClient::new(&target.api, credential, token, tls)?;
    match command {
        AdminCommand::Cluster { command, .. } => match command {
            ClusterCommand::Status => cluster::status(&client).await,
            ClusterCommand::AddNode {
                id,
                node_api,
                node_raft,
            } => cluster::add_node(&client, id, &node_api, &node_raft).await,
            ClusterCommand::RemoveNode { id } => cluster::remove_node(&client, id).await,
        },
        AdminCommand::Clocks { command, .. } => match command {
            ClocksCommand::List => clocks::list(&client).await,
            ClocksCommand::Get { id } => clocks::get(&client, &id).await,
            ClocksCommand::Pause { id } => clocks::act(&client, &id, Action::Pause).await,
            ClocksCommand::Resume { id } => clocks::act(&client, &id, Action::Resume).await,
            ClocksCommand::Tick { id } => clocks::act(&client, &id, Action::Tick).await,
        },
        AdminCommand::Backup { out, .. } => backup::backup(&client, &out).await,
        AdminCommand::Restore { input, .. } => backup::restore(&client, &input).await,
    }
}

/// A field of a JSON object as a table cell: strings bare, absent or null as `-`.
fn field(value: &Value, key: &str) -> String {
    match value.get(key) {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}
