//! [`RestoreDocument`]: a backup's registry as the JSON text it was sent in.
//!
//! A restore is the largest entry the log carries (up to 32 MiB). Carried as a structure of
//! every clock, it was encoded by the leader's log append, decoded from the log and encoded
//! again for each follower at every replication attempt, decoded by each follower and encoded
//! by its append: seconds of a debug build's CPU, part of it inside the Raft core, whose
//! heartbeats stopped long enough for the followers to call elections in the middle of the
//! restore. As text, each of those steps is a copy; the registry decodes it once, when it
//! applies the restore. On the wire it is the same JSON as the structure, so every release
//! reads the entry alike.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::registry::RegistrySnapshot;

/// A backed-up registry, as JSON text; see the module docs.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RestoreDocument(Arc<RawValue>);

impl RestoreDocument {
    /// The document of `snapshot`.
    pub fn of(snapshot: &RegistrySnapshot) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(snapshot).map(|raw| Self(Arc::from(raw)))
    }

    /// The registry the document describes, or why it describes none.
    pub fn decode(&self) -> Result<RegistrySnapshot, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The document's size in bytes.
    pub fn len(&self) -> usize {
        self.0.get().len()
    }

    /// Whether the document is empty text (no valid document is).
    pub fn is_empty(&self) -> bool {
        self.0.get().is_empty()
    }
}

impl PartialEq for RestoreDocument {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Eq for RestoreDocument {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_the_json_of_its_snapshot_and_decodes_back() {
        let snapshot = RegistrySnapshot::default();
        let document = RestoreDocument::of(&snapshot).expect("a document");
        let as_structure = serde_json::to_string(&snapshot).expect("the structure encodes");
        let as_document = serde_json::to_string(&document).expect("the document encodes");
        assert_eq!(as_document, as_structure, "the same JSON on the wire");
        let read_back: RestoreDocument =
            serde_json::from_str(&as_structure).expect("a structure reads as a document");
        assert_eq!(read_back, document);
        assert_eq!(read_back.decode().expect("decodes"), snapshot);
    }
}
