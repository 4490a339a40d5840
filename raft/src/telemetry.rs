//! The consensus layer's metrics: this node's Raft role and progress, writes forwarded to the
//! leader, and the replicated state's size.
//!
//! openraft publishes its view of the node on a watch channel ([`Raft::metrics`]); [`watch`]
//! follows it and mirrors it into gauges, and counts each new leader it sees. The replicated
//! state (clocks by status, outbox depth) is measured by [`StateGauges`] when a scrape asks,
//! not on every applied entry, and the clocks are counted again only when they changed.
//! Everything is recorded through the `metrics` facade; the binary chooses the recorder and
//! calls [`describe`] once, which also registers the metrics that would otherwise appear only
//! at their first event.

use std::sync::Mutex;
use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use openraft::ServerState;
use tickd_domain::{ClockStatus, ClocksStamp};
use tokio::sync::watch as channel;

use crate::{NodeId, Raft, StateHandle};

/// The current Raft term as this node knows it.
pub const TERM: &str = "tickd_raft_term";
/// 1 while this node leads, else 0.
pub const IS_LEADER: &str = "tickd_raft_is_leader";
/// 1 while this node knows a leader (itself or another), else 0.
pub const HAS_LEADER: &str = "tickd_raft_has_leader";
/// Leaders this node has seen take office (a new term with a known leader).
pub const LEADER_CHANGES: &str = "tickd_raft_leader_changes_total";
/// Elections this node called before openraft's timer, because a majority of the voters had
/// not heard the leader for the vote lease (see `crate::leader_loss`).
pub const EARLY_ELECTIONS: &str = "tickd_raft_early_elections_total";
/// The index of the last entry in this node's log.
pub const LAST_LOG_INDEX: &str = "tickd_raft_last_log_index";
/// The index of the last entry applied to this node's state machine.
pub const LAST_APPLIED_INDEX: &str = "tickd_raft_last_applied_index";
/// The last index covered by this node's snapshot.
pub const SNAPSHOT_INDEX: &str = "tickd_raft_snapshot_index";
/// Requests this node sent to the leader's internal routes, by route and result.
pub const FORWARDED: &str = "tickd_forwarded_requests_total";
/// How long a forwarded request took, by route.
pub const FORWARD_DURATION: &str = "tickd_forward_duration_seconds";
/// How many client writes each proposal of this node carried (see `crate::batching`).
pub const WRITE_BATCH: &str = "tickd_raft_write_batch_commands";
/// A voter's clock minus this node's, as last measured, by peer.
pub const CLOCK_OFFSET: &str = "tickd_clock_offset_seconds";
/// The error bound of that measurement (half its round trip), by peer.
pub const CLOCK_OFFSET_UNCERTAINTY: &str = "tickd_clock_offset_uncertainty_seconds";
/// 0 while this node's clock is beyond `max_clock_offset_ms` of the majority's (it does not
/// campaign or fire ticks), else 1 (also before the first measurement, a second after start-up,
/// so that an alert on 0 has its series from the start).
pub const CLOCK_WITHIN_BOUND: &str = "tickd_clock_within_bound";
/// How long appends to a follower took, end to end (send, the follower's write and fsync,
/// the answer), by peer.
pub const APPEND_DURATION: &str = "tickd_raft_append_seconds";
/// Bytes of entries this leader sent to a follower in appends, by peer: replication's
/// traffic, and what a large entry costs.
pub const APPEND_BYTES: &str = "tickd_raft_append_bytes_total";
/// Appends that outlived openraft's heartbeat-long deadline and were waited on by its next
/// attempt instead of being sent again, by peer (see `crate::append_flight`).
pub const APPENDS_CARRIED: &str = "tickd_raft_appends_carried_total";
/// 1 while this leader sees a follower's match stay behind without moving for
/// `crate::progress::STALL_AFTER`, else 0, by peer.
pub const FOLLOWER_STALLED: &str = "tickd_raft_follower_stalled";
/// 1 while this leader has committed nothing for `crate::progress::STALL_AFTER` while entries
/// wait (its health is DOWN), else 0.
pub const COMMIT_STALLED: &str = "tickd_raft_commit_stalled";
/// Clocks in the registry, by status.
pub const CLOCKS: &str = "tickd_clocks";
/// RabbitMQ ticks committed and not yet confirmed by the broker.
pub const OUTBOX_TICKS: &str = "tickd_outbox_ticks";
/// Http-channel ticks waiting in their queues to be popped.
pub const HTTP_QUEUED_TICKS: &str = "tickd_http_queued_ticks";
/// Http-channel ticks held by leases, not acked yet.
pub const HTTP_LEASED_TICKS: &str = "tickd_http_leased_ticks";

