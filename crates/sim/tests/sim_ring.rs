//! The ring all-reduce model with steps of about `--slots` messages and more: NCCL moves such a
//! step round the ring in passes of half the slots (docs/records/simulation.md, "Engine and traffic"), so
//! every step size completes, each message released exactly once on both sides.

use dqplb_engine::PolicyKind;
use dqplb_sim::{
    run, ConnShape, Errors, FabricSpec, Mode, SimConfig, SimPolicy, TrafficKind, TrafficSpec,
};

const HOSTS: usize = 8;
const RAILS: usize = 2;
const STEP: u64 = 64 * 1024;

/// An 8-rank ring on 2 rails whose steps are `per_step` messages of 64 KiB, the last one half
/// that (so the message lengths are checked too).
fn config(per_step: u64, slots: u32, max_steps: u32, mode: Mode) -> SimConfig {
    let chunk = (per_step - 1) * STEP + STEP / 2;
    SimConfig {
        fabric: FabricSpec {
            hosts: HOSTS,
            rails: RAILS,
            hosts_per_leaf: 4,
            spines: 4,
            ..FabricSpec::default()
        },
        traffic: TrafficSpec {
            kind: TrafficKind::Ring,
            bytes: chunk * HOSTS as u64,
            step_bytes: STEP,
            slots,
            max_steps,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy: SimPolicy::Engine(PolicyKind::Dqplb),
            qps: 4,
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
fn ring_steps_of_slots_messages_and_more_complete_exactly_once() {
    for mode in [Mode::Burst, Mode::Fluid, Mode::Packet] {
        for slots in [8u32, 4] {
            let s = u64::from(slots);
            for per_step in [s - 1, s, s + 1, 3 * s] {
                for max_steps in [0u32, 3] {
                    let cfg = config(per_step, slots, max_steps, mode);
                    let what = format!(
                        "{mode:?} slots {slots}, {per_step} messages per step, max-steps {max_steps}"
                    );
                    let r = run(&cfg).unwrap_or_else(|e| panic!("{what}: {e}"));
                    let steps = if max_steps == 0 {
                        2 * (HOSTS as u32 - 1)
                    } else {
                        max_steps
                    };
                    assert_eq!(r.steps_simulated, steps, "{what}");
                    assert_eq!(r.errors, Errors::default(), "{what}");
                    assert_eq!(r.missing, 0, "{what}: messages not released");
                    let each = (HOSTS * RAILS) as u64 * per_step * u64::from(steps);
                    assert_eq!(r.messages, each, "{what}: messages received in order");
                    assert_eq!(
                        r.message_latency.messages, each,
                        "{what}: releases recorded"
                    );
                    assert!(r.time_us > 0.0 && r.pct_of_ideal <= 100.0 + 1e-6, "{what}");
                }
            }
        }
    }
}

#[test]
fn a_ring_of_more_than_one_step_needs_two_slots() {
    let mut cfg = config(1, 1, 0, Mode::Burst);
    assert!(run(&cfg).unwrap_err().to_string().contains("--slots 1"));
    // One step is consumed on arrival: one slot is enough.
    cfg.traffic.max_steps = 1;
    let r = run(&cfg).unwrap();
    assert_eq!((r.missing, r.messages), (0, (HOSTS * RAILS) as u64));
}
