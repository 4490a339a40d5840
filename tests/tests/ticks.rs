//! The tick engine, black-box: real processes, the real RabbitMQ, SIGKILL and SIGSTOP.
//! Each scenario runs on the channel(s) it is about; the broker scenarios run on both.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::StatusCode;
use serde_json::Value;
use tickd_tests::api::{action, clock_id, get_clock, register};
use tickd_tests::rabbit::{self, Consumers, Received, ResilientConsumer};
use tickd_tests::timing::{AGREED_LEADER_WITHIN, FAILOVER};
use tickd_tests::{NodeId, TestCluster, eventually, unique_name};

/// One delivered tick as a client saw it.
#[derive(Debug, Clone)]
struct Got {
    body: Value,
    at: Instant,
    app_id: Option<String>,
}

impl From<&Received> for Got {
    fn from(received: &Received) -> Got {
        Got {
            body: received.body.clone(),
            at: received.at,
            app_id: received.app_id.clone(),
        }
    }
}

/// Everything a reconnecting consumer has received.
fn received(consumer: &ResilientConsumer) -> Vec<Got> {
    consumer.received().iter().map(Got::from).collect()
}

impl Got {
    fn tick_id(&self) -> String {
        self.body["tick_id"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The scheduled instant, from the deterministic id `clock-instant`.
    fn instant_ms(&self) -> Option<u64> {
        let id = self.tick_id();
        id.rsplit_once('-')
            .and_then(|(_, instant)| instant.parse().ok())
    }
}

/// Receives a clock's ticks: RabbitMQ consumers, or pollers of the http queue spread over the
/// cluster's nodes.
enum Watch {
    Rabbit(Consumers),
    Http {
        got: Arc<Mutex<Vec<Got>>>,
        tasks: Vec<tokio::task::JoinHandle<()>>,
    },
}

impl Watch {
    async fn start(cluster: &TestCluster, created: &Value, count: usize) -> Watch {
        let channel = &created["channel"];
        if channel["type"] == "rabbit" {
            let queue = channel["details"]["queue"].as_str().expect("a queue");
            let uri = channel["details"]["uri"].as_str().expect("a uri");
            return Watch::Rabbit(Consumers::start(uri, queue, count).await);
        }
        let url = channel["details"]["url"]
            .as_str()
            .expect("a pop url")
            .to_string();
        let got = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..count)
            .map(|poller| {
                let node = cluster.node_ids()[poller % cluster.node_ids().len()];
                let url = tickd_tests::api::on_node(cluster, node, &url);
                let client = cluster.client().clone();
                let got = got.clone();
                tokio::spawn(async move {
                    loop {
                        let reply = client.get(format!("{url}?wait=1")).send().await;
                        let Ok(reply) = reply else {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        };
                        let Ok(Value::Array(ticks)) = reply.json::<Value>().await else {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        };
                        let at = Instant::now();
                        let mut sink = got.lock().unwrap_or_else(|p| p.into_inner());
                        sink.extend(ticks.into_iter().map(|body| Got {
                            body,
                            at,
                            app_id: None,
                        }));
                    }
                })
            })
            .collect();
        Watch::Http { got, tasks }
    }

    fn got(&self) -> Vec<Got> {
        match self {
            Watch::Rabbit(consumers) => consumers.received().iter().map(Got::from).collect(),
            Watch::Http { got, .. } => got.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    async fn wait_for(&self, what: &str, timeout: Duration, check: impl Fn(&[Got]) -> bool) {
        eventually(what, timeout, Duration::from_millis(50), || async {
            check(&self.got()).then_some(())
        })
        .await;
    }

    async fn stop(self) {
        match self {
            Watch::Rabbit(consumers) => consumers.stop().await,
            Watch::Http { tasks, .. } => tasks.iter().for_each(|task| task.abort()),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Rabbit,
    Http,
}

async fn cluster(mode: Mode) -> TestCluster {
    let builder = TestCluster::builder().nodes(3);
    let builder = match mode {
        Mode::Rabbit => builder.rabbit_uri(Some(rabbit::broker().await)),
        Mode::Http => builder,
    };
    builder.start().await
}

async fn register_ok(cluster: &TestCluster, node: NodeId, name: &str, schedule: &str) -> Value {
    let (status, _, body) = register(cluster, node, name, schedule).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

/// The most a tick may arrive after its instant in these scenarios. The engine commits intents
/// 600 ms ahead every 200 ms and publishes at the instant, so on an idle machine a tick arrives
/// within milliseconds (docs/BENCHMARKS.md: p99 lateness well under a second even for 10 000
/// clocks); the rest is margin for a loaded 2-core box running other test clusters.
const DELIVERY_MARGIN: Duration = Duration::from_secs(3);

async fn broker_scenarios(mode: Mode) {
    let cluster = cluster(mode).await;
    // A registered every.2.seconds clock delivers a tick within one interval, plus the margin.
    let clock = register_ok(&cluster, 2, &unique_name("two"), "every.2.seconds").await;
    let watch = Watch::start(&cluster, &clock, 1).await;
    watch
        .wait_for(
            "a first tick",
            Duration::from_secs(2) + DELIVERY_MARGIN,
            |got| !got.is_empty(),
        )
        .await;

    // Pausing stops the ticks: none due after the pause was acknowledged is ever delivered
    // (SPEC §4). Ticks due before it may still be on their way, so the check is on the
    // instants the ticks carry, not on when they arrive.
    let (status, _, _) = action(&cluster, 3, &clock_id(&clock), "pause").await;
    assert_eq!(status, StatusCode::OK);
    let paused_at_ms = unix_ms();
    // Long enough for two instants of the schedule, and for a tick of either to arrive.
    tokio::time::sleep(Duration::from_secs(4) + DELIVERY_MARGIN).await;
    let after_pause: Vec<Got> = watch
        .got()
        .into_iter()
        .filter(|got| {
            got.instant_ms()
                .is_none_or(|instant| instant > paused_at_ms)
        })
        .collect();
    assert!(
        after_pause.is_empty(),
        "{mode:?}: ticks due after the pause at {paused_at_ms}: {after_pause:?}"
    );
    watch.stop().await;

    // A manual tick on an @never clock is delivered within the margin.
    let never = register_ok(&cluster, 1, &unique_name("never"), "@never").await;
    let watch = Watch::start(&cluster, &never, 1).await;
    let (status, _, _) = action(&cluster, 3, &clock_id(&never), "tick").await;
    assert_eq!(status, StatusCode::OK);
    watch
        .wait_for("the manual tick", DELIVERY_MARGIN, |got| !got.is_empty())
        .await;
    // Watch on: a schedule that fired even once a few seconds (as every.1.seconds or
    // every.2.seconds would) must show a scheduled tick before the check below.
    tokio::time::sleep(NEVER_OBSERVED_FOR).await;
    let got = watch.got();
    assert_eq!(
        got[0].body["manual"],
        Value::Bool(true),
        "{mode:?}: {:?}",
        got[0].body
    );
    assert_eq!(
        got.len(),
        1,
        "{mode:?}: @never delivers only the manual tick, {NEVER_OBSERVED_FOR:?} after it: {got:?}"
    );
    watch.stop().await;
}

/// How long the @never clock is watched after its manual tick for a scheduled one.
const NEVER_OBSERVED_FOR: Duration = Duration::from_secs(4);

#[tokio::test]
async fn broker_scenarios_over_rabbitmq() {
    broker_scenarios(Mode::Rabbit).await;
}

#[tokio::test]
async fn broker_scenarios_over_http() {
    broker_scenarios(Mode::Http).await;
}

/// A six-field cron every 2 seconds in a zone off UTC by a non-whole hour ticks on even
/// seconds of the wall clock, each instant once, and its resource shows the next tick.
async fn a_cron_clock_ticks_on_even_seconds(mode: Mode) {
    let cluster = cluster(mode).await;
    let schedule = "TZ=Australia/Lord_Howe */2 * * * * *";
    let clock = register_ok(&cluster, 2, &unique_name("cron"), schedule).await;
    let next = clock["next_tick"].as_str().unwrap_or_default().to_owned();
    assert!(
        next.ends_with(".000Z"),
        "{mode:?}: next_tick {next:?} of {clock}"
    );
    let watch = Watch::start(&cluster, &clock, 2).await;
    watch
        .wait_for(
            "four ticks",
            Duration::from_secs(8) + DELIVERY_MARGIN,
            |got| got.len() >= 4,
        )
        .await;
    let got = watch.got();
    watch.stop().await;
    let instants: Vec<u64> = got.iter().filter_map(Got::instant_ms).collect();
    assert_eq!(
        instants.len(),
        got.len(),
        "{mode:?}: ticks without an instant: {got:?}"
    );
    assert!(
        instants.iter().all(|at| at % 2_000 == 0),
        "{mode:?}: instants not on even seconds: {instants:?}"
    );
    let distinct: BTreeSet<&u64> = instants.iter().collect();
    assert_eq!(
        distinct.len(),
        instants.len(),
        "{mode:?}: an instant twice: {instants:?}"
    );
    for tick in &got {
        assert_eq!(tick.body["schedule"], schedule, "{mode:?}: {:?}", tick.body);
    }
}

#[tokio::test]
async fn a_cron_clock_ticks_on_even_seconds_over_rabbitmq() {
    a_cron_clock_ticks_on_even_seconds(Mode::Rabbit).await;
}

#[tokio::test]
async fn a_cron_clock_ticks_on_even_seconds_over_http() {
    a_cron_clock_ticks_on_even_seconds(Mode::Http).await;
}

/// An `@at` clock a few seconds ahead delivers exactly one tick, at its instant, and then has
/// no next tick.
async fn an_at_clock_ticks_once(mode: Mode) {
    let cluster = cluster(mode).await;
    let at_ms = (unix_ms() / 1_000 + 5) * 1_000;
    let at = rfc3339_utc(at_ms);
    let clock = register_ok(&cluster, 3, &unique_name("at"), &format!("@at {at}")).await;
    assert_eq!(clock["next_tick"], at.as_str(), "{mode:?}: {clock}");
    let watch = Watch::start(&cluster, &clock, 2).await;
    watch
        .wait_for(
            "the tick",
            Duration::from_secs(5) + DELIVERY_MARGIN,
            |got| !got.is_empty(),
        )
        .await;
    // Watched on, long enough for a second tick of any schedule to show.
    tokio::time::sleep(NEVER_OBSERVED_FOR).await;
    let got = watch.got();
    watch.stop().await;
    assert_eq!(got.len(), 1, "{mode:?}: {got:?}");
    assert_eq!(got[0].instant_ms(), Some(at_ms), "{mode:?}: {got:?}");
    assert_eq!(got[0].body["manual"], false);
    let (status, _, read) = get_clock(&cluster, 1, &clock_id(&clock)).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert!(
        read["next_tick"].is_null(),
        "{mode:?}: a fired @at clock: {read}"
    );
    // An instant already past is refused.
    let (status, _, refused) =
        register(&cluster, 1, &unique_name("past"), &format!("@at {at}")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
}

/// RFC 3339 UTC with milliseconds, as `scheduled_at` and `next_tick` write it.
fn rfc3339_utc(unix_ms: u64) -> String {
    let seconds = i64::try_from(unix_ms / 1_000).unwrap_or(i64::MAX);
    let at = chrono::DateTime::from_timestamp(seconds, 0).expect("a representable instant");
    format!("{}.{:03}Z", at.format("%Y-%m-%dT%H:%M:%S"), unix_ms % 1_000)
}

#[tokio::test]
async fn an_at_clock_ticks_once_over_rabbitmq() {
    an_at_clock_ticks_once(Mode::Rabbit).await;
}

#[tokio::test]
async fn an_at_clock_ticks_once_over_http() {
    an_at_clock_ticks_once(Mode::Http).await;
}

fn assert_spec_fields(got: &Got, clock: &Value) {
    let body = &got.body;
    let scheduled_at = body["scheduled_at"].as_str().expect("scheduled_at");
    assert!(
        scheduled_at.ends_with(".000Z"),
        "aligned to the second: {scheduled_at}"
    );
    assert_eq!(body["schedule"], clock["schedule"]);
    assert_eq!(body["clock"], clock["id"]);
    assert_eq!(body["name"], clock["name"]);
    assert_eq!(body["manual"], Value::Bool(false));
    let instant = got.instant_ms().expect("an instant in the tick id");
    assert_eq!(instant % 1_000, 0, "epoch-aligned: {instant}");
}

#[tokio::test]
async fn ticks_are_aligned_and_carry_every_spec_field() {
    for mode in [Mode::Rabbit, Mode::Http] {
        let cluster = cluster(mode).await;
        let clock = register_ok(&cluster, 1, &unique_name("aligned"), "every.1.seconds").await;
        let watch = Watch::start(&cluster, &clock, 1).await;
        watch
            .wait_for("three ticks", Duration::from_secs(6), |got| got.len() >= 3)
            .await;
        for got in watch.got() {
            assert_spec_fields(&got, &clock);
        }
        if let Watch::Rabbit(consumers) = &watch {
            for received in consumers.received() {
                assert_eq!(received.message_id.as_deref(), Some(received.tick_id()));
                assert_eq!(received.content_type.as_deref(), Some("application/json"));
                assert_eq!(received.delivery_mode, Some(2));
                let publishers: Vec<String> = cluster.node_ids().into_iter().map(app_id).collect();
                assert!(
                    received
                        .app_id
                        .as_ref()
                        .is_some_and(|id| publishers.contains(id)),
                    "app_id names the publishing node: {received:?}"
                );
                assert_eq!(
                    received.expiration.as_deref(),
                    Some("999"),
                    "one interval minus 1 ms"
                );
            }
        }
        watch.stop().await;
    }
}

#[tokio::test]
async fn competing_consumers_never_receive_a_tick_twice() {
    for mode in [Mode::Rabbit, Mode::Http] {
        let cluster = cluster(mode).await;
        let clock = register_ok(&cluster, 3, &unique_name("compete"), "every.1.seconds").await;
        let watch = Watch::start(&cluster, &clock, 3).await;
        watch
            .wait_for("five ticks", Duration::from_secs(10), |got| got.len() >= 5)
            .await;
        let got = watch.got();
        let mut seen = BTreeSet::new();
        for tick in &got {
            assert!(
                seen.insert(tick.tick_id()),
                "{mode:?}: {} received twice: {got:?}",
                tick.tick_id()
            );
        }
        watch.stop().await;
    }
}

/// The wall clock, in Unix milliseconds (tick instants are on it).
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

// ---- Ticks across a fault -------------------------------------------------------------------
//
// The bounds below come from tickd's configured timings (raft/src/timing.rs,
// engine/src/lease.rs, engine/src/rabbit.rs; the tests link nothing of tickd, so the figures
// are repeated here) and from what docs/BENCHMARKS.md and docs/RELIABILITY.md measured on this
// 2-core machine, with margin for a machine that compiles beside the test. They bound
// behaviour, not speed: a check that ticking resumed must not fail because the box was busy,
// and every wait ends as soon as the cluster gets there.

/// The schedule of every clock the fault scenarios watch, and its interval (SPEC §3: ticks on
/// every whole second of the wall clock).
const SCHEDULE: &str = "every.1.seconds";
const INTERVAL_MS: u64 = 1_000;
const INTERVAL: Duration = Duration::from_millis(INTERVAL_MS);

/// The engine's publishing lease (`tickd_engine::lease::LEASE`).
const LEASE: Duration = Duration::from_millis(350);

/// How long a publish pass may run on after its lease check passed: openraft's vote lease (the
/// maximum election timeout, 600 ms) minus the lease, the room the engine's safety argument
/// leaves it (docs/BENCHMARKS.md, "Failover").
const PUBLISH_PASS: Duration = Duration::from_millis(250);

/// From a tick's publish to the test's consumer recording it. docs/BENCHMARKS.md measured a
/// p99 lateness of 90 ms for 1 000 clocks on a quiet machine; five times that, rounded up.
const DELIVERY: Duration = Duration::from_millis(500);

/// The longest a clock's consumer may hear nothing across a failover: the last tick before the
/// fault may be one interval old, then the failover, then the successor's first delivery.
const FAILOVER_SILENCE: Duration = INTERVAL.saturating_add(FAILOVER).saturating_add(DELIVERY);

/// How old the newest expected instant may be when observation ends. A tick goes out at its
/// instant (its intent was committed 600 ms ahead) and arrives within [`DELIVERY`]; four times
/// that covers a stall of a loaded machine. Every instant older than this must be there: a
/// cluster that fell silent fails, however well it did before.
const TAIL: Duration = Duration::from_secs(2);

/// How long tickd may take to publish again once the broker gate opens: a connection attempt
/// begun while the gate was shut runs out after the broker client's operation timeout (2 s),
/// the next one waits the reconnect pause (0.5 s) and its handshake may take up to 2 s again,
/// then the backlog is published and delivered (0.5 s): 5 s. Twice that for a loaded machine.
const RECONNECT_WITHIN: Duration = Duration::from_secs(10);

/// How long a fresh clock may take to deliver ticks from the leader: registration declares its
/// queue, the next instant is up to an interval away. Generous, because a wait costs nothing
/// when it succeeds early.
const FIRST_TICKS_WITHIN: Duration = Duration::from_secs(10);

/// A duration in whole milliseconds, as instants are counted.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The `app_id` with which `node` publishes (node/src/node.rs).
fn app_id(node: NodeId) -> String {
    format!("tickd-node-{node}")
}

/// Whether `tick` was published by `node`, by its `app_id`.
fn published_by(tick: &Got, node: NodeId) -> bool {
    tick.app_id.as_deref() == Some(app_id(node).as_str())
}

/// Whether `node` published one of `got`; if not, which publishers did, for a wait's message.
fn heard_from(got: &[Got], node: NodeId) -> Result<(), String> {
    if got.iter().any(|tick| published_by(tick, node)) {
        return Ok(());
    }
    let publishers: BTreeSet<Option<&str>> =
        got.iter().map(|tick| tick.app_id.as_deref()).collect();
    Err(format!(
        "{} ticks, none from {} (their app_ids: {publishers:?})",
        got.len(),
        app_id(node)
    ))
}

/// One line per delivery, for a failure message: its instant, its publisher and when it arrived
/// relative to `since` (negative: before).
fn digest(got: &[Got], since: Instant) -> String {
    let lines: Vec<String> = got
        .iter()
        .map(|tick| {
            let arrived = if tick.at >= since {
                format!("+{:?}", tick.at - since)
            } else {
                format!("-{:?}", since - tick.at)
            };
            format!(
                "{} from {} at {arrived}",
                tick.instant_ms().unwrap_or_default(),
                tick.app_id.as_deref().unwrap_or("no app_id")
            )
        })
        .collect();
    lines.join("\n")
}

/// A fault a test injected, and what every watched clock's deliveries must show around it
/// (SPEC §7: no tick lost, a repeat keeps its id, only the leader publishes).
struct Fault {
    /// The cluster's nodes: every tick must name one of them as its publisher.
    nodes: Vec<NodeId>,
    /// The leader before the fault: its ticks must have arrived before the fault, or "the old
    /// leader published nothing" would prove nothing.
    leader_before: NodeId,
    /// The leader after the fault: its ticks must arrive after the fault began.
    leader_after: NodeId,
    /// When the fault began.
    began: Instant,
    /// Nothing the old leader published may arrive after this, when it must have fallen silent.
    old_leader_silent_from: Option<Instant>,
    /// The longest silence a consumer may hear.
    max_silence: Duration,
    /// Instants that may be missing: delivered to a broker that could not hand them on.
    excused: Option<RangeInclusive<u64>>,
}

impl Fault {
    /// A fault that begins now on `cluster`, led by `leader`, with the bounds of a failover.
    /// The test sets the leader after the fault once it knows it.
    fn begins(cluster: &TestCluster, leader: NodeId) -> Fault {
        Fault {
            nodes: cluster.node_ids(),
            leader_before: leader,
            leader_after: leader,
            began: Instant::now(),
            old_leader_silent_from: None,
            max_silence: FAILOVER_SILENCE,
            excused: None,
        }
    }

    /// Checks one clock's deliveries, `got`, recorded until `observed_until_ms`.
    fn assert_held(&self, name: &str, got: &[Got], observed_until_ms: u64) {
        let cluster_ids: BTreeSet<String> = self.nodes.iter().map(|node| app_id(*node)).collect();
        let anonymous: Vec<&Got> = got
            .iter()
            .filter(|tick| {
                !tick
                    .app_id
                    .as_ref()
                    .is_some_and(|id| cluster_ids.contains(id))
            })
            .collect();
        assert!(
            anonymous.is_empty(),
            "{name}: {} of {} ticks without the app_id of a node of the cluster {cluster_ids:?}; \
             received (instant, publisher, arrival since the fault):\n{}",
            anonymous.len(),
            got.len(),
            digest(got, self.began)
        );
        let (before, after) = (self.leader_before, self.leader_after);
        assert!(
            got.iter()
                .any(|tick| tick.at < self.began && published_by(tick, before)),
            "{name}: no tick from the leader before the fault ({}) arrived before it; received \
             (instant, publisher, arrival since the fault):\n{}",
            app_id(before),
            digest(got, self.began)
        );
        assert!(
            got.iter()
                .any(|tick| tick.at > self.began && published_by(tick, after)),
            "{name}: ticking did not resume: no tick from the leader after the fault ({}) \
             arrived after it began; received (instant, publisher, arrival since the fault):\n{}",
            app_id(after),
            digest(got, self.began)
        );
        if let Some(silent_from) = self.old_leader_silent_from {
            let late: Vec<Got> = got
                .iter()
                .filter(|tick| tick.at > silent_from && published_by(tick, before))
                .cloned()
                .collect();
            assert!(
                late.is_empty(),
                "{name}: the old leader published after it had to fall silent, {:?} after \
                 the fault:\n{}",
                silent_from - self.began,
                digest(&late, self.began)
            );
        }

        // A scheduled tick's id is `clock-instant`, the same on every delivery: an instant
        // under two ids, or an id that is not that, is a repeat under a new id.
        let mut ids: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for tick in got {
            let scheduled_at = tick.body["scheduled_at"].as_str().unwrap_or_default();
            ids.entry(scheduled_at).or_default().insert(tick.tick_id());
        }
        let renamed: Vec<_> = ids.iter().filter(|(_, ids)| ids.len() != 1).collect();
        assert!(
            renamed.is_empty(),
            "{name}: instants under several ids: {renamed:?}"
        );
        let instants: BTreeSet<u64> = got
            .iter()
            .map(|tick| {
                let instant = tick.instant_ms();
                let clock = tick.body["clock"].as_str().unwrap_or_default();
                assert!(
                    instant.is_some_and(|at| tick.tick_id() == format!("{clock}-{at}")),
                    "{name}: a scheduled tick whose id is not `clock-instant`: {tick:?}"
                );
                instant.unwrap_or_default()
            })
            .collect();

        // Every instant from the first delivered (before the fault, checked above) to one
        // [`TAIL`] before the end of observation, by the wall clock: a cluster that went
        // silent at the fault has nothing near the end.
        let first = instants.first().copied().unwrap_or_default();
        let newest_due = observed_until_ms.saturating_sub(millis(TAIL)) / INTERVAL_MS * INTERVAL_MS;
        let excused = |at: &u64| {
            self.excused
                .as_ref()
                .is_some_and(|range| range.contains(at))
        };
        let missing: Vec<u64> = (first / INTERVAL_MS..=newest_due / INTERVAL_MS)
            .map(|n| n * INTERVAL_MS)
            .filter(|at| !instants.contains(at) && !excused(at))
            .collect();
        assert!(
            missing.is_empty(),
            "{name}: no tick for the instants {missing:?}; expected every one from {first} \
             to {newest_due} ({TAIL:?} before observation ended at {observed_until_ms}); \
             delivered: {instants:?}"
        );

        let mut times: Vec<Instant> = got.iter().map(|tick| tick.at).collect();
        times.sort();
        let longest = times
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .max()
            .unwrap_or_default();
        assert!(
            longest < self.max_silence,
            "{name}: a silence of {longest:?} (at most {:?})",
            self.max_silence
        );
    }

    /// Checks every watched clock, then stops watching.
    async fn assert_held_by_all(&self, watches: Vec<(String, Watch)>) {
        for (name, watch) in watches {
            let observed_until_ms = unix_ms();
            self.assert_held(&name, &watch.got(), observed_until_ms);
            watch.stop().await;
        }
    }
}

/// Five consumed clocks of `schedule` (one instant a second) and the leader, once every clock
/// has received a tick the leader published.
async fn five_consumed_clocks(
    cluster: &TestCluster,
    schedule: &str,
) -> (Vec<(String, Watch)>, NodeId) {
    let mut watches = Vec::new();
    for index in 0..5 {
        let name = unique_name(&format!("failover-{index}"));
        let clock = register_ok(cluster, 1 + index % 3, &name, schedule).await;
        watches.push((name, Watch::start(cluster, &clock, 1).await));
    }
    let leader = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    for (name, watch) in &watches {
        let what = format!("{name}: a tick from the leader, app_id {}", app_id(leader));
        eventually(
            &what,
            FIRST_TICKS_WITHIN,
            Duration::from_millis(50),
            || async { heard_from(&watch.got(), leader) },
        )
        .await;
    }
    (watches, leader)
}

/// A cron schedule with the instants of [`SCHEDULE`], in a zone 5 h 45 min off UTC: its local
/// times go through the zone database and the daylight-saving rule, its instants do not move.
const CRON_SCHEDULE: &str = "TZ=Asia/Kathmandu * * * * * *";

#[tokio::test]
async fn leader_kill_loses_no_tick() {
    leader_kill_loses_no_tick_of(SCHEDULE).await;
}

#[tokio::test]
async fn leader_kill_loses_no_tick_of_a_cron_clock() {
    leader_kill_loses_no_tick_of(CRON_SCHEDULE).await;
}

async fn leader_kill_loses_no_tick_of(schedule: &str) {
    let cluster = cluster(Mode::Rabbit).await;
    let (watches, leader) = five_consumed_clocks(&cluster, schedule).await;
    let mut fault = Fault::begins(&cluster, leader);
    cluster.kill(leader);
    fault.leader_after = cluster
        .wait_for_new_leader(leader, AGREED_LEADER_WITHIN)
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.restart(leader);
    cluster.wait_healthy(leader, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    fault.assert_held_by_all(watches).await;
}

/// How long the stopped leader sleeps: longer than a failover, so that its successor publishes
/// meanwhile and the old leader wakes with ticks long overdue that only its lease holds back.
const STOPPED_FOR: Duration = Duration::from_secs(6);

#[tokio::test]
async fn a_stopped_leader_publishes_nothing_when_it_wakes() {
    let cluster = cluster(Mode::Rabbit).await;
    let (watches, leader) = five_consumed_clocks(&cluster, SCHEDULE).await;
    let mut fault = Fault::begins(&cluster, leader);
    cluster.stop(leader);
    fault.leader_after = cluster
        .wait_for_new_leader(leader, AGREED_LEADER_WITHIN)
        .await;
    tokio::time::sleep(STOPPED_FOR.saturating_sub(fault.began.elapsed())).await;
    cluster.cont(leader);
    // What the old leader handed to the broker before it was stopped may still arrive once
    // it wakes; anything later it published awake, when its lease was long gone.
    fault.old_leader_silent_from = Some(Instant::now() + DELIVERY);
    tokio::time::sleep(Duration::from_secs(3)).await;
    fault.assert_held_by_all(watches).await;
}

/// The clock TTL of the purge test: short, so that a clock goes through it several times.
const PURGE_TTL: Duration = Duration::from_secs(3);

#[tokio::test]
async fn unconsumed_clocks_are_purged_and_paused_ones_kept() {
    for mode in [Mode::Http, Mode::Rabbit] {
        let ttl_ms = u64::try_from(PURGE_TTL.as_millis()).unwrap_or(u64::MAX);
        let builder = TestCluster::builder().nodes(3).clock_ttl_ms(ttl_ms);
        let builder = match mode {
            Mode::Rabbit => builder.rabbit_uri(Some(rabbit::broker().await)),
            Mode::Http => builder,
        };
        let cluster = builder.start().await;
        let abandoned =
            clock_id(&register_ok(&cluster, 1, &unique_name("abandoned"), "every.1.seconds").await);
        let kept =
            clock_id(&register_ok(&cluster, 2, &unique_name("kept"), "every.1.seconds").await);
        // The consumed clock is registered last, so it has been through the TTL by the time
        // the abandoned one is gone; a purge that ignored consumers would take it too.
        let consumed = register_ok(&cluster, 3, &unique_name("consumed"), "every.1.seconds").await;
        let consumed_since = Instant::now();
        let watch = Watch::start(&cluster, &consumed, 1).await;
        let consumed = clock_id(&consumed);
        let (status, _, body) = action(&cluster, 3, &kept, "pause").await;
        assert_eq!(
            (status, body["status"].clone()),
            (StatusCode::OK, Value::from("PAUSED")),
            "{mode:?}: pause {body}"
        );
        let cluster = &cluster;
        let abandoned = &abandoned;
        eventually(
            &format!("{mode:?}: the abandoned clock to be purged"),
            Duration::from_secs(15),
            Duration::from_millis(250),
            || async move {
                (get_clock(cluster, 2, abandoned).await.0 == StatusCode::NOT_FOUND).then_some(())
            },
        )
        .await;
        let (status, _, body) = get_clock(cluster, 1, &kept).await;
        assert_eq!(
            (status, body["status"].clone()),
            (StatusCode::OK, Value::from("PAUSED")),
            "{mode:?}"
        );
        // Two TTLs plus one purge period (a quarter TTL) after its registration, an idle
        // consumed clock would certainly have been purged.
        tokio::time::sleep(
            (PURGE_TTL * 2 + PURGE_TTL / 4).saturating_sub(consumed_since.elapsed()),
        )
        .await;
        let (status, _, body) = get_clock(cluster, 2, &consumed).await;
        assert_eq!(
            (status, body["status"].clone()),
            (StatusCode::OK, Value::from("ACTIVE")),
            "{mode:?}: the consumed clock after {:?} {body}",
            consumed_since.elapsed()
        );
        // It still ticks: a scheduled tick due after this point reaches its consumer.
        let checked_at_ms = unix_ms();
        watch
            .wait_for(
                &format!("{mode:?}: a tick of the consumed clock after the purge"),
                Duration::from_secs(5),
                |got| {
                    got.iter()
                        .any(|tick| tick.instant_ms().is_some_and(|at| at > checked_at_ms))
                },
            )
            .await;
        watch.stop().await;
    }
}

#[tokio::test]
async fn a_broker_outage_of_ten_seconds_loses_no_tick() {
    // tickd reaches the broker through a gate that stays shut after the restart until the
    // test's consumer is attached again (see GatedBroker).
    let mut broker = rabbit::GatedBroker::start().await;
    let cluster = TestCluster::builder()
        .nodes(3)
        .rabbit_uri(Some(broker.gated_uri()))
        .start()
        .await;
    let clock = register_ok(&cluster, 2, &unique_name("outage"), SCHEDULE).await;
    let queue = clock["channel"]["details"]["queue"]
        .as_str()
        .expect("a queue");
    let consumer = ResilientConsumer::start(&broker.uri(), queue);
    let leader = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    eventually(
        "ticks from the leader before the outage",
        FIRST_TICKS_WITHIN,
        Duration::from_millis(50),
        || async { heard_from(&received(&consumer), leader) },
    )
    .await;

    let stop_began_ms = unix_ms();
    let mut fault = Fault::begins(&cluster, leader);
    broker.stop();
    let stop_ended_ms = unix_ms();
    tokio::time::sleep(Duration::from_secs(10)).await;
    broker.restart_then_open(&[&consumer]).await;
    let healed_at = Instant::now();
    let healed_ms = unix_ms();
    // The ticks of the outage arrive together once tickd reaches the broker again. Wait for
    // the first instant after the gate opened (up to an interval away), then watch the
    // ticking go on.
    eventually(
        "a tick due after the gate opened",
        RECONNECT_WITHIN.saturating_add(INTERVAL),
        Duration::from_millis(50),
        || async {
            let got = received(&consumer);
            got.iter()
                .any(|tick| tick.instant_ms().is_some_and(|at| at >= healed_ms))
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // None is lost and none is repeated under another id. One exception, which SPEC §5
    // implies: a broker that is shutting down (which takes seconds) closes the consumer's
    // connection first and still confirms the publisher's ticks; those expire in the queue (a
    // scheduled tick lives one interval) while the broker is down. The broker had them;
    // nobody could receive them.
    fault.excused = Some(stop_began_ms.saturating_sub(INTERVAL_MS)..=stop_ended_ms);
    // The longest silence: from the last tick before the stop (up to an interval before it)
    // to the first after tickd is let through again.
    fault.max_silence = (healed_at - fault.began)
        .saturating_add(INTERVAL)
        .saturating_add(RECONNECT_WITHIN);
    // No failover is involved, but leadership may move on a busy machine: the leader that
    // published the outage's ticks is the one at the end.
    fault.leader_after = cluster.wait_for_leader(AGREED_LEADER_WITHIN).await;
    let observed_until_ms = unix_ms();
    fault.assert_held("outage", &received(&consumer), observed_until_ms);
}

#[tokio::test]
async fn an_isolated_leader_is_replaced_and_publishes_nothing_once_its_lease_is_gone() {
    let uri = rabbit::broker().await;
    let cluster = TestCluster::builder()
        .nodes(3)
        .link_proxies()
        .rabbit_uri(Some(uri))
        .start()
        .await;
    let (watches, leader) = five_consumed_clocks(&cluster, SCHEDULE).await;
    let mut fault = Fault::begins(&cluster, leader);
    cluster.isolate(leader);
    fault.leader_after = cluster
        .wait_for_new_leader(leader, AGREED_LEADER_WITHIN)
        .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.heal_links();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The last lease the old leader obtained was asked for before the isolation; a publish
    // pass that checked it may run on a little, and its ticks still have to travel.
    fault.old_leader_silent_from = Some(fault.began + LEASE + PUBLISH_PASS + DELIVERY);
    fault.assert_held_by_all(watches).await;
}
