//! Where the API tokens and the cluster secret come from (SPEC §4).
//!
//! Two tokens, by role. The access token is the one every Ticktok client holds: it may
//! register, list, act on clocks and read the cluster's status. The operator token may also
//! change the membership, take and restore backups and (by default) read the metrics. Each
//! comes from its environment variable (`ACCESS_TOKEN`, `OPERATOR_TOKEN`), else from the
//! cluster file (`token`, `operator_token`); a single node with neither generates a random
//! one on first start and keeps it in its data directory (`access-token`, `operator-token`),
//! so it survives restarts and an operator can read it there. Only the file's path is ever
//! logged.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use rand::Rng;
use rand::distr::Alphanumeric;

/// Length of a generated token or secret: 32 alphanumeric characters, about 190 bits.
const GENERATED_LENGTH: usize = 32;

/// Which of the two API tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The clients' token (Ticktok's `ACCESS_TOKEN`).
    Client,
    /// The operators' token: membership, backup, restore, metrics.
    Operator,
}

impl Role {
    /// The environment variable that sets this token.
    pub fn variable(self) -> &'static str {
        match self {
            Role::Client => "ACCESS_TOKEN",
            Role::Operator => "OPERATOR_TOKEN",
        }
    }

    /// The file in the data directory that keeps a generated token.
    fn file_name(self) -> &'static str {
        match self {
            Role::Client => "access-token",
            Role::Operator => "operator-token",
        }
    }
}

/// Where the token in force came from, for the start-up log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Its environment variable.
    Environment(&'static str),
    /// The cluster file.
    ClusterFile,
    /// A file in the data directory (generated on first start).
    Stored(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Environment(variable) => write!(f, "the {variable} environment variable"),
            Origin::ClusterFile => f.write_str("the cluster file"),
            Origin::Stored(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The token of `role` that every node of a cluster shares: `from_env`, else `configured`,
/// else none (a token generated here would differ from node to node).
pub fn shared_token(
    role: Role,
    from_env: Option<String>,
    configured: Option<String>,
) -> Option<(String, Origin)> {
    match from_env.filter(|token| !token.is_empty()) {
        Some(token) => Some((token, Origin::Environment(role.variable()))),
        None => configured.map(|token| (token, Origin::ClusterFile)),
    }
}

/// Picks the token of `role`: `from_env`, else `configured`, else the one stored under
/// `data_dir`.
pub fn token(
    role: Role,
    from_env: Option<String>,
    configured: Option<String>,
    data_dir: &Path,
) -> std::io::Result<(String, Origin)> {
    if let Some(shared) = shared_token(role, from_env, configured) {
        return Ok(shared);
    }
    let path = data_dir.join(role.file_name());
    Ok((stored_or_generated(&path)?, Origin::Stored(path)))
}

/// The cluster secret: the configured one, else one stored under `data_dir` (a single node
/// started without a cluster file has no peers to agree with).
pub fn cluster_secret(configured: Option<String>, data_dir: &Path) -> std::io::Result<String> {
    match configured {
        Some(secret) => Ok(secret),
        None => stored_or_generated(&data_dir.join("cluster-secret")),
    }
}

fn stored_or_generated(path: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => return Ok(text.trim_end_matches(['\r', '\n']).to_string()),
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        Err(_) => {}
    }
    let value: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(GENERATED_LENGTH)
        .map(char::from)
        .collect();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    writeln!(file, "{value}")?;
    file.sync_all()?;
    // The name too: a token lost with the power would be generated anew, and every client
    // holding the old one locked out.
    if let Some(dir) = path.parent() {
        tickd_storage::sync_dir(dir)?;
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_wins_then_file_then_stored() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let from_env = token(
            Role::Client,
            Some("env".into()),
            Some("file".into()),
            dir.path(),
        );
        assert_eq!(
            from_env.expect("a token"),
            ("env".into(), Origin::Environment("ACCESS_TOKEN"))
        );
        let from_file = token(
            Role::Client,
            Some(String::new()),
            Some("file".into()),
            dir.path(),
        );
        assert_eq!(
            from_file.expect("a token"),
            ("file".into(), Origin::ClusterFile)
        );
    }

    #[test]
    fn a_generated_token_is_kept_across_restarts_one_per_role() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (first, origin) = token(Role::Client, None, None, dir.path()).expect("generated");
        assert_eq!(first.len(), GENERATED_LENGTH);
        assert!(matches!(origin, Origin::Stored(_)));
        let (second, _) = token(Role::Client, None, None, dir.path()).expect("read back");
        assert_eq!(first, second);
        let (operator, origin) = token(Role::Operator, None, None, dir.path()).expect("generated");
        assert_ne!(operator, first, "the roles never share a token");
        assert_eq!(origin, Origin::Stored(dir.path().join("operator-token")));
    }
}
