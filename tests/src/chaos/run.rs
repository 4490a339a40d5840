//! One chaos run: start a cluster on power-loss filesystems, run the workload and the nemesis,
//! heal, cut the power of every node and restart them, and check the history. Besides the
//! clocks of the run's channel, every run watches [`WEBHOOK_CLOCKS`] webhook clocks (see
//! [`crate::chaos::webhooks`]) and [`LEASE_CLOCKS`] lease clocks (see
//! [`crate::chaos::leases`]).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde_json::Value;

use crate::TestCluster;
use crate::chaos::check::{self, durability, linearizable, liveness, ticks};
use crate::chaos::history::{Fault, LeaderRecovery, Op, OpResult, Violation, WatchedClock};
use crate::chaos::leases::{self, LEASE_CLOCKS, LeaseClock};
use crate::chaos::nemesis::{self, LEADER_BOUND};
use crate::chaos::rng::Rng;
use crate::chaos::time::now_ms;
use crate::chaos::webhooks::{WEBHOOK_CLOCKS, WebhookWatch};
use crate::chaos::workload::{self, Consumer, Records};
use crate::power::{Loss, PowerCluster};
use crate::rabbit::{GatedBroker, ResilientConsumer};

/// Registry clients running at once.
const CLIENTS: usize = 3;
/// Names the registry clients share: few, so that they collide on the same clocks.
const NAMES: usize = 5;
/// Clocks whose every tick is checked.
const WATCHED: usize = 3;
/// After the last fault heals, every watched clock must tick within this bound.
pub(crate) const LIVENESS_BOUND: Duration = Duration::from_secs(5);
/// The cluster's catch-up window (the default); no fault lasts longer.
pub(crate) const CATCH_UP_MS: u64 = 60_000;

/// The channel a run's clocks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// RabbitMQ, on a private broker the nemesis may stop.
    Rabbit,
    /// The http pop route.
    Http,
}

/// What one run did and found.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The run's seed: `scripts/chaos --runs 1 --seed <seed>` replays its choices.
    pub seed: u64,
    /// The channel of its clocks.
    pub channel: Channel,
    /// The faults injected.
    pub faults: Vec<Fault>,
    /// What the power loss of every node before the final check dropped.
    pub final_loss: Loss,
    /// Client operations recorded.
    pub operations: usize,
    /// Tick figures of the watched clocks of the run's channel.
    pub ticks: ticks::TickReport,
    /// Tick figures of the watched webhook clocks, judged by the strict rule.
    pub webhook_ticks: ticks::TickReport,
    /// Tick figures of the lease clocks: every instant acked exactly once.
    pub lease_ticks: check::leases::LeaseReport,
    /// Every broken guarantee.
    pub violations: Vec<Violation>,
}

impl RunReport {
    /// The slowest recovery of a leader after a fault, in ms.
    pub fn max_time_to_leader_ms(&self) -> u64 {
        self.faults
            .iter()
            .filter_map(Fault::time_to_leader_ms)
            .max()
            .unwrap_or(0)
    }
}

/// The channel of the run with `seed`: even seeds use RabbitMQ, odd ones http.
pub fn channel_of(seed: u64) -> Channel {
    if seed.is_multiple_of(2) {
        Channel::Rabbit
    } else {
        Channel::Http
    }
}

