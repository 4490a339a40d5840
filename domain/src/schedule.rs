//! Schedules: when a clock ticks (SPEC §3).
//!
//! A schedule is identified by its literal string: `every.5.seconds` and
//! `every.05.seconds` tick at the same instants but are two different
//! schedules, so two different clocks and two different RabbitMQ queues. The
//! literal is therefore kept exactly as registered, next to what it means.
//!
//! Two families of forms:
//!
//! - Ticktok's `every.<N>.<unit>`, aligned to the Unix epoch: a schedule with interval I
//!   ticks at every instant t (milliseconds since the epoch, UTC) with t mod I = 0, and
//!   `@never`.
//! - Calendar forms, tickd's: `every.<N>.days.at.HH:mm[:ss]`, `every.MON|FRI.at.HH:mm[:ss]`,
//!   cron with five or six fields and its macros, and `@at <instant>`, each optionally in a
//!   zone (`TZ=Europe/Berlin …`), with Vixie cron's daylight-saving rule
//!   ([`calendar`]).
//!
//! Either way the instants are a pure function of the schedule (and, for zones, of the zone
//! database compiled into the binary), identical on every node and across restarts, which is
//! what lets a new leader continue where the old one stopped. The rest of the system asks a
//! schedule only two questions: the next instant after t, and the instants in (a, b].

mod calendar;
mod civil;
mod cron;
mod error;
mod forms;
mod pattern;
pub mod zones;

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize, Serializer};

use calendar::Calendar;
pub use calendar::Dst;

use crate::excerpt::Excerpt;

/// Milliseconds in a second, the smallest unit a schedule can name.
const MS_PER_SECOND: u64 = 1_000;
/// Milliseconds in a minute.
const MS_PER_MINUTE: u64 = 60 * MS_PER_SECOND;
/// Milliseconds in an hour.
const MS_PER_HOUR: u64 = 60 * MS_PER_MINUTE;
/// Milliseconds in a day (UTC days: the epoch alignment ignores leap seconds,
/// as Unix time does).
const MS_PER_DAY: u64 = 24 * MS_PER_HOUR;

/// The longest interval a schedule may have: 366 days. It bounds every
/// computation on instants (see [`LAST_ALIGNED_INPUT_MS`]) and rejects
/// schedules that would never tick within a clock's lifetime anyway.
pub const MAX_INTERVAL_MS: u64 = 366 * MS_PER_DAY;

/// The longest Ticktok literal (`every.<N>.<unit>`), in bytes. The RabbitMQ queue of a clock
/// is named `ticktok-<name>;<schedule>` and RabbitMQ allows 255 bytes; with names of at most
/// 200 bytes, 255 − 8 − 1 − 200 = 46 bytes remain for the schedule. Without leading zeros no
/// valid literal comes close (the longest, `every.31622400.seconds`, has 22 bytes); the limit
/// only stops padding.
pub const MAX_LITERAL_BYTES: usize = 46;

/// The longest calendar literal, in bytes (SPEC §3). A RabbitMQ clock's queue name must
/// still fit in 255 bytes with its name: the API refuses a registration whose queue name
/// would not.
pub const MAX_CALENDAR_BYTES: usize = 256;

/// The largest `unix_ms` for which [`Schedule::next_instant_after`] is
/// guaranteed to find an instant of an `every.<N>.<unit>` schedule: the next instant is at
/// most one interval later, and no interval exceeds [`MAX_INTERVAL_MS`], so the result always
/// fits in a `u64` up to here. Above it the method returns `None` instead of
/// overflowing (about 584 million years from now, so never in practice).
pub const LAST_ALIGNED_INPUT_MS: u64 = u64::MAX - MAX_INTERVAL_MS;

/// The most instants of a calendar clock counted one by one when an outage is coalesced
/// ([`Schedule::coalesced_before`]); a longer run is counted as this many.
pub const MAX_COUNTED_INSTANTS: u64 = 100_000;

/// The literal of the schedule that never ticks on its own.
const NEVER: &str = "@never";

/// The grammar of Ticktok's forms, spelled out in their errors.
const GRAMMAR: &str = "every.<N>.<seconds|minutes|hours|days> with 1 ≤ N and an interval of at most 366 days, or @never";

/// Every form, for an input that resembles none.
const ALL_FORMS: &str = "every.<N>.<seconds|minutes|hours|days>, @never, \
    every.<N>.days.at.HH:mm[:ss], every.<MON|TUE|…>.at.HH:mm[:ss], a cron expression of 5 or \
    6 fields, @yearly|@monthly|@weekly|@daily|@hourly, or @at <RFC 3339 instant>; calendar \
    forms may begin with TZ=<IANA zone> and a space";

/// When a clock ticks, kept as the literal the client registered (the literal is the
/// schedule's identity).
///
/// Constructed only through [`Schedule::parse`] (also used by `FromStr`,
/// `TryFrom<String>` and serde), so every value denotes a valid schedule.
///
/// Shared, not copied: a schedule is one pointer to its literal and meaning, a clone is a
/// reference count, and the registry keeps one copy of each schedule for all the clocks that
/// use it ([`crate::literals`]). Every clock holds one, so it is 8 bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub struct Schedule(Arc<Parsed>);

