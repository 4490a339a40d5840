//! Free loopback ports for test clusters.
//!
//! A cluster's ports are allocated once, all together, and kept for the life
//! of the cluster so that a restarted node comes back on the same addresses
//! (its peers and `cluster.toml` know it by them).
//!
//! Ports are drawn at random from *outside* the kernel's ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`). A port that the kernel handed
//! out for `bind(0)` lies inside that range, and while a node is down the
//! kernel may give the same number to the local end of some outgoing
//! connection, so the node could not bind it again on restart. Ports below
//! the range are never chosen by the kernel on its own. When the range leaves
//! no room outside it, allocation falls back to `bind(127.0.0.1:0)`.
//!
//! Every candidate is checked by binding it on 127.0.0.1; all the listeners of
//! one allocation are held at the same time, so one allocation never returns a
//! port twice. A process-wide set remembers every port handed out, so two
//! clusters of one test binary (tests run in parallel threads) never share one.

use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::{Mutex, PoisonError};

/// The lowest port we draw from: below it live too many well-known services.
const LOWEST_PORT: u16 = 10_000;

/// Ports needed outside the ephemeral range before we prefer it over `bind(0)`.
const MIN_RANGE_WIDTH: u32 = 1_000;

/// Candidates tried per requested port before giving up: a port can be taken
/// by another process or by an earlier allocation of this one.
const ATTEMPTS_PER_PORT: usize = 200;

/// Every port handed out by this process, so that it is never handed out twice.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// Returns `count` distinct loopback ports that were free a moment ago and
/// that this process has not handed out before.
///
/// # Panics
///
/// When not enough free ports can be found; that is a broken test machine.
pub fn allocate(count: usize) -> Vec<u16> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    // The listeners are held until the end of this function so that the
    // kernel cannot offer one port twice within this allocation.
    let mut held: Vec<TcpListener> = Vec::with_capacity(count);
    let mut ports = Vec::with_capacity(count);
    let range = preferred_range();
    let mut random = Random::new();
    let mut attempts = 0;
    while ports.len() < count {
        attempts += 1;
        assert!(
            attempts <= count * ATTEMPTS_PER_PORT,
            "could not find {count} free loopback ports (found {ports:?}) after {attempts} attempts"
        );
        let candidate = match range {
            Some((low, high)) => {
                let width = u64::from(high - low) + 1;
                // The offset is below `width`, which fits in a u16 range.
                low + u16::try_from(random.next() % width).unwrap_or(0)
            }
            None => 0,
        };
        let Ok(listener) = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, candidate)))
        else {
            continue;
        };
        let Ok(port) = listener.local_addr().map(|addr| addr.port()) else {
            continue;
        };
        if handed_out.contains(&port) {
            continue;
        }
        handed_out.insert(port);
        ports.push(port);
        held.push(listener);
    }
    ports
}

/// The kernel's ephemeral port range `(low, high)`, inclusive, if it can be read.
pub fn ephemeral_range() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut numbers = text.split_whitespace().map(str::parse::<u16>);
    match (numbers.next(), numbers.next()) {
        (Some(Ok(low)), Some(Ok(high))) if low <= high => Some((low, high)),
        _ => None,
    }
}

/// The inclusive range we draw ports from, or `None` to let the kernel choose.
fn preferred_range() -> Option<(u16, u16)> {
    let (low, high) = ephemeral_range()?;
    if u32::from(low) >= u32::from(LOWEST_PORT) + MIN_RANGE_WIDTH {
        Some((LOWEST_PORT, low - 1))
    } else if u32::from(high) + MIN_RANGE_WIDTH <= u32::from(u16::MAX) {
        Some((high + 1, u16::MAX))
    } else {
        None
    }
}

/// A small pseudo-random sequence seeded by the standard library's per-process
/// random hasher keys; good enough to spread ports, and needs no dependency.
struct Random {
    state: RandomState,
    counter: u64,
}

impl Random {
    fn new() -> Self {
        Random {
            state: RandomState::new(),
            counter: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.counter += 1;
        let mut hasher = self.state.build_hasher();
        hasher.write_u64(self.counter);
        hasher.write_u32(std::process::id());
        hasher.finish()
    }
}
