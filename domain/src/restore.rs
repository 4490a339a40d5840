//! Checking a backup before it becomes the registry: [`RegistrySnapshot::validate_for_restore`].
//!
//! A backup is a document from outside the cluster: whoever holds it can edit it. A restored
//! registry must therefore hold only what registrations, actions and intents could have
//! produced, checked the same way: ids as the API draws them ([`ClockId::validate`],
//! [`QueueId::validate`]), names as a registration checks them ([`validate_name`]),
//! schedules as parsed (the serde form parses them), RabbitMQ queue names derived from name
//! and schedule, tick ids derived from their clock, and watermarks no further ahead than an
//! intent can reach. The API runs this check before it proposes a restore, to answer a 400
//! that names the clock and field; `Registry::apply` runs it again, because apply must be safe
//! whatever reaches the log.

use std::collections::{BTreeMap, BTreeSet};

use crate::clock::{
    Channel, Clock, ClockId, ClockStatus, IdError, NameError, QueueId, validate_name,
};
use crate::excerpt::Excerpt;
use crate::leases::{Lease, MAX_DEADLINE_SLACK_MS, MAX_MAX_DELIVERIES, MAX_VISIBILITY_MS, Receipt};
use crate::registry::{RegistrySnapshot, overlap_fits};
use crate::ticks::{MAX_LOOKAHEAD_MS, MAX_MANUAL_SEQUENCE, Tick, TickId};

/// Why a backup cannot be restored: the first thing found wrong, naming the clock (by id, or
/// by position when the id itself is wrong) and the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// A clock's id is not one a node could have drawn.
    #[error("clock #{index} of the backup: {source}")]
    ClockId {
        /// The clock's position in the backup's list, from 0.
        index: usize,
        /// What is wrong with the id.
        source: IdError,
    },
    /// A clock's name would have been refused at registration.
    #[error("clock {id}: {source}")]
    Name {
        /// The clock.
        id: ClockId,
        /// What is wrong with the name.
        source: NameError,
    },
    /// A clock is stored `PENDING`, which the registry never does.
    #[error(
        "clock {id}: status PENDING is never stored (a registration stores ACTIVE); a backup \
         holds only ACTIVE or PAUSED clocks"
    )]
    Pending {
        /// The clock.
        id: ClockId,
    },
    /// A RabbitMQ clock's queue, as the backup writes it, is not the one derived from its name
    /// and schedule ([`crate::WrittenClocks`]).
    #[error("clock {id}: channel.queue is {found}, but this clock's RabbitMQ queue is {expected}")]
    RabbitQueue {
        /// The clock.
        id: ClockId,
        /// The queue in the backup.
        found: Excerpt,
        /// The queue derived from the clock's name and schedule.
        expected: Excerpt,
    },
    /// An http clock's queue id is not one a node could have drawn.
    #[error("clock {id}: channel.queue_id: {source}")]
    QueueId {
        /// The clock.
        id: ClockId,
        /// What is wrong with the queue id.
        source: IdError,
    },
    /// Two clocks share an id.
    #[error("clock id {id} appears twice in the backup")]
    DuplicateId {
        /// The repeated id.
        id: ClockId,
    },
    /// Two clocks share a (name, schedule) pair.
    #[error("clocks {first} and {second} both have name {name} and schedule {schedule}")]
    DuplicatePair {
        /// The first clock with the pair.
        first: ClockId,
        /// The second clock with the pair.
        second: ClockId,
        /// The shared name.
        name: Excerpt,
        /// The shared schedule.
        schedule: String,
    },
    /// Two http clocks share a queue.
    #[error("clocks {first} and {second} have the same channel.queue_id")]
    SharedQueue {
        /// The first clock with the queue.
        first: ClockId,
        /// The second clock with the queue.
        second: ClockId,
    },
    /// The intent watermark is further ahead than any intent could have reached.
    #[error(
        "ledger.intended_through_ms is {found}, more than {MAX_LOOKAHEAD_MS} ms after this \
         cluster's clock ({now_ms}); a backup cannot have intended ticks further ahead than an \
         intent reaches, so the document is damaged or was edited"
    )]
    Watermark {
        /// The backup's watermark.
        found: u64,
        /// The restoring node's clock.
        now_ms: u64,
    },
    /// The manual tick counter is beyond what a cluster can reach.
    #[error(
        "ledger.manual_sequence is {found}, more than the maximum of {MAX_MANUAL_SEQUENCE} \
         manual ticks a cluster files; the document is damaged or was edited"
    )]
    ManualSequence {
        /// The backup's counter.
        found: u64,
    },
    /// A cursor names a clock the backup does not hold.
    #[error("ledger.cursors names clock {id}, which is not in the backup")]
    StrayCursor {
        /// The named clock.
        id: Excerpt,
    },
    /// A clock has overlap control its channel cannot take.
    #[error("clock {id}: {why}")]
    Overlap {
        /// The clock.
        id: ClockId,
        /// Why its channel cannot take it.
        why: String,
    },
    /// Skipped instants are carried for a clock that has no overlap control in the backup.
    #[error(
        "ledger.overlap_carry names clock {id}, which is not a clock of the backup with overlap \
         control"
    )]
    StrayCarry {
        /// The named clock.
        id: Excerpt,
    },
    /// A clock has no cursor, so it would never tick.
    #[error("clock {id}: it has no entry in ledger.cursors, so it would never tick")]
    NoCursor {
        /// The clock.
        id: ClockId,
    },
    /// A queue of the ledger belongs to no http clock of the backup.
    #[error("ledger.queues holds queue {queue}, which belongs to no http clock of the backup")]
    StrayQueue {
        /// The queue id.
        queue: Excerpt,
    },
    /// A leased tick's lease could not have been granted.
    #[error("ledger.leases: queue {queue}, receipt {receipt}: {why}")]
    Lease {
        /// The queue id.
        queue: Excerpt,
        /// The lease's receipt.
        receipt: Excerpt,
        /// What is wrong with it.
        why: String,
    },
    /// A filed tick does not match a clock of the backup.
    #[error("{place}: tick {tick}: {why}")]
    Tick {
        /// `ledger.outbox`, `ledger.queues` or `ledger.leases`.
        place: &'static str,
        /// The tick's id.
        tick: Excerpt,
        /// What is wrong with it.
        why: String,
    },
}

