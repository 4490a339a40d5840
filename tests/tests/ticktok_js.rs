//! The published Ticktok JavaScript client (npm `ticktok` 0.2.1, unchanged) against a tickd
//! cluster: it registers a clock and receives its ticks, over RabbitMQ and over http, and over
//! https from a cluster with TLS on.
//!
//! The package is installed from the npm registry into `CARGO_TARGET_TMPDIR/ticktok-js`, once;
//! later runs reuse it. The client is driven by `tests/js/receive_ticks.js`. Without `node`,
//! `npm` or the registry the tests fail with a message that says what is missing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tickd_tests::rabbit;
use tickd_tests::{TestCluster, unique_name};
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::sync::OnceCell;

/// The client version under test: the one the issue names, as published.
const TICKTOK_VERSION: &str = "0.2.1";

/// The driver script: schedules a clock and prints each tick as a JSON line.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/js/receive_ticks.js");

/// How long `npm install` may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(180);

/// How long the script may run (it gives up by itself after 20 s).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(40);

/// The schedule under test and how many of its ticks the client must receive.
const SCHEDULE: &str = "every.1.seconds";
const TICKS: usize = 2;

/// A missing prerequisite fails the test: it never passes without having run the client.
fn unavailable(reason: &str) -> ! {
    panic!(
        "{reason}; the test needs node, npm and the npm registry (`scripts/test` installs node and npm)"
    );
}

/// The persistent install directory.
fn install_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("ticktok-js")
}

/// The installed `ticktok` version, if any.
fn installed_version(dir: &Path) -> Option<String> {
    let manifest = dir.join("node_modules/ticktok/package.json");
    let text = std::fs::read_to_string(manifest).ok()?;
    let manifest: Value = serde_json::from_str(&text).ok()?;
    manifest["version"].as_str().map(str::to_string)
}

/// Runs a command to completion within `timeout`, killing it on expiry.
/// `Err` describes why it could not be run or did not finish.
async fn run(
    mut command: Command,
    timeout: Duration,
) -> Result<(ExitStatus, String, String), String> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|error| format!("cannot start {command:?}: {error}"))?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let out = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text).await;
        text
    });
    let err = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let waited = tokio::time::timeout(timeout, child.wait()).await;
    if waited.is_err() {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let out = out.await.unwrap_or_default();
    let err = err.await.unwrap_or_default();
    match waited {
        Ok(Ok(status)) => Ok((status, out, err)),
        Ok(Err(error)) => Err(format!("waiting for {command:?}: {error}\nstderr:\n{err}")),
        Err(_) => Err(format!(
            "{command:?} did not finish within {timeout:?}; killed\nstdout:\n{out}\nstderr:\n{err}"
        )),
    }
}

/// Installs `ticktok@0.2.1` unless already there; the directory holding `node_modules`.
///
/// # Panics
///
/// When node or npm is missing or the install fails.
async fn install() -> PathBuf {
    static INSTALLED: OnceCell<PathBuf> = OnceCell::const_new();
    INSTALLED.get_or_init(install_once).await.clone()
}

async fn install_once() -> PathBuf {
    for tool in ["node", "npm"] {
        let mut command = Command::new(tool);
        command.arg("--version");
        match run(command, Duration::from_secs(30)).await {
            Ok((status, _, _)) if status.success() => {}
            Ok((status, _, stderr)) => {
                unavailable(&format!("`{tool} --version` failed ({status}): {stderr}"))
            }
            Err(error) => unavailable(&format!("`{tool}` is not usable: {error}")),
        }
    }
    let dir = install_dir();
    if installed_version(&dir).as_deref() == Some(TICKTOK_VERSION) {
        return dir;
    }
    std::fs::create_dir_all(&dir).expect("create the ticktok-js install directory");
    // A package.json of its own keeps npm from installing into a parent directory's project.
    let manifest = dir.join("package.json");
    if !manifest.exists() {
        std::fs::write(
            &manifest,
            r#"{ "name": "tickd-ticktok-js", "private": true, "description": "tickd's tests install the Ticktok client here" }"#,
        )
        .expect("write the install directory's package.json");
    }
    let started = Instant::now();
    let mut command = Command::new("npm");
    command
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--silent",
            "--save-exact",
        ])
        .arg(format!("ticktok@{TICKTOK_VERSION}"))
        .current_dir(&dir);
    match run(command, INSTALL_TIMEOUT).await {
        Ok((status, _, stderr)) if !status.success() => unavailable(&format!(
            "`npm install ticktok@{TICKTOK_VERSION}` failed ({status}):\n{stderr}"
        )),
        Ok(_) => {}
        Err(error) => unavailable(&format!("npm install: {error}")),
    }
    match installed_version(&dir) {
        Some(version) if version == TICKTOK_VERSION => {
            eprintln!(
                "installed ticktok@{version} in {} in {:?}",
                dir.display(),
                started.elapsed()
            );
            dir
        }
        other => unavailable(&format!(
            "after npm install, {} holds ticktok {other:?}, not {TICKTOK_VERSION}",
            dir.display()
        )),
    }
}

