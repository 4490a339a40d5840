//! Cluster levels: which command kinds a cluster's log may carry.
//!
//! A node decodes only the [`Command`] kinds its binary knows. During a rolling upgrade a
//! cluster runs two binaries at once, so a kind that the newer one introduces must not reach
//! the log before every voter can decode it. Each kind therefore belongs to a level (the level
//! that introduced it, [`Command::introduced_in`]); the cluster holds one level in its
//! replicated state; every node advertises the range of levels its binary supports
//! ([`Levels::THIS_BINARY`]); and the leader raises the cluster level only once every voter
//! supports the new one. A node that advertises nothing is a v0.1.0 node: level 1.
//!
//! Levels only grow with releases that add command kinds or change the meaning of one; a
//! release that only fixes bugs keeps its predecessor's level. A changed meaning is applied
//! only from the level that introduced it (see [`Level::max_pop_ticks`]): every replica of a
//! cluster applies the log by the cluster's level, not by its own binary, so that two
//! releases of one mixed cluster reach the same state from the same entries.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ticks::{EARLIER_POPS_KEPT, MAX_POP_TICKS};
use crate::{Channel, Command};

/// A cluster level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Level(pub u32);

impl Level {
    /// v0.1.0: registrations, pauses, resumes, manual ticks, intents, confirmations, pops,
    /// touches, purges, restores and batches of them.
    pub const V0_1: Level = Level(1);
    /// This release: adds [`Command::SetLevel`], bounds a pop to [`MAX_POP_TICKS`],
    /// applies the bounds against hostile and stale commands ([`Level::bounds_commands`]) and
    /// keeps tick statistics ([`Level::keeps_tick_stats`]).
    pub const V0_2: Level = Level(2);
    /// Calendar schedules (cron, `every.MON.at.09:30`, `@at`, zones) computed with the zone
    /// database this binary carries ([`crate::zone_database_version`]): older binaries cannot
    /// parse them, so a registration of one waits for every voter. Webhook clocks
    /// ([`crate::Channel::Webhook`]), which older binaries cannot decode. Leases of http-queue
    /// ticks ([`Command::Lease`], [`Command::Ack`]). Manual ticks, pauses and resumes that a
    /// retry does not apply twice (their `request`), registrations whose retry answers as
    /// the first attempt did, and pops whose retry gets its ticks back after other pops
    /// ([`Level::earlier_pops_kept`]).
    pub const V0_3: Level = Level(3);

    /// Whether apply holds commands to the bounds this release added against hostile and
    /// stale input: manual ticks obey the queue limit (and wait for the broker at most that
    /// many per clock), a registration stamped far behind the intent watermark files one
    /// look-ahead window at most, a proposed queue id already in use is refused, and a
    /// restored backup is validated and trimmed to the queue limit. v0.1.0 applies none of
    /// them, so a cluster at level 1 does not either: a replica of this release must reach the
    /// state its v0.1.0 peers reach from the same entry. (The API checks a backup before
    /// proposing it, at any level.)
    pub fn bounds_commands(self) -> bool {
        self >= Level::V0_2
    }

    /// Whether apply keeps the tick statistics of [`crate::stats`]. v0.1.0 replicas keep none;
    /// a cluster starts keeping them when every replica can, so that replicas hold the same
    /// state.
    pub fn keeps_tick_stats(self) -> bool {
        self >= Level::V0_2
    }

    /// Whether the cluster may hold calendar schedules: every replica can parse them and
    /// computes their instants with the same zone database.
    pub fn has_calendar_schedules(self) -> bool {
        self >= Level::V0_3
    }

    /// Whether the cluster may lease http-queue ticks ([`Command::Lease`], [`Command::Ack`]):
    /// every replica decodes the commands and keeps the leases.
    pub fn has_leases(self) -> bool {
        self >= Level::V0_3
    }

