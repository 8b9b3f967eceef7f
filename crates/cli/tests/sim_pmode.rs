//! Validation of `dqplb sim --mode p` (per packet, ECN, CNPs, DCQCN per QP): N-to-1 convergence
//! to 1/N, bounded queues with ECN and growing ones without, exactly-once delivery, determinism.

use std::process::Command;

mod sim_support;

use dqplb_engine::PolicyKind;
use dqplb_sim::packet::dcqcn_profile;
use dqplb_sim::timeseries::{qp_gbps, TsKind};
use dqplb_sim::{
    run, ConnShape, FabricSpec, Mode, PacketSpec, SimConfig, SimPolicy, SimResult, TrafficKind,
    TrafficSpec, SIM_REHASH,
};

const LINK_GBPS: f64 = 400.0;
const HOP_PS: u64 = 1_000_000;

/// N senders and one receiver under one leaf: the receiver's leaf downlink is the bottleneck.
/// Single QP per sender, 16 x 4 MiB messages in flight (64 MiB, far above what DCQCN lets
/// through), so the reaction point, not the window, sets each QP's rate.
fn incast(n: usize, bytes: u64) -> SimConfig {
    SimConfig {
        fabric: FabricSpec {
            hosts: n + 1,
            rails: 1,
            hosts_per_leaf: 16,
            spines: 1,
            host_gbps: LINK_GBPS,
            hop_latency_ps: HOP_PS,
            ..FabricSpec::default()
        },
        traffic: TrafficSpec {
            kind: TrafficKind::Incast,
            bytes,
            step_bytes: 4 << 20,
            slots: 16,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy: SimPolicy::Engine(PolicyKind::SingleQp),
            qps: 1,
            outstanding: 16,
            segment_bytes: 128 * 1024,
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
            rp: dcqcn_profile("paper").unwrap(),
            cnp_interval_ps: 50_000_000,
            sample_ps: 1_000_000_000,
            ..PacketSpec::default()
        },
    }
}

fn clean(r: &SimResult, conns: u64) {
    assert_eq!(r.errors.total(), 0, "engine/protocol/order: {:?}", r.errors);
    assert_eq!(r.missing, 0, "messages not released");
    let per_conn = r.bytes.div_ceil(r.step_bytes);
    assert_eq!(r.messages, conns * per_conn, "every message exactly once");
}

/// Deepest sampled backlog of any switch queue between `t0` and `t1`, and the mean.
fn queue_in(r: &SimResult, t0: u64, t1: u64) -> (u64, f64) {
    let rows = &r.packet.as_ref().unwrap().timeseries;
    let q: Vec<u64> = rows
        .iter()
        .filter(|x| matches!(x.kind, TsKind::Link(_)) && x.t_ps >= t0 && x.t_ps <= t1)
        .map(|x| x.queue_bytes)
        .collect();
    let max = q.iter().copied().max().unwrap_or(0);
    (max, q.iter().sum::<u64>() as f64 / q.len().max(1) as f64)
}

/// The queue bound with ECN: above Kmax every packet is marked, so every sender gets a CNP
/// within one CNP interval and is cut one round trip (2 hops each way) later; meanwhile the
/// queue grows at most at the bottleneck's rate (the senders' sum stays below 2 C once the
/// start-up transient is over).
fn ecn_bound(cfg: &SimConfig) -> u64 {
    let c_bytes_per_ps = LINK_GBPS / 8000.0;
    let tau = cfg.packet.cnp_interval_ps + 4 * HOP_PS;
    cfg.packet.ecn.kmax + (c_bytes_per_ps * tau as f64) as u64
}

