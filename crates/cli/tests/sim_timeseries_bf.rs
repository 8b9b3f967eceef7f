//! `dqplb sim --timeseries` in B and F mode: bytes that add up to what was delivered, sample
//! times at k x period, line rate for a lone QP, bounded outstanding, queues on a shared link.

mod sim_support;

use std::collections::BTreeMap;

use dqplb_engine::PolicyKind;
use dqplb_sim::timeseries::{write_csv, TsKind, TsRow};
use dqplb_sim::topology::LinkKind;
use dqplb_sim::{
    run, ConnShape, FabricSpec, Mode, PacketSpec, Placement, SimConfig, SimPolicy, SimResult,
    TrafficKind, TrafficSpec, SIM_REHASH,
};
use sim_support::{dqplb, text};

const SEGMENT: u32 = 128 * 1024;
const LINE_GBPS: f64 = 400.0;

/// `senders` hosts sending `bytes` each to host 0 under one leaf (1 rail, 1 spine), one DQPLB
/// QP each with 16 x 128 KiB in flight (single-qp would send each 4 MiB message whole).
fn incast(mode: Mode, senders: usize, bytes: u64, sample_ps: u64) -> SimConfig {
    SimConfig {
        fabric: FabricSpec {
            hosts: senders + 1,
            rails: 1,
            hosts_per_leaf: 8,
            spines: 1,
            host_gbps: LINE_GBPS,
            ..FabricSpec::default()
        },
        traffic: TrafficSpec {
            kind: TrafficKind::Incast,
            bytes,
            step_bytes: 4 << 20,
            slots: 8,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy: SimPolicy::Engine(PolicyKind::Dqplb),
            qps: 1,
            outstanding: 16,
            segment_bytes: SEGMENT,
            rehash: SIM_REHASH,
            depth: None,
            repin: None,
        },
        mode,
        seed: 1,
        threads: 1,
        epoch_ps: 0,
        rails_simulated: 0,
        packet: PacketSpec {
            sample_ps,
            ..PacketSpec::default()
        },
    }
}

/// A fragmented permutation over 16 hosts, 4 leaves, 2 spines, 2 rails, 4 DQPLB QPs x 2.
fn permutation(mode: Mode, sample_ps: u64) -> SimConfig {
    SimConfig {
        fabric: FabricSpec {
            hosts: 16,
            rails: 2,
            hosts_per_leaf: 4,
            spines: 2,
            host_gbps: LINE_GBPS,
            ..FabricSpec::default()
        },
        traffic: TrafficSpec {
            kind: TrafficKind::Permutation,
            bytes: 8 << 20,
            step_bytes: 1 << 20,
            slots: 8,
            placement: Placement::Fragmented,
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy: SimPolicy::Engine(PolicyKind::Dqplb),
            qps: 4,
            outstanding: 2,
            segment_bytes: SEGMENT,
            rehash: SIM_REHASH,
            depth: None,
            repin: None,
        },
        mode,
        seed: 1,
        threads: 1,
        epoch_ps: 0,
        rails_simulated: 0,
        packet: PacketSpec {
            sample_ps,
            ..PacketSpec::default()
        },
    }
}

fn clean(r: &SimResult) {
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert_eq!(r.missing, 0);
}

fn qp_rows(r: &SimResult) -> impl Iterator<Item = &TsRow> {
    r.timeseries.iter().filter(|x| x.kind == TsKind::Qp)
}

/// The last row of each (rail, phase, kind, id, qp).
fn finals(r: &SimResult) -> BTreeMap<(u32, u32, &'static str, u32, u32), TsRow> {
    let mut m = BTreeMap::new();
    for x in &r.timeseries {
        m.insert((x.rail, x.phase, x.kind.name(), x.id, x.qp), *x);
    }
    m
}