/// The statuses a clock gauge is kept for, so that a status with no clock reads 0 instead
/// of vanishing.
const STATUSES: [ClockStatus; 3] = [
    ClockStatus::Pending,
    ClockStatus::Active,
    ClockStatus::Paused,
];

/// Registers the help text and unit of every consensus metric with the installed recorder,
/// and registers at zero those that only an event would create.
pub fn describe() {
    describe_gauge!(TERM, "The current Raft term as this node knows it");
    crate::unsupported::describe();
    describe_gauge!(
        CLOCK_OFFSET,
        Unit::Seconds,
        "A voter's wall clock minus this node's, as last measured (NTP-style, from the \
         round trip of a status request), by peer"
    );
    describe_gauge!(
        CLOCK_OFFSET_UNCERTAINTY,
        Unit::Seconds,
        "The error bound of tickd_clock_offset_seconds: half the measurement's round trip"
    );
    describe_gauge!(
        CLOCK_WITHIN_BOUND,
        "0 while this node's clock is beyond max_clock_offset_ms of the majority's (it \
         neither campaigns nor fires ticks), else 1"
    );
    gauge!(CLOCK_WITHIN_BOUND).set(1.0);
    describe_gauge!(IS_LEADER, "1 while this node is the Raft leader, else 0");
    describe_gauge!(
        HAS_LEADER,
        "1 while this node knows a leader (itself or another), else 0"
    );
    describe_counter!(
        LEADER_CHANGES,
        "Leaders this node has seen take office (a new term with a known leader)"
    );
    describe_counter!(
        EARLY_ELECTIONS,
        "Elections this node called before openraft's election timer, because a majority of \
         the voters had not heard the leader for the vote lease"
    );
    describe_gauge!(
        LAST_LOG_INDEX,
        "The index of the last entry in this node's log"
    );
    describe_gauge!(
        LAST_APPLIED_INDEX,
        "The index of the last entry applied to this node's state machine"
    );
    describe_gauge!(
        SNAPSHOT_INDEX,
        "The last log index covered by this node's snapshot"
    );
    describe_counter!(
        FORWARDED,
        "Requests forwarded to the leader's internal routes, by route and result (ok, \
         declined: the peer no longer leads, unreachable)"
    );
    describe_histogram!(
        FORWARD_DURATION,
        Unit::Seconds,
        "How long one request forwarded to the leader took, by route"
    );
    describe_histogram!(
        WRITE_BATCH,
        "How many client writes one proposal of this node carried (1 when the node is idle)"
    );
    describe_histogram!(
        APPEND_DURATION,
        Unit::Seconds,
        "How long one append to a follower took, end to end (send, the follower's write and \
         fsync, the answer), by peer"
    );
    describe_counter!(
        APPEND_BYTES,
        Unit::Bytes,
        "Bytes of appends (entries, encoded) this leader sent to a follower, by peer"
    );
    describe_counter!(
        APPENDS_CARRIED,
        "Appends that outlived openraft's heartbeat-long deadline and were waited on by its \
         next attempt instead of being sent again, by peer"
    );
    describe_gauge!(
        FOLLOWER_STALLED,
        "1 while this leader sees a follower take no entry for 10 s while entries wait, else \
         0, by peer"
    );
    describe_gauge!(
        COMMIT_STALLED,
        "1 while this leader has committed nothing for 10 s while entries wait (its health is \
         DOWN), else 0"
    );
    gauge!(COMMIT_STALLED).set(0.0);
    describe_gauge!(CLOCKS, "Clocks in the registry, by status");
    describe_gauge!(
        OUTBOX_TICKS,
        "RabbitMQ ticks committed and not yet confirmed by the broker"
    );
    describe_gauge!(
        HTTP_QUEUED_TICKS,
        "Http-channel ticks waiting in their queues to be popped (including ticks filed ahead)"
    );
    describe_gauge!(
        HTTP_LEASED_TICKS,
        "Http-channel ticks held by leases and not acked yet (their lease may have run out \
         since the queue was last leased or popped)"
    );
    // The exporter renders a metric only once it has been recorded. A fresh node, or one that
    // never saw a leader, must still export these at zero: an alert on their increase would
    // otherwise miss the first event, which creates the series instead of raising it. The
    // gauges are set by `watch` and `StateGauges` before any scrape; the forwarding metrics
    // are labelled by route and appear with the first forward.
    counter!(LEADER_CHANGES).increment(0);
    counter!(EARLY_ELECTIONS).increment(0);
    let _ = histogram!(WRITE_BATCH);
}