/// The start-up peak with ECN, N senders starting together at line rate C: the queue passes
/// Kmax after growing at (N - 1) C, the first marks there reach every sender one round trip
/// later (4 hop latencies, plus N + 4 packet times: the bottleneck serves the N senders'
/// packets in turn, and the bottleneck's and the NIC's serializations and the pacer's gap at
/// the old rate), meanwhile the queue keeps growing at (N - 1) C; each CNP cuts by alpha / 2 =
/// 1023 / 2048 (the initial alpha; nothing recovers in between: the rate timer, 55 us, restarts
/// at every cut and the cuts come every CNP interval, 50 us). After k cuts the queue grows at
/// N r_k - C for one interval, until N r_k <= C. Marks below Kmax only cut earlier.
fn transient_bound(cfg: &SimConfig, n: usize) -> u64 {
    let c = LINK_GBPS / 8000.0; // bytes per ps
    let packet_ps = f64::from(cfg.packet.mtu) / c;
    let delay = (4 * HOP_PS) as f64 + (n + 4) as f64 * packet_ps;
    let mut q = cfg.packet.ecn.kmax as f64 + (n - 1) as f64 * c * delay;
    let mut r = c;
    loop {
        r *= 1.0 - 1023.0 / 2048.0;
        let excess = n as f64 * r - c;
        if excess <= 0.0 {
            return q as u64;
        }
        q += excess * cfg.packet.cnp_interval_ps as f64;
    }
}

#[test]
fn dcqcn_n_to_1_converges_to_a_fair_share() {
    // Each sender has B = C x 120 ms / N to send: at the fair share all finish at 120 ms, and a
    // sender even 1.7 x faster is still sending at 70 ms, so the windows below see all of them.
    // Expected: every QP at C / N. DCQCN's convergence is slow (only the additive and hyper
    // increases, equal for all, and the marks that come more often to faster QPs pull the rates
    // together), so the check is statistical over eight seeds: (1) no QP is favoured: the share
    // of each QP index averaged over the seeds is within 10% of C / N (the set-up is symmetric
    // in the senders, so the expectation is exactly C / N); (2) every run is roughly fair over
    // 40 .. 70 ms: Jain's index (sum x)^2 / (N sum x^2) at least 0.9, every QP within 30% of
    // C / N (DCQCN keeps some runs off: at N = 2 seed 1 the two QPs stay at about 250 / 150
    // Gb/s; the faster gets more CNPs, but fast recovery brings each back towards its own
    // target, see docs/records/simulation.md);
    // (3) it converges: the worst QP's deviation, averaged over the seeds, is smaller over
    // 40 .. 70 ms than over 5 .. 15 ms; (4) the link stays full: the sum above 95% of C.
    let early = (5_000_000_000u64, 15_000_000_000u64);
    let late = (40_000_000_000u64, 70_000_000_000u64);
    let seeds = 1..=8u64;
    let runs = seeds.clone().count() as f64;
    for n in [2usize, 4, 8] {
        let bytes = (LINK_GBPS / 8.0 * 1e9 * 0.120 / n as f64) as u64 / 4096 * 4096;
        let fair = LINK_GBPS / n as f64;
        let mut mean_share = vec![0.0; n];
        let (mut dev_early, mut dev_late) = (0.0, 0.0);
        for seed in seeds.clone() {
            let mut cfg = incast(n, bytes);
            cfg.seed = seed;
            let r = run(&cfg).unwrap();
            clean(&r, n as u64);
            let rows = &r.packet.as_ref().unwrap().timeseries;
            let rates = |(t0, t1): (u64, u64)| -> Vec<f64> {
                (0..n as u32)
                    .map(|c| qp_gbps(rows, c, 0, t0, t1).expect("samples in the window"))
                    .collect()
            };
            let worst = |g: &[f64]| {
                g.iter()
                    .map(|x| (x - fair).abs() / fair)
                    .fold(0.0, f64::max)
            };
            let (e, g) = (rates(early), rates(late));
            dev_early += worst(&e);
            dev_late += worst(&g);
            let total: f64 = g.iter().sum();
            let jain = total * total / (n as f64 * g.iter().map(|x| x * x).sum::<f64>());
            eprintln!(
                "N={n} seed {seed}: 40-70 ms per-QP Gb/s {g:.1?} (fair {fair:.1}), total {total:.1}, Jain {jain:.4}, worst {:.1}% (5-15 ms: {:.1}%)",
                100.0 * worst(&g),
                100.0 * worst(&e)
            );
            for (c, x) in g.iter().enumerate() {
                mean_share[c] += x / runs;
                assert!(
                    (x - fair).abs() / fair < 0.30,
                    "N={n} seed {seed} QP {c}: {x:.1} Gb/s, fair share {fair:.1} (+-30%)"
                );
            }
            assert!(jain >= 0.9, "N={n} seed {seed}: Jain {jain:.4}");
            assert!(
                total > 0.95 * LINK_GBPS && total <= LINK_GBPS * 1.001,
                "N={n} seed {seed}: {total:.1} Gb/s through a {LINK_GBPS} Gb/s link"
            );
            let p = r.packet.as_ref().unwrap();
            assert!(p.ecn_marks > 0 && p.cnps > 0 && p.rate_cuts > 0, "{p:?}");
            let (max, mean) = queue_in(&r, late.0, late.1);
            let bound = ecn_bound(&cfg);
            eprintln!(
                "N={n} seed {seed}: queue 40-70 ms max {max} B, mean {mean:.0} B, bound {bound}; start-up peak {} B, bound {} B; {} marks, {} CNPs",
                p.max_queue_bytes,
                transient_bound(&cfg, n),
                p.ecn_marks,
                p.cnps
            );
            assert!(
                max <= bound,
                "N={n} seed {seed}: queue {max} B above {bound} B"
            );
            // Below Kmin nothing is marked and the rates only rise, above Kmax everything is:
            // at full utilisation the queue lives between the two.
            let (kmin, kmax) = (cfg.packet.ecn.kmin as f64, cfg.packet.ecn.kmax as f64);
            assert!(
                mean >= kmin && mean <= kmax,
                "N={n} seed {seed}: mean queue {mean:.0} B outside Kmin {kmin} .. Kmax {kmax}"
            );
            assert!(
                p.max_queue_bytes <= transient_bound(&cfg, n),
                "N={n} seed {seed}: start-up peak {} B",
                p.max_queue_bytes
            );
        }
        eprintln!(
            "N={n}: mean share per QP over the seeds {mean_share:.1?}; worst deviation 5-15 ms {:.1}%, 40-70 ms {:.1}%",
            100.0 * dev_early / runs,
            100.0 * dev_late / runs
        );
        for (c, x) in mean_share.iter().enumerate() {
            assert!(
                (x - fair).abs() / fair < 0.10,
                "N={n}: QP {c} averages {x:.1} Gb/s over the seeds, fair {fair:.1}"
            );
        }
        assert!(dev_late < dev_early, "N={n}: no convergence");
    }
}