#[test]
fn bytes_add_up_to_what_each_connection_delivered() {
    for mode in [Mode::Burst, Mode::Fluid] {
        let cfg = permutation(mode, 20_000_000);
        let r = run(&cfg).unwrap();
        clean(&r);
        let name = mode.name();
        assert!(r.packet.is_none(), "{name}: no P-mode counters");
        let last = finals(&r);
        // Per connection: its QPs' final cumulative bytes are the connection's 8 MiB exactly.
        let mut per_conn: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for ((rail, _, kind, id, _), x) in &last {
            if *kind == "qp" {
                *per_conn.entry((*rail, *id)).or_default() += x.bytes;
            }
        }
        assert_eq!(
            per_conn.len(),
            2 * 16,
            "{name}: 16 connections on each of 2 rails"
        );
        for (k, b) in &per_conn {
            assert_eq!(*b, cfg.traffic.bytes, "{name}: connection {k:?}");
        }
        // Every QP's bytes never fall, and the increments over the samples sum to the final count.
        let mut prev: BTreeMap<(u32, u32, u32), u64> = BTreeMap::new();
        let mut inc: BTreeMap<(u32, u32, u32), u64> = BTreeMap::new();
        for x in qp_rows(&r) {
            let p = prev.entry((x.rail, x.id, x.qp)).or_default();
            assert!(x.bytes >= *p, "{name}: {x:?}");
            *inc.entry((x.rail, x.id, x.qp)).or_default() += x.bytes - *p;
            *p = x.bytes;
        }
        let total: u64 = inc.values().sum();
        assert_eq!(total, 2 * 16 * cfg.traffic.bytes, "{name}");
        if mode == Mode::Burst {
            // Each host sends one connection: its up link carried exactly that connection's bytes.
            for ((_, _, kind, _, _), x) in &last {
                if *kind == "host-up" {
                    assert_eq!(x.bytes, cfg.traffic.bytes, "{name}: {x:?}");
                    assert_eq!(x.queue_bytes, 0, "{name}: nothing left at the end");
                }
            }
        } else {
            assert!(
                r.timeseries.iter().all(|x| x.kind == TsKind::Qp),
                "F: QPs only"
            );
        }
        // No ECN, CNPs or PFC outside P mode.
        assert!(r
            .timeseries
            .iter()
            .all(|x| x.ecn_marks == 0 && x.cnps == 0 && x.pfc_pauses == 0));
        // At most the configured depth in flight per QP, and the depth is reached.
        let max = qp_rows(&r).map(|x| x.outstanding).max().unwrap();
        assert_eq!(max, cfg.shape.outstanding, "{name}");
    }
}

#[test]
fn samples_fall_at_k_times_the_period_up_to_the_first_after_the_end() {
    for mode in [Mode::Burst, Mode::Fluid] {
        let p = 15_000_000; // 15 us, not a divisor of anything in the run
        let cfg = permutation(mode, p);
        let r = run(&cfg).unwrap();
        let name = mode.name();
        for rail in &r.per_rail {
            let times: Vec<u64> = {
                let mut t: Vec<u64> = r
                    .timeseries
                    .iter()
                    .filter(|x| x.rail == rail.rail as u32)
                    .map(|x| x.t_ps)
                    .collect();
                t.dedup();
                t
            };
            // One phase: samples 0, p, 2p, ... up to the first multiple after the phase ended.
            let end = rail.simulated_ps;
            let n = end / p + 2;
            let want: Vec<u64> = (0..n).map(|k| k * p).collect();
            assert_eq!(times, want, "{name} rail {}: end {end} ps", rail.rail);
            // Every sample lists every QP of every connection, in order.
            let rows_at_0 = r
                .timeseries
                .iter()
                .filter(|x| x.rail == rail.rail as u32 && x.t_ps == 0 && x.kind == TsKind::Qp)
                .count();
            assert_eq!(rows_at_0, 16 * cfg.shape.qps, "{name}");
        }
    }
}

