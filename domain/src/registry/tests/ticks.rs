//! The tick ledger as commands move it: intents filing (late, coalesced, dropped), the
//! outbox and its confirmations, pops of http queues, manual ticks and their bounds, the
//! ticks a pause withdraws and a purge forgets.

use super::*;

#[test]
fn intents_file_the_ticks_of_active_clocks_once() {
    let mut registry = Registry::new();
    registry.apply(rabbit("a", "every.1.seconds", "ra", 500));
    registry.apply(rabbit("b", "every.2.seconds", "rb", 500));
    registry.apply(rabbit("c", "@never", "rc", 500));
    let filed = registry.apply(intent(2_400, 1_900));
    assert_eq!(
        filed,
        Outcome::Filed(Filed {
            ticks: 3,
            late: 1,
            coalesced: 0,
            dropped: 0,
            visited: 2,
        })
    );
    assert_eq!(outbox_ids(&registry), ["ra-1000", "ra-2000", "rb-2000"]);
    // The same window again files nothing: the watermark moved.
    assert_eq!(
        registry.apply(intent(2_400, 2_000)),
        Outcome::Filed(Filed::default())
    );
    let confirmed = registry.apply(Command::Confirm {
        ticks: vec![(1_000, TickId::scheduled(&id("ra"), 1_000))],
        published_ms: Vec::new(),
        attempts: Vec::new(),
        settled_ms: Vec::new(),
    });
    assert_eq!(confirmed, Outcome::Confirmed { count: 1 });
    assert_eq!(outbox_ids(&registry), ["ra-2000", "rb-2000"]);
}

/// The cost of an intent is the clocks due in its window, not the clocks registered: with
/// 100 000 hourly clocks and nothing due, an intent visits none of them, and when the hour
/// comes it visits those due then. Guards the due index against a return to full scans,
/// which files the same ticks (the oracle in `due_index_oracle.rs` holds either way) at a
/// cost that grows with the registry.
#[test]
fn an_intent_visits_only_the_clocks_due_in_its_window() {
    const CLOCKS: u64 = 100_000;
    const HOUR_MS: u64 = 3_600_000;
    let mut registry = Registry::new();
    let commands = (0..CLOCKS)
        .map(|n| {
            unlimited(rabbit(
                &format!("hourly-{n}"),
                "every.1.hours",
                &format!("h{n}"),
                0,
            ))
        })
        .collect();
    registry.apply(Command::Batch(commands));
    assert_eq!(registry.clocks().count(), 100_000);
    let Outcome::Filed(idle) = registry.apply(intent(60_000, 59_000)) else {
        panic!("an intent files");
    };
    assert_eq!((idle.ticks, idle.visited), (0, 0), "{idle:?}");
    registry.apply(unlimited(rabbit(
        "often",
        "every.1.seconds",
        "often",
        60_000,
    )));
    let Outcome::Filed(busy) = registry.apply(intent(62_000, 61_000)) else {
        panic!("an intent files");
    };
    assert_eq!((busy.ticks, busy.visited), (2, 1), "{busy:?}");
    let Outcome::Filed(hour) = registry.apply(intent(HOUR_MS, HOUR_MS - 500)) else {
        panic!("an intent files");
    };
    assert_eq!(hour.visited, CLOCKS + 1, "{hour:?}");
}

/// `command`, a registration, with no limit on the registry's size.
fn unlimited(mut command: Command) -> Command {
    if let Command::Register { max_clocks, .. } = &mut command {
        *max_clocks = u64::MAX;
    }
    command
}

#[test]
fn a_clock_registered_behind_the_watermark_gets_its_covered_ticks() {
    let mut registry = Registry::new();
    registry.apply(intent(3_000, 2_500));
    registry.apply(rabbit("late", "every.1.seconds", "rl", 1_500));
    assert_eq!(outbox_ids(&registry), ["rl-2000", "rl-3000"]);
}