#[test]
fn without_ecn_the_queue_grows_to_the_windows() {
    // A 4 MiB window per sender (one dqplb QP, 32 x 128 KiB segments): without marks no CNP,
    // no cut, every sender stays at line rate and the bottleneck queue fills with all N
    // windows except, per sender, the segment being delivered and the one whose
    // acknowledgement is on its way, and what the wires hold (C x 4 hops, a packet per sender).
    let n = 4usize;
    let mut cfg = incast(n, 32 << 20);
    cfg.shape.policy = SimPolicy::Engine(PolicyKind::Dqplb);
    cfg.traffic.step_bytes = 1 << 20;
    cfg.traffic.slots = 8;
    cfg.shape.outstanding = 32;
    cfg.packet.sample_ps = 0;
    let (window, seg) = (4u64 << 20, 128u64 << 10);
    let on = run(&cfg).unwrap();
    clean(&on, n as u64);
    cfg.packet.ecn.enabled = false;
    let off = run(&cfg).unwrap();
    clean(&off, n as u64);
    let (pon, poff) = (on.packet.clone().unwrap(), off.packet.clone().unwrap());
    assert_eq!((poff.ecn_marks, poff.cnps, poff.rate_cuts), (0, 0, 0));
    let wires = (LINK_GBPS / 8000.0 * (4 * HOP_PS) as f64) as u64 + n as u64 * 4096;
    let expect = n as u64 * (window - 2 * seg) - wires;
    eprintln!(
        "ECN off: deepest queue {} B (expected at least {expect}); ECN on: {} B",
        poff.max_queue_bytes, pon.max_queue_bytes
    );
    assert!(poff.max_queue_bytes >= expect, "{}", poff.max_queue_bytes);
    assert!(poff.max_queue_bytes <= n as u64 * window);
    let peak = transient_bound(&cfg, n);
    eprintln!("ECN on: start-up bound {peak} B");
    assert!(
        pon.max_queue_bytes <= peak,
        "{} > {peak}",
        pon.max_queue_bytes
    );
    assert!(pon.cnps > 0 && pon.rate_cuts > 0);
}

