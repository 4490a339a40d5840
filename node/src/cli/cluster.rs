//! `tickd cluster status|add-node|remove-node`.

use reqwest::Method;
use serde_json::{Value, json};

use crate::cli::client::{AdminClient, CliError};
use crate::cli::{Output, field, table};

/// The cluster status route.
const CLUSTER_PATH: &str = "/api/v1/cluster";
/// The membership route.
const NODES_PATH: &str = "/api/v1/cluster/nodes";

/// `tickd cluster status`: the leader, the term, and every member as the node sees it.
pub async fn status(client: &AdminClient) -> Result<Output, CliError> {
    let view = client.get(CLUSTER_PATH).await?;
    let rows: Vec<Vec<String>> = members(&view, "nodes")
        .map(|node| {
            vec![
                field(node, "id"),
                field(node, "api"),
                field(node, "raft"),
                yes_no(node, "voter"),
                field(node, "role"),
                yes_no(node, "reachable"),
                field(node, "last_applied"),
                clock_offset(node),
                yes_no(node, "clock_within_bound"),
                field(node, "version"),
                field(node, "levels"),
            ]
        })
        .collect();
    let text = format!(
        "leader: {}  term: {}  cluster level: {}\n{}",
        field(&view, "leader"),
        field(&view, "term"),
        field(&view, "cluster_level"),
        table::render(
            &[
                "ID",
                "API",
                "RAFT",
                "VOTER",
                "ROLE",
                "REACHABLE",
                "APPLIED",
                "CLOCK OFFSET",
                "CLOCK OK",
                "VERSION",
                "LEVELS",
            ],
            &rows
        )
    );
    Ok(Output { json: view, text })
}

/// `tickd cluster add-node`: make a running node a voter (it catches up as a learner first).
pub async fn add_node(
    client: &AdminClient,
    id: u64,
    api: &str,
    raft: &str,
) -> Result<Output, CliError> {
    let body = json!({ "id": id, "api": api, "raft": raft });
    let members = client.send(Method::POST, NODES_PATH, Some(&body)).await?;
    let text = format!("node {id} is a voter now\n{}", membership_table(&members));
    Ok(Output {
        json: members,
        text,
    })
}

/// `tickd cluster remove-node`: take a member out of the cluster.
pub async fn remove_node(client: &AdminClient, id: u64) -> Result<Output, CliError> {
    let path = format!("{NODES_PATH}/{id}");
    let members = client.send(Method::DELETE, &path, None).await?;
    let text = format!(
        "node {id} is no longer a member; stop its process and wipe its data directory\n{}",
        membership_table(&members)
    );
    Ok(Output {
        json: members,
        text,
    })
}

fn membership_table(members: &Value) -> String {
    let row = |voter: &str| {
        let voter = voter.to_string();
        move |node: &Value| {
            vec![
                field(node, "id"),
                field(node, "api"),
                field(node, "raft"),
                voter.clone(),
            ]
        }
    };
    let rows: Vec<Vec<String>> = self::members(members, "voters")
        .map(row("yes"))
        .chain(self::members(members, "learners").map(row("no")))
        .collect();
    table::render(&["ID", "API", "RAFT", "VOTER"], &rows)
}

fn members<'a>(view: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    view.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A member's clock offset from the node asked, with its error: `+5002±1 ms`.
fn clock_offset(node: &Value) -> String {
    match (
        node.get("clock_offset_ms").and_then(Value::as_i64),
        node.get("clock_offset_uncertainty_ms")
            .and_then(Value::as_u64),
    ) {
        (Some(offset), Some(error)) => format!("{offset:+}±{error} ms"),
        _ => "-".into(),
    }
}

fn yes_no(value: &Value, key: &str) -> String {
    match value.get(key).and_then(Value::as_bool) {
        Some(true) => "yes".into(),
        Some(false) => "no".into(),
        None => "-".into(),
    }
}
