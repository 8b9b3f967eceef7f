//! P mode with finite switch buffers (`--buffer-kb`): tail drops recovered by go-back-N (one NAK
//! per gap, a rewind on NAK or on the local ACK timeout), checked packet by packet on tiny cases.

use std::process::Command;

mod sim_support;

use dqplb_engine::PolicyKind;
use dqplb_sim::loss::{ack_timeout_ps, LossSpec};
use dqplb_sim::timeseries::{TsKind, TsRow};
use dqplb_sim::{
    run, ConnShape, FabricSpec, Mode, PacketSpec, PacketSummary, SimConfig, SimPolicy, SimResult,
    TrafficKind, TrafficSpec, SIM_REHASH,
};

const MTU: u32 = 4096;
/// 4096 bytes at 400 Gb/s.
const SER_PS: u64 = 81_920;

/// `senders` hosts under one leaf each send one `bytes` message (one segment) to host 0 through
/// its leaf downlink, the only switch egress; single QP, ECN off, a buffer of `buffer` bytes.
fn incast(senders: usize, bytes: u64, buffer: u64) -> SimConfig {
    SimConfig {
        fabric: FabricSpec {
            hosts: senders + 1,
            rails: 1,
            hosts_per_leaf: 16,
            spines: 1,
            ..FabricSpec::default()
        },
        traffic: TrafficSpec {
            kind: TrafficKind::Incast,
            bytes,
            step_bytes: bytes,
            slots: 2,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy: SimPolicy::Engine(PolicyKind::SingleQp),
            qps: 1,
            outstanding: 1,
            segment_bytes: bytes as u32,
            rehash: SIM_REHASH,
            depth: None,
            repin: None,
        },
        mode: Mode::Packet,
        seed: 1,
        threads: 1,
        epoch_ps: 0,
        rails_simulated: 0,
        packet: PacketSpec {
            mtu: MTU,
            ecn: dqplb_sim::switchq::EcnSpec {
                enabled: false,
                ..PacketSpec::default().ecn
            },
            loss: LossSpec {
                buffer_bytes: buffer,
                // 4.096 us x 2^10 = 4.194 ms.
                ib_timeout: 10,
            },
            ..PacketSpec::default()
        },
    }
}

fn counts(r: &SimResult) -> (u64, u64, u64, u64, u64, u64) {
    let p = r.packet.as_ref().unwrap();
    (
        p.sent_packets,
        p.drops,
        p.resent_packets,
        p.naks,
        p.ack_timeouts,
        p.discarded,
    )
}

/// Every message once, no engine or protocol error, and the packet books balance: each PSN
/// goes out once first and the rest are resends; what the receivers took is each PSN once.
fn clean(r: &SimResult, unique: u64) {
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert_eq!(r.missing, 0);
    let p = r.packet.as_ref().unwrap();
    assert_eq!(p.sent_packets, unique + p.resent_packets, "{p:?}");
    assert!(
        p.sent_packets >= unique + p.drops + p.discarded,
        "taken + dropped + discarded exceeds sent: {p:?}"
    );
}

#[test]
fn a_lost_tail_waits_out_the_ack_timeout() {
    // Two one-packet messages reach a one-packet buffer at the same picosecond: host 1's is
    // taken, host 2's dropped. Nothing follows it, so no NAK: host 2 resends when its ACK timer
    // (4.194 ms) fires, and the run ends one delivery and acknowledgement later.
    let r = run(&incast(2, 4096, 4096)).unwrap();
    clean(&r, 2);
    assert_eq!(counts(&r), (3, 1, 1, 0, 1, 0));
    let rto = ack_timeout_ps(10) as f64 / 1e6;
    // After the resend: serialization at the NIC, 2 hops of 1 us (and the leaf's, cut-through),
    // then the acknowledgement's 2 hops back: 4 us + under 0.2 us.
    assert!(
        r.time_us > rto + 4.0 && r.time_us < rto + 4.2,
        "{} us, timeout {rto} us",
        r.time_us
    );
}

