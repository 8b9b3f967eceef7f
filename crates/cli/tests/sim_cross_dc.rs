//! The cross-DC model (crates/sim/src/dci.rs, `--traffic cross-dc`, `dqplb sim sweep --class cross-dc`)
//! against derived figures: the round trip, the window-limited rate, N_out, the snippet, refusals.

mod sim_support;

use dqplb_config::{parse_str, ConnClass};
use serde_json::Value;
use sim_support::{assert_refused, dqplb, f, sweep, text, u};

/// One hop (the default 1 us) in ps.
const HOP: f64 = 1e6;
/// 512 KiB at 400 Gb/s: 20 ps per byte.
const SEG: u64 = 512 << 10;
const SER: f64 = SEG as f64 * 20.0;

/// `dqplb sim --preset fattree-k2` (2 hosts, one per DC: two independent connections, 0 -> 1
/// and 1 -> 0, on disjoint links) with cross-DC traffic and `extra`; its single JSON result.
fn k2(dci_us: u32, extra: &[&str]) -> Value {
    let dci = dci_us.to_string();
    let mut args = vec![
        "sim",
        "--preset",
        "fattree-k2",
        "--traffic",
        "cross-dc",
        "--dci-latency-us",
        &dci,
        "--segment",
        "512K",
        "--epoch-us",
        "0",
        "--format",
        "json",
    ];
    args.extend(extra);
    let out = dqplb(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let r = v[0].clone();
    assert_eq!(u(&r["missing"]), 0);
    assert_eq!(u(&r["errors"]["engine"]) + u(&r["errors"]["protocol"]), 0);
    assert_eq!(u(&r["errors"]["order"]), 0);
    r
}

/// Time in ps (the JSON's microseconds, exact to well under 1 ps at these sizes).
fn time_ps(r: &Value) -> f64 {
    f(&r["time_us"]) * 1e6
}

/// One QP, depth d, n segments of `SER` ps on a round trip `rtt1` (2 x one way + `SER`): segment
/// k is sent at floor(k / d) x rtt1 + (k mod d) x SER while the window binds (d x SER < rtt1),
/// back to back at the line rate once it does not; the last one completes rtt1 after it is sent.
fn predicted_ps(n: u64, d: u64, rtt1: f64) -> f64 {
    let last = n - 1;
    if d as f64 * SER >= rtt1 {
        last as f64 * SER + rtt1
    } else {
        (last / d) as f64 * rtt1 + (last % d) as f64 * SER + rtt1
    }
}

fn mib(segments: u64) -> String {
    format!("{}", segments * SEG)
}

#[test]
fn a_segment_round_trip_is_its_hop_latencies_plus_its_serialization() {
    // Data one way: host up, leaf up, the span, core down, agg down, host down: 5 hops + D; the
    // acknowledgement back over the same (not queued); plus the segment's serialization once
    // (cut-through: every later hop overlaps it). B, F and P mode alike.
    for dci in [100u32, 500] {
        let want = 2.0 * (5.0 * HOP + f64::from(dci) * 1e6) + SER;
        for mode in ["b", "f", "p"] {
            let r = k2(
                dci,
                &[
                    "--mode",
                    mode,
                    "--bytes",
                    "512K",
                    "--policy",
                    "single-qp",
                    "--outstanding",
                    "1",
                ],
            );
            assert!((time_ps(&r) - want).abs() < 0.5, "{mode} {dci}: {r}");
            assert_eq!(f(&r["cross_dc_rtt_us"]), 2.0 * (5.0 + f64::from(dci)));
            assert_eq!(f(&r["dci_latency_us"]), f64::from(dci));
        }
    }
    // Other hop latency: 2 x (5 x 0.5 us + 100 us) + serialization.
    let r = k2(
        100,
        &[
            "--mode",
            "b",
            "--hop-latency-ns",
            "500",
            "--bytes",
            "512K",
            "--policy",
            "single-qp",
        ],
    );
    assert!((time_ps(&r) - (2.0 * (2.5e6 + 100e6) + SER)).abs() < 0.5);
    // --dci-oversub 2: the aggregation-core links at 200 Gb/s, so the segment's serialization on
    // the slowest link is twice the NIC's.
    let r = k2(
        100,
        &[
            "--mode",
            "b",
            "--dci-oversub",
            "2",
            "--bytes",
            "512K",
            "--policy",
            "single-qp",
        ],
    );
    assert!((time_ps(&r) - (2.0 * 105e6 + 2.0 * SER)).abs() < 0.5);
    // Unset, the span is one more hop: 12 hops + serialization (a k = 2 permutation crosses).
    let out = dqplb(&[
        "sim",
        "--preset",
        "fattree-k2",
        "--traffic",
        "permutation",
        "--bytes",
        "512K",
        "--segment",
        "512K",
        "--mode",
        "b",
        "--policy",
        "single-qp",
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!((time_ps(&v[0]) - (12.0 * HOP + SER)).abs() < 0.5);
    assert!(v[0].get("cross_dc_rtt_us").is_none());
}

#[test]
fn one_qp_is_window_limited_below_n_out_and_at_the_line_rate_from_it() {
    let rtt1 = 2.0 * 105e6 + SER;
    let n_out = (rtt1 / SER).ceil() as u64;
    assert_eq!(n_out, 22, "ceil(220.48576 / 10.48576)");
    let line = SEG as f64 / SER; // bytes per ps
    for d in [1u64, 4, 8, 16, 21, 22, 24, 32] {
        // Two sizes, 4d and 8d segments (whole windows): their difference in time is pure
        // steady state, so bytes / time there is the rate without the start-up.
        let mut t = Vec::new();
        for n in [4 * d, 8 * d] {
            for mode in ["b", "f", "p"] {
                if mode != "b" && n != 4 * d {
                    continue;
                }
                let dd = d.to_string();
                let bytes = mib(n);
                let r = k2(
                    100,
                    &[
                        "--mode",
                        mode,
                        "--bytes",
                        &bytes,
                        "--step-bytes",
                        &bytes,
                        "--policy",
                        "dqplb",
                        "--qps",
                        "1",
                        "--outstanding",
                        &dd,
                    ],
                );
                let want = predicted_ps(n, d, rtt1);
                assert!((time_ps(&r) - want).abs() < 0.5, "{mode} d={d} n={n}: {r}");
                if mode == "b" {
                    t.push(time_ps(&r));
                }
            }
        }
        let rate = (4 * d * SEG) as f64 / (t[1] - t[0]);
        let expect = if d < n_out {
            d as f64 * SEG as f64 / rtt1
        } else {
            line
        };
        // Tolerance 1e-9 relative: the two times are exact to well under 1 ps.
        assert!(
            (rate / expect - 1.0).abs() < 1e-9,
            "d={d}: {rate} vs {expect}"
        );
        // Below N_out the window binds (d x segment / RTT under the line rate); from N_out on it
        // does not.
        assert_eq!(d < n_out, expect < line, "d={d}");
    }
}

/// `dqplb sim sweep --class cross-dc` on k = 2, one QP, a dense depth grid around N_out.
fn dense_sweep(dci: &str, extra: &[&str]) -> Value {
    sweep(
        &[
            "--class",
            "cross-dc",
            "--preset",
            "fattree-k2",
            "--dci-latency-us",
            dci,
        ],
        &[
            "--qps",
            "1",
            "--segment",
            "512K",
            "--outstanding",
            "8,16,19,20,21,22,23,24,32,64",
        ],
        extra,
    )
}

#[test]
fn the_sweeps_loss_free_depth_is_n_out_from_the_simulated_round_trip() {
    // The simulated round trip of one segment (a 1-segment run), and N_out from it.
    let r = k2(
        100,
        &["--mode", "b", "--bytes", "512K", "--policy", "single-qp"],
    );
    let rtt1 = time_ps(&r);
    let n_out = (400.0 * (rtt1 / 1e6) * 125.0 / SEG as f64).ceil() as u64;
    assert_eq!(n_out, 22);
    // --loss-pct 0: every depth from N_out on ties exactly at the line rate and every one below
    // is slower, so the smallest loss-free depth is N_out itself.
    let v = dense_sweep("100", &["--loss-pct", "0"]);
    let fi = &v["findings"];
    assert_eq!(u(&fi["qps"]), 1);
    assert_eq!(u(&fi["outstanding"]), n_out);
    assert_eq!(u(&v["bdp"]["n_out_segment_rtt"]), n_out);
    // The plan's rule on the written (propagation) round trip, 210 us, is one short.
    assert_eq!(u(&v["bdp"]["n_out"]), n_out - 1);
    // The default 1%: the smallest depth whose time (1 GiB = 2048 segments, the sweep's
    // default bytes) is within 1% of the best, derived from the formula: N_out - 1 here
    // (21 x 10.49 us covers 99.9% of the 220.5 us round trip).
    let v = dense_sweep("100", &[]);
    let grid = [8u64, 16, 19, 20, 21, 22, 23, 24, 32, 64];
    let t: Vec<f64> = grid.iter().map(|&d| predicted_ps(2048, d, rtt1)).collect();
    let best = t.iter().copied().fold(f64::INFINITY, f64::min);
    let pick = grid
        .iter()
        .zip(&t)
        .find(|(_, &x)| x <= 1.01 * best)
        .map(|(&d, _)| d)
        .unwrap();
    let got = u(&v["findings"]["outstanding"]);
    assert_eq!(got, pick);
    assert!(got.abs_diff(n_out) <= 1, "{got} vs {n_out}");
    for p in v["points"].as_array().unwrap() {
        let d = u(&p["outstanding"]);
        let want = predicted_ps(2048, d, rtt1) / (2048.0 * SER);
        assert!((f(&p["time_over_ideal"]) / want - 1.0).abs() < 1e-9, "{p}");
    }
    // The table: [class.cross-dc] with the site config's keys, parsed by the real parser.
    let snippet = v["snippet"].as_str().unwrap();
    assert!(snippet.starts_with("[class.cross-dc]\n"), "{snippet}");
    let plan = parse_str(snippet, "snippet")
        .unwrap_or_else(|e| panic!("{e}\n{snippet}"))
        .plan(ConnClass::CrossDc);
    assert_eq!(
        (plan.qps, u64::from(plan.outstanding), plan.segment_bytes),
        (1, got, SEG)
    );
    assert_eq!((plan.rate_gbps, plan.rtt_us), (400.0, 210.0));
    // Pasted over the shipped default's cross-DC table: parses, plans the same, and leaves the
    // same-rail class as shipped.
    let base = include_str!("../../../plugin-conf/default.toml");
    let start = base.find("[class.cross-dc]").unwrap();
    let end = start + base[start..].find("\n[tcp]").unwrap();
    let site = format!("{}{}{}", &base[..start], snippet, &base[end..]);
    let merged = parse_str(&site, "site").unwrap();
    assert_eq!(merged.plan(ConnClass::CrossDc), plan);
    assert_eq!(
        merged.plan(ConnClass::SameRail),
        parse_str(base, "default")
            .unwrap()
            .plan(ConnClass::SameRail)
    );
    // The table output prints the same snippet.
    let out = dqplb(&[
        "sim",
        "sweep",
        "--class",
        "cross-dc",
        "--preset",
        "fattree-k2",
        "--qps",
        "1",
        "--segment",
        "512K",
        "--outstanding",
        "8,16,19,20,21,22,23,24,32,64",
    ]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains(snippet), "{}", text(&out.stdout));
}

#[test]
fn same_seed_same_bytes_another_seed_other_pairs() {
    let run = |mode: &str, seed: &str| {
        let out = dqplb(&[
            "sim",
            "--preset",
            "fattree-k4",
            "--traffic",
            "cross-dc",
            "--dci-latency-us",
            "50",
            "--bytes",
            "8M",
            "--mode",
            mode,
            "--policy",
            "dqplb,spray",
            "--qps",
            "4",
            "--seed",
            seed,
            "--format",
            "json",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        out.stdout
    };
    for mode in ["b", "f", "p"] {
        assert_eq!(run(mode, "3"), run(mode, "3"), "{mode}");
        assert_ne!(run(mode, "3"), run(mode, "4"), "{mode}");
    }
    let a = dqplb(&["sim", "sweep", "--class", "cross-dc", "--format", "json"]);
    let b = dqplb(&["sim", "sweep", "--class", "cross-dc", "--format", "json"]);
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert_eq!(a.stdout, b.stdout);
}

/// Two tiers (no pods, so no DCs), given after the preset.
const TWO_TIERS: [&str; 10] = [
    "--hosts",
    "8",
    "--hosts-per-leaf",
    "4",
    "--spines",
    "2",
    "--pods",
    "0",
    "--cores",
    "0",
];

#[test]
fn bad_values_exit_2_naming_the_option() {
    let k2 = ["sim", "--preset", "fattree-k2", "--bytes", "1M"];
    let dci = [&TWO_TIERS[..], &["--dci-latency-us", "100"]].concat();
    let xdc = [&TWO_TIERS[..], &["--traffic", "cross-dc"]].concat();
    let cases: [(&[&str], &str); 9] = [
        (&["--dci-latency-us", "-1"], "--dci-latency-us"),
        (&["--dci-latency-us", "abc"], "--dci-latency-us"),
        (&["--dci-latency-us", "200000"], "--dci-latency-us"),
        (&["--dci-oversub", "0"], "--dci-oversub"),
        (&["--dci-oversub", "x"], "--dci-oversub"),
        // Two tiers (after the preset): no DCs.
        (&dci, "--dci-latency-us"),
        (&xdc, "--traffic cross-dc"),
        (
            &["--traffic", "cross-dc", "--background-hosts", "1"],
            "--background-hosts",
        ),
        (&["--traffic", "cross-dcx"], "unknown traffic"),
    ];
    for (extra, name) in cases {
        assert_refused(&k2, extra, name);
    }
    let sweeps: [(&[&str], &str); 4] = [
        (
            &["--class", "cross-rails"],
            "error: invalid value 'cross-rails' for '--class <C>'\n  [possible values: same-rail, cross-rail, cross-dc]",
        ),
        (
            &["--class", "cross-dc", "--traffic", "ring"],
            "--class cross-dc",
        ),
        (
            &["--class", "cross-dc", "--outstanding", "300"],
            "--outstanding 300",
        ),
        (
            &["--traffic", "cross-dc", "--preset", "fattree-k2"],
            "--class cross-dc",
        ),
    ];
    for (extra, name) in sweeps {
        assert_refused(&["sim", "sweep"], extra, name);
    }
}
