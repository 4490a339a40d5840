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
//! asks. A webhook clock's tick is unacknowledged from its instant until its receiver answers
//! 2xx or the leader gives it up: the leader sends such a clock one tick at a time (its
//! oldest in the outbox), and reports the settlement's time in the `Confirm` that removes it
//! (`TickLedger::settle_outbox_overlap`). Manual ticks take their turn like the others but
//! are never skipped.
//!
//! # Decided from replicated state
//!
//! The rule is applied by every replica, from the queue and the time of the command that
//! looks at it (a lease, a pop or an ack; for webhooks, the outbox and the settlement's time
//! the `Confirm` carries), so a failover neither starts a skipped instant nor stalls one that
//! was due. Whether an instant fell due while the tick before it was unacknowledged needs only
//! that tick still being in the queue: a tick leaves the queue only through a command that
//! settles the queue first, so a command at `now_ms` that still finds the clock's oldest tick
//! (its *head*) finds it there at every instant up to `now_ms`.
//!
//! An instant skipped when no later tick is filed yet is carried (the ledger's `overlap_carry`)
//! into the clock's next filed scheduled tick.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::clock::{ClockId, QueueId};
use crate::shared_map::SharedMap;
use crate::ticks::{Tick, TickId, TickLedger};

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
        let head_in_line = self.leased_in_queue(queue_id) == 0;
        let Some(queue) = self.queues.get_mut(queue_id) else {
            return 0;
        };
        let verdict = Verdict::of(queue.iter(), head_in_line, overlap, now_ms);
        if verdict.skipped.is_empty() {
            return 0;
        }
        let skipped = remove_indices(queue, &verdict.skipped);
        let next = verdict
            .counted_by_once_removed()
            .and_then(|index| queue.get_mut(index));
        let count = count_skipped(&mut self.overlap_carry, clock, &skipped, next);
        if self.queues.get(queue_id).is_some_and(VecDeque::is_empty) {
            self.queues.remove(queue_id);
        }
        self.counters.skipped = self.counters.skipped.saturating_add(count);
        count
    }

    /// Applies overlap control to the outbox (webhook clocks, whose receiver's 2xx is the
    /// acknowledgement) once a publisher settled a clock's unacknowledged tick: `settled` is,
    /// per clock, its overlap, the settled tick's instant and the leader's clock when the
    /// publisher settled it. The clock's scheduled ticks due by then fell due while that tick
    /// was unacknowledged: they are skipped (all but the newest with [`Overlap::BufferOne`])
    /// and counted in the next tick. Returns how many instants each clock skipped.
    ///
    /// One pass over the outbox from the oldest settled instant on: the ticks in flight, held
    /// behind their clocks' unacknowledged ones, and filed ahead.
    pub(crate) fn settle_outbox_overlap(
        &mut self,
        settled: &HashMap<ClockId, SettledHead>,
    ) -> Vec<(ClockId, u64)> {
        let Some(from_ms) = settled.values().map(|head| head.due_at_ms).min() else {
            return Vec::new();
        };
        let mut lines: BTreeMap<ClockId, Vec<(u64, TickId)>> = BTreeMap::new();
        for (key, tick) in self.outbox.range((from_ms, TickId::lowest())..) {
            if settled
                .get(&tick.clock)
                .is_some_and(|head| tick.due_at_ms >= head.due_at_ms)
            {
                lines
                    .entry(tick.clock.clone())
                    .or_default()
                    .push(key.clone());
            }
        }
        let mut skipped_by_clock = Vec::new();
        for (clock, keys) in lines {
            let Some(head) = settled.get(&clock) else {
                continue;
            };
            let line = keys.iter().filter_map(|key| self.outbox.get(key));
            // The settled tick has left the outbox: every tick of the line is behind it.
            let verdict = Verdict::of(line, false, head.overlap, head.settled_ms);
            let skipped: Vec<Tick> = verdict
                .skipped
                .iter()
                .filter_map(|index| keys.get(*index))
                .filter_map(|key| self.outbox.remove(key))
                .collect();
            if skipped.is_empty() {
                continue;
            }
            let next = verdict
                .counted_by
                .and_then(|index| keys.get(index))
                .and_then(|key| self.outbox.get_mut(key));
            let count = count_skipped(&mut self.overlap_carry, &clock, &skipped, next);
            self.counters.skipped = self.counters.skipped.saturating_add(count);
            skipped_by_clock.push((clock, count));
        }
        skipped_by_clock
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

/// A clock's unacknowledged outbox tick, as a publisher settled it (`Command::Confirm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SettledHead {
    /// The clock's overlap control.
    pub overlap: Overlap,
    /// The settled tick's instant.
    pub due_at_ms: u64,
    /// The leader's clock when the publisher settled it: the instants due by then fell due
    /// while it was unacknowledged.
    pub settled_ms: u64,
}

