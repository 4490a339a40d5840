//! The Kubernetes packaging: the Helm chart (`deploy/helm/tickd`) and the kustomize manifests
//! rendered from it (`deploy/kubernetes`).
//!
//! No Kubernetes runs here, so the chart is held to what can be checked offline: `helm lint`;
//! every rendering validated with `kubernetes-validate --strict` against the schemas of the
//! oldest and the newest Kubernetes the chart supports; the settings a 3-node Raft cluster
//! needs (parallel start, peers' DNS before readiness, a liveness that survives an election,
//! the restrictive security context) read off the rendered objects; the alert rules it carries
//! checked by promtool; the committed manifests equal to a fresh rendering. And the rendering
//! is run: three real `tickd` processes, each in a UTS and mount namespace of its own that plays
//! its pod (its host name `tickd-<ordinal>`, the ConfigMap's `cluster.toml` and the TLS Secret's
//! files where the StatefulSet mounts them, the Secret's values in the environment the
//! StatefulSet names, the pods' DNS names in `/etc/hosts`), form a cluster that serves a
//! registration and delivers its ticks.
//!
//! The tools come from `scripts/test` (helm, kubectl, kubernetes-validate, promtool); a missing
//! one fails the test.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tickd_tests::cluster::tickd_binary;
use tickd_tests::pki::Pki;
use tickd_tests::{eventually, tools};

/// The Kubernetes versions the chart supports, oldest and newest (Chart.yaml's kubeVersion,
/// and the newest schemas kubernetes-validate carries).
const KUBERNETES_VERSIONS: [&str; 2] = ["1.25.0", "1.37.0"];

/// Credentials for the renderings that make their own Secret.
const CREDENTIALS: [(&str, &str); 3] = [
    ("credentials.accessToken", "access-0123456789abcdef"),
    ("credentials.operatorToken", "operator-0123456789abcdef"),
    ("credentials.secret", "secret-0123456789abcdef"),
];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_path_buf()
}

fn chart() -> PathBuf {
    repository().join("deploy/helm/tickd")
}

/// Runs `program` with `args`; its stdout, or its stderr as the error.
fn run(program: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("run {}: {error}", program.display()));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stderr}{stdout}"))
    }
}

/// Runs helm with `args` (which name the chart) and `values` set; its stdout, or the failure.
fn helm(args: &[&str], values: &[(&str, &str)]) -> Result<String, String> {
    let settings: Vec<String> = values
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    let mut all = args.to_vec();
    for setting in &settings {
        all.extend(["--set", setting]);
    }
    run(&tools::require("helm"), &all)
}

/// `helm template` of the chart as release `tickd` in `namespace`, with `values` set.
fn render(namespace: &str, values: &[(&str, &str)]) -> Result<String, String> {
    let chart = chart();
    let chart = chart.to_str().expect("a UTF-8 path");
    helm(
        &["template", "tickd", chart, "--namespace", namespace],
        values,
    )
}

/// [`CREDENTIALS`] and `extra`.
fn with_credentials(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    CREDENTIALS.iter().chain(extra).copied().collect()
}

/// The documents of a YAML stream as JSON, read by PyYAML (kubernetes-validate's own reader).
fn documents(yaml: &str) -> Vec<Value> {
    let reader = "import json, sys, yaml\n\
                  json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)";
    let python = tools::require("kubernetes-validate").with_file_name("python3");
    let mut child = Command::new(&python)
        .args(["-c", reader])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run PyYAML");
    std::io::Write::write_all(
        &mut child.stdin.take().expect("PyYAML's stdin"),
        yaml.as_bytes(),
    )
    .expect("write the YAML");
    let output = child.wait_with_output().expect("PyYAML's answer");
    assert!(
        output.status.success(),
        "PyYAML refused the rendering: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("PyYAML writes JSON")
}

/// The one object of `kind` named `name` among `objects`.
fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|object| object["kind"] == kind && object["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {} objects", objects.len()))
}

