//! The external tools some tests drive (schemathesis, promtool, …), found or reported missing.
//!
//! `scripts/test` installs every tool the suite needs; a tool fetched from PyPI lives in the
//! project's own virtual environment under `$TICKD_TOOLS/venv` (by default
//! `~/.cache/tickd/tools`). A test whose tool is missing fails with a message that says so and
//! how to get it: it never passes by skipping, so a green suite has tested what it names.

use std::path::PathBuf;

/// The folder of the tools `scripts/test` installs.
fn tools_dir() -> PathBuf {
    match std::env::var_os("TICKD_TOOLS") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
            PathBuf::from(home).join(".cache/tickd/tools")
        }
    }
}

/// The folders under [`tools_dir`] that `scripts/prerequisites.sh` installs executables
/// into: the Python environments, then binaries fetched whole (helm).
const TOOL_FOLDERS: [&str; 3] = ["venv/bin", "k8s-venv/bin", "bin"];

/// The path of an executable: the project's own tool folders first, then `PATH`.
///
/// # Panics
///
/// When the tool is nowhere to be found, naming the command that installs it.
pub fn require(name: &str) -> PathBuf {
    let own = TOOL_FOLDERS
        .iter()
        .map(|folder| tools_dir().join(folder).join(name))
        .find(|candidate| candidate.is_file());
    if let Some(path) = own {
        return path;
    }
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file());
    match on_path {
        Some(path) => path,
        None => panic!(
            "`{name}` is not installed (looked in {} under {} and in PATH): run the suite with \
             `scripts/test`, which installs it",
            TOOL_FOLDERS.join(", "),
            tools_dir().display()
        ),
    }
}