#[test]
fn pause_withdraws_future_ticks_and_resume_restarts_after_now() {
    let mut registry = Registry::new();
    registry.apply(rabbit("a", "every.1.seconds", "ra", 0));
    registry.apply(intent(3_000, 2_100));
    registry.apply(Command::Pause {
        id: id("ra"),
        now_ms: 2_100,
        request: None,
    });
    assert_eq!(outbox_ids(&registry), ["ra-1000", "ra-2000"]);
    registry.apply(intent(6_000, 5_500));
    assert_eq!(
        outbox_ids(&registry),
        ["ra-1000", "ra-2000"],
        "paused: nothing filed"
    );
    registry.apply(Command::Resume {
        id: id("ra"),
        now_ms: 5_500,
        request: None,
    });
    assert_eq!(outbox_ids(&registry), ["ra-1000", "ra-2000", "ra-6000"]);
}

#[test]
fn pause_withdraws_the_same_ticks_from_an_http_queue_as_from_the_outbox() {
    let mut registry = Registry::new();
    registry.apply(rabbit("r", "every.1.seconds", "ra", 0));
    let http = create(&mut registry, "h", "every.1.seconds", "hc");
    registry.apply(intent(3_000, 2_100));
    // The manual ticks are stamped later than the pause below: a new leader's clock may be
    // behind its predecessor's (within the offset bound), and a manual tick must survive a
    // pause whatever its stamp, so only `manual` can keep them.
    for clock in ["ra", "hc"] {
        registry.apply(Command::Tick {
            id: id(clock),
            now_ms: 2_200,
            request: None,
        });
    }
    assert_eq!(
        queue_ids(&registry, &http),
        ["hc-1000", "hc-2000", "hc-3000", "hc-m1"]
    );
    for clock in ["ra", "hc"] {
        registry.apply(Command::Pause {
            id: id(clock),
            now_ms: 2_100,
            request: None,
        });
    }
    // Ticks already due stay for their consumer, the one due after the pause is withdrawn,
    // the manual tick stays: on both channels alike.
    assert_eq!(outbox_ids(&registry), ["ra-1000", "ra-2000", "ra-m0"]);
    assert_eq!(queue_ids(&registry, &http), ["hc-1000", "hc-2000", "hc-m1"]);
    let Channel::Http { queue_id } = http.channel.clone() else {
        panic!("an http clock");
    };
    let popped = registry.apply(Command::Pop {
        queue: queue_id,
        now_ms: 5_000,
        request: "after-pause".into(),
    });
    let Outcome::Popped(ticks) = popped else {
        panic!("a pop outcome, got {popped:?}");
    };
    let popped: Vec<(String, bool)> = ticks
        .iter()
        .map(|tick| (tick.id.to_string(), tick.manual))
        .collect();
    assert_eq!(
        popped,
        [
            ("hc-1000".to_owned(), false),
            ("hc-2000".to_owned(), false),
            ("hc-m1".to_owned(), true)
        ],
        "a consumer polling long after the pause gets nothing scheduled after it"
    );
    // While paused nothing is filed; a resume restarts after its own instant.
    registry.apply(intent(6_000, 5_500));
    assert!(
        queue_ids(&registry, &http).is_empty(),
        "paused: nothing filed"
    );
    registry.apply(Command::Resume {
        id: http.id.clone(),
        now_ms: 5_500,
        request: None,
    });
    assert_eq!(queue_ids(&registry, &http), ["hc-6000"]);
}

#[test]
fn manual_ticks_have_sequential_ids_and_ignore_status() {
    let mut registry = Registry::new();
    registry.apply(rabbit("n", "@never", "rn", 0));
    registry.apply(Command::Pause {
        id: id("rn"),
        now_ms: 1,
        request: None,
    });
    registry.apply(Command::Tick {
        id: id("rn"),
        now_ms: 10,
        request: None,
    });
    registry.apply(Command::Tick {
        id: id("rn"),
        now_ms: 20,
        request: None,
    });
    assert_eq!(outbox_ids(&registry), ["rn-m0", "rn-m1"]);
    assert!(registry.ledger().outbox.values().all(|tick| tick.manual));
}

