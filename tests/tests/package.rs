//! The Debian package, checked the way an operator meets it: `scripts/package --debug` builds
//! the .deb from the debug binary the suite already compiled, `dpkg-deb` shows what it holds,
//! and the service's own `ExecStart=` line, run from an extracted copy of the package with
//! its default configuration, serves the API with the token the node generated.
//!
//! The package is extracted with `dpkg -x` into a temporary root, never installed: installing
//! would run the maintainer scripts, which create a system user on this machine. The command
//! line is the unit's, word for word, with its variables expanded from the unit's
//! `Environment=` and `EnvironmentFile=` and every absolute path that the package ships
//! mapped into the temporary root. The shipped cluster file is rewritten only where a test
//! must differ from a real machine: free loopback ports instead of 9643/9743, and a temporary
//! data directory instead of /var/lib/tickd.
//!
//! cargo-deb, dpkg-deb and dpkg must be installed; `scripts/test` installs cargo-deb (dpkg is
//! part of every Debian system). Without them this test fails, it never skips.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tickd_tests::api::{CLOCKS_PATH, HEALTH_PATH, try_send};
use tickd_tests::cluster::{POLL_INTERVAL, READY_TIMEOUT, TERMINATE_TIMEOUT};
use tickd_tests::wait::{eventually, poll_until};
use tickd_tests::{ports, unique_name};

/// How long `scripts/package --debug` may take: it compiles nothing, but strips and
/// compresses a debug binary of several hundred megabytes.
const PACKAGE_TIMEOUT: Duration = Duration::from_secs(300);

/// What to do about a missing tool.
const INSTALL_HINT: &str = "scripts/test installs it (`cargo install --locked cargo-deb`, the \
                            version pinned in scripts/prerequisites.sh; dpkg-deb and dpkg come \
                            with Debian's dpkg package)";

/// Where the package puts what this test looks at, as absolute paths on the installed system.
const BINARY: &str = "/usr/bin/tickd";
const CLUSTER_FILE: &str = "/etc/tickd/cluster.toml";
const DEFAULTS_FILE: &str = "/etc/default/tickd";
const UNIT_NAME: &str = "tickd.service";

/// Where a package may install a systemd unit: cargo-deb has used both.
const UNIT_DIRS: [&str; 2] = ["/usr/lib/systemd/system", "/lib/systemd/system"];

/// The request timeout of this test's HTTP client.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_debian_package_installs_a_service_that_serves_the_api() {
    require_tools();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let scratch = scratch.path();
    let deb = build_package(scratch).await;
    let unit_path = check_declarations(&deb);

    // The package's files, unpacked into a root of their own.
    let root = scratch.join("root");
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root));
    assert_stripped(&in_root(&root, BINARY), &debug_binary());
    check_postinst(&deb, &root, scratch);
    let unit = read(&in_root(&root, &unit_path));
    let service = UnitService::parse(&unit);
    for (key, value) in [
        ("User", "tickd"),
        ("Group", "tickd"),
        ("StateDirectory", "tickd"),
        ("StateDirectoryMode", "0700"),
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "true"),
        ("MemoryDenyWriteExecute", "true"),
        ("CapabilityBoundingSet", ""),
    ] {
        assert_eq!(
            service.last(key),
            Some(value),
            "the unit should set {key}={value}:\n{unit}"
        );
    }

    // The unit's command line, word for word, against the shipped configuration.
    let ports = ports::allocate(2);
    let data_dir = scratch.join("state");
    make_runnable(&in_root(&root, CLUSTER_FILE), ports[0], ports[1], &data_dir);
    let environment = service.environment(&root);
    let argv = service.command_line(&environment, &root);
    assert_eq!(
        argv.first().map(PathBuf::from),
        Some(in_root(&root, BINARY)),
        "ExecStart= should run {BINARY}: {:?}",
        service.last("ExecStart")
    );
    let log_path = scratch.join("tickd.log");
    let mut node = Node::spawn(&argv, &environment, &log_path);
    let base = format!("http://127.0.0.1:{}", ports[0]);
    let client = tickd_tests::http::client_builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("an HTTP client");
    wait_until_up(&client, &base, &mut node, &argv, &log_path).await;

    // No token in the file: the node generated one into its data directory and said where.
    let token_file = data_dir.join("access-token");
    let token = read(&token_file).trim_end().to_owned();
    assert_eq!(
        token.len(),
        32,
        "a generated token in {}",
        token_file.display()
    );
    let log = read(&log_path);
    assert!(
        log.contains(&token_file.display().to_string()),
        "the log should say where the token is ({}):\n{log}",
        token_file.display()
    );
    assert!(!log.contains(&token), "the log must never show the token");
    register_a_clock(&client, &base, &token).await;

    let status = node.terminate().await;
    assert!(
        status.success(),
        "tickd should exit cleanly on SIGTERM, not with {status}; log:\n{}",
        read(&log_path)
    );
}

