//! A clock's life in the registry: registration and joining (one clock per name and schedule
//! literal), pause and resume, the clock limit, refused names and ids, unknown ids, and the
//! schedule literals the clocks share.

use super::*;

#[test]
fn clocks_of_one_schedule_share_its_literal_until_the_last_is_purged() {
    let mut registry = Registry::new();
    create(&mut registry, "a", "every.1.hours", "c1");
    create(&mut registry, "b", "every.1.hours", "c2");
    create(&mut registry, "c", "every.2.hours", "c3");
    let literal = |registry: &Registry, clock: &str| {
        registry
            .get(&id(clock))
            .map(|clock| clock.schedule.as_str().as_ptr())
    };
    assert_eq!(
        literal(&registry, "c1"),
        literal(&registry, "c2"),
        "one copy"
    );
    assert_ne!(literal(&registry, "c1"), literal(&registry, "c3"));
    assert_eq!(registry.literals.len(), 2);
    registry.apply(Command::Purge {
        clocks: vec![id("c1")],
    });
    assert_eq!(registry.literals.len(), 2, "c2 still uses every.1.hours");
    registry.apply(Command::Purge {
        clocks: vec![id("c2"), id("c3")],
    });
    assert_eq!(registry.literals.len(), 0);
}

#[test]
fn register_creates_an_active_clock_with_the_proposed_id_and_channel() {
    let mut registry = Registry::new();
    let clock = create(&mut registry, "orders", "every.5.seconds", "c1");
    assert_eq!(clock.id, id("c1"));
    assert_eq!(&*clock.name, "orders");
    assert_eq!(clock.schedule.as_str(), "every.5.seconds");
    assert_eq!(clock.status, ClockStatus::Active);
    assert_eq!(
        clock.channel,
        Channel::Http {
            queue_id: queue_for("c1")
        }
    );
    assert_eq!(registry.get(&id("c1")), Some(&clock));
    assert_eq!(
        registry.find("orders", &schedule("every.5.seconds")),
        Some(&clock)
    );
    assert_eq!(registry.len(), 1);
    assert!(!registry.is_empty());
}

#[test]
fn duplicate_registrations_with_different_proposed_ids_end_as_one_clock() {
    let mut registry = Registry::new();
    let first = create(&mut registry, "orders", "every.5.seconds", "from-node-1");
    // The third is a retry of the first, which created the clock (see
    // `a_retried_registration_answers_that_it_created_the_clock`).
    for (proposed, created) in [
        ("from-node-2", false),
        ("from-node-3", false),
        ("from-node-1", true),
    ] {
        let outcome = registry.apply(register("orders", "every.5.seconds", proposed, NO_LIMIT));
        assert_eq!(
            outcome,
            Outcome::Registered {
                clock: first.clone(),
                created
            }
        );
    }
    assert_eq!(registry.len(), 1);
    assert_eq!(registry.get(&id("from-node-2")), None);
}

#[test]
fn identity_is_the_literal_pair() {
    let mut registry = Registry::new();
    create(&mut registry, "orders", "every.5.seconds", "c1");
    create(&mut registry, "orders", "every.05.seconds", "c2");
    create(&mut registry, "orders", "every.1.minute", "c3");
    create(&mut registry, "orders", "every.60.seconds", "c4");
    create(&mut registry, "Orders", "every.5.seconds", "c5");
    // A ';' in the name must not let two pairs collide.
    create(&mut registry, "a;b", "every.1.second", "c6");
    create(&mut registry, "a", "every.1.second", "c7");
    assert_eq!(registry.len(), 7);
}

#[test]
fn joining_keeps_a_paused_clock_paused() {
    let mut registry = Registry::new();
    let clock = create(&mut registry, "orders", "every.5.seconds", "c1");
    registry.apply(Command::Pause {
        id: clock.id,
        now_ms: 0,
        request: None,
    });
    let outcome = registry.apply(register("orders", "every.5.seconds", "c2", NO_LIMIT));
    match outcome {
        Outcome::Registered {
            clock,
            created: false,
        } => assert_eq!((clock.id, clock.status), (id("c1"), ClockStatus::Paused)),
        other => panic!("expected a join, got {other:?}"),
    }
}

