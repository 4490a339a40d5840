//! The receivers a leader's webhook publisher sees failing, as the leader reports them in its
//! status and `GET /api/v1/cluster` (and so the dashboard) shows them: which receiver holds
//! ticks back, since when and why, between the metrics' counts and the log's lines.

use serde::{Deserialize, Serialize};

/// The most failing receivers one report names. A status answer stays small when thousands of
/// receivers fail together; [`FailingReceivers::count`] says how many there are.
pub const MAX_NAMED: usize = 20;

/// The longest reason a report carries, in characters.
pub const MAX_REASON_CHARS: usize = 300;

/// One receiver whose last attempt failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FailingReceiver {
    /// Its host and port, as the clocks' URLs name them.
    pub receiver: String,
    /// Failed attempts since its last success.
    pub failures: u32,
    /// Milliseconds since its first failure after a success.
    pub failing_for_ms: u64,
    /// Whether its circuit is open: its ticks wait without attempts, and one attempt probes
    /// it now and then.
    pub circuit_open: bool,
    /// Why its last attempt failed (at most [`MAX_REASON_CHARS`] characters).
    pub last_error: String,
}

/// The failing receivers of a leader.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FailingReceivers {
    /// How many receivers fail.
    pub count: u64,
    /// The [`MAX_NAMED`] that have failed longest, longest first.
    pub longest: Vec<FailingReceiver>,
}

impl FailingReceivers {
    /// The report of `failing`: counted, and the [`MAX_NAMED`] that have failed longest kept,
    /// each reason cut to [`MAX_REASON_CHARS`].
    pub fn of(mut failing: Vec<FailingReceiver>) -> Self {
        let count = u64::try_from(failing.len()).unwrap_or(u64::MAX);
        failing.sort_by(|a, b| {
            b.failing_for_ms
                .cmp(&a.failing_for_ms)
                .then_with(|| a.receiver.cmp(&b.receiver))
        });
        failing.truncate(MAX_NAMED);
        for receiver in &mut failing {
            if let Some((cut, _)) = receiver.last_error.char_indices().nth(MAX_REASON_CHARS) {
                receiver.last_error.truncate(cut);
                receiver.last_error.push('…');
            }
        }
        FailingReceivers {
            count,
            longest: failing,
        }
    }

    /// Whether no receiver fails.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failing(receiver: &str, failing_for_ms: u64, last_error: &str) -> FailingReceiver {
        FailingReceiver {
            receiver: receiver.to_owned(),
            failures: 1,
            failing_for_ms,
            circuit_open: false,
            last_error: last_error.to_owned(),
        }
    }

    #[test]
    fn a_report_counts_every_receiver_and_names_those_failing_longest_with_short_reasons() {
        let many: Vec<FailingReceiver> = (0..MAX_NAMED as u64 + 5)
            .map(|n| {
                failing(
                    &format!("host{n}:443"),
                    n,
                    &"é".repeat(MAX_REASON_CHARS + 1),
                )
            })
            .collect();
        let report = FailingReceivers::of(many);
        assert_eq!(report.count, MAX_NAMED as u64 + 5);
        assert!(!report.is_empty());
        assert_eq!(report.longest.len(), MAX_NAMED);
        assert_eq!(
            report.longest[0].receiver,
            format!("host{}:443", MAX_NAMED + 4)
        );
        assert!(
            report
                .longest
                .windows(2)
                .all(|pair| pair[0].failing_for_ms >= pair[1].failing_for_ms)
        );
        let reason = &report.longest[0].last_error;
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS + 1);
        assert!(reason.ends_with('…'));
        assert!(FailingReceivers::of(Vec::new()).is_empty());
        let short = FailingReceivers::of(vec![failing("a:80", 1, "refused")]);
        assert_eq!(short.longest[0].last_error, "refused");
    }
}
