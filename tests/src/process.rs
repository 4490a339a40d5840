//! What a node's process costs, read from `/proc`: the CPU it used, for the tests that bound a
//! node's cost and for the benchmark's idle figures.

use std::time::Duration;

/// CPU seconds (user + system) a process has used, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|error| format!("/proc/{pid}/stat: {error}"))?;
    // The command name (field 2) may hold spaces; the fields after it are counted from its
    // closing parenthesis. utime and stime are fields 14 and 15.
    let after_name = stat
        .rfind(')')
        .and_then(|end| stat.get(end + 2..))
        .ok_or_else(|| format!("/proc/{pid}/stat has no command name: {stat}"))?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |index: usize, name: &str| -> Result<u64, String> {
        fields
            .get(index)
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/stat has no {name}: {stat}"))
    };
    let ticks = field(11, "utime")? + field(12, "stime")?;
    Ok(ticks as f64 / clock_ticks_per_second())
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`), 100 on every Linux we run on.
fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The share of one core each process of `pids` used over the same `window`, in percent.
pub async fn cpu_percent(pids: &[u32], window: Duration) -> Result<Vec<f64>, String> {
    let before = pids
        .iter()
        .map(|pid| cpu_seconds(*pid))
        .collect::<Result<Vec<_>, _>>()?;
    tokio::time::sleep(window).await;
    pids.iter()
        .zip(before)
        .map(|(pid, before)| {
            let used = cpu_seconds(*pid)? - before;
            Ok(100.0 * used / window.as_secs_f64())
        })
        .collect()
}
