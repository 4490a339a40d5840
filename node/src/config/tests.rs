//! The cluster file's schema, resolution and checks, tested on files written here.

use super::*;
use std::collections::BTreeSet;
use std::net::IpAddr;

const THREE_NODES: &str = r#"
    token = "ticktok-zY3wpR"
    operator_token = "operator-sample"
    secret = "change-me"
    [[node]]
    id = 1
    api = "127.0.0.1:9643"
    raft = "127.0.0.1:9743"
    data_dir = "data/node1"
    [[node]]
    id = 2
    api = "127.0.0.1:9644"
    raft = "127.0.0.1:9744"
    data_dir = "data/node2"
    [[node]]
    id = 3
    api = "127.0.0.1:9645"
    raft = "127.0.0.1:9745"
    data_dir = "data/node3"
"#;

fn load(text: &str, id: NodeId) -> Result<NodeConfig, ConfigError> {
    load_under(text, id, &Environment::default())
}

/// [`load`] in an environment that sets `environment`.
fn load_under(
    text: &str,
    id: NodeId,
    environment: &Environment,
) -> Result<NodeConfig, ConfigError> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, text).expect("write the file");
    NodeConfig::from_file(&path, id, environment)
}

/// A file mounted from a Kubernetes ConfigMap holds no credentials: the Secret sets them in
/// the environment, where they win over the file and are checked as its keys are.
#[test]
fn the_environment_sets_the_credentials_over_the_file() {
    let bare = THREE_NODES
        .replace("token = \"ticktok-zY3wpR\"\n", "")
        .replace("operator_token = \"operator-sample\"\n", "")
        .replace("secret = \"change-me\"\n", "");
    let error = load(&bare, 1).expect_err("no secret anywhere").to_string();
    assert!(error.contains("TICKD_SECRET"), "{error}");
    let secrets = Environment {
        secret: Some("s3cret-from-the-env".into()),
        token: Some("t0ken-from-the-env".into()),
        operator_token: Some("0perator-from-the-env".into()),
    };
    let config = load_under(&bare, 2, &secrets).expect("credentials from the environment");
    assert_eq!(
        (
            config.secret.as_deref(),
            config.token.as_deref(),
            config.operator_token.as_deref()
        ),
        (
            Some("s3cret-from-the-env"),
            Some("t0ken-from-the-env"),
            Some("0perator-from-the-env")
        )
    );
    // Over a file that sets them too, the environment wins.
    let config = load_under(THREE_NODES, 1, &secrets).expect("both");
    assert_eq!(config.secret.as_deref(), Some("s3cret-from-the-env"));
    // Checked as the keys are: the sample's secret off loopback is refused from there too,
    // and the operator token may not be the access token.
    let exposed = bare.replace("127.0.0.1:9745", "10.0.0.3:9745");
    let sample = Environment {
        secret: Some("change-me".into()),
        ..secrets.clone()
    };
    let error = load_under(&exposed, 1, &sample).expect_err("the sample secret on a LAN");
    assert!(error.to_string().contains("change-me"), "{error}");
    let same = Environment {
        operator_token: secrets.token.clone(),
        ..secrets
    };
    let error = load_under(&bare, 1, &same).expect_err("one token for both roles");
    assert!(error.to_string().contains("operator_token"), "{error}");
}

#[test]
fn a_dashboard_dir_without_an_index_is_refused_and_one_with_it_is_resolved() {
    let build = tempfile::tempdir().expect("temporary directory");
    let with_dir = format!("dashboard_dir = {:?}\n{THREE_NODES}", build.path());
    let error = load(&with_dir, 1).expect_err("an empty folder").to_string();
    assert!(
        error.contains("dashboard_dir") && error.contains("index.html"),
        "{error}"
    );
    std::fs::write(build.path().join("index.html"), "<!doctype html>").expect("write");
    let config = load(&with_dir, 1).expect("a folder with an index");
    assert_eq!(config.dashboard_dir.as_deref(), Some(build.path()));
}

#[test]
fn resolves_a_node_of_a_three_node_cluster() {
    let config = load(THREE_NODES, 2).expect("a valid file");
    assert_eq!(config.id, 2);
    assert_eq!(config.api.to_string(), "127.0.0.1:9644");
    assert_eq!(config.members.len(), 3);
    assert!(config.data_dir.ends_with("data/node2"));
    assert!(
        config.data_dir.is_absolute(),
        "relative to the file's directory"
    );
    assert_eq!(config.max_clocks, DEFAULT_MAX_CLOCKS);
    assert!(
        config.metrics_require_token,
        "metrics need the token by default"
    );
    let open = load(
        &THREE_NODES.replace("secret =", "metrics_require_token = false\nsecret ="),
        1,
    )
    .expect("a valid file");
    assert!(!open.metrics_require_token);
}

