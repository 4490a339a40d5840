//! Leases of http-queue ticks: delivery at least once over HTTP (SPEC §2, lease and ack).
//!
//! A pop removes the ticks it returns, so a poller that dies before it has handled them loses
//! them. A lease hands ticks out without removing them: each leased tick stays in the
//! replicated state, hidden from other pollers until its lease's deadline, with a receipt that
//! an ack presents to remove it for good. A tick whose lease ran out is available again, to a
//! lease or a pop, with the same tick id; the next lease hands it out with `deliveries` + 1.
//!
//! # Time
//!
//! A lease's deadline (`until_ms`) is an instant written into the log by the proposing node,
//! and expiry is judged by the `now_ms` of the command that finds it: nothing expires between
//! commands, so a lease that runs out while the cluster has no leader is honoured by the first
//! command after one exists, and a failover neither ends a lease early nor loses a leased tick.
//! The proposer stamps the deadline from the latest the majority's time may be and judges
//! expiry by the earliest (`tickd_raft::cluster_clock`), so a lease lasts at least its
//! visibility time by the majority's clock, whichever node proposes what.
//!
//! # Receipts
//!
//! A receipt is the lease's token, 128 random bits drawn by the proposing node, and the tick's
//! place in the lease: `<token>.<n>`. It is the capability of the ack, as the queue id is the
//! pop's: unguessable, tied to one queue, and removes its tick once (an ack removes the lease
//! entry, and a tick handed out again gets a new receipt).
//!
//! # Retries
//!
//! The node that proposes a lease or an ack sends the same command again when it cannot tell
//! whether the first attempt committed (the leader it forwarded to died after committing, or
//! lost its office with the entry in flight), so either may be applied twice. Both are made
//! harmless, as a pop is by its replay record:
//!
//! - a lease whose token is in use hands out again what that token holds (the same receipts
//!   and delivery counts) and leases nothing more;
//! - an ack remembers each receipt it honoured until that receipt's deadline, and answers a
//!   later ack presenting it (the retry, or a client's own retry after a lost answer) as acked
//!   again instead of unknown. After the deadline the receipt is forgotten and is unknown.
//!
//! # Bounds
//!
//! - A lease hands out at most [`MAX_LEASE_TICKS`] ticks; a queue holds at most
//!   [`MAX_OPEN_LEASES`] leases whose deadline has not passed: a lease beyond that is refused,
//!   never queued.
//! - Leased ticks count against the queue limit (`http_queue_limit`): a tick filed into a
//!   queue at its limit drops the oldest waiting tick, never a leased one (its consumer holds
//!   it), so a queue whose ticks are all leased drops the newcomer.
//! - A tick handed out `max_deliveries` times whose last lease ran out is given up instead of
//!   handed out again, and counted: a consumer that never acks cannot keep a tick forever.
//! - An ack presents at most [`MAX_ACK_RECEIPTS`] receipts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::QueueId;
use crate::ticks::{Tick, TickLedger, TickMessage};

/// The most ticks one lease hands out.
pub const MAX_LEASE_TICKS: u32 = 100;

/// The ticks a lease hands out when it does not say.
pub const DEFAULT_LEASE_TICKS: u32 = 10;

/// The shortest visibility time a lease may ask for, in milliseconds.
pub const MIN_VISIBILITY_MS: u64 = 1_000;

/// The longest visibility time a lease may ask for, in milliseconds: an hour.
pub const MAX_VISIBILITY_MS: u64 = 3_600_000;

/// The visibility time of a lease that does not say, in milliseconds.
pub const DEFAULT_VISIBILITY_MS: u64 = 30_000;

/// How much later than `now_ms` + [`MAX_VISIBILITY_MS`] a lease's deadline may be: the
/// proposer stamps the deadline from the latest the majority's time may be, which is its
/// measurement's uncertainty (at most a few seconds) ahead of the earliest.
pub const MAX_DEADLINE_SLACK_MS: u64 = 60_000;

/// The most leases whose deadline has not passed one queue holds at once.
pub const MAX_OPEN_LEASES: usize = 100;

/// The most receipts one ack presents.
pub const MAX_ACK_RECEIPTS: usize = 100;

/// How many times a tick is handed out, by default, before it is given up (`max_deliveries`).
pub const DEFAULT_MAX_DELIVERIES: u32 = 10;

/// The highest `max_deliveries` a cluster may configure.
pub const MAX_MAX_DELIVERIES: u32 = 1_000;

