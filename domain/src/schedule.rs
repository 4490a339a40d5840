//! Schedules: when a clock ticks (SPEC §3).
//!
//! A schedule is identified by its literal string: `every.5.seconds` and
//! `every.05.seconds` tick at the same instants but are two different
//! schedules, so two different clocks and two different RabbitMQ queues. The
//! literal is therefore kept exactly as registered, next to the interval it
//! denotes.
//!
//! Ticks are aligned to the Unix epoch: a schedule with interval I ticks at
//! every instant t (milliseconds since the epoch, UTC) with t mod I = 0. That
//! makes the instants a pure function of the schedule, identical on every node
//! and across restarts, which is what lets a new leader continue where the old
//! one stopped.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

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

/// The longest schedule literal, in bytes. The RabbitMQ queue of a clock is
/// named `ticktok-<name>;<schedule>` and RabbitMQ allows 255 bytes; with names
/// of at most 200 bytes, 255 − 8 − 1 − 200 = 46 bytes remain for the schedule.
/// Without leading zeros no valid literal comes close (the longest,
/// `every.31622400.seconds`, has 22 bytes); the limit only stops padding.
pub const MAX_LITERAL_BYTES: usize = 46;

/// The largest `unix_ms` for which [`Schedule::next_instant_after`] is
/// guaranteed to find an instant: the next instant is at most one interval
/// later, and no interval exceeds [`MAX_INTERVAL_MS`], so the result always
/// fits in a `u64` up to here. Above it the method returns `None` instead of
/// overflowing (about 584 million years from now, so never in practice).
pub const LAST_ALIGNED_INPUT_MS: u64 = u64::MAX - MAX_INTERVAL_MS;

/// The literal of the schedule that never ticks on its own.
const NEVER: &str = "@never";

/// The grammar, spelled out in every error so that a person can fix the input
/// without reading the documentation.
const GRAMMAR: &str = "every.<N>.<seconds|minutes|hours|days> with 1 ≤ N and an interval of at most 366 days, or @never";

/// When a clock ticks: `every.<N>.<unit>` or `@never`, kept as the literal the
/// client registered (the literal is the schedule's identity).
///
/// Constructed only through [`Schedule::parse`] (also used by `FromStr`,
/// `TryFrom<String>` and serde), so every value denotes a valid interval.
///
/// Shared, not copied: a schedule is one pointer to its literal and interval, a clone is a
/// reference count, and the registry keeps one copy of each schedule for all the clocks that
/// use it ([`crate::literals`]). Every clock holds one, so it is 8 bytes, not the 24 of a
/// literal and an interval side by side.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub struct Schedule(Arc<Parsed>);

/// A schedule's literal and what it means.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Parsed {
    /// The string exactly as registered; it names the clock's queue and is
    /// what clients compare, so it is never normalised.
    literal: Box<str>,
    /// The interval in milliseconds, derived from `literal`; `None` for
    /// `@never`.
    interval_ms: Option<u64>,
}

