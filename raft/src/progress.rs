//! Whether replication progresses: a follower that cannot keep up, a leader that cannot commit.
//!
//! openraft retries a failing append for ever and says so only in its own log lines. An entry
//! that no follower could take once stopped every commit after it while every node's health
//! said UP (the second hostile probe's N1). The leader now watches its own metrics: a follower
//! whose matched index stays behind the log's end without moving for [`STALL_AFTER`] is
//! *stalled* (a metric, a warning, the cluster status), and a leader whose applied index stays
//! behind its log's end without moving for as long, or that no quorum has answered for as long,
//! *cannot commit*, which turns its health DOWN so that a load balancer, an orchestrator or an
//! alert on `/mgmt/health` sees it.
//!
//! The judgement ([`Tracker::observe`]) is a pure function of the metrics and the time, tested
//! with scripted inputs; [`run`] only feeds it.

use std::collections::BTreeMap;
use std::time::Duration;

use metrics::gauge;
use openraft::ServerState;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{NodeAddr, NodeId, Raft, Replica, telemetry};

/// How long a follower's match, or the leader's commit, may stay behind the log's end without
/// moving before it is reported. A follower writing a 32 MiB restore on a slow disk takes a
/// few seconds ([`crate::append_flight::FLIGHT_CEILING`] bounds one attempt at 30 s); ten
/// seconds without any progress is past anything a healthy cluster shows.
pub const STALL_AFTER: Duration = Duration::from_secs(10);

/// How often the progress is judged again when no metric changes (a stuck cluster changes
/// none).
const JUDGE_EVERY: Duration = Duration::from_secs(1);

/// What the leader knows of replication's progress; empty on a node that does not lead.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicationProgress {
    /// Followers whose match has not moved for at least [`STALL_AFTER`] while behind, and for
    /// how long.
    pub stalled_followers: BTreeMap<NodeId, Duration>,
    /// How long this leader has committed nothing while entries wait, once that is at least
    /// [`STALL_AFTER`].
    pub commit_stalled: Option<Duration>,
}

/// Since when one index has stayed where it is while behind.
#[derive(Clone, Copy, Debug)]
struct Stuck {
    index: Option<u64>,
    since: Instant,
}

impl Stuck {
    /// Follows `index` behind `end`: `None` when it has caught up, else since when it stopped.
    fn follow(
        before: Option<Stuck>,
        index: Option<u64>,
        end: Option<u64>,
        now: Instant,
    ) -> Option<Stuck> {
        if index >= end {
            return None;
        }
        Some(match before {
            Some(stuck) if stuck.index == index => stuck,
            _ => Stuck { index, since: now },
        })
    }

    /// How long it has been stuck, once that is at least [`STALL_AFTER`].
    fn stalled(&self, now: Instant) -> Option<Duration> {
        let stuck = now.saturating_duration_since(self.since);
        (stuck >= STALL_AFTER).then_some(stuck)
    }
}

/// The leader's memory of where its indexes stood.
#[derive(Debug, Default)]
pub struct Tracker {
    commit: Option<Stuck>,
    followers: BTreeMap<NodeId, Stuck>,
}

impl Tracker {
    /// Judges the progress shown by `metrics` at `now`.
    pub fn observe(
        &mut self,
        metrics: &openraft::RaftMetrics<NodeId, NodeAddr>,
        now: Instant,
    ) -> ReplicationProgress {
        let (ServerState::Leader, Some(replication)) = (metrics.state, &metrics.replication) else {
            *self = Self::default();
            return ReplicationProgress::default();
        };
        let unacknowledged = metrics
            .millis_since_quorum_ack
            .map(Duration::from_millis)
            .filter(|unacknowledged| *unacknowledged >= STALL_AFTER);
        let end = metrics.last_log_index;
        let applied = metrics.last_applied.map(|log_id| log_id.index);
        self.commit = Stuck::follow(self.commit, applied, end, now);
        let mut followers = BTreeMap::new();
        for (id, matched) in replication {
            if *id == metrics.id {
                continue;
            }
            let matched = matched.map(|log_id| log_id.index);
            if let Some(stuck) = Stuck::follow(self.followers.get(id).copied(), matched, end, now) {
                followers.insert(*id, stuck);
            }
        }
        self.followers = followers;
        ReplicationProgress {
            stalled_followers: self
                .followers
                .iter()
                .filter_map(|(id, stuck)| stuck.stalled(now).map(|stuck| (*id, stuck)))
                .collect(),
            // A leader that no quorum has answered for as long commits nothing either, even
            // if it proposes nothing (a leader cut off from every follower).
            commit_stalled: self
                .commit
                .and_then(|stuck| stuck.stalled(now))
                .max(unacknowledged),
        }
    }
}

