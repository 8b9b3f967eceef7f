//! `--traffic tree`: NCCL's double binary tree all-reduce in the simulator. Every edge moves every
//! chunk once, a chunk follows the trees' critical path, and a long buffer runs at the NIC's rate.

mod sim_support;

use dqplb_sim::tree::double_tree;
use dqplb_sim::{
    run, ConnShape, FabricSpec, Mode, PacketSpec, Placement, SimConfig, SimError, SimPolicy,
    SimResult, TrafficKind, TrafficSpec, SIM_REHASH,
};
use sim_support::{dqplb, text};

/// B, F and P mode.
const MODES: [Mode; 3] = [Mode::Burst, Mode::Fluid, Mode::Packet];

/// 400 Gb/s: picoseconds per byte.
const PS_PER_BYTE: f64 = 20.0;

fn config(
    hosts: usize,
    per_leaf: usize,
    rails: usize,
    bytes: u64,
    policy: &str,
    qps: usize,
) -> SimConfig {
    SimConfig {
        fabric: FabricSpec {
            hosts,
            rails,
            hosts_per_leaf: per_leaf,
            spines: 8,
            ..FabricSpec::default()
        },
        traffic: TrafficSpec {
            kind: TrafficKind::Tree,
            bytes,
            placement: Placement::Fragmented,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy: SimPolicy::parse(policy).unwrap(),
            qps,
            outstanding: 2,
            segment_bytes: 128 << 10,
            rehash: SIM_REHASH,
            depth: None,
            repin: None,
        },
        mode: Mode::Burst,
        seed: 1,
        threads: 2,
        epoch_ps: 5_000_000,
        rails_simulated: 0,
        packet: PacketSpec::default(),
    }
}

/// Runs `cfg`, which must finish cleanly with every chunk of every edge delivered once:
/// 2 trees x 2(n-1) edges x ceil(bytes / 2 / 512 KiB) messages per rail.
fn clean(cfg: &SimConfig) -> SimResult {
    let r = run(cfg).unwrap();
    let what = format!("{:?} {:?}", cfg.mode, cfg.shape.policy);
    assert_eq!(r.errors.total(), 0, "{what}: {:?}", r.errors);
    assert_eq!(r.missing, 0, "{what}: messages not released");
    let n = cfg.fabric.hosts as u64;
    let (edges, _) = double_tree(n as u32);
    assert_eq!(edges.len() as u64, 4 * (n - 1));
    let per_edge = (cfg.traffic.bytes / 2).div_ceil(512 << 10);
    assert_eq!(
        r.messages,
        cfg.fabric.rails as u64 * 4 * (n - 1) * per_edge,
        "{what}"
    );
    assert_eq!(r.traffic, TrafficKind::Tree);
    assert!(r.time_over_ideal >= r.bound_lower - 1e-9, "{what}");
    r
}

#[test]
fn one_chunk_follows_the_critical_path_of_the_trees() {
    // 16 hosts on one leaf: a tree is 4 edges deep (0 -> 8 -> 4 -> 2 -> 1, and its mirror), so
    // the chunk goes 4 edges up and 4 down, each edge 2 hops (1 us each) after a 128 KiB
    // message leaves a NIC that may first send up to 3 others.
    let msg_us = (128 << 10) as f64 * PS_PER_BYTE / 1e6;
    for mode in MODES {
        let mut cfg = config(16, 16, 1, 256 << 10, "single-qp", 1);
        cfg.traffic.placement = Placement::Contiguous;
        cfg.mode = mode;
        let r = clean(&cfg);
        let (low, high) = (8.0 * (2.0 + msg_us), 8.0 * (2.0 + 4.0 * msg_us));
        assert!(
            r.time_us >= low && r.time_us <= high,
            "{mode:?}: {} us outside the critical path's [{low}, {high}]",
            r.time_us
        );
    }
}

#[test]
fn a_long_buffer_runs_at_the_busiest_nic_s_rate() {
    // 32 MiB: 32 chunks of 512 KiB per edge. A rank with two children in one tree sends 3
    // chunks there and 1 in the other (4 per chunk index), so no schedule beats 32 x 4 chunk
    // times, and the pipeline fills in at most 2 x depth more. It also receives 4 per index, 3
    // of them at once: in P mode that queue is marked and DCQCN slows the senders (1864 us for
    // one QP), so P mode runs without ECN here; the schedule, not DCQCN, is under test.
    let period_us = 4.0 * (512 << 10) as f64 * PS_PER_BYTE / 1e6;
    for mode in MODES {
        for (policy, qps) in [("single-qp", 1), ("dqplb", 4)] {
            let mut cfg = config(16, 16, 1, 32 << 20, policy, qps);
            cfg.traffic.placement = Placement::Contiguous;
            cfg.mode = mode;
            cfg.packet.ecn.enabled = false;
            let r = clean(&cfg);
            let (low, high) = (32.0 * period_us, 40.0 * period_us);
            assert!(
                r.time_us >= low - 1e-6 && r.time_us <= high,
                "{mode:?} {policy}: {} us outside [{low}, {high}]",
                r.time_us
            );
            // The ideal is NCCL's bus bytes, 2 (n - 1) / n of the buffer.
            let ideal = 2.0 * 15.0 / 16.0 * (32 << 20) as f64 * PS_PER_BYTE / 1e6;
            assert!((r.ideal_us - ideal).abs() < 1e-6, "{}", r.ideal_us);
        }
    }
}