    /// Whether apply takes a manual tick, a pause or a resume once however often it is retried
    /// (`crate::retries`): every replica keeps the request ids. Also whether a retried
    /// registration (the same proposed id) answers as the one that created its clock.
    pub fn replays_requests(self) -> bool {
        self >= Level::V0_3
    }

    /// Whether apply counts, in each tick, the instants of its clock coalesced into it or
    /// dropped before it (`Tick::skipped`): every replica keeps the same count.
    pub fn counts_skipped(self) -> bool {
        self >= Level::V0_3
    }

    /// Whether the cluster may hold webhook clocks: every replica decodes their channel.
    pub fn has_webhooks(self) -> bool {
        self >= Level::V0_3
    }

    /// Whether a clock may have overlap control (`crate::overlap`): every replica applies it.
    pub fn has_overlap(self) -> bool {
        self >= Level::V0_3
    }

    /// How many of a queue's pops before its last one a retried pop still gets back at this
    /// level (`crate::ticks::EARLIER_POPS_KEPT`): none below level 3, whose replicas remember
    /// only the last, and a replica of this release must pop afresh where they do.
    pub fn earlier_pops_kept(self) -> usize {
        if self >= Level::V0_3 {
            EARLIER_POPS_KEPT
        } else {
            0
        }
    }

    /// The most ticks one pop removes from a queue at this level. v0.1.0 removed every due
    /// tick, and a replica of this release in a mixed cluster must remove what the v0.1.0
    /// replicas remove, or the queues would part: ticks delivered twice after a failover to one
    /// release, or never after a failover to the other.
    pub fn max_pop_ticks(self) -> usize {
        if self >= Level::V0_2 {
            MAX_POP_TICKS
        } else {
            usize::MAX
        }
    }
}

/// The level of a cluster that has not recorded one: every cluster formed by v0.1.0, and every
/// new cluster until its leader has seen every voter's support for a higher one.
impl Default for Level {
    fn default() -> Self {
        Level::V0_1
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The range of levels one node's binary supports, as it advertises it to its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Levels {
    /// The lowest level it can run at.
    pub lowest: Level,
    /// The highest level it can run at: it decodes every kind up to this one.
    pub highest: Level,
}

impl Levels {
    /// What this binary supports: it decodes every command kind up to the highest.
    pub const THIS_BINARY: Levels = Levels {
        lowest: Level::V0_1,
        highest: Level::V0_3,
    };

    /// What a node that advertises nothing supports: it predates levels, so it is v0.1.0.
    pub const UNADVERTISED: Levels = Levels {
        lowest: Level::V0_1,
        highest: Level::V0_1,
    };

    /// Whether a node with these levels can run a cluster at `level`.
    pub fn contains(&self, level: Level) -> bool {
        self.lowest <= level && level <= self.highest
    }
}

impl fmt::Display for Levels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..={}", self.lowest, self.highest)
    }
}

