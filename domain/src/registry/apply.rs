//! The registry's one transition: [`Registry::apply`] and what each [`Command`] does to the
//! clocks, their indexes and the tick ledger.
//!
//! Separate from the store (the module root) because this is where determinism is at stake:
//! everything here must compute the same next state and the same [`Outcome`] on every replica,
//! at every cluster level a release still applies, and return after bounded work whatever the
//! command holds. The store only keeps the clocks and answers queries; the rules live here.

use std::collections::{HashMap, HashSet};

use super::{Command, Outcome, Registry};
use crate::clock::{Channel, Clock, ClockId, ClockStatus, QueueId, validate_name};
use crate::clocks_stamp::ClocksStamp;
use crate::leases::{LeaseTerms, Leasing, MAX_ACK_RECEIPTS, MAX_OPEN_LEASES, Receipt};
use crate::level::{Level, Levels};
use crate::overlap::{Overlap, SettledHead};
use crate::restore_document::RestoreDocument;
use crate::retries::MAX_REQUEST_BYTES;
use crate::schedule::Schedule;
use crate::ticks::{
    Cursor, Destination, Filed, Intent, MAX_LOOKAHEAD_MS, MAX_MANUAL_SEQUENCE, Tick, TickId,
    TickLedger,
};

impl Registry {
    /// Applies one command as a cluster at this binary's highest level does; see
    /// [`apply_at`](Self::apply_at).
    pub fn apply(&mut self, command: Command) -> Outcome {
        self.apply_at(Levels::THIS_BINARY.highest, command)
    }

    /// Applies one command by the rules of cluster level `level`: the only way the registry
    /// changes. Deterministic: the result depends only on the registry, the level and the
    /// command, so every replica of a cluster, whatever its release, reaches the same state.
    pub fn apply_at(&mut self, level: Level, command: Command) -> Outcome {
        match command {
            Command::Register {
                name,
                schedule,
                id,
                channel,
                max_clocks,
                now_ms,
                overlap,
            } => self.register(
                level, name, schedule, id, channel, max_clocks, now_ms, overlap,
            ),
            Command::Pause {
                id,
                now_ms,
                request,
            } => self.pause(level, &id, now_ms, request),
            Command::Resume {
                id,
                now_ms,
                request,
            } => self.resume(level, &id, now_ms, request),
            Command::Tick {
                id,
                now_ms,
                request,
            } => self.tick_now(level, &id, now_ms, request),
            Command::Intend(intent) => Outcome::Filed(self.intend(level, &intent)),
            Command::Confirm {
                ticks,
                published_ms,
                attempts,
                settled_ms,
            } => self.confirm(level, ticks, published_ms, attempts, settled_ms),
            Command::Pop {
                queue,
                now_ms,
                request,
            } => self.pop(level, &queue, now_ms, request),
            Command::Lease {
                queue,
                now_ms,
                until_ms,
                max,
                token,
                max_deliveries,
            } => {
                let terms = LeaseTerms {
                    now_ms,
                    until_ms,
                    max,
                    token,
                    max_deliveries,
                };
                self.lease(level, &queue, terms)
            }
            Command::Ack {
                queue,
                receipts,
                now_ms,
            } => self.ack(level, &queue, receipts, now_ms),
            Command::Touch { queues, now_ms } => {
                for queue in &queues {
                    if let Some(clock) = self.by_queue.find(&self.clocks, queue) {
                        let id = clock.id.clone();
                        self.note_activity(&id, now_ms);
                    }
                }
                Outcome::Touched
            }
            Command::Purge { clocks } => Outcome::Purged {
                clocks: self.purge(clocks),
            },
            Command::Restore {
                snapshot,
                now_ms,
                max_clocks,
            } => self.restore(level, snapshot, now_ms, max_clocks),
            Command::Batch(commands) => Outcome::Batch(
                commands
                    .into_iter()
                    .map(|command| match command {
                        Command::Batch(_) => Outcome::Rejected {
                            reason: "a batch of commands cannot contain another batch".into(),
                        },
                        command => self.apply_at(level, command),
                    })
                    .collect(),
            ),
            Command::SetLevel { .. } => Outcome::Rejected {
                reason: "the cluster level is set by its own log entry, never inside a batch"
                    .into(),
            },
        }
    }