/// A forwarded manual tick whose answer was lost is sent again by the node that proposed it
/// (`tickd_raft::Replica::write`), whole batches at a time, and both attempts may commit: the
/// clock must get one tick per request (`crate::retries`).
#[test]
fn a_retried_manual_tick_is_filed_once() {
    use crate::retries::{MAX_REQUEST_BYTES, REMEMBERED_REQUESTS};
    let mut registry = Registry::new();
    let clock = create(&mut registry, "h", "@never", "hc");
    let tick = |request: &str, now_ms: u64| Command::Tick {
        id: id("hc"),
        now_ms,
        request: Some(request.to_owned()),
    };
    registry.apply(tick("r1", 10));
    let once = registry.clone();
    // The retry, alone or in a batch beside another request's tick.
    assert!(matches!(
        registry.apply(tick("r1", 10)),
        Outcome::Updated(_)
    ));
    assert_eq!(registry, once, "a retried manual tick changed the registry");
    registry.apply(Command::Batch(vec![tick("r2", 20), tick("r3", 20)]));
    registry.apply(Command::Batch(vec![tick("r2", 20), tick("r3", 20)]));
    assert_eq!(queue_ids(&registry, &clock), ["hc-m0", "hc-m1", "hc-m2"]);
    // A clock remembers its latest requests only: one older than that ticks again.
    for n in 0..REMEMBERED_REQUESTS {
        registry.apply(tick(&format!("later-{n}"), 30));
    }
    let before = registry.ledger().manual_sequence();
    registry.apply(tick("r1", 40));
    assert_eq!(registry.ledger().manual_sequence(), before + 1);
    // A request id no node draws is refused.
    let long = "r".repeat(MAX_REQUEST_BYTES + 1);
    assert!(matches!(
        registry.apply(tick(&long, 50)),
        Outcome::Rejected { .. }
    ));
    // Snapshots carry the requests; a purge forgets them with the clock.
    let json = serde_json::to_string(&RegistrySnapshot::from(registry.clone())).expect("encodes");
    assert!(json.contains("manual_requests"), "{json}");
    let loaded =
        Registry::try_from(serde_json::from_str::<RegistrySnapshot>(&json).expect("decodes"))
            .expect("loads");
    assert_eq!(loaded, registry);
    registry.apply(Command::Purge {
        clocks: vec![id("hc")],
    });
    assert!(registry.ledger().manual_requests.is_empty());
    // Below level 3 the request is ignored, as releases before it ignore it.
    let mut old = Registry::new();
    create(&mut old, "h", "@never", "hc");
    old.apply_at(Level::V0_2, tick("r1", 10));
    old.apply_at(Level::V0_2, tick("r1", 10));
    assert_eq!(old.ledger().manual_sequence(), 2);
}

#[test]
fn pops_return_due_ticks_once_and_unknown_queues_are_not_found() {
    let mut registry = Registry::new();
    let clock = create(&mut registry, "h", "every.1.seconds", "hc");
    let Channel::Http { queue_id } = clock.channel.clone() else {
        panic!("an http clock");
    };
    registry.apply(intent(3_500, 2_600));
    let pop = |now_ms: u64, request: &str| Command::Pop {
        queue: queue_id.clone(),
        now_ms,
        request: request.into(),
    };
    let popped = registry.apply(pop(2_600, "first"));
    let Outcome::Popped(ticks) = popped.clone() else {
        panic!("a pop outcome, got {popped:?}");
    };
    let instants: Vec<u64> = ticks.iter().map(|tick| tick.due_at_ms).collect();
    assert_eq!(instants, [1_000, 2_000]);
    // A retried pop (its answer was lost) gets the same ticks again, and takes no others.
    assert_eq!(registry.apply(pop(3_600, "first")), popped);
    assert_eq!(registry.ledger().due_in_queue(&queue_id, 3_600), 1);
    assert_eq!(
        registry.apply(pop(2_700, "second")),
        Outcome::Popped(Vec::new())
    );
    assert_eq!(registry.ledger().due_in_queue(&queue_id, 3_000), 1);
    let unknown = Command::Pop {
        queue: QueueId::new("nope".into()),
        now_ms: 0,
        request: "r".into(),
    };
    assert_eq!(registry.apply(unknown), Outcome::NotFound);
}

