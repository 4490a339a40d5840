//! The command language as a whole: batches apply as their commands one by one, the same
//! commands give the same registry on every replica, and each command names its kind.

use super::*;

#[test]
fn a_batch_applies_its_commands_in_order_as_if_each_were_alone() {
    let mut batched = Registry::new();
    let mut one_by_one = Registry::new();
    let commands = vec![
        register("orders", "every.5.seconds", "c1", NO_LIMIT),
        register("orders", "every.5.seconds", "c2", NO_LIMIT),
        Command::Pause {
            id: id("c1"),
            now_ms: 7,
            request: None,
        },
        Command::Pause {
            id: id("unknown"),
            now_ms: 7,
            request: None,
        },
        register("billing", "every.1.minute", "c3", 1),
    ];
    let expected: Vec<Outcome> = commands
        .iter()
        .map(|command| one_by_one.apply(command.clone()))
        .collect();
    assert_eq!(
        batched.apply(Command::Batch(commands)),
        Outcome::Batch(expected)
    );
    assert_eq!(batched, one_by_one);
    // The last registration met the limit of one clock it carried.
    assert_eq!(batched.len(), 1);
}

#[test]
fn a_batch_inside_a_batch_is_rejected_and_changes_nothing() {
    let mut registry = Registry::new();
    let nested = Command::Batch(vec![register("orders", "every.5.seconds", "c1", NO_LIMIT)]);
    let outcome = registry.apply(Command::Batch(vec![nested]));
    assert!(
        matches!(&outcome, Outcome::Batch(outcomes)
            if matches!(outcomes.as_slice(), [Outcome::Rejected { .. }])),
        "{outcome:?}"
    );
    assert!(registry.is_empty());
}

#[test]
fn the_same_commands_give_the_same_registry_and_outcomes() {
    let commands = [
        register("a", "every.1.second", "c2", NO_LIMIT),
        register("b", "@never", "c1", NO_LIMIT),
        register("a", "every.1.second", "c3", NO_LIMIT),
        Command::Pause {
            id: id("c1"),
            now_ms: 0,
            request: None,
        },
        Command::Resume {
            id: id("c9"),
            now_ms: 0,
            request: None,
        },
        register("c", "every.1.day", "c4", 3),
        register("d", "every.1.day", "c5", 3),
    ];
    let run = || {
        let mut registry = Registry::new();
        let outcomes: Vec<Outcome> = commands
            .iter()
            .cloned()
            .map(|command| registry.apply(command))
            .collect();
        (registry, outcomes)
    };
    let (registry, outcomes) = run();
    assert_eq!((registry.clone(), outcomes.clone()), run());
    let ids: Vec<String> = registry
        .clocks()
        .map(|clock| clock.id.to_string())
        .collect();
    assert_eq!(ids, ["c1", "c2", "c4"]);
    assert_eq!(
        outcomes.last(),
        Some(&Outcome::LimitReached { max_clocks: 3 })
    );
}

#[test]
fn command_kinds_name_each_command_for_spans_and_metrics() {
    let clock = id("c");
    let queue = QueueId::new("q".to_owned());
    let cases = [
        (register("n", "@never", "c", NO_LIMIT), "register"),
        (
            Command::Pause {
                id: clock.clone(),
                now_ms: 0,
                request: None,
            },
            "pause",
        ),
        (
            Command::Resume {
                id: clock.clone(),
                now_ms: 0,
                request: None,
            },
            "resume",
        ),
        (
            Command::Tick {
                id: clock.clone(),
                now_ms: 0,
                request: None,
            },
            "tick",
        ),
        (intent(0, 0), "intend"),
        (
            Command::Confirm {
                ticks: Vec::new(),
                published_ms: Vec::new(),
                attempts: Vec::new(),
                settled_ms: Vec::new(),
            },
            "confirm",
        ),
        (
            Command::Pop {
                queue: queue.clone(),
                now_ms: 0,
                request: "r".to_owned(),
            },
            "pop",
        ),
        (
            Command::Touch {
                queues: vec![queue],
                now_ms: 0,
            },
            "touch",
        ),
        (
            Command::Purge {
                clocks: vec![clock],
            },
            "purge",
        ),
        (restore(RegistrySnapshot::default(), 0), "restore"),
        (Command::Batch(Vec::new()), "batch"),
    ];
    for (command, kind) in cases {
        assert_eq!(command.kind(), kind, "{command:?}");
    }
}
