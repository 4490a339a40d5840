//! The Debian package, checked the way an operator meets it: `scripts/package --debug` builds
//! the .deb from the debug binary the suite already compiled (once per run of this file,
//! shared by its tests: [`common::package`]), `dpkg-deb` shows what it holds, and the
//! service's own `ExecStart=` line, run from an extracted copy of the package with its
//! default configuration, serves the API with the token the node generated. The other test,
//! in [`installed`], installs the package into a fresh Debian root and runs it there.
//!
//! Here the package is extracted with `dpkg -x` into a temporary root, never installed:
//! installing would run the maintainer scripts, which create a system user on this machine.
//! The command line is the unit's, word for word, with its variables expanded from the unit's
//! `Environment=` and `EnvironmentFile=` and every absolute path that the package ships
//! mapped into the temporary root. The shipped cluster file is rewritten only where a test
//! must differ from a real machine: free loopback ports instead of 9643/9743, and a temporary
//! data directory instead of /var/lib/tickd.
//!
//! cargo-deb, dpkg-deb and dpkg must be installed; `scripts/test` installs cargo-deb (dpkg is
//! part of every Debian system). Without them this test fails, it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    BINARY, CLUSTER_FILE, DEFAULTS_FILE, Node, UNIT_DIRS, UNIT_NAME, UnitService, debug_binary,
    generated_secret, generated_token, in_root, package, read, register_a_clock, require_tools,
    run, wait_until_up,
};
use tickd_tests::ports;

#[path = "package/common.rs"]
mod common;
#[path = "package/installed.rs"]
mod installed;

#[tokio::test]
async fn the_debian_package_installs_a_service_that_serves_the_api() {
    require_tools();
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let scratch = scratch.path();
    let deb = package().await;
    let unit_path = check_declarations(deb);

    // The package's files, unpacked into a root of their own.
    let root = scratch.join("root");
    run(Command::new("dpkg").arg("-x").arg(deb).arg(&root));
    assert_stripped(&in_root(&root, BINARY), &debug_binary());
    check_postinst(deb, &root, scratch);
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
    let argv: Vec<String> = service
        .command_line(&environment)
        .into_iter()
        .map(|word| mapped_into(&root, word))
        .collect();
    assert_eq!(
        argv.first().map(PathBuf::from),
        Some(in_root(&root, BINARY)),
        "ExecStart= should run {BINARY}: {:?}",
        service.last("ExecStart")
    );
    let log_path = scratch.join("tickd.log");
    let mut node = Node::spawn(&argv, &environment, &log_path);
    let base = format!("http://127.0.0.1:{}", ports[0]);
    let client = common::client();
    wait_until_up(&client, &base, &mut node, &argv, &log_path).await;

    // No token in the file: the node generated one into its data directory and said where.
    let token_file = data_dir.join("access-token");
    let token = generated_token(&token_file, &token_file.display().to_string(), &log_path);
    register_a_clock(&client, &base, &token).await;

    let status = node.terminate().await;
    assert!(
        status.success(),
        "tickd should exit cleanly on SIGTERM, not with {status}; log:\n{}",
        read(&log_path)
    );
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
        "/usr/share/doc/tickd/docs/configuration.md",
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
    generated_secret(&shipped, &generated);

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

/// `word` of the unit's command line, mapped into the extracted `root` when it is an absolute
/// path the package ships.
fn mapped_into(root: &Path, word: String) -> String {
    let mapped = in_root(root, &word);
    if word.starts_with('/') && mapped.exists() {
        mapped.display().to_string()
    } else {
        word
    }
}