#[test]
fn a_packet_past_a_gap_brings_one_nak_and_a_resend_from_the_gap() {
    // Hosts 1 and 2 each send 4 packets; host 2 starts 2 packet times later. Its first two
    // packets meet host 1's last two at the one-packet buffer and lose (host 1 is pushed first);
    // its third finds the buffer free and is taken past the gap: the receiver NAKs PSN 0 once
    // and discards it and the fourth. The NAK brings all 4 again; no timeout.
    let mut cfg = incast(2, 4 * 4096, 4096);
    cfg.packet.stagger_ps = 2 * SER_PS;
    let r = run(&cfg).unwrap();
    clean(&r, 8);
    assert_eq!(counts(&r), (12, 2, 4, 1, 0, 2));
    assert!(r.time_us < 10.0, "{} us: no timeout", r.time_us);
}

#[test]
fn a_timeout_resends_from_the_first_psn_the_receiver_lacks() {
    // A two-packet buffer: host 2's first packet is taken, its other two lost behind host 1's.
    // No packet follows the gap: the timer fires and host 2 resends PSNs 1 and 2 only.
    let r = run(&incast(2, 3 * 4096, 2 * 4096)).unwrap();
    clean(&r, 6);
    assert_eq!(counts(&r), (8, 2, 2, 0, 1, 0));
}

#[test]
fn an_ample_buffer_changes_nothing() {
    // 8-to-1 with DCQCN and ECN on, 32 MiB each: a buffer above the deepest queue of the
    // lossless run drops nothing and gives the same run, packet for packet.
    let mut lossless = incast(8, 32 << 20, 0);
    lossless.traffic.step_bytes = 4 << 20;
    lossless.traffic.slots = 8;
    lossless.shape.outstanding = 16;
    lossless.shape.segment_bytes = 128 * 1024;
    lossless.packet.ecn = PacketSpec::default().ecn;
    let a = run(&lossless).unwrap();
    let pa = a.packet.clone().unwrap();
    let mut lossy = lossless.clone();
    lossy.packet.loss.buffer_bytes = pa.max_queue_bytes + u64::from(MTU);
    let b = run(&lossy).unwrap();
    let pb = b.packet.clone().unwrap();
    clean(&b, 8 * (32 << 20) / u64::from(MTU));
    assert_eq!(
        (pb.drops, pb.naks, pb.ack_timeouts, pb.discarded),
        (0, 0, 0, 0)
    );
    assert_eq!(a.time_us, b.time_us);
    let same = |p: &PacketSummary| {
        (
            p.packets,
            p.ecn_marks,
            p.cnps,
            p.rate_cuts,
            p.max_queue_bytes,
            p.sent_packets,
        )
    };
    assert_eq!(same(&pa), same(&pb));
    // One buffer packet less than that deepest queue, and packets are lost and recovered.
    lossy.packet.loss.buffer_bytes = pa.max_queue_bytes - u64::from(MTU);
    let c = run(&lossy).unwrap();
    clean(&c, 8 * (32 << 20) / u64::from(MTU));
    let pc = c.packet.unwrap();
    assert!(pc.drops > 0 && pc.resent_packets >= pc.drops, "{pc:?}");
}

/// 4 senders of 8 MiB (1 MiB messages, 8 x 128 KiB per QP) into a 200 kB buffer, ECN off.
fn lossy_4_to_1() -> SimConfig {
    let mut cfg = incast(4, 8 << 20, 200_000);
    cfg.traffic.step_bytes = 1 << 20;
    cfg.traffic.slots = 8;
    cfg.shape.outstanding = 8;
    cfg.shape.segment_bytes = 128 * 1024;
    cfg
}

#[test]
fn lossy_runs_are_deterministic_and_deliver_every_message_once() {
    // 4-to-1 with ECN off and a 200 kB buffer: heavy loss, go-back-N, every message once.
    let cfg = lossy_4_to_1();
    let a = run(&cfg).unwrap();
    clean(&a, 4 * (8 << 20) / u64::from(MTU));
    let p = a.packet.as_ref().unwrap();
    assert!(p.drops > 100 && p.naks > 0, "{p:?}");
    let b = run(&cfg).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
}

