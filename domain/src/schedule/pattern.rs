//! What a calendar schedule matches on the wall clock, and the next local second it matches.
//!
//! Every calendar form compiles to one [`Pattern`]: sets of seconds, minutes, hours and months,
//! and a rule for days ([`Days`]). Cron fields fill the sets from their text
//! ([`super::cron`]); `every.MON|FRI.at.09:30` and `every.2.days.at.06:00` fill them from
//! theirs. The search is over local time only; the zone turns matches into instants
//! ([`super::calendar`]).

use super::civil::{self, Civil, SECONDS_PER_DAY};

/// The local times a calendar schedule fires at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// Seconds of the minute, bits 0–59.
    pub seconds: u64,
    /// Minutes of the hour, bits 0–59.
    pub minutes: u64,
    /// Hours of the day, bits 0–23.
    pub hours: u32,
    /// Months, bits 1–12.
    pub months: u16,
    /// Which days.
    pub days: Days,
    /// Whether the time of day is fixed (no `*` in the second, minute or hour field): such a
    /// schedule fires once for a local time that occurs twice, and at the jump for one that
    /// is skipped (Vixie cron's rule, SPEC §3). Otherwise it fires at every instant whose
    /// local time matches.
    pub fixed_time: bool,
}

/// The days a pattern fires on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Days {
    /// Cron's two day fields, as Vixie cron reads them: when both are restricted (neither
    /// starts with `*` or `?`) a day matches when either does; otherwise when both do (a
    /// field written `*` holds every day, so the other decides, and `*/2` still steps).
    Cron {
        /// The day-of-month field.
        month_days: MonthDays,
        /// The day-of-week field.
        week_days: WeekDays,
    },
    /// Days whose number since 1970-01-01 (local) is a multiple of this (`every.N.days.at`).
    EveryNth(u32),
}

/// A day-of-month field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MonthDays {
    /// Whether the field restricts the day (it does not start with `*` and is not `?`); see
    /// [`Days::Cron`].
    pub restricted: bool,
    /// Days 1–31 named directly.
    pub days: u32,
    /// `L`: the last day of the month.
    pub last: bool,
    /// `LW`: the last weekday (Monday to Friday) of the month.
    pub last_weekday: bool,
    /// `15W`: the weekday nearest the 15th, within the month; bits 1–31.
    pub nearest_weekday: u32,
}

/// A day-of-week field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeekDays {
    /// Whether the field restricts the day (it does not start with `*` and is not `?`); see
    /// [`Days::Cron`].
    pub restricted: bool,
    /// Days of the week, bits 0 (Sunday) – 6 (Saturday).
    pub days: u8,
    /// `MON#2`: the n-th such day of the month, as (weekday, n) with n 1–5.
    pub nth: Vec<(u8, u8)>,
    /// `5L`: the last such day of the month, bits 0–6.
    pub last: u8,
}

impl Days {
    fn matches(&self, at: &Civil) -> bool {
        match self {
            Days::EveryNth(step) => at.day_number().rem_euclid(i64::from(*step)) == 0,
            Days::Cron {
                month_days,
                week_days,
            } => {
                if month_days.restricted && week_days.restricted {
                    month_days.matches(at) || week_days.matches(at)
                } else {
                    month_days.matches(at) && week_days.matches(at)
                }
            }
        }
    }
}

impl MonthDays {
    /// Every day of the month, unrestricted: `*`.
    pub fn any() -> Self {
        MonthDays {
            restricted: false,
            days: ALL_MONTH_DAYS,
            ..MonthDays::default()
        }
    }

    fn matches(&self, at: &Civil) -> bool {
        let length = civil::days_in_month(at.year, at.month);
        let weekday = at.weekday();
        let is_weekday = (1..=5).contains(&weekday);
        if self.days & (1 << at.day) != 0 || (self.last && at.day == length) {
            return true;
        }
        if self.last_weekday && is_weekday && last_weekday_of_month(at.year, at.month) == at.day {
            return true;
        }
        self.nearest_weekday != 0
            && (1..=31u8)
                .filter(|target| self.nearest_weekday & (1 << target) != 0)
                .any(|target| nearest_weekday(at.year, at.month, target) == Some(at.day))
    }
}

impl WeekDays {
    /// Every day of the week, unrestricted: `*`.
    pub fn any() -> Self {
        WeekDays {
            restricted: false,
            days: ALL_WEEK_DAYS,
            ..WeekDays::default()
        }
    }

    fn matches(&self, at: &Civil) -> bool {
        let weekday = at.weekday();
        let bit = 1u8 << weekday;
        if self.days & bit != 0 {
            return true;
        }
        let length = civil::days_in_month(at.year, at.month);
        if self.last & bit != 0 && at.day + 7 > length {
            return true;
        }
        let nth = at.day.div_ceil(7);
        self.nth.contains(&(weekday, nth))
    }
}