    /// Removes and returns the ticks of `queue` due at `now_ms`, or those of the queue's last
    /// pop (or an earlier one it keeps) again when this is a retry of it; see
    /// [`Command::Pop`].
    fn pop(&mut self, level: Level, queue: &QueueId, now_ms: u64, request: String) -> Outcome {
        let Some(clock) = self.by_queue.find(&self.clocks, queue) else {
            return Outcome::NotFound;
        };
        let ledger = &mut self.ledger;
        let retried = ledger.is_retried_pop(queue, &request);
        let id = clock.id.clone();
        let overlap = clock.overlap;
        // A retry takes nothing new, so it decides nothing either.
        let skipped = if retried {
            0
        } else {
            ledger.settle_overlap(&id, queue, overlap, now_ms)
        };
        let max = ledger.overlap_take_limit(queue, overlap, now_ms, level.max_pop_ticks());
        let popped = ledger.pop_due(
            clock,
            queue,
            now_ms,
            request,
            max,
            level.earlier_pops_kept(),
        );
        self.note_skipped(&id, skipped);
        self.note_activity(&id, now_ms);
        if level.keeps_tick_stats() && !retried {
            for tick in &popped {
                self.note_delivered(tick, now_ms);
            }
        }
        Outcome::Popped(popped)
    }

    /// Hands out ticks of `queue` under a lease; see [`Command::Lease`].
    fn lease(&mut self, level: Level, queue: &QueueId, terms: LeaseTerms) -> Outcome {
        if !level.has_leases() {
            return Outcome::Rejected {
                reason: leases_need_level(level),
            };
        }
        if let Err(reason) = terms.check() {
            return Outcome::Rejected { reason };
        }
        let Some(clock) = self.by_queue.find(&self.clocks, queue) else {
            return Outcome::NotFound;
        };
        let id = clock.id.clone();
        let overlap = clock.overlap;
        let ledger = &mut self.ledger;
        // A retry of a lease that committed: the same ticks again, and nothing more.
        let held = ledger.leased_under(queue, &terms.token);
        if !held.is_empty() {
            return Outcome::Leased(held);
        }
        let open = ledger.open_leases(queue, terms.now_ms);
        if open >= MAX_OPEN_LEASES {
            return Outcome::LeasesFull {
                open: u64::try_from(open).unwrap_or(u64::MAX),
            };
        }
        let skipped = ledger.settle_overlap(&id, queue, overlap, terms.now_ms);
        let max = usize::try_from(terms.max).unwrap_or(usize::MAX);
        let max = ledger.overlap_take_limit(queue, overlap, terms.now_ms, max);
        let leasing = ledger.lease(
            queue,
            terms.now_ms,
            terms.until_ms,
            max,
            &terms.token,
            terms.max_deliveries,
        );
        self.note_skipped(&id, skipped);
        self.note_activity(&id, terms.now_ms);
        for tick in &leasing.handed {
            // A tick's first hand-out is its delivery, for its lateness; later ones count as
            // redeliveries.
            if tick.deliveries == 1 {
                self.note_delivered(&tick.tick, terms.now_ms);
            }
        }
        self.note_leased(&id, &leasing);
        Outcome::Leased(leasing.handed)
    }

    /// Removes acked leased ticks of `queue`; see [`Command::Ack`].
    fn ack(
        &mut self,
        level: Level,
        queue: &QueueId,
        receipts: Vec<Receipt>,
        now_ms: u64,
    ) -> Outcome {
        if !level.has_leases() {
            return Outcome::Rejected {
                reason: leases_need_level(level),
            };
        }
        if receipts.len() > MAX_ACK_RECEIPTS {
            return Outcome::Rejected {
                reason: format!(
                    "an ack presents at most {MAX_ACK_RECEIPTS} receipts, not {}",
                    receipts.len()
                ),
            };
        }
        let Some(clock) = self.by_queue.find(&self.clocks, queue) else {
            return Outcome::NotFound;
        };
        let id = clock.id.clone();
        // The instants that fell due while the acked ticks were held are decided first.
        let skipped = self
            .ledger
            .settle_overlap(&id, queue, clock.overlap, now_ms);
        self.note_skipped(&id, skipped);
        let acking = self.ledger.ack(queue, receipts, now_ms);
        self.note_activity(&id, now_ms);
        let removed = u64::try_from(acking.removed.len()).unwrap_or(u64::MAX);
        if removed > 0 {
            self.clocks
                .modify_cursor(&id, |cursor| cursor.stats.acked(removed));
        }
        Outcome::Acked {
            acked: removed.saturating_add(acking.again),
            refused: acking.refused,
        }
    }

    /// Counts instants of `clock` skipped by overlap control in its statistics.
    fn note_skipped(&mut self, clock: &ClockId, skipped: u64) {
        if skipped > 0 {
            self.clocks
                .modify_cursor(clock, |cursor| cursor.stats.skipped(skipped));
        }
    }

