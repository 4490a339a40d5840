//! The admin CLI (`tickd cluster|clocks|backup|restore`), run as a process against real
//! clusters: every subcommand, its table and `--json` output, and its error paths; and
//! `tickd certs`, run as a process in a temporary directory.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tickd_tests::api::{clock_id, get_clock, pop, register};
use tickd_tests::cluster::{READY_TIMEOUT, THIS_LEVEL, tickd_binary};
use tickd_tests::{TestCluster, ports, unique_name};

/// What one run of the CLI printed.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts a zero exit and returns stdout.
    fn ok(self, what: &str) -> String {
        assert_eq!(
            self.code,
            Some(0),
            "{what}: exit {:?}\nstdout: {}\nstderr: {}",
            self.code,
            self.stdout,
            self.stderr
        );
        self.stdout
    }

    /// Asserts the exit code and that stderr says `says`.
    fn fails(self, what: &str, code: i32, says: &str) {
        assert_eq!(
            self.code,
            Some(code),
            "{what}: exit {:?}\nstdout: {}\nstderr: {}",
            self.code,
            self.stdout,
            self.stderr
        );
        assert!(
            self.stderr.contains(says),
            "{what}: stderr {:?} should say {says:?}",
            self.stderr
        );
    }

    fn json(self, what: &str) -> Value {
        let stdout = self.ok(what);
        serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("{what}: {error}: {stdout}"))
    }
}

