//! Start-up refusals of the `tickd` binary: a configuration that cannot run is a clear error
//! and a non-zero exit, before anything is opened or bound.
//!
//! These tests also make `cargo test --workspace` build the `tickd` binary that the black-box
//! suite in `tests/` runs.

use std::process::Command;

fn tickd() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tickd"));
    command.env_remove("ACCESS_TOKEN").env_remove("RABBIT_URI");
    command
}

/// Runs tickd with `args` in a fresh directory and returns (success, stderr).
fn run_in(dir: &std::path::Path, args: &[&str]) -> (bool, String) {
    let output = tickd()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tickd");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const VALID: &str = r#"
token = "t"
secret = "s"
[[node]]
id = 1
api = "127.0.0.1:1"
raft = "127.0.0.1:2"
data_dir = "n1"
"#;

#[test]
fn refuses_bad_cluster_files_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let cases = [
        ("missing.toml", None, "cannot read the cluster file"),
        (
            "malformed.toml",
            Some("token = [unclosed".to_string()),
            "malformed",
        ),
        (
            "duplicate.toml",
            Some(format!(
                "{VALID}\n[[node]]\nid = 1\napi = \"127.0.0.1:3\"\nraft = \"127.0.0.1:4\"\ndata_dir = \"n2\"\n"
            )),
            "node id 1 appears twice",
        ),
        (
            "address.toml",
            Some(format!(
                "{VALID}\n[[node]]\nid = 2\napi = \"127.0.0.1:1\"\nraft = \"127.0.0.1:4\"\ndata_dir = \"n2\"\n"
            )),
            "used twice",
        ),
    ];
    for (file, contents, expected) in cases {
        if let Some(contents) = contents {
            std::fs::write(dir.path().join(file), contents).expect("write the file");
        }
        let (ok, stderr) = run_in(dir.path(), &["--config", file, "--node", "1"]);
        assert!(!ok, "{file} must be refused");
        assert!(
            stderr.contains(expected),
            "{file}: {stderr:?} should say {expected:?}"
        );
        assert!(
            !dir.path().join("n1").exists(),
            "{file}: nothing may be created"
        );
    }
}

#[test]
fn refuses_an_unknown_node_naming_the_known_ones() {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("cluster.toml"), VALID).expect("write the file");
    let (ok, stderr) = run_in(dir.path(), &["--config", "cluster.toml", "--node", "4"]);
    assert!(!ok);
    assert!(
        stderr.contains("node 4 is not in") && stderr.contains("are 1"),
        "{stderr}"
    );
}

#[test]
fn config_and_node_go_together() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (ok, stderr) = run_in(dir.path(), &["--node", "1"]);
    assert!(!ok && stderr.contains("--config"), "{stderr}");
}
