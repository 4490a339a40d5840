//! Tests of the harness itself: the parts that need no `tickd` binary.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use tickd_tests::config::{ClusterConfig, toml_string};
use tickd_tests::ports;
use tickd_tests::wait::{eventually, poll_until};

#[test]
fn one_allocation_returns_distinct_bindable_ports() {
    let allocated = ports::allocate(10);
    assert_eq!(allocated.len(), 10);
    let distinct: HashSet<u16> = allocated.iter().copied().collect();
    assert_eq!(distinct.len(), 10, "duplicate ports in {allocated:?}");
    // All of them at once, as a cluster's nodes will bind them.
    let listeners: Vec<TcpListener> = allocated
        .iter()
        .map(|&port| {
            TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
                .unwrap_or_else(|error| panic!("bind allocated port {port}: {error}"))
        })
        .collect();
    assert_eq!(listeners.len(), 10);
}

#[test]
fn later_allocations_never_repeat_a_port() {
    let mut seen = HashSet::new();
    for _ in 0..20 {
        for port in ports::allocate(6) {
            assert!(seen.insert(port), "port {port} handed out twice");
        }
    }
}

#[test]
fn ports_lie_outside_the_ephemeral_range_when_there_is_room() {
    let Some((low, high)) = ports::ephemeral_range() else {
        return;
    };
    let room = u32::from(low).saturating_sub(10_000) >= 1_000
        || u32::from(high) + 1_000 <= u32::from(u16::MAX);
    if !room {
        return;
    }
    for port in ports::allocate(20) {
        assert!(
            !(low..=high).contains(&port),
            "port {port} is in the ephemeral range {low}..={high}"
        );
    }
}

#[test]
fn local_config_renders_the_documented_shape() {
    let config = ClusterConfig::local(2, &[7001, 7002, 7003, 7004]);
    assert_eq!(
        config.to_toml(),
        r#"token = "test-token"
operator_token = "test-operator-token"
secret = "test-secret"

[[node]]
id = 1
api = "127.0.0.1:7001"
raft = "127.0.0.1:7002"
data_dir = "node1"

[[node]]
id = 2
api = "127.0.0.1:7003"
raft = "127.0.0.1:7004"
data_dir = "node2"
"#
    );
}

#[test]
fn optional_keys_are_written_only_when_set() {
    let mut config = ClusterConfig::local(1, &[7001, 7002]);
    config.rabbit_uri = Some("amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    config.snapshot_every = Some(50);
    config.max_clocks = Some(1_000_000);
    config.operator_token = None;
    config
        .settings
        .push(("disk_reserve_mb".to_owned(), "4".to_owned()));
    let text = config.to_toml();
    let header: Vec<&str> = text.lines().take_while(|line| !line.is_empty()).collect();
    assert_eq!(
        header,
        [
            r#"token = "test-token""#,
            r#"secret = "test-secret""#,
            r#"rabbit_uri = "amqp://guest:guest@127.0.0.1:5672/%2f""#,
            "snapshot_every = 50",
            "max_clocks = 1000000",
            "disk_reserve_mb = 4",
        ]
    );
}

#[test]
fn config_is_written_to_the_given_path() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("cluster.toml");
    let config = ClusterConfig::local(3, &ports::allocate(6));
    config.write(&path).expect("write cluster.toml");
    let written = std::fs::read_to_string(&path).expect("read cluster.toml back");
    assert_eq!(written, config.to_toml());
    assert_eq!(written.matches("[[node]]").count(), 3);
    assert_eq!(
        config.node(2).map(|node| node.data_dir.as_str()),
        Some("node2")
    );
}

#[test]
fn strings_are_escaped_as_toml_basic_strings() {
    assert_eq!(toml_string("plain"), r#""plain""#);
    assert_eq!(toml_string(r#"a"b\c"#), r#""a\"b\\c""#);
    assert_eq!(toml_string("line\nbreak\ttab"), r#""line\nbreak\ttab""#);
    assert_eq!(toml_string("bell\u{7}"), r#""bell\u0007""#);
    assert_eq!(toml_string("ünïcødé ✓"), "\"ünïcødé ✓\"");
}

#[tokio::test]
async fn eventually_returns_the_first_success() {
    let mut calls = 0;
    let value = eventually(
        "the third call",
        Duration::from_secs(5),
        Duration::from_millis(1),
        || {
            calls += 1;
            let current = calls;
            async move { (current >= 3).then_some(current) }
        },
    )
    .await;
    assert_eq!(value, 3);
}

#[tokio::test]
#[should_panic(expected = "waiting for the impossible; last: not yet: still no")]
async fn eventually_panics_naming_what_it_waited_for() {
    eventually(
        "the impossible",
        Duration::from_millis(50),
        Duration::from_millis(5),
        || async { Err::<(), _>("not yet: still no") },
    )
    .await;
}

#[tokio::test]
async fn a_hung_check_cannot_outlast_the_timeout() {
    let started = Instant::now();
    let outcome = poll_until(
        Duration::from_millis(100),
        Duration::from_millis(10),
        || async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Some(())
        },
    )
    .await;
    assert!(outcome.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "waited {:?}",
        started.elapsed()
    );
}