/// The length of a lease token: 128 bits as hex digits, as the proposing node draws it.
pub const TOKEN_CHARS: usize = 32;

/// A leased tick's receipt: `<token>.<n>`, its lease's token and its place in the lease.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Receipt(String);

impl Receipt {
    /// The receipt of the `index`th tick of the lease `token`.
    fn of(token: &str, index: usize) -> Receipt {
        Receipt(format!("{token}.{index}"))
    }

    /// A receipt as an ack presents it. Any text is accepted: one that no lease issued is
    /// simply unknown.
    pub fn new(text: String) -> Receipt {
        Receipt(text)
    }

    /// The receipt's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether it has the form a lease issues: a token, a dot, and a place in the lease below
    /// [`MAX_LEASE_TICKS`].
    pub fn is_well_formed(&self) -> bool {
        self.0.split_once('.').is_some_and(|(token, place)| {
            is_token(token)
                && place.len() <= 3
                && place.bytes().all(|byte| byte.is_ascii_digit())
                && place
                    .parse::<u32>()
                    .is_ok_and(|place| place < MAX_LEASE_TICKS)
        })
    }

    /// The token of the lease that issued it.
    fn token(&self) -> &str {
        self.0.split_once('.').map_or(&self.0, |(token, _)| token)
    }
}

/// Whether `token` is one a node could have drawn: [`TOKEN_CHARS`] lower-case hex digits.
pub fn is_token(token: &str) -> bool {
    token.len() == TOKEN_CHARS
        && token
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

/// One leased tick, as the ledger keeps it under its receipt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The tick.
    pub tick: Tick,
    /// The lease's deadline: from this instant on (by a command's `now_ms`) the tick is
    /// available again.
    pub until_ms: u64,
    /// How many times the tick has been handed out, this lease included.
    pub deliveries: u32,
}

/// The leased ticks of one queue, by receipt.
pub type QueueLeases = BTreeMap<Receipt, Lease>;

/// The receipts of one queue that an ack honoured, each with its lease's deadline: until then
/// an ack presenting one again is answered as acked (see "Retries" above).
pub type AckedReceipts = BTreeMap<Receipt, u64>;

/// A tick as a lease hands it out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasedTick {
    /// The tick.
    pub tick: Tick,
    /// The receipt an ack presents.
    pub receipt: Receipt,
    /// How many times it has been handed out, this time included.
    pub deliveries: u32,
}

/// A leased tick as clients receive it: the tick message with its receipt and delivery count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeasedMessage {
    /// The tick (SPEC §5).
    #[serde(flatten)]
    pub tick: TickMessage,
    /// The receipt to ack it with.
    pub receipt: String,
    /// How many times it has been handed out, this time included: 1 the first time.
    pub deliveries: u32,
}

impl LeasedTick {
    /// The message delivered to clients.
    pub fn message(&self) -> LeasedMessage {
        LeasedMessage {
            tick: self.tick.message(),
            receipt: self.receipt.as_str().to_owned(),
            deliveries: self.deliveries,
        }
    }
}

/// Why an ack did not remove the tick of one receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AckRefusal {
    /// The receipt's lease ran out: the tick is (or will be) handed out again.
    Expired,
    /// No lease of this queue holds the receipt: never issued here, acked and past its
    /// deadline, or its tick was handed out again under a new receipt.
    Unknown,
    /// The same ack presented the receipt before.
    Repeated,
}

/// A receipt an ack did not honour, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedReceipt {
    /// The receipt as presented.
    pub receipt: Receipt,
    /// Why.
    pub reason: AckRefusal,
}

/// What a [`crate::Command::Lease`] asks for, as apply checks it.
#[derive(Debug)]
pub(crate) struct LeaseTerms {
    pub(crate) now_ms: u64,
    pub(crate) until_ms: u64,
    pub(crate) max: u32,
    pub(crate) token: String,
    pub(crate) max_deliveries: u32,
}

