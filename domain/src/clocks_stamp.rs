//! A stamp that tells, in O(1), whether a registry's clocks may have changed.
//!
//! Views that list clocks (the dashboard's event stream) used to find out by hashing every
//! clock every second, under the state's read lock: at a million clocks a pass that holds off
//! every command for a tenth of a second, per open stream. A stamp is drawn from one counter
//! of the process whenever a registry is made or its clock map changes (a clock added,
//! removed, paused or resumed), so two equal stamps mean the same clocks: the same registry
//! unchanged since, or a copy of it. Unequal stamps mean only that the clocks may differ.
//!
//! The stamp is not state: replicas hold different stamps for equal registries, so it is
//! neither serialized nor compared (a registry's equality ignores it).

use std::sync::atomic::{AtomicU64, Ordering};

/// The last stamp drawn in this process.
static LAST: AtomicU64 = AtomicU64::new(0);

/// See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClocksStamp(u64);

impl ClocksStamp {
    /// A stamp no registry of this process has held before. A 64-bit counter drawn a billion
    /// times a second lasts five centuries, so it never wraps.
    pub(crate) fn fresh() -> Self {
        ClocksStamp(LAST.fetch_add(1, Ordering::Relaxed).wrapping_add(1))
    }
}

impl Default for ClocksStamp {
    fn default() -> Self {
        ClocksStamp::fresh()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fresh_stamp_differs_from_all_before_it() {
        let drawn: std::collections::HashSet<ClocksStamp> =
            (0..1_000).map(|_| ClocksStamp::fresh()).collect();
        assert_eq!(drawn.len(), 1_000);
        assert_ne!(ClocksStamp::default(), ClocksStamp::default());
    }
}
