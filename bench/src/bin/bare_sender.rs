//! `bare-sender`: the floor for webhook lateness — one process, a tokio timer and reqwest
//! POSTs, no consensus.
//!
//! `bare-sender --url URL --clocks N`. At every whole second it POSTs one tick of each of N
//! synthetic `every.1.seconds` clocks to URL: the JSON message tickd sends, with the three
//! Standard Webhooks headers (`webhook-id` = the tick id, `webhook-timestamp`,
//! `webhook-signature` keyed with a fixed secret, or `--secret`), until it is killed.
//!
//! The comparison with tickd is only fair if the HTTP client is the same, so it is built with
//! the settings of the engine's webhook publisher (engine/src/webhook.rs and the defaults of
//! node/src/config/webhook.rs): no redirects, a 10-s attempt timeout, a 5-s connect timeout,
//! 32 idle connections kept per host, and at most 32 requests at once to the receiver (the
//! engine's 512 across all receivers never binds with one receiver). What tickd adds on top
//! (the replicated intent and outbox, the lease, confirmation through Raft) is exactly what
//! this program leaves out. One attempt per tick: a failure is counted on stderr, and its tick
//! shows up as missing from the receiver's count.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use reqwest::header::{CONTENT_TYPE, USER_AGENT};
use tickd_domain::{ClockId, Schedule, Tick, WebhookSecret};
use tokio::sync::Semaphore;

/// The schedule of every clock.
const SCHEDULE: &str = "every.1.seconds";
/// The engine's webhook attempt timeout (`webhook_timeout_ms`' default).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The engine's connect timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The engine's attempts at once per receiver (`webhook_max_concurrency_per_receiver`'
/// default), which is also its idle connections kept per host.
const PER_RECEIVER: usize = 32;
/// The signing secret's bytes unless `--secret` gives one.
const DEFAULT_SECRET: [u8; 32] = [7; 32];

/// Posts the ticks of many webhook clocks with nothing between the timer and the receiver.
#[derive(Debug, Parser)]
struct Args {
    /// The receiver's URL.
    #[arg(long)]
    url: String,
    /// How many `every.1.seconds` clocks to tick.
    #[arg(long)]
    clocks: usize,
    /// The prefix of the clocks' names.
    #[arg(long, default_value = "bare")]
    prefix: String,
    /// The signing secret, `whsec_<base64 of 32 bytes>`; a fixed one by default.
    #[arg(long)]
    secret: Option<String>,
}

/// One synthetic clock: what its ticks carry.
struct Clock {
    id: ClockId,
    name: String,
}

/// What every send shares.
struct Sender {
    client: reqwest::Client,
    url: reqwest::Url,
    secret: WebhookSecret,
    schedule: Schedule,
    /// The receiver's slots: at most [`PER_RECEIVER`] requests at once.
    slots: Semaphore,
    failures: AtomicU64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("bare-sender: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bare-sender: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let secret = match &args.secret {
        Some(text) => WebhookSecret::parse(text).map_err(|e| e.to_string())?,
        None => WebhookSecret::from_bytes(DEFAULT_SECRET),
    };
    let sender = Arc::new(Sender {
        client: client()?,
        url: reqwest::Url::parse(&args.url).map_err(|e| format!("--url {}: {e}", args.url))?,
        secret,
        schedule: Schedule::parse(SCHEDULE).map_err(|e| format!("{SCHEDULE}: {e}"))?,
        slots: Semaphore::new(PER_RECEIVER),
        failures: AtomicU64::new(0),
    });
    let clocks: Vec<Clock> = (0..args.clocks)
        .map(|n| Clock {
            id: ClockId::new(format!("bare{n:028}")),
            name: format!("{}-{n}", args.prefix),
        })
        .collect();

    println!(
        "sending the ticks of {} clocks to {}",
        clocks.len(),
        args.url
    );
    let mut instant = sender
        .schedule
        .next_instant_after(now_ms())
        .ok_or("the schedule never fires")?;
    let mut reported = 0;
    loop {
        wait_until(instant).await;
        for clock in &clocks {
            let tick = Tick::scheduled(&clock.id, &clock.name, &sender.schedule, instant);
            tokio::spawn(send(sender.clone(), tick));
        }
        let failures = sender.failures.load(Ordering::Relaxed);
        if failures > reported {
            eprintln!("bare-sender: {failures} ticks failed so far");
            reported = failures;
        }
        instant = sender
            .schedule
            .next_instant_after(instant)
            .ok_or("the schedule stopped firing")?;
    }
}

/// The engine's webhook client (`Webhooks::new`), but for the TLS setup, which plain http
/// never reaches, and its resolver, which a literal address never calls: built like every
/// other client of the bench, through `tickd_tests::http::client_builder`, which installs the
/// process's crypto provider.
fn client() -> Result<reqwest::Client, String> {
    tickd_tests::http::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ATTEMPT_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT.min(ATTEMPT_TIMEOUT))
        .pool_max_idle_per_host(PER_RECEIVER)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// Sleeps until the wall clock reads `instant_ms` or later: a tick is never sent before its
/// instant, even if the timer (monotonic) and the wall clock disagree by a millisecond.
async fn wait_until(instant_ms: u64) {
    loop {
        let now = now_ms();
        if now >= instant_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis(instant_ms - now)).await;
    }
}

/// Sends one tick, signed as the engine signs it, and reads the answer before the slot is
/// given back, as the engine does. The request is built (and its timestamp taken) before
/// waiting for a slot; the engine builds it once its attempt holds one, so that a tick that
/// waited long is signed with a fresh timestamp: the same work, in another order.
async fn send(sender: Arc<Sender>, tick: Tick) {
    let body = match serde_json::to_vec(&tick.message()) {
        Ok(body) => body,
        Err(error) => {
            eprintln!("bare-sender: a tick's JSON: {error}");
            sender.failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let id = tick.id.to_string();
    let timestamp_s = now_ms() / 1_000;
    let signature = sender.secret.sign(&id, timestamp_s, &body);
    let request = sender
        .client
        .post(sender.url.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, "bare-sender")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp_s.to_string())
        .header("webhook-signature", signature)
        .body(body);
    let Ok(_slot) = sender.slots.acquire().await else {
        return;
    };
    let delivered = match request.send().await {
        Ok(response) => {
            let status = response.status();
            let _ = response.bytes().await;
            status.is_success()
        }
        Err(_) => false,
    };
    if !delivered {
        sender.failures.fetch_add(1, Ordering::Relaxed);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}
