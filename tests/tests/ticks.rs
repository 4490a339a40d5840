//! The tick engine, black-box: real processes, the real RabbitMQ, SIGKILL and SIGSTOP.
//! Each scenario runs on the channel(s) it is about; the broker scenarios run on both.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::StatusCode;
use serde_json::Value;
use tickd_tests::api::{action, clock_id, get_clock, register};
use tickd_tests::rabbit::{self, Consumers};
use tickd_tests::{NodeId, TestCluster, eventually, unique_name};

/// One delivered tick as a client saw it.
#[derive(Debug, Clone)]
struct Got {
    body: Value,
    at: Instant,
    app_id: Option<String>,
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
            Watch::Rabbit(consumers) => consumers
                .received()
                .into_iter()
                .map(|received| Got {
                    body: received.body.clone(),
                    at: received.at,
                    app_id: received.app_id.clone(),
                })
                .collect(),
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

async fn broker_scenarios(mode: Mode) {
    let cluster = cluster(mode).await;
    // A registered every.2.seconds clock delivers a tick within 3 s.
    let clock = register_ok(&cluster, 2, &unique_name("two"), "every.2.seconds").await;
    let watch = Watch::start(&cluster, &clock, 1).await;
    watch
        .wait_for("a first tick", Duration::from_secs(3), |got| {
            !got.is_empty()
        })
        .await;

    // Pausing stops the ticks.
    let (status, _, _) = action(&cluster, 3, &clock_id(&clock), "pause").await;
    assert_eq!(status, StatusCode::OK);
    let paused_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let after_pause: Vec<Got> = watch
        .got()
        .into_iter()
        .filter(|got| got.at > paused_at + Duration::from_millis(300))
        .collect();
    assert!(
        after_pause.is_empty(),
        "{mode:?}: ticks after the pause: {after_pause:?}"
    );
    watch.stop().await;

    // A manual tick on an @never clock is delivered within 3 s.
    let never = register_ok(&cluster, 1, &unique_name("never"), "@never").await;
    let watch = Watch::start(&cluster, &never, 1).await;
    let (status, _, _) = action(&cluster, 3, &clock_id(&never), "tick").await;
    assert_eq!(status, StatusCode::OK);
    watch
        .wait_for("the manual tick", Duration::from_secs(3), |got| {
            !got.is_empty()
        })
        .await;
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
        "{mode:?}: @never delivers only the manual tick"
    );
    watch.stop().await;
}

#[tokio::test]
async fn broker_scenarios_over_rabbitmq() {
    broker_scenarios(Mode::Rabbit).await;
}

#[tokio::test]
async fn broker_scenarios_over_http() {
    broker_scenarios(Mode::Http).await;
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

/// Checks one clock's deliveries across a fault: every second between the first and the last
/// delivered instant is there, repeats repeat their id (ids are per instant by construction, so
/// a repeat under a new id would show as an extra instant), and the longest silence is short.
fn assert_no_tick_lost(name: &str, got: &[Got], max_gap: Duration) {
    assert_no_tick_lost_but(name, got, max_gap, |_| false);
}

/// [`assert_no_tick_lost`], except for instants `excused` says may be missing.
fn assert_no_tick_lost_but(
    name: &str,
    got: &[Got],
    max_gap: Duration,
    excused: impl Fn(u64) -> bool,
) {
    let instants: BTreeSet<u64> = got.iter().filter_map(Got::instant_ms).collect();
    let (Some(first), Some(last)) = (instants.first(), instants.last()) else {
        panic!("{name}: no ticks at all");
    };
    let missing: Vec<u64> = (*first..=*last)
        .step_by(1_000)
        .filter(|at| !instants.contains(at) && !excused(*at))
        .collect();
    assert!(missing.is_empty(), "{name}: lost ticks at {missing:?}");
    let mut ids: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for tick in got {
        if let Some(instant) = tick.instant_ms() {
            ids.entry(instant).or_default().insert(tick.tick_id());
        }
    }
    assert!(
        ids.values().all(|ids| ids.len() == 1),
        "{name}: an instant under two ids"
    );
    let mut times: Vec<Instant> = got.iter().map(|tick| tick.at).collect();
    times.sort();
    let longest = times
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or_default();
    assert!(longest < max_gap, "{name}: a gap of {longest:?}");
}

/// After a fault on `old_leader`: for every watched clock, nothing published by the old leader
/// arrived after `silent_from`, and no tick was lost (repeats keep their id, gaps stay short).
async fn assert_old_leader_silent_and_nothing_lost(
    watches: Vec<(String, Watch)>,
    old_leader: NodeId,
    silent_from: Instant,
) {
    let old_app_id = format!("tickd-node-{old_leader}");
    for (name, watch) in watches {
        let got = watch.got();
        let from_old = published_by_since(&got, &old_app_id, silent_from);
        assert!(
            from_old.is_empty(),
            "{name}: the old leader published {from_old:?}"
        );
        assert_no_tick_lost(&name, &got, Duration::from_millis(2_500));
        watch.stop().await;
    }
}

/// The ticks that the node with `app_id` published and that arrived after `since`.
fn published_by_since<'a>(got: &'a [Got], app_id: &str, since: Instant) -> Vec<&'a Got> {
    got.iter()
        .filter(|tick| tick.at > since && tick.app_id.as_deref() == Some(app_id))
        .collect()
}