/// Runs one chaos run of `seconds` of workload, on a cluster whose nodes keep their data on
/// power-loss filesystems (so that the nemesis can cut their power): it fails, without
/// skipping, when `/dev/fuse` or `tickd-powerloss` is missing.
pub async fn run_one(seed: u64, seconds: u64) -> RunReport {
    let mut rng = Rng::new(seed);
    // Forked first, so that the faults a seed draws do not depend on how many attempts the
    // watched clocks' registrations took.
    let nemesis_rng = rng.fork();
    let channel = channel_of(seed);
    let mut broker = match channel {
        Channel::Rabbit => Some(GatedBroker::start().await),
        Channel::Http => None,
    };
    let webhooks = WebhookWatch::start().await;
    let builder = TestCluster::builder()
        .link_proxies()
        .skewable_clocks()
        .setting("webhook_allow_private", "true")
        .rabbit_uri(broker.as_ref().map(GatedBroker::gated_uri));
    let power = PowerCluster::start(builder, 3).await;
    let cluster: &TestCluster = &power;
    let broker_uri = broker.as_ref().map(GatedBroker::uri);
    let records = Records::default();
    let mut violations = Vec::new();

    // The watched clocks, with their consumers; the last one is paused and resumed.
    let mut watched = Vec::new();
    let mut consumers = Vec::new();
    for index in 0..WATCHED {
        let name = format!("watched-{seed}-{index}");
        let Some(created) = register_with_retries(cluster, &name, &mut rng).await else {
            violations.push(Violation {
                checker: "workload",
                detail: format!("could not register the watched clock {name} at all"),
            });
            continue;
        };
        consumers.push(Consumer::start(
            cluster,
            &created,
            broker_uri.as_deref(),
            rng.fork(),
            records.clone(),
        ));
        watched.push(WatchedClock::every_second(&created, now_ms()));
    }

    let client_rngs: Vec<Rng> = (0..CLIENTS).map(|_| rng.fork()).collect();
    let pauser_rng = rng.fork();
    // Forked after every fork that seeds drew before the webhook clocks existed, so that they
    // replay what they replayed.
    let mut webhook_rng = rng.fork();
    let mut webhook_watched = Vec::new();
    for index in 0..WEBHOOK_CLOCKS {
        let name = format!("webhook-{seed}-{index}");
        let body = webhooks.registration(&name);
        if let Some(created) =
            register_watched(cluster, &body, "webhook", &mut webhook_rng, &mut violations).await
        {
            webhook_watched.push(WatchedClock::every_second(&created, now_ms()));
        }
    }
    // Forked after the webhook clocks' fork, for the same reason.
    let mut lease_rng = rng.fork();
    let mut lease_clocks = Vec::new();
    for index in 0..LEASE_CLOCKS {
        let name = format!("lease-{seed}-{index}");
        let body = leases::registration(&name);
        let Some(created) =
            register_watched(cluster, &body, "http", &mut lease_rng, &mut violations).await
        else {
            continue;
        };
        match LeaseClock::registered(&created, now_ms()) {
            Some(clock) => lease_clocks.push(clock),
            None => violations.push(Violation {
                checker: "workload",
                detail: format!("the lease clock {name} names no queue to lease: {created}"),
            }),
        }
    }

    // Everything up to the end of consumption runs beside the lease clocks' consumers.
    let exercise = async {
        let until_ms = now_ms() + seconds * 1_000;
        let names: Vec<String> = (0..NAMES)
            .map(|index| format!("chaos-{seed}-{index}"))
            .collect();
        let ids = Mutex::new(BTreeMap::new());
        let clients_until_ms = AtomicU64::new(until_ms);
        let clients = client_rngs
            .into_iter()
            .enumerate()
            .map(|(client, client_rng)| {
                workload::registry_client(
                    cluster,
                    client,
                    &names,
                    &ids,
                    client_rng,
                    &clients_until_ms,
                    &records,
                )
            });
        let rabbit_consumers: Vec<_> = consumers.iter().filter_map(Consumer::rabbit).collect();
        let (faults, pauses, _) = tokio::join!(
            nemesis::run(
                &power,
                broker.as_mut().map(|broker| nemesis::RabbitSide {
                    broker,
                    consumers: &rabbit_consumers,
                }),
                nemesis_rng,
                until_ms
            ),
            pause_and_resume(
                cluster,
                watched.last().map(|clock| clock.id.clone()),
                pauser_rng,
                until_ms
            ),
            futures::future::join_all(clients),
        );
        let healed = heal(cluster, broker.as_mut(), &rabbit_consumers).await;
        (faults, pauses, healed)
    };
    let ((faults, pauses, healed), leased) =
        leases::consume_during(cluster, &lease_clocks, &mut lease_rng, exercise).await;
    let Healed {
        heal_ms,
        leader_at_ms,
        consumed_until_ms,
    } = healed;
    match pauses {
        Some(window) => {
            if let Some(clock) = watched.last_mut() {
                clock.paused = vec![(window.paused_at, Some(window.resume_sent))];
                clock.unsettled = vec![
                    (window.pause_sent, window.paused_at),
                    (window.resume_sent, window.resumed_at),
                ];
            }
        }
        None => {
            watched.pop();
        }
    }

    for consumer in consumers {
        consumer.stop();
    }
    violations.extend(webhooks.record_into(&records, consumed_until_ms));

    // The final full restart follows a power loss of every node: what survives it is what the
    // cluster kept on disk.
    let final_loss = power.lose_power_of(&nemesis::live_nodes(cluster));
    cluster.kill_all();
    cluster.restart_all();
    let final_state = final_state(cluster).await;
    let events = records.events();
    let deliveries = records.deliveries();
    match final_state {
        Some(state) => violations.extend(durability::check(&events, &state)),
        None => violations.push(Violation {
            checker: "liveness",
            detail: "the cluster did not serve a list after the final full restart".to_string(),
        }),
    }
    violations.extend(linearizable::check(&events));
    let window = (
        watched
            .iter()
            .map(|clock| clock.registered_ms)
            .min()
            .unwrap_or(heal_ms),
        consumed_until_ms - 2_000,
    );
    let unanswered = records.unanswered_pops();
    let tick_report = ticks::check(&watched, &deliveries, &unanswered, window, CATCH_UP_MS);
    violations.extend(tick_report.violations.iter().cloned());
    // The receiver is never faulted: every instant of a webhook clock must arrive within the
    // liveness bound of the heal (or of the instant, when due after it), so the window ends
    // one bound before the consumers stopped.
    let bound_ms = u64::try_from(LIVENESS_BOUND.as_millis()).unwrap_or(u64::MAX);
    let webhook_report = ticks::check_strict(
        &webhook_watched,
        &deliveries,
        (window.0, consumed_until_ms.saturating_sub(bound_ms)),
        heal_ms,
        bound_ms,
    );
    violations.extend(webhook_report.violations.iter().cloned());
    // The lease clocks' consumers are never faulted either, and acked whatever they were handed
    // until they stopped: every instant up to one bound before that is acked, exactly once.
    let lease_watched: Vec<WatchedClock> = lease_clocks
        .iter()
        .map(|clock| clock.watched.clone())
        .collect();
    let lease_report = check::leases::check(
        &lease_watched,
        &leased,
        (window.0, consumed_until_ms.saturating_sub(bound_ms)),
    );
    violations.extend(lease_report.violations.iter().cloned());
    let every_watched = [watched.as_slice(), webhook_watched.as_slice()].concat();
    violations.extend(liveness::check(
        heal_ms,
        leader_at_ms,
        &every_watched,
        &deliveries,
        bound_ms,
    ));
    // The nemesis waits at most LEADER_BOUND for a new leader after a fault that took the old
    // one away; a fault that outlasted it is a broken liveness promise, not just a slow run.
    violations.extend(faults.iter().filter_map(|fault| match fault.leader {
        LeaderRecovery::NotWithin { bound_ms } => Some(Violation {
            checker: "liveness",
            detail: format!(
                "no leader was agreed on within {bound_ms} ms of the fault \"{}\"",
                fault.what
            ),
        }),
        LeaderRecovery::Kept | LeaderRecovery::Elected { .. } => None,
    }));
    RunReport {
        seed,
        channel,
        faults,
        final_loss,
        operations: events.len(),
        ticks: tick_report,
        webhook_ticks: webhook_report,
        lease_ticks: lease_report,
        violations,
    }
}

