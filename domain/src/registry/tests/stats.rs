//! Tick statistics: each clock's deliveries and missed ticks, the cluster's series, and what a
//! purge and a restore do to them.

use super::*;

#[test]
fn tick_statistics_count_each_clocks_deliveries_and_missed_ticks() {
    let (registry, _) = outage_then_deliveries(Level::V0_2);
    // The RabbitMQ clock: 12 late (7 + 5), 2 coalesced by the first intent and 6 in the
    // outbox by the second; of the two settled ticks only the stored one is delivered,
    // published 75 s after its instant.
    let rabbit = stats_of(&registry, "ra");
    assert_eq!(
        (
            rabbit.delivered,
            rabbit.late,
            rabbit.coalesced,
            rabbit.dropped
        ),
        (1, 12, 8, 0)
    );
    assert_eq!(
        rabbit.last,
        Some(Delivery {
            due_at_ms: 90_000,
            lateness_ms: 75_000,
            manual: false,
        })
    );
    // The http clock: the pop returned its three ticks (the retry counts nothing), 25, 15
    // and 5 s late; its queue dropped 5 then 6; pause and resume kept the figures.
    let http = stats_of(&registry, "hc");
    assert_eq!(
        (http.delivered, http.late, http.coalesced, http.dropped),
        (3, 12, 2, 11)
    );
    assert_eq!(
        http.recent.iter().collect::<Vec<_>>(),
        vec![25_000, 15_000, 5_000]
    );
    assert_eq!(http.last.map(|last| last.lateness_ms), Some(5_000));
    // The series: one window per intent, and the deliveries in the second.
    let windows: Vec<SeriesBucket> = registry.ledger().series.buckets().copied().collect();
    assert_eq!(
        windows,
        vec![
            SeriesBucket {
                start_ms: 100_000,
                late: 14,
                coalesced: 4,
                dropped: 5,
                ..SeriesBucket::default()
            },
            SeriesBucket {
                start_ms: 160_000,
                delivered: 4,
                lateness_sum_ms: 120_000,
                lateness_max_ms: 75_000,
                late: 10,
                coalesced: 6,
                dropped: 6,
            },
        ]
    );
    // The figures travel in the snapshot.
    let reloaded = Registry::try_from(RegistrySnapshot::from(registry.clone()));
    assert_eq!(reloaded.as_ref(), Ok(&registry));
}

#[test]
fn a_purged_clock_takes_its_statistics_and_a_restore_keeps_the_series() {
    let (mut registry, _) = outage_then_deliveries(Level::V0_2);
    let backup = RegistrySnapshot::from(registry.clone());
    registry.apply(Command::Purge {
        clocks: vec![id("ra"), id("hc")],
    });
    assert!(
        registry.is_empty(),
        "the clocks went, and their cursors with them"
    );
    let series_before: Vec<SeriesBucket> = registry.ledger().series.buckets().copied().collect();
    let mut restored = Registry::new();
    restored.apply(restore(backup, 170_000));
    assert_eq!(
        stats_of(&restored, "hc").delivered,
        3,
        "a clock's history is restored"
    );
    assert_eq!(
        restored.ledger().series.buckets().count(),
        0,
        "the restoring cluster's own (empty) series is kept"
    );
    assert_eq!(series_before.len(), 2);
}