impl RegistrySnapshot {
    /// Checks that this backup holds only what this tickd could have produced, as seen by a
    /// cluster whose clock reads `now_ms`; see the module documentation. Runs in time linear
    /// in the backup's size.
    pub fn validate_for_restore(&self, now_ms: u64) -> Result<(), RestoreError> {
        let mut by_id: BTreeMap<&ClockId, &Clock> = BTreeMap::new();
        let mut by_pair: BTreeMap<(&str, &str), &ClockId> = BTreeMap::new();
        let mut by_queue: BTreeMap<&QueueId, &Clock> = BTreeMap::new();
        for (index, clock) in self.clocks.iter().enumerate() {
            validate_clock(index, clock)?;
            if by_id.insert(&clock.id, clock).is_some() {
                return Err(RestoreError::DuplicateId {
                    id: clock.id.clone(),
                });
            }
            let pair = (&*clock.name, clock.schedule.as_str());
            if let Some(first) = by_pair.insert(pair, &clock.id) {
                return Err(RestoreError::DuplicatePair {
                    first: first.clone(),
                    second: clock.id.clone(),
                    name: Excerpt::of(&clock.name),
                    schedule: clock.schedule.to_string(),
                });
            }
            if let Channel::Http { queue_id } = &clock.channel
                && let Some(first) = by_queue.insert(queue_id, clock)
            {
                return Err(RestoreError::SharedQueue {
                    first: first.id.clone(),
                    second: clock.id.clone(),
                });
            }
        }
        let cursors = &self.ledger.cursors;
        let ledger = &self.ledger.ticks;
        if ledger.intended_through_ms > now_ms.saturating_add(MAX_LOOKAHEAD_MS) {
            return Err(RestoreError::Watermark {
                found: ledger.intended_through_ms,
                now_ms,
            });
        }
        if ledger.manual_sequence > MAX_MANUAL_SEQUENCE {
            return Err(RestoreError::ManualSequence {
                found: ledger.manual_sequence,
            });
        }
        if let Some(stray) = cursors.keys().find(|id| !by_id.contains_key(id)) {
            return Err(RestoreError::StrayCursor {
                id: Excerpt::of(&stray.text()),
            });
        }
        if let Some((stray, _)) = ledger
            .overlap_carry
            .iter()
            .find(|(id, _)| by_id.get(id).is_none_or(|clock| clock.overlap.is_allow()))
        {
            return Err(RestoreError::StrayCarry {
                id: Excerpt::of(&stray.text()),
            });
        }
        if let Some(clock) = self
            .clocks
            .iter()
            .find(|clock| !cursors.contains_key(&clock.id))
        {
            return Err(RestoreError::NoCursor {
                id: clock.id.clone(),
            });
        }
        let mut filed_ids = BTreeSet::new();
        for tick in ledger.outbox.values() {
            let place = "ledger.outbox";
            let clock = by_id
                .get(&tick.clock)
                .ok_or_else(|| tick_error(place, tick, "its clock is not in the backup"))?;
            if matches!(clock.channel, Channel::Http { .. }) {
                return Err(tick_error(
                    place,
                    tick,
                    "its clock is an http clock, whose ticks wait in its queue",
                ));
            }
            validate_tick(place, tick, clock, ledger.manual_sequence, &mut filed_ids)?;
        }
        for (queue_id, ticks) in &ledger.queues {
            let clock = by_queue
                .get(queue_id)
                .ok_or_else(|| RestoreError::StrayQueue {
                    queue: Excerpt::of(&queue_id.text()),
                })?;
            for tick in ticks {
                validate_tick(
                    "ledger.queues",
                    tick,
                    clock,
                    ledger.manual_sequence,
                    &mut filed_ids,
                )?;
            }
        }
        for (queue_id, leases) in &ledger.leases {
            let clock = by_queue
                .get(queue_id)
                .ok_or_else(|| RestoreError::StrayQueue {
                    queue: Excerpt::of(&queue_id.text()),
                })?;
            for (receipt, lease) in leases {
                validate_lease(queue_id, receipt, lease, now_ms)?;
                validate_tick(
                    "ledger.leases",
                    &lease.tick,
                    clock,
                    ledger.manual_sequence,
                    &mut filed_ids,
                )?;
            }
        }
        Ok(())
    }
}

