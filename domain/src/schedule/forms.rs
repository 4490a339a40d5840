//! The literal forms of SPEC §3, recognised from their first bytes and parsed into a
//! [`Meaning`]: Ticktok's `every.<N>.<unit>`, and the calendar forms with their optional
//! zone.

use jiff::tz::TimeZone;

use super::calendar::Calendar;
use super::error::Problem;
use super::pattern::{Days, Pattern};
use super::{MAX_CALENDAR_BYTES, MAX_INTERVAL_MS, MS_PER_DAY, MS_PER_HOUR, MS_PER_MINUTE};
use super::{MS_PER_SECOND, Meaning, cron, zones};

/// What a literal is as Ticktok's `every.<N>.<unit>`.
pub enum Every {
    /// That form, with its interval in milliseconds.
    Interval(u64),
    /// That form with N = 0.
    Zero,
    /// That form with an interval over 366 days (or an N no integer holds).
    TooLong,
    /// Another form, or none.
    NotThisForm,
}

/// Why a literal is not a calendar form.
pub enum Failure {
    /// It resembles no form at all.
    Unrecognised,
    /// It is a calendar form with a problem at a column.
    At(Problem),
}

impl From<Problem> for Failure {
    fn from(problem: Problem) -> Self {
        Failure::At(problem)
    }
}

/// Checks `literal` against `every.<N>.<unit>`. All arithmetic is checked: a count that
/// overflows is an interval that is too long, not a panic.
pub fn every_interval(literal: &str) -> Every {
    let Some((digits, unit)) = literal
        .strip_prefix("every.")
        .and_then(|rest| rest.split_once('.'))
    else {
        return Every::NotThisForm;
    };
    let Some(unit_ms) = unit_ms(unit) else {
        return Every::NotThisForm;
    };
    // `u64::from_str` would accept a leading '+', so the digits are checked here.
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return Every::NotThisForm;
    }
    let count = digits.bytes().try_fold(0u64, |count, digit| {
        count.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    });
    match count {
        Some(0) => Every::Zero,
        Some(count) => count
            .checked_mul(unit_ms)
            .filter(|interval_ms| *interval_ms <= MAX_INTERVAL_MS)
            .map_or(Every::TooLong, Every::Interval),
        None => Every::TooLong,
    }
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

/// Parses a calendar form, with its optional `TZ=<zone> ` prefix.
pub fn calendar(literal: &str) -> Result<Meaning, Failure> {
    let (zone, body, offset) = match literal.strip_prefix("TZ=") {
        Some(rest) => {
            let Some((name, body)) = rest.split_once(' ') else {
                return Err(Problem::at(
                    0,
                    "TZ=<zone> must be followed by one space and a calendar schedule".to_owned(),
                )
                .into());
            };
            let zone = zones::zone(name).ok_or_else(|| {
                Problem::at(
                    3,
                    format!(
                        "unknown time zone {name:?}; write an IANA name such as \
                         Europe/Berlin or America/New_York (zone database {})",
                        zones::database_version()
                    ),
                )
            })?;
            let offset = 3 + name.len() + 1;
            if body == super::NEVER || !matches!(every_interval(body), Every::NotThisForm) {
                return Err(Problem::at(
                    offset,
                    "a zone applies only to calendar forms; every.<N>.<unit> and @never are \
                     aligned to the Unix epoch in UTC"
                        .to_owned(),
                )
                .into());
            }
            (zone, body, offset)
        }
        None => (TimeZone::UTC, literal, 0),
    };
    if literal.len() > MAX_CALENDAR_BYTES {
        return Err(Problem::at(
            MAX_CALENDAR_BYTES,
            format!(
                "the schedule has {} bytes; at most {MAX_CALENDAR_BYTES} are allowed",
                literal.len()
            ),
        )
        .into());
    }
    if let Some(instant) = body.strip_prefix("@at ") {
        return at(instant, offset + 4, zone);
    }
    let pattern = if let Some(expression) = cron::expand_macro(body) {
        cron::parse(expression, offset)?
    } else if body.starts_with("every.") {
        every_at(body, offset)?
    } else if body.starts_with(|first: char| first.is_ascii_digit() || first == '*') {
        cron::parse(body, offset)?
    } else {
        return Err(Failure::Unrecognised);
    };
    if !pattern.fires_at_all() {
        return Err(Problem::at(
            offset,
            "this schedule never fires: no date of a 400-year Gregorian cycle matches its \
             days and months"
                .to_owned(),
        )
        .into());
    }
    Ok(Meaning::Calendar(Calendar { zone, pattern }))
}