/// What overlap control does to one clock's undelivered ticks (its *line*, oldest first) at
/// one moment.
#[derive(Debug, PartialEq, Eq)]
struct Verdict {
    /// The positions in the line of the ticks skipped, increasing.
    skipped: Vec<usize>,
    /// The position of the tick that counts them: the first scheduled tick after the oldest
    /// skipped one that stays (the buffered one, or the first filed ahead). `None` when no
    /// later tick is filed yet: the count is carried into the next one.
    counted_by: Option<usize>,
}

impl Verdict {
    /// The verdict on `line` at `now_ms`: the scheduled ticks due by then behind the
    /// unacknowledged one are skipped, all of them with [`Overlap::Skip`], all but the newest
    /// with [`Overlap::BufferOne`]. `head_in_line` says whether the unacknowledged tick is the
    /// line's first due tick (a waiting tick nobody took yet) rather than one held outside it
    /// (leased, or in a receiver's hands). Manual ticks are never skipped.
    fn of<'a>(
        line: impl Iterator<Item = &'a Tick>,
        head_in_line: bool,
        overlap: Overlap,
        now_ms: u64,
    ) -> Verdict {
        let line: Vec<&Tick> = line.collect();
        if overlap.is_allow() {
            return Verdict {
                skipped: Vec::new(),
                counted_by: None,
            };
        }
        let due = line
            .iter()
            .enumerate()
            .filter(|(_, tick)| tick.due_at_ms <= now_ms)
            .map(|(index, _)| index);
        let mut skipped: Vec<usize> = due
            .skip(usize::from(head_in_line))
            .filter(|index| line.get(*index).is_some_and(|tick| !tick.manual))
            .collect();
        if overlap == Overlap::BufferOne {
            // The newest waits behind the head.
            skipped.pop();
        }
        let first_due = skipped
            .first()
            .and_then(|index| line.get(*index))
            .map(|tick| tick.due_at_ms);
        let counted_by = first_due.and_then(|first_due| {
            line.iter().enumerate().position(|(index, tick)| {
                !tick.manual && tick.due_at_ms > first_due && !skipped.contains(&index)
            })
        });
        Verdict {
            skipped,
            counted_by,
        }
    }

    /// The position of [`counted_by`](Self::counted_by) once the skipped ticks have left the
    /// line.
    fn counted_by_once_removed(&self) -> Option<usize> {
        let index = self.counted_by?;
        let before = self
            .skipped
            .iter()
            .filter(|skipped| **skipped < index)
            .count();
        index.checked_sub(before)
    }
}

/// Counts the `skipped` ticks of `clock` in `next`, the tick that follows them, or, when no
/// later tick is filed yet, in the clock's carry for its next one. Returns how many were
/// skipped.
fn count_skipped(
    carry: &mut SharedMap<ClockId, u32>,
    clock: &ClockId,
    skipped: &[Tick],
    next: Option<&mut Tick>,
) -> u64 {
    match next {
        Some(next) => skipped.iter().for_each(|gone| next.absorb(gone)),
        None => {
            let carried: u32 = skipped.iter().fold(0, |sum: u32, gone| {
                sum.saturating_add(1).saturating_add(gone.skipped)
            });
            let carry = carry.entry(clock.clone()).or_default();
            *carry = carry.saturating_add(carried);
        }
    }
    u64::try_from(skipped.len()).unwrap_or(u64::MAX)
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