/// Why a schedule literal was refused. Every message quotes the input (as an
/// [`Excerpt`]) and states the grammar, so it can be shown to a person as is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The input does not follow the grammar at all (wrong prefix, unknown
    /// unit, a sign or a fraction in N, white space, upper case, empty).
    #[error("invalid schedule {input}: expected {grammar}", grammar = GRAMMAR)]
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
    /// The literal is well formed but longer than [`MAX_LITERAL_BYTES`],
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
        let interval_ms = interval_ms_of(&literal)?;
        Ok(Schedule(Arc::new(Parsed {
            literal,
            interval_ms,
        })))
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
        self.0.interval_ms.is_none()
    }

    /// The interval between two ticks; `None` for `@never`.
    pub fn interval(&self) -> Option<Duration> {
        self.0.interval_ms.map(Duration::from_millis)
    }

    /// The interval in milliseconds, the unit of all instant arithmetic;
    /// `None` for `@never`.
    pub fn interval_ms(&self) -> Option<u64> {
        self.0.interval_ms
    }

    /// The first tick instant strictly after `unix_ms`: the smallest t > `unix_ms`
    /// with t mod interval = 0. It is at most one interval after `unix_ms`.
    ///
    /// `None` for `@never`, and for inputs above [`LAST_ALIGNED_INPUT_MS`]
    /// whose next instant would not fit in a `u64` (checked arithmetic, never
    /// an overflow).
    pub fn next_instant_after(&self, unix_ms: u64) -> Option<u64> {
        let interval = self.0.interval_ms?;
        (unix_ms / interval).checked_add(1)?.checked_mul(interval)
    }

    /// The tick instants t with `after_ms` < t ≤ `until_ms`, in increasing
    /// order: the ticks that fell due in a window, for catching up after a
    /// leader change. Empty for `@never`.
    ///
    /// The iterator is lazy and may be very long (a one-second schedule over a
    /// year); the caller bounds it, for instance with `take`.
    pub fn instants_in(&self, after_ms: u64, until_ms: u64) -> impl Iterator<Item = u64> + use<> {
        let interval = self.0.interval_ms;
        let first = self.next_instant_after(after_ms);
        std::iter::successors(first, move |instant| {
            interval.and_then(|step| instant.checked_add(step))
        })
        .take_while(move |instant| *instant <= until_ms)
    }
}

/// Checks `literal` against the grammar and returns its interval (`None` for
/// `@never`). All arithmetic is checked: a count that overflows is an interval
/// that is too long, not a panic.
fn interval_ms_of(literal: &str) -> Result<Option<u64>, ScheduleError> {
    if literal == NEVER {
        return Ok(None);
    }
    let malformed = || ScheduleError::Malformed {
        input: Excerpt::of(literal),
    };
    let rest = literal.strip_prefix("every.").ok_or_else(malformed)?;
    let (digits, unit) = rest.split_once('.').ok_or_else(malformed)?;
    let unit_ms = unit_ms(unit).ok_or_else(malformed)?;
    // `u64::from_str` would accept a leading '+', so the digits are checked here.
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(malformed());
    }
    let count = digits.bytes().try_fold(0u64, |count, digit| {
        count.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    });
    let interval_ms = match count {
        Some(0) => {
            return Err(ScheduleError::ZeroInterval {
                input: Excerpt::of(literal),
            });
        }
        Some(count) => count
            .checked_mul(unit_ms)
            .filter(|interval_ms| *interval_ms <= MAX_INTERVAL_MS),
        None => None,
    };
    let interval_ms = interval_ms.ok_or_else(|| ScheduleError::IntervalTooLong {
        input: Excerpt::of(literal),
    })?;
    if literal.len() > MAX_LITERAL_BYTES {
        return Err(ScheduleError::LiteralTooLong {
            input: Excerpt::of(literal),
            len: literal.len(),
        });
    }
    Ok(Some(interval_ms))
}

/// The length of a unit in milliseconds; plural and singular names are both
/// accepted, nothing else (no upper case, no abbreviations).
fn unit_ms(unit: &str) -> Option<u64> {
    match unit {
        "second" | "seconds" => Some(MS_PER_SECOND),
        "minute" | "minutes" => Some(MS_PER_MINUTE),
        "hour" | "hours" => Some(MS_PER_HOUR),
        "day" | "days" => Some(MS_PER_DAY),
        _ => None,
    }
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
            assert_eq!(schedule.interval(), interval_ms.map(Duration::from_millis));
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
        for literal in ["", "every.367.days", "every.1.seconds\n"] {
            let message = Schedule::parse(literal).err().map(|err| err.to_string());
            assert!(
                message.as_deref().is_some_and(|message| message.ends_with(
                    "expected every.<N>.<seconds|minutes|hours|days> with 1 ≤ N and an \
                     interval of at most 366 days, or @never"
                )),
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
