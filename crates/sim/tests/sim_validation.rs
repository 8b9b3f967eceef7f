//! Validation of `dqplb sim` before any of its numbers are trusted (docs/records/simulation.md): F mode
//! against balls-in-bins, the policy ordering, exactly-once delivery, and same seed same bytes.

use dqplb_engine::PolicyKind;
use dqplb_sim::theory::expected_static_time_over_ideal;
use dqplb_sim::{
    run, ConnShape, FabricSpec, Mode, SimConfig, SimPolicy, SimResult, TrafficKind, TrafficSpec,
};

/// Leaf-shift traffic (every host sends to the same index one leaf over) on `leaves` leaves of
/// `h` hosts and `h` spines (non-blocking), `rails` rails.
fn config(
    h: usize,
    leaves: usize,
    rails: usize,
    policy: SimPolicy,
    qps: usize,
    mode: Mode,
) -> SimConfig {
    SimConfig {
        fabric: FabricSpec {
            hosts: h * leaves,
            rails,
            hosts_per_leaf: h,
            spines: h,
            // Short hops keep the round trips a small part of the time (they are not what
            // balls-in-bins models).
            hop_latency_ps: 100_000,
            ..FabricSpec::default()
        },
        traffic: TrafficSpec {
            kind: TrafficKind::LeafShift,
            bytes: 16 << 20,
            step_bytes: 2 << 20,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy,
            qps,
            outstanding: 8,
            segment_bytes: 2 << 20,
            rehash: dqplb_sim::SIM_REHASH,
            depth: None,
            repin: None,
        },
        mode,
        seed: 1,
        threads: 2,
        epoch_ps: 0,
        rails_simulated: 0,
        packet: dqplb_sim::PacketSpec::default(),
    }
}

fn clean(r: &SimResult) {
    assert_eq!(
        r.errors.total(),
        0,
        "engine/protocol/order errors: {:?}",
        r.errors
    );
    assert_eq!(r.missing, 0, "messages not released");
    let conns = (r.hosts * r.rails_simulated) as u64;
    let per_conn = r.bytes.div_ceil(r.step_bytes);
    assert_eq!(
        r.messages,
        conns * per_conn,
        "every message delivered exactly once"
    );
}

#[test]
fn fluid_static_split_matches_balls_in_bins() {
    let (h, leaves, rails, seeds) = (8, 8, 8, 24u64);
    for q in [1usize, 4, 16] {
        let policy = SimPolicy::Engine(if q == 1 {
            PolicyKind::SingleQp
        } else {
            PolicyKind::StaticSplit
        });
        let mut sum = 0.0;
        for seed in 1..=seeds {
            let mut cfg = config(h, leaves, rails, policy, q, Mode::Fluid);
            cfg.seed = seed;
            let r = run(&cfg).unwrap();
            clean(&r);
            // This run's fullest uplink fixes its time: max(c, q) / q (round trips aside).
            let c = r.uplink_hist.iter().rposition(|&n| n > 0).unwrap();
            let expect = c.max(q) as f64 / q as f64;
            assert!(
                (r.time_over_ideal - expect).abs() / expect < 0.02,
                "seed {seed} q={q}: {} x ideal, fullest uplink {c} -> {expect}",
                r.time_over_ideal
            );
            sum += r.time_over_ideal;
        }
        let sim = sum / seeds as f64;
        let theory = expected_static_time_over_ideal(h, q, h, 1.0, leaves * rails);
        let err = (sim - theory).abs() / theory;
        eprintln!(
            "q={q}: simulated {sim:.4} x ideal, balls-in-bins {theory:.4}, off {:.2}%",
            100.0 * err
        );
        assert!(err < 0.05, "q={q}: sim {sim} vs theory {theory}");
    }
}

fn policy(name: &str) -> SimPolicy {
    SimPolicy::parse(name).unwrap()
}