impl LeaseTerms {
    /// Whether a node could have proposed these terms: the API's bounds, with room for the
    /// proposer's clock uncertainty in the deadline. Apply checks them again because it must
    /// be safe whatever reaches the log.
    pub(crate) fn check(&self) -> Result<(), String> {
        let visibility = self.until_ms.checked_sub(self.now_ms);
        let longest = MAX_VISIBILITY_MS.saturating_add(MAX_DEADLINE_SLACK_MS);
        if !(1..=MAX_LEASE_TICKS).contains(&self.max) {
            Err(format!(
                "a lease hands out 1 to {MAX_LEASE_TICKS} ticks, not {}",
                self.max
            ))
        } else if !visibility.is_some_and(|ms| (MIN_VISIBILITY_MS..=longest).contains(&ms)) {
            Err(format!(
                "a lease's deadline must be {MIN_VISIBILITY_MS} to {longest} ms after its \
                 now_ms; {} is not",
                self.until_ms
            ))
        } else if !is_token(&self.token) {
            Err(format!(
                "a lease's token is {TOKEN_CHARS} lower-case hex digits, as a node draws it"
            ))
        } else if !(1..=MAX_MAX_DELIVERIES).contains(&self.max_deliveries) {
            Err(format!(
                "max_deliveries is 1 to {MAX_MAX_DELIVERIES}, not {}",
                self.max_deliveries
            ))
        } else {
            Ok(())
        }
    }
}

/// What one ack did to a queue.
#[derive(Debug, Default)]
pub(crate) struct Acking {
    /// The ticks it removed, in the order presented.
    pub(crate) removed: Vec<Tick>,
    /// Receipts an earlier ack honoured, answered as acked again.
    pub(crate) again: u64,
    /// The receipts refused, with their reasons, in the order presented.
    pub(crate) refused: Vec<RefusedReceipt>,
}

/// What one lease did to a queue.
#[derive(Debug, Default)]
pub(crate) struct Leasing {
    /// The ticks handed out, oldest first.
    pub(crate) handed: Vec<LeasedTick>,
    /// Ticks given up: their last lease ran out after `max_deliveries` deliveries.
    pub(crate) given_up: Vec<Tick>,
}

/// A tick available to a lease or a pop: waiting, or back from a lease that ran out.
pub(crate) struct Available {
    pub(crate) tick: Tick,
    /// How many times it was handed out before (0 for a tick never leased).
    pub(crate) deliveries: u32,
}

impl TickLedger {
    /// The leased ticks of `queue_id`, by receipt.
    pub fn leases_of(&self, queue_id: &QueueId) -> Option<&QueueLeases> {
        self.leases.get(queue_id)
    }

    /// How many ticks of `queue_id` are leased (their lease may have run out since the last
    /// command that looked).
    pub fn leased_in_queue(&self, queue_id: &QueueId) -> usize {
        self.leases.get(queue_id).map_or(0, BTreeMap::len)
    }

    /// How many leases of `queue_id` have not run out at `now_ms`.
    pub fn open_leases(&self, queue_id: &QueueId, now_ms: u64) -> usize {
        let Some(leases) = self.leases.get(queue_id) else {
            return 0;
        };
        let mut tokens: Vec<&str> = leases
            .iter()
            .filter(|(_, lease)| lease.until_ms > now_ms)
            .map(|(receipt, _)| receipt.token())
            .collect();
        tokens.dedup();
        tokens.len()
    }

    /// The ticks a lease of `queue_id` under `token` holds, in the order it handed them out:
    /// what a retry of that lease is answered (see "Retries" above). Empty when no lease uses
    /// the token.
    pub(crate) fn leased_under(&self, queue_id: &QueueId, token: &str) -> Vec<LeasedTick> {
        let Some(leases) = self.leases.get(queue_id) else {
            return Vec::new();
        };
        let prefix = format!("{token}.");
        let mut held: Vec<(u32, LeasedTick)> = leases
            .range(Receipt(prefix.clone())..)
            .take_while(|(receipt, _)| receipt.0.starts_with(&prefix))
            .map(|(receipt, lease)| {
                let place = receipt.0[prefix.len()..].parse().unwrap_or(u32::MAX);
                let tick = LeasedTick {
                    tick: lease.tick.clone(),
                    receipt: receipt.clone(),
                    deliveries: lease.deliveries,
                };
                (place, tick)
            })
            .collect();
        // Receipts sort as text ("t.10" before "t.2"); the lease's order is by place.
        held.sort_by_key(|(place, _)| *place);
        held.into_iter().map(|(_, tick)| tick).collect()
    }