/// `@at <RFC 3339 instant>`: one tick at that instant (whether it is past is the API's
/// question, at registration).
fn at(text: &str, offset: usize, zone: TimeZone) -> Result<Meaning, Failure> {
    let instant: jiff::Timestamp = text.parse().map_err(|_| {
        Problem::at(
            offset,
            format!(
                "{text:?} is not an RFC 3339 instant; write it as 2027-01-31T09:30:00Z or \
                 2027-01-31T09:30:00+01:00"
            ),
        )
    })?;
    let instant_ms = u64::try_from(instant.as_millisecond()).map_err(|_| {
        Problem::at(
            offset,
            "the instant is before 1970-01-01T00:00:00Z".to_owned(),
        )
    })?;
    Ok(Meaning::At { instant_ms, zone })
}

/// `every.<N>.days.at.HH:mm[:ss]` and `every.<MON|TUE|…>.at.HH:mm[:ss]`.
fn every_at(body: &str, offset: usize) -> Result<Pattern, Failure> {
    let rest = &body["every.".len()..];
    let Some((days, time)) = rest.split_once(".at.") else {
        return Err(Failure::Unrecognised);
    };
    let days_at = offset + "every.".len();
    let time_at = days_at + days.len() + ".at.".len();
    let (hour, minute, second) = time_of_day(time, time_at)?;
    let days = match days
        .strip_suffix(".days")
        .or_else(|| days.strip_suffix(".day"))
    {
        Some(count) => every_nth_day(count, days_at)?,
        None => weekdays(days, days_at)?,
    };
    Ok(Pattern {
        seconds: 1 << second,
        minutes: 1 << minute,
        hours: 1 << hour,
        months: 0b1_1111_1111_1110,
        days,
        fixed_time: true,
    })
}

/// N of `every.<N>.days.at`: 1 to 366.
fn every_nth_day(count: &str, at: usize) -> Result<Days, Problem> {
    let wrong = || {
        Problem::at(
            at,
            format!("{count:?} is not a number of days from 1 to 366 (every.<N>.days.at.HH:mm)"),
        )
    };
    if count.is_empty() || !count.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(wrong());
    }
    let count: u32 = count.parse().map_err(|_| wrong())?;
    if !(1..=366).contains(&count) {
        return Err(wrong());
    }
    Ok(Days::EveryNth(count))
}

/// `MON|WED|FRI`: the days of the week, each once.
fn weekdays(text: &str, offset: usize) -> Result<Days, Problem> {
    const NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    let mut days = 0u8;
    let mut at = offset;
    for name in text.split('|') {
        let Some(index) = NAMES.iter().position(|known| *known == name) else {
            return Err(Problem::at(
                at,
                format!(
                    "{name:?} is not a day; write days as MON TUE WED THU FRI SAT SUN joined by \
                     | (every.MON|FRI.at.09:30), or a count (every.2.days.at.09:30)"
                ),
            ));
        };
        // At most 7 names.
        let bit = 1u8 << index;
        if days & bit != 0 {
            return Err(Problem::at(at, format!("{name} is named twice")));
        }
        days |= bit;
        at += name.len() + 1;
    }
    Ok(Days::Cron {
        month_days: super::pattern::MonthDays::any(),
        week_days: super::pattern::WeekDays {
            restricted: true,
            days,
            ..super::pattern::WeekDays::default()
        },
    })
}

/// `HH:mm` or `HH:mm:ss`, two digits each, on the 24-hour clock.
fn time_of_day(text: &str, at: usize) -> Result<(u8, u8, u8), Problem> {
    let parts: Vec<&str> = text.split(':').collect();
    let bounds = [("hour", 23u8), ("minute", 59), ("second", 59)];
    if !(2..=3).contains(&parts.len()) {
        return Err(Problem::at(
            at,
            format!("{text:?} is not a time of day; write HH:mm or HH:mm:ss (09:30, 21:05:30)"),
        ));
    }
    let mut values = [0u8; 3];
    let mut column = at;
    for ((part, (name, high)), value) in parts.iter().zip(bounds).zip(values.iter_mut()) {
        let parsed = (part.len() == 2 && part.bytes().all(|byte| byte.is_ascii_digit()))
            .then(|| part.parse::<u8>().ok())
            .flatten()
            .filter(|parsed| *parsed <= high);
        *value = parsed.ok_or_else(|| {
            Problem::at(
                column,
                format!("{part:?} is not a {name} (two digits, 00 to {high:02})"),
            )
        })?;
        column += part.len() + 1;
    }
    Ok((values[0], values[1], values[2]))
}
