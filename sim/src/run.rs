//! One seed's run, from an empty cluster to the checkers' verdict.
//!
//! The timeline of a run of `D` simulated seconds: the nodes start and elect a leader; a few
//! `every.1.seconds` clocks are registered and watched, three on RabbitMQ and one on an http
//! queue that two pollers pop until the end; clients and the nemesis start. The
//! nemesis stops injecting [`HEAL_BEFORE_END`] before the end and heals; the clients stop
//! then too. At the end every node loses power at once and restarts, and the clocks that
//! exist are read back for the durability checker.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Once};
use std::time::Duration;

use tickd_domain::{Channel, ClockId, Command, Levels, Outcome, Overlap, QueueId, Schedule};
use tickd_engine::EngineConfig;
use tickd_raft::NodeId;
use tickd_tests::chaos::check::{durability, linearizable, liveness, ticks};
use tickd_tests::chaos::history::{Violation, WatchedClock};
use tickd_tests::chaos::rng::Rng;
use tokio::time::Instant;

use crate::client;
use crate::cluster::Cluster;
use crate::faults;
use crate::log_store::lock;
use crate::poller::{self, Polled, Poller};
use crate::runtime::seed_thread_rng;
use crate::workload::{Client, Shared, draw_id};
use crate::world::World;

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Simulated seconds of faults and workload (at least 30).
    pub seconds: u64,
    /// Nodes in the cluster: 3 or 5.
    pub nodes: u64,
    /// Clients sending operations at once.
    pub clients: usize,
    /// Keep the trace's lines for printing.
    pub keep_trace: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seconds: 60,
            nodes: 3,
            clients: 4,
            keep_trace: false,
        }
    }
}

/// The faults stop, and are healed, this long before the end: the liveness bound plus the
/// time to see the last instants delivered.
pub const HEAL_BEFORE_END: Duration = Duration::from_secs(15);
/// How soon after the heal a leader must exist and every watched clock tick again: an
/// election (at most about 1.2 s), the lease, and the catch-up of what fell due.
pub const LIVENESS_BOUND_MS: u64 = 10_000;
/// How many `every.1.seconds` clocks on RabbitMQ the run watches.
const WATCHED_RABBIT: usize = 3;
/// How many pollers pop the watched http clock's queue at once.
const POLLERS: usize = 2;
/// Production's default catch-up window (SPEC §7), which the tick checker allows for.
const CATCH_UP_MS: u64 = 60_000;

/// What one seed's run found.
#[derive(Debug, Clone)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// The trace's hash.
    pub trace_hash: String,
    /// The trace's lines, if they were kept.
    pub trace: Vec<String>,
    /// The broken guarantees.
    pub violations: Vec<Violation>,
    /// Simulated milliseconds, the final restart included.
    pub simulated_ms: u64,
    /// Faults injected.
    pub faults: u64,
    /// Client operations recorded.
    pub operations: u64,
    /// Scheduled instants the tick checker expected, and how many arrived.
    pub ticks_expected: u64,
    /// See [`SeedReport::ticks_expected`].
    pub ticks_delivered: u64,
    /// Messages sent between nodes, and lost.
    pub messages: (u64, u64),
    /// Fsyncs, and pending writes lost to crashes.
    pub disk: (u64, u64),
}

thread_local! {
    /// The panics of the seed running on this thread: a task that panics (a node's Raft core,
    /// its engine) dies quietly inside tokio, so the hook records them here.
    static PANICS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Records every panic in [`PANICS`] of its thread, then reports it as before.
fn record_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|panics| panics.borrow_mut().push(info.to_string()));
            previous(info);
        }));
    });
}

/// Runs one seed on a fresh single-threaded runtime whose clock is virtual. A panic of any
/// task is a violation.
pub fn run_seed(seed: u64, options: &Options) -> Result<SeedReport, String> {
    record_panics();
    PANICS.with(|panics| panics.borrow_mut().clear());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|error| format!("the simulation's runtime did not start: {error}"))?;
    let mut report = runtime.block_on(simulate(seed, options.clone()))?;
    drop(runtime);
    let panics = PANICS.with(|panics| std::mem::take(&mut *panics.borrow_mut()));
    report
        .violations
        .extend(panics.into_iter().map(|panic| Violation {
            checker: "panic",
            detail: panic,
        }));
    Ok(report)
}

