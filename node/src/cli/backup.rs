//! `tickd backup` and `tickd restore`.
//!
//! The backup is checked (format and version) before it is written and before it is sent, so a
//! bad file is refused here with its path in the message. It is written to a new temporary
//! file of an unguessable name beside the target (created, never opened if something is
//! there), fsynced, then renamed: an interrupted backup never leaves a truncated file under the
//! name an operator will restore from, and nothing planted beside it is followed or reused.

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
    // A name nobody can guess, created only if nothing is there: a file or symlink planted
    // beside the target (in a shared directory) is never opened, followed or truncated.
    let temporary = path.with_file_name(format!(
        ".{file_name}.{:016x}.partial",
        rand::random::<u64>()
    ));
    // The backup holds every http queue id, the capability to pop its ticks: the owner's alone.
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&temporary)?;
    let written = file
        .write_all(&bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temporary, path));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error);
    }
    // The rename is durable only once the directory is.
    tickd_storage::sync_dir(path.parent().unwrap_or(Path::new("")))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// The hostile probe's N11: a symlink or a world-writable file planted under the
    /// temporary name an earlier release used (`.NAME.partial`) is neither followed nor kept.
    #[test]
    fn a_planted_partial_file_is_neither_followed_nor_reused() {
        let dir = tempfile::tempdir().expect("a directory");
        let target = dir.path().join("backup.json");
        let elsewhere = dir.path().join("victim");
        std::fs::write(&elsewhere, "precious").expect("the victim file");
        std::os::unix::fs::symlink(&elsewhere, dir.path().join(".backup.json.partial"))
            .expect("a planted symlink");
        write_atomically(&target, &json!({"format": "tickd-backup"})).expect("the backup");
        assert_eq!(
            std::fs::read_to_string(&elsewhere).expect("read"),
            "precious"
        );
        let mode = std::fs::metadata(&target)
            .expect("the backup")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");

        let planted = dir.path().join(".again.json.partial");
        std::fs::write(&planted, "").expect("a planted file");
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666))
            .expect("world-writable");
        let again = dir.path().join("again.json");
        write_atomically(&again, &json!({})).expect("the backup");
        let mode = std::fs::metadata(&again)
            .expect("the backup")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".partial") && name.matches('.').count() > 3)
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