/// Mirrors openraft's view of this node into gauges until `stop` turns true or Raft shuts
/// down.
pub async fn watch(raft: Raft, mut stop: channel::Receiver<bool>) {
    let mut metrics = raft.metrics();
    let mut last_leader: Option<(u64, NodeId)> = None;
    loop {
        {
            let current = metrics.borrow_and_update();
            gauge!(TERM).set(current.current_term as f64);
            gauge!(IS_LEADER).set(flag(current.state == ServerState::Leader));
            gauge!(HAS_LEADER).set(flag(current.current_leader.is_some()));
            gauge!(LAST_LOG_INDEX).set(current.last_log_index.unwrap_or(0) as f64);
            let applied = current.last_applied.map_or(0, |log_id| log_id.index);
            gauge!(LAST_APPLIED_INDEX).set(applied as f64);
            let snapshot = current.snapshot.map_or(0, |log_id| log_id.index);
            gauge!(SNAPSHOT_INDEX).set(snapshot as f64);
            if let Some(leader) = current.current_leader {
                let seen = (current.current_term, leader);
                if last_leader != Some(seen) {
                    last_leader = Some(seen);
                    counter!(LEADER_CHANGES).increment(1);
                }
            }
        }
        let core_stopped = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            changed = metrics.changed() => changed.is_err(),
        };
        if core_stopped {
            return crate::failure::idle_until_stop(&mut stop).await;
        }
    }
}

/// Records a round of clock measurements (see `crate::clock_monitor`).
pub fn record_clock(
    offsets: &std::collections::BTreeMap<NodeId, crate::cluster_clock::PeerOffset>,
    verdict: &crate::cluster_clock::Verdict,
) {
    use crate::cluster_clock::Verdict;
    for (peer, offset) in offsets {
        let peer = peer.to_string();
        gauge!(CLOCK_OFFSET, "peer" => peer.clone()).set(offset.offset_ms as f64 / 1_000.0);
        gauge!(CLOCK_OFFSET_UNCERTAINTY, "peer" => peer)
            .set(offset.uncertainty_ms as f64 / 1_000.0);
    }
    match verdict {
        Verdict::Within => gauge!(CLOCK_WITHIN_BOUND).set(1.0),
        Verdict::Beyond { .. } => gauge!(CLOCK_WITHIN_BOUND).set(0.0),
        Verdict::Unmeasured => {}
    }
}

/// Measures the replicated state for a scrape: clocks by status, and ticks waiting for
/// delivery. It holds the state's read lock only to take an image (O(1)) and passes over the
/// clocks and queues without it: at a million clocks counting the clocks takes a tenth of a
/// second, for which every command would otherwise wait. The counts are kept with the
/// registry's clocks stamp and taken again only once a clock was added, removed, paused or
/// resumed, so that a node scraped every second by several Prometheuses, on a cluster whose
/// clocks stay registered, passes over them once.
#[derive(Default)]
pub struct StateGauges {
    /// The clocks by status ([`STATUSES`]' order), and the stamp of the clocks they count.
    by_status: Mutex<Option<(ClocksStamp, [u64; STATUSES.len()])>>,
}

