//! tickd's OCI image (`scripts/image`) as users run it: three containers of it on a podman
//! network, the cluster formed by the containers' names.
//!
//! The image is built from the binary under test (the suite's debug build; a release is built
//! the same way from the release binary), twice, and must come out the same. The cluster's file
//! is mounted read-only, the credentials come from the environment, each node's id from its
//! host name, its data from a named volume; the root filesystem is read-only. Then the faults a
//! container platform deals out: a container killed and started again, a container cut off the
//! network and reconnected, a container removed and recreated on its volume. After each, no
//! acknowledged registration is lost, ticks keep coming, and health and `GET /api/v1/cluster`
//! say what happened.
//!
//! podman, buildah and runc come from `scripts/test` (`ensure_containers`), with the project's
//! `deploy/containers/containers.conf`; a missing one fails the test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tickd_tests::cluster::tickd_binary;
use tickd_tests::{eventually, ports};

const ACCESS_TOKEN: &str = "access-in-containers-0123456789";
const OPERATOR_TOKEN: &str = "operator-in-containers-0123456789";
const SECRET: &str = "secret-in-containers-0123456789";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_path_buf()
}

/// Runs podman with the project's containers.conf; its stdout, or the failure.
fn podman(args: &[&str]) -> Result<String, String> {
    let output = Command::new("podman")
        .args(args)
        .env(
            "CONTAINERS_CONF",
            repository().join("deploy/containers/containers.conf"),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| {
            panic!("podman cannot be run ({error}): scripts/test installs it (ensure_containers)")
        });
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(format!(
            "podman {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn must(args: &[&str]) -> String {
    podman(args).unwrap_or_else(|error| panic!("{error}"))
}

/// `scripts/image` of the binary under test, tagged `tag`: the digest it prints last.
fn build_image(tag: &str) -> String {
    let output = Command::new(repository().join("scripts/image"))
        .arg("--binary")
        .arg(tickd_binary())
        .args(["--tag", tag])
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/image");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "scripts/image failed: {}{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.lines().last().unwrap_or_default().to_owned()
}

/// The names of one test's objects, removed when it ends whatever happened.
struct Scope {
    prefix: String,
    image: String,
}

impl Scope {
    fn container(&self, ordinal: usize) -> String {
        format!("{}-{ordinal}", self.prefix)
    }

    fn volume(&self, ordinal: usize) -> String {
        format!("{}-data-{ordinal}", self.prefix)
    }

    fn network(&self) -> String {
        format!("{}-net", self.prefix)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        for ordinal in 0..3 {
            let _ = podman(&["rm", "-f", "-t", "0", &self.container(ordinal)]);
            let _ = podman(&["volume", "rm", "-f", &self.volume(ordinal)]);
        }
        let _ = podman(&["network", "rm", "-f", &self.network()]);
        let _ = podman(&["rmi", "-f", &self.image]);
    }
}

/// Whether a RocksDB database (its `CURRENT` file) lies anywhere under `dir`.
fn holds_a_database(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let path = entry.path();
            path.file_name().is_some_and(|name| name == "CURRENT")
                || (path.is_dir() && holds_a_database(&path))
        })
}

/// The cluster file: the nodes named as the containers' network aliases, plain HTTP on the
/// containers' own network (`insecure`), links built on the ports published on loopback.
fn cluster_file(published: &[u16]) -> String {
    let hosts: Vec<String> = published
        .iter()
        .map(|port| format!("\"127.0.0.1:{port}\""))
        .collect();
    let mut file = format!("insecure = true\napi_hosts = [{}]\n", hosts.join(", "));
    for ordinal in 0..3 {
        file.push_str(&format!(
            "\n[[node]]\nid = {id}\napi = \"tickd-{ordinal}:9643\"\nraft = \"tickd-{ordinal}:9743\"\n\
             data_dir = \"/var/lib/tickd\"\n",
            id = ordinal + 1
        ));
    }
    file
}

/// Starts container `ordinal` of the cluster on its volume.
fn run_container(scope: &Scope, ordinal: usize, config: &Path, port: u16) {
    let name = scope.container(ordinal);
    let alias = format!("tickd-{ordinal}");
    let publish = format!("127.0.0.1:{port}:9643");
    let mount = format!("{}:/etc/tickd/cluster.toml:ro", config.display());
    let volume = format!("{}:/var/lib/tickd", scope.volume(ordinal));
    let network = scope.network();
    let env = [
        format!("ACCESS_TOKEN={ACCESS_TOKEN}"),
        format!("OPERATOR_TOKEN={OPERATOR_TOKEN}"),
        format!("TICKD_SECRET={SECRET}"),
    ];
    let mut args = vec![
        "run",
        "-d",
        "--name",
        &name,
        "--hostname",
        &alias,
        "--network",
        &network,
        "--network-alias",
        &alias,
        "-p",
        &publish,
        "-v",
        &mount,
        "-v",
        &volume,
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
    ];
    for variable in &env {
        args.extend(["-e", variable]);
    }
    args.push(&scope.image);
    must(&args);
}

/// The JSON answer to `request`, or why there is none.
async fn json_of(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let answer = request.send().await.map_err(|error| error.to_string())?;
    answer.json().await.map_err(|error| error.to_string())
}

/// The cluster as seen through `port`, or why not.
async fn cluster_status(client: &reqwest::Client, port: u16) -> Result<Value, String> {
    let url = format!("http://127.0.0.1:{port}/api/v1/cluster");
    json_of(client.get(url).bearer_auth(ACCESS_TOKEN)).await
}

/// Waits until the node behind `port` says UP.
async fn healthy(client: &reqwest::Client, port: u16) {
    eventually(
        "a node to say UP",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let answer = client
                .get(format!("http://127.0.0.1:{port}/mgmt/health"))
                .send()
                .await
                .map_err(|error| error.to_string())?;
            if answer.status().is_success() {
                Ok(())
            } else {
                Err(answer.status().to_string())
            }
        },
    )
    .await;
}

