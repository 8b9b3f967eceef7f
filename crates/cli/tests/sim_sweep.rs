//! `dqplb sim sweep` run as a process: its choices are the ones its stated criteria pick from
//! the points it reports, the points are the individual `dqplb sim` runs, and its snippet parses.

mod sim_support;

use dqplb_config::{parse_str, ConnClass};
use serde_json::Value;
use sim_support::{dqplb, f, svg, text, u};

/// A small fragmented ring: 32 hosts on 4 leaves, 4 spines, 2 rails, 1 MiB steps (2 messages).
const FABRIC: [&str; 16] = [
    "--hosts",
    "32",
    "--rails",
    "2",
    "--hosts-per-leaf",
    "8",
    "--spines",
    "4",
    "--traffic",
    "ring",
    "--placement",
    "fragmented",
    "--bytes",
    "32M",
    "--mode",
    "b",
];

const GRID: [&str; 6] = [
    "--qps",
    "1,2,4,8",
    "--outstanding",
    "1,2,4",
    "--segment",
    "64K,128K,512K",
];

fn sweep(extra: &[&str]) -> Value {
    sim_support::sweep(&FABRIC, &GRID, extra)
}

/// Re-derives every choice from the reported points with the criteria as documented.
fn check_choices(v: &Value, bound_pct: f64, loss_pct: f64, hol_pct: f64) {
    let pts = v["points"].as_array().unwrap();
    assert_eq!(pts.len(), 4 * 3 * 3);
    let fi = &v["findings"];
    let b_star = pts
        .iter()
        .map(|p| f(&p["bound_upper"]))
        .fold(f64::INFINITY, f64::min);
    assert_eq!(f(&fi["bound_over_ideal"]), b_star);
    let clean = |p: &&Value| u(&p["faults"]) == 0;
    let best_of = |q: u64| {
        pts.iter()
            .filter(|p| u(&p["qps"]) == q)
            .filter(clean)
            .map(|p| f(&p["time_over_ideal"]))
            .fold(f64::INFINITY, f64::min)
    };
    let qs = [1u64, 2, 4, 8];
    let limit = (1.0 + bound_pct / 100.0) * b_star;
    let met = qs.iter().copied().find(|&q| best_of(q) <= limit);
    let q_star = u(&fi["qps"]);
    match met {
        Some(q) => {
            assert_eq!(q_star, q);
            assert_eq!(fi["q_met"], true);
            // Every smaller q misses the criterion.
            for &s in qs.iter().filter(|&&s| s < q) {
                assert!(best_of(s) > limit, "q={s} would also do");
            }
        }
        None => {
            assert_eq!(fi["q_met"], false);
            let fastest = qs
                .iter()
                .copied()
                .min_by(|a, b| best_of(*a).total_cmp(&best_of(*b)))
                .unwrap();
            assert_eq!(q_star, fastest);
        }
    }
    // Depth per segment at q*, then the segment.
    let at = |d: u64, s: u64| {
        pts.iter()
            .find(|p| {
                u(&p["qps"]) == q_star && u(&p["outstanding"]) == d && u(&p["segment_bytes"]) == s
            })
            .unwrap()
    };
    let mut chosen = Vec::new();
    for s in [64u64 << 10, 128 << 10, 512 << 10] {
        let runs: Vec<&Value> = [1u64, 2, 4]
            .iter()
            .map(|&d| at(d, s))
            .filter(clean)
            .collect();
        let best = runs
            .iter()
            .map(|p| f(&p["time_over_ideal"]))
            .fold(f64::INFINITY, f64::min);
        let d = runs
            .iter()
            .find(|p| f(&p["time_over_ideal"]) <= (1.0 + loss_pct / 100.0) * best)
            .map(|p| u(&p["outstanding"]))
            .unwrap();
        chosen.push((
            s,
            d,
            f(&at(d, s)["p99_us"]),
            f(&at(d, s)["time_over_ideal"]),
        ));
    }
    let per_seg = fi["per_segment"].as_array().unwrap();
    for ((s, d, _, _), p) in chosen.iter().zip(per_seg) {
        assert_eq!((u(&p["segment_bytes"]), u(&p["outstanding"])), (*s, *d));
    }
    let p0 = chosen[0].2;
    let no_hol = |c: &&(u64, u64, f64, f64)| c.2 <= (1.0 + hol_pct / 100.0) * p0;
    // The largest segment without head-of-line cost that keeps the point within the bound
    // (when q* met it), else the largest without head-of-line cost.
    let (s_star, d_star, _, _) = *chosen
        .iter()
        .rev()
        .filter(no_hol)
        .find(|c| met.is_none() || c.3 <= limit)
        .or_else(|| chosen.iter().rev().find(no_hol))
        .unwrap();
    assert_eq!(
        (u(&fi["segment_bytes"]), u(&fi["outstanding"])),
        (s_star, d_star)
    );
}

