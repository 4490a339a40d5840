//! Restoring a backup into an empty cluster (`Command::Restore`): what it seeds, whose
//! history it keeps, and every backup it refuses, with the API's check and `apply` agreeing.

use super::*;

#[test]
fn restore_seeds_an_empty_registry_with_ids_statuses_and_queues() {
    let source = backed_up();
    let mut target = Registry::new();
    target.apply(intent(50_000, 49_500));
    let outcome = target.apply(restore(source.clone().into(), 50_000));
    assert_eq!(outcome, Outcome::Restored { clocks: 2 });
    for clock in source.clocks() {
        assert_eq!(target.get(&clock.id), Some(clock));
    }
    let queue = queue_for("hc");
    assert_eq!(
        target.clock_of_queue(&queue).map(|c| c.id.clone()),
        Some(id("hc"))
    );
    assert_eq!(outbox_ids(&target), outbox_ids(&source));
    // The later watermark wins, and restored clocks count as consumed at restore time.
    assert_eq!(target.ledger().intended_through_ms, 50_000);
    assert_eq!(target.len(), source.len());
    assert!(
        target
            .clocks_with_cursors()
            .all(|(_, cursor)| cursor.is_some_and(|cursor| cursor.last_activity_ms == 50_000))
    );
}

#[test]
fn restore_refuses_a_registry_with_clocks_and_changes_nothing() {
    let mut target = Registry::new();
    create(&mut target, "live", "every.5.seconds", "live");
    let before = target.clone();
    let outcome = target.apply(restore(backed_up().into(), 0));
    assert_eq!(outcome, Outcome::NotEmpty { clocks: 1 });
    assert_eq!(target, before);
}

#[test]
fn restore_refuses_a_corrupt_or_oversized_backup() {
    let mut snapshot: RegistrySnapshot = backed_up().into();
    let mut target = Registry::new();
    let limited = Command::Restore {
        snapshot: document(&snapshot),
        now_ms: 0,
        max_clocks: 1,
    };
    assert_eq!(
        target.apply(limited),
        Outcome::LimitReached { max_clocks: 1 }
    );
    let twin = snapshot.clocks[0].clone();
    snapshot.clocks.push(twin);
    assert!(matches!(
        target.apply(restore(snapshot, 0)),
        Outcome::Rejected { .. }
    ));
    assert!(target.is_empty());
}

/// The second hostile probe's N9: a scheduled tick filed twice in a queue was restored,
/// and delivered once per copy.
#[test]
fn a_backup_that_files_one_tick_twice_is_refused() {
    let mut source = Registry::new();
    create(&mut source, "h", "every.1.seconds", "hq");
    source.apply(intent(3_000, 2_500));
    let mut snapshot: RegistrySnapshot = source.into();
    assert_eq!(snapshot.validate_for_restore(2_500), Ok(()));
    let queues = &mut snapshot.ledger.ticks.queues;
    let (queue_id, mut queue) = queues
        .iter()
        .find(|(_, queue)| !queue.is_empty())
        .map(|(queue_id, queue)| (queue_id.clone(), queue.clone()))
        .expect("the intent filed ticks");
    queue.push_back(queue[0].clone());
    queues.insert(queue_id, queue);
    let refused = snapshot
        .validate_for_restore(2_500)
        .expect_err("a tick twice");
    assert!(refused.to_string().contains("appears twice"), "{refused}");
}

#[test]
fn a_restore_whose_document_is_not_a_registry_is_rejected_and_changes_nothing() {
    let mut target = Registry::new();
    let garbage: RestoreDocument = serde_json::from_str("{\"clocks\": 7}").expect("JSON text");
    let outcome = target.apply(Command::Restore {
        snapshot: garbage,
        now_ms: 0,
        max_clocks: NO_LIMIT,
    });
    assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
    assert!(target.is_empty());
}

#[test]
fn restore_accepts_a_backup_of_exactly_the_limit() {
    let mut target = Registry::new();
    let at_the_limit = Command::Restore {
        snapshot: document(&backed_up().into()),
        now_ms: 0,
        max_clocks: 2,
    };
    assert_eq!(target.apply(at_the_limit), Outcome::Restored { clocks: 2 });
    assert_eq!(target.len(), 2);
}

