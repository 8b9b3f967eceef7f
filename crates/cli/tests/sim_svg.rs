//! `dqplb sim --svg DIR` run as a process: every chart is well-formed SVG with finite numbers, and
//! each bar, histogram bin and heatmap cell carries exactly the number the JSON reports.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// One element: its name and attributes.
struct Elem {
    name: String,
    attrs: HashMap<String, String>,
}

const NUMERIC: [&str; 16] = [
    "x",
    "y",
    "width",
    "height",
    "cx",
    "cy",
    "r",
    "x1",
    "y1",
    "x2",
    "y2",
    "data-pct",
    "data-util",
    "data-count",
    "data-expected",
    "data-qps",
];

/// A minimal XML reader for what the simulator writes: tags balance, attributes are quoted,
/// text holds no raw '<' and only known entities, numeric attributes are finite. Returns the
/// elements in document order.
fn parse_svg(s: &str) -> Vec<Elem> {
    let mut out = Vec::new();
    let mut stack: Vec<String> = Vec::new();
    let mut roots = 0;
    let mut rest = s;
    while let Some(i) = rest.find('<') {
        let text = &rest[..i];
        check_text(text);
        let Some(j) = rest[i..].find('>') else {
            panic!("unclosed tag at {:?}", &rest[i..(i + 40).min(rest.len())])
        };
        let tag = &rest[i + 1..i + j];
        rest = &rest[i + j + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.trim()),
                "mismatched </{name}>"
            );
            continue;
        }
        let self_closing = tag.ends_with('/');
        let body = tag.trim_end_matches('/');
        let (name, attrs) = match body.find(char::is_whitespace) {
            Some(k) => (&body[..k], &body[k..]),
            None => (body, ""),
        };
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
            "bad tag name {name:?}"
        );
        if stack.is_empty() {
            roots += 1;
            assert_eq!(name, "svg", "the root is not <svg>");
        }
        let attrs = parse_attrs(attrs);
        for k in NUMERIC {
            if let Some(v) = attrs.get(k) {
                let x: f64 = v
                    .parse()
                    .unwrap_or_else(|_| panic!("{k}={v:?} is not a number"));
                assert!(x.is_finite(), "{k}={v} is not finite");
            }
        }
        if !self_closing {
            stack.push(name.to_string());
        }
        out.push(Elem {
            name: name.to_string(),
            attrs,
        });
    }
    check_text(rest);
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    assert!(rest.trim().is_empty(), "text after the root");
    assert_eq!(roots, 1, "one root element");
    out
}

fn check_text(t: &str) {
    let mut r = t;
    while let Some(i) = r.find('&') {
        let tail = &r[i..];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| tail.starts_with(e)),
            "bare & in {t:?}"
        );
        r = &tail[1..];
    }
    assert!(!t.contains('>'), "raw > in text {t:?}");
}

fn parse_attrs(s: &str) -> HashMap<String, String> {
    let mut m = HashMap::new();
    let mut r = s.trim();
    while !r.is_empty() {
        let eq = r
            .find('=')
            .unwrap_or_else(|| panic!("attribute without value: {r:?}"));
        let key = r[..eq].trim().to_string();
        let after = &r[eq + 1..];
        assert!(after.starts_with('"'), "unquoted attribute {key}");
        let end = after[1..].find('"').expect("unterminated attribute") + 1;
        let val = after[1..end].to_string();
        check_text(&val);
        assert!(
            m.insert(key.clone(), val).is_none(),
            "duplicate attribute {key}"
        );
        r = after[end + 1..].trim_start();
    }
    m
}

fn of_class<'a>(els: &'a [Elem], name: &str, class: &str) -> Vec<&'a Elem> {
    els.iter()
        .filter(|e| e.name == name && e.attrs.get("class").map(String::as_str) == Some(class))
        .collect()
}

fn attr_f64(e: &Elem, k: &str) -> f64 {
    e.attrs[k].parse().unwrap()
}

/// serde_json reads floats to within one unit in the last place (without its float_roundtrip
/// feature), the SVG's numbers are Rust's shortest round-trip form: equal up to that unit.
fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= f64::EPSILON * a.abs().max(b.abs())
}

