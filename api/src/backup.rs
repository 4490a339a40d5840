//! The backup file: a versioned JSON document holding the whole registry.
//!
//! `GET /api/v1/backup` produces it, `tickd backup` writes it to a file, and `tickd restore`
//! sends it to `POST /api/v1/restore`. The header (`format`, `version`) is checked before the
//! rest is decoded, so a file from another program or a newer tickd is refused with a message
//! that says so instead of a decoding error deep inside the registry.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tickd_domain::{Channel, RegistrySnapshot, RestoreError, WrittenClocks};

/// The `format` of every tickd backup.
pub const BACKUP_FORMAT: &str = "tickd-backup";

/// The version this tickd writes and reads. Raise it when the registry's serialized form
/// changes incompatibly.
pub const BACKUP_VERSION: u64 = 1;

/// A consistent copy of the cluster's replicated state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Backup {
    /// Always [`BACKUP_FORMAT`].
    #[schema(example = "tickd-backup")]
    pub format: String,
    /// [`BACKUP_VERSION`] when written by this tickd.
    #[schema(example = 1)]
    pub version: u64,
    /// When the backup was taken, RFC 3339 UTC.
    #[schema(format = DateTime)]
    pub taken_at: String,
    /// The Raft log index the backup reflects: every write acknowledged before the backup was
    /// requested is included.
    pub last_applied: Option<u64>,
    /// The clocks (ids, statuses, channels) and their undelivered ticks, as this version of
    /// tickd writes them; restore it unchanged.
    #[schema(value_type = Object)]
    pub registry: RegistrySnapshot,
}

/// Why a document is not a backup this tickd can restore.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackupError {
    /// The document is not a tickd backup at all.
    #[error("this is not a tickd backup: it has no \"format\": \"{BACKUP_FORMAT}\" field")]
    NotABackup,
    /// The backup was written by a tickd with another format version.
    #[error(
        "this backup has format version {found}; this tickd reads version {BACKUP_VERSION} \
         (restore it with the tickd release that wrote it)"
    )]
    Version {
        /// The file's version.
        found: String,
    },
    /// The header is right but the content does not decode.
    #[error("the backup is damaged: {0}")]
    Damaged(String),
    /// The content decodes, but as written it says what no cluster holds.
    #[error("this backup cannot be restored: {0}")]
    Refused(RestoreError),
}

impl Backup {
    /// A backup of `registry` taken now, reflecting the log up to `last_applied`.
    pub fn new(registry: RegistrySnapshot, last_applied: Option<u64>) -> Self {
        Self {
            format: BACKUP_FORMAT.to_string(),
            version: BACKUP_VERSION,
            taken_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            last_applied,
            registry,
        }
    }

    /// Checks the header, decodes the document, and checks as written what decoding keeps no
    /// trace of: the queue each RabbitMQ clock names ([`WrittenClocks`]).
    pub fn from_json(document: Value) -> Result<Self, BackupError> {
        if document.get("format").and_then(Value::as_str) != Some(BACKUP_FORMAT) {
            return Err(BackupError::NotABackup);
        }
        match document.get("version") {
            Some(Value::Number(version)) if version.as_u64() == Some(BACKUP_VERSION) => {}
            other => {
                return Err(BackupError::Version {
                    found: other.map_or("(none)".to_string(), Value::to_string),
                });
            }
        }
        let damaged = |error: serde_json::Error| BackupError::Damaged(error.to_string());
        let backup = Backup::deserialize(&document).map_err(damaged)?;
        WrittenClocks::deserialize(&document["registry"])
            .map_err(damaged)?
            .validate_rabbit_queues()
            .map_err(BackupError::Refused)?;
        Ok(backup)
    }

    /// How many clocks the backup holds.
    pub fn clocks(&self) -> usize {
        self.registry.clocks.len()
    }

    /// Whether any clock delivers through RabbitMQ, which the restoring cluster must then have.
    pub fn needs_rabbit(&self) -> bool {
        self.registry
            .clocks
            .iter()
            .any(|clock| clock.channel == Channel::Rabbit)
    }
}

#[cfg(test)]
mod tests {
    use tickd_domain::{ClockId, Command, Registry, Schedule};

    use super::*;

    #[test]
    fn a_backup_survives_its_json_form() -> Result<(), serde_json::Error> {
        let backup = Backup::new(RegistrySnapshot::default(), Some(7));
        let json = serde_json::to_value(&backup)?;
        assert_eq!(Backup::from_json(json), Ok(backup));
        Ok(())
    }

    #[test]
    fn refuses_other_documents_and_versions_with_a_reason() {
        let not_ours = serde_json::json!({ "clocks": [] });
        assert_eq!(Backup::from_json(not_ours), Err(BackupError::NotABackup));
        let newer = serde_json::json!({ "format": BACKUP_FORMAT, "version": 2 });
        let error = Backup::from_json(newer).expect_err("version 2");
        assert!(error.to_string().contains("version 2"), "{error}");
        let damaged = serde_json::json!({ "format": BACKUP_FORMAT, "version": 1 });
        assert!(matches!(
            Backup::from_json(damaged),
            Err(BackupError::Damaged(_))
        ));
    }

    #[test]
    fn refuses_a_rabbit_clock_that_names_another_queue() -> Result<(), Box<dyn std::error::Error>> {
        let mut registry = Registry::new();
        registry.apply(Command::Register {
            name: "orders".into(),
            schedule: Schedule::parse("every.5.seconds")?,
            id: ClockId::new("c1".into()),
            channel: Channel::Rabbit,
            max_clocks: 1,
            now_ms: 0,
            overlap: tickd_domain::Overlap::Allow,
        });
        let mut json = serde_json::to_value(Backup::new(registry.into(), None))?;
        let queue = "/registry/clocks/0/channel/queue";
        assert_eq!(
            json.pointer(queue),
            Some(&"ticktok-orders;every.5.seconds".into())
        );
        assert!(Backup::from_json(json.clone()).is_ok());
        if let Some(written) = json.pointer_mut(queue) {
            *written = "amq.direct".into();
        }
        let refusal = Backup::from_json(json).map_err(|error| error.to_string());
        assert_eq!(
            refusal.err().as_deref(),
            Some(
                "this backup cannot be restored: clock c1: channel.queue is \"amq.direct\", but \
                 this clock's RabbitMQ queue is \"ticktok-orders;every.5.seconds\""
            )
        );
        Ok(())
    }
}
