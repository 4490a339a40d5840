//! Log entries from a newer binary: how a node recognises one it cannot apply, and stops.
//!
//! The leader raises the cluster level, and with it the command kinds the log may carry, only
//! once every voter advertises support for the new level ([`crate::level_monitor`]). An entry
//! this binary cannot apply can still reach it: a voter downgraded after the level was raised,
//! a learner, or a leader whose binary ignores the rule. Before levels such an append failed
//! to parse, was answered 400, and the leader counted the node as unreachable, so replication
//! to it stopped without a word. Now the node halts instead: it logs why at ERROR, sets
//! [`HALTED`], shuts its consensus core down (so `/mgmt/health` answers DOWN and it neither
//! votes nor campaigns) and answers the leader with the reason.
//!
//! A halted node stays up, unlike one whose storage failed ([`crate::failure`]): a restart
//! cannot help (the same entry comes back), only the right binary can, and meanwhile its
//! health, metrics and log say what is wrong.

use openraft::EntryPayload;
use serde_json::Value;
use tickd_domain::{Command, Level, Levels};

use crate::{Raft, TypeConfig};

type Entry = openraft::Entry<TypeConfig>;

/// Set to 1 when this node halted on an entry from a newer binary.
pub const HALTED: &str = "tickd_halted";

/// This binary's release, as its errors and its status name it.
pub const BINARY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// An entry this binary cannot apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// The entry's command kind is not one this binary knows.
    #[error(
        "log entry {index} carries a `{kind}` command, which this tickd ({version}, cluster \
         levels {levels}) does not know: the leader runs a newer tickd; install the leader's \
         release on this node",
        version = BINARY_VERSION,
        levels = Levels::THIS_BINARY
    )]
    Kind {
        /// The entry's log index.
        index: u64,
        /// The command's serialized tag.
        kind: String,
    },
    /// The entry raises the cluster level beyond this binary's.
    #[error(
        "log entry {index} sets the cluster level to {level}, and this tickd ({version}) \
         supports levels {levels}: install a release that supports level {level} on this node",
        version = BINARY_VERSION,
        levels = Levels::THIS_BINARY
    )]
    Level {
        /// The entry's log index.
        index: u64,
        /// The level it sets.
        level: Level,
    },
}

/// The first entry of a serialized append request (or of one serialized log entry) whose
/// command this binary does not know. Looked for only after the body failed to decode, so it
/// costs nothing on the common path.
pub fn in_json(body: &[u8]) -> Option<Unsupported> {
    let value: Value = serde_json::from_slice(body).ok()?;
    match value.get("entries") {
        Some(Value::Array(entries)) => entries.iter().find_map(unknown_kind_in_entry),
        _ => unknown_kind_in_entry(&value),
    }
}

/// The first decoded entry that sets a level this binary does not support.
pub fn in_entries(entries: &[Entry]) -> Option<Unsupported> {
    entries.iter().find_map(|entry| match &entry.payload {
        EntryPayload::Normal(Command::SetLevel { level })
            if !Levels::THIS_BINARY.contains(*level) =>
        {
            Some(Unsupported::Level {
                index: entry.log_id.index,
                level: *level,
            })
        }
        _ => None,
    })
}

fn unknown_kind_in_entry(entry: &Value) -> Option<Unsupported> {
    let index = entry.pointer("/log_id/index")?.as_u64()?;
    let command = entry.pointer("/payload/Normal")?;
    unknown_kind(command).map(|kind| Unsupported::Kind { index, kind })
}

/// The tag of `command`, or of a command in its batch, that this binary does not know.
fn unknown_kind(command: &Value) -> Option<String> {
    let tag = match command {
        Value::Object(map) if map.len() == 1 => map.keys().next()?,
        // A unit variant serializes as its bare tag.
        Value::String(tag) => tag,
        _ => return None,
    };
    if !Command::KINDS.contains(&tag.as_str()) {
        return Some(tag.clone());
    }
    match command.get("Batch") {
        Some(Value::Array(commands)) => commands.iter().find_map(unknown_kind),
        _ => None,
    }
}