    /// Counts a lease's hand-outs, redeliveries and given-up ticks in its clock's statistics
    /// and the cluster's totals.
    fn note_leased(&mut self, clock: &ClockId, leasing: &Leasing) {
        let handed = u64::try_from(leasing.handed.len()).unwrap_or(u64::MAX);
        let again = leasing
            .handed
            .iter()
            .filter(|tick| tick.deliveries > 1)
            .count();
        let again = u64::try_from(again).unwrap_or(u64::MAX);
        let given_up = u64::try_from(leasing.given_up.len()).unwrap_or(u64::MAX);
        if handed == 0 && given_up == 0 {
            return;
        }
        self.ledger.count_leased(handed, again, given_up);
        self.clocks.modify_cursor(clock, |cursor| {
            cursor.stats.leased(again, given_up);
        });
    }

    /// Removes the ticks the publisher settled from the outbox; those it delivered count as
    /// delivered when they were published, and every tick's attempts are counted. Then the
    /// instants that fell due behind a settled tick of a clock with overlap control are
    /// decided ([`TickLedger::settle_outbox_overlap`]).
    fn confirm(
        &mut self,
        level: Level,
        ticks: Vec<(u64, TickId)>,
        published_ms: Vec<Option<u64>>,
        attempts: Vec<u32>,
        settled_ms: Vec<Option<u64>>,
    ) -> Outcome {
        let published =
            (level.keeps_tick_stats() && published_ms.len() == ticks.len()).then_some(published_ms);
        let attempts = (attempts.len() == ticks.len()).then_some(attempts);
        let settled_ms =
            (level.has_overlap() && settled_ms.len() == ticks.len()).then_some(settled_ms);
        let mut heads: HashMap<ClockId, SettledHead> = HashMap::new();
        let mut count = 0u64;
        for (index, key) in ticks.into_iter().enumerate() {
            let Some(tick) = self.ledger.settle(&key) else {
                continue;
            };
            count = count.saturating_add(1);
            let settled_at = settled_ms.as_ref().and_then(|all| all.get(index).copied());
            if let Some(settled_at_ms) = settled_at.flatten() {
                self.note_settled_head(&mut heads, &tick, settled_at_ms);
            }
            let Some(delivered_at) = published.as_ref().and_then(|all| all.get(index).copied())
            else {
                continue;
            };
            if let Some(delivered_at_ms) = delivered_at {
                self.note_delivered(&tick, delivered_at_ms);
            }
            let attempts = attempts
                .as_ref()
                .and_then(|all| all.get(index).copied())
                .unwrap_or(1);
            self.note_attempts(&tick, attempts, delivered_at.is_none());
        }
        for (clock, skipped) in self.ledger.settle_outbox_overlap(&heads) {
            self.note_skipped(&clock, skipped);
        }
        Outcome::Confirmed { count }
    }

    /// Notes `tick`, settled at `settled_ms`, as its clock's unacknowledged tick if the clock
    /// has overlap control. A leader never confirms two ticks of such a clock at once (it holds
    /// the next until the first has left the outbox); a confirmation that does is judged by the
    /// first.
    fn note_settled_head(
        &self,
        heads: &mut HashMap<ClockId, SettledHead>,
        tick: &Tick,
        settled_ms: u64,
    ) {
        let Some(clock) = self.clocks.get(&tick.clock) else {
            return;
        };
        if clock.overlap.is_allow() {
            return;
        }
        heads.entry(tick.clock.clone()).or_insert(SettledHead {
            overlap: clock.overlap,
            due_at_ms: tick.due_at_ms,
            settled_ms,
        });
    }

    /// Counts the `attempts` of a settled tick; one that nobody received was given up if its
    /// clock is a webhook clock (a RabbitMQ tick returned by the broker was not: its queue is
    /// gone, and the clock with it).
    fn note_attempts(&mut self, tick: &Tick, attempts: u32, undelivered: bool) {
        let given_up = undelivered
            && self
                .clocks
                .get(&tick.clock)
                .is_some_and(|clock| matches!(clock.channel, Channel::Webhook(_)));
        self.clocks.modify_cursor(&tick.clock, |cursor| {
            cursor.stats.attempted(attempts, given_up);
        });
    }