impl Command {
    /// The level that introduced this command's kind: the cluster must be at it, or above,
    /// before the kind may be proposed.
    pub fn introduced_in(&self) -> Level {
        match self {
            Command::SetLevel { .. } => Level::V0_2,
            Command::Lease { .. } | Command::Ack { .. } => Level::V0_3,
            Command::Tick {
                request: Some(_), ..
            } => Level::V0_3,
            Command::Confirm { settled_ms, .. } if !settled_ms.is_empty() => Level::V0_3,
            Command::Register { schedule, .. } if schedule.is_calendar() => Level::V0_3,
            Command::Register {
                channel: Channel::Webhook(_),
                ..
            } => Level::V0_3,
            Command::Register { .. }
            | Command::Pause { .. }
            | Command::Resume { .. }
            | Command::Tick { .. }
            | Command::Intend(_)
            | Command::Confirm { .. }
            | Command::Pop { .. }
            | Command::Touch { .. }
            | Command::Purge { .. }
            | Command::Restore { .. }
            | Command::Batch(_) => Level::V0_1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Intent, Outcome, Registry, RegistrySnapshot};

    /// One command of every kind, so that a new kind cannot be forgotten in the lists below.
    fn one_of_each() -> Vec<Command> {
        let id = crate::ClockId::new("c1".to_owned());
        let queue = crate::QueueId::new("q".repeat(32));
        let every = |command: &Command| match command {
            // A new variant fails to compile here until it is listed, and so reaches the test.
            Command::Register { .. }
            | Command::Pause { .. }
            | Command::Resume { .. }
            | Command::Tick { .. }
            | Command::Intend(_)
            | Command::Confirm { .. }
            | Command::Pop { .. }
            | Command::Lease { .. }
            | Command::Ack { .. }
            | Command::Touch { .. }
            | Command::Purge { .. }
            | Command::Restore { .. }
            | Command::Batch(_)
            | Command::SetLevel { .. } => (),
        };
        let commands = vec![
            Command::Register {
                name: "n".into(),
                schedule: "every.5.seconds".parse().expect("a schedule"),
                id: id.clone(),
                channel: Channel::Http {
                    queue_id: queue.clone(),
                },
                max_clocks: 1,
                now_ms: 0,
                overlap: crate::Overlap::Allow,
            },
            Command::Pause {
                id: id.clone(),
                now_ms: 0,
                request: None,
            },
            Command::Resume {
                id: id.clone(),
                now_ms: 0,
                request: None,
            },
            Command::Tick {
                id,
                now_ms: 0,
                request: None,
            },
            Command::Intend(Intent {
                now_ms: 0,
                through_ms: 0,
                catch_up_ms: 0,
                queue_limit: 1,
                in_flight_from_ms: None,
            }),
            Command::Confirm {
                ticks: vec![],
                published_ms: vec![],
                attempts: vec![],
                settled_ms: vec![],
            },
            Command::Pop {
                queue: queue.clone(),
                now_ms: 0,
                request: "r".into(),
            },
            Command::Lease {
                queue: queue.clone(),
                now_ms: 0,
                until_ms: 30_000,
                max: 10,
                token: "0".repeat(32),
                max_deliveries: 10,
            },
            Command::Ack {
                queue: queue.clone(),
                receipts: vec![],
                now_ms: 0,
            },
            Command::Touch {
                queues: vec![queue],
                now_ms: 0,
            },
            Command::Purge { clocks: vec![] },
            Command::Restore {
                snapshot: crate::RestoreDocument::of(&RegistrySnapshot::default())
                    .expect("an empty registry encodes"),
                now_ms: 0,
                max_clocks: 1,
            },
            Command::Batch(vec![]),
            Command::SetLevel { level: Level::V0_2 },
        ];
        commands.iter().for_each(every);
        commands
    }

    /// The serialized tag of a command: its kind as a peer sees it.
    fn tag(command: &Command) -> String {
        let value = serde_json::to_value(command).expect("serializable");
        let serde_json::Value::Object(map) = value else {
            panic!("a command serializes as a one-key object: {value}");
        };
        map.keys().next().expect("one key").clone()
    }

    #[test]
    fn kinds_lists_the_tag_of_every_command_and_nothing_else() {
        let tags: Vec<String> = one_of_each().iter().map(tag).collect();
        assert_eq!(tags, Command::KINDS);
    }

    #[test]
    fn only_set_level_and_leases_are_newer_than_v0_1() {
        for command in one_of_each() {
            let expected = match command {
                Command::SetLevel { .. } => Level::V0_2,
                Command::Lease { .. } | Command::Ack { .. } => Level::V0_3,
                _ => Level::V0_1,
            };
            assert_eq!(command.introduced_in(), expected, "{}", command.kind());
            assert!(Levels::THIS_BINARY.contains(command.introduced_in()));
        }
        assert!(!Levels::UNADVERTISED.contains(Level::V0_2));
        let overlap_confirm = Command::Confirm {
            ticks: vec![(
                1,
                crate::TickId::manual(&crate::ClockId::new("c".into()), 1),
            )],
            published_ms: vec![Some(1)],
            attempts: vec![],
            settled_ms: vec![Some(2)],
        };
        assert_eq!(overlap_confirm.introduced_in(), Level::V0_3);
    }

    #[test]
    fn a_calendar_registration_needs_level_3_to_be_proposed_and_applied() {
        let register = |schedule: &str| Command::Register {
            name: "calendar".into(),
            schedule: schedule.parse().expect("a schedule"),
            id: crate::ClockId::new("c1".to_owned()),
            channel: Channel::Http {
                queue_id: crate::QueueId::new("q".repeat(32)),
            },
            max_clocks: 10,
            now_ms: 0,
            overlap: crate::Overlap::Allow,
        };
        let calendar = register("TZ=Europe/Berlin 0 30 9 * * MON-FRI");
        assert_eq!(calendar.introduced_in(), Level::V0_3);
        assert_eq!(register("every.5.seconds").introduced_in(), Level::V0_1);
        for level in [Level::V0_1, Level::V0_2] {
            let mut registry = Registry::new();
            let outcome = registry.apply_at(level, calendar.clone());
            assert!(
                matches!(&outcome, Outcome::Rejected { reason } if reason.contains("level 3")),
                "{outcome:?}"
            );
            assert!(
                registry.is_empty(),
                "a refused registration changed the registry"
            );
        }
        let mut registry = Registry::new();
        let outcome = registry.apply_at(Level::V0_3, calendar);
        assert!(
            matches!(outcome, Outcome::Registered { created: true, .. }),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_webhook_registration_or_restore_needs_level_3() {
        let webhook = Channel::Webhook(Box::new(crate::Webhook {
            url: crate::WebhookUrl::parse("https://receiver.example/t").expect("a valid url"),
            secret: crate::WebhookSecret::from_bytes([1; crate::webhook::SECRET_BYTES]),
        }));
        let register = Command::Register {
            name: "hook".into(),
            schedule: "every.5.seconds".parse().expect("a schedule"),
            id: crate::ClockId::new("c1".to_owned()),
            channel: webhook,
            max_clocks: 10,
            now_ms: 0,
            overlap: crate::Overlap::Allow,
        };
        assert_eq!(register.introduced_in(), Level::V0_3);
        let mut at_three = Registry::new();
        let outcome = at_three.apply_at(Level::V0_3, register.clone());
        assert!(
            matches!(outcome, Outcome::Registered { created: true, .. }),
            "{outcome:?}"
        );
        let backup = crate::RestoreDocument::of(&RegistrySnapshot::from(at_three))
            .expect("a registry encodes");
        for level in [Level::V0_1, Level::V0_2] {
            let mut registry = Registry::new();
            let outcome = registry.apply_at(level, register.clone());
            assert!(
                matches!(&outcome, Outcome::Rejected { reason } if reason.contains("webhook clocks need cluster level 3")),
                "{outcome:?}"
            );
            let restore = Command::Restore {
                snapshot: backup.clone(),
                now_ms: 0,
                max_clocks: 10,
            };
            let outcome = registry.apply_at(level, restore);
            assert!(
                matches!(&outcome, Outcome::Rejected { reason } if reason.contains("webhook")),
                "{outcome:?}"
            );
            assert!(
                registry.is_empty(),
                "a refused command changed the registry"
            );
        }
    }

    #[test]
    fn the_registry_refuses_a_level_inside_a_batch() {
        let mut registry = Registry::new();
        let outcome = registry.apply(Command::Batch(vec![Command::SetLevel {
            level: Level::V0_2,
        }]));
        assert!(
            matches!(&outcome, Outcome::Batch(outcomes)
                if matches!(outcomes.as_slice(), [Outcome::Rejected { .. }])),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_level_serializes_as_a_bare_number_and_defaults_to_v0_1() {
        assert_eq!(
            serde_json::to_string(&Level::V0_2).expect("serializable"),
            "2"
        );
        assert_eq!(Level::default(), Level::V0_1);
        assert_eq!(Levels::THIS_BINARY.to_string(), "1..=3");
    }
}
