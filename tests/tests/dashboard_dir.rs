//! `dashboard_dir`: a static folder served at `/` the way Ticktok served its dashboard's
//! build, on every node, with no token, while the API's routes keep winning over files.

use std::fs;
use std::path::Path;

use reqwest::{Method, StatusCode, header};
use serde_json::Value;
use tickd_tests::api::{self, CLOCKS_PATH, HEALTH_PATH};
use tickd_tests::config::toml_string;
use tickd_tests::{TestCluster, unique_name};

const INDEX: &str = "<!doctype html><title>Ticktok</title><div id=root></div>";
const SCRIPT: &str = "console.log('ticktok dashboard');";
const STYLE: &str = "body { margin: 0 }";
const ICON: &[u8] = &[0, 0, 1, 0, 1, 0, 16, 16];
/// A file beside the served folder, which no request may read.
const OUTSIDE: &str = "not for browsers";

/// The layout of Ticktok's dashboard build (create-react-app's `build/`), plus files whose
/// paths are API routes.
fn write_build(folder: &Path) {
    let write = |relative: &str, bytes: &[u8]| {
        let path = folder.join(relative);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create a folder of the build");
        }
        fs::write(&path, bytes).expect("write a file of the build");
    };
    write("index.html", INDEX.as_bytes());
    write("static/js/main.3f2a1b.js", SCRIPT.as_bytes());
    write("static/css/main.9c8d7e.css", STYLE.as_bytes());
    write("favicon.ico", ICON);
    write("mgmt/health", b"a file where an API route is");
    write("api/v1/clocks", b"a file where an API route is");
}

fn body_text(body: &Value) -> String {
    match body {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[tokio::test]
async fn every_node_serves_the_folder_without_a_token_and_the_api_wins_over_files() {
    let root = tempfile::tempdir().expect("a temporary directory");
    let folder = root.path().join("build");
    write_build(&folder);
    fs::write(root.path().join("outside.txt"), OUTSIDE).expect("write the file beside");
    let folder_value = toml_string(&folder.to_string_lossy());
    let cluster = TestCluster::builder()
        .nodes(3)
        .setting("dashboard_dir", folder_value)
        .start()
        .await;
    let name = unique_name("dashboard");
    let (status, _, created) = api::register(&cluster, 1, &name, "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{created}");

    for node in cluster.node_ids() {
        let get = |path: &str| api::send(api::anonymous(&cluster, Method::GET, node, path));
        for (path, content, content_type) in [
            ("/", INDEX, "text/html"),
            ("/index.html", INDEX, "text/html"),
            ("/static/js/main.3f2a1b.js", SCRIPT, "javascript"),
            ("/static/css/main.9c8d7e.css", STYLE, "text/css"),
        ] {
            let (status, headers, body) = get(path).await;
            assert_eq!(status, StatusCode::OK, "node {node} {path}: {body}");
            assert_eq!(body_text(&body), content, "node {node} {path}");
            let served_as = headers
                .get(header::CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default();
            assert!(
                served_as.contains(content_type),
                "node {node} {path} served as {served_as:?}"
            );
        }
        let icon = cluster
            .client()
            .get(format!("{}/favicon.ico", cluster.api_url(node)))
            .send()
            .await
            .expect("GET /favicon.ico");
        assert_eq!(icon.status(), StatusCode::OK);
        assert_eq!(icon.bytes().await.expect("the icon's bytes").as_ref(), ICON);

        // The API wins: health and the clock list, not the files at their paths.
        let (status, _, health) = get(HEALTH_PATH).await;
        assert_eq!(status, StatusCode::OK, "{health}");
        assert_eq!(health["status"], "UP", "node {node}: {health}");
        let (status, _, clocks) =
            api::send(api::authed(&cluster, Method::GET, node, CLOCKS_PATH)).await;
        assert_eq!(status, StatusCode::OK, "{clocks}");
        assert!(
            clocks
                .as_array()
                .is_some_and(|list| list.iter().any(|clock| clock["name"] == name.as_str())),
            "node {node}: {clocks}"
        );
        // Without the token the clock route still refuses: files never stand in for it.
        let (status, _, refused) = get(CLOCKS_PATH).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");

        // A path with no file is the API's JSON 404.
        let (status, _, missing) = get("/static/js/missing.js").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
        assert_eq!(missing["status"], 404, "node {node}: {missing}");

        // Nothing beside the folder is reachable.
        for path in [
            "/%2e%2e/outside.txt",
            "/..%2foutside.txt",
            "/static/%2e%2e/%2e%2e/outside.txt",
        ] {
            let (status, _, body) = get(path).await;
            assert_ne!(status, StatusCode::OK, "node {node} {path}: {body}");
            assert!(
                !body_text(&body).contains(OUTSIDE),
                "node {node} {path} leaked the file beside the folder"
            );
        }
        // The folder is read-only.
        let (status, _, body) =
            api::send(api::anonymous(&cluster, Method::POST, node, "/index.html")).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
    }
}

#[tokio::test]
async fn without_dashboard_dir_the_root_is_tickds_own_page_and_other_paths_the_apis_404() {
    let cluster = TestCluster::start(1).await;
    let (status, headers, page) = api::send(api::anonymous(&cluster, Method::GET, 1, "/")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(body_text(&page).contains("/dashboard/app.js"), "{page}");
    let policy = headers
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    assert!(policy.contains("script-src 'self'"), "{policy:?}");
    for asset in ["/dashboard/app.js", "/dashboard/style.css"] {
        let (status, _, body) = api::send(api::anonymous(&cluster, Method::GET, 1, asset)).await;
        assert_eq!(status, StatusCode::OK, "{asset}: {body}");
    }
    let (status, _, body) =
        api::send(api::anonymous(&cluster, Method::GET, 1, "/static/x.js")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["status"], 404, "{body}");
}
