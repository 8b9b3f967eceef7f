//! Cross-rail traffic (crates/sim/src/cross_rail.rs, `--traffic cross-rail`, `dqplb sim sweep --class
//! cross-rail`) against derived figures: round trips, counts, order, seeds, refusals, the class.

mod sim_support;

use dqplb_config::{parse_str, ConnClass};
use serde_json::Value;
use sim_support::{
    assert_refused, default_toml, dqplb, f, run_clean, site_toml, svg, sweep, text, u,
};

/// One hop (the default 1 us) in ps.
const HOP: f64 = 1e6;
/// 512 KiB at 400 Gb/s: 20 ps per byte.
const SEG: u64 = 512 << 10;
const SER: f64 = SEG as f64 * 20.0;

/// `dqplb sim --traffic cross-rail ARGS`, every message once and no error (sim_support).
fn run(args: &[&str]) -> Vec<Value> {
    run_clean("cross-rail", args)
}

/// 2 hosts x 2 rails, one segment per connection, one QP of depth 1: four connections, rail 0's
/// GPU of host 0 to rail 1's of host 1 and so on, each on its own links.
fn tiny(mode: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "--hosts",
        "2",
        "--rails",
        "2",
        "--spines",
        "1",
        "--bytes",
        "512K",
        "--segment",
        "512K",
        "--policy",
        "single-qp",
        "--outstanding",
        "1",
        "--epoch-us",
        "0",
        "--mode",
        mode,
    ];
    args.extend(extra);
    run(&args).remove(0)
}

fn time_ps(r: &Value) -> f64 {
    f(&r["time_us"]) * 1e6
}

#[test]
fn a_segment_crosses_two_leafs_and_a_spine_and_back() {
    // Data: host up, leaf up, spine down (to the other rail's leaf), leaf down: 4 hops; the
    // acknowledgement back the same way: 8 hops, plus the segment's serialization once
    // (cut-through). B, F and P mode alike.
    for mode in ["b", "f", "p"] {
        let r = tiny(mode, &["--hosts-per-leaf", "1"]);
        assert!((time_ps(&r) - (8.0 * HOP + SER)).abs() < 0.5, "{mode}: {r}");
        assert_eq!(u(&r["rails_simulated"]), 2);
        assert_eq!(u(&r["rails"]), 2);
        assert_eq!(u(&r["messages"]), 4, "{mode}: 4 connections x 1 message");
        // One host per leaf: two leafs per rail.
        assert_eq!(u(&r["leaves"]), 2);
    }
    // Two hosts per leaf, one spine, --oversub 2: the leaf's one uplink carries 800G / 2 =
    // 400G, shared by the leaf's two connections (both go to the other rail), 200G each: the
    // segment serializes at 2 x SER there. F and B mode alike.
    for mode in ["f", "b"] {
        let r = tiny(mode, &["--hosts-per-leaf", "2", "--oversub", "2"]);
        assert!(
            (time_ps(&r) - (8.0 * HOP + 2.0 * SER)).abs() < 0.5,
            "{mode}: {r}"
        );
        assert_eq!(u(&r["leaves"]), 1);
    }
}

#[test]
fn every_message_once_and_dqplb_beats_static_beats_one_qp() {
    // 64 hosts x 4 rails, 16 hosts per leaf, 16 spines: 256 connections of 64 MiB in 512 KiB
    // messages (the default step): 256 x 128 messages, every one delivered once.
    let rs = run(&[
        "--hosts",
        "64",
        "--rails",
        "4",
        "--hosts-per-leaf",
        "16",
        "--spines",
        "16",
        "--bytes",
        "64M",
        "--mode",
        "b",
        "--policy",
        "single-qp,static-split,dqplb",
    ]);
    assert_eq!(rs.len(), 3);
    for r in &rs {
        assert_eq!(u(&r["messages"]), 256 * 128, "{r}");
        assert_eq!(u(&r["rails_simulated"]), 4);
    }
    let pct: Vec<f64> = rs.iter().map(|r| f(&r["pct_of_ideal"])).collect();
    assert!(pct[0] < pct[1] && pct[1] < pct[2], "{pct:?}");
    // DQPLB stays under the split bound (the best split over its QPs' hashed paths).
    let bound = 100.0 / f(&rs[2]["bound_lower"]);
    assert!(pct[2] <= bound + 1e-9, "{pct:?} vs {bound}");
}

