//! `registry-bytes`: the replicated state's own share of a node's memory per clock.
//!
//! `registry-bytes --clocks N --channel http|rabbit` applies N registrations (`every.1.hours`,
//! names and random ids shaped like the scale scenario's) to a `Registry` in this process and
//! prints how much its resident memory grew per clock, beside the sizes of the types each clock
//! is made of. The scale scenario's `scale_bytes_per_clock` is a whole node (binary, RocksDB,
//! allocator, log) divided by its clocks; this separates the registry's part from the rest.
//! One channel per run: a second population would be measured on a heap the first shaped.
//!
//! `--save FILE` also writes the registry in its serialized form (what a snapshot holds), and
//! `registry-bytes --load FILE`, in a process of its own, prints what the registry costs once
//! loaded from it, read as a node reads its snapshot at a restart.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use tickd_domain::{Channel, Clock, ClockId, ClockStats, Command, Cursor, QueueId, Registry};
use tickd_domain::{Schedule, StatsSlot, Tick};

/// Measures the registry's bytes per clock.
#[derive(Debug, Parser)]
struct Args {
    /// How many clocks to register.
    #[arg(long, default_value_t = 200_000)]
    clocks: u64,
    /// Their channel.
    #[arg(long, value_enum, default_value_t = Kind::Http)]
    channel: Kind,
    /// Also write the registry, serialized, to this file.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Measure a registry loaded from this file instead of registering clocks.
    #[arg(long, conflicts_with = "save")]
    load: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Kind {
    Http,
    Rabbit,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let measured = match &args.load {
        Some(path) => measure_load(path),
        None => measure(&args),
    };
    match measured {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("registry-bytes: {error}");
            ExitCode::FAILURE
        }
    }
}

fn measure(args: &Args) -> Result<(), String> {
    let schedule: Schedule = "every.1.hours".parse().map_err(|e| format!("{e}"))?;
    let now_ms = 1_764_140_000_000;
    let mut registry = Registry::new();
    let before = status_bytes("VmRSS:")?;
    let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
    for n in 0..args.clocks {
        let name = format!("scale-{now_ms}-hourly-{n}");
        let channel = match args.channel {
            Kind::Http => Channel::Http {
                queue_id: QueueId::new(random.hex_id()),
            },
            Kind::Rabbit => Channel::Rabbit,
        };
        registry.apply(Command::Register {
            name,
            schedule: schedule.clone(),
            id: ClockId::new(random.hex_id()),
            channel,
            max_clocks: u64::MAX,
            now_ms,
            overlap: tickd_domain::Overlap::Allow,
        });
    }
    let grown = status_bytes("VmRSS:")?.saturating_sub(before);
    if let Some(path) = &args.save {
        let file = File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        serde_json::to_writer(BufWriter::new(file), &registry)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    let clocks = registry.len().max(1) as f64;
    println!(
        "{} {:?} clocks: the registry's resident memory grew {:.1} MB, {:.0} bytes per clock",
        registry.len(),
        args.channel,
        grown as f64 / 1e6,
        grown as f64 / clocks
    );
    println!(
        "sizes: Clock {} (ClockId {}, Schedule {}, Channel {}), Cursor {} (StatsSlot {}, \
         ClockStats {} once a tick is recorded), Tick {}",
        size_of::<Clock>(),
        size_of::<ClockId>(),
        size_of::<Schedule>(),
        size_of::<Channel>(),
        size_of::<Cursor>(),
        size_of::<StatsSlot>(),
        size_of::<ClockStats>(),
        size_of::<Tick>(),
    );
    Ok(())
}

/// Loads a registry from `path` as a node loads its snapshot (streaming) and prints what it
/// costs.
fn measure_load(path: &Path) -> Result<(), String> {
    let file = File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    let before = status_bytes("VmRSS:")?;
    let peak_before = status_bytes("VmHWM:")?;
    let registry: Registry = serde_json::from_reader(BufReader::new(file))
        .map_err(|e| format!("loading {}: {e}", path.display()))?;
    let grown = status_bytes("VmRSS:")?.saturating_sub(before);
    let peak = status_bytes("VmHWM:")?.saturating_sub(peak_before);
    let clocks = registry.len().max(1) as f64;
    println!(
        "{} clocks loaded from {}: the registry's resident memory grew {:.1} MB, {:.0} bytes \
         per clock; at its peak during the load {:.1} MB, {:.0} bytes per clock",
        registry.len(),
        path.display(),
        grown as f64 / 1e6,
        grown as f64 / clocks,
        peak as f64 / 1e6,
        peak as f64 / clocks
    );
    Ok(())
}

/// One of this process's memory figures from `/proc/self/status`, in bytes: `VmRSS:` (resident
/// now) or `VmHWM:` (the most it has been resident).
fn status_bytes(field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("reading /proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| format!("no {field} line in /proc/self/status"))
}

/// Ids shaped like the ones nodes draw (32 hex digits), without a dependency on `rand`.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn hex_id(&mut self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())
    }
}