#[test]
fn policy_order_single_static_dqplb_bound_ideal_and_fluid_spray_is_ideal() {
    for mode in [Mode::Burst, Mode::Fluid] {
        let at = |p: &str, q: usize| {
            let mut cfg = config(8, 8, 2, policy(p), q, mode);
            cfg.traffic.step_bytes = 512 * 1024;
            cfg.shape.segment_bytes = 128 * 1024;
            // Two segments per QP: the window, not NCCL's slots, bounds what is in flight, so
            // DQPLB's completion-driven refill has something to steer (docs/records/simulation.md).
            cfg.shape.outstanding = 2;
            let r = run(&cfg).unwrap();
            clean(&r);
            r
        };
        let single = at("single-qp", 1);
        let stat = at("static-split", 8);
        let dq = at("dqplb", 8);
        let spray = at("spray", 8);
        let t = |r: &SimResult| r.time_over_ideal;
        eprintln!(
            "{mode:?}: single {:.3} static {:.3} dqplb {:.3} bound {:.3}..{:.3} spray {:.3}",
            t(&single),
            t(&stat),
            t(&dq),
            dq.bound_lower,
            dq.bound_upper,
            t(&spray)
        );
        assert!(t(&single) >= t(&stat), "single >= static");
        assert!(t(&stat) > t(&dq), "static > dqplb");
        assert!(
            t(&dq) >= dq.bound_lower,
            "dqplb >= the best split over its paths"
        );
        assert!(dq.bound_lower >= 1.0 && dq.bound_lower <= dq.bound_upper + 1e-9);
        if mode == Mode::Fluid {
            assert!(
                (t(&spray) - 1.0).abs() < 0.01,
                "fluid spray is ideal: {}",
                t(&spray)
            );
        }
    }
}

#[test]
fn every_traffic_policy_and_mode_delivers_exactly_once() {
    for traffic in [
        TrafficKind::Ring,
        TrafficKind::Permutation,
        TrafficKind::AllToAll,
        TrafficKind::LeafShift,
    ] {
        for p in [
            "single-qp",
            "static-split",
            "round-robin-message",
            "dqplb",
            "dqplb-led",
            "spray",
        ] {
            for mode in [Mode::Burst, Mode::Fluid] {
                let mut cfg = config(4, 4, 2, policy(p), 4, mode);
                cfg.fabric.failed_links = 2;
                cfg.fabric.slow_links = 2;
                cfg.traffic.kind = traffic;
                cfg.traffic.bytes = 3 << 20;
                cfg.traffic.step_bytes = 256 * 1024;
                cfg.traffic.placement = dqplb_sim::Placement::Fragmented;
                cfg.shape.segment_bytes = 64 * 1024;
                cfg.shape.outstanding = 2;
                let r = run(&cfg).unwrap();
                assert_eq!(
                    r.errors.total(),
                    0,
                    "{traffic:?} {p} {mode:?}: {:?}",
                    r.errors
                );
                assert_eq!(r.missing, 0, "{traffic:?} {p} {mode:?}");
                assert!(r.time_us > 0.0 && r.pct_of_ideal <= 100.0 + 1e-6);
                let per_phase: u64 = match traffic {
                    TrafficKind::Ring => 2 * 15 * (3u64 << 20).div_ceil(16).div_ceil(256 * 1024),
                    TrafficKind::AllToAll => 15 * (3u64 << 20).div_ceil(16).div_ceil(256 * 1024),
                    _ => (3u64 << 20).div_ceil(256 * 1024),
                };
                assert_eq!(r.messages, per_phase * 16 * 2, "{traffic:?} {p} {mode:?}");
            }
        }
    }
}

#[test]
fn same_seed_same_bytes_and_threads_do_not_matter() {
    let mut cfg = config(4, 4, 4, policy("dqplb"), 4, Mode::Burst);
    cfg.traffic.kind = TrafficKind::Ring;
    cfg.traffic.placement = dqplb_sim::Placement::Fragmented;
    cfg.shape.outstanding = 2;
    cfg.shape.segment_bytes = 128 * 1024;
    cfg.traffic.step_bytes = 512 * 1024;
    let a = run(&cfg).unwrap().to_json();
    let b = run(&cfg).unwrap().to_json();
    assert_eq!(a, b);
    cfg.threads = 1;
    assert_eq!(run(&cfg).unwrap().to_json(), a);
    cfg.seed = 2;
    assert_ne!(run(&cfg).unwrap().to_json(), a);
    let mut f = cfg.clone();
    f.mode = Mode::Fluid;
    assert_eq!(run(&f).unwrap().to_json(), run(&f).unwrap().to_json());
}