/// Waits until `port`'s view of the cluster has node `id` reachable as `reachable` says.
async fn member_reachable(client: &reqwest::Client, port: u16, id: u64, reachable: bool) {
    eventually(
        "the cluster status to show the member's state",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let status = cluster_status(client, port).await?;
            let member = status["nodes"]
                .as_array()
                .and_then(|nodes| nodes.iter().find(|node| node["id"] == id))
                .ok_or_else(|| format!("no node {id}: {status}"))?;
            if member["reachable"] == reachable {
                Ok(())
            } else {
                Err(format!("{status}"))
            }
        },
    )
    .await;
}

/// Registers an http clock named `name` through `port`; its poll URL.
async fn register(client: &reqwest::Client, port: u16, name: &str) -> Result<String, String> {
    let answer = json_of(
        client
            .post(format!("http://127.0.0.1:{port}/api/v1/clocks"))
            .bearer_auth(ACCESS_TOKEN)
            .json(
                &json!({"name": name, "schedule": "every.1.seconds", "channel": {"type": "http"}}),
            ),
    )
    .await?;
    answer["channel"]["details"]["url"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no poll URL: {answer}"))
}

/// Waits for a tick on the poll URL `pop`.
async fn ticks_arrive(client: &reqwest::Client, pop: &str) {
    eventually(
        "a tick from the containers",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            let ticks = json_of(client.get(pop)).await?;
            match ticks.as_array() {
                Some(ticks) if !ticks.is_empty() => Ok(()),
                _ => Err(format!("popped {ticks}")),
            }
        },
    )
    .await;
}

/// Registers a clock through any of `ports`, retrying through the others while one is down,
/// until one acknowledges it; its poll URL.
async fn register_somewhere(client: &reqwest::Client, ports: &[u16], name: &str) -> String {
    eventually(
        "a registration to be acknowledged",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            let mut last = String::new();
            for port in ports {
                match register(client, *port, name).await {
                    Ok(pop) => return Ok(pop),
                    Err(error) => last = error,
                }
            }
            Err(last)
        },
    )
    .await
}

