//! Writing a key and its certificate: never over an existing file, never visible half
//! written, a key never readable by anyone but its owner.
//!
//! Each file is written to a temporary file beside it, created with its final mode (0600 for
//! a key, so there is no moment at which another user could open it), fsynced, and renamed
//! into place with `RENAME_NOREPLACE`, which fails instead of replacing a file that appeared
//! since the check; then the directory is fsynced so the name survives a power loss.

use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, RenameFlags};

use crate::certs::CertError;

/// A private key's mode: the owner's alone.
const KEY_MODE: u32 = 0o600;

/// A certificate's mode: public, as certificates are.
const CERT_MODE: u32 = 0o644;

/// The mode of a certificates directory the command creates: it holds the CA key.
const DIR_MODE: u32 = 0o700;

/// The two files a command writes.
pub(super) struct Pair {
    /// `DIR/<stem>.key`.
    pub key: PathBuf,
    /// `DIR/<stem>.crt`.
    pub cert: PathBuf,
}

impl Pair {
    /// The key and certificate files named `stem` in `dir`.
    pub fn new(dir: &Path, stem: &str) -> Self {
        Pair {
            key: dir.join(format!("{stem}.key")),
            cert: dir.join(format!("{stem}.crt")),
        }
    }

    /// Refuses if either file exists (a dangling link counts), before anything is made.
    pub fn refuse_existing(&self) -> Result<(), CertError> {
        for path in [&self.key, &self.cert] {
            match fs::symlink_metadata(path) {
                Ok(_) => return Err(CertError::Exists { path: path.clone() }),
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(CertError::Write {
                        path: path.clone(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes the key, then the certificate, creating the directory (0700) if it is missing.
    /// If the certificate cannot be written, the key is removed again: a key without its
    /// certificate is useless and would block the next attempt.
    pub fn write(&self, key_pem: &str, cert_pem: &str) -> Result<(), CertError> {
        let dir = parent(&self.key);
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(|source| CertError::Write {
                path: dir.to_owned(),
                source,
            })?;
        write_new(&self.key, key_pem.as_bytes(), KEY_MODE)?;
        write_new(&self.cert, cert_pem.as_bytes(), CERT_MODE).inspect_err(|_| {
            // Best effort: the error that matters is the certificate's, returned below.
            let _ = fs::remove_file(&self.key);
        })
    }
}

/// The directory a file of the pair is in (`.` for a bare file name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Writes `contents` to the new file `path` with `mode`, atomically; refuses if `path`
/// exists.
fn write_new(path: &Path, contents: &[u8], mode: u32) -> Result<(), CertError> {
    let dir = parent(path);
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{file_name}.{:016x}.tmp", rand::random::<u64>()));
    let written = (|| -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temporary)?;
        // The umask may have taken bits away (a certificate 0600 under umask 077); set the
        // mode exactly. It never adds a bit beyond `mode`, so a key stays 0600 throughout.
        file.set_permissions(Permissions::from_mode(mode))?;
        file.write_all(contents)?;
        file.sync_all()?;
        rustix::fs::renameat_with(CWD, &temporary, CWD, path, RenameFlags::NOREPLACE)?;
        Ok(())
    })();
    if let Err(source) = written {
        // Best effort: the temporary file is ours, and the error that matters is `source`.
        let _ = fs::remove_file(&temporary);
        return Err(if source.kind() == io::ErrorKind::AlreadyExists {
            CertError::Exists {
                path: path.to_owned(),
            }
        } else {
            CertError::Write {
                path: path.to_owned(),
                source,
            }
        });
    }
    tickd_storage::sync_dir(dir).map_err(|source| CertError::Write {
        path: dir.to_owned(),
        source,
    })
}
