//! The depth rule's trial re-pins in the simulator: pinned QPs behind a failed uplink move onto
//! their connection's fastest path and every message still arrives exactly once; the rule needs
//! the depth rule.

use dqplb_engine::{DepthRule, PolicyKind};
use dqplb_sim::{
    run, ConnShape, FabricSpec, HashFields, Mode, Placement, SimConfig, SimPolicy, SourcePort,
    TrafficKind, TrafficSpec, SIM_REHASH, SIM_REPIN,
};

/// A 256-host rail of 16 leaves x 16 spines, a fragmented pinned ring over 2 channels of 8 QPs
/// (16 QPs per NIC pair, one per spine while the group is whole), 32 of its steps.
fn config(failed_links: usize, depth: bool, repin: bool) -> SimConfig {
    SimConfig {
        fabric: FabricSpec {
            hosts: 256,
            rails: 1,
            hosts_per_leaf: 16,
            spines: 16,
            failed_links,
            hash: HashFields {
                source_port: SourcePort::Pinned,
                dest_qpn: false,
            },
            ..FabricSpec::default()
        },
        traffic: TrafficSpec {
            kind: TrafficKind::Ring,
            bytes: 1 << 30,
            placement: Placement::Fragmented,
            channels: 2,
            max_steps: 32,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy: SimPolicy::Engine(PolicyKind::DqplbLed),
            qps: 8,
            outstanding: 2,
            segment_bytes: 16 << 10,
            rehash: SIM_REHASH,
            depth: depth.then_some(DepthRule {
                ratio: 1.25,
                raised: 3,
                hold: 4,
            }),
            repin: repin.then_some(SIM_REPIN),
        },
        mode: Mode::Burst,
        seed: 1,
        threads: 1,
        epoch_ps: 0,
        rails_simulated: 0,
        packet: dqplb_sim::PacketSpec::default(),
    }
}

#[test]
fn failed_uplinks_move_pinned_qps_and_every_message_arrives_once() {
    let pct = |r: &dqplb_sim::SimResult| (r.pct_of_ideal * 100.0).round() / 100.0;
    // Healthy: every QP of a pair has its own spine; nothing moves.
    let base = run(&config(0, true, false)).unwrap();
    let r = run(&config(0, true, true)).unwrap();
    assert_eq!((r.errors.total(), r.missing), (0, 0));
    assert_eq!((base.rehashes, r.rehashes), (0, 0));
    assert_eq!((pct(&base), pct(&r)), (99.3, 99.3));
    // 2 failed uplinks: groups of 15 break the relative pins; 74 moves (and moves back) lift
    // the ring by 4.65 points.
    let base = run(&config(2, true, false)).unwrap();
    let r = run(&config(2, true, true)).unwrap();
    assert_eq!((r.errors.total(), r.missing), (0, 0));
    assert_eq!((base.rehashes, r.rehashes), (0, 74));
    assert_eq!((pct(&base), pct(&r)), (80.19, 84.84));
}

#[test]
fn the_rule_needs_the_depth_rule() {
    let e = run(&config(2, false, true)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--repin-*: the re-pin rule runs on the depth rule (--depth-ratio, --depth-raised or \
         --depth-hold)"
    );
}
