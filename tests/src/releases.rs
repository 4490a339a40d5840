//! Earlier releases of tickd, built from this repository's history, for the upgrade tests.
//!
//! A release is built from its commit's tree (`git archive`, no work tree of the repository is
//! touched) into `<target>/releases/<name>/`, beside the build under test, where it stays: the
//! next run finds it built. RocksDB is not compiled again: the release links the `librocksdb.a`
//! that the build under test compiled (`ROCKSDB_LIB_DIR`), which is the same RocksDB (both lock
//! files pin librocksdb-sys 0.19.0+11.8.1 with the same features). Only the release's Rust
//! crates are compiled, once, into a target directory of its own, so that its binary never
//! replaces the one under test in `<target>/debug/`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use crate::cluster::tickd_binary;

/// A published release of tickd.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    /// Its tag.
    pub name: &'static str,
    /// The commit the tag names.
    pub commit: &'static str,
    /// The version its nodes report (`version` on the status route), if they report one.
    pub reported_version: Option<&'static str>,
}

/// The first release, what users run before cluster levels existed: its nodes advertise no
/// version and no levels.
pub const V0_1_0: Release = Release {
    name: "v0.1.0",
    commit: "d8cc12c3a21ee08e1a2e166b0760d17fc51c5e33",
    reported_version: None,
};

/// The release before calendar schedules (cluster level 2), as it landed on main: its nodes
/// report version 0.2.0 and levels 1..=2.
pub const V0_2_0: Release = Release {
    name: "v0.2.0",
    commit: "54f31f7ff300061cd7fc642b8509995452897fe7",
    reported_version: Some("0.2.0"),
};

impl Release {
    /// The release's `tickd` binary, built if it is not built yet (the first time, a few
    /// minutes of compiling Rust crates).
    ///
    /// # Panics
    ///
    /// When the commit is not in this repository (a shallow clone), the build under test has
    /// no `librocksdb.a` to share, or the build fails; each message says what to do.
    pub fn binary(&self) -> PathBuf {
        // The tests of one binary run side by side: one of them extracts and builds, the
        // others wait and find it built.
        static BUILDING: Mutex<()> = Mutex::new(());
        let _building = BUILDING.lock().unwrap_or_else(PoisonError::into_inner);
        // `tickd_binary` may say `target/debug/deps/../tickd`.
        let under_test = fs::canonicalize(tickd_binary())
            .unwrap_or_else(|error| panic!("resolve the path of the binary under test: {error}"));
        let profile_dir = under_test
            .parent()
            .expect("the binary under test lives in a directory");
        let target = profile_dir
            .parent()
            .expect("the binary under test lives in target/<profile>/");
        let home = target.join("releases").join(self.name);
        let source = self.source(&home);
        let rocksdb = shared_rocksdb(profile_dir);
        let release_target = home.join("target");
        let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["build", "--locked", "--package", "tickd", "--bin", "tickd"])
            .current_dir(&source)
            .env("CARGO_TARGET_DIR", &release_target)
            .env("ROCKSDB_LIB_DIR", &rocksdb)
            .env("ROCKSDB_STATIC", "1")
            .stdin(Stdio::null())
            .status()
            .unwrap_or_else(|error| panic!("run cargo to build tickd {}: {error}", self.name));
        assert!(
            status.success(),
            "building tickd {} in {} failed ({status}); its output is above",
            self.name,
            source.display()
        );
        let binary = release_target.join("debug").join("tickd");
        assert!(
            binary.is_file(),
            "cargo built tickd {} but {} is missing",
            self.name,
            binary.display()
        );
        binary
    }

    /// The release's source tree under `home`, extracted from the repository once.
    fn source(&self, home: &Path) -> PathBuf {
        let source = home.join("src");
        let marker = source.join(".tickd-release-commit");
        if fs::read_to_string(&marker).is_ok_and(|commit| commit == self.commit) {
            return source;
        }
        let repository = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the tests crate lives in the repository");
        let known = Command::new("git")
            .args(["cat-file", "-e", &format!("{}^{{commit}}", self.commit)])
            .current_dir(repository)
            .status()
            .is_ok_and(|status| status.success());
        assert!(
            known,
            "commit {} (tickd {}) is not in the repository at {}: the upgrade tests build that \
             release from history, so clone with full history (not --depth)",
            self.commit,
            self.name,
            repository.display()
        );
        // Extract beside the final place and rename, so that an interrupted extraction is
        // never taken for a complete one.
        let partial = home.join("src.partial");
        let _ = fs::remove_dir_all(&partial);
        fs::create_dir_all(&partial)
            .unwrap_or_else(|error| panic!("create {}: {error}", partial.display()));
        let extract = format!(
            "git -C '{}' archive --format=tar {} | tar -x -C '{}'",
            repository.display(),
            self.commit,
            partial.display()
        );
        let status = Command::new("sh")
            .args(["-c", &extract])
            .status()
            .unwrap_or_else(|error| panic!("run `{extract}`: {error}"));
        assert!(status.success(), "`{extract}` failed ({status})");
        fs::write(partial.join(".tickd-release-commit"), self.commit)
            .unwrap_or_else(|error| panic!("write the release marker: {error}"));
        let _ = fs::remove_dir_all(&source);
        fs::rename(&partial, &source).unwrap_or_else(|error| {
            panic!(
                "move {} to {}: {error}",
                partial.display(),
                source.display()
            )
        });
        source
    }
}

/// The folder holding the `librocksdb.a` that the build under test compiled (the newest, if
/// cargo kept several).
fn shared_rocksdb(profile_dir: &Path) -> PathBuf {
    let build = profile_dir.join("build");
    let newest = fs::read_dir(&build)
        .unwrap_or_else(|error| panic!("read {}: {error}", build.display()))
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("librocksdb-sys-")
        })
        .map(|entry| entry.path().join("out"))
        .filter_map(|out| {
            let modified = fs::metadata(out.join("librocksdb.a"))
                .and_then(|meta| meta.modified())
                .ok()?;
            Some((modified, out))
        })
        .max_by_key(|(modified, _): &(SystemTime, PathBuf)| *modified);
    match newest {
        Some((_, out)) => out,
        None => panic!(
            "no librocksdb.a under {}: build the workspace first (`cargo test --workspace` does)",
            build.display()
        ),
    }
}
