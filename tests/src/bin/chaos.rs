//! `chaos --runs N --seconds S --seed X`: the fault-injection suite; exits non-zero on any
//! violation. `scripts/chaos` builds it and runs it.

use std::process::ExitCode;

use tickd_tests::chaos::{self, Options};

fn usage() -> ExitCode {
    eprintln!("usage: chaos [--runs N] [--seconds S] [--seed X]   (defaults: 1 run, 45 s, seed 4)");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut options = Options {
        runs: 1,
        seconds: 45,
        seed: 4,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|value| value.parse::<u64>().ok());
        match (flag.as_str(), value) {
            ("--runs", Some(value)) => options.runs = value,
            ("--seconds", Some(value)) if value >= 15 => options.seconds = value,
            ("--seed", Some(value)) => options.seed = value,
            _ => return usage(),
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("chaos: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", chaos::header());
    let reports = runtime.block_on(chaos::run(options));
    print!("{}", chaos::summary(&reports));
    if reports.iter().all(|report| report.violations.is_empty()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
