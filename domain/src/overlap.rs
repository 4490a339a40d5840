//! Overlap control (SPEC §5a): what a clock does with an instant that falls due while its
//! previous tick is still unacknowledged.
//!
//! - [`Overlap::Allow`] (the default): every instant is delivered.
//! - [`Overlap::Skip`]: such an instant is skipped, and counted in the `skipped` of the clock's
//!   next tick.
//! - [`Overlap::BufferOne`]: the newest such instant waits behind the unacknowledged tick;
//!   the older ones are skipped, counted in it.
//!
//! # Unacknowledged
//!
//! An http clock's tick is unacknowledged from its instant until it leaves the clock's queue:
//! waiting in it, or leased and not acked (a pop is its own ack). So a clock with overlap
//! control hands out one tick at a time (a lease or a pop takes at most one, and none while a
//! lease of the queue is open), and its consumer never holds two at once, whichever node it
//! asks. Manual ticks take their turn like the others but are never skipped.
//!
//! # Decided from replicated state
//!
//! The rule is applied by every replica, from the queue and the time of the command that
//! looks at it (a lease, a pop or an ack), so a failover neither starts a skipped instant nor
//! stalls one that was due. Whether an instant fell due while the tick before it was
//! unacknowledged needs only that tick still being in the queue: a tick leaves the queue only
//! through a command that settles the queue first, so a command at `now_ms` that still finds
//! the clock's oldest tick (its *head*) finds it there at every instant up to `now_ms`.
//!
//! An instant skipped when no later tick is filed yet is carried (the ledger's `overlap_carry`)
//! into the clock's next filed scheduled tick.

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::clock::{ClockId, QueueId};
use crate::ticks::{Tick, TickLedger};

/// What a clock does with an instant that falls due while its previous tick is still
/// unacknowledged; see the module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Every instant is delivered.
    #[default]
    Allow,
    /// The instant is skipped and counted in the next tick's `skipped`.
    Skip,
    /// The newest instant waits behind the unacknowledged tick; older ones are skipped.
    BufferOne,
}

/// Why an overlap literal was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid overlap {given:?}: it is one of \"allow\", \"skip\" or \"buffer_one\"")]
pub struct OverlapError {
    /// What was sent, cut to a readable length.
    pub given: String,
}

impl Overlap {
    /// The overlap named `literal` (`allow`, `skip`, `buffer_one`).
    pub fn parse(literal: &str) -> Result<Overlap, OverlapError> {
        match literal {
            "allow" => Ok(Overlap::Allow),
            "skip" => Ok(Overlap::Skip),
            "buffer_one" => Ok(Overlap::BufferOne),
            other => Err(OverlapError {
                given: other.chars().take(40).collect(),
            }),
        }
    }

    /// Its name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
        }
    }

    /// Whether every instant is delivered (no overlap control).
    pub fn is_allow(&self) -> bool {
        *self == Overlap::Allow
    }
}

impl fmt::Display for Overlap {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl TickLedger {
    /// Applies `overlap` to the queue `queue_id` of `clock` at `now_ms`: the scheduled ticks
    /// that fell due behind the clock's head are skipped (all of them with
    /// [`Overlap::Skip`], all but the newest with [`Overlap::BufferOne`]) and counted in the
    /// next tick. Returns how many instants were skipped.
    pub(crate) fn settle_overlap(
        &mut self,
        clock: &ClockId,
        queue_id: &QueueId,
        overlap: Overlap,
        now_ms: u64,
    ) -> u64 {
        if overlap.is_allow() {
            return 0;
        }
        // A leased tick, open or run out, is the head; otherwise the oldest due waiting one.
        let head_leased = self.leased_in_queue(queue_id) > 0;
        let Some(queue) = self.queues.get_mut(queue_id) else {
            return 0;
        };
        let due: Vec<usize> = queue
            .iter()
            .enumerate()
            .filter(|(_, tick)| tick.due_at_ms <= now_ms)
            .map(|(index, _)| index)
            .collect();
        let behind_from = usize::from(!head_leased);
        let mut behind: Vec<usize> = due
            .into_iter()
            .skip(behind_from)
            .filter(|index| queue.get(*index).is_some_and(|tick| !tick.manual))
            .collect();
        if overlap == Overlap::BufferOne {
            // The newest waits behind the head.
            behind.pop();
        }
        if behind.is_empty() {
            return 0;
        }
        let skipped = remove_indices(queue, &behind);
        let count = u64::try_from(skipped.len()).unwrap_or(u64::MAX);
        // The next tick in line counts them: the buffered one, or the first filed ahead.
        let next = queue.iter_mut().find(|tick| {
            !tick.manual
                && skipped
                    .first()
                    .is_some_and(|first| tick.due_at_ms > first.due_at_ms)
        });
        match next {
            Some(next) => skipped.iter().for_each(|gone| next.absorb(gone)),
            None => {
                let carried: u32 = skipped.iter().fold(0, |sum: u32, gone| {
                    sum.saturating_add(1).saturating_add(gone.skipped)
                });
                let carry = self.overlap_carry.entry(clock.clone()).or_default();
                *carry = carry.saturating_add(carried);
            }
        }
        if self.queues.get(queue_id).is_some_and(VecDeque::is_empty) {
            self.queues.remove(queue_id);
        }
        self.counters.skipped = self.counters.skipped.saturating_add(count);
        count
    }

    /// The most ticks a lease or a pop of `queue_id` may take at `now_ms` under `overlap`,
    /// asking for `max`: one at a time, and none while a lease of the queue is open.
    pub(crate) fn overlap_take_limit(
        &self,
        queue_id: &QueueId,
        overlap: Overlap,
        now_ms: u64,
        max: usize,
    ) -> usize {
        if overlap.is_allow() {
            max
        } else if self.open_leases(queue_id, now_ms) > 0 {
            0
        } else {
            max.min(1)
        }
    }

    /// Adds what `overlap` carried for `tick`'s clock (instants skipped when no later tick
    /// was filed) to the scheduled tick being filed.
    pub(crate) fn take_overlap_carry(&mut self, tick: &mut Tick) {
        if tick.manual || self.overlap_carry.is_empty() {
            return;
        }
        if let Some(carried) = self.overlap_carry.remove(&tick.clock) {
            tick.skipped = tick.skipped.saturating_add(carried);
        }
    }
}

/// Removes the ticks at `indices` (increasing) from `queue` and returns them in order.
fn remove_indices(queue: &mut VecDeque<Tick>, indices: &[usize]) -> Vec<Tick> {
    let mut removed = Vec::with_capacity(indices.len());
    let mut kept = VecDeque::with_capacity(queue.len().saturating_sub(indices.len()));
    let mut indices = indices.iter().peekable();
    for (index, tick) in queue.drain(..).enumerate() {
        if indices.next_if(|wanted| **wanted == index).is_some() {
            removed.push(tick);
        } else {
            kept.push_back(tick);
        }
    }
    *queue = kept;
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_names_round_trip_and_others_are_refused() {
        for overlap in [Overlap::Allow, Overlap::Skip, Overlap::BufferOne] {
            assert_eq!(Overlap::parse(overlap.as_str()), Ok(overlap));
            let json = serde_json::to_value(overlap).ok();
            assert_eq!(json, Some(serde_json::json!(overlap.as_str())));
        }
        let refused = Overlap::parse("Skip").map_err(|error| error.to_string());
        assert_eq!(
            refused,
            Err(
                "invalid overlap \"Skip\": it is one of \"allow\", \"skip\" or \"buffer_one\""
                    .to_owned()
            )
        );
    }
}