    /// Replaces a registry without clocks by a backed-up one; see [`Command::Restore`].
    fn restore(
        &mut self,
        level: Level,
        document: RestoreDocument,
        now_ms: u64,
        max_clocks: u64,
    ) -> Outcome {
        if !self.is_empty() {
            return Outcome::NotEmpty {
                clocks: u64::try_from(self.len()).unwrap_or(u64::MAX),
            };
        }
        let snapshot = match document.decode() {
            Ok(snapshot) => snapshot,
            Err(error) => {
                return Outcome::Rejected {
                    reason: format!("the restored document is not a registry: {error}"),
                };
            }
        };
        if u64::try_from(snapshot.clocks.len()).unwrap_or(u64::MAX) > max_clocks {
            return Outcome::LimitReached { max_clocks };
        }
        if !level.has_calendar_schedules()
            && snapshot
                .clocks
                .iter()
                .any(|clock| clock.schedule.is_calendar())
        {
            return Outcome::Rejected {
                reason: calendar_needs_level(level),
            };
        }
        if !level.has_webhooks()
            && snapshot
                .clocks
                .iter()
                .any(|clock| matches!(clock.channel, Channel::Webhook(_)))
        {
            return Outcome::Rejected {
                reason: webhooks_need_level(level),
            };
        }
        if !level.has_leases() && !snapshot.ledger.ticks.leases.is_empty() {
            return Outcome::Rejected {
                reason: leases_need_level(level),
            };
        }
        let overlap = snapshot
            .clocks
            .iter()
            .any(|clock| !clock.overlap.is_allow())
            || !snapshot.ledger.ticks.overlap_carry.is_empty();
        if overlap && !level.has_overlap() {
            return Outcome::Rejected {
                reason: overlap_needs_level(level),
            };
        }
        // The API checks the same before proposing; apply checks again, because it must be
        // safe whatever reaches the log.
        if level.bounds_commands()
            && let Err(error) = snapshot.validate_for_restore(now_ms)
        {
            return Outcome::Rejected {
                reason: error.to_string(),
            };
        }
        let mut restored = match Registry::try_from(snapshot) {
            Ok(restored) => restored,
            Err(error) => {
                return Outcome::Rejected {
                    reason: error.to_string(),
                };
            }
        };
        // Every restored clock counts as used now (see `Command::Restore`).
        restored.clocks.modify_each_cursor(|cursor| {
            cursor.last_activity_ms = cursor.last_activity_ms.max(now_ms);
        });
        let ledger = &mut restored.ledger;
        // The later watermark wins, manual tick ids stay unique, the counters add up and the
        // series stays this cluster's (see `TickLedger::join_history`).
        ledger.join_history(&mut self.ledger);
        if level.bounds_commands() {
            ledger.fit_restored_queues(self.ledger.queue_limit());
        }
        // The watermark moved: the restored clocks' next instants follow it.
        restored.reindex_all();
        let clocks = u64::try_from(restored.len()).unwrap_or(u64::MAX);
        *self = restored;
        Outcome::Restored { clocks }
    }