#[test]
fn purge_removes_active_clocks_and_keeps_paused_ones() {
    let mut registry = Registry::new();
    let active = create(&mut registry, "a", "every.1.seconds", "c1");
    create(&mut registry, "p", "every.1.seconds", "c2");
    registry.apply(Command::Pause {
        id: id("c2"),
        now_ms: 0,
        request: None,
    });
    registry.apply(intent(2_000, 1_500));
    let purged = registry.apply(Command::Purge {
        clocks: vec![id("c1"), id("c2"), id("c9")],
    });
    assert_eq!(
        purged,
        Outcome::Purged {
            clocks: vec![id("c1")]
        }
    );
    assert!(registry.get(&id("c1")).is_none() && registry.get(&id("c2")).is_some());
    let Channel::Http { queue_id } = active.channel else {
        panic!("an http clock");
    };
    assert!(registry.clock_of_queue(&queue_id).is_none());
    assert!(!registry.ledger().queues.contains_key(&queue_id));
    // A later registration of the pair creates a fresh clock.
    let again = registry.apply(register("a", "every.1.seconds", "c3", NO_LIMIT));
    assert!(matches!(again, Outcome::Registered { created: true, .. }));
}

#[test]
fn intents_count_what_they_filed_late_coalesced_and_dropped() {
    let mut registry = Registry::new();
    registry.apply(rabbit("r", "every.10.seconds", "ra", 0));
    let http = create(&mut registry, "h", "every.10.seconds", "hc");
    // Nothing could commit from 0 to 100 s. Per clock: 10 s and 20 s are older than the
    // cutoff (40 s) and coalesced into 30 s; 30..=100 s are filed, all late but 100 s,
    // which is due at the intent's own instant. The queue keeps the newest 3 of its 8.
    let filed = registry.apply(intent_keeping_three(100_500, 100_000));
    assert_eq!(
        filed,
        Outcome::Filed(Filed {
            ticks: 16,
            late: 14,
            coalesced: 4,
            dropped: 5,
            visited: 2,
        })
    );
    // The broker stays away for another minute. Per clock 110..=160 s are filed, all late
    // but 160 s; the queue drops all it held for the 6 new ones; the outbox's ticks older
    // than the new cutoff (100 s), 30..=90 s, are coalesced into 90 s.
    let filed = registry.apply(intent_keeping_three(160_500, 160_000));
    assert_eq!(
        filed,
        Outcome::Filed(Filed {
            ticks: 12,
            late: 10,
            coalesced: 6,
            dropped: 6,
            visited: 2,
        })
    );
    assert_eq!(
        registry.ledger().counters,
        TickCounters {
            filed: 28,
            late: 24,
            coalesced: 10,
            dropped: 11,
            ..TickCounters::default()
        }
    );
    assert_eq!(
        outbox_ids(&registry),
        [
            "ra-90000",
            "ra-100000",
            "ra-110000",
            "ra-120000",
            "ra-130000",
            "ra-140000",
            "ra-150000",
            "ra-160000"
        ]
    );
    assert_eq!(
        queue_ids(&registry, &http),
        ["hc-140000", "hc-150000", "hc-160000"]
    );
}

#[test]
fn pause_keeps_the_tick_due_at_its_own_instant() {
    let mut registry = Registry::new();
    registry.apply(rabbit("a", "every.1.seconds", "ra", 0));
    registry.apply(intent(3_000, 2_000));
    registry.apply(Command::Pause {
        id: id("ra"),
        now_ms: 2_000,
        request: None,
    });
    // 2 s is due when the pause is applied, not after it: its consumer still gets it.
    assert_eq!(outbox_ids(&registry), ["ra-1000", "ra-2000"]);
}

