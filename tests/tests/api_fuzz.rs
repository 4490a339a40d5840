//! Property-based fuzzing of the whole API against a real 3-node cluster: schemathesis reads
//! the OpenAPI document a follower serves and sends that follower generated requests, valid
//! and invalid, for every operation, with every check on (no 5xx, only documented statuses,
//! bodies and headers matching their schemas, valid data accepted, invalid data rejected,
//! the token not ignored, wrong methods answered 405). The operator's operations get the
//! operator token, and every operation must answer something other than 403 at least once:
//! one that only ever met its token gate was not fuzzed. Requests to a follower exercise the
//! forwarding of writes and the linearized reads as well.
//!
//! The suite runs a short profile. The long one is the same test with more examples:
//! `scripts/fuzz-api` (see docs/RELIABILITY.md for what it found). Both are set by
//! environment variables: `TICKD_FUZZ_EXAMPLES` (examples per operation and phase, default 12),
//! `TICKD_FUZZ_SEED` (default 1) and `TICKD_FUZZ_MINUTES` (the bound on the run, default 12).
//! The configuration and hooks live in `tests/schemathesis/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use tickd_tests::api::{OPENAPI_PATH, anonymous, register, send};
use tickd_tests::{TestCluster, local_names, tools};
use tokio::process::Command;

/// An environment variable as a number, or its default.
fn setting(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, not {value:?}")),
        Err(_) => default,
    }
}

#[tokio::test]
async fn schemathesis_finds_no_failure_on_a_three_node_cluster() {
    let schemathesis = tools::require("schemathesis");
    let examples = setting("TICKD_FUZZ_EXAMPLES", 12);
    let seed = setting("TICKD_FUZZ_SEED", 1);
    let minutes = setting("TICKD_FUZZ_MINUTES", 12);
    // The fuzzer's webhook URLs name random hosts: the nodes resolve them on this machine alone
    // (none resolves), so no query, and no tick, goes anywhere else.
    let dir = tempfile::tempdir().expect("a folder for the nodes' resolver files");
    let names = local_names::in_folder(dir.path(), "127.0.0.1 localhost\n::1 localhost\n");
    let cluster = TestCluster::builder()
        .nodes(3)
        .binary(&names.wrapper)
        .start()
        .await;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let target = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a 3-node cluster has a follower");
    let base = cluster.api_url(target);
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemathesis");

    // A clock for the reads and actions, and a ticking queue for the pops (see the config).
    let (status, _, acted) = register(&cluster, target, "fuzzed", "every.1.days").await;
    assert_eq!(status, StatusCode::CREATED, "{acted}");
    let (status, _, popped) = register(&cluster, target, "popped", "every.1.seconds").await;
    assert_eq!(status, StatusCode::CREATED, "{popped}");
    let clock = acted["id"].as_str().expect("a clock id").to_string();
    let url = popped["channel"]["details"]["url"]
        .as_str()
        .expect("an http channel");
    let queue = url
        .trim_end_matches("/pop")
        .rsplit('/')
        .next()
        .expect("a queue id in the poll URL")
        .to_string();
    let junit = cluster.dir().join("schemathesis.xml");
    let answers = cluster.dir().join("answers.txt");
    // The document is read from a file: given the document's own URL, schemathesis would leave
    // that route out of the run.
    let (status, _, document) = send(anonymous(&cluster, Method::GET, target, OPENAPI_PATH)).await;
    assert_eq!(status, StatusCode::OK, "{document}");
    let operations = document["paths"]
        .as_object()
        .expect("the document has paths")
        .values()
        .map(|item| item.as_object().map_or(0, |methods| methods.len()))
        .sum::<usize>();
    let document_file = cluster.dir().join("openapi.json");
    std::fs::write(&document_file, document.to_string()).expect("the document is written");

    let mut command = Command::new(&schemathesis);
    command
        .current_dir(&config)
        .arg("--no-color")
        .arg("--config-file")
        .arg(config.join("schemathesis.toml"))
        .arg("run")
        .arg(&document_file)
        .args(["--url", &base])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--max-examples", &examples.to_string()])
        .args(["--seed", &seed.to_string()])
        // One worker: hypothesis's lambda-source cache is not thread-safe and two workers
        // crashed its coverage phase ("AST constructor recursion depth mismatch").
        .args(["--workers", "1"])
        .args(["--output-truncate", "false"])
        .args(["--report", "junit", "--report-junit-path"])
        .arg(&junit)
        .env("NO_COLOR", "1")
        .env("TICKD_FUZZ_TOKEN", cluster.token())
        .env("TICKD_FUZZ_OPERATOR_TOKEN", cluster.operator_token())
        .env("TICKD_FUZZ_ANSWERS", &answers)
        .env("TICKD_FUZZ_CLOCK", &clock)
        .env("TICKD_FUZZ_QUEUE", &queue)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let run = tokio::time::timeout(Duration::from_secs(minutes * 60), command.output()).await;
    let output = match run {
        Ok(output) => output.expect("schemathesis starts"),
        Err(_) => panic!("schemathesis did not finish within {minutes} minutes"),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "schemathesis found failures (seed {seed}, {examples} examples):\n{stdout}\n{stderr}"
    );
    // The run must have tested every operation the document describes, not passed by
    // selecting none.
    let tested = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("Tested:"))
        .and_then(|count| count.split_whitespace().next()?.parse::<usize>().ok());
    assert!(
        operations >= 13,
        "the document has only {operations} operations"
    );
    // Every operation but the event stream, which never ends (tests/schemathesis/
    // schemathesis.toml leaves it out; tests/tests/dashboard.rs covers it).
    assert_eq!(
        tested,
        Some(operations - 1),
        "every operation but the event stream is tested:\n{stdout}"
    );
    // Every operation tested got past its token gate at least once: one that only ever
    // answered 403 (the operator's, sent the wrong token) was not fuzzed, whatever the checks
    // said.
    let record = std::fs::read_to_string(&answers).expect("the hooks recorded the answers");
    let mut answered: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for line in record.lines() {
        if let Some((operation, status)) = line.rsplit_once(' ') {
            answered.entry(operation).or_default().insert(status);
        }
    }
    let gated: Vec<_> = answered
        .iter()
        .filter(|(_, statuses)| statuses.iter().all(|status| *status == "403"))
        .map(|(operation, _)| *operation)
        .collect();
    assert!(
        gated.is_empty(),
        "operations that answered nothing but 403: {gated:?}"
    );
    assert_eq!(
        answered.len(),
        operations - 1,
        "an answer from every operation but the event stream: {:?}",
        answered.keys().collect::<Vec<_>>()
    );
    assert!(
        cluster.crashed_nodes().is_empty(),
        "nodes crashed under fuzzing: {:?}",
        cluster.crashed_nodes()
    );
}

