//! Property tests: `Registry::apply` returns, whatever the commands and whatever the restore
//! document, and the state it leaves stays within what its clocks, the intent window and the
//! limits allow (issue 18, items 3 and 5).
//!
//! The suite runs a short default number of cases (seconds). For a long run by hand:
//!
//! ```text
//! PROPTEST_CASES=20000 cargo test --release -p tickd-domain --test apply_bounds
//! ```
//!
//! Figures of the long runs are recorded in docs/RELIABILITY.md.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Value, json};
use tickd_domain::leases::MAX_LEASE_TICKS;
use tickd_domain::webhook::SECRET_BYTES;
use tickd_domain::{
    Channel, ClockId, Command, Intent, MAX_CATCH_UP_MS, MAX_LOOKAHEAD_MS, MAX_MANUAL_SEQUENCE,
    MAX_POP_TICKS, Outcome, Overlap, QueueId, Receipt, Registry, RegistrySnapshot, RestoreDocument,
    Schedule, Tick, TickId, TickLedger, Webhook, WebhookSecret, WebhookUrl,
};

/// Cases per property unless `PROPTEST_CASES` says otherwise: enough to hit every command
/// kind many times, little enough for the suite.
const DEFAULT_CASES: u32 = 48;

/// How long one case may take before it counts as a failure (an unbounded loop); the
/// slowest legitimate cases take well under a second.
const CASE_TIMEOUT_MS: u32 = 10_000;

/// The largest queue limit the generated intents carry: small, so that a burst of manual
/// ticks reaches it within one sequence.
const MAX_GENERATED_QUEUE_LIMIT: u64 = 5;

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    Config {
        cases,
        // Each case runs in a child process with a deadline, so that a loop that does not
        // end (an unbounded intent) fails the case instead of hanging or exhausting the
        // test's memory.
        timeout: CASE_TIMEOUT_MS,
        // A failure is reported after at most a minute of shrinking (a shrink step that times
        // out costs a whole timeout).
        max_shrink_time: 60_000,
        ..Config::default()
    }
}

/// Mostly a few valid clock ids, sometimes one a registration could not carry.
fn clock_id() -> impl Strategy<Value = ClockId> {
    prop_oneof![
        8 => (0..4u8).prop_map(|i| format!("c{i}")),
        1 => prop_oneof![
            Just(String::new()),
            Just("../../etc/passwd".to_owned()),
            Just("x".repeat(300)),
            "[^/]{0,8}",
        ],
    ]
    .prop_map(ClockId::new)
}

/// Mostly a few valid (32-byte) queue ids, sometimes a short or strange one.
fn queue_id() -> impl Strategy<Value = QueueId> {
    prop_oneof![
        8 => (0..5u8).prop_map(|i| format!("{i:0>32}")),
        1 => prop_oneof![Just("1".to_owned()), Just("../q".to_owned()), "[a-z]{0,40}"],
    ]
    .prop_map(QueueId::new)
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0..3u8).prop_map(|i| format!("n{i}")),
        1 => prop_oneof![Just(String::new()), Just("n".repeat(5_000)), ".{0,10}"],
    ]
}

fn schedule() -> impl Strategy<Value = Schedule> {
    prop_oneof![
        Just("every.1.seconds"),
        Just("every.2.seconds"),
        Just("every.1.minute"),
        Just("every.366.days"),
        Just("@never"),
    ]
    .prop_map(|literal| Schedule::parse(literal).unwrap_or_else(|e| panic!("{literal}: {e}")))
}

/// Instants near the start of the epoch, anywhere, and at the very end of time.
fn instant() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..300_000u64,
        1 => any::<u64>(),
        1 => (u64::MAX - 300_000)..=u64::MAX,
    ]
}

fn channel() -> impl Strategy<Value = Channel> {
    prop_oneof![
        queue_id().prop_map(|queue_id| Channel::Http { queue_id }),
        Just(Channel::Rabbit),
        Just(webhook()),
    ]
}