    /// Joins the clock of the pair, or creates it if the name is valid, the
    /// limit allows and the proposed id is free.
    #[allow(
        clippy::too_many_arguments,
        reason = "a registration's fields, and the level that decides how they apply"
    )]
    fn register(
        &mut self,
        level: Level,
        name: String,
        schedule: Schedule,
        id: ClockId,
        channel: Channel,
        max_clocks: u64,
        now_ms: u64,
        overlap: Overlap,
    ) -> Outcome {
        if let Err(err) = validate_name(&name) {
            return Outcome::Rejected {
                reason: err.to_string(),
            };
        }
        if schedule.is_calendar() && !level.has_calendar_schedules() {
            return Outcome::Rejected {
                reason: calendar_needs_level(level),
            };
        }
        if matches!(channel, Channel::Webhook(_)) && !level.has_webhooks() {
            return Outcome::Rejected {
                reason: webhooks_need_level(level),
            };
        }
        if let Err(reason) = check_overlap(level, &channel, overlap) {
            return Outcome::Rejected { reason };
        }
        if let Some(clock) = self.find(&name, &schedule) {
            let clock = clock.clone();
            self.note_activity(&clock.id, now_ms);
            // A retry of the registration that created the clock carries the id the proposing
            // node drew for it: it answers as that one did, so that a client whose first
            // answer was lost learns that it created the clock, not that another had (found
            // by the deterministic simulation: no order of single registrations explains it).
            let created = level.replays_requests() && clock.id == id;
            return Outcome::Registered { clock, created };
        }
        if u64::try_from(self.clocks.len()).unwrap_or(u64::MAX) >= max_clocks {
            return Outcome::LimitReached { max_clocks };
        }
        if self.clocks.contains(&id) {
            // Random ids should not collide; if they do, overwriting would
            // destroy another clock, so the proposer must retry with a new id.
            return Outcome::Rejected {
                reason: format!("clock id {id} is already in use by another clock"),
            };
        }
        if let Channel::Http { queue_id } = &channel
            && level.bounds_commands()
            && self.by_queue.find(&self.clocks, queue_id).is_some()
        {
            // Likewise for queue ids: two clocks on one queue would pop each other's ticks.
            return Outcome::Rejected {
                reason: "the proposed queue id is already in use by another clock".into(),
            };
        }
        let clock = Clock {
            id,
            name: name.into_boxed_str(),
            schedule,
            status: ClockStatus::Active,
            channel,
            overlap,
        };
        self.insert(clock.clone(), Some(Cursor::starting(now_ms)));
        self.start_ticking(level, &clock, now_ms);
        Outcome::Registered {
            clock,
            created: true,
        }
    }

    /// Starts (or restarts) a clock's scheduled ticks after `now_ms`, once the caller has set
    /// its cursor to start there. Instants that the leader's intents already cover are filed
    /// at once, so the clock does not miss its first tick because the intent watermark was
    /// ahead of the registration.
    ///
    /// Only the last [`MAX_LOOKAHEAD_MS`] before the watermark can be covered (intents reach
    /// no further ahead), so a command whose `now_ms` lies far behind the watermark files at
    /// most that window's instants, not every instant since `now_ms`.
    fn start_ticking(&mut self, level: Level, clock: &Clock, now_ms: u64) {
        let through = self.ledger.intended_through_ms;
        let (from, limit) = if level.bounds_commands() {
            let from = now_ms.max(through.saturating_sub(MAX_LOOKAHEAD_MS));
            (from, self.ledger.queue_limit())
        } else {
            (now_ms, u64::MAX)
        };
        let covered: Vec<u64> = clock.schedule.instants_in(from, through).collect();
        let mut dropped = 0u64;
        for instant in covered {
            let tick = scheduled_tick(clock, instant);
            let lost = self.ledger.file(level, tick, destination(clock), limit);
            dropped = dropped.saturating_add(lost);
        }
        self.note_dropped(level, &clock.id, dropped, now_ms);
        // A clock starts ticking new or resumed from a pause: either way out of the index.
        self.reindex(&clock.id, None);
    }

    /// Counts ticks a command dropped from a clock's full http queue.
    fn note_dropped(&mut self, level: Level, clock: &ClockId, dropped: u64, at_ms: u64) {
        if !level.keeps_tick_stats() || dropped == 0 {
            return;
        }
        let missed = Filed {
            dropped,
            ..Filed::default()
        };
        self.note_missed(clock, &missed);
        self.ledger.note_missed_at(at_ms, &missed);
    }

    /// Adds to a clock's counts of late, coalesced and dropped ticks. Nothing to add leaves
    /// the record where it is (an intent notes every clock it visits, most with nothing).
    fn note_missed(&mut self, clock: &ClockId, missed: &Filed) {
        if missed.late == 0 && missed.coalesced == 0 && missed.dropped == 0 {
            return;
        }
        self.clocks.modify_cursor(clock, |cursor| {
            cursor
                .stats
                .missed(missed.late, missed.coalesced, missed.dropped);
        });
    }

    /// Records a delivered tick (handed to the broker, or popped at `delivered_at_ms`) in the
    /// series and in its clock's statistics.
    fn note_delivered(&mut self, tick: &Tick, delivered_at_ms: u64) {
        let delivery = self.ledger.note_delivered(tick, delivered_at_ms);
        self.clocks
            .modify_cursor(&tick.clock, |cursor| cursor.stats.delivered(delivery));
    }

    /// A consumer showed interest in the clock at `now_ms` (a registration, a poll): it is not
    /// abandoned.
    fn note_activity(&mut self, id: &ClockId, now_ms: u64) {
        self.clocks.modify_cursor(id, |cursor| {
            cursor.last_activity_ms = cursor.last_activity_ms.max(now_ms);
        });
    }

    /// What apply makes of the request id a manual tick, pause or resume of `clock` carries:
    /// ignored below level 3 (releases before it ignore the field), refused when longer than
    /// [`MAX_REQUEST_BYTES`], and recognised when the clock's latest requests carried it.
    fn request_of(
        &self,
        level: Level,
        clock: &ClockId,
        request: Option<String>,
        what: &str,
    ) -> Result<Request, Outcome> {
        match request.filter(|_| level.replays_requests()) {
            None => Ok(Request::Unnamed),
            Some(request) if request.len() > MAX_REQUEST_BYTES => Err(Outcome::Rejected {
                reason: format!("{what}'s request id is at most {MAX_REQUEST_BYTES} bytes"),
            }),
            Some(request) if self.ledger.is_retried(clock, &request) => Ok(Request::Retried),
            Some(request) => Ok(Request::Fresh(request)),
        }
    }

    /// Remembers a request that took effect on `clock`.
    fn remember(&mut self, clock: &ClockId, request: Request) {
        if let Request::Fresh(request) = request {
            self.ledger.remember_request(clock, request);
        }
    }

    /// The answer to a pause or resume applied again: the clock with the status the first
    /// application set, which is what that one answered. Nothing changes.
    fn answered_again(&self, id: &ClockId, status: ClockStatus) -> Outcome {
        self.clocks
            .get(id)
            .cloned()
            .map_or(Outcome::NotFound, |mut clock| {
                clock.status = status;
                Outcome::Updated(clock)
            })
    }

    fn pause(
        &mut self,
        level: Level,
        id: &ClockId,
        now_ms: u64,
        request: Option<String>,
    ) -> Outcome {
        let request = match self.request_of(level, id, request, "a pause") {
            Ok(Request::Retried) => return self.answered_again(id, ClockStatus::Paused),
            Ok(request) => request,
            Err(refused) => return refused,
        };
        let previous = self.due_key(id);
        let paused = self
            .clocks
            .modify(id, |record| *record.status = ClockStatus::Paused);
        let (Some(()), Some(clock)) = (paused, self.clocks.get(id).cloned()) else {
            return Outcome::NotFound;
        };
        self.stamp = ClocksStamp::fresh();
        self.reindex(id, previous);
        // Scheduled ticks filed ahead of their instant are withdrawn: none due after the
        // pause is delivered. Manual ticks stay.
        let queue = match &clock.channel {
            Channel::Http { queue_id } => Some(queue_id),
            Channel::Rabbit | Channel::Webhook(_) => None,
        };
        self.ledger.withdraw_scheduled(id, queue, now_ms);
        self.remember(id, request);
        Outcome::Updated(clock)
    }

    fn resume(
        &mut self,
        level: Level,
        id: &ClockId,
        now_ms: u64,
        request: Option<String>,
    ) -> Outcome {
        let request = match self.request_of(level, id, request, "a resume") {
            Ok(Request::Retried) => return self.answered_again(id, ClockStatus::Active),
            Ok(request) => request,
            Err(refused) => return refused,
        };
        // A resumed clock starts afresh after `now_ms` and keeps its statistics.
        let resumed = self.clocks.modify(id, |record| {
            let was_paused = *record.status == ClockStatus::Paused;
            *record.status = ClockStatus::Active;
            if was_paused {
                let cursor = record
                    .cursor
                    .get_or_insert_with(|| Cursor::starting(now_ms));
                cursor.ticks_from_ms = now_ms;
                cursor.last_activity_ms = now_ms;
            }
            was_paused
        });
        let (Some(was_paused), Some(clock)) = (resumed, self.clocks.get(id).cloned()) else {
            return Outcome::NotFound;
        };
        self.stamp = ClocksStamp::fresh();
        if was_paused {
            self.start_ticking(level, &clock, now_ms);
        }
        self.remember(id, request);
        Outcome::Updated(clock)
    }

    fn tick_now(
        &mut self,
        level: Level,
        id: &ClockId,
        now_ms: u64,
        request: Option<String>,
    ) -> Outcome {
        let Some(clock) = self.clocks.get(id).cloned() else {
            return Outcome::NotFound;
        };
        let request = match self.request_of(level, &clock.id, request, "a manual tick") {
            Ok(Request::Retried) => return Outcome::Updated(clock),
            Ok(request) => request,
            Err(refused) => return refused,
        };
        let bounded = level.bounds_commands();
        if bounded && self.ledger.manual_sequence >= MAX_MANUAL_SEQUENCE {
            return Outcome::Rejected {
                reason: format!(
                    "the cluster has filed its maximum of {MAX_MANUAL_SEQUENCE} manual ticks"
                ),
            };
        }
        // A rabbit clock's ticks wait in the outbox until the broker confirms them; nothing
        // drops the oldest there, so a burst of manual ticks while the broker is away is
        // refused at the same limit an http queue holds.
        let limit = if bounded {
            self.ledger.queue_limit()
        } else {
            u64::MAX
        };
        if bounded && let Destination::Outbox = destination(&clock) {
            let cap = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
            let waiting = self.ledger.manual_ticks_waiting(&clock.id, cap);
            if waiting >= cap {
                return Outcome::Rejected {
                    reason: format!(
                        "clock {} has {waiting} manual ticks waiting for the broker, the \
                         limit (`http_queue_limit`); tick it again once the broker has \
                         confirmed them",
                        clock.id
                    ),
                };
            }
        }
        let tick = Tick {
            id: TickId::manual(&clock.id, self.ledger.take_manual_sequence()),
            clock: clock.id.clone(),
            name: clock.name.to_string(),
            schedule: clock.schedule.clone(),
            due_at_ms: now_ms,
            manual: true,
            skipped: 0,
        };
        // Manual ticks obey the http queue limit like scheduled ones: a queue over it drops its
        // oldest tick, so a burst of manual ticks on a paused clock cannot grow it unbounded.
        let dropped = self.ledger.file(level, tick, destination(&clock), limit);
        self.note_dropped(level, &clock.id, dropped, now_ms);
        self.remember(&clock.id, request);
        Outcome::Updated(clock)
    }

    /// Files every scheduled tick of every active clock due up to the intent's end, within
    /// the intent's bounds ([`Intent::bounded`]). Only the clocks the due index holds at or
    /// before the intent's end are visited: the others have no instant in the window.
    fn intend(&mut self, level: Level, intent: &Intent) -> Filed {
        let due = self.due.due_through(intent.bounded().through_ms);
        self.intend_for(level, intent, &due)
    }

    /// Applies an intent to `clocks`, the clocks with ticks due in its window; every clock
    /// left out must have none.
    ///
    /// Visible to the module root for its tests: the due index oracle
    /// (`tests/due_index_oracle.rs`) hands it every active clock.
    pub(super) fn intend_for(
        &mut self,
        level: Level,
        intent: &Intent,
        clocks: &[ClockId],
    ) -> Filed {
        let intent = &intent.bounded();
        self.ledger.adopt_queue_limit(intent.queue_limit);
        let mut filed = Filed::default();
        if intent.through_ms <= self.ledger.intended_through_ms {
            return filed;
        }
        filed.visited = u64::try_from(clocks.len()).unwrap_or(u64::MAX);
        // Their keys before the watermark moves: filing changes neither a clock's status nor
        // its cursor, the watermark does.
        let previous: Vec<Option<u64>> = clocks.iter().map(|id| self.due_key(id)).collect();
        let keeps_stats = level.keeps_tick_stats();
        for id in clocks {
            let Some((clock, Some(cursor))) = self.clocks.with_cursor(id) else {
                continue;
            };
            if clock.status != ClockStatus::Active {
                continue;
            }
            let missed = file_due_ticks(level, clock, cursor, &mut self.ledger, intent);
            if keeps_stats {
                self.note_missed(id, &missed);
            }
            filed.ticks = filed.ticks.saturating_add(missed.ticks);
            filed.late = filed.late.saturating_add(missed.late);
            filed.coalesced = filed.coalesced.saturating_add(missed.coalesced);
            filed.dropped = filed.dropped.saturating_add(missed.dropped);
        }
        self.ledger.mark_intended_through(intent.through_ms);
        for (id, previous) in clocks.iter().zip(previous) {
            self.reindex(id, previous);
        }
        self.ledger.count_missed(&filed);
        let coalesced = self
            .ledger
            .coalesce_outbox(level, intent.coalesce_before_ms(level));
        let count = u64::try_from(coalesced.len()).unwrap_or(u64::MAX);
        filed.coalesced = filed.coalesced.saturating_add(count);
        if keeps_stats {
            let one = Filed {
                coalesced: 1,
                ..Filed::default()
            };
            for clock in &coalesced {
                self.note_missed(clock, &one);
            }
            self.ledger.note_missed_at(intent.now_ms, &filed);
        }
        filed
    }

    /// Removes the active clocks among `ids` and everything filed for them; unknown and
    /// paused clocks are kept. Returns the ids removed.
    ///
    /// The outbox is scanned once for the whole batch: the leader purges every clock whose
    /// queue expired in one command, and a pass per clock would cost clocks × outbox.
    fn purge(&mut self, ids: Vec<ClockId>) -> Vec<ClockId> {
        let mut purged = Vec::new();
        let mut queues = Vec::new();
        let mut schedules = Vec::new();
        for id in ids {
            let previous = self.due_key(&id);
            let Some(clock) = self.clocks.get(&id) else {
                continue;
            };
            if clock.status == ClockStatus::Paused {
                continue;
            }
            self.by_pair.remove(clock);
            if let Channel::Http { queue_id } = &clock.channel {
                self.by_queue.remove(queue_id, &id);
                queues.push(queue_id.clone());
            }
            if let Some(removed) = self.clocks.remove(&id) {
                schedules.push(removed.schedule);
                self.stamp = ClocksStamp::fresh();
            }
            self.reindex(&id, previous);
            purged.push(id);
        }
        let forgotten: HashSet<&ClockId> = purged.iter().collect();
        self.ledger.forget(&forgotten, &queues);
        // After the ticks: the last copy of a literal goes with the last thing that held it.
        for schedule in schedules {
            self.literals.release(schedule);
        }
        purged
    }
}

