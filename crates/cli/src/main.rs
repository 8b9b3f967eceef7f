//! `dqplb`: the operator command (plan, check, devices, perf, stats, sim, paths-bench); see `dqplb --help`.
//! The clap command line over the subcommands: each takes its parsed options and returns the exit code.

mod charts;
mod check;
mod check_report;
mod completions;
mod devices;
mod paths;
mod perf;
mod plan;
mod sim;
mod sim_args;
mod sim_svg;
mod sim_sweep;
mod sim_sweep_class;
mod sim_sweep_dcqcn;
mod stats;
mod units;

use std::ffi::OsString;
use std::fmt::Display;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

/// The command line of `dqplb`.
#[derive(Debug, Parser)]
#[command(
    name = "dqplb",
    version = nccl_net_dqplb::VERSION,
    about = "The dqplb-net operator command: site plan, DCQCN check, point-to-point perf, \
             statistics files, fabric simulator, shaped-path benchmark.",
    subcommand_required = true,
    arg_required_else_help = true,
    // Every option may repeat, the last one wins (as NCCL_* variables and the config do).
    args_override_self = true,
    after_help = "exit status: 0 success, 2 bad input (bad config, bad NCCL_IB_HCA, bad option)"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

/// The subcommands; their one-line descriptions are the top-level help's.
#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    #[command(
        about = "show the site config in effect, the NCCL_IB_HCA devices and the per-class QP plan",
        after_help = plan::EXIT
    )]
    Plan(plan::PlanArgs),
    #[command(
        about = "compare each RDMA device's DCQCN parameters with the site profile; exit 0 match, \
                 1 mismatch, 2 bad usage, 3 unverified",
        after_help = check::EXIT
    )]
    Check(check::CheckArgs),
    #[command(
        about = "every RDMA device and port (state, rate, MTU, GIDs), its NCCL_IB_HCA fabric id, \
                 and whether the plugin uses it and why not; --json",
        after_help = devices::EXIT
    )]
    Devices(devices::DevicesArgs),
    #[command(
        about = "point-to-point bandwidth / latency between two local processes through the \
                 plugin's vtable, or raw TCP as the ceiling",
        long_about = perf::args::LONG_ABOUT,
        after_help = perf::args::EXIT
    )]
    Perf(perf::args::PerfArgs),
    #[command(
        about = "the per-QP statistics files the plugin writes ([stats] file) as a table, --json \
                 or --prometheus",
        long_about = stats::LONG_ABOUT,
        after_help = stats::EXIT
    )]
    Stats(stats::StatsArgs),
    #[command(
        about = "fabric simulator: the real engine over a rail-optimized leaf-spine with ECMP, \
                 fluid or per segment, per policy and QP count (docs/records/simulation.md)",
        after_help = sim_args::EXIT,
        args_conflicts_with_subcommands = true,
        disable_help_subcommand = true
    )]
    Sim(sim_args::SimCmd),
    #[command(
        about = "DQPLB vs NCCL-style policies over tc-shaped loopback paths (run through \
                 scripts/paths-bench.sh, which builds the network namespace; needs root)",
        after_help = paths::args::EXIT
    )]
    PathsBench(paths::args::PathsArgs),
    #[command(about = "print a completion script for SHELL (bash, elvish, fish, powershell, zsh)")]
    Completions(completions::CompletionsArgs),
    #[command(about = "print the manual page (roff; `dqplb man | man -l -`)")]
    Man,
}

/// Prints `message` as clap prints a usage error of `dqplb PATH...` (with that command's usage
/// line) and returns its exit code, 2. For what clap cannot see: options that contradict each
/// other.
pub(crate) fn usage_error(path: &[&str], message: impl Display) -> i32 {
    let mut cmd = Cli::command();
    cmd.build();
    for name in path {
        match cmd.find_subcommand(name) {
            Some(sub) => cmd = sub.clone(),
            None => break,
        }
    }
    let e = cmd.error(ErrorKind::ArgumentConflict, message);
    let _ = e.print();
    e.exit_code()
}

/// Runs `dqplb` on `argv` (the program name first); returns the process exit code.
fn run(argv: Vec<OsString>) -> i32 {
    nccl_net_dqplb::plugin::log::install_stderr();
    // The child processes perf starts have their own parser (not part of the public one).
    if argv.len() >= 3 && argv[1..3] == perf::args::CHILD {
        return perf::run_child(&argv[3..]);
    }
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and --version on stdout with 0; bad usage on stderr with 2.
            let _ = e.print();
            return e.exit_code();
        }
    };
    match cli.command {
        Cmd::Plan(a) => plan::run(&a),
        Cmd::Check(a) => check::run(&a),
        Cmd::Devices(a) => devices::run(&a),
        Cmd::Perf(a) => perf::run(a),
        Cmd::Stats(a) => stats::run(&a),
        Cmd::Sim(a) => sim::run_cli(a),
        Cmd::PathsBench(a) => paths::run(a),
        Cmd::Completions(a) => completions::completions(&a),
        Cmd::Man => completions::man(),
    }
}

fn main() {
    std::process::exit(run(std::env::args_os().collect()));
}

/// Parses `args` (after `dqplb`) as the binary does, for the modules' tests.
#[cfg(test)]
pub(crate) fn parse(args: &[&str]) -> Result<Cmd, clap::Error> {
    Cli::try_parse_from(std::iter::once("dqplb").chain(args.iter().copied())).map(|c| c.command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn unknown_names_get_a_suggestion() {
        let e = parse(&["plna"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidSubcommand);
        assert!(e.to_string().contains("'plan'"), "{e}");
        let e = parse(&["plan", "--hcaa", "x"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownArgument);
        assert!(e.to_string().contains("'--hca'"), "{e}");
    }
}