/// A webhook channel: its ticks go to the outbox, as RabbitMQ's do, and take overlap control.
fn webhook() -> Channel {
    let url = WebhookUrl::parse("https://receiver.example/t")
        .unwrap_or_else(|error| panic!("a valid url: {error}"));
    Channel::Webhook(Box::new(Webhook {
        url,
        secret: WebhookSecret::from_bytes([7; SECRET_BYTES]),
    }))
}

fn overlap() -> impl Strategy<Value = Overlap> {
    prop_oneof![
        2 => Just(Overlap::Allow),
        1 => Just(Overlap::Skip),
        1 => Just(Overlap::BufferOne),
    ]
}

fn intent() -> impl Strategy<Value = Intent> {
    (
        instant(),
        instant(),
        prop_oneof![0..120_000u64, any::<u64>()],
        1..=MAX_GENERATED_QUEUE_LIMIT,
        proptest::option::of(instant()),
    )
        .prop_map(
            |(through_ms, now_ms, catch_up_ms, queue_limit, in_flight_from_ms)| Intent {
                through_ms,
                now_ms,
                catch_up_ms,
                queue_limit,
                in_flight_from_ms,
            },
        )
}

/// Any command but a restore or a batch.
fn plain_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        3 => (
            (name(), schedule(), clock_id(), channel()),
            (0..8u64, instant(), overlap())
        )
            .prop_map(
                |((name, schedule, id, channel), (max_clocks, now_ms, overlap))| {
                    Command::Register {
                        name,
                        schedule,
                        id,
                        channel,
                        max_clocks,
                        now_ms,
                        overlap,
                    }
                }
            ),
        1 => (clock_id(), instant()).prop_map(|(id, now_ms)| Command::Pause { id, now_ms, request: None }),
        1 => (clock_id(), instant()).prop_map(|(id, now_ms)| Command::Resume { id, now_ms, request: None }),
        6 => (clock_id(), instant()).prop_map(|(id, now_ms)| Command::Tick { id, now_ms, request: None }),
        2 => intent().prop_map(Command::Intend),
        1 => (
            vec((instant(), clock_id(), instant()), 0..3),
            vec(proptest::option::of(instant()), 0..3),
            vec(any::<u32>(), 0..3),
            vec(proptest::option::of(instant()), 0..3)
        )
            .prop_map(
                |(keys, published_ms, attempts, settled_ms)| Command::Confirm {
                    ticks: keys
                        .into_iter()
                        .map(|(due, clock, at)| (due, TickId::scheduled(&clock, at)))
                        .collect(),
                    published_ms,
                    attempts,
                    settled_ms,
                }
            ),
        2 => (queue_id(), instant(), prop_oneof![Just("r0"), Just("r1")]).prop_map(
            |(queue, now_ms, request)| Command::Pop {
                queue,
                now_ms,
                request: request.to_owned(),
            }
        ),
        2 => (queue_id(), instant(), prop_oneof![0..200_000u64, any::<u64>()], 0..120u32,
            0..4u8, 0..12u32)
            .prop_map(|(queue, now_ms, visibility_ms, max, token, max_deliveries)| {
                Command::Lease {
                    queue,
                    now_ms,
                    until_ms: now_ms.saturating_add(visibility_ms),
                    max,
                    token: format!("{token:032x}"),
                    max_deliveries,
                }
            }),
        1 => (queue_id(), vec((0..4u8, 0..120u8), 0..6), instant()).prop_map(
            |(queue, receipts, now_ms)| Command::Ack {
                queue,
                receipts: receipts
                    .into_iter()
                    .map(|(token, place)| Receipt::new(format!("{token:032x}.{place}")))
                    .collect(),
                now_ms,
            }
        ),
        1 => (vec(queue_id(), 0..3), instant())
            .prop_map(|(queues, now_ms)| Command::Touch { queues, now_ms }),
        1 => vec(clock_id(), 0..3).prop_map(|clocks| Command::Purge { clocks }),
    ]
}

