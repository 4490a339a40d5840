//! The due index against the full scan it replaced, kept here as the oracle: for any
//! sequence of registrations, pauses, resumes, manual ticks, pops, purges, restores and
//! intents, a registry whose intents visit only the indexed clocks and one whose intents
//! visit every active clock reach the same state and outcomes, and the index built up
//! command by command equals one rebuilt from scratch.
//!
//! A file of its own: it is a property test with its own command generator, not an example.

use proptest::prelude::*;

use super::*;

const SCHEDULES: [&str; 5] = [
    "every.1.seconds",
    "every.2.seconds",
    "every.3.seconds",
    "every.1.minutes",
    "@never",
];

#[derive(Clone, Debug)]
enum Step {
    Apply(Box<Command>),
    /// Restores the backup of `backed_up()` (refused unless the registry is empty).
    Restore(u64),
}

fn apply(command: Command) -> Step {
    Step::Apply(Box::new(command))
}

fn clock_id() -> impl Strategy<Value = ClockId> {
    (0..4u8).prop_map(|n| id(&format!("c{n}")))
}

fn instant() -> impl Strategy<Value = u64> {
    0..200_000u64
}

fn step() -> impl Strategy<Value = Step> {
    let register = (0..4u8, 0..SCHEDULES.len(), any::<bool>(), instant()).prop_map(
        |(n, schedule, rabbit, now_ms)| {
            let literal = SCHEDULES[schedule];
            let proposed = format!("c{n}");
            let name = format!("n{n}");
            let mut command = register(&name, literal, &proposed, NO_LIMIT);
            if let Command::Register {
                channel,
                now_ms: at,
                ..
            } = &mut command
            {
                *at = now_ms;
                if rabbit {
                    *channel = Channel::Rabbit;
                }
            }
            apply(command)
        },
    );
    // Instants are whole seconds: half of the intents start or end on one, where a
    // window's bounds matter.
    let now = prop_oneof![instant(), instant().prop_map(|at| at / 1_000 * 1_000)];
    let ahead = prop_oneof![0..3_000u64, Just(0u64), Just(1_000), Just(2_000)];
    let catch_up = prop_oneof![Just(0u64), Just(2_000), Just(60_000)];
    let intent =
        (now, ahead, catch_up, 1..5u64).prop_map(|(now_ms, ahead, catch_up_ms, queue_limit)| {
            apply(Command::Intend(Intent {
                through_ms: now_ms + ahead,
                now_ms,
                catch_up_ms,
                queue_limit,
                in_flight_from_ms: None,
            }))
        });
    prop_oneof![
        3 => register,
        1 => (clock_id(), instant()).prop_map(|(id, now_ms)| apply(Command::Pause { id, now_ms, request: None })),
        1 => (clock_id(), instant()).prop_map(|(id, now_ms)| apply(Command::Resume { id, now_ms, request: None })),
        1 => (clock_id(), instant()).prop_map(|(id, now_ms)| apply(Command::Tick { id, now_ms, request: None })),
        1 => (0..4u8, instant()).prop_map(|(n, now_ms)| apply(Command::Pop {
            queue: queue_for(&format!("c{n}")),
            now_ms,
            request: format!("r{now_ms}"),
        })),
        1 => proptest::collection::vec(clock_id(), 0..4)
            .prop_map(|clocks| apply(Command::Purge { clocks })),
        1 => instant().prop_map(Step::Restore),
        6 => intent,
    ]
}

/// Applies `step`; `scan` makes intents visit every active clock, as before the index.
fn run(registry: &mut Registry, step: &Step, scan: bool) -> Outcome {
    let command = match step {
        Step::Apply(command) => (**command).clone(),
        Step::Restore(now_ms) => restore(RegistrySnapshot::from(backed_up()), *now_ms),
    };
    match (command, scan) {
        (Command::Intend(intent), true) => {
            let active: Vec<ClockId> = registry
                .clocks()
                .filter(|clock| clock.status == ClockStatus::Active)
                .map(|clock| clock.id.clone())
                .collect();
            // The scan visits every active clock by design; what it files must match.
            let mut filed = registry.intend_for(Levels::THIS_BINARY.highest, &intent, &active);
            filed.visited = 0;
            Outcome::Filed(filed)
        }
        (command, _) => registry.apply(command),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(64)
    ))]
    #[test]
    fn the_index_files_exactly_what_the_full_scan_files(
        steps in proptest::collection::vec(step(), 1..60)
    ) {
        let mut indexed = Registry::new();
        let mut scanned = Registry::new();
        for step in &steps {
            let mut by_index = run(&mut indexed, step, false);
            if let Outcome::Filed(filed) = &mut by_index {
                filed.visited = 0;
            }
            let by_scan = run(&mut scanned, step, true);
            prop_assert_eq!(&by_index, &by_scan, "{:?}", step);
            prop_assert_eq!(&indexed, &scanned, "{:?}", step);
            let rebuilt = Registry::try_from(RegistrySnapshot::from(indexed.clone()));
            prop_assert_eq!(rebuilt.as_ref(), Ok(&indexed), "{:?}", step);
        }
    }
}
