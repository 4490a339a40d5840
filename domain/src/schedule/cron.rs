//! Cron expressions (SPEC §3): five fields (minute hour day-of-month month day-of-week) or six
//! (seconds first), separated by single spaces, and the `@daily`-style macros.
//!
//! Each field is a list of items separated by commas; an item is `*`, a number or a name, a
//! range `a-b`, any of those with a step `/n`, or (day fields) `?` and Quartz's `L`, `W` and
//! `#`. An error names the field and the column where it went wrong, like a compiler.

use super::error::Problem;
use super::pattern::{Days, MonthDays, Pattern, WeekDays};

/// Month names, January first.
const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
/// Day names, Sunday first (cron's 0).
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The macros and the expressions they stand for.
const MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// One field's place in the expression and its bounds.
#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    low: u8,
    high: u8,
    names: &'static [&'static str],
    /// The value the first name stands for (1 for months, 0 for days).
    first_name_value: u8,
}

const SECOND: Field = Field::numeric("second", 0, 59);
const MINUTE: Field = Field::numeric("minute", 0, 59);
const HOUR: Field = Field::numeric("hour", 0, 23);
const DAY_OF_MONTH: Field = Field::numeric("day-of-month", 1, 31);
const MONTH: Field = Field {
    name: "month",
    low: 1,
    high: 12,
    names: &MONTHS,
    first_name_value: 1,
};
const DAY_OF_WEEK: Field = Field {
    name: "day-of-week",
    low: 0,
    high: 7,
    names: &WEEKDAYS,
    first_name_value: 0,
};

impl Field {
    const fn numeric(name: &'static str, low: u8, high: u8) -> Field {
        Field {
            name,
            low,
            high,
            names: &[],
            first_name_value: 0,
        }
    }
}

/// The expression a macro stands for, if `text` is one.
pub fn expand_macro(text: &str) -> Option<&'static str> {
    MACROS
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, expression)| *expression)
}

/// Parses a cron expression that starts at byte `offset` of the schedule's literal (for the
/// columns of errors).
pub fn parse(text: &str, offset: usize) -> Result<Pattern, Problem> {
    let fields: Vec<(usize, &str)> = split_fields(text, offset)?;
    let (seconds, rest) = match fields.len() {
        5 => (None, &fields[..]),
        6 => (Some(fields[0]), &fields[1..]),
        count => {
            return Err(Problem::at(
                offset,
                format!(
                    "a cron expression has 5 fields (minute hour day-of-month month \
                     day-of-week) or 6 (seconds first), separated by single spaces; this one \
                     has {count}"
                ),
            ));
        }
    };
    let [minute, hour, month_day, month, week_day] = [rest[0], rest[1], rest[2], rest[3], rest[4]];
    let starts_with_star = |field: &(usize, &str)| field.1.starts_with('*');
    let fixed_time = !(seconds.as_ref().is_some_and(starts_with_star)
        || starts_with_star(&minute)
        || starts_with_star(&hour));
    let seconds = match seconds {
        Some((at, text)) => plain_field(SECOND, text, at)?,
        None => 1,
    };
    let month_days = month_day_field(month_day.1, month_day.0)?;
    let week_days = week_day_field(week_day.1, week_day.0)?;
    Ok(Pattern {
        seconds,
        minutes: plain_field(MINUTE, minute.1, minute.0)?,
        // Hours fit 24 bits, months 13.
        hours: plain_field(HOUR, hour.1, hour.0)? as u32,
        months: plain_field(MONTH, month.1, month.0)? as u16,
        days: Days::Cron {
            month_days,
            week_days,
        },
        fixed_time,
    })
}

/// The fields and the byte offset of each; refuses empty fields (two spaces in a row).
fn split_fields(text: &str, offset: usize) -> Result<Vec<(usize, &str)>, Problem> {
    let mut fields = Vec::new();
    let mut at = offset;
    for field in text.split(' ') {
        if field.is_empty() {
            return Err(Problem::at(
                at,
                "empty field: cron fields are separated by exactly one space".to_owned(),
            ));
        }
        fields.push((at, field));
        at += field.len() + 1;
    }
    Ok(fields)
}

/// A field of numbers and names only (seconds, minutes, hours, months): its bit set.
fn plain_field(field: Field, text: &str, offset: usize) -> Result<u64, Problem> {
    let mut mask = 0u64;
    for (at, item) in items(text, offset) {
        mask |= range_item(field, item, at)?;
    }
    Ok(mask)
}