    /// Takes at most `max` ticks of `queue_id` available at `now_ms`, oldest first: the due
    /// waiting ticks and those whose lease ran out. With `max_deliveries`, a tick whose lease
    /// ran out after that many deliveries is not available but given up: removed, and returned
    /// apart. Ticks not taken stay where they were, a run-out lease under its old receipt (no
    /// ack can present it any more: its deadline passed).
    pub(crate) fn take_available(
        &mut self,
        queue_id: &QueueId,
        now_ms: u64,
        max: usize,
        max_deliveries: Option<u32>,
    ) -> (Vec<Available>, Vec<Tick>) {
        self.forget_acked(queue_id, now_ms);
        let mut given_up = Vec::new();
        // The run-out leases, oldest tick first, each with its receipt.
        let mut expired: Vec<(Receipt, u64)> = Vec::new();
        if let Some(leases) = self.leases.get_mut(queue_id) {
            let run_out: Vec<Receipt> = leases
                .iter()
                .filter(|(_, lease)| lease.until_ms <= now_ms)
                .map(|(receipt, _)| receipt.clone())
                .collect();
            for receipt in run_out {
                let spent = leases
                    .get(&receipt)
                    .is_some_and(|lease| max_deliveries.is_some_and(|max| lease.deliveries >= max));
                if spent {
                    given_up.extend(leases.remove(&receipt).map(|lease| lease.tick));
                } else if let Some(lease) = leases.get(&receipt) {
                    expired.push((receipt, lease.tick.due_at_ms));
                }
            }
        }
        // The due waiting ticks, oldest first; those not taken return to the queue's front,
        // where they are all due before any tick still in it, so the queue keeps its order.
        let mut due: Vec<Tick> = match self.queues.get_mut(queue_id) {
            Some(queue) => {
                let (due, later): (Vec<Tick>, Vec<Tick>) =
                    queue.drain(..).partition(|tick| tick.due_at_ms <= now_ms);
                queue.extend(later);
                due
            }
            None => Vec::new(),
        };
        due.sort_by_key(|tick| tick.due_at_ms);
        expired.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        let mut available = Vec::new();
        let mut due = due.into_iter().peekable();
        let mut expired = expired.into_iter().peekable();
        while available.len() < max {
            let from_lease = match (due.peek(), expired.peek()) {
                (Some(waiting), Some((_, lease_due))) => *lease_due < waiting.due_at_ms,
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (None, None) => break,
            };
            let taken = if from_lease {
                expired
                    .next()
                    .and_then(|(receipt, _)| {
                        let leases = self.leases.get_mut(queue_id)?;
                        leases.remove(&receipt)
                    })
                    .map(|lease| Available {
                        tick: lease.tick,
                        deliveries: lease.deliveries,
                    })
            } else {
                due.next().map(|tick| Available {
                    tick,
                    deliveries: 0,
                })
            };
            available.extend(taken);
        }
        let untaken: Vec<Tick> = due.collect();
        if !untaken.is_empty() {
            let queue = self.queues.entry(queue_id.clone()).or_default();
            for tick in untaken.into_iter().rev() {
                queue.push_front(tick);
            }
        }
        // An empty queue, or an empty set of leases, is no entry (see `TickLedger::pop_due`).
        if self
            .queues
            .get(queue_id)
            .is_some_and(|queue| queue.is_empty())
        {
            self.queues.remove(queue_id);
        }
        if self.leases.get(queue_id).is_some_and(BTreeMap::is_empty) {
            self.leases.remove(queue_id);
        }
        (available, given_up)
    }

    /// Leases at most `max` ticks of `queue_id` available at `now_ms` until `until_ms`, under
    /// receipts of `token`; see the module documentation.
    pub(crate) fn lease(
        &mut self,
        queue_id: &QueueId,
        now_ms: u64,
        until_ms: u64,
        max: usize,
        token: &str,
        max_deliveries: u32,
    ) -> Leasing {
        let (available, given_up) =
            self.take_available(queue_id, now_ms, max, Some(max_deliveries));
        let mut handed = Vec::with_capacity(available.len());
        if !available.is_empty() {
            let leases = self.leases.entry(queue_id.clone()).or_default();
            for (index, taken) in available.into_iter().enumerate() {
                let receipt = Receipt::of(token, index);
                let deliveries = taken.deliveries.saturating_add(1);
                leases.insert(
                    receipt.clone(),
                    Lease {
                        tick: taken.tick.clone(),
                        until_ms,
                        deliveries,
                    },
                );
                handed.push(LeasedTick {
                    tick: taken.tick,
                    receipt,
                    deliveries,
                });
            }
        }
        Leasing { handed, given_up }
    }