#[test]
fn a_lone_qp_runs_at_line_rate_in_b_and_f_mode() {
    // One sender, one QP, 16 x 128 KiB in flight: far above the bandwidth-delay product of a
    // 2-hop path, so the link, not the window, sets the rate. 256 MiB take 5.37 ms.
    let p = 100_000_000; // 100 us
    let bytes = 256u64 << 20;
    for mode in [Mode::Burst, Mode::Fluid] {
        let cfg = incast(mode, 1, bytes, p);
        let r = run(&cfg).unwrap();
        clean(&r);
        let name = mode.name();
        let end = r.per_rail[0].simulated_ps;
        let rows: Vec<&TsRow> = qp_rows(&r).collect();
        assert_eq!(rows.last().unwrap().bytes, bytes, "{name}");
        // Steady state: from 200 us until 200 us before the end.
        let steady: Vec<&&TsRow> = rows
            .iter()
            .filter(|x| x.t_ps >= 2 * p && x.t_ps + 2 * p <= end)
            .collect();
        assert!(steady.len() >= 45, "{name}: {} samples", steady.len());
        // B mode measures bytes delivered per period: segments arrive every 2.62144 us, so a
        // period holds 38 or 39 of them; the rate is within one segment per period of line rate
        // (10.486 Gb/s at 100 us). F mode reports the fluid rate: line rate exactly.
        let tol = match mode {
            Mode::Burst => f64::from(SEGMENT) * 8e3 / p as f64 + 1e-9,
            _ => 1e-9,
        };
        for x in &steady {
            assert!(
                (x.rate_gbps - LINE_GBPS).abs() <= tol,
                "{name}: {} Gb/s at {} us (tolerance {tol})",
                x.rate_gbps,
                x.t_ps / 1_000_000
            );
        }
        // Over the whole steady window: bytes(t1) - bytes(t0) within one segment of line rate
        // x (t1 - t0).
        let (a, b) = (steady[0], steady[steady.len() - 1]);
        let ideal = LINE_GBPS / 8e3 * (b.t_ps - a.t_ps) as f64;
        let got = (b.bytes - a.bytes) as f64;
        assert!(
            (got - ideal).abs() <= f64::from(SEGMENT),
            "{name}: {got} B against {ideal} B"
        );
        assert!(rows.iter().all(|x| x.outstanding <= 16));
        assert_eq!(rows.iter().map(|x| x.outstanding).max(), Some(16), "{name}");
    }
}

#[test]
fn two_senders_share_the_receivers_link() {
    let p = 50_000_000;
    let bytes = 64u64 << 20;
    // B mode: the receiver's leaf downlink gets two segments per segment time: it queues. The
    // FIFO holds at most what both senders have in flight (2 x 16 x 128 KiB).
    let r = run(&incast(Mode::Burst, 2, bytes, p)).unwrap();
    clean(&r);
    let down: Vec<&TsRow> = r
        .timeseries
        .iter()
        // Link ids: up links 0 .. hosts, then the down links: host 0's is `hosts` = 3.
        .filter(|x| x.kind == TsKind::Link(LinkKind::HostDown) && x.id == 3)
        .collect();
    assert!(!down.is_empty(), "host 0's downlink is listed");
    let max = down.iter().map(|x| x.queue_bytes).max().unwrap();
    assert!(max > 0, "the shared link queues");
    assert!(max <= 2 * 16 * u64::from(SEGMENT), "{max} B");
    assert_eq!(down.last().unwrap().bytes, 2 * bytes, "it carried both");
    // F mode: max-min gives each sender half the link, exactly, while both send.
    let r = run(&incast(Mode::Fluid, 2, bytes, p)).unwrap();
    clean(&r);
    let end = r.per_rail[0].simulated_ps;
    let mid: Vec<&TsRow> = qp_rows(&r).filter(|x| x.t_ps + 2 * p <= end).collect();
    assert!(mid.len() >= 2 * 20);
    for x in mid {
        assert!((x.rate_gbps - LINE_GBPS / 2.0).abs() < 1e-9, "{x:?}");
    }
}

fn csv(r: &SimResult) -> Vec<u8> {
    let mut v = Vec::new();
    write_csv(&mut v, "", &r.timeseries).unwrap();
    v
}

#[test]
fn same_seed_same_bytes_in_b_and_f_mode() {
    for mode in [Mode::Burst, Mode::Fluid] {
        let mut cfg = permutation(mode, 10_000_000);
        cfg.shape.policy = SimPolicy::Spray;
        let a = csv(&run(&cfg).unwrap());
        assert!(!a.is_empty());
        assert_eq!(csv(&run(&cfg).unwrap()), a, "{}", mode.name());
        cfg.threads = 2;
        assert_eq!(csv(&run(&cfg).unwrap()), a, "threads do not matter");
        cfg.seed = 2;
        assert_ne!(
            csv(&run(&cfg).unwrap()),
            a,
            "another seed, another placement"
        );
    }
}

