//! The `dqplb` operator command: `plan`, `check` and `perf` subcommands.

pub mod paths;

/// Entry point of the `dqplb` binary; returns the process exit code.
pub fn main(args: Vec<String>) -> i32 {
    match args.first().map(String::as_str) {
        Some("paths-bench") => paths::run(&args[1..]),
        _ => {
            eprintln!("dqplb: no such subcommand; available: paths-bench");
            2
        }
    }
}