#[test]
fn restore_joins_the_backup_counters_to_the_clusters_own() {
    let source = backed_up();
    assert_eq!(
        source.ledger().counters,
        TickCounters {
            filed: 3,
            late: 2,
            coalesced: 0,
            dropped: 0,
            ..TickCounters::default()
        }
    );
    // The restoring cluster ticked a clock of its own, manually and on schedule, and
    // purged it: it holds no clock but has a history.
    let mut target = Registry::new();
    target.apply(rabbit("old", "every.1.seconds", "ro", 0));
    target.apply(Command::Tick {
        id: id("ro"),
        now_ms: 500,
        request: None,
    });
    target.apply(intent(2_000, 2_000));
    target.apply(Command::Purge {
        clocks: vec![id("ro")],
    });
    assert_eq!(
        target.ledger().counters,
        TickCounters {
            filed: 3,
            late: 1,
            coalesced: 0,
            dropped: 0,
            ..TickCounters::default()
        }
    );
    assert_eq!(
        target.apply(restore(source.into(), 3_000)),
        Outcome::Restored { clocks: 2 }
    );
    assert_eq!(
        target.ledger().counters,
        TickCounters {
            filed: 6,
            late: 3,
            coalesced: 0,
            dropped: 0,
            ..TickCounters::default()
        }
    );
    assert_eq!(target.ledger().manual_sequence, 1);
}

/// Restores `snapshot` into an empty registry at 10 000 ms and returns the refusal's
/// reason, failing the test if it was restored.
fn refusal(snapshot: RegistrySnapshot) -> String {
    let mut target = Registry::new();
    match target.apply(restore(snapshot.clone(), 10_000)) {
        Outcome::Rejected { reason } => {
            assert!(target.is_empty(), "a refused restore changes nothing");
            let checked = snapshot.validate_for_restore(10_000).err();
            assert_eq!(
                checked.map(|error| error.to_string()),
                Some(reason.clone()),
                "the API's check and apply agree"
            );
            reason
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn restore_refuses_watermarks_and_counters_no_cluster_reaches() {
    let mut snapshot: RegistrySnapshot = backed_up().into();
    snapshot.ledger.ticks.intended_through_ms = u64::MAX;
    let reason = refusal(snapshot);
    assert!(reason.starts_with("ledger.intended_through_ms is 18446744073709551615"));
    let mut snapshot: RegistrySnapshot = backed_up().into();
    snapshot.ledger.ticks.intended_through_ms = 10_000 + MAX_LOOKAHEAD_MS;
    assert!(
        snapshot.validate_for_restore(10_000).is_ok(),
        "the look-ahead itself is allowed"
    );
    let mut snapshot: RegistrySnapshot = backed_up().into();
    snapshot.ledger.ticks.manual_sequence = u64::MAX;
    assert!(refusal(snapshot).starts_with("ledger.manual_sequence is 18446744073709551615"));
}

#[test]
fn restore_refuses_ids_names_and_channels_a_registration_would_not_produce() {
    let mutate = |change: &dyn Fn(&mut Clock)| {
        let mut snapshot: RegistrySnapshot = backed_up().into();
        if let Some(clock) = snapshot.clocks.iter_mut().find(|c| c.id == id("hc")) {
            change(clock);
        }
        refusal(snapshot)
    };
    let short_queue = mutate(&|clock| {
        clock.channel = Channel::Http {
            queue_id: QueueId::new("1".into()),
        }
    });
    assert!(
        short_queue.starts_with("clock hc: channel.queue_id: invalid queue id \"1\""),
        "{short_queue}"
    );
    let long_name = mutate(&|clock| clock.name = "n".repeat(5_000).into());
    assert!(
        long_name.starts_with("clock hc: invalid clock name: it is 5000 bytes long"),
        "{long_name}"
    );
    let path = mutate(&|clock| clock.id = id("../../etc"));
    assert!(
        path.starts_with("clock #") && path.contains("contains '.'"),
        "{path}"
    );
    let pending = mutate(&|clock| clock.status = ClockStatus::Pending);
    assert!(pending.contains("PENDING"), "{pending}");
}

#[test]
fn restore_refuses_ticks_and_cursors_of_clocks_it_does_not_hold() {
    let mut snapshot: RegistrySnapshot = backed_up().into();
    snapshot.ledger.cursors.remove(&id("ra"));
    assert!(refusal(snapshot).contains("ledger.cursors"));
    let mut snapshot: RegistrySnapshot = backed_up().into();
    let first = snapshot.ledger.ticks.outbox.keys().next().cloned();
    if let Some(tick) = first.and_then(|key| snapshot.ledger.ticks.outbox.get_mut(&key)) {
        tick.id = TickId::scheduled(&id("ra"), 1);
    }
    assert!(refusal(snapshot).starts_with("ledger.outbox: tick"));
    let mut snapshot: RegistrySnapshot = backed_up().into();
    snapshot
        .ledger
        .ticks
        .queues
        .insert(queue_for("nobody"), Default::default());
    assert!(refusal(snapshot).starts_with("ledger.queues holds queue"));
}