async fn five_consumed_clocks(cluster: &TestCluster) -> Vec<(String, Watch)> {
    let mut watches = Vec::new();
    for index in 0..5 {
        let name = unique_name(&format!("failover-{index}"));
        let clock = register_ok(cluster, 1 + index % 3, &name, "every.1.seconds").await;
        watches.push((name, Watch::start(cluster, &clock, 1).await));
    }
    for (name, watch) in &watches {
        watch
            .wait_for(&format!("{name} ticking"), Duration::from_secs(5), |got| {
                got.len() >= 2
            })
            .await;
    }
    watches
}

#[tokio::test]
async fn leader_kill_loses_no_tick() {
    let cluster = cluster(Mode::Rabbit).await;
    let watches = five_consumed_clocks(&cluster).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(3)).await;
    cluster.kill(leader);
    cluster
        .wait_for_new_leader(leader, Duration::from_secs(5))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.restart(leader);
    cluster.wait_healthy(leader, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (name, watch) in watches {
        assert_no_tick_lost(&name, &watch.got(), Duration::from_millis(2_500));
        watch.stop().await;
    }
}

#[tokio::test]
async fn a_stopped_leader_publishes_nothing_when_it_wakes() {
    let cluster = cluster(Mode::Rabbit).await;
    let watches = five_consumed_clocks(&cluster).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(3)).await;
    cluster.stop(leader);
    tokio::time::sleep(Duration::from_secs(6)).await;
    cluster.cont(leader);
    let woke = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Anything the old leader publishes after waking would be new: its lease is long gone.
    assert_old_leader_silent_and_nothing_lost(watches, leader, woke + Duration::from_millis(200))
        .await;
}

#[tokio::test]
async fn unconsumed_clocks_are_purged_and_paused_ones_kept() {
    for mode in [Mode::Http, Mode::Rabbit] {
        let builder = TestCluster::builder().nodes(3).clock_ttl_ms(3_000);
        let builder = match mode {
            Mode::Rabbit => builder.rabbit_uri(Some(rabbit::broker().await)),
            Mode::Http => builder,
        };
        let cluster = builder.start().await;
        let abandoned =
            clock_id(&register_ok(&cluster, 1, &unique_name("abandoned"), "every.1.seconds").await);
        let kept =
            clock_id(&register_ok(&cluster, 2, &unique_name("kept"), "every.1.seconds").await);
        action(&cluster, 3, &kept, "pause").await;
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
    let clock = register_ok(&cluster, 2, &unique_name("outage"), "every.1.seconds").await;
    let queue = clock["channel"]["details"]["queue"]
        .as_str()
        .expect("a queue");
    let consumer = rabbit::ResilientConsumer::start(&broker.uri(), queue);
    eventually(
        "ticks before the outage",
        Duration::from_secs(5),
        Duration::from_millis(50),
        || async { (consumer.received().len() >= 2).then_some(()) },
    )
    .await;

    let stop_began_ms = unix_ms();
    let stop_began = Instant::now();
    broker.stop();
    let stop_ended_ms = unix_ms();
    tokio::time::sleep(Duration::from_secs(10)).await;
    broker.restart_then_open(&[&consumer]).await;
    let healed_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;

    let got: Vec<Got> = consumer
        .received()
        .into_iter()
        .map(|received| Got {
            body: received.body.clone(),
            at: received.at,
            app_id: received.app_id.clone(),
        })
        .collect();
    // The ticks of the outage arrive together once tickd reaches the broker again; none is
    // lost and none is repeated under another id. One exception, which SPEC §5 implies: a
    // broker that is shutting down (which takes seconds) closes the consumer's connection
    // first and still confirms the publisher's ticks; those expire in the queue (a scheduled
    // tick lives one interval) while the broker is down. The broker had them; nobody could
    // receive them.
    let confirmed_then_expired =
        |instant: u64| (stop_began_ms.saturating_sub(1_000)..=stop_ended_ms).contains(&instant);
    // The longest silence: from the last tick before the stop (up to an interval before it)
    // to the first after tickd is let through again.
    let outage = healed_at - stop_began + Duration::from_secs(1);
    assert_no_tick_lost_but(
        "outage",
        &got,
        outage + Duration::from_secs(3),
        confirmed_then_expired,
    );
    let instants: BTreeSet<u64> = got.iter().filter_map(Got::instant_ms).collect();
    assert!(
        instants.len() >= 14,
        "ticks across the whole outage: {}",
        instants.len()
    );
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
    let watches = five_consumed_clocks(&cluster).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(3)).await;
    cluster.isolate(leader);
    let isolated_at = Instant::now();
    let successor = cluster
        .wait_for_new_leader(leader, Duration::from_secs(5))
        .await;
    assert_ne!(successor, leader);
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.heal_links();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The lease (350 ms) runs out before anyone else can be elected; allow for delivery.
    let silent_from = isolated_at + Duration::from_millis(600);
    assert_old_leader_silent_and_nothing_lost(watches, leader, silent_from).await;
}