#[test]
fn confirm_counts_each_tick_it_removes_once() {
    let mut registry = Registry::new();
    registry.apply(rabbit("a", "every.1.seconds", "ra", 0));
    registry.apply(intent(3_000, 2_500));
    let key = |at: u64| (at, TickId::scheduled(&id("ra"), at));
    let confirmed = registry.apply(Command::Confirm {
        ticks: vec![key(1_000), key(2_000), key(2_000), key(9_000)],
        published_ms: Vec::new(),
        attempts: Vec::new(),
        settled_ms: Vec::new(),
    });
    assert_eq!(confirmed, Outcome::Confirmed { count: 2 });
    assert_eq!(outbox_ids(&registry), ["ra-3000"]);
}

#[test]
fn purge_withdraws_the_outbox_ticks_of_the_purged_clocks_only() {
    let mut registry = Registry::new();
    registry.apply(rabbit("gone", "every.1.seconds", "rg", 0));
    registry.apply(rabbit("kept", "every.1.seconds", "rk", 0));
    registry.apply(intent(2_000, 1_500));
    let purged = registry.apply(Command::Purge {
        clocks: vec![id("rg")],
    });
    assert_eq!(
        purged,
        Outcome::Purged {
            clocks: vec![id("rg")]
        }
    );
    assert_eq!(outbox_ids(&registry), ["rk-1000", "rk-2000"]);
    assert!(registry.cursor(&id("rg")).is_none());
    assert!(registry.cursor(&id("rk")).is_some());
}

#[test]
fn a_manual_tick_past_the_last_sequence_number_is_refused_not_an_overflow() {
    for last in [MAX_MANUAL_SEQUENCE, u64::MAX] {
        // A registry loaded from a Raft snapshot is not validated as a backup is: apply
        // must stay safe with any counter.
        let mut snapshot: RegistrySnapshot = backed_up().into();
        snapshot.ledger.ticks.manual_sequence = last;
        let mut registry = Registry::try_from(snapshot).unwrap_or_default();
        let before = registry.clone();
        let outcome = registry.apply(Command::Tick {
            id: id("hc"),
            now_ms: 5_000,
            request: None,
        });
        assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
        assert_eq!(registry, before);
    }
}

#[test]
fn manual_ticks_waiting_for_the_broker_are_refused_past_the_queue_limit() {
    let mut registry = Registry::new();
    registry.apply(rabbit("r", "@never", "ra", 0));
    registry.apply(rabbit("s", "@never", "rs", 0));
    registry.apply(intent_keeping_three(1_000, 1_000));
    let tick = |registry: &mut Registry, clock: &str, now_ms| {
        registry.apply(Command::Tick {
            id: id(clock),
            now_ms,
            request: None,
        })
    };
    for now_ms in 0..3 {
        assert!(matches!(
            tick(&mut registry, "ra", now_ms),
            Outcome::Updated(_)
        ));
    }
    let before = registry.clone();
    let refused = tick(&mut registry, "ra", 3);
    assert!(
        matches!(&refused, Outcome::Rejected { reason } if reason.contains("3 manual ticks")),
        "{refused:?}"
    );
    assert_eq!(registry, before, "a refused tick changes nothing");
    // The limit is per clock, and a confirmation makes room again.
    assert!(matches!(tick(&mut registry, "rs", 4), Outcome::Updated(_)));
    let first = registry
        .ledger()
        .outbox
        .iter()
        .find(|(_, tick)| tick.clock == id("ra"))
        .map(|(key, _)| key.clone())
        .expect("a waiting manual tick");
    registry.apply(Command::Confirm {
        ticks: vec![first],
        published_ms: Vec::new(),
        attempts: Vec::new(),
        settled_ms: Vec::new(),
    });
    assert!(matches!(tick(&mut registry, "ra", 5), Outcome::Updated(_)));
}