#[test]
fn pause_and_resume_set_the_status_idempotently() {
    let mut registry = Registry::new();
    create(&mut registry, "orders", "every.5.seconds", "c1");
    let steps = [
        (
            Command::Pause {
                id: id("c1"),
                now_ms: 0,
                request: None,
            },
            ClockStatus::Paused,
        ),
        (
            Command::Pause {
                id: id("c1"),
                now_ms: 0,
                request: None,
            },
            ClockStatus::Paused,
        ),
        (
            Command::Resume {
                id: id("c1"),
                now_ms: 0,
                request: None,
            },
            ClockStatus::Active,
        ),
        (
            Command::Resume {
                id: id("c1"),
                now_ms: 0,
                request: None,
            },
            ClockStatus::Active,
        ),
        (
            Command::Tick {
                id: id("c1"),
                now_ms: 0,
                request: None,
            },
            ClockStatus::Active,
        ),
        (
            Command::Pause {
                id: id("c1"),
                now_ms: 0,
                request: None,
            },
            ClockStatus::Paused,
        ),
        (
            Command::Tick {
                id: id("c1"),
                now_ms: 0,
                request: None,
            },
            ClockStatus::Paused,
        ),
    ];
    for (command, status) in steps {
        let described = format!("{command:?}");
        match registry.apply(command) {
            Outcome::Updated(clock) => {
                assert_eq!(clock.status, status, "{described}");
                assert_eq!(registry.get(&id("c1")), Some(&clock), "{described}");
            }
            other => panic!("{described}: expected Updated, got {other:?}"),
        }
    }
}

#[test]
fn actions_on_unknown_ids_are_not_found_and_change_nothing() {
    let mut registry = Registry::new();
    create(&mut registry, "orders", "every.5.seconds", "c1");
    let before = registry.clone();
    for command in [
        Command::Pause {
            id: id("nope"),
            now_ms: 0,
            request: None,
        },
        Command::Resume {
            id: id("nope"),
            now_ms: 0,
            request: None,
        },
        Command::Tick {
            id: id("nope"),
            now_ms: 0,
            request: None,
        },
    ] {
        assert_eq!(registry.apply(command), Outcome::NotFound);
    }
    assert_eq!(registry, before);
}

#[test]
fn the_limit_stops_new_clocks_but_not_joins() {
    let mut registry = Registry::new();
    assert_eq!(
        registry.apply(register("x", "every.1.second", "c0", 0)),
        Outcome::LimitReached { max_clocks: 0 }
    );
    assert!(registry.is_empty());

    for (index, name) in ["a", "b"].into_iter().enumerate() {
        let outcome = registry.apply(register(name, "every.1.second", &format!("c{index}"), 2));
        assert!(matches!(outcome, Outcome::Registered { created: true, .. }));
    }
    let before = registry.clone();
    assert_eq!(
        registry.apply(register("c", "every.1.second", "c2", 2)),
        Outcome::LimitReached { max_clocks: 2 }
    );
    assert_eq!(registry, before);
    let joined = registry.apply(register("a", "every.1.second", "c3", 2));
    assert!(matches!(joined, Outcome::Registered { created: false, .. }));
    // A lower limit proposed later also refuses, without removing anything.
    assert_eq!(
        registry.apply(register("d", "every.1.second", "c4", 1)),
        Outcome::LimitReached { max_clocks: 1 }
    );
    assert_eq!(registry.len(), 2);
}

#[test]
fn invalid_names_are_rejected_and_change_nothing() {
    let mut registry = Registry::new();
    create(&mut registry, "orders", "every.5.seconds", "c1");
    let before = registry.clone();
    let long = "x".repeat(201);
    for name in ["", long.as_str()] {
        match registry.apply(register(name, "every.5.seconds", "c2", NO_LIMIT)) {
            Outcome::Rejected { reason } => {
                assert!(reason.starts_with("invalid clock name"), "{reason}")
            }
            other => panic!("expected Rejected, got {other:?}"),
        }
    }
    assert_eq!(registry, before);
}