/// When the run healed its last fault, when it then saw a leader, and when its consumers
/// stopped.
struct Healed {
    heal_ms: u64,
    leader_at_ms: Option<u64>,
    consumed_until_ms: u64,
}

/// Heals everything — the links, every node running, the broker up — then waits for a leader
/// and gives the consumers the liveness bound and a second more to receive what is due.
async fn heal(
    cluster: &TestCluster,
    broker: Option<&mut GatedBroker>,
    rabbit_consumers: &[&ResilientConsumer],
) -> Healed {
    let heal_ms = now_ms();
    cluster.heal_links();
    for node in cluster.node_ids() {
        if !cluster.is_running(node) {
            cluster.restart(node);
        }
    }
    if let Some(broker) = broker
        && !broker.is_running()
    {
        broker.restart_then_open(rabbit_consumers).await;
    }
    let leader_at_ms = nemesis::await_leader(cluster, LEADER_BOUND)
        .await
        .map(|_| now_ms());
    tokio::time::sleep(LIVENESS_BOUND + Duration::from_secs(1)).await;
    Healed {
        heal_ms,
        leader_at_ms,
        consumed_until_ms: now_ms(),
    }
}

/// Registers one of the run's own watched clocks, described by `body`, through random nodes;
/// `None`, with a violation, when no node registered it or it came back on another channel
/// than `channel`.
async fn register_watched(
    cluster: &TestCluster,
    body: &Value,
    channel: &str,
    rng: &mut Rng,
    violations: &mut Vec<Violation>,
) -> Option<Value> {
    let name = body["name"].as_str().unwrap_or_default();
    let Some(created) = register_body_with_retries(cluster, body, rng).await else {
        violations.push(Violation {
            checker: "workload",
            detail: format!("could not register the {channel} clock {name} at all"),
        });
        return None;
    };
    if created["channel"]["type"] != channel {
        violations.push(Violation {
            checker: "workload",
            detail: format!("the {channel} clock {name} was registered as {created}"),
        });
        return None;
    }
    Some(created)
}