#[tokio::test]
async fn three_containers_of_the_image_form_a_cluster_and_survive_what_containers_go_through() {
    let prefix = format!("tickd-test-{}", std::process::id());
    let scope = Scope {
        image: format!("localhost/{prefix}:image"),
        prefix,
    };
    let first = build_image(&scope.image);
    assert!(first.starts_with("sha256:"), "{first}");
    assert_eq!(
        build_image(&scope.image),
        first,
        "one binary and one commit must make one image"
    );
    let user = must(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.User}}",
        &scope.image,
    ]);
    assert_eq!(user, "65532:65532", "the image runs as a user of its own");
    let shell = podman(&[
        "run",
        "--rm",
        "--entrypoint",
        "/bin/sh",
        &scope.image,
        "-c",
        "true",
    ])
    .expect_err("the image has no shell");
    assert!(
        shell.contains("/bin/sh: no such file or directory"),
        "{shell}"
    );
    let version = must(&["run", "--rm", &scope.image, "--version"]);
    assert!(version.starts_with("tickd "), "{version}");

    let dir = tempfile::tempdir().expect("a scratch directory");
    let published = ports::allocate(3);
    let config = dir.path().join("cluster.toml");
    std::fs::write(&config, cluster_file(&published)).expect("the cluster file");
    // Read by the containers' user, as a ConfigMap's file is.
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("the cluster file readable");
    must(&["network", "create", &scope.network()]);
    for (ordinal, port) in published.iter().enumerate() {
        run_container(&scope, ordinal, &config, *port);
    }
    let client = tickd_tests::http::client_builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client");
    for port in &published {
        healthy(&client, *port).await;
    }
    let mut acknowledged = vec![];
    let pop = register_somewhere(&client, &published, "before").await;
    acknowledged.push("before");
    ticks_arrive(&client, &pop).await;

    // A container killed: the others keep serving; started again, it rejoins.
    must(&["kill", &scope.container(1)]);
    let rest = [published[0], published[2]];
    member_reachable(&client, published[0], 2, false).await;
    register_somewhere(&client, &rest, "while-killed").await;
    acknowledged.push("while-killed");
    must(&["start", &scope.container(1)]);
    healthy(&client, published[1]).await;
    member_reachable(&client, published[0], 2, true).await;

    // A container cut off the network: unreachable to the others, back once reconnected. It
    // comes back with its address, as a host does when its link returns (its listeners are
    // bound to the address its name resolved to when it started).
    let address = must(&[
        "inspect",
        "--format",
        &format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            scope.network()
        ),
        &scope.container(2),
    ]);
    must(&[
        "network",
        "disconnect",
        &scope.network(),
        &scope.container(2),
    ]);
    member_reachable(&client, published[0], 3, false).await;
    register_somewhere(&client, &published[..2], "while-cut-off").await;
    acknowledged.push("while-cut-off");
    must(&[
        "network",
        "connect",
        "--alias",
        "tickd-2",
        "--ip",
        &address,
        &scope.network(),
        &scope.container(2),
    ]);
    member_reachable(&client, published[0], 3, true).await;

    // A container removed and recreated on its volume: the same node, with its log.
    must(&["rm", "-f", "-t", "0", &scope.container(0)]);
    let kept = must(&[
        "volume",
        "inspect",
        "--format",
        "{{.Mountpoint}}",
        &scope.volume(0),
    ]);
    assert!(
        holds_a_database(Path::new(&kept)),
        "node 1's volume holds no RocksDB database once its container is gone: {kept}"
    );
    register_somewhere(&client, &published[1..], "while-removed").await;
    acknowledged.push("while-removed");
    run_container(&scope, 0, &config, published[0]);
    healthy(&client, published[0]).await;
    member_reachable(&client, published[1], 1, true).await;

    // Nothing acknowledged is lost, whichever node is asked, and ticks still come.
    for port in &published {
        let url = format!("http://127.0.0.1:{port}/api/v1/clocks");
        let listed = json_of(client.get(url).bearer_auth(ACCESS_TOKEN))
            .await
            .unwrap_or_else(|error| panic!("the clocks through port {port}: {error}"));
        for name in &acknowledged {
            assert!(
                listed.to_string().contains(&format!("\"{name}\"")),
                "{name} is missing through port {port}: {listed}"
            );
        }
    }
    ticks_arrive(&client, &pop).await;
}