#[test]
fn pfc_bounds_every_ingress_and_loses_no_time() {
    // The ECN-off incast again, now with PFC (Xoff 1000 kB, Xon 500 kB). A switch pauses an
    // ingress link's sender once the link's unforwarded bytes reach Xoff; the pause takes one
    // hop to arrive, and the sender finishes the packet it is serializing: at most
    // Xoff + C x hop + 2 packets per ingress, so at most N times that in the bottleneck queue.
    // Lossless and with Xon above what the bottleneck drains while a resume takes effect
    // (C x 2 hops = 100 kB), the bottleneck never idles: the same time as without PFC.
    let n = 4usize;
    let mut cfg = incast(n, 32 << 20);
    cfg.shape.policy = SimPolicy::Engine(PolicyKind::Dqplb);
    cfg.traffic.step_bytes = 1 << 20;
    cfg.traffic.slots = 8;
    cfg.shape.outstanding = 32;
    cfg.packet.sample_ps = 0;
    cfg.packet.ecn.enabled = false;
    let free = run(&cfg).unwrap();
    cfg.packet.pfc.enabled = true;
    let paused = run(&cfg).unwrap();
    clean(&paused, n as u64);
    let p = paused.packet.clone().unwrap();
    let headroom = (LINK_GBPS / 8000.0 * HOP_PS as f64) as u64 + 2 * 4096;
    let per_ingress = cfg.packet.pfc.xoff + headroom;
    eprintln!(
        "PFC: {} pauses, deepest ingress {} B (bound {per_ingress}), queue {} B (without PFC {} B), time {:.2} us (without {:.2})",
        p.pfc_pauses,
        p.max_ingress_bytes,
        p.max_queue_bytes,
        free.packet.as_ref().unwrap().max_queue_bytes,
        paused.time_us,
        free.time_us
    );
    assert!(p.pfc_pauses > 0);
    assert!(p.max_ingress_bytes >= cfg.packet.pfc.xoff);
    assert!(p.max_ingress_bytes <= per_ingress);
    assert!(p.max_queue_bytes <= n as u64 * per_ingress);
    assert!(paused.time_us <= free.time_us * 1.001);

    // Through spines too: leaf-up and spine-down egresses are paused and held in the core.
    let mut cfg = permutation(Mode::Packet, "dqplb", 8);
    cfg.fabric.hosts = 64;
    cfg.fabric.spines = 8;
    cfg.packet.ecn.enabled = false;
    cfg.packet.pfc.enabled = true;
    cfg.packet.pfc.xoff = 100_000;
    cfg.packet.pfc.xon = 50_000;
    let r = run(&cfg).unwrap();
    clean(&r, 128);
    let p = r.packet.clone().unwrap();
    assert!(p.pfc_pauses > 0);
    assert!(
        p.max_ingress_bytes <= 100_000 + headroom,
        "{}",
        p.max_ingress_bytes
    );
}