/// Registers a watched clock, retrying through the nodes until one answers.
pub(crate) async fn register_with_retries(
    cluster: &TestCluster,
    name: &str,
    rng: &mut Rng,
) -> Option<Value> {
    let body = serde_json::json!({ "name": name, "schedule": "every.1.seconds" });
    register_body_with_retries(cluster, &body, rng).await
}

/// Registers the clock `body` describes, retrying through the nodes until one answers 201.
async fn register_body_with_retries(
    cluster: &TestCluster,
    body: &Value,
    rng: &mut Rng,
) -> Option<Value> {
    let nodes = cluster.node_ids();
    for _ in 0..20 {
        let node = *rng.pick(&nodes);
        let request =
            crate::api::authed(cluster, reqwest::Method::POST, node, "/api/v1/clocks").json(body);
        if let Ok((reqwest::StatusCode::CREATED, _, body)) = crate::api::try_send(request).await {
            return Some(body);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// When the pause and the resume of a watched clock were sent and acknowledged.
struct PauseWindow {
    pause_sent: u64,
    paused_at: u64,
    resume_sent: u64,
    resumed_at: u64,
}

/// Pauses one watched clock a third of the way through the run and resumes it two thirds in.
/// `None` when either action got no definite answer at its first attempt: it may or may not
/// have applied, which blurs the window, so such a clock is no longer watched.
async fn pause_and_resume(
    cluster: &TestCluster,
    clock: Option<String>,
    mut rng: Rng,
    until_ms: u64,
) -> Option<PauseWindow> {
    let clock = clock?;
    let third = Duration::from_millis(until_ms.saturating_sub(now_ms()) / 3);
    let nodes = cluster.node_ids();
    tokio::time::sleep(third).await;
    let pause_sent = now_ms();
    let pause = Op::Pause { id: clock.clone() };
    let OpResult::Status(_) = workload::perform(cluster, *rng.pick(&nodes), &pause).await else {
        return None;
    };
    let paused_at = now_ms();
    tokio::time::sleep(third).await;
    let resume = Op::Resume { id: clock };
    let resume_sent = now_ms();
    let OpResult::Status(_) = workload::perform(cluster, *rng.pick(&nodes), &resume).await else {
        return None;
    };
    Some(PauseWindow {
        pause_sent,
        paused_at,
        resume_sent,
        resumed_at: now_ms(),
    })
}

/// Every clock and its status after the final restart, read through the API of the first
/// running node.
pub(crate) async fn final_state(cluster: &TestCluster) -> Option<BTreeMap<String, String>> {
    nemesis::await_leader(cluster, Duration::from_secs(30)).await?;
    let node = *cluster.running_ids().first()?;
    for _ in 0..20 {
        let request = crate::api::authed(cluster, reqwest::Method::GET, node, "/api/v1/clocks");
        if let Ok((reqwest::StatusCode::OK, _, Value::Array(clocks))) =
            crate::api::try_send(request).await
        {
            return Some(
                clocks
                    .iter()
                    .map(|clock| {
                        (
                            clock["id"].as_str().unwrap_or_default().to_string(),
                            clock["status"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect(),
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}