/// Fails, naming what to do, when a tool this test runs is missing.
fn require_tools() {
    for (tool, program, probe) in [
        ("cargo-deb", "cargo", ["deb", "--version"].as_slice()),
        ("dpkg-deb", "dpkg-deb", ["--version"].as_slice()),
        ("dpkg", "dpkg", ["--version"].as_slice()),
        ("readelf", "readelf", ["--version"].as_slice()),
    ] {
        let found = Command::new(program)
            .args(probe)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        assert!(found, "{tool} is not installed; {INSTALL_HINT}");
    }
}

/// Checks the package's control fields, conffiles, maintainer scripts and files, and returns
/// the path the unit is installed at.
fn check_declarations(deb: &Path) -> String {
    let info = run(Command::new("dpkg-deb").arg("--info").arg(deb));
    for field in ["Package: tickd", "Section: net", "Priority: optional"] {
        assert!(
            info.contains(field),
            "dpkg-deb --info lacks {field:?}:\n{info}"
        );
    }
    let depends = info
        .lines()
        .find_map(|line| line.trim().strip_prefix("Depends:"))
        .unwrap_or_else(|| panic!("the package declares no Depends:\n{info}"));
    assert!(
        depends.contains("libc6") && depends.contains("adduser"),
        "Depends: should name libc6 (computed from the binary) and adduser: {depends}"
    );
    for script in ["postinst", "postrm", "prerm"] {
        // dpkg-deb marks an executable control file with `*` before its name.
        let executable = info.lines().any(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words.windows(2).any(|pair| pair == ["*", script])
        });
        assert!(
            executable,
            "the package has no executable {script} maintainer script:\n{info}"
        );
    }
    let conffiles = run(Command::new("dpkg-deb")
        .arg("--info")
        .arg(deb)
        .arg("conffiles"));
    for file in [CLUSTER_FILE, DEFAULTS_FILE] {
        assert!(
            conffiles.lines().any(|line| line.trim() == file),
            "{file} is not a conffile; the conffiles are:\n{conffiles}"
        );
    }
    let contents = run(Command::new("dpkg-deb").arg("--contents").arg(deb));
    let holds = |file: &str| {
        contents
            .lines()
            .any(|line| line.ends_with(&format!(" .{file}")))
    };
    for file in [
        BINARY,
        CLUSTER_FILE,
        DEFAULTS_FILE,
        "/usr/share/doc/tickd/README.md",
    ] {
        assert!(holds(file), "the package does not hold {file}:\n{contents}");
    }
    UNIT_DIRS
        .iter()
        .map(|dir| format!("{dir}/{UNIT_NAME}"))
        .find(|path| holds(path))
        .unwrap_or_else(|| panic!("the package holds no {UNIT_NAME}:\n{contents}"))
}

