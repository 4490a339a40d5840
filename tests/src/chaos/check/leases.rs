//! Lease clocks: every instant acked exactly once (SPEC §2 "lease and ack", §7).
//!
//! A lease clock's consumer (see [`crate::chaos::leases`]) acks whatever it is handed, and no
//! fault touches it, so whatever the nemesis does to the nodes — the leader killed with leases
//! open, a lease whose answer was lost, an ack whose answer was lost — every instant of the
//! clock must in the end have been handed out and acked exactly once. A tick whose lease ran
//! out before its ack is handed out again, with the same `tick_id` and one more delivery; that
//! is redelivery, counted, not a violation.

use std::collections::BTreeMap;

use crate::chaos::check::ticks::{expected_instants, summarize};
use crate::chaos::history::{AckOutcome, LeasedTick, Violation, WatchedClock};

/// The name this checker reports under.
pub const CHECKER: &str = "leases";

/// The verdict on the lease clocks, with the numbers for the run's summary.
///
/// `expected = acked + coalesced + lost`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseReport {
    /// Instants of the lease clocks inside the window.
    pub expected: u64,
    /// Expected instants acked at least once (more than once is also a violation).
    pub acked: u64,
    /// Expected instants never handed out whose tick a later tick's `skipped` counts: coalesced
    /// after an outage longer than the catch-up window (SPEC §7), not lost.
    pub coalesced: u64,
    /// Expected instants never acked and not coalesced.
    pub lost: u64,
    /// Ticks (of any instant) acked more than once.
    pub acked_twice: u64,
    /// Handings of a tick whose lease had run out before (`deliveries` above 1).
    pub redelivered: u64,
    /// Acks counted because a retried ack found the receipt `unknown` after an attempt whose
    /// answer was lost ([`AckOutcome::AckedByLostAttempt`]).
    pub acked_by_lost_attempt: u64,
    /// The broken guarantees, with their evidence.
    pub violations: Vec<Violation>,
}

/// Checks the ticks `leased` handed to the consumers of the lease clocks `clocks`.
///
/// For each clock, over [`expected_instants`] in `window` (from its registration to one
/// liveness bound before its consumer stopped, which leaves a tick whose lease answer was lost
/// time to come back):
///
/// - **Lost**: an expected instant no ack acked, either never handed out or handed out and
///   never acked (every ack refused or unanswered). Not lost, but counted as coalesced: an
///   instant never handed out that a later handed tick's `skipped` covers (the tick due at
///   `u` with `skipped = n` stands for the instants `u - n·I .. u - I`).
/// - **Acked twice**: two receipts of one tick both acked (answered so, or by an attempt
///   whose answer was lost). Judged for every tick handed out, inside the window or not.
/// - **Redelivery**: each handing of one tick must carry more `deliveries` than the one before
///   (a lease whose answer was lost leaves a gap in the count, never a repeat).
/// - **Foreign id**: the tick due at `T` is `<clock>-T`, and `T` is a multiple of the
///   interval; so every handing of an instant carries the same `tick_id`.
pub fn check(clocks: &[WatchedClock], leased: &[LeasedTick], window: (u64, u64)) -> LeaseReport {
    let mut report = LeaseReport::default();
    for clock in clocks {
        let mut by_instant: BTreeMap<u64, Vec<&LeasedTick>> = BTreeMap::new();
        for tick in leased.iter().filter(|tick| tick.clock == clock.id) {
            by_instant.entry(tick.scheduled_ms).or_default().push(tick);
        }
        for handings in by_instant.values_mut() {
            handings.sort_by_key(|tick| tick.leased_ms);
        }
        count_handings(&by_instant, &mut report);
        let violations = [
            foreign_ids(clock, &by_instant),
            deliveries_not_growing(clock, &by_instant),
            acked_twice(clock, &by_instant, &mut report),
            lost(clock, &by_instant, window, &mut report),
        ];
        report.violations.extend(violations.into_iter().flatten());
    }
    report
}

