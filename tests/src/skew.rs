//! One node's wall clock set off from the machine's, with libfaketime (Debian's `faketime`),
//! preloaded into that node's process alone.
//!
//! The offset lives in a file that libfaketime reads again every second, so a test can step
//! the node's clock while it runs. Only the wall clock moves: the monotonic clock, which
//! timers and timeouts use, is left alone (`FAKETIME_DONT_FAKE_MONOTONIC`), as NTP leaves it
//! when it steps a machine's clock.

use std::path::{Path, PathBuf};

/// Where Debian's `faketime` package puts the library (the thread-safe build).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// A node's clock, `offset` seconds from the machine's.
#[derive(Debug)]
pub struct SkewedClock {
    file: PathBuf,
}

impl SkewedClock {
    /// A clock `offset_seconds` off, kept in `file`.
    ///
    /// # Panics
    ///
    /// When libfaketime is not installed (`scripts/test` installs it) or the file cannot be
    /// written.
    pub fn new(file: &Path, offset_seconds: i64) -> SkewedClock {
        assert!(
            Path::new(LIBFAKETIME).exists(),
            "{LIBFAKETIME} is missing: install Debian's `faketime` package (scripts/test does)"
        );
        let clock = SkewedClock {
            file: file.to_path_buf(),
        };
        clock.set(offset_seconds);
        clock
    }

    /// The environment that makes a process use this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("LD_PRELOAD", LIBFAKETIME.to_owned()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            ("FAKETIME_CACHE_DURATION", "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
    }

    /// Steps the clock to `offset_seconds` from the machine's; the process sees it within a
    /// second.
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    pub fn set(&self, offset_seconds: i64) {
        self.set_ms(offset_seconds.saturating_mul(1_000));
    }

    /// Steps the clock to `offset_ms` milliseconds from the machine's (libfaketime takes a
    /// fraction of a second, `+0.200`); the process sees it within a second.
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    pub fn set_ms(&self, offset_ms: i64) {
        let sign = if offset_ms < 0 { '-' } else { '+' };
        let (seconds, millis) = (
            offset_ms.unsigned_abs() / 1_000,
            offset_ms.unsigned_abs() % 1_000,
        );
        std::fs::write(&self.file, format!("{sign}{seconds}.{millis:03}\n"))
            .unwrap_or_else(|error| panic!("write {}: {error}", self.file.display()));
    }
}
