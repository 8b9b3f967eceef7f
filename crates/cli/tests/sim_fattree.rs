//! The third tier and the k-ary fat-tree preset of `dqplb sim`: exact counts, path enumeration,
//! fluid spray at the ideal, single-QP ECMP against a derived max-load, clean runs in F/B/P.

use dqplb_sim::rng::Rng;
use dqplb_sim::topology::{LinkKind, Rail};
use dqplb_sim::{
    run, ConnShape, FabricSpec, Mode, SimConfig, SimPolicy, SimResult, TrafficKind, TrafficSpec,
};

fn fattree(k: usize) -> FabricSpec {
    let base = FabricSpec {
        // Short hops: round trips stay a small part of the time.
        hop_latency_ps: 100_000,
        ..FabricSpec::default()
    };
    let f = FabricSpec::fattree(k, &base).unwrap();
    f.validate().unwrap();
    f
}

fn config(k: usize, policy: &str, qps: usize, mode: Mode, bytes: u64) -> SimConfig {
    SimConfig {
        fabric: fattree(k),
        traffic: TrafficSpec {
            kind: TrafficKind::Permutation,
            bytes,
            step_bytes: (2 << 20).min(bytes),
            ..TrafficSpec::default()
        },
        shape: ConnShape {
            policy: SimPolicy::parse(policy).unwrap(),
            qps,
            outstanding: 8,
            segment_bytes: 256 * 1024,
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
    assert_eq!(r.errors.total(), 0, "engine errors: {:?}", r.errors);
    assert_eq!(r.missing, 0, "messages not released");
    let conns = (r.hosts * r.rails_simulated) as u64;
    assert_eq!(
        r.messages,
        conns * r.bytes.div_ceil(r.step_bytes),
        "every message delivered exactly once"
    );
}

#[test]
fn counts_are_exact_for_k4_and_k8() {
    for k in [4usize, 8] {
        let f = fattree(k);
        let rail = Rail::new(&f, 0, &mut Rng::new(1));
        assert_eq!(f.hosts, k * k * k / 4);
        // Edge (leaf) and aggregation switches: k/2 each in each of k pods; (k/2)^2 cores.
        assert_eq!(f.leaves(), k * k / 2);
        assert_eq!(f.pods * f.spines, k * k / 2);
        assert_eq!(f.cores_total(), k * k / 4);
        assert_eq!(
            f.leaves() + f.pods * f.spines + f.cores_total(),
            5 * k * k / 4
        );
        // Links, one direction: host-edge, edge-agg, agg-core, k^3/4 each; both directions here.
        assert_eq!(rail.links(), 2 * 3 * k * k * k / 4);
        let count = |kind| {
            (0..rail.links() as u32)
                .filter(|&l| rail.kind(l) == kind)
                .count()
        };
        for kind in [
            LinkKind::HostUp,
            LinkKind::HostDown,
            LinkKind::LeafUp,
            LinkKind::SpineDown,
            LinkKind::AggUp,
            LinkKind::CoreDown,
        ] {
            assert_eq!(count(kind), k * k * k / 4, "k={k} {kind:?}");
        }
        // Non-blocking: every link at the host rate.
        assert!(rail.ps_per_byte.iter().all(|&p| (p - 20.0).abs() < 1e-9));
    }
}

/// The links of a path form a walk host -> ... -> host: each hop's kind follows the last.
fn well_formed(rail: &Rail, links: &[u32]) -> bool {
    use LinkKind::*;
    let kinds: Vec<LinkKind> = links.iter().map(|&l| rail.kind(l)).collect();
    match kinds.len() {
        2 => kinds == [HostUp, HostDown],
        4 => kinds == [HostUp, LeafUp, SpineDown, HostDown],
        6 => kinds == [HostUp, LeafUp, AggUp, CoreDown, SpineDown, HostDown],
        _ => false,
    }
}

#[test]
fn path_enumeration_k2_squared_between_pods_k2_within() {
    for k in [4usize, 8] {
        let f = fattree(k);
        let rail = Rail::new(&f, 0, &mut Rng::new(1));
        let h = k / 2;
        for src in 0..f.hosts {
            for dst in 0..f.hosts {
                if src == dst {
                    continue;
                }
                let (a, b) = (src / h, dst / h);
                let n = rail.spines_between(src, dst);
                let expect = if a == b {
                    0
                } else if a / h == b / h {
                    h
                } else {
                    h * h
                };
                assert_eq!(n, expect, "k={k} {src}->{dst}");
                let mut paths: Vec<Vec<u32>> = (0..n.max(1))
                    .map(|i| rail.path_via(src, dst, i).links().to_vec())
                    .collect();
                for p in &paths {
                    assert!(well_formed(&rail, p), "k={k} {src}->{dst}: {p:?}");
                    assert_eq!(p[0], rail.host_up(src));
                    assert_eq!(*p.last().unwrap(), rail.host_down(dst));
                }
                paths.sort();
                paths.dedup();
                assert_eq!(paths.len(), n.max(1), "k={k} {src}->{dst}: distinct paths");
                // The hashed path is one of them.
                let e = rail.ecmp_path(src, dst, 7 + src as u32, 9 + dst as u32);
                assert!(paths.binary_search(&e.unwrap().links().to_vec()).is_ok());
            }
        }
    }
}

#[test]
fn failed_links_in_every_tier_are_avoided() {
    let mut f = fattree(8);
    f.failed_links = 40;
    f.slow_links = 8;
    f.validate().unwrap();
    let rail = Rail::new(&f, 0, &mut Rng::new(3));
    let dead: Vec<LinkKind> = (0..rail.links() as u32)
        .filter(|&l| !rail.alive[l as usize])
        .map(|l| rail.kind(l))
        .collect();
    assert_eq!(dead.len(), 80, "40 pairs, both directions");
    assert!(dead.contains(&LinkKind::LeafUp) && dead.contains(&LinkKind::AggUp));
    let mut fewer = 0;
    for src in 0..f.hosts {
        for dst in (0..f.hosts).step_by(7) {
            let n = rail.spines_between(src, dst);
            for i in 0..n {
                let p = rail.path_via(src, dst, i);
                assert!(p.links().iter().all(|&l| rail.alive[l as usize]));
            }
            if src / 4 / 4 != dst / 4 / 4 && n < 16 {
                fewer += 1;
            }
            if let Some(p) = rail.ecmp_path(src, dst, 100 + src as u32, 200) {
                assert!(p.links().iter().all(|&l| rail.alive[l as usize]));
            }
        }
    }
    assert!(fewer > 0, "failures remove paths between pods");
}

#[test]
fn fluid_spray_on_a_permutation_is_ideal() {
    for seed in 1..=3 {
        let mut cfg = config(8, "spray", 8, Mode::Fluid, 16 << 20);
        cfg.seed = seed;
        let r = run(&cfg).unwrap();
        clean(&r);
        // Tolerance 1%: round trips of 6 x 100 ns against 335 us of line-rate time.
        assert!(
            (r.time_over_ideal - 1.0).abs() < 0.01,
            "seed {seed}: spray {} x ideal",
            r.time_over_ideal
        );
    }
}

/// P(Binomial(n, p) <= m).
fn binom_cdf(n: usize, p: f64, m: usize) -> f64 {
    let mut term = (1.0 - p).powi(n as i32);
    let mut sum = 0.0;
    for i in 0..=m.min(n) {
        sum += term;
        term *= (n - i) as f64 / (i + 1) as f64 * p / (1.0 - p);
    }
    sum.min(1.0)
}

/// Expected flows on the fullest link of a k-ary fat tree under a random derangement with one
/// independent uniform ECMP path per flow: every host link carries 1; a leaf uplink (and, by
/// symmetry of the way down, a spine downlink) sees the k/2 hosts of its leaf, each leaving the
/// leaf w.p. q1 and then picking it w.p. 2/k; an aggregation uplink (and a core downlink) sees
/// the k^2/4 hosts of its pod, each leaving the pod w.p. q2 and picking it w.p. 4/k^2. Links
/// are taken as independent: P(max <= m) = F1(m)^(2 k^3/4) F2(m)^(2 k^3/4), E = sum P(max > m).
fn expected_max_load(k: usize) -> f64 {
    let n = (k * k * k / 4) as f64;
    let (h, pod) = (k / 2, k * k / 4);
    let q1 = (n - h as f64) / (n - 1.0);
    let q2 = (n - pod as f64) / (n - 1.0);
    let links = 2.0 * n;
    let mut e = 1.0;
    for m in 1..=pod {
        let below = binom_cdf(h, q1 / h as f64, m).powf(links)
            * binom_cdf(pod, q2 / pod as f64, m).powf(links);
        e += 1.0 - below;
    }
    e
}

#[test]
fn single_qp_ecmp_is_below_ideal_by_the_expected_max_load() {
    let k = 8;
    let expect = expected_max_load(k);
    let seeds = 40u64;
    let mut sum = 0.0;
    for seed in 1..=seeds {
        let mut cfg = config(k, "single-qp", 1, Mode::Fluid, 16 << 20);
        cfg.seed = seed;
        let r = run(&cfg).unwrap();
        clean(&r);
        // Below ideal: some link carries at least two flows.
        assert!(
            r.time_over_ideal > 1.9,
            "seed {seed}: {}",
            r.time_over_ideal
        );
        sum += r.time_over_ideal;
    }
    let sim = sum / seeds as f64;
    let err = (sim - expect).abs() / expect;
    eprintln!(
        "k={k} single-QP ECMP: {sim:.3} x ideal over {seeds} permutations, derived max load \
         {expect:.3}, off {:.1}%",
        100.0 * err
    );
    // Tolerance 8%: the independence of the links' loads is an approximation (the uplinks of
    // one leaf share its k/2 flows) and 40 permutations leave ~2% sampling noise.
    assert!(err < 0.08, "sim {sim} vs derived {expect}");
}

#[test]
fn every_mode_routes_the_preset_cleanly() {
    for mode in [Mode::Fluid, Mode::Burst, Mode::Packet] {
        for (policy, qps) in [("single-qp", 1), ("dqplb", 8), ("spray", 8)] {
            let mut cfg = config(4, policy, qps, mode, 4 << 20);
            cfg.fabric.failed_links = 2;
            cfg.shape.outstanding = 2;
            cfg.shape.segment_bytes = 128 * 1024;
            cfg.traffic.step_bytes = 512 * 1024;
            let r = run(&cfg).unwrap();
            clean(&r);
            assert_eq!(r.pods, 4);
            assert_eq!(r.cores, 4);
            let core = r
                .max_core_util
                .expect("aggregation-core utilisation reported");
            assert!(
                core > 0.0 && core <= 1.0 + 1e-9,
                "{mode:?} {policy}: {core}"
            );
            assert!(
                r.time_over_ideal >= 0.99,
                "{mode:?} {policy}: {}",
                r.time_over_ideal
            );
        }
    }
}

#[test]
fn same_seed_same_bytes_on_the_preset() {
    for mode in [Mode::Fluid, Mode::Burst, Mode::Packet] {
        let json = |seed| {
            let mut cfg = config(4, "dqplb", 8, mode, 2 << 20);
            cfg.fabric.failed_links = 1;
            cfg.seed = seed;
            serde_json::to_string(&run(&cfg).unwrap()).unwrap()
        };
        let a = json(5);
        assert_eq!(a, json(5), "{mode:?}: same seed, same bytes");
        assert_ne!(a, json(6), "{mode:?}: another seed, another run");
    }
}

#[test]
fn cli_preset_and_pods_options() {
    let sim = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_dqplb"))
            .arg("sim")
            .args(args)
            .output()
            .expect("run dqplb")
    };
    let out = sim(&[
        "--preset",
        "fattree-k4",
        "--traffic",
        "permutation",
        "--bytes",
        "1M",
        "--policy",
        "spray",
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v[0];
    assert_eq!(
        (r["hosts"].as_u64(), r["pods"].as_u64(), r["cores"].as_u64()),
        (Some(16), Some(4), Some(4))
    );
    assert_eq!(
        (r["rails"].as_u64(), r["spines"].as_u64()),
        (Some(1), Some(2))
    );
    // Options after the preset override it; a two-tier run has no pods or cores in its JSON.
    let out = sim(&[
        "--fattree-k",
        "4",
        "--rails",
        "2",
        "--bytes",
        "1M",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["rails"].as_u64(), Some(2));
    let out = sim(&[
        "--hosts", "16", "--rails", "1", "--bytes", "1M", "--format", "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["pods", "cores", "max_core_util"] {
        assert!(v[0].get(key).is_none(), "two tiers: no {key}");
    }
    // Bad input: exit code 2, the problem named.
    for (args, word) in [
        (&["--preset", "torus-k4"][..], "preset"),
        (&["--fattree-k", "5"][..], "even"),
        (&["--hosts", "16", "--cores", "4"][..], "--pods"),
        (
            &["--hosts", "16", "--hosts-per-leaf", "4", "--pods", "8"][..],
            "pods",
        ),
    ] {
        let out = sim(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(word),
            "{args:?}"
        );
    }
}

#[test]
fn spraying_over_fewer_paths_costs_time_and_all_paths_is_unchanged() {
    // k = 8: (k/2)^2 = 16 paths between pods. --spray-paths at or above 16 sprays over the whole
    // group and draws the same as the default; 1 path per QP is a random static split. Fluid
    // spray over all paths is the ideal (fluid_spray_on_a_permutation_is_ideal), so no K beats
    // it; that time also falls step by step with K (1, 2, 4, 16) is this seed's measured order
    // (each K draws its own subsets), pinned here as a regression check.
    let time = |mode: Mode, k: usize| {
        let mut c = config(8, "spray", 8, mode, 8 << 20);
        c.fabric.spray_paths = k;
        let r = run(&c).unwrap();
        clean(&r);
        r
    };
    for mode in [Mode::Fluid, Mode::Burst, Mode::Packet] {
        let all = serde_json::to_string(&time(mode, 0)).unwrap();
        assert_eq!(
            all,
            serde_json::to_string(&time(mode, 16)).unwrap(),
            "{mode:?}"
        );
        assert_eq!(
            all,
            serde_json::to_string(&time(mode, 1000)).unwrap(),
            "{mode:?}"
        );
    }
    let f: Vec<f64> = [1, 2, 4, 16]
        .iter()
        .map(|&k| time(Mode::Fluid, k).time_us)
        .collect();
    assert!(f.windows(2).all(|w| w[0] >= w[1]), "{f:?}");
    assert!(
        f[0] > 1.5 * f[3],
        "one path per QP is far from spraying: {f:?}"
    );
    let p1 = time(Mode::Packet, 1).time_us;
    let p16 = time(Mode::Packet, 16).time_us;
    assert!(p1 > 1.5 * p16, "P mode: {p1} vs {p16}");
}