/// Eight hosts under one leaf, a random permutation: every leaf downlink carries one sender.
fn permutation(mode: Mode, policy: &str, qps: usize) -> SimConfig {
    SimConfig {
        fabric: FabricSpec {
            hosts: 8,
            rails: 2,
            hosts_per_leaf: 8,
            spines: 2,
            hop_latency_ps: HOP_PS,
            ..FabricSpec::default()
        },
        traffic: TrafficSpec {
            kind: TrafficKind::Permutation,
            bytes: 16 << 20,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy: SimPolicy::parse(policy).unwrap(),
            qps,
            outstanding: 2,
            segment_bytes: 128 * 1024,
            rehash: SIM_REHASH,
            depth: None,
            repin: None,
        },
        mode,
        seed: 3,
        threads: 2,
        epoch_ps: 0,
        rails_simulated: 0,
        packet: PacketSpec::default(),
    }
}

#[test]
fn p_mode_agrees_with_b_mode_when_nothing_is_congested() {
    // One sender per egress at line rate: the backlog never exceeds a couple of packets, far
    // below Kmin, so no mark, no CNP, and the time is B mode's up to packetization: B mode
    // cuts through per segment, P mode per packet, the same per-hop latency, so they differ
    // by at most a segment's serialization at the start (128 KiB: 5.2 us of ~700 us, < 1%).
    for (policy, q) in [("single-qp", 1), ("dqplb", 4), ("static-split", 4)] {
        let b = run(&permutation(Mode::Burst, policy, q)).unwrap();
        let p = run(&permutation(Mode::Packet, policy, q)).unwrap();
        clean(&b, 16);
        clean(&p, 16);
        let pk = p.packet.as_ref().unwrap();
        assert_eq!((pk.ecn_marks, pk.cnps), (0, 0), "{policy}");
        assert!(
            pk.max_queue_bytes <= 2 * 4096,
            "{policy}: {}",
            pk.max_queue_bytes
        );
        let off = (p.time_us - b.time_us).abs() / b.time_us;
        eprintln!(
            "{policy} q={q}: B {:.2} us, P {:.2} us ({:.3}%)",
            b.time_us,
            p.time_us,
            100.0 * off
        );
        assert!(off < 0.01, "{policy}: B {} vs P {}", b.time_us, p.time_us);
    }
}

#[test]
fn every_traffic_and_policy_delivers_exactly_once_in_p_mode() {
    let traffics = [
        TrafficKind::Ring,
        TrafficKind::Permutation,
        TrafficKind::LeafShift,
        TrafficKind::AllToAll,
        TrafficKind::Incast,
    ];
    let policies = [
        "single-qp",
        "static-split",
        "round-robin-message",
        "dqplb",
        "spray",
        "dqplb-rehash",
    ];
    for kind in traffics {
        for policy in policies {
            let mut cfg = permutation(Mode::Packet, policy, 4);
            cfg.fabric.hosts = 16;
            cfg.fabric.hosts_per_leaf = 4;
            cfg.fabric.spines = 2;
            cfg.fabric.failed_links = 1;
            cfg.fabric.slow_links = 1;
            cfg.traffic.kind = kind;
            cfg.traffic.bytes = 2 << 20;
            cfg.traffic.placement = dqplb_sim::Placement::Fragmented;
            let r = run(&cfg).unwrap();
            let name = format!("{} {policy}", kind.name());
            assert_eq!(r.errors.total(), 0, "{name}: {:?}", r.errors);
            assert_eq!(r.missing, 0, "{name}");
            let hosts = 16u64;
            let expect = match kind {
                // 2(n-1) steps of bytes/n (one message each) per connection.
                TrafficKind::Ring => hosts * 2 * (hosts - 1),
                TrafficKind::AllToAll => (hosts - 1) * hosts,
                TrafficKind::Incast => (hosts - 1) * 4,
                _ => hosts * 4,
            };
            assert_eq!(r.messages, expect * 2, "{name}: messages over 2 rails");
        }
    }
}

