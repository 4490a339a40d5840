//! Where the API token and the cluster secret come from (SPEC §4).
//!
//! The token: `ACCESS_TOKEN` wins, then `token` in the cluster file; with neither, a random
//! token is generated on first start and kept in the data directory, so it survives restarts
//! and an operator can read it there. Only the file's path is ever logged.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use rand::Rng;
use rand::distr::Alphanumeric;

/// Length of a generated token or secret: 32 alphanumeric characters, about 190 bits.
const GENERATED_LENGTH: usize = 32;

/// Where the token in force came from, for the start-up log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The `ACCESS_TOKEN` environment variable.
    Environment,
    /// The cluster file.
    ClusterFile,
    /// A file in the data directory (generated on first start).
    Stored(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Environment => f.write_str("the ACCESS_TOKEN environment variable"),
            Origin::ClusterFile => f.write_str("the cluster file"),
            Origin::Stored(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Picks the API token: `from_env`, else `configured`, else the one stored under `data_dir`.
pub fn access_token(
    from_env: Option<String>,
    configured: Option<String>,
    data_dir: &Path,
) -> std::io::Result<(String, Origin)> {
    if let Some(token) = from_env.filter(|token| !token.is_empty()) {
        return Ok((token, Origin::Environment));
    }
    if let Some(token) = configured {
        return Ok((token, Origin::ClusterFile));
    }
    let path = data_dir.join("access-token");
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
        let from_env = access_token(Some("env".into()), Some("file".into()), dir.path());
        assert_eq!(
            from_env.expect("a token"),
            ("env".into(), Origin::Environment)
        );
        let from_file = access_token(Some(String::new()), Some("file".into()), dir.path());
        assert_eq!(
            from_file.expect("a token"),
            ("file".into(), Origin::ClusterFile)
        );
    }

    #[test]
    fn a_generated_token_is_kept_across_restarts() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (first, origin) = access_token(None, None, dir.path()).expect("generated");
        assert_eq!(first.len(), GENERATED_LENGTH);
        assert!(matches!(origin, Origin::Stored(_)));
        let (second, _) = access_token(None, None, dir.path()).expect("read back");
        assert_eq!(first, second);
    }
}