/// Runs `tickd ARGS` against `api` with `token` as both the access and the operator token
/// (each command sends the one its role needs; blocking: the CLI is a short process, run on
/// the blocking pool so the runtime keeps serving).
async fn tickd(api: &str, token: Option<&str>, args: &[&str]) -> Run {
    let mut command = Command::new(tickd_binary());
    command
        .args(args)
        .env_remove("ACCESS_TOKEN")
        .env_remove("OPERATOR_TOKEN")
        .env("TICKD_API", api)
        .stdin(Stdio::null());
    if let Some(token) = token {
        command
            .env("ACCESS_TOKEN", token)
            .env("OPERATOR_TOKEN", token);
    }
    let output: Output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the CLI task")
        .expect("run the tickd CLI");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn path_arg(path: &Path) -> String {
    path.display().to_string()
}

#[tokio::test]
async fn every_admin_command_works_against_a_real_cluster_and_fails_clearly() {
    let cluster = TestCluster::builder().nodes(4).joining([4]).start().await;
    let api = cluster.api_url(2);
    let token = Some(cluster.token());
    let operator = Some(cluster.operator_token());

    // cluster status: a table, and JSON for scripts.
    let status = tickd(&api, token, &["cluster", "status"])
        .await
        .ok("status");
    assert!(status.starts_with("leader: "), "{status}");
    assert!(
        status.contains("ROLE") && status.contains("leader"),
        "{status}"
    );
    // Each node's release and levels, and the cluster's level (1, or this build's once the
    // leader has seen every voter's support).
    assert!(
        status.contains("cluster level: ")
            && status.contains("VERSION")
            && status.contains(env!("CARGO_PKG_VERSION"))
            && status.contains(&format!("1..={THIS_LEVEL}")),
        "{status}"
    );
    let view = tickd(&api, token, &["cluster", "status", "--json"])
        .await
        .json("status --json");
    assert_eq!(view["nodes"].as_array().map(Vec::len), Some(3), "{view}");

    // clocks list | get | pause | resume | tick.
    let name = unique_name("cli");
    let (code, _, created) = register(&cluster, 1, &name, "every.1.hours").await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    let id = clock_id(&created);
    let listed = tickd(&api, token, &["clocks", "list"]).await.ok("list");
    assert!(
        listed.starts_with("ID") && listed.contains(&id) && listed.contains(&name),
        "{listed}"
    );
    let listed = tickd(&api, token, &["clocks", "list", "--json"])
        .await
        .json("list --json");
    assert!(
        listed
            .as_array()
            .is_some_and(|clocks| clocks.iter().any(|c| c["id"] == id.as_str()))
    );
    let got = tickd(&api, token, &["clocks", "get", &id]).await.ok("get");
    assert!(
        got.contains(&format!("id: {id}")) && got.contains("status: ACTIVE"),
        "{got}"
    );
    // Each action is told apart by what it changes: `pause` and `resume` flip the status
    // they find, `tick` leaves it as it is and delivers one manual tick (popped from the
    // clock's http queue), so a CLI that sent the wrong action fails here.
    let pop_url = created["channel"]["details"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("an http channel: {created}"))
        .to_owned();
    for (verb, before, after) in [
        ("tick", "ACTIVE", "ACTIVE"),
        ("pause", "ACTIVE", "PAUSED"),
        ("tick", "PAUSED", "PAUSED"),
        ("resume", "PAUSED", "ACTIVE"),
    ] {
        let (_, _, found) = get_clock(&cluster, 1, &id).await;
        assert_eq!(found["status"], before, "before {verb}: {found}");
        let clock = tickd(&api, token, &["clocks", verb, &id, "--json"])
            .await
            .json(verb);
        assert_eq!(clock["status"], after, "{verb} from {before}: {clock}");
        let (_, _, found) = get_clock(&cluster, 3, &id).await;
        assert_eq!(found["status"], after, "after {verb}: {found}");
        // The hourly schedule puts no scheduled tick in the queue during the test (one that
        // falls on the hour is ignored), so every manual tick popped came from this action.
        let wait = (verb == "tick").then_some(Duration::from_secs(5));
        let (code, _, popped) = pop(&cluster, &pop_url, wait).await;
        assert_eq!(code, StatusCode::OK, "pop after {verb}: {popped}");
        let manual = popped
            .as_array()
            .into_iter()
            .flatten()
            .filter(|tick| tick["manual"] == true && tick["clock"] == id.as_str())
            .count();
        let expected = usize::from(verb == "tick");
        assert_eq!(
            manual, expected,
            "manual ticks delivered by {verb}: {popped}"
        );
    }

    // Error paths: an unknown clock, a wrong token, no token, an unreachable node.
    tickd(&api, token, &["clocks", "get", "no-such-clock"])
        .await
        .fails("unknown clock", 1, "there is no clock with id");
    tickd(&api, Some("wrong"), &["clocks", "list"]).await.fails(
        "wrong token",
        1,
        "the access token was refused",
    );
    tickd(&api, None, &["cluster", "status"])
        .await
        .fails("no token", 2, "no access token");
    let nowhere = format!("http://127.0.0.1:{}", ports::allocate(1)[0]);
    // --api wins over TICKD_API.
    tickd(&api, token, &["cluster", "status", "--api", &nowhere])
        .await
        .fails(
            "unreachable",
            1,
            &format!("cannot reach tickd at {nowhere}"),
        );

    // cluster add-node | remove-node, and their refusals.
    cluster.restart(4);
    cluster.wait_serving(4, READY_TIMEOUT).await;
    let (node_api, node_raft) = (
        cluster.api_addr(4).to_string(),
        cluster.raft_addr(4).to_string(),
    );
    tickd(&api, token, &["cluster", "remove-node", "4"])
        .await
        .fails(
            "remove with the access token",
            1,
            "the operator token was refused",
        );
    let added = tickd(
        &api,
        operator,
        &[
            "cluster",
            "add-node",
            "--id",
            "4",
            "--node-api",
            &node_api,
            "--node-raft",
            &node_raft,
        ],
    )
    .await
    .ok("add-node");
    assert!(added.contains("node 4 is a voter now"), "{added}");
    tickd(&api, operator, &["cluster", "remove-node", "9"])
        .await
        .fails("remove unknown", 1, "node 9 is not a member");
    let removed = tickd(&api, operator, &["cluster", "remove-node", "4", "--json"])
        .await
        .json("remove-node");
    let voters: Vec<u64> = removed["voters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|node| node["id"].as_u64())
        .collect();
    assert_eq!(voters, [1, 2, 3], "{removed}");
    cluster.kill(4);

    // backup, then restore: refused into this cluster, accepted into a fresh one.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("tickd.backup");
    let out = tickd(&api, operator, &["backup", "--out", &path_arg(&file)])
        .await
        .ok("backup");
    assert!(out.contains("backed up 1 clocks"), "{out}");
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).expect("the backup file"))
        .expect("the backup is JSON");
    assert_eq!(saved["format"], "tickd-backup");
    // It holds every http queue id (the capability to pop): nobody but its owner reads it.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&file)
            .expect("the backup file")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the backup's mode is {mode:o}");
    tickd(&api, operator, &["restore", "--in", &path_arg(&file)])
        .await
        .fails(
            "restore into a cluster with clocks",
            1,
            "already holds 1 clocks",
        );
    let bad = dir.path().join("not-a-backup.json");
    std::fs::write(&bad, "{\"clocks\": []}").expect("write a file");
    tickd(&api, operator, &["restore", "--in", &path_arg(&bad)])
        .await
        .fails("restore a non-backup", 1, "not a tickd backup");
    tickd(
        &api,
        operator,
        &["restore", "--in", &path_arg(&dir.path().join("missing"))],
    )
    .await
    .fails("restore a missing file", 1, "cannot read the backup");

    let fresh = TestCluster::start(1).await;
    let restored = tickd(
        &fresh.api_url(1),
        Some(fresh.operator_token()),
        &["restore", "--in", &path_arg(&file)],
    )
    .await
    .ok("restore");
    assert!(restored.contains("restored 1 clocks"), "{restored}");
    let got = tickd(
        &fresh.api_url(1),
        Some(fresh.token()),
        &["clocks", "get", &id, "--json"],
    )
    .await
    .json("get after restore");
    assert_eq!(got["status"], "ACTIVE", "{got}");
}

