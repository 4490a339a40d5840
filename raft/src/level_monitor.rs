//! Raises the cluster level once every voter supports it (see [`tickd_domain::level`]).
//!
//! Every [`CHECK_EVERY`], the leader asks each voter which levels its binary supports (the
//! status route every node serves; a node that advertises none is v0.1.0, level 1). When the
//! lowest of the voters' highest levels is above the cluster's, it proposes
//! [`Command::SetLevel`] with it: from that entry on, the log may carry the kinds that level
//! introduced. An unreachable voter postpones the decision, because its binary is unknown.
//!
//! Nothing lowers the level on its own. A voter whose binary does not support the cluster's
//! level (one downgraded after the level was raised) is reported, by a warning and by the
//! cluster view; it halts on the first entry it cannot apply ([`crate::unsupported`]).

use std::time::Duration;

use futures::future::join_all;
use openraft::ServerState;
use tickd_domain::{Command, Level, Levels};
use tokio::sync::watch;
use tokio::time::{MissedTickBehavior, interval};

use crate::cluster_clock::PROBE_TIMEOUT;
use crate::{NodeId, Replica};

/// How often the leader compares the voters' levels with the cluster's.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The cluster level, as a gauge on every node.
pub const CLUSTER_LEVEL: &str = "tickd_cluster_level";

/// The zone database compiled into this node's binary, as a gauge of 1 labelled `version`.
pub const ZONE_DATABASE: &str = "tickd_zone_database_info";

/// Runs until `stop` turns true.
pub async fn run(replica: Replica, mut stop: watch::Receiver<bool>) {
    metrics::describe_gauge!(
        CLUSTER_LEVEL,
        "The cluster level this node has applied: which command kinds the log may carry"
    );
    metrics::describe_gauge!(
        ZONE_DATABASE,
        "The IANA zone database compiled into this node's binary (label version); calendar \
         schedules are computed with it"
    );
    metrics::gauge!(ZONE_DATABASE, "version" => tickd_domain::zone_database_version()).set(1.0);
    let mut checks = interval(CHECK_EVERY);
    checks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut reported: Option<Vec<(NodeId, Levels)>> = None;
    loop {
        tokio::select! {
            _ = checks.tick() => {}
            _ = stop.changed() => return,
        }
        let level = replica.state().read().cluster_level;
        metrics::gauge!(CLUSTER_LEVEL).set(f64::from(level.0));
        if replica.raft().metrics().borrow().state != ServerState::Leader {
            continue;
        }
        let Some(voters) = voters_levels(&replica).await else {
            continue;
        };
        match decide(level, &voters) {
            Decision::Raise(to) => raise(&replica, level, to).await,
            Decision::Keep => {}
            Decision::Behind(behind) => {
                if reported.as_ref() != Some(&behind) {
                    tracing::warn!(
                        %level,
                        voters = ?behind,
                        "voters run a binary that does not support the cluster level: each \
                         halts on the first entry it cannot apply; upgrade them"
                    );
                }
                reported = Some(behind);
                continue;
            }
        }
        reported = None;
    }
}

/// What the leader does about the cluster level.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Every voter supports this higher level.
    Raise(Level),
    /// The level is the highest every voter supports.
    Keep,
    /// These voters do not support the cluster's level.
    Behind(Vec<(NodeId, Levels)>),
}

fn decide(level: Level, voters: &[(NodeId, Levels)]) -> Decision {
    let behind: Vec<(NodeId, Levels)> = voters
        .iter()
        .filter(|(_, levels)| !levels.contains(level))
        .copied()
        .collect();
    if !behind.is_empty() {
        return Decision::Behind(behind);
    }
    let common = voters.iter().map(|(_, levels)| levels.highest).min();
    match common {
        Some(common) if common > level => Decision::Raise(common),
        _ => Decision::Keep,
    }
}

/// Every voter's supported levels, this node's included; `None` when one does not answer.
async fn voters_levels(replica: &Replica) -> Option<Vec<(NodeId, Levels)>> {
    let metrics = replica.raft().metrics().borrow().clone();
    let membership = metrics.membership_config.membership();
    let voters: Vec<NodeId> = membership.voter_ids().collect();
    let probes = membership
        .nodes()
        .filter(|(id, _)| voters.contains(id))
        .map(|(id, node)| async move {
            if *id == metrics.id {
                return Some((*id, Levels::THIS_BINARY));
            }
            let status = replica.peer_status(*id, node, PROBE_TIMEOUT).await.ok()?;
            Some((*id, status.supported_levels()))
        });
    join_all(probes).await.into_iter().collect()
}

async fn raise(replica: &Replica, from: Level, to: Level) {
    match replica
        .raft()
        .client_write(Command::SetLevel { level: to })
        .await
    {
        Ok(written) => tracing::info!(
            %from, %to, index = written.log_id.index,
            "cluster level raised: every voter supports it"
        ),
        Err(error) => {
            tracing::warn!(%from, %to, %error, "could not raise the cluster level; next check retries");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: Levels = Levels::UNADVERTISED;
    /// v0.2.0: before calendar schedules.
    const V2: Levels = Levels {
        lowest: Level::V0_1,
        highest: Level::V0_2,
    };
    const V3: Levels = Levels::THIS_BINARY;

    #[test]
    fn the_level_rises_to_what_every_voter_supports() {
        assert_eq!(
            decide(Level::V0_1, &[(1, V3), (2, V3), (3, V3)]),
            Decision::Raise(Level::V0_3)
        );
        // A voter of v0.2.0 holds the rise at 2.
        assert_eq!(
            decide(Level::V0_1, &[(1, V3), (2, V2), (3, V3)]),
            Decision::Raise(Level::V0_2)
        );
        assert_eq!(
            decide(Level::V0_2, &[(1, V3), (2, V3), (3, V3)]),
            Decision::Raise(Level::V0_3)
        );
        let future = Levels {
            lowest: Level::V0_1,
            highest: Level(4),
        };
        assert_eq!(
            decide(Level::V0_1, &[(1, future), (2, V3), (3, future)]),
            Decision::Raise(Level::V0_3)
        );
    }

    #[test]
    fn one_older_voter_holds_the_level() {
        assert_eq!(
            decide(Level::V0_1, &[(1, V3), (2, V1), (3, V3)]),
            Decision::Keep
        );
        assert_eq!(decide(Level::V0_2, &[(1, V3), (2, V2)]), Decision::Keep);
        assert_eq!(decide(Level::V0_3, &[(1, V3), (2, V3)]), Decision::Keep);
    }

    #[test]
    fn a_voter_below_the_cluster_level_is_reported_not_followed() {
        assert_eq!(
            decide(Level::V0_2, &[(1, V3), (2, V1), (3, V3)]),
            Decision::Behind(vec![(2, V1)])
        );
    }
}