/// Counts the redeliveries and the acks a lost attempt made.
fn count_handings(by_instant: &BTreeMap<u64, Vec<&LeasedTick>>, report: &mut LeaseReport) {
    for tick in by_instant.values().flatten() {
        report.redelivered += u64::from(tick.deliveries > 1);
        report.acked_by_lost_attempt += u64::from(tick.ack == AckOutcome::AckedByLostAttempt);
    }
}

/// A violation of this checker about `clock`.
fn violation(clock: &WatchedClock, detail: String) -> Violation {
    Violation {
        checker: CHECKER,
        detail: format!("lease clock {}: {detail}", clock.id),
    }
}

/// Handings whose `tick_id` is not `<clock>-<instant>` or whose instant is off the schedule.
fn foreign_ids(
    clock: &WatchedClock,
    by_instant: &BTreeMap<u64, Vec<&LeasedTick>>,
) -> Option<Violation> {
    let foreign: Vec<String> = by_instant
        .iter()
        .flat_map(|(&instant, handings)| handings.iter().map(move |tick| (instant, tick)))
        .filter(|(instant, tick)| {
            clock.interval_ms == 0
                || instant % clock.interval_ms != 0
                || tick.tick_id != format!("{}-{instant}", clock.id)
        })
        .map(|(instant, tick)| format!("{} at {instant}", tick.tick_id))
        .collect();
    (!foreign.is_empty()).then(|| {
        violation(
            clock,
            format!(
                "tick(s) under a foreign id (the tick due at T is {}-T, and T is a multiple of \
                 {} ms): {}",
                clock.id,
                clock.interval_ms,
                summarize(&foreign)
            ),
        )
    })
}

/// Ticks handed out again without one more delivery than the handing before.
fn deliveries_not_growing(
    clock: &WatchedClock,
    by_instant: &BTreeMap<u64, Vec<&LeasedTick>>,
) -> Option<Violation> {
    let stuck: Vec<String> = by_instant
        .values()
        .filter(|handings| {
            handings[0].deliveries == 0
                || handings
                    .windows(2)
                    .any(|pair| pair[1].deliveries <= pair[0].deliveries)
        })
        .map(|handings| {
            let counts: Vec<String> = handings
                .iter()
                .map(|tick| tick.deliveries.to_string())
                .collect();
            format!(
                "{} with deliveries {}",
                handings[0].tick_id,
                counts.join(", ")
            )
        })
        .collect();
    (!stuck.is_empty()).then(|| {
        violation(
            clock,
            format!(
                "tick(s) handed out again without one more delivery (a repeat must count \
                 1, 2, 3, …, with gaps only for leases whose answer was lost): {}",
                summarize(&stuck)
            ),
        )
    })
}

/// Ticks acked more than once; counts them in `report`.
fn acked_twice(
    clock: &WatchedClock,
    by_instant: &BTreeMap<u64, Vec<&LeasedTick>>,
    report: &mut LeaseReport,
) -> Option<Violation> {
    let twice: Vec<String> = by_instant
        .values()
        .filter(|handings| handings.iter().filter(|tick| tick.ack.is_acked()).count() > 1)
        .map(|handings| format!("{}: {}", handings[0].tick_id, describe(handings)))
        .collect();
    report.acked_twice += twice.len() as u64;
    (!twice.is_empty()).then(|| {
        violation(
            clock,
            format!(
                "{} tick(s) acked more than once: {}",
                twice.len(),
                summarize(&twice)
            ),
        )
    })
}