#[test]
fn refuses_what_cannot_run() {
    let cases = [
        (THREE_NODES.replace("id = 3", "id = 2"), "appears twice"),
        (THREE_NODES.replace("9745", "9744"), "used twice"),
        (
            THREE_NODES.replace("127.0.0.1:9645", "localhost"),
            "not a host:port",
        ),
        (THREE_NODES.replace("\"change-me\"", "\"\""), "secret"),
        (
            THREE_NODES.replace("data_dir = \"data/node3\"", ""),
            "malformed",
        ),
        (THREE_NODES.replace("token =", "tokne ="), "malformed"),
        ("this is [not toml".to_string(), "malformed"),
    ];
    for (text, expected) in cases {
        let error = load(&text, 1).expect_err(expected).to_string();
        assert!(
            error.contains(expected),
            "{error:?} should mention {expected:?}"
        );
    }
}

#[test]
fn dial_overrides_name_known_peers_and_real_addresses() {
    let with_dial = |table: &str| format!("{THREE_NODES}\n[node.dial]\n{table}\n");
    let config = load(&with_dial("\"1\" = \"127.0.0.1:7001\""), 3).expect("valid");
    assert_eq!(
        config.dial.get(&1).map(String::as_str),
        Some("127.0.0.1:7001")
    );
    let unknown = load(&with_dial("\"9\" = \"127.0.0.1:7001\""), 3).expect_err("node 9");
    assert!(unknown.to_string().contains("not a node id"), "{unknown}");
    let bad = load(&with_dial("\"1\" = \"nowhere\""), 3).expect_err("bad address");
    assert!(bad.to_string().contains("not a host:port"), "{bad}");
}

