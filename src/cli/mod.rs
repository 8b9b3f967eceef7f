//! The `dqplb` operator command: `plan`, `check` and `perf` subcommands.

/// Entry point of the `dqplb` binary; returns the process exit code.
pub fn main(args: Vec<String>) -> i32 {
    let _ = args;
    eprintln!("dqplb: no subcommands yet");
    2
}