/// Rewrites the extracted cluster file where a test machine must differ from a real one:
/// free loopback ports for 9643 and 9743, and a temporary data directory for /var/lib/tickd.
/// The shipped values are checked first, so that a changed default fails here instead of
/// being rewritten silently.
fn make_runnable(config_path: &Path, api_port: u16, raft_port: u16, data_dir: &Path) {
    let shipped = read(config_path);
    assert!(
        !shipped
            .lines()
            .any(|line| line.trim_start().starts_with("token")),
        "the shipped cluster file should set no token, so that the node generates one:\n{shipped}"
    );
    let mut config = shipped.clone();
    for (default, replacement) in [
        (
            "api = \"127.0.0.1:9643\"",
            format!("api = \"127.0.0.1:{api_port}\""),
        ),
        (
            "raft = \"127.0.0.1:9743\"",
            format!("raft = \"127.0.0.1:{raft_port}\""),
        ),
        (
            "data_dir = \"/var/lib/tickd\"",
            format!("data_dir = \"{}\"", data_dir.display()),
        ),
    ] {
        let lines = config.lines().filter(|line| line.trim() == default).count();
        assert_eq!(
            lines, 1,
            "the shipped cluster file should set `{default}` once:\n{shipped}"
        );
        config = config
            .lines()
            .map(|line| {
                if line.trim() == default {
                    replacement.as_str()
                } else {
                    line
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
    }
    std::fs::write(config_path, config).expect("rewrite the extracted cluster file");
}

/// Waits (bounded) until the node answers `GET /mgmt/health` with 200 `{"status":"UP"}`.
async fn wait_until_up(
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
async fn register_a_clock(client: &reqwest::Client, base: &str, token: &str) {
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

/// The debug binary that `scripts/package --debug` packages: `tickd` in the target directory
/// this test executable was built in (`<target>/debug/deps/package-…`).
fn debug_binary() -> PathBuf {
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

/// Runs `scripts/package --debug` (bounded) and returns the path of the .deb it reports.
async fn build_package(scratch: &Path) -> PathBuf {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the repository")
        .to_path_buf();
    let output_dir = scratch.join("deb");
    let mut command = tokio::process::Command::new(repository.join("scripts/package"));
    command
        .arg("--debug")
        .arg("--output")
        .arg(&output_dir)
        .env("CARGO_TARGET_DIR", target_dir())
        .current_dir(&repository)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = command.spawn().expect("start scripts/package");
    let group = child.id();
    let Ok(outcome) = tokio::time::timeout(PACKAGE_TIMEOUT, child.wait_with_output()).await else {
        if let Some(group) = group {
            // cargo-deb runs in the script's process group: end all of it.
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(format!("-{group}"))
                .status();
        }
        panic!("scripts/package --debug did not finish within {PACKAGE_TIMEOUT:?}");
    };
    let output = outcome.expect("wait for scripts/package");
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

/// Asserts that `binary` carries no debug information or symbol table and is much smaller
/// than the `unstripped` binary it was made from.
fn assert_stripped(binary: &Path, unstripped: &Path) {
    let sections = run(Command::new("readelf")
        .args(["--section-headers", "--wide"])
        .arg(binary));
    for section in [".debug_info", ".debug_line", ".symtab"] {
        assert!(
            !sections.contains(section),
            "{} still has a {section} section: it is not stripped",
            binary.display()
        );
    }
    let size = |path: &Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|error| panic!("the size of {}: {error}", path.display()))
            .len()
    };
    let (packaged, original) = (size(binary), size(unstripped));
    assert!(
        packaged.saturating_mul(4) < original,
        "the packaged binary ({packaged} bytes) should be far smaller than the unstripped \
         {} ({original} bytes)",
        unstripped.display()
    );
}

/// Commands the postinst may call that would change this machine, as stand-ins that record
/// their arguments. `getent` and `dpkg-statoverride --list` answer from marker files, so one
/// run can play a fresh machine and the next a machine where the user and the override exist.
const STUBS: &[(&str, &str)] = &[
    (
        "getent",
        r#"[ -e "$STUB_STATE/user-exists" ] && echo "$2:x:998:998::/var/lib/tickd:/usr/sbin/nologin""#,
    ),
    ("addgroup", ""),
    ("adduser", ""),
    ("deluser", ""),
    ("delgroup", ""),
    (
        "dpkg-statoverride",
        r#"case "$1" in --list) [ -e "$STUB_STATE/override" ] ;; --update) touch "$STUB_STATE/override" ;; esac"#,
    ),
    (
        "deb-systemd-helper",
        r#"[ "$1" != debian-installed ] && [ "$1" != --quiet ]"#,
    ),
    ("deb-systemd-invoke", ""),
    ("systemctl", ""),
];

/// Runs the package's postinst twice against a copy of the extracted cluster file, with
/// stand-ins for every command that would change this machine (see [`STUBS`]): a first
/// install creates the user and group, generates the secret and sets the file's owner and
/// mode; a later configure (an upgrade, the user already there) changes nothing.
fn check_postinst(deb: &Path, root: &Path, scratch: &Path) {
    let control = scratch.join("control");
    run(Command::new("dpkg-deb")
        .arg("--control")
        .arg(deb)
        .arg(&control));
    let postinst = control.join("postinst");
    let stubs = scratch.join("stubs");
    let state = scratch.join("stub-state");
    let install_root = scratch.join("postinst-root");
    for dir in [&stubs, &state, &install_root.join("etc/tickd")] {
        std::fs::create_dir_all(dir).expect("create a directory for the postinst run");
    }
    for (name, body) in STUBS {
        let script = format!("#!/bin/sh\necho \"{name} $*\" >>\"$STUB_STATE/calls\"\n{body}\n",);
        let path = stubs.join(name);
        std::fs::write(&path, script).expect("write a stand-in command");
        run(Command::new("chmod").arg("755").arg(&path));
    }
    let shipped = read(&in_root(root, CLUSTER_FILE));
    let config = in_root(&install_root, CLUSTER_FILE);
    std::fs::write(&config, &shipped).expect("copy the cluster file");
    let calls = state.join("calls");
    let configure = |previous_version: &str| {
        let _ = std::fs::remove_file(&calls);
        run(Command::new("sh")
            .arg(&postinst)
            .args(["configure", previous_version])
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", stubs.display()))
            .env("DPKG_ROOT", &install_root)
            .env("STUB_STATE", &state));
        std::fs::read_to_string(&calls).unwrap_or_default()
    };

    let first = configure("");
    for expected in [
        "addgroup --system --quiet tickd",
        "adduser --system --quiet --ingroup tickd --home /var/lib/tickd --no-create-home \
         --shell /usr/sbin/nologin tickd",
        "dpkg-statoverride --update --add root tickd 0640 /etc/tickd/cluster.toml",
    ] {
        assert!(
            first.lines().any(|line| line == expected),
            "a first install should run `{expected}`; it ran:\n{first}"
        );
    }
    let generated = read(&config);
    let changed: Vec<(&str, &str)> = shipped
        .lines()
        .zip(generated.lines())
        .filter(|(before, after)| before != after)
        .collect();
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

    std::fs::write(state.join("user-exists"), "").expect("mark the user as existing");
    let again = configure("0.1.0-1");
    for command in ["addgroup", "adduser", "dpkg-statoverride --update"] {
        assert!(
            !again.lines().any(|line| line.starts_with(command)),
            "a configure with the user and the override in place should not run `{command}`; \
             it ran:\n{again}"
        );
    }
    assert_eq!(
        read(&config),
        generated,
        "a second configure must keep the secret"
    );
}

/// The `[Service]` section of a systemd unit: its assignments, in order.
struct UnitService {
    assignments: Vec<(String, String)>,
}

impl UnitService {
    fn parse(unit: &str) -> Self {
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
    fn last(&self, key: &str) -> Option<&str> {
        self.assignments
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    /// The service's environment as systemd builds it: `Environment=` assignments, then the
    /// `EnvironmentFile=` files (read from `root`; a leading `-` makes a file optional),
    /// later ones winning.
    fn environment(&self, root: &Path) -> BTreeMap<String, String> {
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

    /// `ExecStart=` as an argument vector: `${NAME}` expanded from `environment`, and every
    /// absolute path the package ships mapped into `root`.
    fn command_line(&self, environment: &BTreeMap<String, String>, root: &Path) -> Vec<String> {
        let exec = self
            .last("ExecStart")
            .unwrap_or_else(|| panic!("the unit has no ExecStart="));
        assert!(
            !exec.starts_with(['-', '@', '+', '!', ':']),
            "ExecStart= with a prefix is not supported here: {exec}"
        );
        exec.split_whitespace()
            .map(|word| {
                let word = match word
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
                };
                let mapped = in_root(root, &word);
                if word.starts_with('/') && mapped.exists() {
                    mapped.display().to_string()
                } else {
                    word
                }
            })
            .collect()
    }
}

/// A tickd process started from the extracted package; killed if the test ends before it
/// was terminated.
struct Node {
    child: Child,
}

impl Node {
    fn spawn(argv: &[String], environment: &BTreeMap<String, String>, log_path: &Path) -> Self {
        let log = std::fs::File::create(log_path).expect("create the node's log");
        let (program, args) = argv.split_first().expect("a command line");
        let child = Command::new(program)
            .args(args)
            // systemd starts a service with a clean environment and its own variables.
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

    /// The exit status, once the process has exited.
    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("poll the node")
    }

    /// Sends SIGTERM, as `systemctl stop` does, and waits (bounded) for the exit.
    async fn terminate(&mut self) -> ExitStatus {
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
fn in_root(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

/// Runs a short command to completion, asserts that it succeeded and returns its stdout.
fn run(command: &mut Command) -> String {
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
