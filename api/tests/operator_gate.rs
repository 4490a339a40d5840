//! The operator gate at the router (SPEC §4): requests go straight into the router a node
//! serves, without a listener, a process or a cluster around it.
//!
//! Behind the router stands a replica of one node that never formed a cluster (its log and
//! state machine in a temporary RocksDB, as the node opens them): the gates answer before any
//! handler runs, and a handler a token lets through answers what a node without a leader
//! answers, never 401 or 403. `tests/tests/openapi.rs` holds the same rule against a running
//! node, with bodies that would change its cluster.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use tickd_api::{AccessToken, ApiConfig, LinkHosts, PollTracker, router};
use tickd_raft::cluster_clock::ClusterClock;
use tickd_raft::network::{PeerNetwork, PeerSecurity, PeerTransport};
use tickd_raft::secret::ClusterSecret;
use tickd_raft::{Raft, Replica};
use tower::ServiceExt as _;

const ACCESS: &str = "access-token-of-the-clients";
const OPERATOR: &str = "operator-token-of-the-operators";

/// The operations that need the operator token: metrics (by default), backup, restore and
/// the two membership changes. The removal names no node: let through, its handler refuses
/// the id at once (400), where a real id would wait out the removal's deadline for a leader.
const OPERATOR_OPERATIONS: [(Method, &str); 5] = [
    (Method::GET, "/metrics"),
    (Method::GET, "/api/v1/backup"),
    (Method::POST, "/api/v1/restore"),
    (Method::POST, "/api/v1/cluster/nodes"),
    (Method::DELETE, "/api/v1/cluster/nodes/not-a-node-id"),
];

/// Operations every client may call with the access token.
const TOKEN_OPERATIONS: [(Method, &str); 4] = [
    (Method::GET, "/api/v1/clocks"),
    (Method::GET, "/api/v1/cluster"),
    (Method::GET, "/api/v1/stats"),
    (Method::GET, "/api/v1/schedules/preview?schedule=@daily"),
];

/// The router of node 1, whose replica never formed a cluster, and the folder its data lives
/// in (dropped with it).
async fn node_router() -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a data directory");
    let (log_store, state_machine, state) =
        tickd_storage::open(dir.path()).expect("the node's storage opens");
    let transport = PeerTransport::new(
        ClusterSecret::new("the-cluster-secret-of-this-test"),
        Default::default(),
        PeerSecurity::Secret,
    )
    .expect("a peer transport");
    let raft = Raft::new(
        1,
        Arc::new(tickd_raft::timing::raft_config(1_000).expect("a raft configuration")),
        PeerNetwork::new(transport.clone()),
        log_store,
        state_machine,
    )
    .await
    .expect("a consensus core");
    // A short deadline: a handler the gate lets through gives up on the missing leader soon.
    let (replica, proposals) = Replica::new(
        1,
        raft,
        state,
        transport,
        Duration::from_millis(200),
        ClusterClock::new(Duration::from_millis(250)),
    );
    tokio::spawn(proposals);
    let config = ApiConfig {
        token: AccessToken::new(ACCESS),
        public_url: None,
        api_address: "127.0.0.1:7000".to_owned(),
        link_hosts: LinkHosts::Any,
        tls: false,
        rabbit_uri: None,
        webhook_allow_private: false,
        max_clocks: 1_000,
        operator_token: AccessToken::new(OPERATOR),
        metrics_require_token: true,
        max_long_polls: 16,
        max_deliveries: 10,
        strangers: Default::default(),
        dashboard_dir: None,
    };
    let router = router(
        replica,
        config,
        None,
        PollTracker::default(),
        Arc::new(String::new),
        Arc::new(|| Ok::<(), String>(())),
    );
    (router, dir)
}

/// `path` sent with `token` in each of the three forms SPEC §4 allows.
fn with_token(method: &Method, path: &str, token: &str) -> [Request<Body>; 3] {
    let request = |uri: String, authorization: Option<String>| {
        let mut builder = Request::builder().method(method.clone()).uri(uri);
        if let Some(value) = authorization {
            builder = builder.header(header::AUTHORIZATION, value);
        }
        builder
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from("{}"))
            .expect("a request")
    };
    let separator = if path.contains('?') { '&' } else { '?' };
    [
        request(path.to_owned(), Some(format!("Bearer {token}"))),
        request(path.to_owned(), Some(format!("token {token}"))),
        request(format!("{path}{separator}access_token={token}"), None),
    ]
}

async fn status(router: &Router, request: Request<Body>) -> StatusCode {
    router
        .clone()
        .oneshot(request)
        .await
        .expect("the router answers")
        .status()
}

#[tokio::test]
async fn the_access_token_is_refused_by_every_operator_route_and_the_operator_token_passes() {
    let (router, _dir) = node_router().await;
    for (method, path) in &OPERATOR_OPERATIONS {
        for request in with_token(method, path, ACCESS) {
            let uri = request.uri().to_string();
            assert_eq!(
                status(&router, request).await,
                StatusCode::FORBIDDEN,
                "{method} {uri} with the access token"
            );
        }
        let [bearer, token_scheme, in_query] = with_token(method, path, OPERATOR);
        for request in [bearer, token_scheme] {
            let uri = request.uri().to_string();
            let answer = status(&router, request).await;
            assert!(
                answer != StatusCode::FORBIDDEN && answer != StatusCode::UNAUTHORIZED,
                "{method} {uri} with the operator token passes the gate, not {answer}"
            );
        }
        // The operator token is taken from the Authorization header only, never the URL.
        let uri = in_query.uri().to_string();
        assert_eq!(
            status(&router, in_query).await,
            StatusCode::FORBIDDEN,
            "{method} {uri}: the operator token in the query"
        );
    }
    for (method, path) in &TOKEN_OPERATIONS {
        for request in with_token(method, path, ACCESS) {
            let uri = request.uri().to_string();
            let answer = status(&router, request).await;
            assert!(
                answer != StatusCode::FORBIDDEN && answer != StatusCode::UNAUTHORIZED,
                "{method} {uri} with the access token passes the gate, not {answer}"
            );
        }
        let anonymous = Request::builder()
            .method(method.clone())
            .uri(*path)
            .body(Body::empty())
            .expect("a request");
        assert_eq!(
            status(&router, anonymous).await,
            StatusCode::FORBIDDEN,
            "{method} {path} without a token"
        );
    }
}