/// The hooks' rule that keeps the fuzzer's webhook receivers on this machine: every URL whose
/// host a URL parser could read as an address is pointed at 127.0.0.1 (which the fuzz cluster
/// refuses), and names, which resolve nowhere for the fuzz cluster's nodes, are left as they
/// are. Run with the venv's Python, which imports the hooks as schemathesis does.
#[test]
fn the_fuzzers_webhook_urls_never_name_an_address_off_this_machine() {
    let python = tools::require("python3");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemathesis");
    let cases = [
        ("http://8.8.8.8/x", "http://127.0.0.1/x"),
        (
            "https://[2001:db8::1]:8443/h?q=1",
            "https://127.0.0.1:8443/h?q=1",
        ),
        ("http://2130706433/", "http://127.0.0.1/"),
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("http://%31%32%37.0.0.1/", "http://127.0.0.1/"),
        ("http://a.b.0x1f/", "http://127.0.0.1/"),
        (
            "http://user:pw@1.2.3.4:99/p#f",
            "http://user:pw@127.0.0.1:99/p#f",
        ),
        ("http://[::1", "http://127.0.0.1/"),
        ("http://example.com/hook", "http://example.com/hook"),
        (
            "https://3com.example.org.:443/p",
            "https://3com.example.org.:443/p",
        ),
    ];
    let urls: Vec<&str> = cases.iter().map(|(url, _)| *url).collect();
    let output = std::process::Command::new(&python)
        .current_dir(&config)
        .args([
            "-c",
            "import json, sys, hooks\n\
             print(json.dumps([hooks._local_webhook_url(url) for url in json.loads(sys.argv[1])]))",
        ])
        .arg(serde_json::to_string(&urls).expect("the URLs as JSON"))
        .output()
        .expect("python starts");
    assert!(
        output.status.success(),
        "the hooks did not load: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rewritten: Vec<String> =
        serde_json::from_slice(&output.stdout).expect("the hooks' answer as JSON");
    for ((url, expected), got) in cases.iter().zip(&rewritten) {
        assert_eq!(got, expected, "the fuzzer's webhook URL {url}");
    }
}
