//! Campaigns as soon as a majority of the voters has lost the leader, instead of waiting out
//! openraft's election timer on top of the vote lease.
//!
//! openraft 0.9 calls an election once its vote lease (the maximum election timeout, 600 ms)
//! plus the node's own election timeout (300–600 ms) have passed since the leader was last
//! heard, and checks only on its tick, every 150 ms: 900–1 350 ms after a leader dies, nearly
//! all of a failover. The two parts do different jobs:
//!
//! * The vote lease keeps the engine's lease safe. A voter that accepted the leader's append
//!   refuses every other candidate for that long, so no new leader exists while the old one
//!   may still publish (its lease, 350 ms from a quorum's confirmation; see [`crate::timing`]).
//!   openraft enforces it where the vote is granted, whoever asks and whenever.
//! * The election timeout on top of it only spreads the followers' campaigns apart, so that
//!   two of them do not split the vote; and it makes a follower that was itself stalled (a
//!   paused process, a starved core) less likely to campaign against a live leader, which
//!   deposes it: the candidate's higher term reaches the leader with the next append.
//!
//! This module keeps the first and does the second's job another way. Once the leader has been
//! silent here for the vote lease plus a margin, plus [`STAGGER`] per rank of this follower
//! among the leader's followers (so that one follower campaigns first and wins before the next
//! would start), it asks the other voters how long they have not heard from a leader: a
//! pre-vote, which openraft 0.9 lacks. Only when a majority, itself included, has heard nothing
//! for longer than the vote lease — so that they will grant its vote — does it call the
//! election. A stalled follower hears that the leader is alive and keeps still.
//!
//! Nothing here decides who may lead: voters grant votes by openraft's rules, lease and log
//! included. Only when a campaign starts changes, and openraft's own timer stays the fallback
//! (a follower the others say is alone, a partition that leaves no majority silent). A node
//! whose clock is beyond the bound never campaigns here either ([`crate::clock_monitor`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use metrics::counter;
use openraft::ServerState;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, interval};

use crate::clock_monitor::{may_campaign, voters_and_peers};
use crate::network::LEADER_SILENCE_PATH;
use crate::timing::ELECTION_TIMEOUT_MAX_MS;
use crate::{NodeAddr, NodeId, Replica, telemetry};

/// openraft's vote lease: how long a voter refuses other candidates after an append of its
/// leader (openraft 0.9 sets it to the maximum election timeout).
const VOTE_LEASE: Duration = Duration::from_millis(ELECTION_TIMEOUT_MAX_MS);
/// How much longer than the vote lease this node waits before it asks: the other voters heard
/// the same heartbeat within a few milliseconds of it, and must be past their lease when they
/// answer.
const ASK_MARGIN: Duration = Duration::from_millis(50);
/// The extra wait per rank among the followers. The first follower's campaign takes a vote
/// round trip and one append to reach the others (a few milliseconds on a healthy network);
/// this leaves it that many times over before the next follower would ask.
pub const STAGGER: Duration = Duration::from_millis(150);
/// How often the leader's silence is checked: the granularity of the early campaign.
const CHECK_EVERY: Duration = Duration::from_millis(25);
/// How long a peer has to answer the pre-vote. One that does not counts as not silent.
const ASK_TIMEOUT: Duration = Duration::from_millis(150);
/// After a pre-vote that found no silent majority, the wait before asking again: a one-way
/// partition can keep one follower from hearing a leader the others hear for long.
const ASK_AGAIN_AFTER: Duration = Duration::from_millis(200);
/// After calling an election, the wait before this module may call another: openraft's
/// candidate retries on its own timer meanwhile.
const CAMPAIGN_AGAIN_AFTER: Duration = Duration::from_millis(2 * ELECTION_TIMEOUT_MAX_MS);

/// When this node last accepted an append from a leader. Shared by the Raft router, which
/// records it, and the watch below and the silence route, which read it.
#[derive(Clone, Debug)]
pub struct LeaderContact {
    origin: Instant,
    /// Milliseconds from `origin` to the last accepted append, plus one; 0 for never.
    last: Arc<AtomicU64>,
}

impl Default for LeaderContact {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            last: Arc::default(),
        }
    }
}

impl LeaderContact {
    /// Records that an append of the current leader was just accepted.
    pub fn heard(&self) {
        let since_origin = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last
            .fetch_max(since_origin.saturating_add(1), Ordering::Relaxed);
    }

    /// How long no leader has been heard, or `None` if none ever was since this process
    /// started.
    pub fn silence(&self) -> Option<Duration> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            last => {
                let heard_at = self.origin + Duration::from_millis(last - 1);
                Some(Instant::now().saturating_duration_since(heard_at))
            }
        }
    }
}