#[test]
fn manual_ticks_on_a_paused_http_clock_obey_the_queue_limit() {
    let mut registry = Registry::new();
    let clock = create(&mut registry, "h", "every.1.seconds", "hc");
    registry.apply(Command::Pause {
        id: clock.id.clone(),
        now_ms: 0,
        request: None,
    });
    // Before any intent the default limit holds; after one, the configured limit.
    for now_ms in 0..1_500 {
        registry.apply(Command::Tick {
            id: clock.id.clone(),
            now_ms,
            request: None,
        });
    }
    let queue = queue_for("hc");
    let waiting = |registry: &Registry| registry.ledger().queues.get(&queue).map(|q| q.len());
    let default = usize::try_from(crate::ticks::DEFAULT_QUEUE_LIMIT).unwrap_or(usize::MAX);
    assert_eq!(waiting(&registry), Some(default));
    registry.apply(intent_keeping_three(2_000, 2_000));
    for now_ms in 2_000..22_000 {
        registry.apply(Command::Tick {
            id: clock.id.clone(),
            now_ms,
            request: None,
        });
    }
    assert_eq!(waiting(&registry), Some(3));
    assert_eq!(registry.ledger().counters.dropped, 21_500 - 3);
    match registry.apply(Command::Pop {
        queue,
        now_ms: 30_000,
        request: "r".into(),
    }) {
        Outcome::Popped(ticks) => {
            let ids: Vec<&str> = ticks.iter().map(|t| t.id.as_str()).collect();
            assert_eq!(
                ids,
                ["hc-m21497", "hc-m21498", "hc-m21499"],
                "the newest stay"
            );
        }
        other => panic!("expected a pop, got {other:?}"),
    }
}

#[test]
fn a_registration_far_behind_a_wild_watermark_files_one_window_at_most() {
    let mut registry = Registry::new();
    // An intent stamped at the end of time moves the watermark there, but no further
    // than its look-ahead.
    registry.apply(Command::Intend(Intent {
        through_ms: u64::MAX,
        now_ms: u64::MAX - 1,
        catch_up_ms: u64::MAX,
        queue_limit: u64::MAX,
        in_flight_from_ms: None,
    }));
    assert_eq!(registry.ledger().intended_through_ms, u64::MAX);
    registry.apply(rabbit("late", "every.1.seconds", "rl", 0));
    let filed = registry.ledger().outbox.len();
    let window = MAX_LOOKAHEAD_MS / 1_000;
    assert!(
        filed <= usize::try_from(window).unwrap_or(usize::MAX),
        "{filed}"
    );
}

/// Two pollers of one queue: the first pop commits but its node loses the answer, another
/// poller pops, and the first node proposes its pop again. From level 3 the retry gets the
/// first batch back; found by the simulation (seed 15), where the retry popped afresh and the
/// batch reached nobody while the poller was answered `[]`. Below level 3 the retry pops
/// afresh, as v0.2.0 replicas apply it.
#[test]
fn a_pop_retried_after_another_pollers_pop_gets_its_ticks_back_from_level_3() {
    for (level, replays) in [(Level::V0_3, true), (Level::V0_2, false)] {
        let mut registry = Registry::new();
        let registered = registry.apply_at(level, register("h", "every.1.seconds", "hc", NO_LIMIT));
        assert!(
            matches!(registered, Outcome::Registered { .. }),
            "{registered:?}"
        );
        registry.apply_at(level, intent(4_000, 500));
        let mut pop = |request: &str, now_ms| {
            let command = Command::Pop {
                queue: queue_for("hc"),
                now_ms,
                request: request.into(),
            };
            match registry.apply_at(level, command) {
                Outcome::Popped(ticks) => ticks.iter().map(|t| t.id.to_string()).collect(),
                other => panic!("a pop outcome, got {other:?}"),
            }
        };
        let first: Vec<String> = pop("first", 1_500);
        assert_eq!(first, ["hc-1000"]);
        assert_eq!(pop("second", 2_500), ["hc-2000"]);
        let retried = pop("first", 1_500);
        if replays {
            assert_eq!(retried, first, "level {level}");
        } else {
            assert!(retried.is_empty(), "level {level}: {retried:?}");
        }
        assert_eq!(pop("third", 4_500), ["hc-3000", "hc-4000"], "level {level}");
    }
}
