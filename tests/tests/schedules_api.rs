//! Calendar schedules through the API of a real 3-node cluster (issue 44, SPEC §1–§3): the
//! preview and its daylight-saving marks, errors that name the column, `next_tick` in the
//! clock resource, the RabbitMQ queue name's limit, and the zone database each node reports.

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tickd_tests::api::{
    CLOCKS_PATH, action, authed, clock_id, cluster_json, operator, register, send,
};
use tickd_tests::{TestCluster, rabbit, unique_name};

const PREVIEW_PATH: &str = "/api/v1/schedules/preview";

async fn preview(cluster: &TestCluster, query: &str) -> (StatusCode, Value) {
    let path = format!("{PREVIEW_PATH}?{query}");
    let (status, _, body) = send(authed(cluster, Method::GET, 2, &path)).await;
    (status, body)
}

fn encoded(schedule: &str) -> String {
    schedule
        .replace('%', "%25")
        .replace(' ', "%20")
        .replace('/', "%2F")
        .replace('|', "%7C")
        .replace('=', "%3D")
        .replace('*', "%2A")
        .replace('#', "%23")
        .replace('+', "%2B")
        .replace(':', "%3A")
}

#[tokio::test]
async fn the_preview_lists_instants_and_marks_daylight_saving() {
    let cluster = TestCluster::start(3).await;
    // A year and more of 02:30 in Berlin crosses one night without 02:30 and one with two.
    let schedule = "TZ=Europe/Berlin 30 2 * * *";
    let (status, body) = preview(
        &cluster,
        &format!("schedule={}&count=400", encoded(schedule)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["schedule"], schedule);
    assert_eq!(body["zone"], "Europe/Berlin");
    let instants = body["instants"].as_array().cloned().unwrap_or_default();
    assert_eq!(instants.len(), 400, "{body}");
    let marked = |mark: &str| -> Vec<Value> {
        instants
            .iter()
            .filter(|instant| instant["dst"] == mark)
            .cloned()
            .collect()
    };
    let gaps = marked("gap");
    let repeats = marked("repeat");
    assert!(!gaps.is_empty() && !repeats.is_empty(), "{body}");
    for gap in &gaps {
        // Skipped 02:30 fires at the jump: 03:00 summer time.
        let local = gap["local"].as_str().unwrap_or_default();
        assert!(local.ends_with("T03:00:00.000+02:00"), "{gap}");
    }
    for repeat in &repeats {
        // The first of the two 02:30s: still summer time.
        let local = repeat["local"].as_str().unwrap_or_default();
        assert!(local.ends_with("T02:30:00.000+02:00"), "{repeat}");
    }
    let unmarked = instants
        .iter()
        .filter(|instant| instant["dst"].is_null())
        .count();
    assert_eq!(unmarked + gaps.len() + repeats.len(), 400);
    for instant in &instants {
        let at = instant["at"].as_str().unwrap_or_default();
        assert!(at.ends_with(".000Z"), "{instant}");
    }

    // Ticktok's forms preview in UTC; @never has no instants.
    let (status, body) = preview(&cluster, "schedule=every.10.seconds&count=3").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["zone"], "UTC");
    assert_eq!(body["instants"].as_array().map(Vec::len), Some(3), "{body}");
    let (status, body) = preview(&cluster, "schedule=%40never").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["instants"], Value::Array(Vec::new()), "{body}");
}

#[tokio::test]
async fn bad_schedules_and_counts_are_400s_that_say_where() {
    let cluster = TestCluster::start(3).await;
    let cases = [
        (format!("schedule={}", encoded("0 25 * * *")), "at column 3"),
        (
            format!("schedule={}", encoded("TZ=Mars/Base @daily")),
            "unknown time zone",
        ),
        (format!("schedule={}", encoded("0 0 30 2 *")), "never fires"),
        (
            "schedule=every.1.seconds&count=0".to_owned(),
            "count must be from 1 to 1000",
        ),
        (
            "schedule=every.1.seconds&count=1001".to_owned(),
            "count must be from 1 to 1000",
        ),
        ("count=3".to_owned(), "needs schedule="),
    ];
    for (query, says) in cases {
        let (status, body) = preview(&cluster, &query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{query}: {body}");
    }
    let (status, _, body) = register(&cluster, 1, &unique_name("bad"), "0 0 * * MON#6").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("at column 13"),
        "{body}"
    );
    let (status, _, body) = send(tickd_tests::api::anonymous(
        &cluster,
        Method::GET,
        1,
        &format!("{PREVIEW_PATH}?schedule=%40daily"),
    ))
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}

#[tokio::test]
async fn clocks_show_their_next_tick_until_paused() {
    let cluster = TestCluster::start(3).await;
    let schedule = "TZ=America/New_York every.MON|WED|FRI.at.09:30";
    let (status, _, created) = register(&cluster, 1, &unique_name("weekday"), schedule).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let next = created["next_tick"].as_str().unwrap_or_default().to_owned();
    // 09:30 in New York is 13:30 or 14:30 UTC.
    assert!(
        next.ends_with("T13:30:00.000Z") || next.ends_with("T14:30:00.000Z"),
        "{created}"
    );
    let local = created["next_tick_local"].as_str().unwrap_or_default();
    assert!(local.contains("T09:30:00.000-0"), "{created}");
    let id = clock_id(&created);
    let (_, _, listed) = send(authed(
        &cluster,
        Method::GET,
        3,
        &format!("{CLOCKS_PATH}?id={id}"),
    ))
    .await;
    assert_eq!(listed[0]["next_tick"], next.as_str(), "{listed}");
    let (status, _, paused) = action(&cluster, 2, &id, "pause").await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert!(paused["next_tick"].is_null(), "{paused}");
    let (_, _, never) = register(&cluster, 1, &unique_name("never"), "@never").await;
    assert!(never["next_tick"].is_null(), "{never}");
}

#[tokio::test]
async fn a_rabbit_queue_name_over_255_bytes_is_refused() {
    let cluster = TestCluster::builder()
        .nodes(1)
        .rabbit_uri(Some(rabbit::broker().await))
        .start()
        .await;
    let name = "n".repeat(200);
    let schedule = format!("0 0 * * {}", "MON,".repeat(12).trim_end_matches(','));
    let (status, _, body) = register(&cluster, 1, &name, &schedule).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap_or_default().contains("255"),
        "{body}"
    );
    let (status, _, body) = register(&cluster, 1, &unique_name("short"), &schedule).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn every_node_reports_the_zone_database_it_computes_with() {
    let cluster = TestCluster::start(3).await;
    let view = cluster_json(&cluster, 1).await;
    let nodes = view["nodes"].as_array().cloned().unwrap_or_default();
    assert_eq!(nodes.len(), 3, "{view}");
    let versions: Vec<&str> = nodes
        .iter()
        .map(|node| node["zone_database"].as_str().unwrap_or_default())
        .collect();
    assert!(
        versions
            .iter()
            .all(|version| version.len() == 5 && version.starts_with("20")),
        "{view}"
    );
    let text = operator(&cluster, Method::GET, 2, "/metrics")
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("a body");
    let line = format!("tickd_zone_database_info{{version=\"{}\"}} 1", versions[0]);
    assert!(text.contains(&line), "no {line:?} in the metrics");
}