/// What a voter answers a pre-vote: whether it leads, and how long it has not heard a leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Silence {
    /// Whether the answering node leads: a live leader is never silent.
    pub leading: bool,
    /// Milliseconds since it last accepted a leader's append; `None` if it never did since it
    /// started.
    pub heard_ms_ago: Option<u64>,
}

impl Silence {
    /// This node's answer.
    pub fn of(replica: &Replica) -> Self {
        let leading = replica.raft().metrics().borrow().state == ServerState::Leader;
        let heard_ms_ago = replica
            .leader_contact()
            .silence()
            .map(|silence| u64::try_from(silence.as_millis()).unwrap_or(u64::MAX));
        Self {
            leading,
            heard_ms_ago,
        }
    }

    /// Whether a voter that answered this would grant a vote now: it does not lead and its
    /// vote lease is over.
    fn past_the_lease(self) -> bool {
        !self.leading
            && self
                .heard_ms_ago
                .is_none_or(|ago| Duration::from_millis(ago) > VOTE_LEASE)
    }
}

/// What this node knows, locally, when it considers an early campaign.
#[derive(Clone, Debug)]
struct Local {
    id: NodeId,
    state: ServerState,
    /// The leader it followed, if it knows one.
    leader: Option<NodeId>,
    /// Every voter, this node included if it is one, in id order.
    voters: Vec<NodeId>,
    /// Whether its clock lets it campaign ([`may_campaign`]).
    may_campaign: bool,
    /// How long it has not heard the leader.
    silence: Option<Duration>,
}

impl Local {
    /// How long the leader must have been silent before this node asks the others: the vote
    /// lease and its margin, plus [`STAGGER`] per follower of the leader ranked before this
    /// one. `None` when this node does not campaign early: it leads, campaigns already, is no
    /// voter, knows no leader, or may not lead by its clock.
    fn ask_after(&self) -> Option<Duration> {
        let leader = self.leader?;
        if self.state != ServerState::Follower || !self.may_campaign || leader == self.id {
            return None;
        }
        let rank = self
            .voters
            .iter()
            .filter(|voter| **voter != leader)
            .position(|voter| *voter == self.id)?;
        let rank = u32::try_from(rank).ok()?;
        Some(VOTE_LEASE + ASK_MARGIN + STAGGER.checked_mul(rank)?)
    }

    /// Whether the leader has been silent long enough for this node to ask.
    fn time_to_ask(&self) -> bool {
        match (self.ask_after(), self.silence) {
            (Some(after), Some(silence)) => silence >= after,
            // Never heard since start-up, with a leader known: openraft's own timer decides.
            _ => false,
        }
    }
}

/// Whether `silent_peers` other voters past their lease, with this node, are a majority of
/// `voters`.
fn majority_silent(voters: usize, silent_peers: usize) -> bool {
    silent_peers.saturating_add(1) > voters / 2
}

/// Runs until `stop` turns true.
pub async fn run(replica: Replica, mut stop: watch::Receiver<bool>) {
    let mut checks = interval(CHECK_EVERY);
    checks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut quiet_until = Instant::now();
    loop {
        tokio::select! {
            _ = checks.tick() => {}
            _ = stop.changed() => return,
        }
        if Instant::now() < quiet_until {
            continue;
        }
        let (before, peers) = observe(&replica);
        if !before.time_to_ask() {
            continue;
        }
        let voters = before.voters.len();
        let silent = silent_peers(&replica, peers, voters).await;
        // An append may have come in while the peers answered: the leader is back.
        let (still, _) = observe(&replica);
        if !majority_silent(voters, silent) || !still.time_to_ask() {
            quiet_until = Instant::now() + ASK_AGAIN_AFTER;
            continue;
        }
        quiet_until = Instant::now() + CAMPAIGN_AGAIN_AFTER;
        campaign(&replica, &still, silent).await;
    }
}

/// This node's side of the question, read now, and the other voters to ask.
fn observe(replica: &Replica) -> (Local, Vec<(NodeId, NodeAddr)>) {
    let metrics = replica.raft().metrics();
    let metrics = metrics.borrow();
    let (mut voters, peers) = voters_and_peers(&metrics);
    voters.sort_unstable();
    let local = Local {
        id: metrics.id,
        state: metrics.state,
        leader: metrics.current_leader,
        voters,
        may_campaign: may_campaign(&replica.clock().verdict()),
        silence: replica.leader_contact().silence(),
    };
    (local, peers)
}