/// The latest judgement, shared by the monitor and its readers (health, cluster status).
#[derive(Clone, Debug)]
pub struct ProgressCell {
    latest: watch::Sender<ReplicationProgress>,
}

impl Default for ProgressCell {
    fn default() -> Self {
        Self {
            latest: watch::Sender::new(ReplicationProgress::default()),
        }
    }
}

impl ProgressCell {
    /// The latest judgement.
    pub fn get(&self) -> ReplicationProgress {
        self.latest.borrow().clone()
    }

    fn set(&self, progress: ReplicationProgress) {
        self.latest.send_if_modified(|latest| {
            let changed = *latest != progress;
            *latest = progress;
            changed
        });
    }
}

/// Judges the replica's progress on every metrics change and every second, until `stop`
/// turns true or Raft shuts down; warns once when a follower stalls or the commit stops, and
/// once more when it moves again.
pub async fn run(replica: Replica, mut stop: watch::Receiver<bool>) {
    let raft: Raft = replica.raft().clone();
    let cell = replica.progress_cell().clone();
    let mut metrics = raft.metrics();
    let mut tracker = Tracker::default();
    let mut every = tokio::time::interval(JUDGE_EVERY);
    loop {
        let judged = tracker.observe(&metrics.borrow_and_update(), Instant::now());
        report_changes(&cell.get(), &judged);
        cell.set(judged);
        let core_stopped = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            changed = metrics.changed() => changed.is_err(),
            _ = every.tick() => false,
        };
        if core_stopped {
            return crate::failure::idle_until_stop(&mut stop).await;
        }
    }
}