/// Files the ticks of one active clock that fall due in `intent`'s window, and says what it
/// filed: the ticks, those late, those coalesced into a later one, and those its full http
/// queue dropped.
/// A request id as apply takes it ([`Registry::request_of`]).
enum Request {
    /// No id (none sent, or the cluster below level 3): the command takes effect.
    Unnamed,
    /// An id not seen on the clock: the command takes effect and the id is remembered.
    Fresh(String),
    /// An id the clock's latest requests carried: the command was applied, and changes nothing.
    Retried,
}

fn file_due_ticks(
    level: Level,
    clock: &Clock,
    cursor: &Cursor,
    ledger: &mut TickLedger,
    intent: &Intent,
) -> Filed {
    let (instants, coalesced) = ledger.due_instants(&clock.schedule, cursor, intent);
    let mut filed = Filed {
        coalesced,
        ..Filed::default()
    };
    for (index, instant) in instants.into_iter().enumerate() {
        filed.ticks = filed.ticks.saturating_add(1);
        if instant < intent.now_ms {
            filed.late = filed.late.saturating_add(1);
        }
        let mut tick = scheduled_tick(clock, instant);
        // The first instant is the one the coalesced ones were folded into, if any.
        if index == 0 && level.counts_skipped() {
            tick.skipped = u32::try_from(coalesced).unwrap_or(u32::MAX);
        }
        let dropped = ledger.file(level, tick, destination(clock), intent.queue_limit);
        filed.dropped = filed.dropped.saturating_add(dropped);
    }
    filed
}