/// 16 hosts x 4 rails, 4 per leaf, 4 spines, 8 MiB per connection.
const SMALL: [&str; 13] = [
    "sim",
    "--traffic",
    "cross-rail",
    "--hosts",
    "16",
    "--rails",
    "4",
    "--hosts-per-leaf",
    "4",
    "--spines",
    "4",
    "--bytes",
    "8M",
];

#[test]
fn same_seed_same_bytes_another_seed_other_pairs() {
    let go = |mode: &str, seed: &str| {
        let out = dqplb(
            &[
                &SMALL[..],
                &["--mode", mode],
                &[
                    "--policy",
                    "dqplb,spray",
                    "--qps",
                    "4",
                    "--seed",
                    seed,
                    "--format",
                    "csv",
                ],
            ]
            .concat(),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        out.stdout
    };
    for mode in ["b", "f", "p"] {
        assert_eq!(go(mode, "3"), go(mode, "3"), "{mode}");
        assert_ne!(go(mode, "3"), go(mode, "4"), "{mode}");
    }
}

#[test]
fn fabrics_it_cannot_run_exit_2_naming_why() {
    let cases: [(&[&str], &str); 6] = [
        (&["--rails", "1"], "two rails"),
        (&["--hosts", "40"], "multiple of hosts per leaf"),
        // The preset is one fabric of one rail.
        (&["--preset", "fattree-k4"], "two rails"),
        (&["--pods", "2"], "no --pods"),
        (&["--background-hosts", "4"], "--background-hosts"),
        (&["--rails-simulated", "1"], "no --rails-simulated 1"),
    ];
    for (extra, want) in cases {
        assert_refused(
            &["sim", "--traffic", "cross-rail", "--bytes", "1M"],
            extra,
            want,
        );
    }
    let sweeps: [(&[&str], &str); 2] = [
        (
            &["--class", "cross-rail", "--traffic", "ring"],
            "--class cross-rail",
        ),
        (&["--traffic", "cross-rail"], "add --class cross-rail"),
    ];
    for (extra, want) in sweeps {
        assert_refused(&["sim", "sweep"], extra, want);
    }
}

/// `dqplb sim --config CONF ARGS` on a small fabric; its one result and stderr.
fn with_config(conf: &str, args: &[&str]) -> (Value, String) {
    let mut all = vec![
        "sim",
        "--config",
        conf,
        "--hosts",
        "8",
        "--rails",
        "2",
        "--hosts-per-leaf",
        "4",
        "--spines",
        "4",
        "--bytes",
        "8M",
        "--format",
        "json",
    ];
    all.extend(args);
    let out = dqplb(&all);
    assert!(out.status.success(), "{all:?}: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    (v[0].clone(), text(&out.stderr))
}

fn shape(r: &Value) -> (u64, u64, u64) {
    (u(&r["qps"]), u(&r["outstanding"]), u(&r["segment_bytes"]))
}

#[test]
fn the_config_plan_follows_the_traffics_class() {
    let conf = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../plugin-conf/default.toml"
    );
    let site = parse_str(&default_toml(), "default").unwrap();
    let want = |c: ConnClass| {
        let p = site.plan(c);
        (u64::from(p.qps), u64::from(p.outstanding), p.segment_bytes)
    };
    // The shipped classes differ, so the test tells them apart.
    assert_ne!(want(ConnClass::CrossRail), want(ConnClass::SameRail));
    let (r, err) = with_config(conf, &["--traffic", "cross-rail"]);
    assert_eq!(shape(&r), want(ConnClass::CrossRail));
    assert!(err.contains("class cross-rail"), "{err}");
    let (r, err) = with_config(conf, &["--traffic", "permutation"]);
    assert_eq!(shape(&r), want(ConnClass::SameRail));
    assert!(!err.contains("class "), "{err}");
    // The [fabric.sim] traffic key selects the class too, and the command line still wins.
    let (dir, file) = site_toml("xrail-class", "\n[fabric.sim]\ntraffic = \"cross-rail\"\n");
    let file = file.to_str().unwrap();
    let (r, err) = with_config(file, &[]);
    assert_eq!(r["traffic"], "cross-rail");
    assert_eq!(shape(&r), want(ConnClass::CrossRail));
    assert!(err.contains("class cross-rail"), "{err}");
    let (r, _) = with_config(file, &["--traffic", "permutation"]);
    assert_eq!(shape(&r), want(ConnClass::SameRail));
    // A command-line option after the config overrides its plan.
    let (r, _) = with_config(file, &["--qps", "2"]);
    assert_eq!(u(&r["qps"]), 2);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_sweep_prints_a_cross_rail_table_the_parser_reads() {
    let v = sweep(
        &[
            "--class",
            "cross-rail",
            "--hosts",
            "16",
            "--rails",
            "2",
            "--hosts-per-leaf",
            "4",
            "--spines",
            "4",
            "--bytes",
            "16M",
        ],
        &["--qps", "1,4", "--outstanding", "1,2", "--segment", "128K"],
        &[],
    );
    let fi = &v["findings"];
    let snippet = v["snippet"].as_str().unwrap();
    assert!(snippet.starts_with("[class.cross-rail]\n"), "{snippet}");
    let plan = parse_str(snippet, "snippet")
        .unwrap_or_else(|e| panic!("{e}\n{snippet}"))
        .plan(ConnClass::CrossRail);
    assert_eq!(u64::from(plan.qps), u(&fi["qps"]));
    assert_eq!(u64::from(plan.outstanding), u(&fi["outstanding"]));
    assert_eq!(plan.segment_bytes, 128 << 10);
    // Four runs, every one cross-rail on both rails.
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 4);
    // The same-rail class stays as shipped when the snippet is all a site sets.
    assert_eq!(
        parse_str(snippet, "snippet")
            .unwrap()
            .plan(ConnClass::SameRail),
        parse_str(&default_toml(), "default")
            .unwrap()
            .plan(ConnClass::SameRail)
    );
}

#[test]
fn the_uplink_dump_and_heatmap_cut_the_plane_back_into_rails() {
    let dir = std::env::temp_dir().join(format!("dqplb-xrail-svg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let out = dqplb(
        &[
            &SMALL[..],
            &["--mode", "b", "--policy", "dqplb", "--svg", d],
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    // 4 rails x 4 leafs x 4 spines, each (rail, leaf, spine) once, leafs numbered per rail.
    let csv = std::fs::read_to_string(dir.join("uplinks.csv")).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut per_rail = [0.0f64; 4];
    for line in csv.lines().skip(1) {
        let c: Vec<&str> = line.split(',').collect();
        let (rail, leaf, spine): (usize, usize, usize) = (
            c[2].parse().unwrap(),
            c[3].parse().unwrap(),
            c[4].parse().unwrap(),
        );
        assert!(rail < 4 && leaf < 4 && spine < 4, "{line}");
        assert!(seen.insert((rail, leaf, spine)), "{line}");
        per_rail[rail] += c[5].parse::<f64>().unwrap();
    }
    assert_eq!(seen.len(), 64);
    // Every connection leaves its leaf, one per NIC: every rail's uplinks carry the same bytes.
    for r in 1..4 {
        assert!(
            (per_rail[r] / per_rail[0] - 1.0).abs() < 1e-6,
            "{per_rail:?}"
        );
    }
    // The heatmap: the legend's 11 swatches, then 64 cells, a panel per rail.
    let els = svg::read(&dir.join("heatmap-dqplb-q8.svg"));
    assert_eq!(svg::filled_rects(&els).len(), 11 + 64);
    for r in 0..4 {
        let caption = els
            .iter()
            .filter(|e| e.name == "text" && e.text.starts_with(&format!("rail {r}: fullest ")))
            .count();
        assert_eq!(caption, 1, "rail {r}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
