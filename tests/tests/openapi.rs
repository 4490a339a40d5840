//! The OpenAPI document a node serves at `/api/v1/openapi.json`: it validates as OpenAPI 3.1
//! (checked by openapi-spec-validator), every operation it describes is served, and no route
//! that a node serves is missing from it.
//!
//! The last one is probed from outside: a request to a path no route serves reaches the
//! router's fallback (404, "there is no resource at …"), a request with the wrong method to a
//! served path gets a 405. Every path named in the README, the manual, ARCHITECTURE.md and the admin
//! CLI's source is tried with every method; whatever a node serves there must be in the
//! document. (Inside the API crate, a unit test refuses any route registered without its
//! description.)
//!
//! The document also lists what the access token opens: every described operation is sent the
//! access token, in each of its three forms, and only the operator's answer 403.

use std::path::Path;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tickd_tests::api::{
    BACKUP_PATH, CLUSTER_PATH, OPENAPI_PATH, anonymous, authed, collect, list, operator, register,
    send,
};
use tickd_tests::{TestCluster, ports, tools, unique_name};

/// The methods probed on every path.
const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
];

/// The operations of a document, as (method, path template).
fn operations(document: &Value) -> Vec<(Method, String)> {
    let paths = document["paths"]
        .as_object()
        .expect("the document has paths");
    let mut found = Vec::new();
    for (path, item) in paths {
        for method in METHODS {
            if item.get(method.as_str().to_lowercase()).is_some() {
                found.push((method, path.clone()));
            }
        }
    }
    found
}

/// A concrete path for a template: every parameter becomes `x`, an action becomes `tick`.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|segment| match segment {
            "{action}" => "tick",
            _ if segment.starts_with('{') => "x",
            _ => segment,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether a concrete path is an instance of a template.
fn instance_of(path: &str, template: &str) -> bool {
    let (path, template): (Vec<_>, Vec<_>) =
        (path.split('/').collect(), template.split('/').collect());
    path.len() == template.len()
        && path
            .iter()
            .zip(&template)
            .all(|(segment, pattern)| pattern.starts_with('{') || segment == pattern)
}

