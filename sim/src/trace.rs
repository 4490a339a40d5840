//! The trace of one simulated run: every event that decides its history, in order, with its
//! virtual time. Its SHA-256 is the run's fingerprint: the same seed must give the same hash
//! on any machine, however many cores it has.

use sha2::{Digest, Sha256};

/// Events in order, hashed as they come and kept only when asked for (a run writes thousands).
pub struct Trace {
    hasher: Sha256,
    kept: Option<Vec<String>>,
    events: u64,
}

impl Trace {
    /// An empty trace; `keep` keeps the lines for printing.
    pub fn new(keep: bool) -> Self {
        Trace {
            hasher: Sha256::new(),
            kept: keep.then(Vec::new),
            events: 0,
        }
    }

    /// Records one event at `at_ms` (virtual milliseconds since the run began).
    pub fn record(&mut self, at_ms: u64, event: std::fmt::Arguments<'_>) {
        let line = format!("{at_ms:>7} {event}");
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        self.events = self.events.saturating_add(1);
        if let Some(kept) = &mut self.kept {
            kept.push(line);
        }
    }

    /// How many events were recorded.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The hash of everything recorded, as 16 hex digits (the first 8 bytes of the SHA-256).
    pub fn hash(&self) -> String {
        let digest = self.hasher.clone().finalize();
        digest
            .iter()
            .take(8)
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// The lines, if they were kept.
    pub fn lines(&self) -> &[String] {
        self.kept.as_deref().unwrap_or(&[])
    }
}