/// Validates `yaml` strictly against every supported version: each built-in object must pass,
/// and a custom resource (a cert-manager Certificate, a PrometheusRule) is the only thing left
/// unchecked, which the callers check themselves.
fn validate(yaml: &str) {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, yaml).expect("write the rendering");
    let validator = tools::require("kubernetes-validate");
    let built_in = documents(yaml)
        .iter()
        .filter(|object| {
            !matches!(
                object["kind"].as_str(),
                Some("Certificate" | "PrometheusRule")
            )
        })
        .count();
    for version in KUBERNETES_VERSIONS {
        let file = file.to_str().expect("a UTF-8 path");
        let output = run(&validator, &["--strict", "-k", version, file])
            .unwrap_or_else(|error| panic!("Kubernetes {version} refused the rendering:\n{error}"));
        for line in output.lines().filter(|line| line.starts_with("WARN")) {
            assert!(
                line.contains("kind Certificate with api version cert-manager.io/v1")
                    || line
                        .contains("kind PrometheusRule with api version monitoring.coreos.com/v1"),
                "Kubernetes {version}: {line}"
            );
        }
        let passed = output.matches(" passed for resource ").count();
        assert_eq!(passed, built_in, "Kubernetes {version}:\n{output}");
    }
}

/// What a 3-node Raft cluster needs of its StatefulSet and Services, read off a rendering.
fn assert_runs_as_a_raft_cluster(objects: &[Value], replicas: u64) {
    let set = object(objects, "StatefulSet", "tickd");
    let spec = &set["spec"];
    assert_eq!(spec["replicas"], replicas);
    assert_eq!(
        spec["podManagementPolicy"], "Parallel",
        "an ordered start never gets ready"
    );
    let pod = &spec["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"],
        "/mgmt/health"
    );
    assert!(
        container["livenessProbe"]["httpGet"].is_null()
            && container["livenessProbe"]["tcpSocket"]["port"] == "api",
        "a node that lost its leader must not be killed: {}",
        container["livenessProbe"]
    );
    assert_eq!(
        (
            &pod["securityContext"]["runAsNonRoot"],
            &pod["securityContext"]["seccompProfile"]["type"],
            &container["securityContext"]["readOnlyRootFilesystem"],
            &container["securityContext"]["allowPrivilegeEscalation"],
            &container["securityContext"]["capabilities"]["drop"],
        ),
        (
            &json!(true),
            &json!("RuntimeDefault"),
            &json!(true),
            &json!(false),
            &json!(["ALL"])
        )
    );
    let peers = object(objects, "Service", "tickd-peers");
    assert_eq!(peers["spec"]["clusterIP"], "None");
    assert_eq!(
        peers["spec"]["publishNotReadyAddresses"], true,
        "peers must resolve before they are ready"
    );
    object(objects, "Service", "tickd");
    if replicas > 1 {
        let budget = object(objects, "PodDisruptionBudget", "tickd");
        assert_eq!(budget["spec"]["maxUnavailable"], 1);
    }
}