/// Runs `dqplb` with `args`, asserts success, returns its standard output.
fn dqplb_ok(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .args(args)
        .output()
        .expect("run dqplb");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn run_with_svg(dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec![
        "sim",
        "--hosts",
        "32",
        "--rails",
        "2",
        "--hosts-per-leaf",
        "8",
        "--spines",
        "4",
        "--bytes",
        "4M",
        "--placement",
        "fragmented",
        "--mode",
        "b",
        "--format",
        "json",
        "--svg",
        dir.to_str().unwrap(),
    ];
    args.extend(extra);
    serde_json::from_slice(&dqplb_ok(&args)).expect("JSON")
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dqplb-sim-svg-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn bars_are_the_reported_percentages() {
    let dir = tmp("bars");
    let v = run_with_svg(
        &dir,
        &[
            "--policy",
            "single-qp,static-split,dqplb,spray",
            "--qps",
            "4",
        ],
    );
    let runs = v.as_array().unwrap();
    assert_eq!(runs.len(), 4);
    let svg = std::fs::read_to_string(dir.join("ideal.svg")).unwrap();
    let els = parse_svg(&svg);
    let bars = of_class(&els, "rect", "bar");
    assert_eq!(bars.len(), runs.len());
    for (b, r) in bars.iter().zip(runs) {
        let pct = r["pct_of_ideal"].as_f64().unwrap();
        assert_eq!(b.attrs["data-policy"], r["policy"].as_str().unwrap());
        assert_eq!(b.attrs["data-qps"], r["qps"].to_string());
        let shown = attr_f64(b, "data-pct");
        assert!(
            same(shown, pct),
            "the bar's number {shown} is the JSON's {pct}"
        );
        // 3 px per percentage point, to the written precision; the bar stands on the axis.
        assert_eq!(b.attrs["height"], format!("{:.3}", shown * 3.0));
        assert!((attr_f64(b, "height") - pct * 3.0).abs() <= 5e-4);
        let bottom = attr_f64(b, "y") + attr_f64(b, "height");
        assert!((bottom - 340.0).abs() < 2e-3, "bar bottom {bottom}");
    }
    // A bound tick for every policy but spray, at 100 / bound_upper.
    let ticks = of_class(&els, "line", "bound");
    assert_eq!(ticks.len(), 3);
    for (t, r) in ticks.iter().zip(runs) {
        let want = (100.0 / r["bound_upper"].as_f64().unwrap()).min(100.0);
        assert!(same(attr_f64(t, "data-pct"), want));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn heatmap_has_one_cell_per_uplink_and_histograms_match() {
    let dir = tmp("heat");
    let v = run_with_svg(
        &dir,
        &[
            "--policy",
            "static-split",
            "--qps",
            "2",
            "--failed-links",
            "1",
        ],
    );
    let r = &v[0];
    let (leaves, spines) = (
        r["leaves"].as_u64().unwrap() as usize,
        r["spines"].as_u64().unwrap() as usize,
    );
    assert_eq!((leaves, spines), (4, 4));
    let rails = r["per_rail"].as_array().unwrap();
    let heat = std::fs::read_to_string(dir.join("heatmap-static-split-q2.svg")).unwrap();
    let els = parse_svg(&heat);
    let cells = of_class(&els, "rect", "cell");
    assert_eq!(cells.len(), leaves * spines * rails.len());
    let mut failed = 0;
    for (k, rail) in rails.iter().enumerate() {
        let util = rail["uplink_util"].as_array().unwrap();
        assert_eq!(util.len(), leaves * spines);
        let dead: Vec<u64> = rail["uplink_failed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(dead.len(), 1, "one failed leaf-spine link per rail");
        for (i, c) in cells[k * leaves * spines..(k + 1) * leaves * spines]
            .iter()
            .enumerate()
        {
            assert_eq!(c.attrs["data-leaf"], (i / spines).to_string());
            assert_eq!(c.attrs["data-spine"], (i % spines).to_string());
            assert!(same(attr_f64(c, "data-util"), util[i].as_f64().unwrap()));
            if dead.contains(&(i as u64)) {
                assert_eq!(c.attrs["fill"], "#9e9e9e");
                assert_eq!(util[i].as_f64().unwrap(), 0.0);
                failed += 1;
            }
        }
        // One phase: the fullest live uplink of the dump is the reported fullest uplink.
        let max = util.iter().map(|u| u.as_f64().unwrap()).fold(0.0, f64::max);
        assert_eq!(max, rail["max_uplink_util"].as_f64().unwrap());
        assert!(max > 0.0);
    }
    assert_eq!(failed, rails.len());
    let coll = std::fs::read_to_string(dir.join("collisions-static-split-q2.svg")).unwrap();
    let els = parse_svg(&coll);
    let obs = of_class(&els, "rect", "obs");
    let exp = of_class(&els, "circle", "exp");
    let (mut oi, mut ei) = (0, 0);
    for rail in rails {
        let hist = rail["uplink_hist"].as_array().unwrap();
        let want = rail["uplink_hist_expected"].as_array().unwrap();
        // Every live and dead uplink of the rail lands in one bin.
        let total: u64 = hist.iter().map(|h| h.as_u64().unwrap()).sum();
        assert_eq!(total as usize, leaves * spines);
        for (i, h) in hist.iter().enumerate() {
            assert_eq!(obs[oi].attrs["data-paths"], i.to_string());
            assert_eq!(obs[oi].attrs["data-count"], h.to_string());
            oi += 1;
        }
        for e in want {
            assert!(same(
                attr_f64(exp[ei], "data-expected"),
                e.as_f64().unwrap()
            ));
            ei += 1;
        }
    }
    assert_eq!((oi, ei), (obs.len(), exp.len()));
    let csv = std::fs::read_to_string(dir.join("uplinks.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("policy,qps,rail,leaf,spine,util,failed"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), leaves * spines * rails.len());
    assert_eq!(
        rows.iter().filter(|l| l.ends_with(",true")).count(),
        rails.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_reader_rejects_what_it_should() {
    for bad in [
        "<svg><rect></svg>",
        "<svg><rect x=\"NaN\"/></svg>",
        "<svg><rect x=\"inf\"/></svg>",
        "<svg><text>a & b</text></svg>",
        "<svg></svg><svg></svg>",
        "<svg><rect x=1/></svg>",
    ] {
        let r = std::panic::catch_unwind(|| parse_svg(bad));
        assert!(r.is_err(), "accepted {bad}");
    }
    assert_eq!(parse_svg("<svg><g><rect x=\"1.5\"/></g></svg>").len(), 3);
}

#[test]
fn the_example_charts_in_docs_are_well_formed() {
    let img = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img");
    let mut seen = 0;
    for e in std::fs::read_dir(&img).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("sim-") && name.ends_with(".svg") {
            let els = parse_svg(&std::fs::read_to_string(&p).unwrap());
            assert!(els.len() > 10, "{name}");
            seen += 1;
        }
    }
    // The five charts of `dqplb sim --svg` and the sweep grid of `dqplb sim sweep --svg`.
    assert_eq!(seen, 6, "docs/img/sim-*.svg");
}

/// `dqplb sim` with `extra` writing its samples to DIR/ts.csv and charts to DIR; the CSV's rows.
fn run_sampled(dir: &Path, extra: &[&str]) -> Vec<Vec<String>> {
    std::fs::create_dir_all(dir).unwrap();
    let csv = dir.join("ts.csv");
    let mut args = vec![
        "sim",
        "--format",
        "json",
        "--timeseries",
        csv.to_str().unwrap(),
        "--svg",
        dir.to_str().unwrap(),
    ];
    args.extend(extra);
    dqplb_ok(&args);
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("policy,qps,t_us,rail,phase,kind,id,qp,"));
    lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

/// The polylines of the panel titled `title` (a prefix), with the panel's ymax and bottom.
fn panel<'a>(els: &'a [Elem], title: &str) -> (f64, f64, Vec<&'a Elem>) {
    let i = els
        .iter()
        .position(|e| {
            e.name == "g"
                && e.attrs
                    .get("data-title")
                    .is_some_and(|t| t.starts_with(title))
        })
        .unwrap_or_else(|| panic!("no panel {title:?}"));
    let g = &els[i];
    let lines = els[i + 1..]
        .iter()
        .take_while(|e| e.name != "g")
        .filter(|e| e.name == "polyline")
        .collect();
    (attr_f64(g, "data-ymax"), attr_f64(g, "data-bottom"), lines)
}

/// The lowest y of a polyline (its highest value).
fn top_y(e: &Elem) -> f64 {
    e.attrs["points"]
        .split_whitespace()
        .map(|p| p.split_once(',').unwrap().1.parse::<f64>().unwrap())
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn the_time_series_chart_draws_the_sampled_counters() {
    // 8-to-1 incast in P mode, DCQCN on: queues, marks and CNPs are all non-zero.
    let dir = tmp("ts-p");
    let rows = run_sampled(
        &dir,
        &[
            "--mode",
            "p",
            "--hosts",
            "9",
            "--rails",
            "1",
            "--hosts-per-leaf",
            "16",
            "--spines",
            "1",
            "--traffic",
            "incast",
            "--bytes",
            "4M",
            "--policy",
            "dqplb",
            "--qps",
            "4",
            "--sample-us",
            "20",
        ],
    );
    let mine: Vec<&Vec<String>> = rows.iter().filter(|r| r[3] == "0" && r[4] == "0").collect();
    let mut times: Vec<&str> = mine.iter().map(|r| r[2].as_str()).collect();
    times.dedup();
    let num = |r: &Vec<String>, k: usize| r[k].parse::<f64>().unwrap();
    let els = parse_svg(&std::fs::read_to_string(dir.join("timeseries-dqplb-q4.svg")).unwrap());
    assert_eq!(of_class(&els, "g", "panel").len(), 4);
    for e in of_class(&els, "polyline", "series") {
        assert_eq!(e.attrs["data-points"], times.len().to_string());
        assert_eq!(e.attrs["points"].split_whitespace().count(), times.len());
    }
    let (ymax, bottom, rate) = panel(&els, "DCQCN rate");
    assert_eq!(rate.len(), 5, "4 QPs and the mean");
    for (k, line) in rate.iter().take(4).enumerate() {
        let want = mine
            .iter()
            .filter(|r| r[5] == "qp" && r[6] == "0" && r[7] == k.to_string())
            .map(|r| num(r, 8))
            .fold(0.0, f64::max);
        let got = attr_f64(line, "data-max");
        assert!((got - want).abs() < 5e-4, "QP {k}: {got} against {want}");
        let y = bottom - got / ymax * 120.0;
        assert!((top_y(line) - y).abs() < 2e-3, "QP {k}'s peak at {y}");
    }
    let (_, _, queue) = panel(&els, "deepest link queue");
    let deepest = mine
        .iter()
        .filter(|r| r[5] != "qp")
        .map(|r| num(r, 11))
        .fold(0.0, f64::max);
    assert!(deepest > 0.0);
    assert_eq!(attr_f64(queue[0], "data-max"), deepest / 1024.0);
    // CNPs per period: the largest step of the summed cumulative counts.
    let (_, _, counts) = panel(&els, "per sample period");
    let mut cum = Vec::new();
    for t in &times {
        cum.push(
            mine.iter()
                .filter(|r| r[2] == *t && r[5] == "qp")
                .map(|r| num(r, 13))
                .sum::<f64>(),
        );
    }
    let step = cum
        .iter()
        .scan(0.0, |prev, &c| {
            let d = c - *prev;
            *prev = c;
            Some(d)
        })
        .fold(0.0, f64::max);
    assert!(step > 0.0);
    assert_eq!(counts[1].attrs["data-name"], "CNPs (QPs)");
    assert_eq!(attr_f64(counts[1], "data-max"), step);

    // F mode: no link rows, so no queue panel; B mode has one. Unsampled runs write none.
    let fabric = [
        "--hosts",
        "16",
        "--rails",
        "1",
        "--hosts-per-leaf",
        "8",
        "--spines",
        "2",
        "--bytes",
        "4M",
        "--traffic",
        "permutation",
        "--qps",
        "2",
    ];
    for (mode, panels) in [("f", 3), ("b", 4)] {
        let dir = tmp(&format!("ts-{mode}"));
        let mut a = fabric.to_vec();
        a.extend(["--mode", mode, "--policy", "dqplb"]);
        run_sampled(&dir, &a);
        let els = parse_svg(&std::fs::read_to_string(dir.join("timeseries-dqplb-q2.svg")).unwrap());
        assert_eq!(of_class(&els, "g", "panel").len(), panels, "{mode}");
    }
    let dir = tmp("ts-none");
    run_with_svg(&dir, &["--policy", "dqplb"]);
    assert!(!std::fs::read_dir(&dir).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("timeseries")));
}