#[test]
fn fixed_source_port_pins_every_qp_and_e_ecmp_spreads_them() {
    use dqplb_sim::SourcePort;
    let at = |sport: SourcePort, dest_qpn: bool, p: &str, q: usize| {
        let mut cfg = config(8, 8, 2, policy(p), q, Mode::Fluid);
        cfg.fabric.hash.source_port = sport;
        cfg.fabric.hash.dest_qpn = dest_qpn;
        // A random permutation: with a fixed port the leaf shift of consecutive addresses
        // hashes perfectly (CRC is linear in the address bits), which would hide the effect.
        cfg.traffic.kind = TrafficKind::Permutation;
        let r = run(&cfg).unwrap();
        clean(&r);
        r.time_over_ideal
    };
    let fixed = SourcePort::Fixed(0xC000);
    let single = at(fixed, false, "single-qp", 1);
    let pinned = at(fixed, false, "static-split", 8);
    let eecmp = at(fixed, true, "static-split", 8);
    eprintln!("fixed port: single {single:.3}, static q=8 {pinned:.3}, with E-ECMP {eecmp:.3}");
    // All 8 QPs of a pair share the 5-tuple: the same path as one QP, the same time.
    assert!((pinned - single).abs() / single < 0.02);
    assert!(eecmp < 0.8 * pinned);
}

#[test]
fn rehash_replaces_stragglers_and_delivers_exactly_once() {
    for mode in [Mode::Burst, Mode::Fluid] {
        let at = |p: &str| {
            let mut cfg = config(8, 8, 2, policy(p), 8, mode);
            cfg.traffic.step_bytes = 512 * 1024;
            cfg.traffic.bytes = 32 << 20;
            cfg.shape.segment_bytes = 128 * 1024;
            cfg.shape.outstanding = 2;
            cfg.shape.rehash.ratio = 1.5;
            cfg.shape.rehash.window = 8;
            cfg.shape.rehash.cooldown = 10_000_000;
            cfg.shape.rehash.budget = 16;
            let r = run(&cfg).unwrap();
            clean(&r);
            r
        };
        let plain = at("dqplb");
        let re = at("dqplb-rehash");
        eprintln!(
            "{mode:?}: dqplb {:.3}, dqplb-rehash {:.3} x ideal with {} re-hashes",
            plain.time_over_ideal, re.time_over_ideal, re.rehashes
        );
        assert_eq!(plain.rehashes, 0);
        assert!(re.rehashes > 0, "{mode:?}: no straggler was re-hashed");
    }
}

#[test]
fn a_background_job_slows_the_collective_and_is_cut_off_at_its_end() {
    for mode in [Mode::Burst, Mode::Fluid] {
        let at = |bg_messages: u32| {
            let mut cfg = config(8, 8, 2, policy("dqplb"), 8, mode);
            cfg.traffic.kind = TrafficKind::Ring;
            cfg.traffic.placement = dqplb_sim::Placement::Fragmented;
            cfg.traffic.step_bytes = 512 * 1024;
            cfg.traffic.bytes = 64 << 20;
            cfg.traffic.background_hosts = 32;
            cfg.traffic.background_messages = bg_messages;
            cfg.shape.segment_bytes = 128 * 1024;
            cfg.shape.outstanding = 2;
            let r = run(&cfg).unwrap();
            assert_eq!(r.errors.total(), 0, "{mode:?}: {:?}", r.errors);
            assert_eq!(r.missing, 0);
            let chunk = (64u64 << 20).div_ceil(32).div_ceil(128) * 128;
            let msgs = 2 * 31 * chunk.div_ceil(512 * 1024);
            // Only the collective's messages count; the background is cut off when it ends.
            assert_eq!(r.messages, msgs * 32 * 2, "{mode:?}");
            assert_eq!(r.background_hosts, 32);
            r
        };
        // The same 32-rank ring, same paths: the other 32 hosts idle, then busy.
        let idle = at(0);
        let busy = at(dqplb_sim::traffic::BACKGROUND_ENDLESS);
        eprintln!(
            "{mode:?}: 32-rank ring {:.2}% of ideal next to idle hosts, {:.2}% next to a 32-host permutation",
            idle.pct_of_ideal, busy.pct_of_ideal
        );
        assert!(busy.time_over_ideal > idle.time_over_ideal);
    }
}
