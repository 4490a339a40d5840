//! Civil (wall-clock) time as whole seconds, with the Gregorian calendar's arithmetic.
//!
//! A calendar schedule matches local dates and times; the zone turns them into instants
//! ([`super::calendar`]). Local time is counted here as seconds since 1970-01-01T00:00:00 on
//! the wall clock, which makes "the next second", "the next day" and comparisons integer
//! operations. The conversions are Howard Hinnant's `days_from_civil` and `civil_from_days`,
//! exact for every date of the proleptic Gregorian calendar.

/// Seconds in a civil day (local days have 86 400 seconds; the zone accounts for the rest).
pub const SECONDS_PER_DAY: i64 = 86_400;

/// A local date and time, to the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Civil {
    /// The year, e.g. 2026.
    pub year: i32,
    /// The month, 1–12.
    pub month: u8,
    /// The day of the month, 1–31.
    pub day: u8,
    /// The hour, 0–23.
    pub hour: u8,
    /// The minute, 0–59.
    pub minute: u8,
    /// The second, 0–59.
    pub second: u8,
}

impl Civil {
    /// The local date and time `seconds` after 1970-01-01T00:00:00 (negative: before).
    pub fn of_seconds(seconds: i64) -> Civil {
        let days = seconds.div_euclid(SECONDS_PER_DAY);
        let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        // `of_day` is below 86 400, so each part fits in a u8.
        Civil {
            year,
            month,
            day,
            hour: (of_day / 3_600) as u8,
            minute: (of_day / 60 % 60) as u8,
            second: (of_day % 60) as u8,
        }
    }

    /// The day number since 1970-01-01 (negative before it).
    pub fn day_number(&self) -> i64 {
        days_from_civil(self.year, self.month, self.day)
    }

    /// The day of the week, 0 = Sunday … 6 = Saturday (cron's numbering).
    pub fn weekday(&self) -> u8 {
        weekday_of_day_number(self.day_number())
    }
}

/// The day of the week of a day number, 0 = Sunday; 1970-01-01 was a Thursday.
pub fn weekday_of_day_number(days: i64) -> u8 {
    // rem_euclid of 7 is 0..=6.
    (days + 4).rem_euclid(7) as u8
}

/// Whether `year` is a Gregorian leap year.
pub fn is_leap(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// The number of days of `month` (1–12) in `year`.
pub fn days_in_month(year: i32, month: u8) -> u8 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a Gregorian date.
pub fn days_from_civil(year: i32, month: u8, day: u8) -> i64 {
    let year = i64::from(year) - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The Gregorian date of a day number since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i32, u8, u8) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Day numbers come from instants of at most a few thousand years: the year fits an i32,
    // and month and day are 1..=12 and 1..=31 by construction.
    (year as i32, month as u8, day as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_round_trip_over_four_centuries() {
        for days in (-200_000..200_000).step_by(7) {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(
                days_from_civil(year, month, day),
                days,
                "{year}-{month}-{day}"
            );
            assert!(day <= days_in_month(year, month));
        }
    }

    #[test]
    fn known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        // 2026-11-28 is a Saturday.
        assert_eq!(weekday_of_day_number(days_from_civil(2026, 11, 28)), 6);
        let at = Civil::of_seconds(1_764_328_245);
        assert_eq!(
            (at.year, at.month, at.day, at.hour, at.minute, at.second),
            (2025, 11, 28, 11, 10, 45)
        );
        assert_eq!(Civil::of_seconds(-1).year, 1969);
    }
}
