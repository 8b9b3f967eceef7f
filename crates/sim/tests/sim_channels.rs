//! NCCL's channels and the nccl baseline policy: every mode completes exactly once with two
//! connections per rank pair, at the same ideal as one, and pinned ports run end to end.

use dqplb_engine::PolicyKind;
use dqplb_sim::{
    run, ConnShape, FabricSpec, HashFields, Mode, Placement, SimConfig, SimPolicy, SourcePort,
    TrafficKind, TrafficSpec,
};

fn config(policy: SimPolicy, channels: u32, mode: Mode, source_port: SourcePort) -> SimConfig {
    SimConfig {
        fabric: FabricSpec {
            hosts: 16,
            rails: 1,
            hosts_per_leaf: 4,
            spines: 4,
            hash: HashFields {
                source_port,
                dest_qpn: false,
            },
            ..FabricSpec::default()
        },
        traffic: TrafficSpec {
            kind: TrafficKind::Ring,
            bytes: 16 << 20,
            step_bytes: 128 * 1024,
            placement: Placement::Fragmented,
            channels,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy,
            qps: 2,
            outstanding: 2,
            segment_bytes: 32 * 1024,
            rehash: dqplb_sim::SIM_REHASH,
            depth: None,
            repin: None,
        },
        mode,
        seed: 1,
        threads: 1,
        epoch_ps: 0,
        rails_simulated: 0,
        packet: dqplb_sim::PacketSpec::default(),
    }
}

#[test]
fn channels_and_nccl_complete_exactly_once_in_every_mode() {
    let policies = [
        SimPolicy::Nccl { split: false },
        SimPolicy::Nccl { split: true },
        SimPolicy::Engine(PolicyKind::Dqplb),
        SimPolicy::Engine(PolicyKind::DqplbLed),
    ];
    for mode in [Mode::Burst, Mode::Fluid, Mode::Packet] {
        for p in policies {
            let one = run(&config(p, 1, mode, SourcePort::FromQpn)).unwrap();
            for source in [
                SourcePort::FromQpn,
                SourcePort::Pinned,
                SourcePort::PinnedAbsolute,
            ] {
                let two = run(&config(p, 2, mode, source)).unwrap();
                let what = format!("{mode:?} {} {source:?}", p.name());
                assert_eq!((two.errors.total(), two.missing), (0, 0), "{what}");
                assert_eq!(two.channels, 2, "{what}");
                assert_eq!(two.ideal_us, one.ideal_us, "{what}: the same bytes per NIC");
            }
        }
    }
}

#[test]
fn nccl_names_and_engine_policies() {
    let nccl = SimPolicy::parse("nccl").unwrap();
    assert_eq!(nccl, SimPolicy::Nccl { split: false });
    assert_eq!(nccl.name(), "nccl");
    assert_eq!(
        SimPolicy::parse("NCCL-split").unwrap(),
        SimPolicy::Nccl { split: true }
    );
    assert!(SimPolicy::parse("ncc")
        .unwrap_err()
        .contains("nccl, nccl-split"));
}
