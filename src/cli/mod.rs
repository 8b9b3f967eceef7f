//! The `dqplb` operator command: a dispatcher over subcommands (`plan` here; `check` and `perf`
//! are added by their own modules). Each subcommand takes its arguments and returns an exit code.

pub mod check;
pub mod paths;
pub mod perf;
pub mod plan;
pub mod sim;
pub mod sim_svg;
pub mod sim_sweep;
pub mod sim_sweep_class;
pub mod sim_sweep_dcqcn;
pub mod stats;

/// Top-level usage text.
pub const USAGE: &str = "\
usage: dqplb <command> [options]

commands:
  plan    show the site config in effect, the NCCL_IB_HCA devices and the per-class QP plan
          (dqplb plan --help for options)
  check   compare each RDMA device's DCQCN parameters with the site profile; exit 0 match,
          1 mismatch, 2 bad usage, 3 unverified (dqplb check --help)
  perf    point-to-point bandwidth / latency between two local processes through the
          plugin's vtable, or raw TCP as the ceiling (dqplb perf --help)
  stats   the per-QP statistics files the plugin writes ([stats] file) as a table, --json or
          --prometheus (dqplb stats --help)
  sim     fabric simulator: the real engine over a rail-optimized leaf-spine with ECMP, fluid or
          per segment, per policy and QP count (dqplb sim --help; docs/simulation.md)
  paths-bench  DQPLB vs NCCL-style policies over tc-shaped loopback paths (run through
          scripts/paths-bench.sh, which builds the network namespace; needs root)

options:
  -h, --help    show this help

exit status: 0 success, 2 bad input (bad config, bad NCCL_IB_HCA, bad option)";

/// Entry point of the `dqplb` binary; returns the process exit code.
pub fn main(args: Vec<String>) -> i32 {
    nccl_net_dqplb::plugin::log::install_stderr();
    let Some(command) = args.first() else {
        eprintln!("{USAGE}");
        return 2;
    };
    let rest = &args[1..];
    match command.as_str() {
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            0
        }
        "plan" => plan::run(rest),
        "check" => check::run(rest),
        "perf" => perf::run(rest),
        "stats" => stats::run(rest),
        "sim" => sim::run_cli(rest),
        "paths-bench" => paths::run(rest),
        other => {
            eprintln!("dqplb: unknown command '{other}'\n\n{USAGE}");
            2
        }
    }
}
