//! The `dqplb` operator command: `plan`, `check` and `perf` subcommands.

pub mod perf;

/// Entry point of the `dqplb` binary; returns the process exit code.
pub fn main(args: Vec<String>) -> i32 {
    match args.first().map(String::as_str) {
        Some("perf") => perf::run(&args[1..]),
        Some(other) => {
            eprintln!("dqplb: unknown subcommand '{other}' (available: perf)");
            2
        }
        None => {
            eprintln!("usage: dqplb <perf> [options]");
            2
        }
    }
}