/// Whether a reply comes from the router's fallback: no route serves the path.
fn unrouted(status: StatusCode, body: &Value) -> bool {
    status == StatusCode::NOT_FOUND
        && body["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("there is no resource at"))
}

async fn served_document(cluster: &TestCluster) -> Value {
    let (status, headers, document) = send(anonymous(cluster, Method::GET, 1, OPENAPI_PATH)).await;
    assert_eq!(status, StatusCode::OK, "{document}");
    assert_eq!(headers["content-type"], "application/json");
    document
}

#[tokio::test]
async fn the_served_document_validates_as_openapi_3_1() {
    let validator = tools::require("openapi-spec-validator");
    let cluster = TestCluster::start(1).await;
    let document = served_document(&cluster).await;
    assert_eq!(document["openapi"], "3.1.0");
    let file = cluster.dir().join("openapi.json");
    std::fs::write(&file, document.to_string()).expect("the document is written");
    let output = std::process::Command::new(validator)
        .args(["--schema", "3.1"])
        .arg(&file)
        .output()
        .expect("openapi-spec-validator runs");
    // The validator quotes the whole document after its verdict; the verdict comes first.
    let verdict: String = String::from_utf8_lossy(&output.stdout)
        .chars()
        .take(600)
        .collect();
    assert!(
        output.status.success(),
        "the document is not valid OpenAPI 3.1: {verdict}… {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A request on node 1 that carries the access token and the operator token, so that no route
/// refuses it for its credentials before routing has a say.
fn with_both_tokens(cluster: &TestCluster, method: Method, path: &str) -> reqwest::RequestBuilder {
    // The operator token is taken only in the header; the access token also in the URL.
    let separator = if path.contains('?') { '&' } else { '?' };
    let path = format!("{path}{separator}access_token={}", cluster.token());
    operator(cluster, method, 1, &path)
}

/// The status and body of a request; an event stream's body is not read (it never ends).
async fn reply(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("an answer");
    let streams = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    if streams {
        return (response.status(), Value::Null);
    }
    let (status, _, body) = collect(response).await.expect("a whole answer");
    (status, body)
}

#[tokio::test]
async fn every_described_operation_is_served_and_every_served_route_is_described() {
    let cluster = TestCluster::start(1).await;
    let document = served_document(&cluster).await;
    let described = operations(&document);
    assert!(described.len() > 10, "only {} operations", described.len());

    // Each described operation reaches a handler; each other method on its path is a 405.
    for (method, template) in &described {
        let path = concrete(template);
        let (status, body) = reply(with_both_tokens(&cluster, method.clone(), &path)).await;
        assert!(
            status != StatusCode::METHOD_NOT_ALLOWED && !unrouted(status, &body),
            "{method} {template} is described but not served: {status} {body}"
        );
        for other in METHODS {
            if described.iter().any(|(m, t)| *m == other && t == template) {
                continue;
            }
            let (status, body) = reply(with_both_tokens(&cluster, other.clone(), &path)).await;
            assert_eq!(
                status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{other} {path} is served but not described: {body}"
            );
        }
    }

    // Every path the project's documents and CLI name: whatever is served there is described.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let named = named_paths(&root);
    assert!(
        named.len() >= 8,
        "only {} paths named: {named:?}",
        named.len()
    );
    for path in &named {
        for method in METHODS {
            let (status, body) = reply(with_both_tokens(&cluster, method.clone(), path)).await;
            if status == StatusCode::METHOD_NOT_ALLOWED || unrouted(status, &body) {
                continue;
            }
            assert!(
                described
                    .iter()
                    .any(|(m, template)| *m == method && instance_of(path, template)),
                "{method} {path} is served ({status}) but not described"
            );
        }
    }
}

/// The operations that need the operator token (SPEC §4): metrics (by default), backup,
/// restore and the two membership changes.
const OPERATOR_OPERATIONS: [(Method, &str); 5] = [
    (Method::GET, "/metrics"),
    (Method::GET, "/api/v1/backup"),
    (Method::POST, "/api/v1/restore"),
    (Method::POST, "/api/v1/cluster/nodes"),
    (Method::DELETE, "/api/v1/cluster/nodes/{id}"),
];

/// Every way a client may present the access token (SPEC §4), on `path` of node 1.
fn with_access_token(
    cluster: &TestCluster,
    method: &Method,
    path: &str,
) -> [reqwest::RequestBuilder; 3] {
    let separator = if path.contains('?') { '&' } else { '?' };
    let in_query = format!("{path}{separator}access_token={}", cluster.token());
    [
        anonymous(cluster, method.clone(), 1, path).bearer_auth(cluster.token()),
        anonymous(cluster, method.clone(), 1, path).header(
            reqwest::header::AUTHORIZATION,
            format!("token {}", cluster.token()),
        ),
        anonymous(cluster, method.clone(), 1, &in_query),
    ]
}

/// The access token, which every client holds, opens every route but the operator's. Each
/// operator route is sent a request that would change the cluster if it were let through (a
/// restore of the cluster's own backup, a new node, the removal of the only one); each is
/// refused with 403 and the cluster is as it was. Every other operation that needs a token
/// takes the access token, so the list above is the whole of the operator's.
#[tokio::test]
async fn the_access_token_opens_every_route_but_the_operators() {
    let cluster = TestCluster::start(1).await;
    let (status, _, body) = register(&cluster, 1, &unique_name("kept"), "every.1.hours").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, before) = send(operator(&cluster, Method::GET, 1, BACKUP_PATH)).await;
    assert_eq!(status, StatusCode::OK, "{before}");
    let document = served_document(&cluster).await;
    let described = operations(&document);
    for (method, template) in &OPERATOR_OPERATIONS {
        assert!(
            described.iter().any(|(m, t)| m == method && t == template),
            "{method} {template} is not described"
        );
    }
    let [api, raft] = ports::allocate(2)[..] else {
        unreachable!("two ports were asked for")
    };
    let new_node = json!({
        "id": 2,
        "api": format!("127.0.0.1:{api}"),
        "raft": format!("127.0.0.1:{raft}"),
    });

    for (method, template) in &described {
        let path = match template.as_str() {
            "/api/v1/cluster/nodes/{id}" => template.replace("{id}", "1"),
            _ => concrete(template),
        };
        let body = match template.as_str() {
            "/api/v1/restore" => before.clone(),
            "/api/v1/cluster/nodes" => new_node.clone(),
            _ => Value::Null,
        };
        let for_operator = OPERATOR_OPERATIONS
            .iter()
            .any(|(m, t)| m == method && t == template);
        for request in with_access_token(&cluster, method, &path) {
            let request = if body.is_null() {
                request
            } else {
                request.json(&body)
            };
            let (status, answer) = reply(request).await;
            if for_operator {
                assert_eq!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{method} {path} with the access token: {answer}"
                );
            } else {
                assert!(
                    status != StatusCode::FORBIDDEN && status != StatusCode::UNAUTHORIZED,
                    "{method} {path} refused the access token ({status}): {answer}"
                );
            }
        }
    }

    let (status, _, clocks) = list(&cluster, 1, "").await;
    assert_eq!(status, StatusCode::OK, "{clocks}");
    assert_eq!(
        clocks.as_array().map(Vec::len),
        Some(1),
        "the refused requests changed no clock: {clocks}"
    );
    let (status, _, view) = send(authed(&cluster, Method::GET, 1, CLUSTER_PATH)).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        view["nodes"].as_array().map(Vec::len),
        Some(1),
        "the refused requests changed no membership: {view}"
    );
}

/// The pages of the manual (docs/) that name API paths.
const MANUAL_PAGES: [&str; 7] = [
    "api.md",
    "delivery.md",
    "configuration.md",
    "operating.md",
    "tls.md",
    "upgrading.md",
    "kubernetes.md",
];

/// The API paths named in the README, the manual, ARCHITECTURE.md and the admin CLI's
/// source, made concrete like [`concrete`] does (`<id>` and `{id}` become `x`).
fn named_paths(root: &Path) -> Vec<String> {
    let mut sources = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    sources.extend(MANUAL_PAGES.iter().map(|page| root.join("docs").join(page)));
    let cli = root.join("node/src/cli");
    for entry in std::fs::read_dir(&cli).expect("the CLI's sources are readable") {
        sources.push(entry.expect("a directory entry").path());
    }
    let mut paths = Vec::new();
    for source in sources {
        let text = std::fs::read_to_string(&source).expect("a source is readable");
        for start in ["/api/v1/", "/mgmt/", "/metrics"] {
            for (at, _) in text.match_indices(start) {
                let path: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || "/_.-{}<>".contains(*c))
                    .collect();
                let path = path.trim_end_matches(['.', '/']);
                let path = path
                    .split('/')
                    .map(|segment| {
                        if segment.starts_with('<') || segment.starts_with('{') {
                            "x"
                        } else {
                            segment
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("/");
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
        }
    }
    paths
}