/// A backup: a registry built by commands (so mostly valid), then edited the way a hostile
/// or careless hand could edit the document.
fn restore_document() -> impl Strategy<Value = RegistrySnapshot> {
    (vec(plain_command(), 0..30), vec(edit(), 0..3)).prop_map(|(commands, edits)| {
        let mut source = Registry::new();
        for command in commands {
            source.apply(command);
        }
        let mut snapshot = RegistrySnapshot::from(source);
        // The ledger is edited as the document's text: its fields are the crate's own.
        let mut ledger = serde_json::to_value(&snapshot.ledger).expect("a ledger encodes");
        let last_watermark = edits.iter().rev().find_map(|edit| match edit {
            Edit::Watermark(at) => Some(*at),
            _ => None,
        });
        for edit in edits {
            edit.apply_to(&mut snapshot, &mut ledger);
        }
        snapshot.ledger = serde_json::from_value(ledger).expect("an edited ledger decodes");
        // The edits reach the document: one the decoder ignored would test nothing.
        if let Some(at) = last_watermark {
            assert_eq!(snapshot.ledger.ticks.intended_through_ms(), at);
        }
        snapshot
    })
}

/// One hand edit of a backup document.
#[derive(Clone, Debug)]
enum Edit {
    Watermark(u64),
    ManualSequence(u64),
    ClockId(usize, ClockId),
    Name(usize, String),
    Channel(usize, Channel),
    Duplicate(usize),
    QueueTicks(QueueId, usize),
    DropCursors,
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<u64>().prop_map(Edit::Watermark),
        any::<u64>().prop_map(Edit::ManualSequence),
        (0..4usize, clock_id()).prop_map(|(i, id)| Edit::ClockId(i, id)),
        (0..4usize, name()).prop_map(|(i, name)| Edit::Name(i, name)),
        (0..4usize, channel()).prop_map(|(i, channel)| Edit::Channel(i, channel)),
        (0..4usize).prop_map(Edit::Duplicate),
        (queue_id(), 0..300usize).prop_map(|(queue, n)| Edit::QueueTicks(queue, n)),
        Just(Edit::DropCursors),
    ]
}

impl Edit {
    /// Applies the edit to the document's clocks, or to its `ledger` (as JSON).
    fn apply_to(self, snapshot: &mut RegistrySnapshot, ledger: &mut Value) {
        let clocks = snapshot.clocks.len();
        match self {
            Edit::Watermark(at) => ledger["intended_through_ms"] = json!(at),
            Edit::ManualSequence(n) => ledger["manual_sequence"] = json!(n),
            Edit::ClockId(i, id) if clocks > 0 => snapshot.clocks[i % clocks].id = id,
            Edit::Name(i, name) if clocks > 0 => snapshot.clocks[i % clocks].name = name.into(),
            Edit::Channel(i, channel) if clocks > 0 => {
                snapshot.clocks[i % clocks].channel = channel;
            }
            Edit::Duplicate(i) if clocks > 0 => {
                let twin = snapshot.clocks[i % clocks].clone();
                snapshot.clocks.push(twin);
            }
            Edit::QueueTicks(queue, n) => {
                // Ticks a queue could hold, many of them: manual ticks of the queue's clock.
                let Some(clock) = snapshot.clocks.iter().find(
                    |clock| matches!(&clock.channel, Channel::Http { queue_id } if *queue_id == queue),
                ) else {
                    return;
                };
                let ticks = (0..n).map(|i| {
                    let sequence = u64::try_from(i).unwrap_or(u64::MAX);
                    json!(Tick {
                        id: TickId::manual(&clock.id, sequence),
                        clock: clock.id.clone(),
                        name: clock.name.to_string(),
                        schedule: clock.schedule.clone(),
                        due_at_ms: sequence,
                        manual: true,
                        skipped: 0,
                    })
                });
                let queues = &mut ledger["queues"];
                if !queues.is_object() {
                    *queues = json!({});
                }
                let filed = &mut queues[queue.to_string()];
                if !filed.is_array() {
                    *filed = json!([]);
                }
                if let Value::Array(filed) = filed {
                    filed.extend(ticks);
                }
                let n = u64::try_from(n).unwrap_or(u64::MAX);
                let sequence = ledger["manual_sequence"].as_u64().unwrap_or(0);
                ledger["manual_sequence"] = json!(sequence.max(n));
            }
            Edit::DropCursors => ledger["cursors"] = json!({}),
            _ => {}
        }
    }
}

