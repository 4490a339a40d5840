//! RabbitMQ over TLS: the machine's broker on its `amqps://` listener (127.0.0.1:5671, a
//! certificate signed by a CA of its own, which `scripts/test` makes), real processes.

use std::time::Duration;

use reqwest::StatusCode;
use tickd_tests::api::register;
use tickd_tests::rabbit::{self, Consumers, TLS_BROKER_CA};
use tickd_tests::{TestCluster, eventually, unique_name};

/// A cluster with mutual TLS between its nodes, publishing to `uri`; `trust_broker_ca` names
/// the broker's CA in `rabbit_ca_file`.
async fn cluster(nodes: usize, uri: &str, trust_broker_ca: bool) -> TestCluster {
    let mut builder = TestCluster::builder()
        .nodes(nodes)
        .tls()
        .rabbit_uri(Some(uri.to_owned()));
    if trust_broker_ca {
        builder = builder.setting("rabbit_ca_file", format!("{TLS_BROKER_CA:?}"));
    }
    builder.start().await
}

#[tokio::test]
async fn a_tls_cluster_publishes_ticks_over_amqps_and_hands_out_the_amqps_uri() {
    let uri = rabbit::tls_broker().await;
    let cluster = cluster(3, &uri, true).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");

    let (status, _, clock) =
        register(&cluster, follower, &unique_name("amqps"), "every.1.seconds").await;
    assert_eq!(status, StatusCode::CREATED, "{clock}");
    assert_eq!(
        clock["channel"]["details"]["uri"], uri,
        "the channel carries the URI consumers use, amqps:// included: {clock}"
    );
    let queue = clock["channel"]["details"]["queue"]
        .as_str()
        .expect("a RabbitMQ channel");
    let consumers = Consumers::start(&uri, queue, 1).await;
    eventually(
        "three ticks over amqps://",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async { (consumers.received().len() >= 3).then_some(()) },
    )
    .await;
    consumers.stop().await;
}

#[tokio::test]
async fn a_broker_certificate_signed_by_an_untrusted_ca_is_refused() {
    let uri = rabbit::tls_broker().await;
    // No `rabbit_ca_file`: only the system's roots, none of which signed the broker's
    // certificate. The connection must fail rather than fall back to trusting it.
    let cluster = cluster(1, &uri, false).await;
    let node = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let (status, _, body) = register(&cluster, node, &unique_name("untrusted"), "@never").await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "no queue can be declared on a broker whose certificate is not trusted: {body}"
    );
    let reason = body.to_string();
    assert!(
        reason.contains("UnknownIssuer") || reason.contains("unknown issuer"),
        "the answer says why the broker was refused: {reason}"
    );
}
