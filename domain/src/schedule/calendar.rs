//! From local matches to instants, through a zone's offsets and its daylight-saving rule.
//!
//! A zone's timeline is a run of segments, each with one UTC offset, separated by transitions.
//! Inside a segment local time and instants map one to one. At a transition forward (a gap:
//! 02:00 becomes 03:00) some local times never occur; at one backward (a fold: 03:00 becomes
//! 02:00) some occur twice. Vixie cron's rule, which SPEC §3 adopts:
//!
//! - a **fixed-time** schedule (no `*` in its second, minute or hour field) whose local time
//!   falls in a gap fires once, at the transition (02:30 on a 02:00→03:00 night fires at
//!   03:00 local), when the jump is shorter than three hours (a longer one, such as Samoa
//!   skipping 2011-12-30, skips what it skips); one whose local time occurs twice fires at
//!   the first occurrence only;
//! - any other schedule fires at every instant whose local time matches: nothing in a gap,
//!   both passes of a fold.
//!
//! [`Calendar::next_fire`] walks the segments from an instant: the first local match in the
//! segment (skipping, for a fixed time, the second pass of a fold), else the gap at the
//! segment's end, else the next segment. Everything is integer seconds; the zone is asked only
//! for offsets and transitions, from the database compiled into the binary.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::pattern::Pattern;

/// How far ahead a next instant is searched: a schedule that fires less often than this is
/// refused when parsed (the Gregorian calendar repeats every 400 years).
const HORIZON_SECONDS: i64 = 400 * 366 * 86_400;

/// The longest jump forward across which a fixed time that was skipped still fires (at the
/// transition): three hours, as in Vixie cron. Daylight saving moves clocks by at most two.
const MAX_CAUGHT_UP_JUMP_SECONDS: i64 = 3 * 3_600;

/// How a daylight-saving transition moved or doubled an instant (SPEC §2, preview).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dst {
    /// The local time was skipped by a transition forward; the tick fires at the transition.
    Gap,
    /// The local time occurs twice around a transition backward.
    Repeat,
}

/// A pattern in a zone.
#[derive(Clone, Debug)]
pub struct Calendar {
    /// The zone the pattern's local times are in.
    pub zone: TimeZone,
    /// The local times.
    pub pattern: Pattern,
}

/// One segment of a zone's timeline around an instant.
struct Segment {
    /// The offset in force, in seconds.
    offset: i64,
    /// The transition that began the segment and the offset before it.
    start: Option<(i64, i64)>,
    /// The transition that ends the segment and the offset after it.
    end: Option<(i64, i64)>,
}

impl Calendar {
    /// The first instant strictly after `after_ms` (milliseconds since the epoch) at which the
    /// schedule fires, with how daylight saving shaped it; `None` if it does not fire within
    /// the search horizon, or the instant is out of the zone database's range.
    pub fn next_fire(&self, after_ms: u64) -> Option<(u64, Option<Dst>)> {
        let first_ms = i64::try_from(after_ms).ok()?.checked_add(1)?;
        // The first whole second at or after `first_ms`: ticks fall on whole seconds.
        let mut second = first_ms.div_euclid(1_000) + i64::from(first_ms.rem_euclid(1_000) != 0);
        let horizon = second.checked_add(HORIZON_SECONDS)?;
        let mut segment = self.segment(second)?;
        // The search may start at a transition's very instant (from the second before it):
        // the gap that transition opened fires there too.
        if let Some((start, before)) = segment.start
            && start == second
            && self.fires_in_gap(start, before, segment.offset)
        {
            return Some((
                u64::try_from(start).ok()?.checked_mul(1_000)?,
                Some(Dst::Gap),
            ));
        }
        let mut from_local = second + segment.offset;
        loop {
            let limit = match segment.end {
                Some((end, _)) => end + segment.offset,
                None => horizon + segment.offset,
            };
            if let Some(local) = self.pattern.next_match(from_local, limit) {
                if let Some(repeated_until) = self.second_pass_until(&segment, local)
                    && self.pattern.fixed_time
                {
                    from_local = repeated_until;
                    continue;
                }
                let instant = local - segment.offset;
                let mark = self.is_repeated(&segment, local).then_some(Dst::Repeat);
                return Some((u64::try_from(instant).ok()?.checked_mul(1_000)?, mark));
            }
            let (end, next_offset) = segment.end?;
            if end > horizon {
                return None;
            }
            if self.fires_in_gap(end, segment.offset, next_offset) {
                return Some((u64::try_from(end).ok()?.checked_mul(1_000)?, Some(Dst::Gap)));
            }
            second = end;
            segment = self.segment(second)?;
            from_local = second + segment.offset;
        }
    }

    /// Whether a fixed-time schedule fires at the transition at `at`, from the offset `before`
    /// to `after`: the change is forward and skips a local time the pattern matches. Vixie
    /// cron catches up only across a change of less than three hours; a longer jump (Samoa
    /// skipping 2011-12-30) skips what it skips.
    fn fires_in_gap(&self, at: i64, before: i64, after: i64) -> bool {
        self.pattern.fixed_time
            && after > before
            && after - before < MAX_CAUGHT_UP_JUMP_SECONDS
            && self.pattern.next_match(at + before, at + after).is_some()
    }

    /// The segment of the zone's timeline that holds the instant `second`.
    fn segment(&self, second: i64) -> Option<Segment> {
        let at = Timestamp::from_second(second).ok()?;
        let offset = i64::from(self.zone.to_offset(at).seconds());
        // `preceding` yields transitions strictly before its argument: one second later
        // includes a transition at `second` itself.
        let start = self
            .zone
            .preceding(Timestamp::from_second(second + 1).ok()?)
            .next()
            .and_then(|transition| {
                let start = transition.timestamp().as_second();
                let before = Timestamp::from_second(start - 1).ok()?;
                Some((start, i64::from(self.zone.to_offset(before).seconds())))
            });
        let end = self.zone.following(at).next().map(|transition| {
            (
                transition.timestamp().as_second(),
                i64::from(transition.offset().seconds()),
            )
        });
        Some(Segment { offset, start, end })
    }

    /// When `local` lies in the second pass of a fold at the segment's start (its local time
    /// already occurred before the transition), the local second where that pass ends.
    fn second_pass_until(&self, segment: &Segment, local: i64) -> Option<i64> {
        let (start, before) = segment.start?;
        let repeated_until = start + before;
        (before > segment.offset && local < repeated_until).then_some(repeated_until)
    }

    /// Whether the local time `local` of this segment occurs twice: in the second pass of a
    /// fold at the segment's start, or in the first pass of one at its end.
    fn is_repeated(&self, segment: &Segment, local: i64) -> bool {
        let first_pass = segment.end.is_some_and(|(end, after)| {
            after < segment.offset && local >= end + after && local < end + segment.offset
        });
        first_pass || self.second_pass_until(segment, local).is_some()
    }
}