#[test]
fn choices_follow_the_criteria_and_points_are_the_single_runs() {
    let v = sweep(&[]);
    check_choices(&v, 5.0, 1.0, 10.0);
    // A looser bound moves q down (or keeps it), never up, and the rules still hold.
    let loose = sweep(&["--bound-pct", "40", "--hol-pct", "50"]);
    check_choices(&loose, 40.0, 1.0, 50.0);
    assert!(u(&loose["findings"]["qps"]) <= u(&v["findings"]["qps"]));
    assert_eq!(loose["findings"]["q_met"], true);
    // The sweep's points are exactly what `dqplb sim` reports for the same settings.
    let fi = &v["findings"];
    let pts = v["points"].as_array().unwrap();
    let qn = u(&fi["qps"]);
    let q = qn.to_string();
    let at_q: Vec<&Value> = pts.iter().filter(|p| u(&p["qps"]) == qn).collect();
    assert_eq!(at_q.len(), 9);
    for p in at_q {
        let (d, s) = (p["outstanding"].to_string(), p["segment_bytes"].to_string());
        let mut args = vec!["sim"];
        args.extend(FABRIC);
        args.extend([
            "--policy",
            "dqplb",
            "--qps",
            &q,
            "--outstanding",
            &d,
            "--segment",
            &s,
            "--format",
            "json",
        ]);
        let out = dqplb(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let r = &r[0];
        assert_eq!(
            r["time_over_ideal"], p["time_over_ideal"],
            "q={q} d={d} s={s}"
        );
        assert_eq!(r["bound_upper"], p["bound_upper"]);
        assert_eq!(r["message_latency"]["p99_us"], p["p99_us"]);
    }
}

fn plan_of(snippet: &str) -> dqplb_config::ClassPlan {
    let site = parse_str(snippet, "snippet").unwrap_or_else(|e| panic!("{e}\n{snippet}"));
    site.plan(ConnClass::SameRail)
}

#[test]
fn the_snippet_parses_and_carries_the_choice() {
    let v = sweep(&[]);
    let fi = &v["findings"];
    let snippet = v["snippet"].as_str().unwrap();
    assert!(snippet.starts_with("[class.same-rail]\n"), "{snippet}");
    let plan = plan_of(snippet);
    assert_eq!(u64::from(plan.qps), u(&fi["qps"]));
    assert_eq!(u64::from(plan.outstanding), u(&fi["outstanding"]));
    assert_eq!(plan.segment_bytes, u(&fi["segment_bytes"]));
    // Rate and RTT of the simulated path: 400 Gb/s, 8 hops of 1 us (4 out, 4 for the ACK).
    assert_eq!((plan.rate_gbps, plan.rtt_us), (400.0, 8.0));
    // Pasted over the same-rail table of the shipped default, the site file still parses and
    // plans the same; the other classes are untouched.
    let base = include_str!("../../../plugin-conf/default.toml");
    let start = base.find("[class.same-rail]").unwrap();
    let end = start + base[start..].find("\n[class.cross-rail]").unwrap();
    let site = format!("{}{}{}", &base[..start], snippet, &base[end..]);
    let merged = plan_of(&site);
    assert_eq!(
        (merged.qps, merged.outstanding, merged.segment_bytes),
        (plan.qps, plan.outstanding, plan.segment_bytes)
    );
    let cross = parse_str(&site, "site").unwrap().plan(ConnClass::CrossRail);
    let shipped = parse_str(base, "default")
        .unwrap()
        .plan(ConnClass::CrossRail);
    assert_eq!(cross, shipped);
    // The table output prints the same snippet, ready to paste.
    let mut args = vec!["sim", "sweep"];
    args.extend(FABRIC);
    args.extend(GRID);
    let out = dqplb(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains(snippet), "{s}");
    assert!(s.contains("smallest q within 5% of the fluid bound"), "{s}");
    assert!(s.contains(" runs in "), "{s}");
}

#[test]
fn csv_lists_every_point_and_bad_input_exits_2() {
    let mut args = vec!["sim", "sweep"];
    args.extend(FABRIC);
    args.extend([
        "--qps",
        "2,4",
        "--outstanding",
        "1",
        "--segment",
        "128K",
        "--format",
        "csv",
    ]);
    let out = dqplb(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    let lines: Vec<&str> = s.lines().collect();
    assert!(lines[0].starts_with("qps,outstanding,segment_bytes,time_over_ideal"));
    assert_eq!(lines.len(), 3);
    assert!(lines[1].starts_with("2,1,131072,") && lines[2].starts_with("4,1,131072,"));
    assert!(text(&out.stderr).contains("[class.same-rail]"));
    // Same seed, same bytes.
    assert_eq!(dqplb(&args).stdout, out.stdout);
    // 4 MiB ring steps, 8 messages for 8 slots: once refused (the ring model deadlocked), now
    // every point runs clean (a fault would make the exit status 1) with its last column (events)
    // non-zero and its faults column 0.
    let mut big = args.clone();
    big.extend(["--bytes", "128M"]);
    let out = dqplb(&big);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    let rows: Vec<Vec<&str>> = s.lines().skip(1).map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r[9], "0", "{s}");
        assert_ne!(r[10], "0", "{s}");
    }
    for (extra, needle) in [
        (vec!["--segment", "1000"], "--segment"),
        (vec!["--segment", "2K"], "4K"),
        (vec!["--policy", "dqplb,static-split"], "one policy"),
        (vec!["--qps", ""], "--qps"),
        (vec!["--bound-pct", "x"], "--bound-pct"),
        (
            // Refused before the sweep runs, not when sweep.svg is written after it.
            vec!["--svg", "/proc/dqplb-no-such-dir"],
            "--svg /proc/dqplb-no-such-dir: cannot create it",
        ),
    ] {
        let mut args = vec!["sim", "sweep"];
        args.extend(FABRIC);
        args.extend(extra.iter().copied());
        let out = dqplb(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(
            text(&out.stderr).contains(needle),
            "{extra:?}: {}",
            text(&out.stderr)
        );
    }
}

/// `--svg DIR`: one cell per grid point, in grid order at its row and column, coloured and
/// labelled with the point's % of ideal as the JSON reports it; the cells within the bound
/// criterion and the one chosen point marked as the findings say; the JSON itself the same as
/// without the option.
#[test]
fn svg_draws_every_point_and_marks_the_choice() {
    let dir = std::env::temp_dir().join(format!("dqplb-sweep-svg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_string_lossy().to_string();
    let v = sweep(&["--svg", &d]);
    assert_eq!(v, sweep(&[]));
    let els = svg::read(&dir.join("sweep.svg"));
    // The legend's 11 swatches, then the cells (the chart's drawing order).
    let rects = svg::filled_rects(&els);
    let (legend, cells) = rects.split_at(11);
    for (i, s) in legend.iter().enumerate() {
        assert_eq!(s.attr("fill"), svg::score_colour(i as f64 / 10.0));
    }
    let mut pts: Vec<&Value> = v["points"].as_array().unwrap().iter().collect();
    assert_eq!(cells.len(), pts.len());
    // Panels by segment, rows by q, columns by outstanding.
    let key = |p: &Value| (u(&p["segment_bytes"]), u(&p["qps"]), u(&p["outstanding"]));
    pts.sort_by_key(|p| key(p));
    let axis = |k: &str| {
        let mut a: Vec<u64> = pts.iter().map(|p| u(&p[k])).collect();
        a.sort_unstable();
        a.dedup();
        a
    };
    let (qs, ds) = (axis("qps"), axis("outstanding"));
    let fi = &v["findings"];
    let limit = (1.0 + f(&fi["criteria"]["bound_pct"]) / 100.0) * f(&fi["bound_over_ideal"]);
    let choice = (
        u(&fi["segment_bytes"]),
        u(&fi["qps"]),
        u(&fi["outstanding"]),
    );
    let (mut chosen, mut dashed_cells, mut plain_cells) = (0, 0, 0);
    for (k, (cell, p)) in cells.iter().zip(&pts).enumerate() {
        let key = key(p);
        // At its row and column of its panel.
        let first = cells[k - k % (qs.len() * ds.len())];
        let (i, j) = (
            qs.iter().position(|&q| q == key.1).unwrap() as f64,
            ds.iter().position(|&d| d == key.2).unwrap() as f64,
        );
        assert_eq!(
            (cell.num("x"), cell.num("y")),
            (
                first.num("x") + j * cell.num("width"),
                first.num("y") + i * cell.num("height")
            ),
            "{key:?}"
        );
        // After the cell: its border, then its label.
        let at = els.iter().position(|e| std::ptr::eq(e, *cell)).unwrap();
        let rest = &els[at + 1..];
        let label_at = rest.iter().position(|e| e.name == "text").expect("a label");
        let own = &rest[..label_at];
        let pct = f(&p["pct_of_ideal"]);
        let clean = u(&p["faults"]) == 0;
        let (fill, label) = if clean {
            (svg::score_colour(pct / 100.0), format!("{pct:.1}"))
        } else {
            (svg::GREY.to_string(), "fault".to_string())
        };
        assert_eq!(cell.attr("fill"), fill, "{key:?}");
        assert_eq!(rest[label_at].text, label, "{key:?}");
        assert_eq!(own.len(), own.iter().filter(|e| !e.is_filled()).count());
        let thick = own
            .iter()
            .filter(|e| e.name == "polyline" && e.attr("stroke-width") == "3")
            .count();
        let dashed = own
            .iter()
            .filter(|e| e.name == "polyline" && e.attr("stroke-width") == "1")
            .count();
        let plain = own.iter().filter(|e| e.is_outline("#DDDDDD")).count();
        let within = clean && f(&p["time_over_ideal"]) <= limit;
        if key == choice {
            assert_eq!((thick, dashed, plain), (1, 0, 0), "{key:?}: the choice");
            chosen += 1;
        } else if within {
            assert!(thick == 0 && dashed >= 4 && plain == 0, "{key:?}: within");
            dashed_cells += 1;
        } else {
            assert_eq!((thick, dashed, plain), (0, 0, 1), "{key:?}");
            plain_cells += 1;
        }
    }
    // The grid has cells of every kind.
    assert!(
        dashed_cells > 0 && plain_cells > 0,
        "{dashed_cells} {plain_cells}"
    );
    assert_eq!(chosen, 1);
    let panels = els
        .iter()
        .filter(|e| e.name == "text" && e.text.starts_with("segment "))
        .count();
    assert_eq!(panels, 3);
    let _ = std::fs::remove_dir_all(&dir);
}
