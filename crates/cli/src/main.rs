//! `dqplb`: the operator command (plan, check, perf, stats, sim, paths-bench); see `dqplb --help`.
//! A dispatcher over subcommands: each takes its arguments and returns the process exit code.

mod check;
mod check_report;
mod paths;
mod perf;
mod plan;
mod sim;
mod sim_svg;
mod sim_sweep;
mod sim_sweep_class;
mod sim_sweep_dcqcn;
mod stats;

/// Top-level usage text.
const USAGE: &str = "\
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
fn run(args: Vec<String>) -> i32 {
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

fn main() {
    std::process::exit(run(std::env::args().skip(1).collect()));
}
