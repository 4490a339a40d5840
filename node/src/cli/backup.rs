//! `tickd backup` and `tickd restore`.
//!
//! The backup is checked (format and version) before it is written and before it is sent, so a
//! bad file is refused here with its path in the message. It is written to a temporary file
//! beside the target, fsynced, then renamed: an interrupted backup never leaves a truncated
//! file under the name an operator will restore from.

use std::io::Write as _;
use std::path::Path;

use reqwest::Method;
use serde_json::{Value, json};
use tickd_api::backup::Backup;

use crate::cli::client::{AdminClient, CliError};
use crate::cli::{Output, field};

/// The backup route.
const BACKUP_PATH: &str = "/api/v1/backup";
/// The restore route.
const RESTORE_PATH: &str = "/api/v1/restore";

/// `tickd backup --out FILE`.
pub async fn backup(client: &AdminClient, out: &Path) -> Result<Output, CliError> {
    let document = client.get(BACKUP_PATH).await?;
    let checked = Backup::from_json(document.clone()).map_err(|error| CliError::Garbled {
        api: client.api().to_string(),
        reason: error.to_string(),
    })?;
    write_atomically(out, &document).map_err(|source| CliError::File {
        what: "cannot write the backup to",
        path: out.display().to_string(),
        source,
    })?;
    let text = format!(
        "backed up {} clocks (log index {}) to {}",
        checked.clocks(),
        field(&document, "last_applied"),
        out.display()
    );
    let json = json!({
        "file": out.display().to_string(),
        "clocks": checked.clocks(),
        "last_applied": checked.last_applied,
        "taken_at": checked.taken_at,
    });
    Ok(Output { json, text })
}

/// `tickd restore --in FILE`.
pub async fn restore(client: &AdminClient, input: &Path) -> Result<Output, CliError> {
    let path = input.display().to_string();
    let bytes = std::fs::read(input).map_err(|source| CliError::File {
        what: "cannot read the backup",
        path: path.clone(),
        source,
    })?;
    let invalid = |reason: String| CliError::Backup {
        path: path.clone(),
        reason,
    };
    let document: Value =
        serde_json::from_slice(&bytes).map_err(|error| invalid(format!("not JSON ({error})")))?;
    Backup::from_json(document.clone()).map_err(|error| invalid(error.to_string()))?;
    let answer = client
        .send(Method::POST, RESTORE_PATH, Some(&document))
        .await?;
    let text = format!("restored {} clocks from {path}", field(&answer, "restored"));
    Ok(Output { json: answer, text })
}

fn write_atomically(path: &Path, document: &Value) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(document).map_err(std::io::Error::other)?;
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .ok_or_else(|| std::io::Error::other("the path names no file"))?;
    let temporary = path.with_file_name(format!(".{file_name}.partial"));
    // The backup holds every http queue id, the capability to pop its ticks: the owner's alone.
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&temporary)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    // The rename is durable only once the directory is.
    tickd_storage::sync_dir(path.parent().unwrap_or(Path::new("")))
}
