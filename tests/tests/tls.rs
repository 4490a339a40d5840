//! TLS on both ports and mutual TLS between nodes, on loopback (the multi-host rig runs the
//! same cluster across network namespaces).
//!
//! The certificates are made with `tickd certs`, as an operator makes them. The refusals are
//! checked from outside, the way an attacker meets them: a connection to the Raft port with
//! no certificate, with one of another CA, with an expired one of the cluster's own CA, and
//! with a valid one naming a node that is not a member — each must fail before any request is
//! answered, be counted in `tickd_tls_refused_total` by reason, and be logged.

use std::time::Duration;

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use reqwest::{Method, StatusCode};
use tickd_tests::api::{self, clock_id};
use tickd_tests::pki::{Identity, Pki, client_config};
use tickd_tests::{NodeId, TestCluster, eventually};

/// The Raft route every refusal is tried on: a read-only status, which a member may ask.
const STATUS_PATH: &str = "/internal/status";

/// An HTTPS client trusting `ca` (a PEM file), presenting `identity` if given.
fn https_client(ca: &std::path::Path, identity: Option<&Identity>) -> reqwest::Client {
    tickd_tests::http::client_builder()
        .tls_backend_preconfigured(client_config(ca, identity))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTPS client")
}

/// GETs the Raft status of `node` with `client`: the HTTP status, or the transport error.
async fn raft_status(
    cluster: &TestCluster,
    node: NodeId,
    client: &reqwest::Client,
) -> Result<StatusCode, String> {
    let url = format!("https://{}{STATUS_PATH}", cluster.raft_addr(node));
    match client.get(url).send().await {
        Ok(response) => Ok(response.status()),
        Err(error) => Err(api::describe(&error)),
    }
}

/// The value of `tickd_tls_refused_total{listener="raft", reason}` on `node`.
async fn refused(cluster: &TestCluster, node: NodeId, reason: &str) -> f64 {
    let (status, _, body) = api::send(api::operator(cluster, Method::GET, node, "/metrics")).await;
    assert_eq!(status, StatusCode::OK, "GET /metrics: {body}");
    let text = body.as_str().unwrap_or_default().to_owned();
    let lines = text.lines().map(|line| Ok(line.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the scrape parses");
    scrape
        .samples
        .iter()
        .filter(|sample| {
            sample.metric == "tickd_tls_refused_total"
                && sample.labels.get("listener") == Some("raft")
                && sample.labels.get("reason") == Some(reason)
        })
        .map(|sample| match sample.value {
            prometheus_parse::Value::Counter(value) | prometheus_parse::Value::Untyped(value) => {
                value
            }
            _ => 0.0,
        })
        .sum()
}

/// A certificate for node `id` on 127.0.0.1, signed by the CA of `pki` but valid only in
/// the past (as one left in place a year too long): what `tickd certs` refuses to make.
fn expired_node_certificate(pki: &Pki, id: NodeId) -> Identity {
    let read = |path: std::path::PathBuf| {
        std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
    };
    let ca_key = KeyPair::from_pem(&read(pki.dir().join("ca.key"))).expect("the CA key");
    let issuer = Issuer::from_ca_cert_pem(&read(pki.ca()), ca_key).expect("the CA certificate");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("parameters");
    params
        .distinguished_name
        .push(DnType::CommonName, format!("tickd-node-{id}"));
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2025, 1, 1);
    let key = KeyPair::generate().expect("a key");
    let certificate = params
        .signed_by(&key, &issuer)
        .expect("a signed certificate");
    let dir = pki.dir().join("expired");
    std::fs::create_dir_all(&dir).expect("a folder for the expired certificate");
    let identity = Identity {
        cert: dir.join(format!("node-{id}.crt")),
        key: dir.join(format!("node-{id}.key")),
    };
    std::fs::write(&identity.cert, certificate.pem()).expect("write the certificate");
    std::fs::write(&identity.key, key.serialize_pem()).expect("write the key");
    identity
}

#[tokio::test]
async fn a_tls_cluster_forms_over_mutual_tls_and_serves_https_only() {
    let cluster = TestCluster::builder().nodes(3).tls().start().await;
    assert!(cluster.api_url(1).starts_with("https://"));

    // Registrations through every node: followers forward to the leader over mutual TLS.
    for node in cluster.node_ids() {
        let (status, _, body) =
            api::register(&cluster, node, &format!("tls-{node}"), "@never").await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "register via node {node}: {body}"
        );
        let id = clock_id(&body);
        let url = body["channel"]["details"]["url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            url.starts_with("https://"),
            "node {node} hands out its poll URL over https: {url:?} (clock {id})"
        );
    }
    let (status, _, body) = api::list(&cluster, 2, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body.as_array().map(Vec::len), Some(3), "{body}");

    // Plain HTTP is not spoken on either port.
    let plain = tickd_tests::http::client_builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("a plain client");
    for url in [
        format!("http://{}/mgmt/health", cluster.api_addr(1)),
        format!("http://{}{STATUS_PATH}", cluster.raft_addr(1)),
    ] {
        let answer = plain.get(&url).send().await;
        assert!(answer.is_err(), "plain HTTP answered on {url}: {answer:?}");
    }
}