/// The items of a comma-separated list, with their offsets.
fn items(text: &str, offset: usize) -> impl Iterator<Item = (usize, &str)> {
    text.split(',').scan(offset, |at, item| {
        let start = *at;
        *at += item.len() + 1;
        Some((start, item))
    })
}

/// `*`, `v`, `a-b`, each optionally followed by `/step`; `v/step` runs from v to the field's
/// end.
fn range_item(field: Field, item: &str, at: usize) -> Result<u64, Problem> {
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => {
            let step_at = at + range.len() + 1;
            let step = number(step, step_at, field.name)?;
            if step == 0 {
                return Err(Problem::at(
                    step_at,
                    format!("a step of 0 in the {} field never advances", field.name),
                ));
            }
            (range, Some(step))
        }
        None => (item, None),
    };
    let (low, high) = if range == "*" {
        (field.low, field.high)
    } else if let Some((low, high)) = range.split_once('-') {
        let low_value = value(field, low, at)?;
        let high_value = value(field, high, at + low.len() + 1)?;
        if low_value > high_value {
            return Err(Problem::at(
                at,
                format!(
                    "the range {range} of the {} field runs backwards; write the smaller \
                     value first",
                    field.name
                ),
            ));
        }
        (low_value, high_value)
    } else {
        let single = value(field, range, at)?;
        match step {
            Some(_) => (single, field.high),
            None => (single, single),
        }
    };
    let step = usize::from(step.unwrap_or(1));
    let mut mask = 0u64;
    for bit in (low..=high).step_by(step) {
        mask |= 1 << bit;
    }
    Ok(mask)
}

/// A number or a name of `field`, within its bounds.
fn value(field: Field, text: &str, at: usize) -> Result<u8, Problem> {
    if let Some(index) = field
        .names
        .iter()
        .position(|name| name.eq_ignore_ascii_case(text))
    {
        // At most 12 names.
        return Ok(field.first_name_value + index as u8);
    }
    let value = number(text, at, field.name)?;
    if value < field.low || value > field.high {
        return Err(Problem::at(
            at,
            format!(
                "{value} is out of range for the {} field ({}–{})",
                field.name, field.low, field.high
            ),
        ));
    }
    Ok(value)
}

/// Decimal digits, at most two meaningful ones.
fn number(text: &str, at: usize, field: &str) -> Result<u8, Problem> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        let what = if text.is_empty() {
            "nothing".to_owned()
        } else {
            format!("{text:?}")
        };
        return Err(Problem::at(
            at,
            format!("expected a number in the {field} field, found {what}"),
        ));
    }
    text.parse::<u8>()
        .ok()
        .filter(|value| *value < 100)
        .ok_or_else(|| Problem::at(at, format!("{text} is too large for the {field} field")))
}

/// The day-of-month field: numbers, ranges and steps, `*`, `?`, `L`, `LW` and `15W`.
fn month_day_field(text: &str, offset: usize) -> Result<MonthDays, Problem> {
    if text == "?" {
        return Ok(MonthDays::any());
    }
    let mut days = MonthDays {
        restricted: !text.starts_with('*'),
        ..MonthDays::default()
    };
    for (at, item) in items(text, offset) {
        match item {
            "L" => days.last = true,
            "LW" => days.last_weekday = true,
            _ if item.len() > 1 && item.ends_with('W') => {
                let day = value(DAY_OF_MONTH, &item[..item.len() - 1], at)?;
                days.nearest_weekday |= 1 << day;
            }
            // Days fit 32 bits.
            _ => days.days |= range_item(DAY_OF_MONTH, item, at)? as u32,
        }
    }
    Ok(days)
}