/// Why a calendar schedule is refused at `level`.
pub fn calendar_needs_level(level: Level) -> String {
    needs_level("calendar schedules", level)
}

/// Why a lease or an ack is refused at `level`.
pub fn leases_need_level(level: Level) -> String {
    needs_level("leases", level)
}

/// Why overlap control is refused at `level`.
pub fn overlap_needs_level(level: Level) -> String {
    needs_level("overlap control", level)
}

/// Whether a new clock of `channel` may have `overlap` at `level`: a cluster whose every
/// replica applies overlap control, and a channel that takes it ([`overlap_fits`]).
fn check_overlap(level: Level, channel: &Channel, overlap: Overlap) -> Result<(), String> {
    if overlap.is_allow() {
        return Ok(());
    }
    if !level.has_overlap() {
        return Err(overlap_needs_level(level));
    }
    overlap_fits(channel, overlap)
}

/// Whether a clock of `channel` can have `overlap`: overlap control needs an acknowledgement
/// of each tick (an http queue's ack or its pop, a webhook receiver's 2xx), which RabbitMQ's
/// channel does not report.
pub fn overlap_fits(channel: &Channel, overlap: Overlap) -> Result<(), String> {
    match channel {
        _ if overlap.is_allow() => Ok(()),
        Channel::Http { .. } | Channel::Webhook(_) => Ok(()),
        Channel::Rabbit => Err(format!(
            "overlap {overlap} needs a channel whose consumer acknowledges each tick: an http \
             queue (its lease and ack, or its pop) or a webhook (its receiver's 2xx); \
             RabbitMQ's channel does not say when a consumer is done; register with \
             \"channel\": {{\"type\": \"http\"}} or without \"overlap\""
        )),
    }
}

/// Why a webhook clock is refused at `level`.
pub fn webhooks_need_level(level: Level) -> String {
    needs_level("webhook clocks", level)
}

fn needs_level(what: &str, level: Level) -> String {
    format!(
        "{what} need cluster level {} (this cluster runs at level {level}): every node must \
         run a release that has them; finish the upgrade, or wait a few seconds if the cluster \
         has just formed",
        Level::V0_3
    )
}

/// The scheduled tick of `clock` at `instant_ms`.
fn scheduled_tick(clock: &Clock, instant_ms: u64) -> Tick {
    Tick::scheduled(&clock.id, &clock.name, &clock.schedule, instant_ms)
}

/// Where a clock's ticks are filed.
fn destination(clock: &Clock) -> Destination<'_> {
    match &clock.channel {
        Channel::Rabbit | Channel::Webhook(_) => Destination::Outbox,
        Channel::Http { queue_id } => Destination::Queue(queue_id),
    }
}
