//! The alerting rules and the Grafana dashboard under `deploy/`, held to what tickd really
//! does: promtool must accept the rules and pass their unit tests, and every metric name an
//! alert or a dashboard panel uses must be one that real nodes export.
//!
//! A rule or a panel that names a metric tickd does not export never fires and never draws,
//! silently; so does one that names a metric a node exports only after its first event (an
//! alert on `increase(x[15m]) > 0` misses the event that creates the series). Both mistakes
//! fail here, against a scrape of a real 3-node cluster.
//!
//! promtool comes with Debian's `prometheus` package; without it these tests fail, they never
//! skip.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prometheus_parse::Value as Sampled;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use tickd_tests::api::{self, operator};
use tickd_tests::rabbit::{self, Consumers};
use tickd_tests::{NodeId, TestCluster, eventually, unique_name};

/// How long one promtool run may take; it answers in well under a second.
const PROMTOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the cluster may take to tick and deliver the first ticks.
const TICKING_TIMEOUT: Duration = Duration::from_secs(20);

/// The suffixes of a histogram's series, which belong to the histogram's name.
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// A file under the repository's `deploy/` directory.
fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("deploy")
        .join(path)
}

fn alerts_file() -> PathBuf {
    deploy("prometheus/alerts.yml")
}

fn alerts_test_file() -> PathBuf {
    deploy("prometheus/alerts_test.yml")
}

fn dashboard_file() -> PathBuf {
    deploy("grafana/tickd.json")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// Runs promtool with `args`, bounded by [`PROMTOOL_TIMEOUT`], and returns whether it
/// succeeded with everything it printed.
fn promtool(args: &[&str]) -> (bool, String) {
    let scratch = tempfile::tempdir().expect("a scratch directory for promtool's output");
    let out_path = scratch.path().join("output");
    let out = File::create(&out_path).expect("promtool's output file");
    let err = out.try_clone().expect("promtool's output file, for stderr");
    let spawned = Command::new("promtool")
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
            "promtool is not installed, and the alert rules and the dashboard cannot be checked \
             without it: scripts/test installs it (apt-get install prometheus)"
        ),
        Err(error) => panic!("promtool {args:?} could not start: {error}"),
    };
    let deadline = Instant::now() + PROMTOOL_TIMEOUT;
    let status = loop {
        match child.try_wait().expect("waiting for promtool") {
            Some(status) => break status,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("promtool {args:?} did not finish within {PROMTOOL_TIMEOUT:?}");
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    (status.success(), read(&out_path))
}

/// Runs promtool and fails the test with its output unless it succeeds.
fn promtool_must_pass(args: &[&str]) -> String {
    let (passed, output) = promtool(args);
    assert!(passed, "promtool {} failed:\n{output}", args.join(" "));
    output
}

/// The metric names in one PromQL expression: identifiers starting with `tickd_`, outside
/// string literals (label values such as `job="tickd"` are not names).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if let Some(open) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == open {
                quote = None;
            }
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if word.starts_with("tickd_") {
            names.insert(std::mem::take(&mut word));
        } else {
            word.clear();
        }
        if matches!(c, '"' | '\'' | '`') {
            quote = Some(c);
        }
    }
    names
}

/// The `expr:` of every rule in a rules file: the text after `expr:`, or the indented block
/// under it (`expr: |`). A line-based reading, enough for a file this test's authors write.
fn rule_expressions(rules: &str) -> Vec<String> {
    let mut expressions = Vec::new();
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if !rest.starts_with('|') && !rest.starts_with('>') {
            expressions.push(rest.trim_matches(|c| c == '\'' || c == '"').to_string());
            continue;
        }
        let key_indent = line.len() - trimmed.len();
        let mut block = String::new();
        while let Some(next) = lines.peek() {
            let indent = next.len() - next.trim_start().len();
            if !next.trim().is_empty() && indent <= key_indent {
                break;
            }
            block.push_str(next.trim());
            block.push('\n');
            lines.next();
        }
        expressions.push(block);
    }
    expressions
}

/// The dashboard's panels, those nested in collapsed rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, into: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            into.push(panel);
            walk(&panel["panels"], into);
        }
    }
    let mut all = Vec::new();
    walk(&dashboard["panels"], &mut all);
    all
}

/// Every query of the dashboard, by where it is: each panel target's `expr`, and the
/// queries of its template variables.
fn dashboard_expressions(dashboard: &Value) -> Vec<(String, String)> {
    let mut expressions = Vec::new();
    for panel in panels(dashboard) {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {title:?}: a target without an expr"));
            expressions.push((format!("panel {title:?}"), expr.to_string()));
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(query) = variable["definition"].as_str() {
            let name = variable["name"].as_str().unwrap_or("?");
            expressions.push((format!("variable ${name}"), query.to_string()));
        }
    }
    expressions
}