fn restore_command() -> impl Strategy<Value = Command> {
    (restore_document(), instant(), 0..8u64).prop_map(|(snapshot, now_ms, max_clocks)| {
        Command::Restore {
            snapshot: RestoreDocument::of(&snapshot).expect("a snapshot encodes"),
            now_ms,
            max_clocks,
        }
    })
}

/// Any command, restores and batches (with the odd batch inside a batch) included.
fn command() -> impl Strategy<Value = Command> {
    let leaf = prop_oneof![12 => plain_command(), 1 => restore_command()];
    leaf.prop_recursive(2, 12, 6, |inner| vec(inner, 0..6).prop_map(Command::Batch))
}

/// The ticks waiting in the ledger, outbox, queues and leases together.
fn ticks_waiting(registry: &Registry) -> usize {
    ticks_held(registry.ledger())
}

/// The ticks a restore document carries.
fn ticks_in(snapshot: &RegistrySnapshot) -> usize {
    ticks_held(&snapshot.ledger.ticks)
}

/// The ticks a ledger holds: outbox, queues and leases.
fn ticks_held(ledger: &TickLedger) -> usize {
    let queued: usize = ledger.queues().values().map(|queue| queue.len()).sum();
    let leased: usize = ledger
        .queues()
        .keys()
        .chain(ledger.leases().keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|queue| ledger.leased_in_queue(queue))
        .sum();
    ledger.outbox().len() + queued + leased
}

/// The most ticks one command may add: per clock, one intent's window of one-second instants
/// (catch-up and look-ahead) plus the coalesced one and a manual tick; a batch counts each of
/// its commands, and a restore its document's ticks.
fn growth_bound(command: &Command, clocks: usize) -> usize {
    let window = usize::try_from((MAX_CATCH_UP_MS + MAX_LOOKAHEAD_MS) / 1_000).unwrap_or(0);
    match command {
        Command::Batch(commands) => commands
            .iter()
            .map(|command| growth_bound(command, clocks))
            .sum(),
        Command::Restore { snapshot, .. } => {
            ticks_in(&snapshot.decode().expect("the test's own document decodes"))
        }
        _ => clocks.max(1) * (window + 3),
    }
}

/// The checks after every command. Returns the outcome's pops for the pop bound.
fn check_bounds(
    registry: &Registry,
    before: usize,
    command: &Command,
    outcome: &Outcome,
    latest_now: u64,
) -> Result<(), TestCaseError> {
    let ledger = registry.ledger();
    let limit = usize::try_from(MAX_GENERATED_QUEUE_LIMIT).unwrap_or(usize::MAX);
    for (queue, ticks) in ledger.queues().iter() {
        let held = ticks.len() + ledger.leased_in_queue(queue);
        prop_assert!(
            held <= limit,
            "queue {queue} holds {held} ticks with its leased ones, over the queue limit {limit}"
        );
    }
    for (queue, leases) in ledger.leases().iter() {
        prop_assert!(
            leases.len() <= limit,
            "queue {queue} has {} leased",
            leases.len()
        );
    }
    for (queue, acked) in ledger.acked_receipts().iter() {
        prop_assert!(
            acked.len() <= limit,
            "queue {queue} remembers {} acked receipts",
            acked.len()
        );
    }
    for replay in ledger.pop_replays().values() {
        prop_assert!(replay.ticks.len() <= MAX_POP_TICKS);
    }
    let mut pops = vec![outcome];
    while let Some(outcome) = pops.pop() {
        match outcome {
            Outcome::Popped(ticks) => prop_assert!(ticks.len() <= MAX_POP_TICKS),
            Outcome::Leased(ticks) => {
                prop_assert!(ticks.len() <= usize::try_from(MAX_LEASE_TICKS).unwrap_or(0));
            }
            Outcome::Batch(outcomes) => pops.extend(outcomes),
            _ => {}
        }
    }
    prop_assert!(ledger.manual_sequence() <= MAX_MANUAL_SEQUENCE);
    prop_assert!(
        ledger.intended_through_ms() <= latest_now.saturating_add(MAX_LOOKAHEAD_MS),
        "watermark {} beyond {latest_now} + look-ahead",
        ledger.intended_through_ms()
    );
    let after = ticks_waiting(registry);
    let bound = growth_bound(command, registry.len());
    prop_assert!(
        after <= before.saturating_add(bound),
        "one command grew the ledger from {before} to {after} ticks (bound {bound})"
    );
    Ok(())
}