#[test]
fn the_chart_lints_and_its_renderings_validate_for_the_oldest_and_newest_kubernetes() {
    let with = with_credentials;
    let chart = chart();
    helm(
        &["lint", chart.to_str().expect("a UTF-8 path")],
        &with(&[("tls.existingSecret", "tickd-tls")]),
    )
    .unwrap_or_else(|error| panic!("helm lint: {error}"));

    // Three nodes with `tickd certs` files in a Secret.
    let three = render("ops", &with(&[("tls.existingSecret", "tickd-tls")])).expect("renders");
    validate(&three);
    assert_runs_as_a_raft_cluster(&documents(&three), 3);

    // Five nodes with cert-manager, the scrape annotations and the alert rules.
    let five = render(
        "ops",
        &with(&[
            ("replicas", "5"),
            ("tls.certManager.enabled", "true"),
            ("tls.certManager.issuerRef.name", "tickd-ca"),
            ("metrics.scrapeAnnotations", "true"),
            ("metrics.prometheusRule.enabled", "true"),
        ]),
    )
    .expect("renders");
    validate(&five);
    let objects = documents(&five);
    assert_runs_as_a_raft_cluster(&objects, 5);
    for id in 1..=5 {
        let certificate = object(&objects, "Certificate", &format!("tickd-node-{id}"));
        assert_eq!(
            certificate["spec"]["commonName"],
            format!("tickd-node-{id}")
        );
        assert_eq!(
            certificate["spec"]["dnsNames"][0],
            format!("tickd-{}.tickd-peers.ops.svc.cluster.local", id - 1)
        );
    }
    let cluster_toml = object(&objects, "ConfigMap", "tickd")["data"]["cluster.toml"]
        .as_str()
        .expect("cluster.toml");
    assert!(
        cluster_toml.contains("metrics_require_token = false"),
        "{cluster_toml}"
    );
    let rule = object(&objects, "PrometheusRule", "tickd");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let rules = dir.path().join("rules.json");
    std::fs::write(&rules, rule["spec"].to_string()).expect("write the rules");
    let checked = run(
        &tools::require("promtool"),
        &["check", "rules", rules.to_str().expect("a UTF-8 path")],
    )
    .unwrap_or_else(|error| panic!("promtool refused the PrometheusRule's rules: {error}"));
    assert!(checked.contains("SUCCESS"), "{checked}");
    let alerts = std::fs::read_to_string(repository().join("deploy/prometheus/alerts.yml"))
        .expect("the alert rules");
    assert_eq!(
        rule["spec"],
        documents(&alerts)[0],
        "the PrometheusRule carries deploy/prometheus/alerts.yml"
    );

    // A single node, plain HTTP on purpose.
    let one = render(
        "ops",
        &with(&[
            ("replicas", "1"),
            ("tls.enabled", "false"),
            ("insecure", "true"),
        ]),
    )
    .expect("renders");
    validate(&one);
    assert_runs_as_a_raft_cluster(&documents(&one), 1);
}

#[test]
fn the_chart_refuses_to_render_what_would_not_run() {
    let with = with_credentials;
    let refusals: [(Vec<(&str, &str)>, &str); 5] = [
        (
            with(&[("replicas", "2"), ("tls.existingSecret", "t")]),
            "replicas must be 1, 3 or 5",
        ),
        (
            with(&[("replicas", "4"), ("tls.existingSecret", "t")]),
            "replicas must be 1, 3 or 5",
        ),
        (with(&[("tls.enabled", "false")]), "insecure"),
        (with(&[]), "tls.existingSecret"),
        (
            vec![("tls.existingSecret", "t")],
            "credentials.existingSecret",
        ),
    ];
    for (values, why) in refusals {
        let error = render("ops", &values).expect_err(why);
        assert!(error.contains(why), "{values:?}: {error}");
    }
}

#[test]
fn the_committed_manifests_are_the_charts_rendering_and_validate() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let script = repository().join("scripts/render-manifests");
    run(&script, &[dir.path().to_str().expect("a UTF-8 path")])
        .unwrap_or_else(|error| panic!("scripts/render-manifests: {error}"));
    for (nodes, replicas) in [("3-nodes", 3), ("5-nodes", 5)] {
        for file in ["tickd.yaml", "kustomization.yaml"] {
            let fresh = std::fs::read_to_string(dir.path().join(nodes).join(file))
                .expect("the fresh rendering");
            let committed = repository()
                .join("deploy/kubernetes")
                .join(nodes)
                .join(file);
            let committed = std::fs::read_to_string(&committed)
                .unwrap_or_else(|error| panic!("{}: {error}", committed.display()));
            assert!(
                fresh == committed,
                "deploy/kubernetes/{nodes}/{file} is not what the chart renders: run \
                 scripts/render-manifests and commit the result"
            );
        }
        let kustomized = run(
            &tools::require("kubectl"),
            &[
                "kustomize",
                repository()
                    .join("deploy/kubernetes")
                    .join(nodes)
                    .to_str()
                    .expect("a UTF-8 path"),
            ],
        )
        .unwrap_or_else(|error| panic!("kubectl kustomize {nodes}: {error}"));
        validate(&kustomized);
        let objects = documents(&kustomized);
        assert_runs_as_a_raft_cluster(&objects, replicas);
        assert!(
            objects
                .iter()
                .all(|object| object["metadata"]["namespace"] == "tickd"),
            "every object in the namespace its cluster.toml names"
        );
    }
}

