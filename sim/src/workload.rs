//! The clients of a simulated run: each sends one operation at a time to a node drawn from the
//! seed — registrations of a few `@never` names, pauses, resumes, reads, lists and manual
//! ticks — and records it as the chaos suite records its clients' ([`Event`]), so the same
//! linearizability and durability checkers judge both.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tickd_domain::{Channel, ClockId, Command, Outcome, Overlap, Registry, Schedule};
use tickd_tests::chaos::history::{Event, Op, OpResult};
use tickd_tests::chaos::rng::Rng;
use tokio::time::Instant;

use crate::client::{self, Found};
use crate::log_store::lock;
use crate::world::World;

/// The names the clients register: few, so that they collide (one clock per pair).
pub const NAMES: [&str; 4] = ["alpha", "bravo", "charlie", "delta"];
/// The most clocks the workload's registrations may create (production's default).
const MAX_CLOCKS: u64 = 1_000_000;

/// The `@never` schedule of the workload's clocks: they never tick, so they never expire.
pub fn never() -> Schedule {
    // A literal of the schedule grammar, which parses on every build.
    Schedule::parse("@never").unwrap_or_else(|_| unreachable!("@never is a schedule"))
}

/// A clock id drawn from the seed: 32 hex digits, as the API draws them.
pub fn draw_id(rng: &mut Rng) -> ClockId {
    ClockId::new(format!("{:016x}{:016x}", rng.next_u64(), rng.next_u64()))
}

/// A request id drawn from the seed, as the API draws one for a manual tick, pause, resume or
/// pop: its retries carry it, and apply takes it once.
pub fn draw_request(rng: &mut Rng) -> String {
    format!("{:016x}{:016x}", rng.next_u64(), rng.next_u64())
}

/// What the clients share: the ids registrations returned, and the history.
#[derive(Default)]
pub struct Shared {
    /// Ids some registration returned, for pauses, resumes and reads to name.
    pub known: Mutex<Vec<ClockId>>,
    /// Every operation, in the order they ended.
    pub events: Mutex<Vec<Event>>,
    /// Manual ticks acknowledged, for the report.
    pub manual_ticks: Mutex<u64>,
}

/// One client.
pub struct Client {
    /// Its number in the history.
    pub number: usize,
    /// Its choices.
    pub rng: Rng,
    /// The world.
    pub world: Arc<World>,
    /// How many nodes there are (ids 1..=nodes).
    pub nodes: u64,
    /// What it shares with the others.
    pub shared: Arc<Shared>,
    /// The watched clocks, which manual ticks go to.
    pub watched: Vec<ClockId>,
    /// When it stops.
    pub until: Instant,
}

fn status_of(found: Found) -> OpResult {
    match found {
        Some((_, status)) => OpResult::Status(status.to_string()),
        None => OpResult::NotFound,
    }
}

fn get_clock(registry: &Registry, id: &str) -> Found {
    registry
        .get(&ClockId::new(id.to_string()))
        .map(|clock| (clock.id.clone(), clock.status.as_str()))
}

fn find_name(registry: &Registry, name: &str) -> Found {
    registry
        .find(name, &never())
        .map(|clock| (clock.id.clone(), clock.status.as_str()))
}

impl Client {
    fn draw_request(&mut self) -> String {
        draw_request(&mut self.rng)
    }

    fn pick_known(&mut self) -> Option<ClockId> {
        let known = lock(&self.shared.known);
        (!known.is_empty()).then(|| self.rng.pick(&known).clone())
    }

