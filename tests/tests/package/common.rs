//! What both package tests use: the one build of the .deb per test run, the unit's
//! `[Service]` section read the way systemd reads it, a node process started from the
//! package, the wait for its health, a registration with its generated token, and small
//! helpers for files and commands.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tickd_tests::api::{CLOCKS_PATH, HEALTH_PATH, try_send};
use tickd_tests::cluster::{POLL_INTERVAL, READY_TIMEOUT, TERMINATE_TIMEOUT};
use tickd_tests::unique_name;
use tickd_tests::wait::{eventually, poll_until};
use tokio::sync::OnceCell;

/// How long `scripts/package --debug` may take: it compiles nothing, but strips and
/// compresses a debug binary of several hundred megabytes.
const PACKAGE_TIMEOUT: Duration = Duration::from_secs(300);

/// What to do about a missing tool of the package build.
const INSTALL_HINT: &str = "scripts/test installs it (`cargo install --locked cargo-deb`, the \
                            version pinned in scripts/prerequisites.sh; dpkg-deb and dpkg come \
                            with Debian's dpkg package)";

/// Where the package puts what the tests look at, as absolute paths on the installed system.
pub const BINARY: &str = "/usr/bin/tickd";
pub const CLUSTER_FILE: &str = "/etc/tickd/cluster.toml";
pub const DEFAULTS_FILE: &str = "/etc/default/tickd";
pub const UNIT_NAME: &str = "tickd.service";

/// Where a package may install a systemd unit: cargo-deb has used both.
pub const UNIT_DIRS: [&str; 2] = ["/usr/lib/systemd/system", "/lib/systemd/system"];

/// The request timeout of the tests' HTTP client.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The .deb of this test run, built once: cargo-deb strips into a directory of its own under
/// the target directory, so two builds at once would overwrite each other's files.
static PACKAGE: OnceCell<PathBuf> = OnceCell::const_new();

/// Fails, naming `hint`, unless `program` with `probe` runs and succeeds.
pub fn require(tool: &str, program: &str, probe: &[&str], hint: &str) {
    let found = Command::new(program)
        .args(probe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(found, "{tool} is not installed; {hint}");
}

/// Fails, naming what to do, when a tool of the package build is missing.
pub fn require_tools() {
    for (tool, program, probe) in [
        ("cargo-deb", "cargo", ["deb", "--version"].as_slice()),
        ("dpkg-deb", "dpkg-deb", ["--version"].as_slice()),
        ("dpkg", "dpkg", ["--version"].as_slice()),
        ("readelf", "readelf", ["--version"].as_slice()),
    ] {
        require(tool, program, probe, INSTALL_HINT);
    }
}

/// The .deb `scripts/package --debug` builds from the debug binary, built by the first test
/// that asks (into `<target>/debian/package-test`, replaced by every run) and shared.
pub async fn package() -> &'static Path {
    PACKAGE
        .get_or_init(|| build_package(target_dir().join("debian").join("package-test")))
        .await
}

/// Runs `scripts/package --debug` (bounded) and returns the path of the .deb it reports.
async fn build_package(output_dir: PathBuf) -> PathBuf {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the repository")
        .to_path_buf();
    let mut command = tokio::process::Command::new(repository.join("scripts/package"));
    command
        .arg("--debug")
        .arg("--output")
        .arg(&output_dir)
        .env("CARGO_TARGET_DIR", target_dir())
        .current_dir(&repository);
    let output = run_bounded(command, PACKAGE_TIMEOUT, "scripts/package --debug").await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scripts/package --debug failed with {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let deb = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        deb.is_file() && deb.starts_with(&output_dir),
        "scripts/package should print the .deb's path last, in {}; it printed:\n{stdout}",
        output_dir.display()
    );
    deb
}

/// Runs `command` to completion within `timeout` and returns its output. It runs in a
/// process group of its own, all of which is killed when the time runs out (scripts/package
/// runs cargo-deb, mmdebstrap runs apt).
pub async fn run_bounded(
    mut command: tokio::process::Command,
    timeout: Duration,
    what: &str,
) -> Output {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = command
        .spawn()
        .unwrap_or_else(|error| panic!("start {what}: {error}"));
    let group = child.id();
    let Ok(outcome) = tokio::time::timeout(timeout, child.wait_with_output()).await else {
        if let Some(group) = group {
            kill_group(group);
        }
        panic!("{what} did not finish within {timeout:?}");
    };
    outcome.unwrap_or_else(|error| panic!("wait for {what}: {error}"))
}