/// One pod of the rendered StatefulSet, played by a `tickd` process in namespaces of its own.
struct Pod {
    child: Child,
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address each pod's DNS name resolves to: a loopback address of its own, so that every
/// node listens on the chart's ports.
fn pod_ip(ordinal: u64) -> String {
    format!("127.0.0.{}", 11 + ordinal)
}

/// The DNS name of pod `ordinal` of release `tickd` in namespace `ops`.
fn pod_host(ordinal: u64) -> String {
    format!("tickd-{ordinal}.tickd-peers.ops.svc.cluster.local")
}

/// Starts pod `ordinal`: host name `tickd-<ordinal>`, `etc` bound at `/etc/tickd`, `data` at
/// `/var/lib/tickd` and `hosts` at `/etc/hosts`, in a UTS and mount namespace of its own (the
/// mount points are made if this machine lacks them), running the container's `args` with
/// `env`, its output in `log`.
fn start_pod(
    ordinal: u64,
    dirs: (&Path, &Path, &Path),
    args: &[String],
    env: &BTreeMap<String, String>,
    log: &Path,
) -> Pod {
    let (etc, data, hosts) = dirs;
    let setup = "hostname \"$0\" && mkdir -p /etc/tickd /var/lib/tickd && \
                 mount --bind \"$1\" /etc/tickd && mount --bind \"$2\" /var/lib/tickd && \
                 mount --bind \"$3\" /etc/hosts && shift 3 && exec \"$@\"";
    let log = std::fs::File::create(log).expect("the pod's log");
    let child = Command::new("unshare")
        .args([
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            setup,
        ])
        .arg(format!("tickd-{ordinal}"))
        .args([etc, data, hosts])
        .arg(tickd_binary())
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("the pod's log"))
        .stderr(log)
        .spawn()
        .expect("start the pod");
    Pod { child }
}

