//! The short chaos profile, part of the suite CI runs: the same as
//! `scripts/chaos --runs 2 --seconds 45 --seed 7` (one RabbitMQ run on a private broker, one
//! http run).

use tickd_tests::chaos::{self, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_short_profile_finds_no_violation() {
    let reports = chaos::run(Options {
        runs: 2,
        seconds: 45,
        seed: 7,
    })
    .await;
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
}