impl StateGauges {
    /// Sets the gauges of the replicated state, as it is now.
    pub fn record(&self, state: &StateHandle) {
        let (stamp, image) = {
            let state = state.read();
            (state.registry.clocks_stamp(), state.registry.image())
        };
        let by_status = self.by_status(stamp, || {
            let mut by_status = [0u64; STATUSES.len()];
            for clock in image.clocks() {
                if let Some(slot) = STATUSES.iter().position(|status| *status == clock.status) {
                    by_status[slot] += 1;
                }
            }
            by_status
        });
        for (status, count) in STATUSES.iter().zip(by_status) {
            gauge!(CLOCKS, "status" => status.as_str()).set(count as f64);
        }
        let ledger = image.ledger();
        gauge!(OUTBOX_TICKS).set(ledger.outbox().len() as f64);
        let queued: usize = ledger.queues().values().map(|queue| queue.len()).sum();
        gauge!(HTTP_QUEUED_TICKS).set(queued as f64);
        let leased: usize = ledger.leases().values().map(|leases| leases.len()).sum();
        gauge!(HTTP_LEASED_TICKS).set(leased as f64);
    }

    /// The clocks by status: those counted last, if they were counted at `stamp`; else what
    /// `count` counts now, kept for the next scrape.
    fn by_status(
        &self,
        stamp: ClocksStamp,
        count: impl FnOnce() -> [u64; STATUSES.len()],
    ) -> [u64; STATUSES.len()] {
        // A scrape that panicked while counting left nothing half-written: the pair is set
        // whole, so a poisoned lock holds a sound value.
        let mut counted = self
            .by_status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *counted {
            Some((at, by_status)) if at == stamp => by_status,
            _ => {
                let by_status = count();
                *counted = Some((stamp, by_status));
                by_status
            }
        }
    }
}

/// Counts one request forwarded to the leader's internal `route`, and how long it took.
pub(crate) fn record_forwarded(route: &'static str, result: &'static str, took: Duration) {
    counter!(FORWARDED, "route" => route, "result" => result).increment(1);
    histogram!(FORWARD_DURATION, "route" => route).record(took.as_secs_f64());
}

/// Records one append to `peer` that was answered after `took`; `carried` when it outlived
/// openraft's deadline.
pub(crate) fn record_append(peer: NodeId, took: Duration, carried: bool) {
    let peer = peer.to_string();
    histogram!(APPEND_DURATION, "peer" => peer.clone()).record(took.as_secs_f64());
    if carried {
        counter!(APPENDS_CARRIED, "peer" => peer).increment(1);
    }
}

/// Records an append of `bytes` sent to `peer`.
pub(crate) fn record_append_sent(peer: NodeId, bytes: usize) {
    counter!(APPEND_BYTES, "peer" => peer.to_string()).increment(bytes as u64);
}

/// Records the number of client writes one proposal carries.
pub(crate) fn record_write_batch(commands: usize) {
    histogram!(WRITE_BATCH).record(commands as f64);
}

fn flag(on: bool) -> f64 {
    if on { 1.0 } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn clocks_are_counted_again_only_once_their_stamp_moved() {
        let gauges = StateGauges::default();
        let passes = Cell::new(0);
        let count = |active| {
            passes.set(passes.get() + 1);
            [0, active, 0]
        };
        let (first, second) = (ClocksStamp::default(), ClocksStamp::default());
        assert_eq!(gauges.by_status(first, || count(5)), [0, 5, 0]);
        assert_eq!(gauges.by_status(first, || count(6)), [0, 5, 0]);
        assert_eq!(passes.get(), 1, "the same clocks, scraped again");
        assert_eq!(gauges.by_status(second, || count(6)), [0, 6, 0]);
        assert_eq!(passes.get(), 2, "a clock added, paused or removed");
    }
}