/// The container's environment as Kubernetes builds it: each variable's `secretKeyRef` looked up
/// in the rendered Secret.
fn container_env(container: &Value, secret: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_array()
        .expect("the container's env")
        .iter()
        .map(|variable| {
            let key = &variable["valueFrom"]["secretKeyRef"]["key"];
            let value = secret["stringData"][key.as_str().expect("a secret key")]
                .as_str()
                .unwrap_or_else(|| panic!("the Secret holds no {key}"));
            (
                variable["name"].as_str().expect("a name").to_owned(),
                value.to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_rendered_configuration_runs_a_real_three_node_cluster() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let objects = documents(
        &render(
            "ops",
            &[
                CREDENTIALS.as_slice(),
                &[("tls.existingSecret", "tickd-tls")],
            ]
            .concat(),
        )
        .expect("renders"),
    );
    let cluster_toml = object(&objects, "ConfigMap", "tickd")["data"]["cluster.toml"]
        .as_str()
        .expect("cluster.toml");
    let container =
        &object(&objects, "StatefulSet", "tickd")["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("the container's args")
        .iter()
        .map(|arg| arg.as_str().expect("an argument").to_owned())
        .collect();
    let env = container_env(container, object(&objects, "Secret", "tickd-credentials"));

    // The TLS Secret, as an operator makes it from `tickd certs` files, mounted as files.
    let pki = Pki::create(&scratch.path().join("pki"));
    let hosts: String = (0..3)
        .map(|ordinal| format!("{} {}\n", pod_ip(ordinal), pod_host(ordinal)))
        .collect();
    let hosts_file = scratch.path().join("hosts");
    std::fs::write(&hosts_file, format!("127.0.0.1 localhost\n{hosts}")).expect("hosts");
    let mut pods = Vec::new();
    for ordinal in 0..3u64 {
        let id = ordinal + 1;
        pki.node(id, &[&pod_host(ordinal), "tickd.ops.svc"]);
        let etc = scratch.path().join(format!("pod-{ordinal}/etc"));
        let data = scratch.path().join(format!("pod-{ordinal}/data"));
        std::fs::create_dir_all(etc.join("tls")).expect("the pod's /etc/tickd");
        std::fs::create_dir_all(&data).expect("the pod's volume");
        std::fs::write(etc.join("cluster.toml"), cluster_toml).expect("the ConfigMap's file");
        let log = scratch.path().join(format!("pod-{ordinal}.log"));
        pods.push((ordinal, etc, data, log));
    }
    for (_, etc, _, _) in &pods {
        for file in std::fs::read_dir(pki.dir()).expect("the certificates") {
            let file = file.expect("a certificate file").path();
            let name = file.file_name().expect("a file name").to_owned();
            if name != "ca.key" {
                std::fs::copy(&file, etc.join("tls").join(name)).expect("the Secret's file");
            }
        }
    }
    let running: Vec<Pod> = pods
        .iter()
        .map(|(ordinal, etc, data, log)| {
            start_pod(*ordinal, (etc, data, &hosts_file), &args, &env, log)
        })
        .collect();

    let mut client = tickd_tests::http::client_builder()
        .use_preconfigured_tls(pki.client_config(None))
        .timeout(Duration::from_secs(5));
    for ordinal in 0..3 {
        let address: SocketAddr = format!("{}:9643", pod_ip(ordinal))
            .parse()
            .expect("an address");
        client = client.resolve(&pod_host(ordinal), address);
    }
    let client = client.build().expect("an HTTPS client");
    let url = |ordinal: u64, path: &str| format!("https://{}:9643{path}", pod_host(ordinal));
    let logs = || {
        pods.iter()
            .map(|(ordinal, _, _, log)| {
                format!(
                    "pod {ordinal}:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };

    for ordinal in 0..3 {
        let health = url(ordinal, "/mgmt/health");
        let found = tickd_tests::wait::poll_until(
            Duration::from_secs(60),
            Duration::from_millis(250),
            || async {
                match client.get(&health).send().await {
                    Ok(answer) if answer.status().is_success() => Ok(()),
                    Ok(answer) => Err(format!("{}", answer.status())),
                    Err(error) => Err(error.to_string()),
                }
            },
        )
        .await;
        assert!(
            found.is_ok(),
            "pod {ordinal} never got healthy: {found:?}\n{}",
            logs()
        );
    }

    // Each pod runs the node its ordinal names, at the address the ConfigMap gives it.
    let cluster: Value = client
        .get(url(2, "/api/v1/cluster"))
        .bearer_auth(&env["ACCESS_TOKEN"])
        .send()
        .await
        .expect("the cluster's status")
        .json()
        .await
        .expect("a JSON status");
    for ordinal in 0..3u64 {
        let id = ordinal + 1;
        let member = cluster["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|node| node["id"] == id))
            .unwrap_or_else(|| panic!("node {id} is no member: {cluster}"));
        assert_eq!(
            member["api"],
            format!("{}:9643", pod_host(ordinal)),
            "{cluster}"
        );
    }

    // A registration through one pod, whose ticks another pod's poll URL delivers.
    let registered: Value = client
        .post(url(1, "/api/v1/clocks"))
        .bearer_auth(&env["ACCESS_TOKEN"])
        .json(&json!({"name": "rendered", "schedule": "every.1.seconds", "channel": {"type": "http"}}))
        .send()
        .await
        .expect("a registration")
        .json()
        .await
        .expect("a JSON answer");
    let pop = registered["channel"]["details"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("no poll URL: {registered}"))
        .to_owned();
    assert!(pop.starts_with(&url(1, "/api/v1/queues/")), "{pop}");
    let ticks = eventually(
        "a tick through the rendered cluster",
        Duration::from_secs(20),
        Duration::from_millis(500),
        || async {
            let answer = client
                .get(&pop)
                .send()
                .await
                .map_err(|error| error.to_string())?;
            let ticks: Value = answer.json().await.map_err(|error| error.to_string())?;
            match ticks.as_array() {
                Some(ticks) if !ticks.is_empty() => Ok(ticks.clone()),
                _ => Err(format!("popped {ticks}")),
            }
        },
    )
    .await;
    assert_eq!(ticks[0]["name"], "rendered", "{ticks:?}");
    drop(running);
}