/// Runs the published client against `node`'s API until it has received [`TICKS`] ticks of
/// a fresh clock, and checks them.
async fn client_receives_ticks(cluster: &TestCluster, modules: &Path, channel: &str) {
    let node = 2;
    let name = unique_name(&format!("ticktok-js-{channel}"));
    let mut command = Command::new("node");
    command
        .arg(SCRIPT)
        .arg(cluster.api_url(node))
        .arg(cluster.token())
        .arg(&name)
        .arg(SCHEDULE)
        .arg(TICKS.to_string())
        .current_dir(cluster.dir())
        .env("NODE_PATH", modules.join("node_modules"));
    // Node's own TLS, trusting the cluster's CA beside its bundled roots.
    if let Some(pki) = cluster.pki() {
        command.env("NODE_EXTRA_CA_CERTS", pki.ca());
    }
    // axios 0.18 honours http_proxy but not no_proxy: keep the client on loopback.
    for proxy in ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"] {
        command.env_remove(proxy);
    }
    let started = Instant::now();
    let (status, stdout, stderr) = run(command, SCRIPT_TIMEOUT)
        .await
        .unwrap_or_else(|error| panic!("{channel}: the ticktok client: {error}"));
    let elapsed = started.elapsed();
    assert!(
        status.success(),
        "{channel}: the ticktok client exited with {status} after {elapsed:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let ticks: Vec<Value> = stdout
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|error| {
                panic!("{channel}: a tick line {line:?} is not JSON: {error}\nstderr:\n{stderr}")
            })
        })
        .collect();
    assert_eq!(
        ticks.len(),
        TICKS,
        "{channel}: ticks printed: {stdout}\nstderr:\n{stderr}"
    );
    let mut ids = BTreeSet::new();
    for tick in &ticks {
        assert_eq!(
            tick["schedule"], SCHEDULE,
            "{channel}: a tick of another schedule: {tick}"
        );
        let id = tick["tick_id"]
            .as_str()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| panic!("{channel}: a tick without a tick_id: {tick}"));
        assert!(
            ids.insert(id.to_string()),
            "{channel}: tick {id} twice: {stdout}"
        );
    }
    eprintln!("{channel}: the ticktok client received {ticks:?} in {elapsed:?}");
}

#[tokio::test]
async fn published_ticktok_client_receives_ticks_over_rabbitmq() {
    let uri = rabbit::broker().await;
    let modules = install().await;
    let cluster = TestCluster::builder()
        .nodes(3)
        .rabbit_uri(Some(uri))
        .start()
        .await;
    client_receives_ticks(&cluster, &modules, "rabbit").await;
}

#[tokio::test]
async fn published_ticktok_client_receives_ticks_over_http() {
    let modules = install().await;
    let cluster = TestCluster::builder().nodes(3).start().await;
    client_receives_ticks(&cluster, &modules, "http").await;
}

#[tokio::test]
async fn published_ticktok_client_receives_ticks_over_https() {
    let modules = install().await;
    let cluster = TestCluster::builder().nodes(3).tls().start().await;
    client_receives_ticks(&cluster, &modules, "https").await;
}