/// The metric names the rules use, each with the rules' expressions as evidence.
fn alert_metric_names() -> BTreeSet<String> {
    let expressions = rule_expressions(&read(&alerts_file()));
    assert!(
        expressions.len() >= 10,
        "alerts.yml has only {} expressions, the reading of the file is broken",
        expressions.len()
    );
    let names: BTreeSet<String> = expressions.iter().flat_map(|e| metric_names(e)).collect();
    for known in [
        "tickd_raft_is_leader",
        "tickd_raft_has_leader",
        "tickd_outbox_ticks",
        "tickd_raft_fsync_duration_seconds_bucket",
        "tickd_ticks_dropped_total",
    ] {
        assert!(
            names.contains(known),
            "the names read from alerts.yml miss {known}: {names:?}"
        );
    }
    names
}

/// The metric names the dashboard's queries use.
fn dashboard_metric_names() -> BTreeSet<String> {
    let dashboard: Value =
        serde_json::from_str(&read(&dashboard_file())).expect("tickd.json is JSON");
    let expressions = dashboard_expressions(&dashboard);
    assert!(
        expressions.len() >= 20,
        "tickd.json has only {} queries, the reading of the file is broken",
        expressions.len()
    );
    let names: BTreeSet<String> = expressions
        .iter()
        .flat_map(|(_, expr)| metric_names(expr))
        .collect();
    for known in [
        "tickd_raft_term",
        "tickd_api_requests_total",
        "tickd_ticks_popped_total",
        "tickd_tick_publish_lateness_seconds_bucket",
    ] {
        assert!(
            names.contains(known),
            "the names read from tickd.json miss {known}: {names:?}"
        );
    }
    names
}

/// The names one scrape exports, each marked whether it is a histogram.
fn exported_names(text: &str) -> BTreeMap<String, bool> {
    let lines = text.lines().map(|line| Ok(line.to_string()));
    let parsed = prometheus_parse::Scrape::parse(lines).expect("the scrape parses");
    let mut names = BTreeMap::new();
    for sample in parsed.samples {
        let histogram = matches!(sample.value, Sampled::Histogram(_));
        *names.entry(sample.metric).or_insert(false) |= histogram;
    }
    names
}

/// Whether `name`, as a query uses it, is exported: itself, or as a series of a histogram.
fn is_exported(name: &str, exported: &BTreeMap<String, bool>) -> bool {
    exported.contains_key(name)
        || HISTOGRAM_SUFFIXES.iter().any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|base| exported.get(base) == Some(&true))
        })
}

/// The names of `used` that `exported` lacks.
fn missing<'a>(used: &'a BTreeSet<String>, exported: &BTreeMap<String, bool>) -> Vec<&'a str> {
    used.iter()
        .map(String::as_str)
        .filter(|name| !is_exported(name, exported))
        .collect()
}

/// Scrapes a node's `/metrics` with the cluster's token.
async fn scrape(cluster: &TestCluster, node: NodeId) -> String {
    let (status, _, body) = api::send(operator(cluster, Method::GET, node, "/metrics")).await;
    assert_eq!(status, StatusCode::OK, "node {node}: GET /metrics: {body}");
    body.as_str()
        .unwrap_or_else(|| panic!("node {node}: /metrics is not text: {body}"))
        .to_string()
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let alerts = alerts_file();
    let output = promtool_must_pass(&["check", "rules", &alerts.to_string_lossy()]);
    assert!(output.contains("SUCCESS"), "promtool check rules: {output}");
    // promtool resolves `rule_files` against the test file's directory.
    let output = promtool_must_pass(&["test", "rules", &alerts_test_file().to_string_lossy()]);
    assert!(output.contains("SUCCESS"), "promtool test rules: {output}");
}

#[test]
fn every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not() {
    let rules = read(&alerts_file());
    let tests = read(&alerts_test_file());
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert:"))
        .map(str::trim)
        .collect();
    assert!(
        alerts.len() >= 10,
        "alerts.yml names too few alerts: {alerts:?}"
    );
    // A test case names its alert on the line `alertname: X`; a quiet case says
    // `exp_alerts: []` on the same line or the next.
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    for alert in alerts {
        let named = format!("alertname: {alert}");
        let cases: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, line)| line.split([',', '{', '}']).any(|part| part.trim() == named))
            .map(|(at, _)| at)
            .collect();
        let quiet = |at: &usize| {
            lines[*at].contains("exp_alerts: []")
                || lines
                    .get(at + 1)
                    .is_some_and(|next| *next == "exp_alerts: []")
        };
        assert!(
            cases.iter().any(quiet),
            "alerts_test.yml never shows {alert} staying quiet"
        );
        assert!(
            cases.iter().any(|at| !quiet(at)),
            "alerts_test.yml never shows {alert} firing"
        );
    }
}