/// The latest `now_ms` an intent or restore of `command` carried: the watermark may reach
/// the look-ahead past it, no further.
fn latest_now(command: &Command) -> u64 {
    match command {
        Command::Intend(intent) => intent.now_ms,
        Command::Restore { now_ms, .. } => *now_ms,
        Command::Batch(commands) => commands.iter().map(latest_now).max().unwrap_or(0),
        _ => 0,
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any sequence of commands: apply returns, and the state stays within the bounds.
    #[test]
    fn apply_returns_and_stays_bounded_for_any_commands(
        first_limit in 1..=MAX_GENERATED_QUEUE_LIMIT,
        commands in vec(command(), 1..120),
    ) {
        let mut registry = Registry::new();
        // The first intent sets a small queue limit, as a leader's first intent does with
        // the configured one.
        registry.apply(Command::Intend(Intent {
            through_ms: 0,
            now_ms: 0,
            catch_up_ms: 0,
            queue_limit: first_limit,
            in_flight_from_ms: None,
        }));
        let mut latest = 0;
        for command in commands {
            let before = ticks_waiting(&registry);
            latest = latest.max(latest_now(&command));
            let outcome = registry.apply(command.clone());
            check_bounds(&registry, before, &command, &outcome, latest)?;
        }
        // Whatever it went through, the registry survives its snapshot form.
        let json = serde_json::to_string(&registry).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let loaded: Registry = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(loaded, registry);
    }

    /// Any restore document: the API's check and apply agree, a refusal changes nothing, and
    /// what is restored keeps ticking within the bounds.
    #[test]
    fn a_restore_document_is_refused_or_restored_within_the_bounds(
        limit in 1..=MAX_GENERATED_QUEUE_LIMIT,
        snapshot in restore_document(),
        now_ms in instant(),
        then in vec(plain_command(), 0..60),
    ) {
        let mut registry = Registry::new();
        registry.apply(Command::Intend(Intent {
            through_ms: 0,
            now_ms: 0,
            catch_up_ms: 0,
            queue_limit: limit,
            in_flight_from_ms: None,
        }));
        let before = registry.clone();
        let checked = snapshot.validate_for_restore(now_ms);
        let restore = Command::Restore {
            snapshot: RestoreDocument::of(&snapshot).expect("a snapshot encodes"),
            now_ms,
            max_clocks: u64::MAX,
        };
        let outcome = registry.apply(restore.clone());
        match (&checked, &outcome) {
            (Ok(()), Outcome::Restored { .. }) => {}
            (Err(error), Outcome::Rejected { reason }) => {
                prop_assert_eq!(&error.to_string(), reason);
                prop_assert_eq!(&registry, &before);
            }
            _ => prop_assert!(false, "the check said {checked:?} but apply {outcome:?}"),
        }
        check_bounds(&registry, 0, &restore, &outcome, now_ms)?;
        let mut latest = now_ms;
        for command in then {
            let before = ticks_waiting(&registry);
            latest = latest.max(latest_now(&command));
            let outcome = registry.apply(command.clone());
            check_bounds(&registry, before, &command, &outcome, latest)?;
        }
    }
}