fn engine_config() -> EngineConfig {
    EngineConfig {
        clock_ttl: Duration::from_secs(3_600),
        catch_up: Duration::from_millis(CATCH_UP_MS),
        http_queue_limit: 1_000,
    }
}

/// Waits up to `within` for a leader; returns it and when it was seen.
async fn await_leader(world: &World, within: Duration) -> Option<(NodeId, u64)> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(leader) = faults::leader(world) {
            return Some((leader, world.true_ms()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Registers a watched clock on each of `channels`, each retried until a node acknowledges
/// it.
async fn register_watched(
    world: &Arc<World>,
    rng: &mut Rng,
    nodes: u64,
    channels: &[Channel],
) -> Vec<WatchedClock> {
    let schedule = Schedule::parse("every.1.seconds")
        .unwrap_or_else(|_| unreachable!("every.1.seconds is a schedule"));
    let mut watched = Vec::new();
    for (number, channel) in channels.iter().enumerate() {
        let command = Command::Register {
            name: format!("watched-{number}"),
            schedule: schedule.clone(),
            id: draw_id(rng),
            channel: channel.clone(),
            max_clocks: 1_000_000,
            now_ms: world.true_ms(),
            overlap: Overlap::Allow,
        };
        for _attempt in 0..10 {
            let node = 1 + rng.below(nodes);
            if let Ok(Outcome::Registered { clock, .. }) =
                client::write(world, node, command.clone()).await
            {
                watched.push(WatchedClock {
                    id: clock.id.to_string(),
                    interval_ms: 1_000,
                    registered_ms: world.true_ms(),
                    paused: Vec::new(),
                    unsettled: Vec::new(),
                });
                break;
            }
        }
    }
    watched
}

/// Reads every clock from the leader after a read barrier: id → status.
async fn final_state(world: &Arc<World>) -> Option<BTreeMap<String, String>> {
    for _attempt in 0..50 {
        if let Some((leader, _)) = await_leader(world, Duration::from_secs(5)).await {
            let node = world.node(leader)?;
            if node.raft.ensure_linearizable().await.is_ok() {
                let state = node.state.read();
                return Some(
                    state
                        .registry
                        .clocks()
                        .map(|clock| (clock.id.to_string(), clock.status.as_str().to_string()))
                        .collect(),
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

async fn simulate(seed: u64, options: Options) -> Result<SeedReport, String> {
    seed_thread_rng(seed);
    let mut rng = Rng::new(seed);
    let world = Arc::new(World::new(&mut rng, options.keep_trace));
    let cluster = Arc::new(Cluster::new(
        world.clone(),
        options.nodes,
        &mut rng,
        engine_config(),
    )?);
    for id in cluster.ids() {
        cluster.start(id).await?;
    }
    let first = world.node(1).ok_or("node 1 did not start")?;
    first
        .raft
        .initialize(cluster.members())
        .await
        .map_err(|error| format!("the cluster did not initialize: {error}"))?;
    let (leader, _) = await_leader(&world, Duration::from_secs(10))
        .await
        .ok_or("no leader was elected in a fault-free start")?;
    // What production's level monitor does within seconds of a start: every voter runs this
    // binary, so the cluster applies the log by its highest level.
    let level = Levels::THIS_BINARY.highest;
    match client::write(&world, leader, Command::SetLevel { level }).await {
        Ok(Outcome::LevelSet { .. }) => {}
        other => return Err(format!("the cluster level was not raised: {other:?}")),
    }
    let queue = QueueId::new(draw_id(&mut rng).to_string());
    let mut channels = vec![Channel::Rabbit; WATCHED_RABBIT];
    channels.push(Channel::Http {
        queue_id: queue.clone(),
    });
    let watched = register_watched(&world, &mut rng, options.nodes, &channels).await;
    let watch_from = world.true_ms();

    let end = world.start + Duration::from_secs(options.seconds.max(30));
    let heal_at = end - HEAL_BEFORE_END;
    let shared = Arc::new(Shared::default());
    let watched_ids: Vec<ClockId> = watched
        .iter()
        .map(|clock| ClockId::new(clock.id.clone()))
        .collect();
    let clients: Vec<_> = (0..options.clients)
        .map(|number| {
            tokio::spawn(
                Client {
                    number,
                    rng: rng.fork(),
                    world: world.clone(),
                    nodes: options.nodes,
                    shared: shared.clone(),
                    watched: watched_ids.clone(),
                    until: heal_at,
                }
                .run(),
            )
        })
        .collect();
    let polled = Arc::new(Polled::default());
    let pollers: Vec<_> = match watched.get(WATCHED_RABBIT) {
        Some(http) => (0..POLLERS)
            .map(|number| {
                tokio::spawn(
                    Poller {
                        number,
                        rng: rng.fork(),
                        world: world.clone(),
                        nodes: options.nodes,
                        clock: ClockId::new(http.id.clone()),
                        queue: queue.clone(),
                        polled: polled.clone(),
                        until: end,
                    }
                    .run(),
                )
            })
            .collect(),
        None => Vec::new(),
    };
    let faults = faults::run(world.clone(), cluster.clone(), rng.fork(), heal_at).await;
    tokio::time::sleep_until(heal_at).await;
    // Every fault is healed by now, and every node runs again.
    let heal_ms = world.true_ms();
    let leader_at = await_leader(&world, Duration::from_millis(LIVENESS_BOUND_MS + 1_000))
        .await
        .map(|(_, at)| at);
    tokio::time::sleep_until(end).await;
    for task in clients.into_iter().chain(pollers) {
        let _ended = task.await;
    }
    let watch_to = world.true_ms().saturating_sub(3_000);

    for id in cluster.ids() {
        cluster.crash(id);
    }
    for id in cluster.ids() {
        faults::restart(&world, &cluster, id).await;
    }
    let final_state = final_state(&world).await;

    let events = std::mem::take(&mut *lock(&shared.events));
    let (mut deliveries, judged) = {
        let mut broker = lock(&world.broker);
        let mut judged = std::mem::take(&mut broker.deposed);
        judged.append(&mut broker.republished);
        (std::mem::take(&mut broker.deliveries), judged)
    };
    let popped = std::mem::take(&mut *lock(&polled.deliveries));
    let unanswered = std::mem::take(&mut *lock(&polled.unanswered));
    let mut violations = std::mem::take(&mut *lock(&world.violations));
    violations.extend(judged);
    violations.extend(poller::popped_twice(&popped));
    deliveries.extend(popped);
    match &final_state {
        Some(state) => violations.extend(durability::check(&events, state)),
        None => violations.push(Violation {
            checker: "liveness",
            detail: "no leader answered a read after the final restart".to_string(),
        }),
    }
    violations.extend(linearizable::check(&events));
    let tick_report = ticks::check(
        &watched,
        &deliveries,
        &unanswered,
        (watch_from, watch_to),
        CATCH_UP_MS,
    );
    violations.extend(tick_report.violations);
    violations.extend(liveness::check(
        heal_ms,
        leader_at,
        &watched,
        &deliveries,
        LIVENESS_BOUND_MS,
    ));
    if watched.len() < channels.len() {
        violations.push(Violation {
            checker: "liveness",
            detail: format!(
                "only {} of {} watched clocks registered in a fault-free start",
                watched.len(),
                channels.len()
            ),
        });
    }
    world.record(format_args!(
        "end: {} clocks, {} violations",
        final_state.as_ref().map_or(0, BTreeMap::len),
        violations.len()
    ));
    for violation in &violations {
        world.record(format_args!(
            "violation {}: {}",
            violation.checker, violation.detail
        ));
    }
    let trace = lock(&world.trace);
    let network = lock(&world.network);
    Ok(SeedReport {
        seed,
        trace_hash: trace.hash(),
        trace: trace.lines().to_vec(),
        violations,
        simulated_ms: world.elapsed_ms(),
        faults,
        operations: u64::try_from(events.len()).unwrap_or(u64::MAX),
        ticks_expected: tick_report.expected,
        ticks_delivered: tick_report.delivered,
        messages: (network.sent, network.lost),
        disk: cluster.disk_figures(),
    })
}