/// Halts this node on `why`: logs it, sets [`HALTED`] and shuts the consensus core down.
/// Idempotent: a node already halted only answers.
pub async fn halt(raft: &Raft, why: &Unsupported) {
    if raft.metrics().borrow().running_state.is_err() {
        return;
    }
    tracing::error!(
        reason = %why,
        "halting: this node cannot apply what the leader replicates; it will not vote, \
         campaign or serve until it runs a binary that can"
    );
    metrics::gauge!(HALTED).set(1.0);
    if let Err(error) = raft.shutdown().await {
        tracing::warn!(%error, "the consensus core did not shut down cleanly");
    }
}

/// Registers the help text of [`HALTED`], at 0 until the node halts.
pub fn describe() {
    metrics::describe_gauge!(
        HALTED,
        "1 when this node halted because the leader replicated an entry its binary cannot \
         apply (a command kind or cluster level of a newer release), else 0"
    );
    metrics::gauge!(HALTED).set(0.0);
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId};
    use tickd_domain::ClockId;

    use super::*;

    fn entry(index: u64, command: Command) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 1), index),
            payload: EntryPayload::Normal(command),
        }
    }

    fn pause(index: u64) -> Entry {
        entry(
            index,
            Command::Pause {
                id: ClockId::new("c1".into()),
                now_ms: 0,
                request: None,
            },
        )
    }

    /// An append request whose entry at `index` is replaced by a command of `kind`.
    fn append_with(kind_at: u64, replacement: Value) -> Vec<u8> {
        let entries: Vec<Value> = (1..=3)
            .map(|index| {
                let mut value = serde_json::to_value(pause(index)).expect("serializable");
                if index == kind_at {
                    value["payload"]["Normal"] = replacement.clone();
                }
                value
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({ "entries": entries })).expect("serializable")
    }

    #[test]
    fn a_kind_from_a_newer_binary_is_named_with_its_index() {
        let body = append_with(2, serde_json::json!({ "Reshard": { "ways": 4 } }));
        let found = in_json(&body).expect("found");
        assert_eq!(
            found,
            Unsupported::Kind {
                index: 2,
                kind: "Reshard".into()
            }
        );
        let message = found.to_string();
        assert!(
            message.contains("log entry 2 carries a `Reshard` command"),
            "{message}"
        );
        assert!(message.contains("cluster levels 1..=3"), "{message}");
    }

    #[test]
    fn a_new_kind_inside_a_batch_is_found() {
        let batch = serde_json::json!({ "Batch": [ { "Touch": { "queues": [], "now_ms": 0 } }, "Rebalance" ] });
        assert_eq!(
            in_json(&append_with(3, batch)),
            Some(Unsupported::Kind {
                index: 3,
                kind: "Rebalance".into()
            })
        );
    }

    #[test]
    fn a_single_entry_is_checked_like_a_request() {
        let mut value = serde_json::to_value(pause(9)).expect("serializable");
        value["payload"]["Normal"] = serde_json::json!({ "Reshard": {} });
        let bytes = serde_json::to_vec(&value).expect("serializable");
        assert!(matches!(
            in_json(&bytes),
            Some(Unsupported::Kind { index: 9, .. })
        ));
    }

    #[test]
    fn known_kinds_and_garbage_are_not_mistaken_for_a_newer_binary() {
        // A known kind with a malformed body is damage, not a version gap.
        let damaged = append_with(1, serde_json::json!({ "Pause": { "id": 7 } }));
        assert_eq!(in_json(&damaged), None);
        assert_eq!(in_json(b"not json"), None);
        assert_eq!(in_json(&append_with(0, Value::Null)), None);
    }

    #[test]
    fn a_level_beyond_this_binary_is_found_in_decoded_entries() {
        let supported = entry(4, Command::SetLevel { level: Level::V0_3 });
        assert_eq!(in_entries(&[pause(3), supported]), None);
        let beyond = entry(5, Command::SetLevel { level: Level(4) });
        let found = in_entries(&[pause(3), beyond]).expect("found");
        assert_eq!(
            found,
            Unsupported::Level {
                index: 5,
                level: Level(4)
            }
        );
        assert!(
            found.to_string().contains("supports levels 1..=3"),
            "{found}"
        );
    }
}
