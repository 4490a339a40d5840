//! The short chaos profile, part of the suite CI runs: the same as
//! `scripts/chaos --runs 2 --seconds 45 --seed 4` (one RabbitMQ run on a private broker, one
//! http run), each on power-loss filesystems and clocks of their own (libfaketime) (`/dev/fuse` and `tickd-powerloss` are required:
//! without them the test fails, it never skips).
//!
//! Each run also watches two webhook clocks, whatever its channel: the leader POSTs their
//! ticks to a receiver in the test process, which no fault touches, so the ticks checker
//! holds them to the strict rule (every instant delivered, within the liveness bound of the
//! last heal; a repeat only under the same `tick_id`). The test requires that each run had
//! webhook ticks to judge, so a wiring that records nothing fails it.
//!
//! Seed 4 is chosen for its faults: the nemesis draws its kinds from the seed alone, and with
//! the kinds in their current order run 4 steps the leader's clock as its fourth fault and
//! run 5 begins with a power loss of the leader, then steps the next leader's clock. Both runs
//! end with a power loss of every node before the durability check. A change to the kinds or
//! to the nemesis's draws can move them; the test then fails on "no power loss" or "no clock
//! step" and a new seed must be chosen.

use tickd_tests::chaos::history::LeaderRecovery;
use tickd_tests::chaos::nemesis::FaultKind;
use tickd_tests::chaos::webhooks::WEBHOOK_CLOCKS;
use tickd_tests::chaos::{self, Options};

/// At most one expected instant in this many may be unobserved: taken by an http pop whose
/// answer the poller never got (a pop cut off by a fault), so neither delivered nor lost.
/// More than that means the run watched too little to judge its ticks. The hand-run profiles
/// in docs/RELIABILITY.md saw 1 in 1 075.
const UNOBSERVED_ONE_IN: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_short_profile_finds_no_violation() {
    let options = Options {
        runs: 2,
        seconds: 45,
        seed: 4,
    };
    let reports = chaos::run(options).await;
    let summary = chaos::summary(&reports);
    println!("{}\n{summary}", chaos::header());
    let failed: Vec<u64> = reports
        .iter()
        .filter(|r| !r.violations.is_empty())
        .map(|r| r.seed)
        .collect();
    assert!(
        failed.is_empty(),
        "chaos runs with seeds {failed:?} found violations:\n{summary}"
    );
    assert!(summary.contains("lost 0"), "{summary}");
    // A verdict means something only if the run did something: faults, client operations,
    // and ticks to judge, of the run's channel and of its webhook clocks (each of those
    // watched for at least half the run).
    for report in &reports {
        let seed = report.seed;
        assert!(
            !report.faults.is_empty(),
            "seed {seed}: no fault\n{summary}"
        );
        assert!(
            report.operations > 0,
            "seed {seed}: no operation\n{summary}"
        );
        assert!(
            report.ticks.expected > 0,
            "seed {seed}: no tick expected\n{summary}"
        );
        assert!(
            report.ticks.unobserved * UNOBSERVED_ONE_IN <= report.ticks.expected,
            "seed {seed}: {} of {} instants unobserved\n{summary}",
            report.ticks.unobserved,
            report.ticks.expected
        );
        let hooks = &report.webhook_ticks;
        assert!(
            hooks.expected >= WEBHOOK_CLOCKS.max(1) as u64 * options.seconds / 2,
            "seed {seed}: too few webhook ticks to judge ({} expected for {WEBHOOK_CLOCKS} \
             clocks over {} s)\n{summary}",
            hooks.expected,
            options.seconds
        );
        assert_eq!(
            (hooks.delivered, hooks.lost),
            (hooks.expected, 0),
            "seed {seed}: webhook ticks not all delivered\n{summary}"
        );
    }
    // And at least one fault took the leader away and saw another elected within the bound
    // (a fault that outlasted the bound is a violation, checked above).
    assert!(
        reports
            .iter()
            .flat_map(|report| &report.faults)
            .any(|fault| matches!(fault.leader, LeaderRecovery::Elected { .. })),
        "no fault of the profile exercised a failover\n{summary}"
    );
    // And the nemesis cut the power of at least one node mid-run (the final power loss of
    // every node is not a nemesis fault and does not count).
    assert!(
        reports
            .iter()
            .flat_map(|report| &report.faults)
            .any(|fault| fault.kind == FaultKind::PowerLoss),
        "no fault of the profile was a power loss\n{summary}"
    );
    // And one stepped the leader's clock.
    assert!(
        reports
            .iter()
            .flat_map(|report| &report.faults)
            .any(|fault| fault.kind == FaultKind::ClockSkew),
        "no fault of the profile was a clock step\n{summary}"
    );
}
