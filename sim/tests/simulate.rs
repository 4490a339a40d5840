//! The simulation in the suite: its determinism, and its short profile of seeds.
//!
//! Both run the `tickd-sim` binary as `scripts/simulate` does. The profile of seeds runs the
//! optimized build (`--profile sim`, built here into the same target directory, as the script
//! does): in a debug build a simulated minute costs about a second of CPU, ten times more.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Seeds in the suite's profile, and the simulated seconds of each.
const SEEDS: &str = "200";
const SECONDS: &str = "60";

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{command:?} did not start: {error}"));
    assert!(
        output.status.code().is_some(),
        "{command:?} was killed by a signal"
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The trace hash `--seed` prints, run on the cores `cpus` names (`taskset -c`).
fn trace_hash(seed: &str, cpus: &str) -> String {
    let output = run(Command::new("taskset").args([
        "-c",
        cpus,
        env!("CARGO_BIN_EXE_tickd-sim"),
        "--seed",
        seed,
        "--seconds",
        "30",
    ]));
    let text = stdout(&output);
    assert!(
        output.status.success(),
        "seed {seed} on cores {cpus} failed:\n{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text.lines()
        .find_map(|line| line.strip_prefix("trace "))
        .unwrap_or_else(|| panic!("no trace line in:\n{text}"))
        .to_string()
}

#[test]
fn a_seed_gives_the_same_trace_on_one_core_and_on_two_and_another_seed_another() {
    let one_core = trace_hash("11", "0");
    let two_cores = trace_hash("11", "0,1");
    assert_eq!(
        one_core, two_cores,
        "seed 11 ran differently on one core and on two: the simulation is not deterministic"
    );
    assert_ne!(
        one_core,
        trace_hash("12", "0,1"),
        "two seeds gave one trace: the trace does not follow the run"
    );
}

/// The optimized `tickd-sim`, built as `scripts/simulate` builds it, in this test's target
/// directory.
fn optimized_simulator() -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    // <target>/debug/deps/simulate-<hash>
    let target = test
        .ancestors()
        .nth(3)
        .expect("the test binary lies in <target>/debug/deps")
        .to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let built = run(Command::new(cargo)
        .args([
            "build",
            "--profile",
            "sim",
            "-p",
            "tickd-sim",
            "--bin",
            "tickd-sim",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(env!("CARGO_MANIFEST_DIR")));
    assert!(
        built.status.success(),
        "the optimized simulator did not build:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    target.join("sim").join("tickd-sim")
}

#[test]
fn two_hundred_seeds_of_a_simulated_minute_break_no_guarantee() {
    let simulator = optimized_simulator();
    let output = run(Command::new(&simulator).args(["--seeds", SEEDS, "--seconds", SECONDS]));
    let text = stdout(&output);
    println!("{text}");
    assert!(
        output.status.success(),
        "the simulation found violations (each seed above prints its replay command):\n{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = format!("{SEEDS} seeds, 0 violations");
    assert!(
        text.lines().any(|line| line == summary),
        "no line {summary:?} in:\n{text}"
    );
}