/// Every file in `dir` with its mode and contents, by name: what a refused command must leave
/// unchanged.
fn files_and_modes(dir: &Path) -> Vec<(String, u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut files: Vec<(String, u32, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read the certificates directory")
        .map(|entry| {
            let entry = entry.expect("a directory entry");
            let mode = entry.metadata().expect("metadata").permissions().mode() & 0o777;
            let contents = std::fs::read(entry.path()).expect("read a file");
            (entry.file_name().to_string_lossy().into(), mode, contents)
        })
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn certs_make_a_cluster_s_files_with_safe_modes_and_never_overwrite() {
    use std::os::unix::fs::PermissionsExt as _;
    let root = tempfile::tempdir().expect("a temporary directory");
    let dir = root.path().join("certs");
    let d = path_arg(&dir);
    // No node is involved: TICKD_API points nowhere.
    let nowhere = "http://127.0.0.1:9";

    let ca = tickd(nowhere, None, &["certs", "create-ca", "--dir", &d])
        .await
        .ok("create-ca");
    assert!(
        ca.contains(&path_arg(&dir.join("ca.key")))
            && ca.contains("CN=tickd cluster CA")
            && ca.contains("expires"),
        "{ca}"
    );
    let node = tickd(
        nowhere,
        None,
        &[
            "certs",
            "create-node",
            "--id",
            "1",
            "--host",
            "127.0.0.1",
            "--host",
            "node1.tickd.test",
            "--dir",
            &d,
        ],
    )
    .await
    .ok("create-node");
    assert!(
        node.contains("CN=tickd-node-1, IP:127.0.0.1, DNS:node1.tickd.test; expires"),
        "{node}"
    );
    let client = tickd(
        nowhere,
        None,
        &["certs", "create-client", "--name", "ops", "--dir", &d],
    )
    .await
    .ok("create-client");
    assert!(client.contains("CN=tickd-client-ops"), "{client}");

    let made = files_and_modes(&dir);
    let modes: Vec<(&str, u32)> = made
        .iter()
        .map(|(name, mode, _)| (name.as_str(), *mode))
        .collect();
    assert_eq!(
        modes,
        [
            ("ca.crt", 0o644),
            ("ca.key", 0o600),
            ("client-ops.crt", 0o644),
            ("client-ops.key", 0o600),
            ("node-1.crt", 0o644),
            ("node-1.key", 0o600),
        ]
    );
    let dir_mode = std::fs::metadata(&dir)
        .expect("the directory")
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);

    // Refusals exit 2, say why, and change nothing: not the CA, not a byte.
    tickd(nowhere, None, &["certs", "create-ca", "--dir", &d])
        .await
        .fails("a second create-ca", 2, "ca.key already exists");
    let other = path_arg(&root.path().join("other"));
    tickd(nowhere, None, &["certs", "create-ca", "--dir", &other])
        .await
        .ok("another CA");
    let other_key = format!("{other}/ca.key");
    let refused: [(&[&str], &str); 4] = [
        (
            &["create-node", "--id", "0", "--host", "127.0.0.1"],
            "--id 0 is no node id",
        ),
        (
            &["create-node", "--id", "2", "--host", "*.tickd.test"],
            "is a wildcard",
        ),
        (
            &[
                "create-node",
                "--id",
                "2",
                "--host",
                "127.0.0.2",
                "--ca-key",
                &other_key,
            ],
            "does not belong to the CA certificate",
        ),
        (&["create-client", "--name", "a/b"], "--name \"a/b\""),
    ];
    for (args, says) in refused {
        let mut command = vec!["certs"];
        command.extend_from_slice(args);
        command.extend_from_slice(&["--dir", &d]);
        tickd(nowhere, None, &command)
            .await
            .fails(&args.join(" "), 2, says);
    }
    assert!(
        files_and_modes(&dir) == made,
        "a refused command changed the directory"
    );
}