/// Expected instants never acked and not coalesced; counts every expected instant in
/// `report`.
fn lost(
    clock: &WatchedClock,
    by_instant: &BTreeMap<u64, Vec<&LeasedTick>>,
    window: (u64, u64),
    report: &mut LeaseReport,
) -> Option<Violation> {
    let mut lost = Vec::new();
    for instant in expected_instants(clock, window) {
        report.expected += 1;
        match by_instant.get(&instant) {
            Some(handings) if handings.iter().any(|tick| tick.ack.is_acked()) => report.acked += 1,
            Some(handings) => lost.push(format!("{instant} ({})", describe(handings))),
            None if coalesced(clock, by_instant, instant) => report.coalesced += 1,
            None => lost.push(format!("{instant} (never handed out)")),
        }
    }
    report.lost += lost.len() as u64;
    (!lost.is_empty()).then(|| {
        violation(
            clock,
            format!(
                "{} tick(s) never acked in window {}..={} (registered at {}): {}",
                lost.len(),
                window.0,
                window.1,
                clock.registered_ms,
                summarize(&lost)
            ),
        )
    })
}

/// Whether a tick handed out after `instant` counts it in its `skipped`: the instants a tick
/// skipped are the ones just before it.
fn coalesced(
    clock: &WatchedClock,
    by_instant: &BTreeMap<u64, Vec<&LeasedTick>>,
    instant: u64,
) -> bool {
    by_instant
        .range(instant.saturating_add(1)..)
        .flat_map(|(_, handings)| handings)
        .any(|tick| {
            let behind = (tick.scheduled_ms - instant) / clock.interval_ms.max(1);
            tick.skipped >= behind
        })
}

