//! The CPU a set of processes spends over a stretch of a scenario, from `/proc`: what a tick
//! costs each system in CPU, which on two shared cores is what bounds a burst's lateness.

use tickd_tests::TestCluster;
use tickd_tests::process::cpu_seconds;

/// The process ids of a cluster's running nodes.
pub fn node_pids(cluster: &TestCluster) -> Result<Vec<u32>, String> {
    cluster
        .node_ids()
        .into_iter()
        .map(|id| cluster.pid(id).ok_or(format!("node {id} is not running")))
        .collect()
}

/// CPU seconds (user and system) used by some processes since the meter started.
#[derive(Debug)]
pub struct CpuMeter {
    /// Each process and its CPU seconds at the start.
    started: Vec<(u32, f64)>,
}

impl CpuMeter {
    /// Starts measuring `pids`.
    pub fn start(pids: &[u32]) -> Result<Self, String> {
        let started = pids
            .iter()
            .map(|pid| Ok((*pid, cpu_seconds(*pid)?)))
            .collect::<Result<_, String>>()?;
        Ok(CpuMeter { started })
    }

    /// The CPU seconds the processes used since the start, together.
    pub fn used(&self) -> Result<f64, String> {
        self.started.iter().try_fold(0.0, |sum, (pid, before)| {
            Ok(sum + (cpu_seconds(*pid)? - before).max(0.0))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn the_meter_counts_what_a_process_spends_from_its_start() -> Result<(), String> {
        let meter = CpuMeter::start(&[std::process::id()])?;
        let idle = meter.used()?;
        let started = Instant::now();
        let mut spin = 0u64;
        while started.elapsed() < Duration::from_millis(300) {
            spin = std::hint::black_box(spin.wrapping_mul(31).wrapping_add(1));
        }
        let busy = meter.used()?;
        // 300 ms of spinning, on a loaded machine too, gets more than the kernel's 10-ms tick.
        assert!(busy > idle, "{idle} s before spinning, {busy} s after");
        Ok(())
    }

    #[test]
    fn a_process_that_is_not_there_is_an_error_not_a_zero() {
        assert!(CpuMeter::start(&[u32::MAX]).is_err());
    }
}
