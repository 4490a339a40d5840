//! `bare-ticker`: the floor for tick lateness — one process, a tokio timer and lapin
//! publishes, no consensus.
//!
//! `bare-ticker --uri AMQP_URI --clocks FILE`, where each line of FILE is `name<TAB>schedule`.
//! It publishes every tick of every clock at its instant to the clock's queue
//! (`ticktok-<name>;<schedule>`, which the caller declared), with the message, properties and
//! publisher confirms tickd uses, until it is killed. What tickd adds on top (the replicated
//! intent, the lease, confirmation through Raft) is exactly what this program leaves out.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use futures::future::join_all;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tickd_domain::{Channel as ClockChannel, ClockId, Schedule, Tick};

/// Publishes the ticks of many clocks with nothing between the timer and the broker.
#[derive(Debug, Parser)]
struct Args {
    /// The RabbitMQ URI.
    #[arg(long)]
    uri: String,
    /// The clocks, one `name<TAB>schedule` per line.
    #[arg(long)]
    clocks: std::path::PathBuf,
}

/// One clock: what its ticks carry and where they go.
struct Clock {
    id: ClockId,
    name: String,
    schedule: Schedule,
    queue: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("bare-ticker: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bare-ticker: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let clocks = read_clocks(&args.clocks)?;
    let connection = Connection::connect(&args.uri, ConnectionProperties::default())
        .await
        .map_err(|e| format!("cannot connect to RabbitMQ: {e}"))?;
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| format!("a channel: {e}"))?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| format!("confirm mode: {e}"))?;

    // The next instant of every clock, earliest first: one timer for all of them.
    let now = now_ms();
    let mut due: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (index, clock) in clocks.iter().enumerate() {
        if let Some(next) = clock.schedule.next_instant_after(now) {
            due.entry(next).or_default().push(index);
        }
    }
    println!("ticking {} clocks", clocks.len());
    while let Some((instant, indices)) = due.pop_first() {
        tokio::time::sleep(Duration::from_millis(instant.saturating_sub(now_ms()))).await;
        publish_all(&channel, &clocks, &indices, instant).await?;
        for index in indices {
            if let Some(next) = clocks[index].schedule.next_instant_after(instant) {
                due.entry(next).or_default().push(index);
            }
        }
    }
    Ok(())
}

/// Publishes the ticks due at `instant` in one burst: every frame is queued before the first
/// is awaited, and confirmations are awaited off the timer's path.
async fn publish_all(
    channel: &Channel,
    clocks: &[Clock],
    indices: &[usize],
    instant: u64,
) -> Result<(), String> {
    let publishes = indices.iter().map(|&index| {
        let clock = &clocks[index];
        let tick = Tick::scheduled(&clock.id, &clock.name, &clock.schedule, instant);
        let payload = serde_json::to_vec(&tick.message()).unwrap_or_default();
        let mut properties = BasicProperties::default()
            .with_content_type(ShortString::from("application/json"))
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(tick.id.as_str()))
            .with_app_id(ShortString::from("bare-ticker"))
            .with_timestamp(instant / 1000);
        if let Some(expiry) = tick.expiry_ms() {
            properties = properties.with_expiration(ShortString::from(expiry.to_string()));
        }
        let channel = channel.clone();
        let queue = ShortString::from(clock.queue.as_str());
        async move {
            let options = BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            };
            channel
                .basic_publish(ShortString::from(""), queue, options, &payload, properties)
                .await
        }
    });
    let mut confirmations = Vec::with_capacity(indices.len());
    for published in join_all(publishes).await {
        confirmations.push(published.map_err(|e| format!("publish: {e}"))?);
    }
    tokio::spawn(join_all(confirmations));
    Ok(())
}

fn read_clocks(path: &std::path::Path) -> Result<Vec<Clock>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the clocks file {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(line, entry)| {
            let (name, literal) = entry
                .split_once('\t')
                .ok_or_else(|| format!("line {}: expected `name<TAB>schedule`", line + 1))?;
            let schedule = Schedule::parse(literal)
                .map_err(|e| format!("line {}: schedule {literal:?}: {e}", line + 1))?;
            Ok(Clock {
                id: ClockId::new(format!("bare{line:028}")),
                name: name.to_string(),
                queue: ClockChannel::rabbit_queue_name(name, &schedule),
                schedule,
            })
        })
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}