/// Every handing of one tick: its receipt, its deliveries and what its ack came to.
fn describe(handings: &[&LeasedTick]) -> String {
    let each: Vec<String> = handings
        .iter()
        .map(|tick| {
            format!(
                "receipt {} leased at {} with deliveries {}: {}",
                tick.receipt, tick.leased_ms, tick.deliveries, tick.ack
            )
        })
        .collect();
    format!("handed out {} time(s): {}", handings.len(), each.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: u64 = 1_000;
    const WINDOW: (u64, u64) = (10_000, 20_000);

    fn clock() -> WatchedClock {
        WatchedClock {
            id: "c".into(),
            interval_ms: I,
            registered_ms: 10_000,
            paused: Vec::new(),
            unsettled: Vec::new(),
        }
    }

    /// The tick due at `instant`, handed out for the `deliveries`th time and `ack`ed so.
    fn handed(instant: u64, deliveries: u64, ack: AckOutcome) -> LeasedTick {
        LeasedTick {
            clock: "c".into(),
            tick_id: format!("c-{instant}"),
            scheduled_ms: instant,
            deliveries,
            skipped: 0,
            receipt: format!("r{instant}.{deliveries}"),
            leased_ms: instant + 100 * deliveries,
            ack,
        }
    }

    /// Every instant of the window handed out once and acked.
    fn each_acked_once() -> Vec<LeasedTick> {
        (11..=20)
            .map(|k| handed(k * I, 1, AckOutcome::Acked))
            .collect()
    }

    fn without(mut leased: Vec<LeasedTick>, instant: u64) -> Vec<LeasedTick> {
        leased.retain(|tick| tick.scheduled_ms != instant);
        leased
    }

    fn details(report: &LeaseReport) -> Vec<&str> {
        report
            .violations
            .iter()
            .map(|violation| violation.detail.as_str())
            .collect()
    }

    #[test]
    fn every_instant_acked_once_passes_through_redelivery_lost_answers_and_coalescing() {
        let mut leased = each_acked_once();
        for instant in [12_000, 14_000, 15_000, 16_000] {
            leased = without(leased, instant);
        }
        leased.extend([
            // Its lease ran out before the ack: refused, handed out again, acked.
            handed(12_000, 1, AckOutcome::Refused("expired".into())),
            handed(12_000, 2, AckOutcome::Acked),
            // Its first lease's answer was lost; the ack's first answer too.
            handed(14_000, 2, AckOutcome::AckedByLostAttempt),
            // 15 000 never handed out: coalesced into 16 000.
            LeasedTick {
                skipped: 1,
                ..handed(16_000, 1, AckOutcome::Acked)
            },
            // After the window: only judged for acks.
            handed(21_000, 1, AckOutcome::Acked),
        ]);
        let report = check(&[clock()], &leased, WINDOW);
        assert!(report.violations.is_empty(), "{report:#?}");
        assert_eq!(
            (
                report.expected,
                report.acked,
                report.coalesced,
                report.lost,
                report.acked_twice,
                report.redelivered,
                report.acked_by_lost_attempt
            ),
            (10, 9, 1, 0, 0, 2, 1),
            "{report:#?}"
        );
    }

    #[test]
    fn an_instant_never_acked_is_lost() {
        // 13 000 never handed out (and 14 000 skips nothing); 17 000 handed out, its ack
        // refused, never handed out again; 18 000's ack unanswered.
        let mut leased = without(without(without(each_acked_once(), 13_000), 17_000), 18_000);
        leased.extend([
            handed(17_000, 1, AckOutcome::Refused("expired".into())),
            handed(18_000, 1, AckOutcome::Unanswered),
        ]);
        let report = check(&[clock()], &leased, WINDOW);
        assert_eq!(
            (report.expected, report.acked, report.lost),
            (10, 7, 3),
            "{report:#?}"
        );
        let found = details(&report);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains("3 tick(s) never acked"), "{found:#?}");
        assert!(found[0].contains("13000 (never handed out)"), "{found:#?}");
        assert!(
            found[0].contains(
                "17000 (handed out 1 time(s): receipt r17000.1 leased at 17100 \
                               with deliveries 1: refused (expired))"
            ),
            "{found:#?}"
        );
        assert!(found[0].contains("ack unanswered"), "{found:#?}");
        assert!(report.violations.iter().all(|v| v.checker == CHECKER));
    }

    #[test]
    fn a_tick_acked_twice_is_a_violation_in_the_window_or_after_it() {
        let mut leased = each_acked_once();
        leased.extend([
            handed(15_000, 2, AckOutcome::AckedByLostAttempt),
            handed(25_000, 1, AckOutcome::Acked),
            handed(25_000, 2, AckOutcome::Acked),
        ]);
        let report = check(&[clock()], &leased, WINDOW);
        assert_eq!(
            (report.acked, report.lost, report.acked_twice),
            (10, 0, 2),
            "{report:#?}"
        );
        let found = details(&report);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].contains("2 tick(s) acked more than once"),
            "{found:#?}"
        );
        assert!(
            found[0].contains("c-15000: handed out 2 time(s)"),
            "{found:#?}"
        );
        assert!(found[0].contains("c-25000"), "{found:#?}");
    }

    #[test]
    fn a_repeat_without_one_more_delivery_or_under_a_foreign_id_is_a_violation() {
        let mut leased = without(each_acked_once(), 13_000);
        leased.extend([
            handed(13_000, 1, AckOutcome::Refused("expired".into())),
            handed(13_000, 1, AckOutcome::Acked),
            LeasedTick {
                tick_id: "other-15000".into(),
                ..handed(15_000, 2, AckOutcome::Refused("unknown".into()))
            },
        ]);
        let report = check(&[clock()], &leased, WINDOW);
        assert_eq!(report.lost, 0, "{report:#?}");
        let found = details(&report);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(
            found[0].contains("foreign id") && found[0].contains("other-15000 at 15000"),
            "{found:#?}"
        );
        assert!(
            found[1].contains("c-13000 with deliveries 1, 1"),
            "{found:#?}"
        );
    }

    #[test]
    fn only_the_instants_just_before_a_tick_count_as_its_skipped() {
        // 14 000 and 15 000 never handed out; 16 000 skipped only one of them.
        let mut leased = without(without(without(each_acked_once(), 14_000), 15_000), 16_000);
        leased.push(LeasedTick {
            skipped: 1,
            ..handed(16_000, 1, AckOutcome::Acked)
        });
        let report = check(&[clock()], &leased, WINDOW);
        assert_eq!((report.coalesced, report.lost), (1, 1), "{report:#?}");
        assert!(
            details(&report)[0].contains("14000 (never handed out)"),
            "{report:#?}"
        );
    }
}