/// The day-of-week field: numbers (0 and 7 both Sunday), names, ranges and steps, `*`, `?`,
/// `5L` (the last Friday of the month) and `MON#2` (its second Monday).
fn week_day_field(text: &str, offset: usize) -> Result<WeekDays, Problem> {
    if text == "?" {
        return Ok(WeekDays::any());
    }
    let mut days = WeekDays {
        restricted: !text.starts_with('*'),
        ..WeekDays::default()
    };
    let sunday_folded = |value: u8| value % 7;
    for (at, item) in items(text, offset) {
        if let Some((day, nth)) = item.split_once('#') {
            let day = sunday_folded(value(DAY_OF_WEEK, day, at)?);
            let nth_at = at + item.len() - nth.len();
            let nth = number(nth, nth_at, DAY_OF_WEEK.name)?;
            if !(1..=5).contains(&nth) {
                return Err(Problem::at(
                    nth_at,
                    format!("#{nth} names no week of a month; use #1 to #5"),
                ));
            }
            days.nth.push((day, nth));
        } else if item.len() > 1 && item.ends_with('L') {
            let day = sunday_folded(value(DAY_OF_WEEK, &item[..item.len() - 1], at)?);
            days.last |= 1 << day;
        } else {
            let mask = range_item(DAY_OF_WEEK, item, at)?;
            // Bit 7 (Sunday written as 7) folds onto bit 0; the rest fit 7 bits.
            days.days |= ((mask | (mask >> 7)) & 0x7f) as u8;
        }
    }
    Ok(days)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> Pattern {
        parse(text, 0).unwrap_or_else(|problem| panic!("{text:?}: {problem:?}"))
    }

    fn problem(text: &str) -> Problem {
        parse(text, 0)
            .err()
            .unwrap_or_else(|| panic!("{text:?} was accepted"))
    }

    #[test]
    fn fields_fill_their_sets() {
        let every_quarter = pattern("*/15 * * * *");
        assert_eq!(every_quarter.minutes, 1 | 1 << 15 | 1 << 30 | 1 << 45);
        assert_eq!(every_quarter.seconds, 1);
        assert!(!every_quarter.fixed_time);
        let weekdays = pattern("0 30 9 * * MON-FRI");
        assert_eq!(weekdays.seconds, 1);
        assert_eq!(weekdays.minutes, 1 << 30);
        assert_eq!(weekdays.hours, 1 << 9);
        assert!(weekdays.fixed_time);
        let Days::Cron {
            week_days,
            month_days,
        } = &weekdays.days
        else {
            panic!("cron days");
        };
        assert_eq!(week_days.days, 0b011_1110);
        assert!(!month_days.restricted);
        let sundays = pattern("0 0 * * 7,sun");
        let Days::Cron { week_days, .. } = &sundays.days else {
            panic!("cron days");
        };
        assert_eq!(week_days.days, 1);
        assert_eq!(pattern("0 0 1 jan-mar/2 *").months, 1 << 1 | 1 << 3);
        assert_eq!(pattern("5/20 * * * *").minutes, 1 << 5 | 1 << 25 | 1 << 45);
    }

    #[test]
    fn quartz_day_forms() {
        let Days::Cron { month_days, .. } = pattern("0 9 15W,L * ?").days else {
            panic!("cron days");
        };
        assert!(month_days.last && month_days.nearest_weekday == 1 << 15);
        let Days::Cron { week_days, .. } = pattern("0 9 ? * MON#2,5L").days else {
            panic!("cron days");
        };
        assert_eq!(week_days.nth, vec![(1, 2)]);
        assert_eq!(week_days.last, 1 << 5);
    }

    #[test]
    fn errors_name_the_field_and_the_column() {
        let cases = [
            ("0 25 * * *", 2, "out of range for the hour field"),
            ("0 0 * * * * *", 0, "has 7"),
            ("0  0 * * *", 2, "empty field"),
            ("*/0 * * * *", 2, "step of 0"),
            ("0 0 * FOO *", 6, "expected a number in the month field"),
            ("0 0 * * MON#6", 12, "#6"),
            ("0 5-2 * * *", 2, "runs backwards"),
            ("0 0 32 * *", 4, "out of range for the day-of-month field"),
        ];
        for (text, column, says) in cases {
            let problem = problem(text);
            assert_eq!(problem.column, column, "{text:?}: {problem:?}");
            assert!(problem.reason.contains(says), "{text:?}: {problem:?}");
        }
    }

    #[test]
    fn macros_expand_to_five_fields() {
        assert_eq!(expand_macro("@hourly"), Some("0 * * * *"));
        assert!(!pattern(expand_macro("@hourly").unwrap_or_default()).fixed_time);
        assert!(pattern(expand_macro("@daily").unwrap_or_default()).fixed_time);
        assert_eq!(expand_macro("@sometimes"), None);
    }
}