/// A schedule's literal and what it means. Compared, ordered and hashed by the literal alone,
/// which determines the meaning.
#[derive(Debug)]
struct Parsed {
    /// The string exactly as registered; it names the clock's queue and is
    /// what clients compare, so it is never normalised.
    literal: Box<str>,
    /// What the literal means.
    meaning: Meaning,
}

/// What a schedule literal means.
#[derive(Debug)]
enum Meaning {
    /// `@never`: manual ticks only.
    Never,
    /// `every.<N>.<unit>`: epoch-aligned, this many milliseconds apart.
    Every { interval_ms: u64 },
    /// A calendar form: local times in a zone.
    Calendar(Calendar),
    /// `@at`: one instant, shown in `zone`.
    At { instant_ms: u64, zone: TimeZone },
}

impl PartialEq for Parsed {
    fn eq(&self, other: &Self) -> bool {
        self.literal == other.literal
    }
}

impl Eq for Parsed {}

impl Hash for Parsed {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.literal.hash(state);
    }
}

impl PartialOrd for Parsed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Parsed {
    fn cmp(&self, other: &Self) -> Ordering {
        self.literal.cmp(&other.literal)
    }
}

/// Why a schedule literal was refused. Every message quotes the input (as an
/// [`Excerpt`]) and says what was expected, so it can be shown to a person as is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The input resembles no form at all (wrong prefix, unknown unit, a sign or a fraction
    /// in N, white space around it, upper case, empty).
    #[error("invalid schedule {input}: expected {forms}", forms = ALL_FORMS)]
    Malformed {
        /// The offending input.
        input: Excerpt,
    },
    /// N is zero, which would be an interval of zero: a clock that ticks
    /// continuously.
    #[error("invalid schedule {input}: N must be at least 1; expected {grammar}", grammar = GRAMMAR)]
    ZeroInterval {
        /// The offending input.
        input: Excerpt,
    },
    /// The interval exceeds 366 days (including values of N too large for
    /// any integer type).
    #[error(
        "invalid schedule {input}: the interval is longer than 366 days; expected {grammar}",
        grammar = GRAMMAR
    )]
    IntervalTooLong {
        /// The offending input.
        input: Excerpt,
    },
    /// A Ticktok literal is well formed but longer than [`MAX_LITERAL_BYTES`],
    /// which only happens with padding zeros in N.
    #[error(
        "invalid schedule {input}: the literal has {len} bytes but at most {max} are allowed \
         (the RabbitMQ queue name must fit in 255 bytes); write N without leading zeros",
        max = MAX_LITERAL_BYTES
    )]
    LiteralTooLong {
        /// The offending input.
        input: Excerpt,
        /// The input's length in bytes.
        len: usize,
    },
    /// A calendar form is wrong at a column: a field out of range, an unknown zone, a
    /// schedule that never fires, too long a literal.
    #[error("invalid schedule {input}: at column {column}: {reason}")]
    Invalid {
        /// The offending input.
        input: Excerpt,
        /// The column (from 1) where the problem starts.
        column: usize,
        /// What is wrong there and what is expected.
        reason: String,
    },
}

impl Schedule {
    /// Parses a schedule literal, strictly: the literal must match the grammar
    /// exactly, because it becomes an identity (a queue name) that clients
    /// compare byte for byte. Never panics, whatever the input.
    pub fn parse(literal: &str) -> Result<Schedule, ScheduleError> {
        Schedule::of(literal.into())
    }

    /// The schedule of `literal`, which keeps it as it is.
    fn of(literal: Box<str>) -> Result<Schedule, ScheduleError> {
        let meaning = meaning_of(&literal)?;
        Ok(Schedule(Arc::new(Parsed { literal, meaning })))
    }

    /// Whether no other value holds this copy of the schedule.
    pub(crate) fn is_only_copy(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }

    /// The literal exactly as registered, for queue names, tick messages and
    /// API responses.
    pub fn as_str(&self) -> &str {
        &self.0.literal
    }

    /// Whether this is `@never`, the schedule with only manual ticks.
    pub fn is_never(&self) -> bool {
        matches!(self.0.meaning, Meaning::Never)
    }

    /// Whether this is one of the calendar forms, which a cluster may hold only from
    /// [`crate::Level::V0_3`]: older binaries cannot read them.
    pub fn is_calendar(&self) -> bool {
        matches!(self.0.meaning, Meaning::Calendar(_) | Meaning::At { .. })
    }

    /// The interval of an `every.<N>.<unit>` schedule in milliseconds; `None` for every other
    /// form. Only the tests look at it: the rest of the system asks for instants
    /// ([`Schedule::next_instant_after`], [`Schedule::instants_in`]), which serve every form
    /// alike.
    #[cfg(test)]
    fn interval_ms(&self) -> Option<u64> {
        match self.0.meaning {
            Meaning::Every { interval_ms } => Some(interval_ms),
            _ => None,
        }
    }

    /// The name of the zone the schedule's local times are in: its `TZ=` zone, else `UTC`.
    pub fn zone_name(&self) -> &str {
        self.zone().iana_name().unwrap_or("UTC")
    }

