//! What the simulated nodes share: the virtual clock, the running incarnations, the network's
//! faults, the broker and the trace. One per run, behind an `Arc`; every lock is held for a
//! few statements and never across an `.await`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use openraft::Raft;
use tickd_raft::cluster_clock::ClusterClock;
use tickd_raft::{NodeId, StateHandle};
use tickd_tests::chaos::history::Violation;
use tickd_tests::chaos::rng::Rng;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::log_store::lock;
use crate::runtime::SimConfig;
use crate::trace::Trace;

/// Virtual time starts here, in milliseconds since the Unix epoch (2026-09-21), so that tick
/// instants look like real ones and calendar arithmetic has real dates to work on.
pub const EPOCH_MS: u64 = 1_790_000_000_000;

/// A running incarnation of a node.
#[derive(Clone)]
pub struct Running {
    /// Its openraft instance.
    pub raft: Raft<SimConfig>,
    /// Its applied state.
    pub state: StateHandle,
    /// Its view of the cluster's clocks (`tickd_raft::cluster_clock`), on its wall clock.
    pub clock: ClusterClock,
    /// Which incarnation it is (0 for the first, one more per restart).
    pub incarnation: u64,
}

/// What happens to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Delivered after this delay.
    Delivered(Duration),
    /// Delivered after the first delay, and a copy after the second.
    Duplicated(Duration, Duration),
    /// Never delivered.
    Lost,
}

/// The network's faults in force.
#[derive(Debug, Clone, Default)]
pub struct Weather {
    /// Per mille of messages lost on every link.
    pub loss_per_mille: u64,
    /// Per mille of messages delivered twice.
    pub duplicate_per_mille: u64,
    /// The most a message is delayed beyond the usual 0–2 ms (reordering follows from it).
    pub extra_delay_ms: u64,
    /// Directed links cut: (from, to).
    pub cut: BTreeSet<(NodeId, NodeId)>,
}

/// The network: its weather and the generator its fates are drawn from.
pub struct Network {
    /// The faults in force.
    pub weather: Weather,
    rng: Rng,
    /// Messages sent and lost, for the report.
    pub sent: u64,
    /// See [`Network::sent`].
    pub lost: u64,
}

impl Network {
    /// Draws the fate of a message from `from` to `to`.
    pub fn route(&mut self, from: NodeId, to: NodeId) -> Fate {
        self.sent = self.sent.saturating_add(1);
        let lost = self.weather.cut.contains(&(from, to))
            || (self.weather.loss_per_mille > 0
                && self.rng.below(1000) < self.weather.loss_per_mille);
        if lost {
            self.lost = self.lost.saturating_add(1);
            return Fate::Lost;
        }
        let delay = self.delay();
        if self.weather.duplicate_per_mille > 0
            && self.rng.below(1000) < self.weather.duplicate_per_mille
        {
            let again = self.delay();
            return Fate::Duplicated(delay, delay.saturating_add(again));
        }
        Fate::Delivered(delay)
    }

    fn delay(&mut self) -> Duration {
        let extra = self
            .rng
            .below(self.weather.extra_delay_ms.saturating_add(1));
        Duration::from_micros(200 + self.rng.below(1_800)) + Duration::from_millis(extra)
    }

    /// Whether the link from `from` to `to` is cut now.
    pub fn is_cut(&self, from: NodeId, to: NodeId) -> bool {
        self.weather.cut.contains(&(from, to))
    }
}

/// Everything a run's tasks share.
pub struct World {
    /// When the run began, on the virtual monotonic clock.
    pub start: Instant,
    /// The running incarnation of each node; a crashed node has none until it restarts.
    pub running: Mutex<BTreeMap<NodeId, Running>>,
    /// The network.
    pub network: Mutex<Network>,
    /// The broker the leaders publish to.
    pub broker: Mutex<Broker>,
    /// The trace.
    pub trace: Mutex<Trace>,
    /// Each node's clock offset from true time, in ms, stepped and drifted by the nemesis.
    pub offsets: Mutex<BTreeMap<NodeId, i64>>,
    /// Ticks whose delivery a committed `Confirm` recorded: tick id → the entry's index.
    pub confirmed: Mutex<BTreeMap<String, u64>>,
    /// What went wrong outside the checkers' view: a node that cannot restart from its disk.
    pub violations: Mutex<Vec<Violation>>,
}

impl World {
    /// A world that starts now, its random choices drawn from `rng`.
    pub fn new(rng: &mut Rng, keep_trace: bool) -> Self {
        World {
            start: Instant::now(),
            running: Mutex::new(BTreeMap::new()),
            network: Mutex::new(Network {
                weather: Weather::default(),
                rng: rng.fork(),
                sent: 0,
                lost: 0,
            }),
            broker: Mutex::new(Broker::new(rng.fork())),
            trace: Mutex::new(Trace::new(keep_trace)),
            offsets: Mutex::new(BTreeMap::new()),
            confirmed: Mutex::new(BTreeMap::new()),
            violations: Mutex::new(Vec::new()),
        }
    }

    /// Virtual milliseconds since the run began.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// True time, in ms since the Unix epoch: what the consumers and the checkers read.
    pub fn true_ms(&self) -> u64 {
        EPOCH_MS.saturating_add(self.elapsed_ms())
    }

    /// `node`'s wall clock, in ms since the Unix epoch: true time plus its offset.
    pub fn wall_ms(&self, node: NodeId) -> u64 {
        let offset = lock(&self.offsets).get(&node).copied().unwrap_or(0);
        self.true_ms().saturating_add_signed(offset)
    }

    /// Records an event in the trace.
    pub fn record(&self, event: std::fmt::Arguments<'_>) {
        let at = self.elapsed_ms();
        lock(&self.trace).record(at, event);
    }

    /// The running incarnation of `node`, if it is up.
    pub fn node(&self, node: NodeId) -> Option<Running> {
        lock(&self.running).get(&node).cloned()
    }

    /// Whether incarnation `incarnation` of `node` is the one running.
    pub fn is_running(&self, node: NodeId, incarnation: u64) -> bool {
        lock(&self.running)
            .get(&node)
            .is_some_and(|running| running.incarnation == incarnation)
    }
}