#[test]
fn a_colliding_proposed_id_is_rejected_not_overwritten() {
    let mut registry = Registry::new();
    let original = create(&mut registry, "orders", "every.5.seconds", "c1");
    let outcome = registry.apply(register("invoices", "every.5.seconds", "c1", NO_LIMIT));
    assert!(matches!(outcome, Outcome::Rejected { .. }), "{outcome:?}");
    assert_eq!(registry.get(&id("c1")), Some(&original));
    assert_eq!(registry.len(), 1);
}

/// A forwarded pause whose answer was lost is sent again (`tickd_raft::Replica::write`), and
/// both attempts may commit, the second after another client's resume: applied again, it
/// would undo that acknowledged resume, a history no order of single pauses and resumes
/// explains (found by the deterministic simulation, `sim/`). A request applies once; below
/// cluster level 3, whose releases ignore the id, it applies twice as they do.
#[test]
fn a_retried_pause_or_resume_takes_effect_once() {
    use crate::retries::MAX_REQUEST_BYTES;
    let status = |registry: &Registry| registry.get(&id("c1")).map(|clock| clock.status);
    let pause = |request: &str| Command::Pause {
        id: id("c1"),
        now_ms: 10,
        request: Some(request.to_owned()),
    };
    let resume = |request: &str| Command::Resume {
        id: id("c1"),
        now_ms: 20,
        request: Some(request.to_owned()),
    };
    let mut registry = Registry::new();
    create(&mut registry, "a", "every.1.seconds", "c1");
    registry.apply(pause("p1"));
    registry.apply(resume("r1"));
    let resumed = registry.clone();
    let Outcome::Updated(answered) = registry.apply(pause("p1")) else {
        panic!("a retried pause answers the clock");
    };
    assert_eq!(
        answered.status,
        ClockStatus::Paused,
        "as the first attempt answered"
    );
    assert_eq!(
        registry, resumed,
        "the retried pause undid the resume after it"
    );
    registry.apply(pause("p2"));
    let Outcome::Updated(answered) = registry.apply(resume("r1")) else {
        panic!("a retried resume answers the clock");
    };
    assert_eq!(
        answered.status,
        ClockStatus::Active,
        "as the first attempt answered"
    );
    assert_eq!(
        status(&registry),
        Some(ClockStatus::Paused),
        "the retried resume undid the pause"
    );

    let long = "p".repeat(MAX_REQUEST_BYTES + 1);
    assert!(matches!(
        registry.apply(pause(&long)),
        Outcome::Rejected { .. }
    ));
    assert!(matches!(
        registry.apply(Command::Pause {
            id: id("unknown"),
            now_ms: 30,
            request: Some("p3".to_owned()),
        }),
        Outcome::NotFound
    ));

    let mut old = Registry::new();
    create(&mut old, "a", "every.1.seconds", "c1");
    for command in [pause("p1"), resume("r1"), pause("p1")] {
        old.apply_at(Level::V0_2, command);
    }
    assert_eq!(
        status(&old),
        Some(ClockStatus::Paused),
        "level 2 ignores the request id"
    );
}

/// A registration whose answer was lost is sent again with the id its node drew; the first
/// attempt created the clock, and the retry must say so, not that another registration had:
/// a client told "joined" would conclude someone else created its clock (found by the
/// deterministic simulation). Another registration of the pair joins it.
#[test]
fn a_retried_registration_answers_that_it_created_the_clock() {
    let mut registry = Registry::new();
    let first = registry.apply(register("a", "every.1.seconds", "c1", NO_LIMIT));
    assert!(matches!(first, Outcome::Registered { created: true, .. }));
    let again = registry.apply(register("a", "every.1.seconds", "c1", NO_LIMIT));
    assert!(
        matches!(&again, Outcome::Registered { clock, created: true } if clock.id == id("c1")),
        "{again:?}"
    );
    let other = registry.apply(register("a", "every.1.seconds", "c2", NO_LIMIT));
    assert!(
        matches!(&other, Outcome::Registered { clock, created: false } if clock.id == id("c1")),
        "{other:?}"
    );
    let mut old = Registry::new();
    old.apply_at(
        Level::V0_2,
        register("a", "every.1.seconds", "c1", NO_LIMIT),
    );
    let again = old.apply_at(
        Level::V0_2,
        register("a", "every.1.seconds", "c1", NO_LIMIT),
    );
    assert!(
        matches!(again, Outcome::Registered { created: false, .. }),
        "level 2 joins"
    );
}