    fn zone(&self) -> &TimeZone {
        static UTC: TimeZone = TimeZone::UTC;
        match &self.0.meaning {
            Meaning::Calendar(calendar) => &calendar.zone,
            Meaning::At { zone, .. } => zone,
            Meaning::Never | Meaning::Every { .. } => &UTC,
        }
    }

    /// The instant `unix_ms` as RFC 3339 with milliseconds and the offset of the schedule's
    /// zone at that instant (`2026-03-29T03:00:00.000+02:00`).
    pub fn local_time(&self, unix_ms: u64) -> Option<String> {
        let millis = i64::try_from(unix_ms).ok()?;
        let instant = jiff::Timestamp::from_millisecond(millis).ok()?;
        Some(
            instant
                .to_zoned(self.zone().clone())
                .strftime("%Y-%m-%dT%H:%M:%S%.3f%:z")
                .to_string(),
        )
    }

    /// The first tick instant strictly after `unix_ms`, with how daylight saving shaped it
    /// (calendar forms only). `None` when the schedule does not tick again: `@never`, an
    /// `@at` instant that is past, or an instant beyond what a `u64` or the zone database can
    /// hold (checked arithmetic, never an overflow).
    pub fn next_fire(&self, unix_ms: u64) -> Option<(u64, Option<Dst>)> {
        match &self.0.meaning {
            Meaning::Never => None,
            Meaning::Every { interval_ms } => {
                let next = (unix_ms / interval_ms)
                    .checked_add(1)?
                    .checked_mul(*interval_ms)?;
                Some((next, None))
            }
            Meaning::Calendar(calendar) => calendar.next_fire(unix_ms),
            Meaning::At { instant_ms, .. } => {
                (*instant_ms > unix_ms).then_some((*instant_ms, None))
            }
        }
    }

    /// The first tick instant strictly after `unix_ms`; see [`Schedule::next_fire`]. For
    /// `every.<N>.<unit>` it is the smallest t > `unix_ms` with t mod interval = 0, at most
    /// one interval later.
    pub fn next_instant_after(&self, unix_ms: u64) -> Option<u64> {
        self.next_fire(unix_ms).map(|(instant, _)| instant)
    }

    /// The tick instants t with `after_ms` < t ≤ `until_ms`, in increasing
    /// order: the ticks that fell due in a window, for catching up after a
    /// leader change. Empty for `@never`.
    ///
    /// The iterator is lazy and may be very long (a one-second schedule over a
    /// year); the caller bounds it, for instance with `take`.
    pub fn instants_in(&self, after_ms: u64, until_ms: u64) -> impl Iterator<Item = u64> + use<> {
        let schedule = self.clone();
        let first = schedule.next_instant_after(after_ms);
        std::iter::successors(first, move |instant| schedule.next_instant_after(*instant))
            .take_while(move |instant| *instant <= until_ms)
    }

    /// The newest instant in (`after_ms`, `before_ms`) and how many instants before it lie in
    /// that window: what an outage coalesces into one tick. `None` when the window holds no
    /// instant. Epoch-aligned schedules answer by arithmetic; calendar ones count one by one,
    /// at most [`MAX_COUNTED_INSTANTS`].
    pub fn coalesced_before(&self, after_ms: u64, before_ms: u64) -> Option<(u64, u64)> {
        let first = self
            .next_instant_after(after_ms)
            .filter(|first| *first < before_ms)?;
        if let Meaning::Every { interval_ms } = self.0.meaning {
            let newest = (before_ms.saturating_sub(1) / interval_ms) * interval_ms;
            return Some((newest, (newest - first) / interval_ms));
        }
        let newest = self.newest_before(after_ms, before_ms)?;
        let counted = self
            .instants_in(after_ms, newest.saturating_sub(1))
            .take(usize::try_from(MAX_COUNTED_INSTANTS).unwrap_or(usize::MAX))
            .count();
        Some((
            newest,
            u64::try_from(counted).unwrap_or(MAX_COUNTED_INSTANTS),
        ))
    }

    /// The newest instant in (`after_ms`, `before_ms`), found by looking back over windows
    /// that grow from a minute to the search horizon, so that a dense schedule is not walked
    /// over a whole outage.
    fn newest_before(&self, after_ms: u64, before_ms: u64) -> Option<u64> {
        const WINDOWS_MS: [u64; 5] = [
            MS_PER_MINUTE,
            MS_PER_HOUR,
            MS_PER_DAY,
            32 * MS_PER_DAY,
            u64::MAX,
        ];
        WINDOWS_MS.iter().find_map(|window| {
            let from = after_ms.max(before_ms.saturating_sub(*window));
            self.instants_in(from, before_ms.saturating_sub(1)).last()
        })
    }
}