#[test]
fn the_time_series_drops_and_resends_add_up_to_the_summary() {
    // The lossy 4-to-1 above, sampled every 50 us: at the last sample the per-link drops and the
    // per-QP drops both sum to the run's drops, and the per-QP resends to its resent packets.
    let mut cfg = lossy_4_to_1();
    cfg.packet.sample_ps = 50_000_000;
    let r = run(&cfg).unwrap();
    let p = r.packet.as_ref().unwrap();
    let last = p.timeseries.iter().map(|x| x.t_ps).max().unwrap();
    let at_end = || p.timeseries.iter().filter(move |x| x.t_ps == last);
    let sum = |kind_is_qp: bool, f: fn(&TsRow) -> u64| -> u64 {
        at_end()
            .filter(|x| (x.kind == TsKind::Qp) == kind_is_qp)
            .map(f)
            .sum()
    };
    assert!(p.drops > 100, "{p:?}");
    assert_eq!(sum(false, |x| x.drops), p.drops, "link rows");
    assert_eq!(sum(true, |x| x.drops), p.drops, "QP rows");
    assert_eq!(sum(true, |x| x.resent), p.resent_packets);
    assert_eq!(sum(false, |x| x.resent), 0);
    // Counters only grow: each QP's drops never fall from one sample to the next.
    let mut seen = std::collections::HashMap::new();
    for x in p.timeseries.iter().filter(|x| x.kind == TsKind::Qp) {
        let before = seen.insert((x.id, x.qp), x.drops).unwrap_or(0);
        assert!(x.drops >= before, "{x:?}");
    }
    // A lossless run writes zeros there.
    cfg.packet.loss.buffer_bytes = 0;
    let r = run(&cfg).unwrap();
    let rows = &r.packet.as_ref().unwrap().timeseries;
    assert!(!rows.is_empty() && rows.iter().all(|x| x.drops == 0 && x.resent == 0));
}

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .arg("sim")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_command_refuses_what_the_model_does_not_cover() {
    let base = [
        "--mode",
        "p",
        "--hosts",
        "3",
        "--rails",
        "1",
        "--spines",
        "1",
        "--traffic",
        "incast",
        "--bytes",
        "64K",
    ];
    let err = |extra: &[&str]| {
        let out = sim(&[&base[..], extra].concat());
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(err(&["--buffer-kb", "100", "--pfc"]).contains("PFC's class is lossless"));
    assert!(err(&["--buffer-kb", "100", "--policy", "spray"]).contains("out of order"));
    assert!(err(&["--buffer-kb", "1"]).contains("holds no 4096-byte packet"));
    assert!(err(&["--buffer-kb", "-1"]).contains("0 (unbounded) or more"));
    assert!(err(&["--buffer-kb", "100", "--ib-timeout", "32"]).contains("0 ..= 31"));
    // And a lossy run prints its recovery counts.
    let out = sim(&[&base[..], &["--buffer-kb", "100", "--ecn", "off"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("sent_pkts") && text.contains("timeouts"),
        "{text}"
    );
}

#[test]
fn a_fabric_sim_block_sets_the_buffer_and_the_timeout() {
    // The [fabric.sim] keys are the options' names. 4-to-1 under one leaf with ECN off into a
    // 200 kB buffer: drops, and the JSON carries every recovery count.
    let block = "\n[fabric.sim]\nmode = \"p\"\nhosts = 5\nrails = 1\nhosts-per-leaf = 8\nspines = 1\ntraffic = \"incast\"\nbytes = \"8M\"\necn = \"off\"\nbuffer-kb = 200\nib-timeout = 12\n";
    let (dir, conf) = sim_support::site_toml("loss-toml", block);
    let out = sim(&["--config", conf.to_str().unwrap(), "--format", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let p = &v[0]["packet"];
    assert_eq!(v[0]["missing"], 0);
    assert!(p["drops"].as_u64().unwrap() > 0, "{p}");
    let unique = 4 * (8u64 << 20) / u64::from(MTU);
    assert_eq!(
        p["sent_packets"].as_u64().unwrap(),
        unique + p["resent_packets"].as_u64().unwrap()
    );
    for k in ["naks", "ack_timeouts", "discarded"] {
        assert!(p[k].is_u64(), "{k} in {p}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
