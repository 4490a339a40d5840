//! Log lines that a client can provoke, limited to one per period with a count of the rest.
//!
//! Anyone can send a pop (the route has no token), so an error that a pop can provoke must not
//! write a line per request: a flood of them would fill the disk and bury everything else. A
//! [`LogLimit`] lets one line through per period and counts the ones it held back; the next
//! line that passes says how many there were.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often one kind of client-provoked line may be written.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// One kind of line, limited to one per period.
#[derive(Debug)]
pub struct LogLimit {
    every: Duration,
    state: Mutex<Held>,
}

#[derive(Debug)]
struct Held {
    /// When the last line was written.
    last: Option<Instant>,
    /// Lines held back since.
    suppressed: u64,
}

impl LogLimit {
    /// One line per `every`.
    pub const fn new(every: Duration) -> Self {
        Self {
            every,
            state: Mutex::new(Held {
                last: None,
                suppressed: 0,
            }),
        }
    }

    /// Whether a line may be written now: `Some(n)` with the number of lines held back since
    /// the last one, or `None` (this one is counted instead).
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut held = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match held.last {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                held.suppressed += 1;
                None
            }
            _ => {
                held.last = Some(now);
                Some(std::mem::take(&mut held.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_and_the_next_counts_the_rest() {
        let limit = LogLimit::new(Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(limit.admit_at(start), Some(0));
        for i in 1..=499 {
            assert_eq!(limit.admit_at(start + Duration::from_millis(i)), None);
        }
        assert_eq!(limit.admit_at(start + Duration::from_secs(10)), Some(499));
        assert_eq!(limit.admit_at(start + Duration::from_secs(11)), None);
        assert_eq!(limit.admit_at(start + Duration::from_secs(25)), Some(1));
    }
}