/// What `literal` means, or why it means nothing.
fn meaning_of(literal: &str) -> Result<Meaning, ScheduleError> {
    if literal == NEVER {
        return Ok(Meaning::Never);
    }
    match forms::every_interval(literal) {
        forms::Every::Interval(interval_ms) => {
            if literal.len() > MAX_LITERAL_BYTES {
                return Err(ScheduleError::LiteralTooLong {
                    input: Excerpt::of(literal),
                    len: literal.len(),
                });
            }
            return Ok(Meaning::Every { interval_ms });
        }
        forms::Every::Zero => {
            return Err(ScheduleError::ZeroInterval {
                input: Excerpt::of(literal),
            });
        }
        forms::Every::TooLong => {
            return Err(ScheduleError::IntervalTooLong {
                input: Excerpt::of(literal),
            });
        }
        forms::Every::NotThisForm => {}
    }
    forms::calendar(literal).map_err(|failure| match failure {
        forms::Failure::Unrecognised => ScheduleError::Malformed {
            input: Excerpt::of(literal),
        },
        forms::Failure::At(problem) => ScheduleError::Invalid {
            input: Excerpt::of(literal),
            column: problem.column.saturating_add(1),
            reason: problem.reason,
        },
    })
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(literal: &str) -> Result<Self, Self::Err> {
        Schedule::parse(literal)
    }
}

impl TryFrom<String> for Schedule {
    type Error = ScheduleError;

    fn try_from(literal: String) -> Result<Self, Self::Error> {
        Schedule::of(literal.into_boxed_str())
    }
}