#[test]
fn sampling_changes_nothing_else() {
    for mode in [Mode::Burst, Mode::Fluid] {
        let r0 = run(&permutation(mode, 0)).unwrap();
        let r1 = run(&permutation(mode, 10_000_000)).unwrap();
        assert!(r0.timeseries.is_empty());
        assert!(!r1.timeseries.is_empty());
        assert_eq!(r0.to_json(), r1.to_json(), "{}", mode.name());
    }
}

/// Fields of the CSV rows at time `t_us` of kind `kind`.
fn lines_of<'a>(csv: &'a str, kind: &str) -> Vec<Vec<&'a str>> {
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[5] == kind)
        .collect()
}

#[test]
fn the_command_writes_b_and_f_series_from_options_or_the_config() {
    let dir = std::env::temp_dir().join(format!("dqplb-ts-bf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fabric = [
        "sim",
        "--hosts",
        "3",
        "--rails",
        "1",
        "--hosts-per-leaf",
        "8",
        "--spines",
        "1",
        "--traffic",
        "incast",
        "--bytes",
        "8M",
        "--policy",
        "dqplb,single-qp",
        "--qps",
        "2",
        "--outstanding",
        "2",
        "--segment",
        "128K",
        "--format",
        "json",
    ];
    for mode in ["b", "f"] {
        let file = dir.join(format!("{mode}.csv"));
        let mut args: Vec<&str> = fabric.to_vec();
        let f = file.to_str().unwrap();
        args.extend(["--mode", mode, "--sample-us", "5", "--timeseries", f]);
        let out = dqplb(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let body = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            body.lines().next(),
            Some("policy,qps,t_us,rail,phase,kind,id,qp,rate_gbps,outstanding,bytes,queue_bytes,ecn_marks,cnps,pfc_pauses,drops,resent")
        );
        let all = lines_of(&body, "qp");
        // Every run, one after the other: dqplb with 2 QPs x 2 connections per sample, then
        // single-qp with 1 x 2, each from t = 0 and ending with both senders' bytes.
        let n = all.iter().take_while(|f| f[0] == "dqplb").count();
        let (qp, single) = all.split_at(n);
        assert!(qp.iter().all(|f| f[1] == "2"));
        assert!(!single.is_empty() && single.iter().all(|f| f[0] == "single-qp" && f[1] == "1"));
        assert_eq!(single[0][2], "0.000", "{mode}");
        let single_last: u64 = single[single.len() - 2..]
            .iter()
            .map(|f| f[10].parse::<u64>().unwrap())
            .sum();
        assert_eq!(single_last, 2 * (8 << 20), "{mode}: single-qp's bytes");
        let samples = qp.len() / 4;
        assert_eq!(qp.len(), samples * 4);
        for (k, f) in qp.iter().enumerate() {
            assert_eq!(f[2], format!("{}.000", (k / 4) * 5), "{mode}: {f:?}");
        }
        let last: u64 = qp[qp.len() - 4..]
            .iter()
            .map(|f| f[10].parse::<u64>().unwrap())
            .sum();
        assert_eq!(last, 2 * (8 << 20), "{mode}: both senders' bytes");
        let links = body.lines().count() - 1 - all.len();
        if mode == "f" {
            assert_eq!(links, 0, "F mode lists no links");
        } else {
            assert!(!lines_of(&body, "host-down").is_empty());
        }
        // The same through [fabric.sim] keys.
        let cfg_file = dir.join(format!("{mode}.toml"));
        let cfg_csv = dir.join(format!("{mode}-cfg.csv"));
        std::fs::write(
            &cfg_file,
            format!(
                "[fabric.sim]\nmode = \"{mode}\"\nsample-us = 5\ntimeseries = \"{}\"\n",
                cfg_csv.display()
            ),
        )
        .unwrap();
        let mut args: Vec<&str> = fabric.to_vec();
        args.extend(["--config", cfg_file.to_str().unwrap()]);
        // The config sets the engine shape; the command line's --policy and --qps win.
        let out = dqplb(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(std::fs::read_to_string(&cfg_csv).unwrap(), body, "{mode}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
