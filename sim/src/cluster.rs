//! The simulated cluster's nodes: each a disk that outlives its incarnations, and while it
//! runs an openraft with production's configuration over the simulated log, state machine and
//! network, its cluster clock and the monitor that measures it, its engine, and a task that
//! asks for snapshots as production's pace does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::{Config, Raft};
use tickd_engine::EngineConfig;
use tickd_raft::{NodeAddr, NodeId};
use tickd_tests::chaos::rng::Rng;
use tokio::task::JoinHandle;

use crate::clocks;
use crate::disk::Disk;
use crate::engine::Engine;
use crate::log_store::{LogStore, lock};
use crate::network::SimNetwork;
use crate::state_machine::StateMachine;
use crate::world::{Running, World};

/// Entries applied between two snapshots: small, so that a run builds, purges behind and
/// installs snapshots (production's default is 10 000, `tickd_raft::timing`).
pub const SNAPSHOT_EVERY: u64 = 200;
/// How often a node looks whether it is time for a snapshot.
const SNAPSHOT_LOOK_EVERY: Duration = Duration::from_millis(500);

/// The nodes of one run.
pub struct Cluster {
    world: Arc<World>,
    disks: BTreeMap<NodeId, Arc<Mutex<Disk>>>,
    config: Arc<Config>,
    engine: EngineConfig,
    /// The tasks of each running incarnation, aborted when it crashes.
    tasks: Mutex<BTreeMap<NodeId, Vec<JoinHandle<()>>>>,
    incarnations: Mutex<BTreeMap<NodeId, u64>>,
}

impl Cluster {
    /// `nodes` nodes with empty disks, none running.
    pub fn new(
        world: Arc<World>,
        nodes: u64,
        rng: &mut Rng,
        engine: EngineConfig,
    ) -> Result<Self, String> {
        let config = tickd_raft::timing::raft_config(SNAPSHOT_EVERY)
            .map_err(|error| format!("the Raft configuration is invalid: {error}"))?;
        let disks = (1..=nodes)
            .map(|id| (id, Arc::new(Mutex::new(Disk::new(rng.fork())))))
            .collect();
        Ok(Cluster {
            world,
            disks,
            config: Arc::new(config),
            engine,
            tasks: Mutex::new(BTreeMap::new()),
            incarnations: Mutex::new(BTreeMap::new()),
        })
    }

    /// The node ids.
    pub fn ids(&self) -> Vec<NodeId> {
        self.disks.keys().copied().collect()
    }

    /// The membership to initialize the cluster with: every node, with made-up addresses.
    pub fn members(&self) -> BTreeMap<NodeId, NodeAddr> {
        self.ids()
            .into_iter()
            .map(|id| {
                let addr = NodeAddr {
                    api: format!("node-{id}:8080"),
                    raft: format!("node-{id}:9090"),
                };
                (id, addr)
            })
            .collect()
    }

    /// Starts a new incarnation of `node` from what its disk holds.
    pub async fn start(&self, node: NodeId) -> Result<(), String> {
        let disk = self
            .disks
            .get(&node)
            .ok_or_else(|| format!("no node {node}"))?
            .clone();
        let incarnation = {
            let mut incarnations = lock(&self.incarnations);
            let next = incarnations
                .get(&node)
                .map_or(0, |last| last.saturating_add(1));
            incarnations.insert(node, next);
            next
        };
        let log = LogStore::new(disk.clone());
        let state_machine = StateMachine::open(disk)
            .map_err(|error| format!("node {node}'s snapshot does not decode: {error}"))?;
        let state = state_machine.handle();
        let network = SimNetwork {
            world: self.world.clone(),
            me: node,
            incarnation,
        };
        let raft = Raft::new(node, self.config.clone(), network, log, state_machine)
            .await
            .map_err(|error| format!("node {node} did not start: {error}"))?;
        let clock = clocks::cluster_clock(&self.world, node);
        lock(&self.world.running).insert(
            node,
            Running {
                raft: raft.clone(),
                state: state.clone(),
                clock: clock.clone(),
                incarnation,
            },
        );
        let engine = Engine {
            world: self.world.clone(),
            me: node,
            incarnation,
            raft: raft.clone(),
            state,
            clock: clock.clone(),
            config: self.engine.clone(),
        };
        let monitor = clocks::monitor(self.world.clone(), (node, incarnation), raft.clone(), clock);
        let tasks = vec![
            tokio::spawn(engine.run()),
            tokio::spawn(monitor),
            tokio::spawn(snapshots(raft)),
        ];
        lock(&self.tasks).insert(node, tasks);
        self.world.record(format_args!(
            "node {node} starts (incarnation {incarnation})"
        ));
        Ok(())
    }

    /// `node` loses power: its unsynced writes are gone and its incarnation stops at once.
    pub fn crash(&self, node: NodeId) {
        let running = lock(&self.world.running).remove(&node);
        if let Some(disk) = self.disks.get(&node) {
            lock(disk).crash();
        }
        for task in lock(&self.tasks).remove(&node).unwrap_or_default() {
            task.abort();
        }
        if let Some(running) = running {
            tokio::spawn(async move {
                let _stopped = running.raft.shutdown().await;
            });
        }
        self.world.record(format_args!("node {node} crashes"));
    }

    /// The disks' fsyncs and the writes crashes lost, summed.
    pub fn disk_figures(&self) -> (u64, u64) {
        self.disks.values().fold((0, 0), |(syncs, lost), disk| {
            let disk = lock(disk);
            (
                syncs.saturating_add(disk.syncs),
                lost.saturating_add(disk.writes_lost),
            )
        })
    }
}

/// Asks for a snapshot once [`SNAPSHOT_EVERY`] entries were applied since the last.
async fn snapshots(raft: Raft<crate::runtime::SimConfig>) {
    loop {
        tokio::time::sleep(SNAPSHOT_LOOK_EVERY).await;
        let (applied, snapshot) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            (
                metrics.last_applied.map_or(0, |id| id.index),
                metrics.snapshot.map_or(0, |id| id.index),
            )
        };
        if applied.saturating_sub(snapshot) >= SNAPSHOT_EVERY {
            let _asked = raft.trigger().snapshot().await;
        }
    }
}
