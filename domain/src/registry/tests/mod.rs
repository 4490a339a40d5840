//! The registry's unit tests, by concern, and the helpers they share: commands built the way
//! a proposing node builds them (`register`, `rabbit`, `intent`, `restore`), registries in
//! known states (`create`, `backed_up`, `outage_then_deliveries`) and readers of what the
//! ledger holds (`outbox_ids`, `queue_ids`, `stats_of`).
//!
//! They live inside the module, not under `domain/tests`, because they read what the crate
//! does not publish: the store's fields (its literals, an image's maps) and
//! `Registry::intend_for`, which the due index oracle calls to visit every clock.

mod commands;
mod due_index_oracle;
mod leases;
mod levels;
mod lifecycle;
mod lists;
mod overlap;
mod overlap_webhooks;
mod restore;
mod skipped;
mod snapshots;
mod stats;
mod ticks;

use super::*;
use crate::clock::Channel;
use crate::level::{Level, Levels};
use crate::restore_document::RestoreDocument;
use crate::stats::{ClockStats, Delivery, SeriesBucket};
use crate::ticks::{Filed, Intent, MAX_LOOKAHEAD_MS, MAX_MANUAL_SEQUENCE, TickCounters, TickId};

/// A generous limit for tests that are not about the limit.
const NO_LIMIT: u64 = 1_000;

fn schedule(literal: &str) -> Schedule {
    Schedule::parse(literal).unwrap_or_else(|err| panic!("test schedule {literal:?}: {err}"))
}

fn id(id: &str) -> ClockId {
    ClockId::new(id.to_owned())
}

fn register(name: &str, literal: &str, proposed_id: &str, max_clocks: u64) -> Command {
    Command::Register {
        name: name.to_owned(),
        schedule: schedule(literal),
        id: id(proposed_id),
        channel: Channel::Http {
            queue_id: queue_for(proposed_id),
        },
        max_clocks,
        now_ms: 0,
        overlap: crate::Overlap::Allow,
    }
}

/// The queue id the tests' registrations propose for `proposed_id`: padded to the 32
/// bytes a drawn queue id has, so that backups of these registries restore.
fn queue_for(proposed_id: &str) -> QueueId {
    QueueId::new(format!("queue-{proposed_id:_<26}"))
}

/// Applies a register command that must create a clock, and returns it.
fn create(registry: &mut Registry, name: &str, literal: &str, proposed_id: &str) -> Clock {
    match registry.apply(register(name, literal, proposed_id, NO_LIMIT)) {
        Outcome::Registered {
            clock,
            created: true,
        } => clock,
        other => panic!("expected a new clock, got {other:?}"),
    }
}

fn intent(through_ms: u64, now_ms: u64) -> Command {
    Command::Intend(Intent {
        through_ms,
        now_ms,
        catch_up_ms: 60_000,
        queue_limit: 100,
        in_flight_from_ms: None,
    })
}

fn rabbit(name: &str, literal: &str, proposed_id: &str, now_ms: u64) -> Command {
    Command::Register {
        name: name.to_owned(),
        schedule: schedule(literal),
        id: id(proposed_id),
        channel: Channel::Rabbit,
        max_clocks: NO_LIMIT,
        now_ms,
        overlap: crate::Overlap::Allow,
    }
}

fn outbox_ids(registry: &Registry) -> Vec<String> {
    registry
        .ledger()
        .outbox
        .values()
        .map(|tick| tick.id.to_string())
        .collect()
}

/// The ids of the ticks waiting in an http clock's queue, in filing order.
fn queue_ids(registry: &Registry, clock: &Clock) -> Vec<String> {
    let Channel::Http { queue_id } = &clock.channel else {
        panic!("an http clock, got {:?}", clock.channel);
    };
    registry
        .ledger()
        .queues
        .get(queue_id)
        .map(|queue| queue.iter().map(|tick| tick.id.to_string()).collect())
        .unwrap_or_default()
}

fn document(snapshot: &RegistrySnapshot) -> RestoreDocument {
    RestoreDocument::of(snapshot).expect("a snapshot encodes")
}

fn restore(snapshot: RegistrySnapshot, now_ms: u64) -> Command {
    Command::Restore {
        snapshot: document(&snapshot),
        now_ms,
        max_clocks: NO_LIMIT,
    }
}

/// A backed-up registry: one paused http clock, one active RabbitMQ clock with filed ticks.
fn backed_up() -> Registry {
    let mut source = Registry::new();
    create(&mut source, "h", "every.1.seconds", "hc");
    source.apply(Command::Pause {
        id: id("hc"),
        now_ms: 100,
        request: None,
    });
    source.apply(rabbit("a", "every.1.seconds", "ra", 0));
    source.apply(intent(3_000, 2_500));
    source
}

/// An intent with a ten-second schedule's worth of knobs: the catch-up window is one
/// minute and an http queue keeps three ticks.
fn intent_keeping_three(through_ms: u64, now_ms: u64) -> Command {
    Command::Intend(Intent {
        through_ms,
        now_ms,
        catch_up_ms: 60_000,
        queue_limit: 3,
        in_flight_from_ms: None,
    })
}

/// The scenario of `intents_count_what_they_filed_late_coalesced_and_dropped` at `level`,
/// then a pop of the http clock (retried once), a confirmation of two of the RabbitMQ
/// clock's ticks (one stored, one returned), and a pause and resume of the http clock.
fn outage_then_deliveries(level: Level) -> (Registry, Clock) {
    let mut registry = Registry::new();
    registry.apply_at(level, rabbit("r", "every.10.seconds", "ra", 0));
    let Outcome::Registered { clock: http, .. } =
        registry.apply_at(level, register("h", "every.10.seconds", "hc", NO_LIMIT))
    else {
        panic!("an http clock");
    };
    registry.apply_at(level, intent_keeping_three(100_500, 100_000));
    registry.apply_at(level, intent_keeping_three(160_500, 160_000));
    let Channel::Http { queue_id } = http.channel.clone() else {
        panic!("an http clock");
    };
    let pop = || Command::Pop {
        queue: queue_id.clone(),
        now_ms: 165_000,
        request: "p1".into(),
    };
    registry.apply_at(level, pop());
    registry.apply_at(level, pop());
    let key = |at: u64| (at, TickId::scheduled(&id("ra"), at));
    registry.apply_at(
        level,
        Command::Confirm {
            ticks: vec![key(90_000), key(100_000)],
            published_ms: vec![Some(165_000), None],
            attempts: Vec::new(),
            settled_ms: Vec::new(),
        },
    );
    for command in [
        Command::Pause {
            id: id("hc"),
            now_ms: 166_000,
            request: None,
        },
        Command::Resume {
            id: id("hc"),
            now_ms: 167_000,
            request: None,
        },
    ] {
        registry.apply_at(level, command);
    }
    (registry, http)
}

fn stats_of(registry: &Registry, clock: &str) -> ClockStats {
    registry
        .cursor(&id(clock))
        .map(|cursor| cursor.stats.get())
        .unwrap_or_else(|| panic!("clock {clock} has a cursor"))
}