#[test]
fn on_a_fragmented_fabric_the_policies_keep_their_order() {
    // 64 hosts x 2 rails, 8 leaves of 8, 8 spines, 64 MiB: tree edges cross the spines.
    let pct = |policy: &str, qps: usize, mode: Mode| {
        let mut cfg = config(64, 8, 2, 64 << 20, policy, qps);
        cfg.mode = mode;
        clean(&cfg).pct_of_ideal
    };
    let single = pct("single-qp", 1, Mode::Burst);
    let split = pct("static-split", 8, Mode::Burst);
    let dq = pct("dqplb", 8, Mode::Burst);
    let led = pct("dqplb-led", 8, Mode::Burst);
    assert!(
        single < split && split < dq && dq < led,
        "{single} {split} {dq} {led}"
    );
    // One QP per edge has nothing to schedule: B and F agree within 2%.
    let f = pct("single-qp", 1, Mode::Fluid);
    assert!((f - single).abs() / single < 0.02, "B {single} F {f}");
}

#[test]
fn same_seed_same_result_and_another_seed_another_placement() {
    let cfg = config(64, 8, 2, 16 << 20, "dqplb", 8);
    let a = serde_json::to_string(&clean(&cfg)).unwrap();
    let b = serde_json::to_string(&clean(&cfg)).unwrap();
    assert_eq!(a, b);
    let mut other = cfg.clone();
    other.seed = 2;
    assert_ne!(serde_json::to_string(&clean(&other)).unwrap(), a);
}

#[test]
fn max_steps_is_refused_for_a_tree() {
    let mut cfg = config(16, 16, 1, 1 << 20, "dqplb", 4);
    cfg.traffic.max_steps = 4;
    assert_eq!(
        run(&cfg).unwrap_err(),
        SimError::Config("--max-steps 4 applies to --traffic ring only, not tree".into())
    );
}

#[test]
fn the_command_takes_traffic_tree() {
    let out = dqplb(&[
        "sim",
        "--hosts",
        "32",
        "--rails",
        "1",
        "--hosts-per-leaf",
        "8",
        "--spines",
        "4",
        "--traffic",
        "tree",
        "--bytes",
        "4M",
        "--mode",
        "b",
        "--policy",
        "dqplb",
        "--qps",
        "4",
        "--format",
        "csv",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = text(&out.stdout);
    let row = csv.lines().nth(1).expect("a data row");
    assert!(row.contains(",tree,4194304,"), "{row}");
    let bad = dqplb(&["sim", "--traffic", "trees"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("unknown traffic 'trees' (ring, tree,"));
}

#[test]
fn a_lossy_tree_waits_for_the_ack_timeout_and_still_delivers_every_chunk_once() {
    // 16 hosts, 4 per leaf, 200 KB per switch egress: a parent's downlink takes 3 chunks at
    // once and drops. A dropped tail has no later packet to reveal its gap, so only the QP's
    // ACK timeout (4.096 us x 2^10 = 4.19 ms here) recovers it: go-back-N without a tail
    // probe, as RoCE NICs have. The ring on the same fabric drops nothing (no incast).
    let mut cfg = config(16, 4, 1, 2 << 20, "dqplb", 2);
    cfg.fabric.spines = 2;
    cfg.traffic.placement = Placement::Contiguous;
    cfg.mode = Mode::Packet;
    cfg.threads = 1;
    cfg.packet.loss.buffer_bytes = 200_000;
    cfg.packet.loss.ib_timeout = 10;
    let r = clean(&cfg);
    let p = r.packet.as_ref().expect("P mode's packet summary");
    assert!(p.drops > 0 && p.ack_timeouts > 0, "{p:?}");
    let timeout_us = 4.096 * 1024.0;
    assert!(r.time_us > timeout_us, "{} us", r.time_us);
    cfg.traffic.kind = TrafficKind::Ring;
    let ring = run(&cfg).unwrap();
    let q = ring.packet.as_ref().unwrap();
    assert_eq!((q.drops, q.ack_timeouts, ring.missing), (0, 0, 0));
}