#[test]
fn same_seed_same_bytes_in_p_mode() {
    let mut cfg = incast(4, 8 << 20);
    cfg.packet.sample_ps = 20_000_000;
    cfg.fabric.rails = 2;
    let csv = |r: &SimResult| {
        let mut v = Vec::new();
        let p = r.packet.as_ref().unwrap();
        dqplb_sim::timeseries::write_csv(&mut v, "", &p.timeseries).unwrap();
        (r.to_json(), v)
    };
    let a = csv(&run(&cfg).unwrap());
    assert_eq!(csv(&run(&cfg).unwrap()), a);
    cfg.threads = 2;
    assert_eq!(csv(&run(&cfg).unwrap()), a, "threads do not matter");
    cfg.seed = 2;
    assert_ne!(
        csv(&run(&cfg).unwrap()).1,
        a.1,
        "another seed draws other marks"
    );
}

#[test]
fn timeseries_csv_from_the_command() {
    let dir = std::env::temp_dir().join(format!("dqplb-pmode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ts.csv");
    let out = Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .args([
            "sim",
            "--mode",
            "p",
            "--hosts",
            "5",
            "--rails",
            "1",
            "--hosts-per-leaf",
            "8",
            "--spines",
            "1",
            "--traffic",
            "incast",
            "--bytes",
            "4M",
            "--policy",
            "dqplb",
            "--qps",
            "2",
            "--sample-us",
            "5",
            "--timeseries",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("policy,qps,t_us,rail,phase,kind,id,qp,rate_gbps,outstanding,bytes,queue_bytes,ecn_marks,cnps,pfc_pauses,drops,resent")
    );
    // Per sample: 4 connections x 2 QPs, and the one link that carries bytes by then (the
    // receiver's leaf downlink; acknowledgements and CNPs are not put on links).
    let mut per_t: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 17, "{l}");
        let e = per_t.entry(f[2].to_string()).or_default();
        if f[5] == "qp" {
            e.0 += 1;
        } else {
            assert_eq!(f[5], "host-down", "{l}");
            e.1 += 1;
        }
    }
    assert!(per_t.len() > 10, "{} samples", per_t.len());
    for (t, (q, l)) in &per_t {
        assert_eq!(*q, 8, "t={t}");
        assert!(*l <= 1, "t={t}");
    }
    assert_eq!(per_t.values().last().unwrap().1, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn p_mode_from_a_fabric_sim_block_and_the_json_counts() {
    // The [fabric.sim] keys are the options' names: P mode, no ECN, PFC with its thresholds,
    // the paper profile; the engine shape is the site's same-rail class (a window of megabytes
    // per connection). 4-to-1 under one leaf: without ECN nothing is marked, so no CNP; four
    // line-rate senders into one downlink fill it past Xoff = 200 kB, so PFC must pause; the
    // JSON carries the counts.
    let sim = "\n[fabric.sim]\nmode = \"p\"\nhosts = 5\nrails = 1\nhosts-per-leaf = 8\nspines = 1\ntraffic = \"incast\"\nbytes = \"8M\"\necn = \"off\"\npfc = true\npfc-xoff-kb = 200\npfc-xon-kb = 100\ndcqcn = \"paper\"\n";
    let (dir, conf) = sim_support::site_toml("pmode-toml", sim);
    let out = Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .args([
            "sim",
            "--config",
            conf.to_str().unwrap(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let r = &v[0];
    assert_eq!(r["mode"], "P");
    assert_eq!(r["traffic"], "incast");
    assert_eq!(r["missing"], 0);
    let p = &r["packet"];
    assert_eq!(p["ecn_marks"], 0);
    assert_eq!(p["cnps"], 0);
    assert!(p["pfc_pauses"].as_u64().unwrap() > 0, "{p}");
    // 4 senders x 8 MiB in 4 KiB packets; under one leaf each crosses one switch egress.
    assert_eq!(p["packets"], 4 * (8 << 20) / 4096);
    let _ = std::fs::remove_dir_all(&dir);
}