/// The literal, as the string it was registered as.
impl Serialize for Schedule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.literal)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.literal)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const SECOND: u64 = MS_PER_SECOND;
    const MINUTE: u64 = MS_PER_MINUTE;
    const HOUR: u64 = MS_PER_HOUR;
    const DAY: u64 = MS_PER_DAY;

    #[test]
    fn accepts_the_grammar() {
        let cases: &[(&str, Option<u64>)] = &[
            ("@never", None),
            ("every.1.seconds", Some(SECOND)),
            ("every.1.second", Some(SECOND)),
            ("every.5.seconds", Some(5 * SECOND)),
            ("every.05.seconds", Some(5 * SECOND)),
            ("every.0001.second", Some(SECOND)),
            ("every.10.minutes", Some(10 * MINUTE)),
            ("every.1.minute", Some(MINUTE)),
            ("every.1.hour", Some(HOUR)),
            ("every.999.hours", Some(999 * HOUR)),
            ("every.8784.hours", Some(366 * DAY)),
            ("every.1.day", Some(DAY)),
            ("every.366.days", Some(366 * DAY)),
            ("every.527040.minutes", Some(366 * DAY)),
            ("every.31622400.seconds", Some(366 * DAY)),
            // 32 digits: the longest literal that fits MAX_LITERAL_BYTES.
            (
                "every.00000000000000000000000000000001.seconds",
                Some(SECOND),
            ),
        ];
        for &(literal, interval_ms) in cases {
            let schedule = Schedule::parse(literal)
                .unwrap_or_else(|err| panic!("{literal:?} should be accepted: {err}"));
            assert_eq!(schedule.as_str(), literal);
            assert_eq!(schedule.to_string(), literal);
            assert_eq!(schedule.interval_ms(), interval_ms, "{literal:?}");
            assert_eq!(schedule.is_never(), interval_ms.is_none());
        }
    }

    #[test]
    fn rejects_everything_else() {
        use ScheduleError::*;
        type Kind = fn(&ScheduleError) -> bool;
        let malformed: Kind = |err| matches!(err, Malformed { .. });
        let zero: Kind = |err| matches!(err, ZeroInterval { .. });
        let too_long: Kind = |err| matches!(err, IntervalTooLong { .. });
        let padded: Kind = |err| matches!(err, LiteralTooLong { .. });
        let cases: &[(&str, Kind)] = &[
            ("", malformed),
            ("every.0.seconds", zero),
            ("every.000.seconds", zero),
            ("every.367.days", too_long),
            ("every.8785.hours", too_long),
            ("every.31622401.seconds", too_long),
            ("every.99999999999.seconds", too_long),
            ("every.18446744073709551615.seconds", too_long),
            ("every.18446744073709551616.seconds", too_long),
            (
                "every.99999999999999999999999999999999999999.days",
                too_long,
            ),
            ("every.000000000000000000000000000000001.seconds", padded),
            ("every.-1.seconds", malformed),
            ("every.+1.seconds", malformed),
            ("every.1.5.seconds", malformed),
            ("every.1e3.seconds", malformed),
            ("every.١.seconds", malformed),
            ("every..seconds", malformed),
            ("every.1.", malformed),
            ("every.1", malformed),
            ("every.seconds", malformed),
            ("every.1.weeks", malformed),
            ("every.1.Seconds", malformed),
            ("every.1.secs", malformed),
            ("EVERY.1.seconds", malformed),
            ("every 1 seconds", malformed),
            ("every.1 .seconds", malformed),
            (" every.1.seconds", malformed),
            ("every.1.seconds ", malformed),
            ("every.1.seconds\n", malformed),
            ("\tevery.1.seconds", malformed),
            ("@NEVER", malformed),
            ("@never ", malformed),
            ("never", malformed),
            ("@", malformed),
        ];
        for &(literal, is_expected_kind) in cases {
            match Schedule::parse(literal) {
                Ok(schedule) => panic!("{literal:?} should be rejected, got {schedule:?}"),
                Err(err) => {
                    assert!(
                        is_expected_kind(&err),
                        "{literal:?}: unexpected error {err:?}"
                    );
                    let message = err.to_string();
                    assert!(message.starts_with("invalid schedule \""), "{message}");
                    assert!(message.contains(&format!("{:?}", literal)), "{message}");
                }
            }
        }
    }

    #[test]
    fn error_messages_state_the_grammar() {
        let err = Schedule::parse("every.0.seconds").err();
        assert_eq!(
            err.map(|err| err.to_string()).as_deref(),
            Some(
                "invalid schedule \"every.0.seconds\": N must be at least 1; expected \
                 every.<N>.<seconds|minutes|hours|days> with 1 ≤ N and an interval of at most \
                 366 days, or @never"
            )
        );
        let message = Schedule::parse("every.367.days")
            .err()
            .map(|err| err.to_string());
        assert!(
            message.as_deref().is_some_and(|message| message.ends_with(
                "expected every.<N>.<seconds|minutes|hours|days> with 1 ≤ N and an \
                 interval of at most 366 days, or @never"
            )),
            "{message:?}"
        );
        for literal in ["", "every.1.seconds\n", "every.1.weeks"] {
            let message = Schedule::parse(literal).err().map(|err| err.to_string());
            assert!(
                message
                    .as_deref()
                    .is_some_and(|message| message.ends_with(&format!("expected {ALL_FORMS}"))),
                "{message:?}"
            );
        }
    }

    #[test]
    fn error_messages_truncate_and_escape_the_input() {
        let huge = format!("every.1.{}\u{1b}", "x".repeat(10_000));
        let message = Schedule::parse(&huge).err().map(|err| err.to_string());
        let message = message.unwrap_or_default();
        assert!(message.len() < 300, "{message}");
        assert!(message.contains("\"…"), "{message}");
        assert!(!message.contains('\u{1b}'));

        let message = Schedule::parse("every.1.seconds\n")
            .err()
            .map(|err| err.to_string());
        assert!(
            message
                .unwrap_or_default()
                .contains(r#""every.1.seconds\n""#)
        );
    }

    #[test]
    fn serializes_as_the_plain_literal() -> Result<(), serde_json::Error> {
        let schedule = Schedule::parse("every.05.seconds").ok();
        assert_eq!(serde_json::to_string(&schedule)?, r#""every.05.seconds""#);
        let parsed: Schedule = serde_json::from_str(r#""@never""#)?;
        assert!(parsed.is_never());
        let refused = serde_json::from_str::<Schedule>(r#""every.0.seconds""#);
        assert!(refused.is_err_and(|err| err.to_string().contains("N must be at least 1")));
        Ok(())
    }

    #[test]
    fn next_instant_after_is_epoch_aligned() {
        let every_10s = Schedule::parse("every.10.seconds").ok();
        let next = |ms| every_10s.as_ref().and_then(|s| s.next_instant_after(ms));
        assert_eq!(next(0), Some(10_000));
        assert_eq!(next(9_999), Some(10_000));
        assert_eq!(next(10_000), Some(20_000));
        assert_eq!(next(1_700_000_000_001), Some(1_700_000_010_000));

        let never = Schedule::parse("@never").ok();
        assert_eq!(never.and_then(|s| s.next_instant_after(0)), None);
    }

    #[test]
    fn next_instant_after_returns_none_instead_of_overflowing() {
        let every_second = Schedule::parse("every.1.second").ok();
        let every_year = Schedule::parse("every.366.days").ok();
        let next = |schedule: &Option<Schedule>, ms| {
            schedule.as_ref().and_then(|s| s.next_instant_after(ms))
        };
        assert!(next(&every_year, LAST_ALIGNED_INPUT_MS).is_some());
        // The guarantee reaches beyond the last instant a tick message can state in RFC 3339.
        let last_rfc3339_ms = chrono::DateTime::parse_from_rfc3339("9999-12-31T23:59:59.999Z")
            .map(|instant| instant.timestamp_millis())
            .ok()
            .and_then(|millis| u64::try_from(millis).ok());
        assert_eq!(last_rfc3339_ms, Some(253_402_300_799_999));
        assert!(last_rfc3339_ms.is_some_and(|millis| millis < LAST_ALIGNED_INPUT_MS));
        assert_eq!(next(&every_second, u64::MAX), None);
        assert_eq!(next(&every_year, u64::MAX), None);
        assert_eq!(next(&every_year, u64::MAX - 1), None);
    }

    #[test]
    fn instants_in_lists_a_window() {
        let every_10s = Schedule::parse("every.10.seconds").ok();
        let instants = |after, until| -> Vec<u64> {
            every_10s
                .iter()
                .flat_map(|s| s.instants_in(after, until))
                .collect()
        };
        assert_eq!(instants(0, 30_000), vec![10_000, 20_000, 30_000]);
        assert_eq!(instants(10_000, 29_999), vec![20_000]);
        assert_eq!(instants(10_000, 10_000), Vec::<u64>::new());
        assert_eq!(instants(20_000, 10_000), Vec::<u64>::new());
        let near_end: Vec<u64> = every_10s
            .iter()
            .flat_map(|s| s.instants_in(u64::MAX - 25_000, u64::MAX))
            .collect();
        let last = u64::MAX / 10_000 * 10_000;
        assert_eq!(near_end, vec![last - 20_000, last - 10_000, last]);

        let never = Schedule::parse("@never").ok();
        assert_eq!(
            never
                .iter()
                .flat_map(|s| s.instants_in(0, u64::MAX))
                .count(),
            0
        );
    }

    /// The largest N that each unit accepts, with the unit's spellings.
    const UNITS: [(&str, &str, u64); 4] = [
        ("second", "seconds", 366 * 86_400),
        ("minute", "minutes", 366 * 1_440),
        ("hour", "hours", 366 * 24),
        ("day", "days", 366),
    ];

    /// Valid literals: every unit spelling, any N in range, a few padding zeros.
    fn invalid(literal: &str) -> (usize, String) {
        match Schedule::parse(literal) {
            Err(ScheduleError::Invalid { column, reason, .. }) => (column, reason),
            other => panic!("{literal:?}: expected a calendar error, got {other:?}"),
        }
    }

    #[test]
    fn calendar_forms_are_accepted_and_keep_their_literal() {
        for literal in [
            "every.1.days.at.09:30",
            "every.2.days.at.06:00:30",
            "every.MON|WED|FRI.at.09:30",
            "every.SUN.at.02:30",
            "0 30 9 * * MON-FRI",
            "*/15 * * * *",
            "0 0 L * *",
            "0 9 15W * *",
            "0 9 * * MON#2",
            "@daily",
            "@hourly",
            "@at 2030-01-31T09:30:00Z",
            "TZ=Europe/Berlin every.MON|FRI.at.09:30",
            "TZ=America/New_York 0 30 9 * * MON-FRI",
            "TZ=Asia/Kathmandu @at 2030-01-31T09:30:00+05:45",
        ] {
            let schedule = Schedule::parse(literal)
                .unwrap_or_else(|error| panic!("{literal:?} should be accepted: {error}"));
            assert_eq!(schedule.as_str(), literal);
            assert!(schedule.is_calendar(), "{literal}");
            assert_eq!(schedule.interval_ms(), None, "{literal}");
        }
        assert_eq!(
            Schedule::parse("TZ=Europe/Berlin @daily")
                .map(|schedule| schedule.zone_name().to_owned())
                .ok()
                .as_deref(),
            Some("Europe/Berlin")
        );
        assert_eq!(
            Schedule::parse("@daily")
                .ok()
                .map(|s| s.zone_name().to_owned())
                .as_deref(),
            Some("UTC")
        );
    }

    #[test]
    fn calendar_errors_say_what_is_wrong_and_where() {
        let cases: &[(&str, usize, &str)] = &[
            ("TZ=Mars/Base @daily", 4, "unknown time zone"),
            (
                "TZ=Europe/Berlin every.5.seconds",
                18,
                "only to calendar forms",
            ),
            ("TZ=Europe/Berlin @never", 18, "only to calendar forms"),
            ("TZ=Europe/Berlin", 1, "followed by one space"),
            ("0 0 30 2 *", 1, "never fires"),
            ("every.MON|FUN.at.09:30", 11, "\"FUN\" is not a day"),
            ("every.MON|MON.at.09:30", 11, "named twice"),
            ("every.0.days.at.09:30", 7, "from 1 to 366"),
            ("every.1.days.at.24:00", 17, "not a hour"),
            ("every.1.days.at.9:30", 17, "not a hour"),
            ("every.1.days.at.09:60", 20, "not a minute"),
            ("@at yesterday", 5, "not an RFC 3339 instant"),
            ("0 9 * * MON#0", 13, "#0"),
        ];
        for (literal, column, says) in cases {
            let (at, reason) = invalid(literal);
            assert_eq!(
                (at, reason.contains(says)),
                (*column, true),
                "{literal:?}: {at} {reason}"
            );
        }
        let long = format!("0 0 * * {}", "MON,".repeat(70));
        let (_, reason) = invalid(&long);
        assert!(reason.contains("at most 256"), "{reason}");
        let message = Schedule::parse("0 25 * * *")
            .err()
            .map(|error| error.to_string());
        assert_eq!(
            message.as_deref(),
            Some(
                "invalid schedule \"0 25 * * *\": at column 3: 25 is out of range for the hour \
                 field (0–23)"
            )
        );
    }

    /// Daylight saving's marks (SPEC §2, the preview's `dst`). Berlin left summer time on
    /// 2026-10-25 at 01:00 UTC, so local 02:00–02:59 happened twice: a half-hourly schedule fires
    /// in both passes, each marked; a fixed time fires once, in the first pass, marked; and a
    /// fixed time skipped in spring (2026-03-29, 02:00 → 03:00) fires at the jump, marked.
    #[test]
    fn daylight_saving_marks_repeated_and_skipped_local_times() {
        let ms = |at: &str| -> u64 {
            let instant: jiff::Timestamp = at.parse().expect("an instant");
            u64::try_from(instant.as_millisecond()).expect("after the epoch")
        };
        let fires = |literal: &str, after: &str, count: usize| -> Vec<(u64, Option<Dst>)> {
            let schedule = Schedule::parse(literal).expect("a schedule");
            let mut at = ms(after);
            (0..count)
                .map(|_| {
                    let next = schedule.next_fire(at).expect("it fires again");
                    at = next.0;
                    next
                })
                .collect()
        };
        assert_eq!(
            fires("TZ=Europe/Berlin */30 * * * *", "2026-10-24T23:00:00Z", 6),
            [
                (ms("2026-10-24T23:30:00Z"), None),
                (ms("2026-10-25T00:00:00Z"), Some(Dst::Repeat)),
                (ms("2026-10-25T00:30:00Z"), Some(Dst::Repeat)),
                (ms("2026-10-25T01:00:00Z"), Some(Dst::Repeat)),
                (ms("2026-10-25T01:30:00Z"), Some(Dst::Repeat)),
                (ms("2026-10-25T02:00:00Z"), None),
            ]
        );
        assert_eq!(
            fires("TZ=Europe/Berlin 30 2 * * *", "2026-10-24T12:00:00Z", 2),
            [
                (ms("2026-10-25T00:30:00Z"), Some(Dst::Repeat)),
                (ms("2026-10-26T01:30:00Z"), None),
            ]
        );
        assert_eq!(
            fires("TZ=Europe/Berlin 30 2 * * *", "2026-03-28T12:00:00Z", 2),
            [
                (ms("2026-03-29T01:00:00Z"), Some(Dst::Gap)),
                (ms("2026-03-30T00:30:00Z"), None),
            ]
        );
    }

    #[test]
    fn every_n_days_counts_days_since_the_epoch_in_the_zone() {
        // Day 20 454 is 2026-01-01, a multiple of 2.
        let schedule = Schedule::parse("every.2.days.at.06:00").expect("valid");
        let day = 86_400_000;
        let from = 20_453 * day;
        let fired: Vec<u64> = schedule.instants_in(from, from + 5 * day).collect();
        assert_eq!(
            fired,
            [20_454 * day + 6 * 3_600_000, 20_456 * day + 6 * 3_600_000]
        );
    }

    #[test]
    fn a_day_field_that_starts_with_a_star_still_steps() {
        let day = 86_400_000;
        // 2026-01-01 is day 20 454; `*/2` in day-of-month is the odd days, every weekday.
        let odd_days = Schedule::parse("0 0 */2 * *").expect("valid");
        let fired: Vec<u64> = odd_days
            .instants_in(20_454 * day, 20_454 * day + 5 * day)
            .collect();
        assert_eq!(fired, [20_456 * day, 20_458 * day]);
        // `1-7` and `*/7` (Sundays, by AND since one field starts with `*`): the first
        // Sunday of each month. 2026-01-04 is a Sunday.
        let first_sunday = Schedule::parse("0 0 1-7 * */7").expect("valid");
        assert_eq!(
            first_sunday.next_instant_after(20_454 * day),
            Some(20_457 * day)
        );
        // Both restricted: either matches (Vixie), the 13th or any Friday.
        let either = Schedule::parse("0 0 13 * FRI").expect("valid");
        // 2026-01-02 is a Friday.
        assert_eq!(either.next_instant_after(20_454 * day), Some(20_455 * day));
    }

    #[test]
    fn an_at_schedule_fires_once_and_then_never() {
        let schedule = Schedule::parse("@at 2030-01-31T09:30:00.250+01:00").expect("valid");
        let at = 1_896_078_600_250;
        assert_eq!(schedule.next_instant_after(0), Some(at));
        assert_eq!(schedule.next_instant_after(at - 1), Some(at));
        assert_eq!(schedule.next_instant_after(at), None);
        assert_eq!(schedule.instants_in(0, u64::MAX).count(), 1);
    }

    #[test]
    fn coalescing_a_calendar_outage_keeps_the_newest_and_counts_the_rest() {
        let minute = 60_000;
        let schedule = Schedule::parse("* * * * *").expect("valid");
        // Instants at minutes 1..=9 lie in (0, 10 min); the newest is minute 9.
        assert_eq!(
            schedule.coalesced_before(0, 10 * minute),
            Some((9 * minute, 8))
        );
        assert_eq!(schedule.coalesced_before(0, minute), None);
        let every = Schedule::parse("every.1.minute").expect("valid");
        assert_eq!(
            every.coalesced_before(0, 10 * minute),
            Some((9 * minute, 8))
        );
        // A dense calendar schedule over a long outage counts at most MAX_COUNTED_INSTANTS.
        let seconds = Schedule::parse("* * * * * *").expect("valid");
        let (newest, counted) = seconds
            .coalesced_before(0, 3 * 86_400_000)
            .expect("instants");
        assert_eq!(newest, 3 * 86_400_000 - 1_000);
        assert_eq!(counted, MAX_COUNTED_INSTANTS);
    }

    fn valid_literal() -> impl Strategy<Value = String> {
        (0..UNITS.len(), any::<bool>(), 0usize..8).prop_flat_map(|(unit, plural, zeros)| {
            let (singular, plural_name, max) = UNITS[unit];
            let name = if plural { plural_name } else { singular };
            (1..=max).prop_map(move |n| format!("every.{}{n}.{name}", "0".repeat(zeros)))
        })
    }

    fn any_schedule() -> impl Strategy<Value = Schedule> {
        prop_oneof![
            1 => Just("@never".to_owned()),
            20 => valid_literal(),
        ]
        .prop_filter_map("valid literal", |literal| Schedule::parse(&literal).ok())
    }

    fn ticking_schedule() -> impl Strategy<Value = (Schedule, u64)> {
        valid_literal().prop_filter_map("valid literal", |literal| {
            let schedule = Schedule::parse(&literal).ok()?;
            let interval = schedule.interval_ms()?;
            Some((schedule, interval))
        })
    }

    proptest! {
        #[test]
        fn accepted_literals_round_trip(literal in valid_literal()) {
            let schedule = Schedule::parse(&literal);
            prop_assert!(schedule.is_ok(), "{literal:?}: {schedule:?}");
            let schedule = schedule.ok();
            let shown = schedule.as_ref().map(|s| s.to_string());
            prop_assert_eq!(shown.as_deref(), Some(literal.as_str()));
            let reparsed = shown.as_deref().map(Schedule::parse).and_then(Result::ok);
            prop_assert_eq!(&reparsed, &schedule);
            let json = serde_json::to_string(&schedule).ok();
            prop_assert_eq!(json.clone(), Some(format!("{literal:?}")));
            let back = json.and_then(|json| serde_json::from_str::<Option<Schedule>>(&json).ok());
            prop_assert_eq!(back, Some(schedule));
        }

        #[test]
        fn too_long_intervals_are_rejected(unit in 0..UNITS.len(), excess in 1u64..1_000_000) {
            let (_, name, max) = UNITS[unit];
            let literal = format!("every.{}.{name}", max + excess);
            let rejected = matches!(
                Schedule::parse(&literal),
                Err(ScheduleError::IntervalTooLong { .. })
            );
            prop_assert!(rejected);
        }

        #[test]
        fn parse_never_panics(input in any::<String>()) {
            let _ = Schedule::parse(&input);
        }

        #[test]
        fn calendar_schedules_never_panic_and_fire_strictly_later(
            input in "(TZ=(Europe/Berlin|Pacific/Apia|Australia/Lord_Howe) )?[0-9*/,LW#?A-Z-]{1,6}( [0-9*/,LW#?A-Za-z-]{1,6}){4,5}",
            after in 0u64..=4_102_444_800_000,
        ) {
            if let Ok(schedule) = Schedule::parse(&input)
                && let Some(next) = schedule.next_instant_after(after)
            {
                prop_assert!(next > after);
                prop_assert_eq!(next % 1_000, 0);
            }
        }

        #[test]
        fn parse_never_panics_near_the_grammar(input in "(every|EVERY|@never)?[.]?[-+0-9]{0,30}[.]?(seconds?|minutes?|hours?|days?|weeks)?[ \n]?") {
            if let Ok(schedule) = Schedule::parse(&input) {
                prop_assert_eq!(schedule.as_str(), input.as_str());
                let in_range = schedule
                    .interval_ms()
                    .is_none_or(|interval| (1_000..=MAX_INTERVAL_MS).contains(&interval));
                prop_assert!(in_range);
            }
        }

        #[test]
        fn next_instant_is_aligned_strictly_after_and_within_one_interval(
            (schedule, interval) in ticking_schedule(),
            unix_ms in 0..=LAST_ALIGNED_INPUT_MS,
        ) {
            let next = schedule.next_instant_after(unix_ms);
            prop_assert!(next.is_some());
            let next = next.unwrap_or_default();
            prop_assert_eq!(next % interval, 0);
            prop_assert!(next > unix_ms);
            prop_assert!(next - unix_ms <= interval);
        }

        #[test]
        fn next_instant_never_overflows(schedule in any_schedule(), unix_ms in any::<u64>()) {
            if let (Some(next), Some(interval)) =
                (schedule.next_instant_after(unix_ms), schedule.interval_ms())
            {
                prop_assert_eq!(next % interval, 0);
                prop_assert!(next > unix_ms);
                prop_assert!(next - unix_ms <= interval);
            }
        }

        #[test]
        fn instants_in_agrees_with_next_instant_after(
            (schedule, interval) in ticking_schedule(),
            after in 0u64..4_000_000_000_000,
            span in 0u64..4,
        ) {
            let until = after + span * interval;
            let instants: Vec<u64> = schedule.instants_in(after, until).collect();
            let mut expected = Vec::new();
            let mut cursor = after;
            // Bounded: a `next_instant_after` that stops moving forward fails the assertions
            // below instead of filling memory.
            while expected.len() <= 4
                && let Some(next) = schedule.next_instant_after(cursor).filter(|t| *t <= until)
            {
                expected.push(next);
                cursor = next;
            }
            prop_assert_eq!(instants.len() as u64, span);
            prop_assert_eq!(instants, expected);
        }
    }
}