/// Asks the other voters `peers` how long they have not heard a leader, and counts those past
/// their vote lease, stopping as soon as they and this node make a majority of `voters`.
async fn silent_peers(replica: &Replica, peers: Vec<(NodeId, NodeAddr)>, voters: usize) -> usize {
    let transport = replica.transport();
    let mut answers: FuturesUnordered<_> = peers
        .into_iter()
        .map(|(id, node)| async move {
            let addr = transport.address_of(id, &node);
            transport
                .get::<Silence>(id, addr, LEADER_SILENCE_PATH, ASK_TIMEOUT)
                .await
        })
        .collect();
    let mut silent = 0usize;
    while let Some(answer) = answers.next().await {
        if answer.is_ok_and(Silence::past_the_lease) {
            silent = silent.saturating_add(1);
            if majority_silent(voters, silent) {
                break;
            }
        }
    }
    silent
}

/// Calls the election, and says why.
async fn campaign(replica: &Replica, local: &Local, silent_peers: usize) {
    tracing::info!(
        leader = local.leader,
        silent_ms = local.silence.map(|silence| silence.as_millis() as u64),
        silent_peers,
        voters = local.voters.len(),
        "the leader has been silent past the vote lease here and on a majority of the voters; \
         campaigning"
    );
    counter!(telemetry::EARLY_ELECTIONS).increment(1);
    if let Err(fatal) = replica.raft().trigger().elect().await {
        tracing::warn!(%fatal, "the early campaign could not start: openraft has stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follower(id: NodeId, silence_ms: u64) -> Local {
        Local {
            id,
            state: ServerState::Follower,
            leader: Some(1),
            voters: vec![1, 2, 3],
            may_campaign: true,
            silence: Some(Duration::from_millis(silence_ms)),
        }
    }

    #[test]
    fn the_followers_ask_one_stagger_apart_once_the_vote_lease_and_its_margin_are_over() {
        let first = VOTE_LEASE + ASK_MARGIN;
        assert_eq!(follower(2, 0).ask_after(), Some(first));
        assert_eq!(follower(3, 0).ask_after(), Some(first + STAGGER));
        // Ranked among the leader's followers: with node 2 leading, node 1 goes first.
        let under_two = |id| Local {
            leader: Some(2),
            ..follower(id, 0)
        };
        assert_eq!(under_two(1).ask_after(), Some(first));
        assert_eq!(under_two(3).ask_after(), Some(first + STAGGER));

        let ms = |duration: Duration| duration.as_millis() as u64;
        assert!(!follower(2, ms(first) - 1).time_to_ask());
        assert!(follower(2, ms(first)).time_to_ask());
        assert!(!follower(3, ms(first + STAGGER) - 1).time_to_ask());
        assert!(follower(3, ms(first + STAGGER)).time_to_ask());
    }

    #[test]
    fn only_a_voting_follower_that_knows_its_leader_and_may_lead_asks() {
        let long = 10_000;
        assert!(follower(2, long).time_to_ask());
        let cases = [
            Local {
                state: ServerState::Candidate,
                ..follower(2, long)
            },
            Local {
                state: ServerState::Leader,
                ..follower(2, long)
            },
            Local {
                state: ServerState::Learner,
                ..follower(2, long)
            },
            Local {
                voters: vec![1, 3],
                ..follower(2, long)
            },
            Local {
                leader: None,
                ..follower(2, long)
            },
            Local {
                may_campaign: false,
                ..follower(2, long)
            },
            Local {
                silence: None,
                ..follower(2, long)
            },
            follower(1, long),
        ];
        for local in cases {
            assert!(!local.time_to_ask(), "{local:?}");
        }
    }

    #[test]
    fn a_majority_counts_this_node_with_the_silent_peers() {
        assert!(!majority_silent(3, 0));
        assert!(majority_silent(3, 1));
        assert!(!majority_silent(5, 1));
        assert!(majority_silent(5, 2));
        assert!(majority_silent(1, 0));
    }

    #[test]
    fn a_voter_is_past_the_lease_when_it_does_not_lead_and_heard_nothing_for_longer() {
        let lease = VOTE_LEASE.as_millis() as u64;
        let answer = |leading, heard_ms_ago| Silence {
            leading,
            heard_ms_ago,
        };
        assert!(answer(false, Some(lease + 1)).past_the_lease());
        assert!(answer(false, None).past_the_lease());
        assert!(!answer(false, Some(lease)).past_the_lease());
        assert!(!answer(true, Some(lease + 1)).past_the_lease());
        assert!(!answer(true, None).past_the_lease());
    }

    #[tokio::test(start_paused = true)]
    async fn the_contact_reads_the_time_since_the_last_append_and_none_before_the_first() {
        let contact = LeaderContact::default();
        assert_eq!(contact.silence(), None);
        tokio::time::advance(Duration::from_millis(500)).await;
        contact.heard();
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(contact.silence(), Some(Duration::from_millis(300)));
        contact.heard();
        assert_eq!(contact.silence(), Some(Duration::ZERO));
    }
}