/// Sends SIGKILL to every process of process group `group`, with bash's own `kill`.
///
/// Not with the `kill` program: procps-ng 4.0.2's (Debian 12) misreads a negative process id
/// of more than one digit (`kill -KILL -152` is `kill(-1, SIGKILL)`, which kills every
/// process on the machine; `--` before it helps only sometimes).
pub fn kill_group(group: u32) {
    let _ = Command::new("bash")
        .args(["-c", r#"kill -s KILL -- "-$1""#, "bash"])
        .arg(group.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The debug binary that `scripts/package --debug` packages: `tickd` in the target directory
/// this test executable was built in (`<target>/debug/deps/package-…`).
pub fn debug_binary() -> PathBuf {
    let binary = target_dir().join("debug").join("tickd");
    assert!(
        binary.is_file(),
        "no debug tickd at {}; build it with `cargo build --bin tickd` or `cargo test --workspace`",
        binary.display()
    );
    binary
}

/// The Cargo target directory this test executable lives in.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running test executable");
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .expect("the test executable lives in <target>/debug/deps")
}

/// The secret the postinst wrote into `generated`, a copy of the `shipped` cluster file in
/// which it may change the placeholder's line and nothing else.
pub fn generated_secret(shipped: &str, generated: &str) -> String {
    let changed: Vec<(&str, &str)> = shipped
        .lines()
        .zip(generated.lines())
        .filter(|(before, after)| before != after)
        .collect();
    assert_eq!(
        shipped.lines().count(),
        generated.lines().count(),
        "the postinst should change the secret's line only:\n{generated}"
    );
    let secret = match changed.as_slice() {
        [(_, line)] => line
            .strip_prefix("secret = \"")
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap_or_else(|| panic!("the postinst changed a line other than the secret: {line}")),
        other => panic!("the postinst should change exactly the secret line, it changed {other:?}"),
    };
    assert!(
        secret.len() == 32 && secret.chars().all(|c| c.is_ascii_alphanumeric()),
        "a generated secret is 32 letters and digits: {secret:?}"
    );
    secret.to_owned()
}

/// The access token the node generated into `token_file` (its data directory's
/// `access-token`, as this test sees it), checked against the node's log: the log names the
/// file as `logged_path` (the path the node itself knows) and never shows the token.
pub fn generated_token(token_file: &Path, logged_path: &str, log_path: &Path) -> String {
    let token = read(token_file).trim_end().to_owned();
    assert_eq!(
        token.len(),
        32,
        "a generated token in {}",
        token_file.display()
    );
    let log = read(log_path);
    assert!(
        log.contains(logged_path),
        "the log should say where the token is ({logged_path}):\n{log}"
    );
    assert!(!log.contains(&token), "the log must never show the token");
    token
}

/// The tests' HTTP client.
pub fn client() -> reqwest::Client {
    tickd_tests::http::client_builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("an HTTP client")
}

/// Waits (bounded) until the node answers `GET /mgmt/health` with 200 `{"status":"UP"}`.
pub async fn wait_until_up(
    client: &reqwest::Client,
    base: &str,
    node: &mut Node,
    argv: &[String],
    log_path: &Path,
) {
    let health = format!("{base}{HEALTH_PATH}");
    // A node that exited ends the wait at once (`Ok(Err(..))`); one that is still starting
    // is asked again (`Err(..)`).
    let answered = poll_until(READY_TIMEOUT, POLL_INTERVAL, || {
        let exited = node.exited();
        let request = client.get(&health);
        async move {
            if let Some(status) = exited {
                return Ok(Err(format!("tickd exited with {status}")));
            }
            match try_send(request).await {
                Ok((StatusCode::OK, _, body)) if body == json!({ "status": "UP" }) => Ok(Ok(())),
                Ok((status, _, body)) => Err(format!("{status} {body}")),
                Err(error) => Err(error.to_string()),
            }
        }
    })
    .await;
    if let Ok(Err(last)) | Err(last) = answered {
        panic!(
            "the packaged tickd did not answer {health} with 200 {{\"status\":\"UP\"}} within \
             {READY_TIMEOUT:?}; last: {last}\ncommand: {argv:?}\nlog:\n{}",
            read(log_path)
        );
    }
}

/// Registers a clock with the generated token (201), and is refused with another (403).
pub async fn register_a_clock(client: &reqwest::Client, base: &str, token: &str) {
    let clocks = format!("{base}{CLOCKS_PATH}");
    let name = unique_name("packaged");
    let body = json!({ "name": name, "schedule": "every.5.seconds" });
    let registered = eventually(
        "a registration through the packaged node",
        READY_TIMEOUT,
        POLL_INTERVAL,
        || {
            let request = client.post(&clocks).bearer_auth(token).json(&body);
            async move {
                match try_send(request).await {
                    Ok((StatusCode::CREATED, _, body)) => Ok(body),
                    Ok((status, _, body)) => Err(format!("{status} {body}")),
                    Err(error) => Err(error.to_string()),
                }
            }
        },
    )
    .await;
    assert_eq!(registered["name"], Value::String(name), "{registered}");
    let refused = try_send(
        client
            .post(&clocks)
            .bearer_auth("not-the-token")
            .json(&body),
    )
    .await
    .expect("an answer to a wrong token");
    assert_eq!(refused.0, StatusCode::FORBIDDEN, "{:?}", refused.2);
}

/// The `[Service]` section of a systemd unit: its assignments, in order.
pub struct UnitService {
    assignments: Vec<(String, String)>,
}

impl UnitService {
    pub fn parse(unit: &str) -> Self {
        let mut section = "";
        let mut assignments = Vec::new();
        for line in unit.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if line.starts_with('[') {
                section = line;
                continue;
            }
            assert!(
                !line.ends_with('\\'),
                "a continued unit line is not supported here: {line}"
            );
            if section == "[Service]" {
                let (key, value) = line
                    .split_once('=')
                    .unwrap_or_else(|| panic!("a unit line that is no assignment: {line}"));
                assignments.push((key.trim().to_owned(), value.trim().to_owned()));
            }
        }
        UnitService { assignments }
    }

    /// The value of the last assignment to `key` (systemd's rule for single-valued keys).
    pub fn last(&self, key: &str) -> Option<&str> {
        self.assignments
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    /// The service's environment as systemd builds it: `Environment=` assignments, then the
    /// `EnvironmentFile=` files (read from `root`; a leading `-` makes a file optional),
    /// later ones winning.
    pub fn environment(&self, root: &Path) -> BTreeMap<String, String> {
        let mut environment = BTreeMap::new();
        for (key, value) in &self.assignments {
            match key.as_str() {
                "Environment" => {
                    for word in value.split_whitespace() {
                        let (name, value) = word
                            .trim_matches('"')
                            .split_once('=')
                            .unwrap_or_else(|| panic!("Environment= word without '=': {word}"));
                        environment.insert(name.to_owned(), value.to_owned());
                    }
                }
                "EnvironmentFile" => {
                    let (optional, path) = match value.strip_prefix('-') {
                        Some(path) => (true, path),
                        None => (false, value.as_str()),
                    };
                    let text = match std::fs::read_to_string(in_root(root, path)) {
                        Ok(text) => text,
                        Err(error) if optional && error.kind() == ErrorKind::NotFound => continue,
                        Err(error) => panic!("EnvironmentFile={path}: {error}"),
                    };
                    for line in text.lines().map(str::trim) {
                        if line.is_empty() || line.starts_with('#') {
                            continue;
                        }
                        let (name, value) = line
                            .split_once('=')
                            .unwrap_or_else(|| panic!("{path}: a line without '=': {line}"));
                        environment.insert(
                            name.trim().to_owned(),
                            value.trim().trim_matches('"').to_owned(),
                        );
                    }
                }
                _ => {}
            }
        }
        environment
    }

    /// `ExecStart=` as an argument vector, with `${NAME}` expanded from `environment`; paths
    /// are those of the installed system.
    pub fn command_line(&self, environment: &BTreeMap<String, String>) -> Vec<String> {
        let exec = self
            .last("ExecStart")
            .unwrap_or_else(|| panic!("the unit has no ExecStart="));
        assert!(
            !exec.starts_with(['-', '@', '+', '!', ':']),
            "ExecStart= with a prefix is not supported here: {exec}"
        );
        exec.split_whitespace()
            .map(|word| {
                match word
                    .strip_prefix("${")
                    .and_then(|rest| rest.strip_suffix('}'))
                {
                    Some(name) => environment
                        .get(name)
                        .unwrap_or_else(|| {
                            panic!("ExecStart= uses ${{{name}}}, which the unit does not set")
                        })
                        .clone(),
                    None => {
                        assert!(
                            !word.contains('$'),
                            "an ExecStart= word this test cannot expand: {word}"
                        );
                        word.to_owned()
                    }
                }
            })
            .collect()
    }
}

/// A tickd process started from the package; killed if the test ends before it was
/// terminated.
pub struct Node {
    child: Child,
}

impl Node {
    /// Starts `argv` with `environment` only, as systemd starts a service: a clean
    /// environment and the unit's own variables.
    pub fn spawn(argv: &[String], environment: &BTreeMap<String, String>, log_path: &Path) -> Self {
        let log = std::fs::File::create(log_path).expect("create the node's log");
        let (program, args) = argv.split_first().expect("a command line");
        let child = Command::new(program)
            .args(args)
            .env_clear()
            .envs(environment)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("share the log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("start {argv:?}: {error}"));
        Node { child }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, once the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("poll the node")
    }

    /// Sends SIGTERM, as `systemctl stop` does, and waits (bounded) for the exit.
    pub async fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed: {status}");
        eventually(
            "tickd to exit after SIGTERM",
            TERMINATE_TIMEOUT,
            Duration::from_millis(50),
            || {
                let exited = self.exited();
                async move { exited }
            },
        )
        .await
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `path`, an absolute path on the installed system, inside the extracted `root`.
pub fn in_root(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

/// Runs a short command to completion, asserts that it succeeded and returns its stdout.
pub fn run(command: &mut Command) -> String {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("run {command:?}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed with {}:\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