/// Bits 1–31: every day of a month.
const ALL_MONTH_DAYS: u32 = 0xffff_fffe;
/// Bits 0–6: every day of a week.
const ALL_WEEK_DAYS: u8 = 0x7f;

/// The last Monday-to-Friday day of a month.
fn last_weekday_of_month(year: i32, month: u8) -> u8 {
    let length = civil::days_in_month(year, month);
    let weekday = civil::weekday_of_day_number(civil::days_from_civil(year, month, length));
    match weekday {
        0 => length - 2,
        6 => length - 1,
        _ => length,
    }
}

/// Quartz's `W`: the weekday nearest `target` in the same month (a Saturday moves to the
/// Friday before, a Sunday to the Monday after, never across the month's edge). `None` when
/// the month has no such day.
fn nearest_weekday(year: i32, month: u8, target: u8) -> Option<u8> {
    let length = civil::days_in_month(year, month);
    if target > length {
        return None;
    }
    let weekday = civil::weekday_of_day_number(civil::days_from_civil(year, month, target));
    Some(match weekday {
        6 if target == 1 => 3,
        6 => target - 1,
        0 if target == length => target - 2,
        0 => target + 1,
        _ => target,
    })
}

/// The first set bit at or above `from` in `mask`, if any.
fn next_bit(mask: u64, from: u8) -> Option<u8> {
    let above = mask.checked_shr(u32::from(from)).unwrap_or(0);
    // trailing_zeros of a non-zero u64 is below 64, so the sum fits in a u8.
    (above != 0).then(|| from + above.trailing_zeros() as u8)
}

impl Pattern {
    /// The first local second at or after `from` (seconds since 1970-01-01 on the wall clock)
    /// and before `limit` that the pattern matches.
    pub fn next_match(&self, from: i64, limit: i64) -> Option<i64> {
        let mut at = from;
        while at < limit {
            let now = Civil::of_seconds(at);
            let day_start = at - at.rem_euclid(SECONDS_PER_DAY);
            if self.months & (1 << now.month) == 0 {
                let (year, month) = if now.month == 12 {
                    (now.year + 1, 1)
                } else {
                    (now.year, now.month + 1)
                };
                at = civil::days_from_civil(year, month, 1) * SECONDS_PER_DAY;
                continue;
            }
            if !self.days.matches(&now) {
                at = day_start + SECONDS_PER_DAY;
                continue;
            }
            let Some(hour) = next_bit(u64::from(self.hours), now.hour) else {
                at = day_start + SECONDS_PER_DAY;
                continue;
            };
            if hour > now.hour {
                at = day_start + i64::from(hour) * 3_600;
                continue;
            }
            let hour_start = day_start + i64::from(hour) * 3_600;
            let Some(minute) = next_bit(self.minutes, now.minute) else {
                at = hour_start + 3_600;
                continue;
            };
            if minute > now.minute {
                at = hour_start + i64::from(minute) * 60;
                continue;
            }
            let minute_start = hour_start + i64::from(minute) * 60;
            let Some(second) = next_bit(self.seconds, now.second) else {
                at = minute_start + 60;
                continue;
            };
            return Some(minute_start + i64::from(second));
        }
        None
    }

    /// Whether some day of a 400-year Gregorian cycle matches the months and days: if none
    /// does, none ever will (the calendar repeats every 400 years), and the schedule never
    /// fires.
    pub fn fires_at_all(&self) -> bool {
        let start = civil::days_from_civil(2000, 1, 1);
        (start..start + 146_097).any(|day| {
            let at = Civil::of_seconds(day * SECONDS_PER_DAY);
            self.months & (1 << at.month) != 0 && self.days.matches(&at)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_weekdays_stay_in_their_month() {
        // 2026-08-01 is a Saturday: 1W is Monday the 3rd, not July 31st.
        assert_eq!(nearest_weekday(2026, 8, 1), Some(3));
        // 2026-08-15 is a Saturday: the Friday before.
        assert_eq!(nearest_weekday(2026, 8, 15), Some(14));
        // 2026-05-31 is a Sunday and the month's last day: the Friday before.
        assert_eq!(nearest_weekday(2026, 5, 31), Some(29));
        assert_eq!(nearest_weekday(2026, 2, 30), None);
        // 2026-10-31 is a Saturday: the last weekday of October is Friday the 30th.
        assert_eq!(last_weekday_of_month(2026, 10), 30);
    }

    #[test]
    fn next_bit_finds_the_first_set_bit_from_a_position() {
        assert_eq!(next_bit(0b1010, 0), Some(1));
        assert_eq!(next_bit(0b1010, 2), Some(3));
        assert_eq!(next_bit(0b1010, 4), None);
        assert_eq!(next_bit(1 << 59, 59), Some(59));
    }
}