    /// Removes the leased ticks of `receipts` whose lease has not run out at `now_ms`, and
    /// remembers each such receipt until its deadline; a receipt remembered so is honoured
    /// again, and every other is refused with its reason.
    pub(crate) fn ack(
        &mut self,
        queue_id: &QueueId,
        receipts: Vec<Receipt>,
        now_ms: u64,
    ) -> Acking {
        self.forget_acked(queue_id, now_ms);
        let mut acking = Acking::default();
        let mut honoured: Vec<(Receipt, u64)> = Vec::new();
        for (index, receipt) in receipts.iter().enumerate() {
            let lease = self
                .leases
                .get(queue_id)
                .and_then(|leases| leases.get(receipt));
            let acked_before = || {
                self.acked_receipts
                    .get(queue_id)
                    .is_some_and(|acked| acked.contains_key(receipt))
            };
            let reason = if receipts[..index].contains(receipt) {
                Some(AckRefusal::Repeated)
            } else {
                match lease {
                    None if acked_before() => {
                        acking.again = acking.again.saturating_add(1);
                        continue;
                    }
                    None => Some(AckRefusal::Unknown),
                    Some(lease) if lease.until_ms <= now_ms => Some(AckRefusal::Expired),
                    Some(_) => None,
                }
            };
            match reason {
                Some(reason) => acking.refused.push(RefusedReceipt {
                    receipt: receipt.clone(),
                    reason,
                }),
                None => {
                    if let Some(leases) = self.leases.get_mut(queue_id)
                        && let Some(lease) = leases.remove(receipt)
                    {
                        honoured.push((receipt.clone(), lease.until_ms));
                        acking.removed.push(lease.tick);
                    }
                }
            }
        }
        if self.leases.get(queue_id).is_some_and(BTreeMap::is_empty) {
            self.leases.remove(queue_id);
        }
        self.remember_acked(queue_id, honoured);
        let count = u64::try_from(acking.removed.len()).unwrap_or(u64::MAX);
        self.counters.acked = self.counters.acked.saturating_add(count);
        acking
    }

    /// Remembers `honoured` receipts of `queue_id` with their deadlines. A queue remembers at
    /// most its queue limit (`http_queue_limit`) of them, as many as it may hold leased ticks:
    /// past that, those whose deadline comes first are forgotten early.
    fn remember_acked(&mut self, queue_id: &QueueId, honoured: Vec<(Receipt, u64)>) {
        if honoured.is_empty() {
            return;
        }
        let limit = usize::try_from(self.queue_limit.max(1)).unwrap_or(usize::MAX);
        let acked = self.acked_receipts.entry(queue_id.clone()).or_default();
        acked.extend(honoured);
        if let Some(excess) = acked.len().checked_sub(limit).filter(|excess| *excess > 0) {
            let mut by_deadline: Vec<(u64, Receipt)> = acked
                .iter()
                .map(|(receipt, until_ms)| (*until_ms, receipt.clone()))
                .collect();
            by_deadline.select_nth_unstable(excess - 1);
            for (_, receipt) in &by_deadline[..excess] {
                acked.remove(receipt);
            }
        }
    }

    /// Forgets the acked receipts of `queue_id` whose deadline has passed at `now_ms`. Looks
    /// before it writes: every pop and lease passes here, and a write to the shared map copies
    /// the path to the entry even when nothing is forgotten.
    fn forget_acked(&mut self, queue_id: &QueueId, now_ms: u64) {
        let expired = self
            .acked_receipts
            .get(queue_id)
            .is_some_and(|acked| acked.values().any(|until_ms| *until_ms <= now_ms));
        if !expired {
            return;
        }
        if let Some(acked) = self.acked_receipts.get_mut(queue_id) {
            acked.retain(|_, until_ms| *until_ms > now_ms);
            if acked.is_empty() {
                self.acked_receipts.remove(queue_id);
            }
        }
    }

    /// Adds a lease's hand-outs (`again` of them redeliveries) and given-up ticks to the
    /// totals.
    pub(crate) fn count_leased(&mut self, handed: u64, again: u64, given_up: u64) {
        let counters = &mut self.counters;
        counters.leased = counters.leased.saturating_add(handed);
        counters.redelivered = counters.redelivered.saturating_add(again);
        counters.given_up = counters.given_up.saturating_add(given_up);
    }
}