#[tokio::test]
async fn the_raft_port_admits_only_a_member_certificate_of_the_cluster_ca() {
    let cluster = TestCluster::builder().nodes(1).tls().start().await;
    let pki = cluster
        .pki()
        .expect("a TLS cluster has certificates")
        .clone();
    let other_ca = Pki::create(&cluster.dir().join("other-ca"));

    // The control: node 1's own certificate is a member's, and is let through.
    let member = Identity {
        cert: pki.dir().join("node-1.crt"),
        key: pki.dir().join("node-1.key"),
    };
    let member_client = https_client(&pki.ca(), Some(&member));
    assert_eq!(
        raft_status(&cluster, 1, &member_client).await,
        Ok(StatusCode::OK)
    );

    let attempts = [
        ("no_certificate", https_client(&pki.ca(), None)),
        (
            "untrusted",
            https_client(&pki.ca(), Some(&other_ca.node(1, &["127.0.0.1"]))),
        ),
        (
            "expired",
            https_client(&pki.ca(), Some(&expired_node_certificate(&pki, 1))),
        ),
        (
            "not_a_member",
            https_client(&pki.ca(), Some(&pki.node(9, &["127.0.0.1"]))),
        ),
        (
            "no_node_id",
            https_client(&pki.ca(), Some(&pki.client("operator"))),
        ),
    ];
    for (reason, client) in &attempts {
        let before = refused(&cluster, 1, reason).await;
        let answer = raft_status(&cluster, 1, client).await;
        assert!(
            answer.is_err(),
            "a connection whose certificate is refused ({reason}) got an answer: {answer:?}"
        );
        eventually(
            &format!("the refusal counted as reason={reason}"),
            Duration::from_secs(5),
            Duration::from_millis(100),
            || async {
                let after = refused(&cluster, 1, reason).await;
                (after > before)
                    .then_some(())
                    .ok_or(format!("{before} then {after}"))
            },
        )
        .await;
    }
    assert!(
        cluster.log(1).contains("TLS connection refused"),
        "the refusals are logged"
    );
}

#[tokio::test]
async fn the_operator_cli_speaks_https_with_the_ca_file() {
    let cluster = TestCluster::builder().nodes(1).tls().start().await;
    let pki = cluster.pki().expect("a TLS cluster has certificates");
    let output = std::process::Command::new(tickd_tests::cluster::tickd_binary())
        .args(["cluster", "status", "--api"])
        .arg(cluster.api_url(1))
        .arg("--ca-file")
        .arg(pki.ca())
        .env("ACCESS_TOKEN", cluster.token())
        .output()
        .expect("run tickd cluster status");
    assert!(
        output.status.success(),
        "tickd cluster status over https: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("leader"), "{stdout}");

    // Without the CA the server's certificate is not trusted, and the CLI says so.
    let untrusted = std::process::Command::new(tickd_tests::cluster::tickd_binary())
        .args(["cluster", "status", "--api"])
        .arg(cluster.api_url(1))
        .env("ACCESS_TOKEN", cluster.token())
        .env_remove("TICKD_CA_FILE")
        .output()
        .expect("run tickd cluster status");
    assert!(
        !untrusted.status.success(),
        "an untrusted server was believed"
    );
}

/// A node dialling a peer checks that the peer's certificate names the node it dials, not
/// only that it is valid for the host: on one machine every member's certificate is valid for
/// 127.0.0.1, so another node's certificate at node 2's address would pass for node 2's.
#[tokio::test]
async fn a_node_presenting_another_nodes_certificate_is_not_added() {
    let cluster = TestCluster::builder()
        .nodes(2)
        .joining([2])
        .tls()
        .start()
        .await;
    let pki = cluster
        .pki()
        .expect("a TLS cluster has certificates")
        .clone();
    let own = Identity {
        cert: pki.dir().join("node-2.crt"),
        key: pki.dir().join("node-2.key"),
    };
    let read = |path: &std::path::Path| {
        std::fs::read(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
    };
    let kept = (read(&own.cert), read(&own.key));
    let put = |cert: &[u8], key: &[u8]| {
        std::fs::write(&own.cert, cert).expect("write node 2's certificate file");
        std::fs::write(&own.key, key).expect("write node 2's key file");
    };

    // Node 2 holds the secret and answers as node 2, but presents node 3's certificate.
    let impostor = pki.node(3, &["127.0.0.1", "localhost"]);
    put(&read(&impostor.cert), &read(&impostor.key));
    cluster.restart(2);
    cluster.wait_serving(2, Duration::from_secs(30)).await;
    let (status, _, body) = api::add_node(&cluster, 1, 2).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let log = cluster.log(1);
    assert!(
        log.contains("names node 3, but node 2 was dialled"),
        "node 1 says why it refused the certificate: {}",
        log.lines()
            .filter(|line| line.contains("challenge"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // The control: with its own certificate back, the same node is added.
    cluster.kill(2);
    put(&kept.0, &kept.1);
    cluster.restart(2);
    cluster.wait_serving(2, Duration::from_secs(30)).await;
    tickd_tests::membership::add_ok(&cluster, 1, 2).await;
}
