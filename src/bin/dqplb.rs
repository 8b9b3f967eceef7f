//! `dqplb`: the operator command (plan, check, perf, paths-bench); see `dqplb --help`.
//!
//! The command's code (src/cli/) is compiled into this binary only, not into the plugin library:
//! it reaches the plugin's items through the `nccl_net_dqplb` rlib. The cdylib exports only
//! `ncclNetPlugin_v8`, so code that only the command reaches (plotters, the perf and paths-bench
//! drivers, serde_json through `dqplb check --format json`) is not linked into the .so.
#[path = "../cli/mod.rs"]
mod cli;

fn main() {
    std::process::exit(cli::main(std::env::args().skip(1).collect()));
}