/// Checks one clock as a registration would have: id, name, stored status, an http channel's
/// queue id. (A RabbitMQ clock keeps no queue name; the backup's is checked as written, by
/// `WrittenClocks`.)
fn validate_clock(index: usize, clock: &Clock) -> Result<(), RestoreError> {
    clock
        .id
        .validate()
        .map_err(|source| RestoreError::ClockId { index, source })?;
    let id = || clock.id.clone();
    validate_name(&clock.name).map_err(|source| RestoreError::Name { id: id(), source })?;
    if clock.status == ClockStatus::Pending {
        return Err(RestoreError::Pending { id: id() });
    }
    overlap_fits(&clock.channel, clock.overlap)
        .map_err(|why| RestoreError::Overlap { id: id(), why })?;
    // A RabbitMQ clock's queue name is not kept; the backup's is checked as written
    // (`WrittenClocks`).
    if let Channel::Http { queue_id } = &clock.channel {
        queue_id
            .validate()
            .map_err(|source| RestoreError::QueueId { id: id(), source })?;
    }
    Ok(())
}

/// Checks that a filed tick is one its clock could have filed: same clock, name and schedule,
/// and the id derived from them (a manual tick's sequence number below the ledger's counter),
/// each id filed once.
fn validate_tick(
    place: &'static str,
    tick: &Tick,
    clock: &Clock,
    manual_sequence: u64,
    filed_ids: &mut BTreeSet<TickId>,
) -> Result<(), RestoreError> {
    if tick.clock != clock.id {
        return Err(tick_error(place, tick, "it is filed under another clock"));
    }
    if *tick.name != *clock.name || tick.schedule != clock.schedule {
        return Err(tick_error(
            place,
            tick,
            "its name or schedule differs from its clock's",
        ));
    }
    if tick.manual {
        let sequence = tick
            .id
            .as_str()
            .strip_prefix(&*clock.id.text())
            .and_then(|rest| rest.strip_prefix("-m"))
            .and_then(|digits| digits.parse::<u64>().ok())
            .filter(|sequence| TickId::manual(&clock.id, *sequence) == tick.id);
        match sequence {
            Some(sequence) if sequence < manual_sequence => {}
            Some(_) => {
                return Err(tick_error(
                    place,
                    tick,
                    "its sequence number is not below ledger.manual_sequence",
                ));
            }
            None => {
                return Err(tick_error(
                    place,
                    tick,
                    "a manual tick's id is <clock>-m<sequence>",
                ));
            }
        }
    } else if TickId::scheduled(&clock.id, tick.due_at_ms) != tick.id {
        return Err(tick_error(
            place,
            tick,
            "a scheduled tick's id is <clock>-<due_at_ms>",
        ));
    }
    // One tick id, one delivery: a copy would be delivered once per copy.
    if !filed_ids.insert(tick.id.clone()) {
        return Err(tick_error(place, tick, "it appears twice"));
    }
    Ok(())
}

/// Checks that a lease is one a lease command could have granted: a receipt of a drawn token,
/// at least one delivery and at most [`MAX_MAX_DELIVERIES`], and a deadline no further ahead
/// of `now_ms` than a lease reaches (a crafted deadline would hide its tick for years).
fn validate_lease(
    queue: &QueueId,
    receipt: &Receipt,
    lease: &Lease,
    now_ms: u64,
) -> Result<(), RestoreError> {
    let why = if !receipt.is_well_formed() {
        Some("a receipt is <32 hex digits>.<place in its lease>".to_owned())
    } else if !(1..=MAX_MAX_DELIVERIES).contains(&lease.deliveries) {
        Some(format!(
            "deliveries is {}, not 1 to {MAX_MAX_DELIVERIES}",
            lease.deliveries
        ))
    } else if lease.until_ms > now_ms.saturating_add(MAX_VISIBILITY_MS + MAX_DEADLINE_SLACK_MS) {
        Some(format!(
            "its deadline {} is further ahead than a lease reaches",
            lease.until_ms
        ))
    } else {
        None
    };
    match why {
        Some(why) => Err(RestoreError::Lease {
            queue: Excerpt::of(&queue.text()),
            receipt: Excerpt::of(receipt.as_str()),
            why,
        }),
        None => Ok(()),
    }
}

/// A [`RestoreError::Tick`].
fn tick_error(place: &'static str, tick: &Tick, why: &str) -> RestoreError {
    RestoreError::Tick {
        place,
        tick: Excerpt::of(tick.id.as_str()),
        why: why.to_owned(),
    }
}