/// Logs and records what changed between two judgements.
fn report_changes(before: &ReplicationProgress, now: &ReplicationProgress) {
    for (peer, stuck) in &now.stalled_followers {
        if !before.stalled_followers.contains_key(peer) {
            tracing::warn!(
                peer,
                stuck_ms = stuck.as_millis() as u64,
                "follower {peer} has taken no entry for {} s while entries wait: it cannot keep \
                 up (a slow or full disk, a cut link, an entry it cannot take); see \
                 tickd_raft_append_seconds and its own log",
                stuck.as_secs()
            );
            gauge!(telemetry::FOLLOWER_STALLED, "peer" => peer.to_string()).set(1.0);
        }
    }
    for peer in before.stalled_followers.keys() {
        if !now.stalled_followers.contains_key(peer) {
            tracing::info!(peer, "follower {peer} takes entries again");
            gauge!(telemetry::FOLLOWER_STALLED, "peer" => peer.to_string()).set(0.0);
        }
    }
    match (before.commit_stalled, now.commit_stalled) {
        (None, Some(stuck)) => {
            tracing::error!(
                stuck_ms = stuck.as_millis() as u64,
                "this leader has committed nothing for {} s while entries wait; health is DOWN \
                 until a majority takes them",
                stuck.as_secs()
            );
            gauge!(telemetry::COMMIT_STALLED).set(1.0);
        }
        (Some(_), None) => {
            tracing::info!("this leader commits again; health is UP");
            gauge!(telemetry::COMMIT_STALLED).set(0.0);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use openraft::{CommittedLeaderId, LogId, RaftMetrics, StoredMembership};

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn log_id(index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(1, 1), index))
    }

    /// A leader's metrics: its log ends at `end`, it applied `applied`, node 2 matched
    /// `second` and node 3 `third`.
    fn leader(end: u64, applied: u64, second: u64, third: u64) -> RaftMetrics<NodeId, NodeAddr> {
        let mut metrics = RaftMetrics::new_initial(1);
        metrics.state = ServerState::Leader;
        metrics.last_log_index = Some(end);
        metrics.last_applied = log_id(applied);
        metrics.membership_config = Arc::new(StoredMembership::default());
        metrics.replication = Some(
            [(1, log_id(end)), (2, log_id(second)), (3, log_id(third))]
                .into_iter()
                .collect(),
        );
        metrics
    }

    #[test]
    fn a_follower_behind_and_still_is_stalled_after_the_bound_and_one_moving_is_not() {
        let mut tracker = Tracker::default();
        let start = Instant::now();
        // Node 2 is stuck at 10; node 3 moves every second; the commit follows node 3.
        for second in 0..=10u64 {
            let end = 20 + second;
            let judged = tracker.observe(
                &leader(end, end - 1, 10, end - 1),
                start + SECOND * second as u32,
            );
            if second < 10 {
                assert_eq!(judged, ReplicationProgress::default(), "at {second} s");
            } else {
                assert_eq!(
                    judged.stalled_followers,
                    BTreeMap::from([(2, STALL_AFTER)]),
                    "node 2, and only it, after 10 s"
                );
                assert_eq!(judged.commit_stalled, None);
            }
        }
        // Node 2 takes one entry: no longer stalled.
        let judged = tracker.observe(&leader(31, 30, 11, 30), start + SECOND * 11);
        assert!(judged.stalled_followers.is_empty());
    }

    #[test]
    fn a_leader_whose_commit_stays_behind_is_reported_and_one_caught_up_is_not() {
        let mut tracker = Tracker::default();
        let start = Instant::now();
        // Both followers stuck at 5, the log growing: nothing commits.
        let mut judged = ReplicationProgress::default();
        for second in 0..=10u32 {
            judged = tracker.observe(
                &leader(6 + u64::from(second), 5, 5, 5),
                start + SECOND * second,
            );
        }
        assert_eq!(judged.commit_stalled, Some(STALL_AFTER));
        assert_eq!(judged.stalled_followers.len(), 2);
        // An idle leader, everything applied and matched, is never stalled however long.
        let mut idle = Tracker::default();
        for second in 0..=30u32 {
            let judged = idle.observe(&leader(5, 5, 5, 5), start + SECOND * second);
            assert_eq!(judged, ReplicationProgress::default());
        }
    }

    #[test]
    fn a_leader_no_quorum_has_answered_for_the_bound_cannot_commit() {
        let mut tracker = Tracker::default();
        let mut cut_off = leader(5, 5, 5, 5);
        cut_off.millis_since_quorum_ack = Some(9_999);
        assert_eq!(
            tracker.observe(&cut_off, Instant::now()).commit_stalled,
            None
        );
        cut_off.millis_since_quorum_ack = Some(10_000);
        assert_eq!(
            tracker.observe(&cut_off, Instant::now()).commit_stalled,
            Some(STALL_AFTER)
        );
    }

    #[test]
    fn a_node_that_does_not_lead_reports_nothing_and_forgets() {
        let mut tracker = Tracker::default();
        let start = Instant::now();
        tracker.observe(&leader(10, 5, 5, 5), start);
        let mut follower = leader(10, 5, 5, 5);
        follower.state = ServerState::Follower;
        assert_eq!(
            tracker.observe(&follower, start + SECOND * 20),
            ReplicationProgress::default()
        );
        // Leading again: the clock starts anew.
        let judged = tracker.observe(&leader(10, 5, 5, 5), start + SECOND * 21);
        assert_eq!(judged, ReplicationProgress::default());
    }
}