#[test]
fn dashboard_queries_are_valid_promql() {
    let dashboard: Value =
        serde_json::from_str(&read(&dashboard_file())).expect("tickd.json is JSON");
    assert!(
        dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "a current Grafana schema"
    );
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|variable| variable["name"].as_str())
        .collect();
    assert!(
        variables.contains(&"datasource") && variables.contains(&"instance"),
        "the dashboard has the datasource and instance variables: {variables:?}"
    );
    // Every panel query goes to the chosen data source.
    for panel in panels(&dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            assert_eq!(
                target["datasource"]["uid"], "${datasource}",
                "panel {}: a target bound to a fixed data source",
                panel["title"]
            );
        }
    }
    // promtool parses PromQL; each panel query becomes a recording rule, with Grafana's
    // variables replaced by what they expand to.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (at, (from, expr)) in dashboard_expressions(&dashboard).iter().enumerate() {
        if !from.starts_with("panel ") {
            continue;
        }
        let expr = expr
            .replace("$__rate_interval", "1m")
            .replace("$__range", "1h")
            .replace("$instance", ".*");
        let quoted = serde_json::to_string(&expr).expect("a JSON string is a YAML string");
        rules.push_str(&format!(
            "      - record: tickd_dashboard:query{at}\n        expr: {quoted}\n"
        ));
    }
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let path = scratch.path().join("dashboard_rules.yml");
    std::fs::write(&path, rules).expect("writing the dashboard's queries as rules");
    promtool_must_pass(&["check", "rules", &path.to_string_lossy()]);
}

#[tokio::test]
async fn alerts_and_dashboard_use_only_metrics_a_real_cluster_exports() {
    let alert_names = alert_metric_names();
    let dashboard_names = dashboard_metric_names();

    // RabbitMQ clocks: the publish, confirm and outbox metrics move.
    let uri = rabbit::broker().await;
    let cluster = TestCluster::builder()
        .nodes(3)
        .rabbit_uri(Some(uri.clone()))
        .start()
        .await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let followers: Vec<NodeId> = cluster
        .node_ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();

    // Before any clock: every node already exports every metric an alert uses, the tick
    // counters of a follower included. An alert on an increase needs the series before the
    // first event.
    for node in cluster.node_ids() {
        let exported = exported_names(&scrape(&cluster, node).await);
        let absent = missing(&alert_names, &exported);
        assert!(
            absent.is_empty(),
            "node {node} (leader: node {leader}), before any clock, does not export {absent:?}, \
             which alerts.yml uses"
        );
    }

    // Some ticking: clocks registered through each follower (forwarded writes), their ticks
    // consumed.
    let mut consumers = Vec::new();
    for (index, follower) in followers.iter().enumerate() {
        let name = unique_name(&format!("prometheus-{index}"));
        consumers.push(
            Consumers::of_new_clock(&cluster, *follower, &name, "every.1.seconds", &uri).await,
        );
    }
    eventually(
        "ticks reaching every consumer",
        TICKING_TIMEOUT,
        Duration::from_millis(200),
        || async {
            consumers
                .iter()
                .all(|consumer| !consumer.received().is_empty())
                .then_some(())
        },
    )
    .await;

    // Every name an alert or a panel uses is exported by the cluster. Some are labelled and
    // appear with their first event on the node that had it (a forward happens on a
    // follower), so the dashboard is held to the union of the nodes.
    let mut union: BTreeMap<String, bool> = BTreeMap::new();
    for node in cluster.node_ids() {
        let exported = exported_names(&scrape(&cluster, node).await);
        let absent = missing(&alert_names, &exported);
        assert!(
            absent.is_empty(),
            "node {node} does not export {absent:?}, which alerts.yml uses"
        );
        for (name, histogram) in exported {
            *union.entry(name).or_insert(false) |= histogram;
        }
    }
    let absent = missing(&dashboard_names, &union);
    assert!(
        absent.is_empty(),
        "no node exports {absent:?}, which deploy/grafana/tickd.json uses; the cluster exports \
         {:?}",
        union.keys().collect::<Vec<_>>()
    );

    eprintln!(
        "{} metric names of alerts.yml and {} of tickd.json checked against the {} names a \
         3-node cluster with RabbitMQ clocks exports",
        alert_names.len(),
        dashboard_names.len(),
        union.len(),
    );
    for consumer in consumers {
        consumer.stop().await;
    }
}

#[test]
fn the_name_reader_finds_names_and_only_names() {
    let names = metric_names(
        r#"sum by (route) (rate(tickd_api_requests_total{job="tickd", route="/tickd_not_a_name"}[5m]))
           / on () tickd_x:ratio and tickd_raft_term[$__rate_interval]"#,
    );
    let expected: BTreeSet<String> = [
        "tickd_api_requests_total",
        "tickd_x:ratio",
        "tickd_raft_term",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(names, expected);
    let rules = "    - alert: A\n      expr: tickd_a == 0\n      for: 1m\n    - alert: B\n      \
                 expr: |\n        tickd_b\n        and tickd_c\n      for: 1m\n";
    assert_eq!(
        rule_expressions(rules),
        vec![
            "tickd_a == 0".to_string(),
            "tickd_b\nand tickd_c\n".to_string()
        ]
    );
}
