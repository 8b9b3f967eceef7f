//! `lp-split`, the oracle split: every connection splits its bytes over its q hashed paths as
//! the split bound's greedy does. Whether the bound can be reached under each mode's dynamics.

mod sim_support;

use dqplb_sim::{
    run, ConnShape, Mode, PacketSpec, Placement, SimConfig, SimPolicy, SimResult, TrafficKind,
    TrafficSpec, SIM_REHASH,
};

/// 64 hosts (8 leaves of 8, 8 spines) x 2 rails, 64 MiB fragmented ring, first 16 steps, 8
/// hashed QPs (the fabric of crates/cli/tests/sim_led.rs), or the same fabric's 16 MiB permutation.
fn sim(policy: &str, mode: Mode, kind: TrafficKind, seed: u64) -> SimResult {
    let (bytes, max_steps) = match kind {
        TrafficKind::Ring => (64 << 20, 16),
        _ => (16 << 20, 0),
    };
    let cfg = SimConfig {
        fabric: sim_support::fabric_64x2(),
        traffic: TrafficSpec {
            kind,
            bytes,
            placement: Placement::Fragmented,
            max_steps,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy: SimPolicy::parse(policy).unwrap(),
            qps: 8,
            outstanding: 2,
            segment_bytes: 128 << 10,
            rehash: SIM_REHASH,
            depth: None,
            repin: None,
        },
        mode,
        seed,
        threads: 2,
        epoch_ps: 5_000_000,
        rails_simulated: 0,
        packet: PacketSpec::default(),
    };
    let r = run(&cfg).unwrap();
    assert_eq!(r.errors.total(), 0, "{policy} {mode:?}: {:?}", r.errors);
    assert_eq!(r.missing, 0, "{policy} {mode:?}: messages not released");
    r
}

#[test]
fn reports_the_hashed_qps_and_their_bound() {
    // lp-split hashes the same 8 QPs per connection as dqplb (same QPNs, same uplinks, same
    // bound) and is reported under q = 8, though its engine runs 64 sub-QPs.
    let l = sim("lp-split", Mode::Burst, TrafficKind::Ring, 1);
    let d = sim("dqplb", Mode::Burst, TrafficKind::Ring, 1);
    assert_eq!(l.qps, 8);
    assert_eq!(l.uplink_hist, d.uplink_hist);
    assert_eq!(
        (l.bound_lower, l.bound_upper),
        (d.bound_lower, d.bound_upper)
    );
    // 16 steps of one 1 MiB chunk in 512 KiB messages, 64 connections, 2 rails.
    assert_eq!(l.messages, 64 * 2 * 16 * 2);
    assert_eq!(l.messages, d.messages);
    // A static split over equal sub-QPs: no QP carries more than another.
    assert!((l.qp_imbalance - 1.0).abs() < 1e-9, "{}", l.qp_imbalance);
}

#[test]
fn the_fluid_permutation_finishes_at_the_bound() {
    // One phase of fixed bytes per link in F mode: the fullest link needs exactly the bound's
    // upper value of the ideal (no split does better than its own loads), max-min keeps that
    // link busy, and what is left is one round trip of 8 hops of 1 us (measured: 8.0 us over
    // bound x ideal for each seed; a split other than the bound's shows as more).
    for seed in [1, 2, 3] {
        let r = sim("lp-split", Mode::Fluid, TrafficKind::Permutation, seed);
        assert!(
            r.bound_upper > 1.0,
            "seed {seed}: no collision to steer around"
        );
        let at_bound = r.bound_upper * r.ideal_us;
        assert!(
            r.time_us >= at_bound + 7.9 && r.time_us <= at_bound + 8.1,
            "seed {seed}: {} us against the bound's {at_bound} us + 8",
            r.time_us
        );
    }
}

#[test]
fn the_oracle_beats_every_engine_policy_on_the_ring() {
    // Measured (docs/records/simulation.md, "The oracle split"), % of ideal: B static split 55.98,
    // dqplb 61.83, dqplb-led 72.06 against lp-split 93.18; F 56.37 / 59.42 / 69.29 against 93.40.
    for mode in [Mode::Burst, Mode::Fluid] {
        let l = sim("lp-split", mode, TrafficKind::Ring, 1);
        for p in ["static-split", "dqplb", "dqplb-led"] {
            let e = sim(p, mode, TrafficKind::Ring, 1);
            eprintln!(
                "{mode:?}: {p} {:.2}% vs lp-split {:.2}%",
                e.pct_of_ideal, l.pct_of_ideal
            );
            assert!(
                l.time_over_ideal * 1.1 < e.time_over_ideal,
                "{mode:?}: lp-split {} not 10% ahead of {p} {}",
                l.time_over_ideal,
                e.time_over_ideal
            );
        }
        assert!(l.time_over_ideal >= l.bound_lower - 1e-9);
    }
}

#[test]
fn same_seed_same_result_other_seed_other_split() {
    let a = serde_json::to_string(&sim("lp-split", Mode::Burst, TrafficKind::Ring, 5)).unwrap();
    let b = serde_json::to_string(&sim("lp-split", Mode::Burst, TrafficKind::Ring, 5)).unwrap();
    assert_eq!(a, b);
    let c = sim("lp-split", Mode::Burst, TrafficKind::Ring, 6);
    assert_ne!(a, serde_json::to_string(&c).unwrap());
}

#[test]
fn the_command_runs_it_and_the_sweep_refuses_it() {
    let rows = sim_support::run_clean(
        "permutation",
        &[
            "--hosts",
            "16",
            "--hosts-per-leaf",
            "4",
            "--spines",
            "4",
            "--rails",
            "1",
            "--bytes",
            "1M",
            "--mode",
            "b",
            "--policy",
            "lp-split,dqplb",
            "--qps",
            "4",
        ],
    );
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["policy"], "lp-split");
    assert_eq!(rows[0]["qps"], 4);
    assert_eq!(rows[0]["bound_upper"], rows[1]["bound_upper"]);
    // The q hashed QPs are held to the engine's QP count, as for any q-QP policy.
    let out = sim_support::dqplb(&[
        "sim",
        "--hosts",
        "16",
        "--hosts-per-leaf",
        "4",
        "--spines",
        "4",
        "--rails",
        "1",
        "--traffic",
        "permutation",
        "--bytes",
        "1M",
        "--mode",
        "b",
        "--policy",
        "lp-split",
        "--qps",
        "300",
    ]);
    let err = sim_support::text(&out.stderr);
    assert!(!out.status.success(), "--qps 300 ran: {err}");
    assert!(
        err.contains("lp-split q=300: engine parameter qps = 300 is invalid: must be 1 ..= 128"),
        "{err}"
    );
    // The sweep prints a class to deploy, which an oracle cannot be: exit 2, and why.
    sim_support::assert_refused(
        &["sim", "sweep"],
        &["--policy", "lp-split"],
        "lp-split is an oracle the plugin cannot run",
    );
}