    async fn register(&mut self, node: u64, name: &str) -> OpResult {
        let id = draw_id(&mut self.rng);
        let command = Command::Register {
            name: name.to_string(),
            schedule: never(),
            id,
            channel: Channel::Rabbit,
            max_clocks: MAX_CLOCKS,
            now_ms: self.world.wall_ms(node),
            overlap: Overlap::Allow,
        };
        match client::write(&self.world, node, command).await {
            Ok(Outcome::Registered { clock, created }) => {
                lock(&self.shared.known).push(clock.id.clone());
                let status = if created {
                    "PENDING"
                } else {
                    clock.status.as_str()
                };
                OpResult::Registered {
                    id: clock.id.to_string(),
                    status: status.to_string(),
                }
            }
            Ok(other) => OpResult::Indeterminate(format!("answered {other:?}")),
            Err(why) => OpResult::Indeterminate(why),
        }
    }

    async fn set_state(&mut self, node: u64, command: Command) -> OpResult {
        match client::write(&self.world, node, command).await {
            Ok(Outcome::Updated(clock)) => OpResult::Status(clock.status.as_str().to_string()),
            Ok(Outcome::NotFound) => OpResult::NotFound,
            Ok(other) => OpResult::Indeterminate(format!("answered {other:?}")),
            Err(why) => OpResult::Indeterminate(why),
        }
    }

    async fn manual_tick(&mut self, node: u64) {
        let Some(id) = self.watched.first().cloned() else {
            return;
        };
        let command = Command::Tick {
            id,
            now_ms: self.world.wall_ms(node),
            request: Some(self.draw_request()),
        };
        if let Ok(Outcome::Filed(_)) = client::write(&self.world, node, command).await {
            let mut ticks = lock(&self.shared.manual_ticks);
            *ticks = ticks.saturating_add(1);
        }
    }

    /// Sends operations until `until`.
    pub async fn run(mut self) {
        while Instant::now() < self.until {
            let node = 1 + self.rng.below(self.nodes);
            let start_ms = self.world.true_ms();
            let draw = self.rng.below(100);
            let (op, result) = match (draw, self.pick_known()) {
                (0..5, _) => {
                    self.manual_tick(node).await;
                    continue;
                }
                (5..40, _) | (_, None) => {
                    let name = *self.rng.pick(&NAMES);
                    let result = self.register(node, name).await;
                    (
                        Op::Register {
                            name: name.to_string(),
                        },
                        result,
                    )
                }
                (40..60, Some(id)) => {
                    let command = Command::Pause {
                        id: id.clone(),
                        now_ms: self.world.wall_ms(node),
                        request: Some(self.draw_request()),
                    };
                    (
                        Op::Pause { id: id.to_string() },
                        self.set_state(node, command).await,
                    )
                }
                (60..80, Some(id)) => {
                    let command = Command::Resume {
                        id: id.clone(),
                        now_ms: self.world.wall_ms(node),
                        request: Some(self.draw_request()),
                    };
                    (
                        Op::Resume { id: id.to_string() },
                        self.set_state(node, command).await,
                    )
                }
                (80..90, Some(id)) => {
                    let found = client::read(&self.world, node, get_clock, id.to_string()).await;
                    let result = found.map_or_else(OpResult::Indeterminate, status_of);
                    (Op::Get { id: id.to_string() }, result)
                }
                (_, Some(_)) => {
                    let name = *self.rng.pick(&NAMES);
                    let found = client::read(&self.world, node, find_name, name.to_string()).await;
                    let result = match found {
                        Ok(found) => OpResult::Listed(
                            found
                                .map(|(id, status)| (id.to_string(), status.to_string()))
                                .into_iter()
                                .collect(),
                        ),
                        Err(why) => OpResult::Indeterminate(why),
                    };
                    (
                        Op::ListByName {
                            name: name.to_string(),
                        },
                        result,
                    )
                }
            };
            let event = Event {
                client: self.number,
                node,
                op,
                start_ms,
                end_ms: self.world.true_ms(),
                result,
            };
            self.world.record(format_args!(
                "client {} node {node}: {:?} -> {:?}",
                self.number, event.op, event.result
            ));
            lock(&self.shared.events).push(event);
            tokio::time::sleep(Duration::from_millis(10 + self.rng.below(190))).await;
        }
    }
}
