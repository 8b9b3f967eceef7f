//! `dqplb`: the operator command (plan, check, perf); see `dqplb --help`.
fn main() {
    std::process::exit(nccl_net_dqplb::cli::main(
        std::env::args().skip(1).collect(),
    ));
}