#[test]
fn joining_nodes_are_not_founding_members() {
    let four = "\n[[node]]\nid = 4\napi = \"127.0.0.1:9646\"\nraft = \"127.0.0.1:9746\"\n\
                data_dir = \"data/node4\"\njoin = true\n";
    let text = format!("{THREE_NODES}{four}");
    let joiner = load(&text, 4).expect("node 4 may join");
    assert!(joiner.join);
    assert_eq!(
        joiner.members.keys().copied().collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let founder = load(&text, 1).expect("node 1 founds");
    assert!(!founder.join && !founder.members.contains_key(&4));
    let nobody = THREE_NODES.replace("data_dir = ", "join = true\n        data_dir = ");
    let error = load(&nobody, 1).expect_err("no founding member");
    assert!(error.to_string().contains("join = true"), "{error}");
}

#[test]
fn max_deliveries_defaults_to_10_and_is_bounded() {
    let with = |line: &str| {
        load(
            &THREE_NODES.replace("secret =", &format!("{line}\nsecret =")),
            1,
        )
    };
    assert_eq!(
        load(THREE_NODES, 1).expect("a valid file").max_deliveries,
        DEFAULT_MAX_DELIVERIES
    );
    assert_eq!(
        with("max_deliveries = 3")
            .expect("a valid file")
            .max_deliveries,
        3
    );
    for bad in ["max_deliveries = 0", "max_deliveries = 1001"] {
        let error = with(bad).expect_err("refused");
        assert!(
            error.to_string().contains("max_deliveries"),
            "{bad}: {error}"
        );
    }
}

#[test]
fn the_disk_reserve_is_read_in_mib_and_an_overflowing_one_is_refused() {
    let config = load(THREE_NODES, 1).expect("a valid file");
    assert_eq!(config.disk_reserve_bytes, DEFAULT_DISK_RESERVE_MB << 20);
    let small = load(
        &THREE_NODES.replace("secret =", "disk_reserve_mb = 3\nsecret ="),
        1,
    )
    .expect("a valid file");
    assert_eq!(small.disk_reserve_bytes, 3 << 20);
    let error = load(
        &THREE_NODES.replace(
            "secret =",
            &format!("disk_reserve_mb = {}\nsecret =", u64::MAX >> 1),
        ),
        1,
    )
    .expect_err("refused");
    assert!(error.to_string().contains("disk_reserve_mb"), "{error}");
}

#[test]
fn the_stranger_limit_has_defaults_can_be_turned_off_and_refuses_an_empty_burst() {
    let config = load(THREE_NODES, 1).expect("a valid file");
    assert_eq!(config.strangers, StrangerQuota::default());
    let with = |settings: &str| THREE_NODES.replace("secret =", &format!("{settings}\nsecret ="));
    let off = load(
        &with("unauthenticated_rate_per_second = 0\nunauthenticated_burst = 0"),
        1,
    )
    .expect("the limit may be turned off");
    assert_eq!(off.strangers.rate_per_second, 0);
    let tight = load(
        &with("unauthenticated_rate_per_second = 2\nunauthenticated_burst = 7"),
        1,
    )
    .expect("a valid file");
    assert_eq!(
        tight.strangers,
        StrangerQuota {
            rate_per_second: 2,
            burst: 7
        }
    );
    let error = load(&with("unauthenticated_burst = 0"), 1).expect_err("refused");
    assert!(
        error.to_string().contains("unauthenticated_burst"),
        "{error}"
    );
}

#[test]
fn a_multi_node_file_must_name_its_token() {
    let error = load(&THREE_NODES.replace("token = \"ticktok-zY3wpR\"", ""), 1)
        .expect_err("no token for three nodes")
        .to_string();
    assert!(
        error.contains("sets no `token`") && error.contains("token = "),
        "{error}"
    );
    let one = "secret = \"s\"\n[[node]]\nid = 1\napi = \"127.0.0.1:9643\"\n\
               raft = \"127.0.0.1:9743\"\ndata_dir = \"d\"\n";
    assert!(load(one, 1).is_ok(), "a single node may generate its token");
}

#[test]
fn the_shipped_credentials_are_refused_off_loopback() {
    let exposed = THREE_NODES.replace("127.0.0.1:9745", "10.0.0.3:9745");
    let error = load(&exposed, 1).expect_err("the sample secret on a LAN");
    assert!(
        error.to_string().contains("change-me") && error.to_string().contains("10.0.0.3"),
        "{error}"
    );
    let own_secret = exposed.replace("\"change-me\"", "\"s3cret-of-our-own\"");
    let error = load(&own_secret, 1).expect_err("the sample token on a LAN");
    assert!(error.to_string().contains("ticktok-zY3wpR"), "{error}");
    let wildcard = THREE_NODES
        .replace("127.0.0.1:9643", "0.0.0.0:9643")
        .replace("\"change-me\"", "\"s3cret-of-our-own\"");
    assert!(load(&wildcard, 1).is_err(), "0.0.0.0 is off loopback");
    let own_token = own_secret.replace("ticktok-zY3wpR", "t0ken-of-our-own");
    let error = load(&own_token, 1).expect_err("the sample operator token on a LAN");
    assert!(error.to_string().contains("operator-sample"), "{error}");
    let own = own_token.replace("operator-sample", "0perator-of-our-own");
    // Credentials of its own pass; node 3's Raft on the LAN still needs TLS or `insecure`,
    // or node 1 would send the secret there in clear.
    let error = load(&own, 1).expect_err("the secret in clear to node 3");
    assert!(
        error.to_string().contains("node 3 at 10.0.0.3:9745"),
        "{error}"
    );
    let insecure = own.replace("secret =", "insecure = true\nsecret =");
    assert!(
        load(&insecure, 1).is_ok(),
        "credentials of its own on a LAN"
    );
    assert!(
        load(THREE_NODES, 1).is_ok(),
        "the sample stays usable on loopback"
    );
}

/// The three-node file with credentials of its own, which any address off loopback needs.
fn with_own_credentials() -> String {
    THREE_NODES
        .replace("\"change-me\"", "\"s3cret-of-our-own\"")
        .replace("ticktok-zY3wpR", "t0ken-of-our-own")
        .replace("operator-sample", "0perator-of-our-own")
}

/// The hostile probe's N3: a node whose own listeners are on loopback still refused to
/// start when it would send the secret in clear to a peer's Raft address, or a `dial`
/// address, off loopback.
#[test]
fn the_secret_goes_in_clear_to_no_peer_off_loopback() {
    let own = with_own_credentials();
    let remote_peer = own.replace("127.0.0.1:9744", "192.0.2.10:9744");
    let error = load(&remote_peer, 1)
        .expect_err("node 2's Raft is off loopback")
        .to_string();
    assert!(
        error.contains("secret in clear to node 2 at 192.0.2.10:9744"),
        "{error}"
    );
    // The table follows the last [[node]]: node 3 dials node 1 off loopback.
    let dialled = format!("{own}\n[node.dial]\n\"1\" = \"192.0.2.11:9743\"\n");
    let error = load(&dialled, 3)
        .expect_err("the dial address is off loopback")
        .to_string();
    assert!(error.contains("node 1 at 192.0.2.11:9743"), "{error}");
    let insecure = remote_peer.replace("secret =", "insecure = true\nsecret =");
    assert!(load(&insecure, 1).is_ok(), "the operator insisted");
}

#[test]
fn plain_http_off_loopback_needs_insecure_or_tls() {
    let own = with_own_credentials().replace("127.0.0.1:9643", "0.0.0.0:9643");
    let error = load(&own, 1)
        .expect_err("plain HTTP on 0.0.0.0")
        .to_string();
    assert!(
        error.contains("plain HTTP on 0.0.0.0:9643") && error.contains("insecure = true"),
        "{error}"
    );
    assert!(
        load(&own, 2).is_ok(),
        "node 2's own listeners stay on loopback, and it dials node 1's Raft on loopback"
    );
    let insecure = own.replace("secret =", "insecure = true\nsecret =");
    // On every interface the node also needs the hosts its links may name.
    let error = load(&insecure, 1)
        .expect_err("no api_hosts for 0.0.0.0")
        .to_string();
    assert!(error.contains("api_hosts"), "{error}");
    let own = own.replace("secret =", "api_hosts = [\"tickd.example:9643\"]\nsecret =");
    let insecure = own.replace("secret =", "insecure = true\nsecret =");
    assert!(load(&insecure, 1).is_ok(), "the operator insisted");
    let tls = own
        .replace("secret =", "ca_file = \"tls/ca.crt\"\nsecret =")
        .replace(
            "data_dir = \"data/node1\"",
            "data_dir = \"data/node1\"\ncert_file = \"tls/n1.crt\"\nkey_file = \"tls/n1.key\"",
        );
    let config = load(&tls, 1).expect("TLS off loopback");
    let files = config.tls.expect("TLS files");
    assert!(files.ca.ends_with("tls/ca.crt") && files.ca.is_absolute());
    assert!(files.cert.ends_with("tls/n1.crt") && files.key.ends_with("tls/n1.key"));
    assert!(!files.api_require_client_cert);
}

#[test]
fn tls_needs_the_ca_and_each_nodes_certificate_and_key() {
    let ca_only = THREE_NODES.replace("secret =", "ca_file = \"ca.crt\"\nsecret =");
    let error = load(&ca_only, 2)
        .expect_err("no certificate for node 2")
        .to_string();
    assert!(error.contains("node 2 lacks `cert_file`"), "{error}");
    let cert_only = THREE_NODES.replace(
        "data_dir = \"data/node2\"",
        "data_dir = \"data/node2\"\ncert_file = \"n2.crt\"\nkey_file = \"n2.key\"",
    );
    let error = load(&cert_only, 2).expect_err("no CA").to_string();
    assert!(error.contains("sets no `ca_file`"), "{error}");
    let client_certs = THREE_NODES.replace("secret =", "api_require_client_cert = true\nsecret =");
    let error = load(&client_certs, 1).expect_err("client certificates without TLS");
    assert!(error.to_string().contains("needs TLS"), "{error}");
}

#[test]
fn addresses_may_name_hosts() {
    let named = with_own_credentials()
        .replace("127.0.0.1:9744", "localhost:9744")
        .replace("127.0.0.1:9645", "node3.tickd.invalid:9645");
    let config = load(&named, 2).expect("DNS names are addresses");
    assert_eq!(config.raft_address, "localhost:9744");
    assert!(config.raft.ip().is_loopback(), "{}", config.raft);
    assert_eq!(
        config.members.get(&3).map(|node| node.api.as_str()),
        Some("node3.tickd.invalid:9645"),
        "a peer's name is kept as written, for its certificate"
    );
    let error = load(&named, 3).expect_err("node 3 cannot bind a name that does not resolve");
    assert!(error.to_string().contains("node3.tickd.invalid"), "{error}");
}

#[test]
fn listener_limits_have_defaults_and_are_checked() {
    let config = load(THREE_NODES, 1).expect("a valid file");
    let api = &config.api_limits;
    assert_eq!(
        api.header_read_timeout,
        listener::DEFAULT_HEADER_READ_TIMEOUT
    );
    assert_eq!(api.max_connections, listener::DEFAULT_API_MAX_CONNECTIONS);
    assert_eq!(api.reserved_for_members, 0);
    let raft = &config.raft_limits;
    assert_eq!(raft.max_connections, listener::DEFAULT_RAFT_MAX_CONNECTIONS);
    assert_eq!(
        raft.reserved_for_members,
        listener::DEFAULT_RAFT_RESERVED_FOR_MEMBERS
    );
    assert_eq!(
        raft.members,
        HashSet::from([IpAddr::from(Ipv4Addr::LOCALHOST)])
    );
    let with = |keys: &str| THREE_NODES.replace("secret =", &format!("{keys}\nsecret ="));
    let set = load(
        &with(
            "header_read_timeout_ms = 1500\napi_max_connections_per_address = 7\n\
             raft_max_connections = 40\nraft_reserved_connections = 10\n\
             write_timeout_ms = 2500",
        ),
        1,
    )
    .expect("a valid file");
    assert_eq!(
        set.api_limits.header_read_timeout,
        Duration::from_millis(1500)
    );
    assert_eq!(
        set.raft_limits.header_read_timeout,
        Duration::from_millis(1500)
    );
    assert_eq!(
        (set.api_limits.write_timeout, set.raft_limits.write_timeout),
        (Duration::from_millis(2500), Duration::from_millis(2500))
    );
    assert_eq!(set.api_limits.max_connections_per_address, 7);
    assert_eq!(
        (
            set.raft_limits.max_connections,
            set.raft_limits.reserved_for_members
        ),
        (40, 10)
    );
    let small = load(&with("raft_max_connections = 10"), 1).expect("a valid file");
    assert_eq!(
        small.raft_limits.reserved_for_members, 5,
        "half of a small cap"
    );
    for (keys, expected) in [
        ("request_timeout_ms = 35000", "would cut long polls"),
        ("body_timeout_ms = 0", "body_timeout_ms"),
        ("write_timeout_ms = 0", "write_timeout_ms"),
        ("api_max_connections = 0", "api_max_connections"),
        (
            "raft_max_connections = 8\nraft_reserved_connections = 8",
            "below the cap",
        ),
    ] {
        let error = load(&with(keys), 1).expect_err(keys).to_string();
        assert!(error.contains(expected), "{keys}: {error}");
    }
}

#[test]
fn names_the_known_nodes_for_an_unknown_id() {
    let error = load(THREE_NODES, 7)
        .expect_err("node 7 is not listed")
        .to_string();
    assert!(
        error.contains("node 7") && error.contains("1, 2, 3"),
        "{error}"
    );
}

/// The keys the parser accepts where `text` puts the unknown key `zz_unknown`, as its refusal
/// lists them ("unknown field `zz_unknown`, expected one of `a`, `b`, …").
fn keys_accepted(text: &str) -> BTreeSet<String> {
    let error = toml::from_str::<ClusterFile>(text)
        .expect_err("an unknown key is refused")
        .to_string();
    let (_, expected) = error
        .split_once("expected one of")
        .unwrap_or_else(|| panic!("the refusal lists no keys: {error}"));
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The keys the configuration reference lists: the first cell of every table row that is a
/// key alone (`| \`key\` |`).
fn keys_documented() -> BTreeSet<String> {
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    let text = std::fs::read_to_string(&reference).expect("docs/configuration.md");
    text.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` |"))
        .map(|(key, _)| key)
        .filter(|key| {
            key.bytes()
                .all(|byte| byte.is_ascii_lowercase() || byte == b'_')
        })
        .map(str::to_owned)
        .collect()
}

/// docs/configuration.md lists every key the parser accepts, top-level and per node, and no
/// key it refuses.
#[test]
fn the_configuration_reference_lists_exactly_the_keys_the_parser_accepts() {
    let top = keys_accepted(&format!("zz_unknown = 1\n{THREE_NODES}"));
    let node = keys_accepted(&THREE_NODES.replace("id = 1\n", "id = 1\n    zz_unknown = 1\n"));
    assert!(
        top.contains("secret") && node.contains("data_dir"),
        "{top:?} {node:?}"
    );
    let accepted: BTreeSet<String> = top.union(&node).cloned().collect();
    let documented = keys_documented();
    let missing: Vec<&String> = accepted.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&accepted).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/configuration.md misses {missing:?} and lists keys the parser refuses: {unknown:?}"
    );
}
