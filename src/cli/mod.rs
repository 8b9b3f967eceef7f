//! The `dqplb` operator command: `plan`, `check` and `perf` subcommands.

pub mod check;

/// Entry point of the `dqplb` binary; returns the process exit code.
pub fn main(args: Vec<String>) -> i32 {
    match args.first().map(String::as_str) {
        Some("check") => check::run(&args[1..]),
        _ => {
            eprintln!("dqplb: unknown or missing subcommand (available: check)");
            2
        }
    }
}
