//! `tickd clocks list|get|pause|resume|tick`.

use reqwest::Method;
use serde_json::Value;

use crate::cli::client::{AdminClient, CliError};
use crate::cli::{Output, field, table};

/// The clocks collection.
const CLOCKS_PATH: &str = "/api/v1/clocks";

/// The actions of `PUT /api/v1/clocks/{id}/{action}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Stop the scheduled ticks.
    Pause,
    /// Restart them.
    Resume,
    /// Deliver one tick now.
    Tick,
}

impl Action {
    fn path_segment(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Tick => "tick",
        }
    }
}

/// `tickd clocks list`: every clock (the API leaves out PENDING ones, as Ticktok did).
pub async fn list(client: &AdminClient) -> Result<Output, CliError> {
    let clocks = client.get(CLOCKS_PATH).await?;
    let rows: Vec<Vec<String>> = clocks
        .as_array()
        .into_iter()
        .flatten()
        .map(|clock| {
            ["id", "name", "schedule", "status"]
                .iter()
                .map(|key| field(clock, key))
                .collect()
        })
        .collect();
    let text = table::render(&["ID", "NAME", "SCHEDULE", "STATUS"], &rows);
    Ok(Output { json: clocks, text })
}

/// `tickd clocks get ID`.
pub async fn get(client: &AdminClient, id: &str) -> Result<Output, CliError> {
    let clock = client.get(&clock_path(id)).await?;
    Ok(described(clock))
}

/// `tickd clocks pause|resume|tick ID`: the clock after the action.
pub async fn act(client: &AdminClient, id: &str, action: Action) -> Result<Output, CliError> {
    let path = format!("{}/{}", clock_path(id), action.path_segment());
    let clock = client.send(Method::PUT, &path, None).await?;
    Ok(described(clock))
}

/// The path of one clock; the id is percent-encoded, so any input stays one path segment.
fn clock_path(id: &str) -> String {
    let encoded: String = form_urlencoded::byte_serialize(id.as_bytes()).collect();
    format!("{CLOCKS_PATH}/{}", encoded.replace('+', "%20"))
}

fn described(clock: Value) -> Output {
    let text = ["id", "name", "schedule", "status"]
        .iter()
        .map(|key| format!("{key}: {}", field(&clock, key)))
        .collect::<Vec<_>>()
        .join("\n");
    Output { json: clock, text }
}
