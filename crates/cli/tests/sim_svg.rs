//! `dqplb sim --svg DIR` run as a process: every chart is well-formed SVG with finite numbers,
//! each bar, histogram bin, heatmap cell and time-series line is there once, drawn to the number
//! the JSON (or the time-series CSV) reports, and the same run writes the same bytes.

mod sim_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sim_support::svg::{filled_rects, parse_svg, read, texts, util_colour, Elem, GREY};

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

/// The elements after `els[i]` up to (not including) the next element `stop` accepts.
fn until(els: &[Elem], i: usize, stop: impl Fn(&Elem) -> bool) -> &[Elem] {
    let rest = &els[i + 1..];
    &rest[..rest.iter().position(stop).unwrap_or(rest.len())]
}

/// Index of `e` in `els` (the same element, not an equal one).
fn index_of(els: &[Elem], e: &Elem) -> usize {
    els.iter().position(|x| std::ptr::eq(x, e)).unwrap()
}

#[test]
fn bars_are_the_reported_percentages() {
    let dir = tmp("bars");
    let extra = [
        "--policy",
        "single-qp,static-split,dqplb,spray",
        "--qps",
        "4",
    ];
    let v = run_with_svg(&dir, &extra);
    let runs = v.as_array().unwrap();
    assert_eq!(runs.len(), 4);
    let svg = std::fs::read_to_string(dir.join("ideal.svg")).unwrap();
    // Rendering is deterministic: the same run writes the same bytes.
    let again = tmp("bars-again");
    run_with_svg(&again, &extra);
    assert_eq!(
        std::fs::read_to_string(again.join("ideal.svg")).unwrap(),
        svg
    );
    for r in runs {
        let tag = format!("{}-q{}", r["policy"].as_str().unwrap(), r["qps"]);
        for chart in ["collisions", "heatmap"] {
            let name = format!("{chart}-{tag}.svg");
            let one = std::fs::read(dir.join(&name)).unwrap();
            assert_eq!(std::fs::read(again.join(&name)).unwrap(), one, "{name}");
        }
    }
    let els = parse_svg(&svg);
    // The bars are the only filled rectangles; each is followed by its value, its bound tick
    // (dashes: black polylines) and its labels under the axis.
    let bars = filled_rects(&els);
    assert_eq!(bars.len(), runs.len());
    let bottom = bars[0].num("y") + bars[0].num("height");
    let pct = |r: &Value| r["pct_of_ideal"].as_f64().unwrap();
    let (tall, tall_r) = bars
        .iter()
        .zip(runs)
        .max_by(|a, b| pct(a.1).total_cmp(&pct(b.1)))
        .unwrap();
    // Pixels per percentage point, from the tallest bar (to within a pixel of rounding).
    let scale = tall.num("height") / pct(tall_r);
    assert!(scale > 2.0, "{scale} px per point");
    let mut ticks = 0;
    for (b, r) in bars.iter().zip(runs) {
        let pct = pct(r);
        assert_eq!(
            b.num("y") + b.num("height"),
            bottom,
            "bars stand on the axis"
        );
        assert!(
            (b.num("height") - pct * scale).abs() <= 1.5,
            "bar {} px high for {pct}%",
            b.num("height")
        );
        let after = until(&els, index_of(&els, b), |e| {
            e.name == "rect" && e.is_filled()
        });
        let words: Vec<&str> = after
            .iter()
            .filter(|e| e.name == "text")
            .map(|e| e.text.as_str())
            .collect();
        let policy = r["policy"].as_str().unwrap();
        assert_eq!(
            words,
            [
                format!("{pct:.1}"),
                format!("q={}", r["qps"]),
                policy.to_string()
            ]
        );
        let dashes: Vec<&Elem> = after.iter().filter(|e| e.name == "polyline").collect();
        if policy == "spray" {
            assert!(dashes.is_empty(), "no bound for spray");
            continue;
        }
        // A bound tick at 100 / bound_upper.
        let want = (100.0 / r["bound_upper"].as_f64().unwrap()).min(100.0);
        assert!(!dashes.is_empty(), "{policy}: no bound tick");
        for d in dashes {
            assert_eq!(d.attr("stroke"), "#000000");
            for (_, y) in d.points() {
                assert!(
                    (bottom - y - want * scale).abs() <= 1.5,
                    "{policy}: tick at {y} for {want}%"
                );
            }
        }
        ticks += 1;
    }
    assert_eq!(ticks, 3);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&again);
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
    let els = read(&dir.join("heatmap-static-split-q2.svg"));
    // The legend's 11 swatches (0%, 10%, .. 100%), then one square per uplink, rail by rail, leaf
    // by leaf, spine by spine.
    let rects = filled_rects(&els);
    let (legend, cells) = rects.split_at(11);
    for (i, s) in legend.iter().enumerate() {
        assert_eq!(s.attr("fill"), util_colour(i as f64 / 10.0));
    }
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
        let mine = &cells[k * leaves * spines..(k + 1) * leaves * spines];
        let (x0, y0, side) = (mine[0].num("x"), mine[0].num("y"), mine[0].num("width"));
        for (i, c) in mine.iter().enumerate() {
            // At its leaf's row and its spine's column.
            let (leaf, spine) = ((i / spines) as f64, (i % spines) as f64);
            assert_eq!((c.num("width"), c.num("height")), (side, side));
            assert_eq!(
                (c.num("x"), c.num("y")),
                (x0 + spine * side, y0 + leaf * side)
            );
            let u = util[i].as_f64().unwrap();
            if dead.contains(&(i as u64)) {
                assert_eq!(c.attr("fill"), GREY);
                assert_eq!(u, 0.0);
                failed += 1;
            } else {
                assert_eq!(c.attr("fill"), util_colour(u), "rail {k} uplink {i}: {u}");
            }
        }
        // One phase: the fullest live uplink of the dump is the reported fullest uplink.
        let max = util.iter().map(|u| u.as_f64().unwrap()).fold(0.0, f64::max);
        assert_eq!(max, rail["max_uplink_util"].as_f64().unwrap());
        assert!(max > 0.0);
        let caption = format!(
            "rail {k}: fullest {:.0}%, mean {:.0}%",
            100.0 * max,
            100.0 * rail["mean_uplink_util"].as_f64().unwrap()
        );
        assert_eq!(texts(&els, &caption).len(), 1, "{caption}");
    }
    assert_eq!(failed, rails.len());
    // Collisions: per rail one bar per bin (zero-high for an empty one) and one dot per expected
    // bin, both on the panel's scale (pixels per uplink, from its tallest bar).
    let els = read(&dir.join("collisions-static-split-q2.svg"));
    let obs = filled_rects(&els);
    let exp: Vec<&Elem> = els.iter().filter(|e| e.name == "circle").collect();
    let (mut oi, mut ei) = (0, 0);
    for (k, rail) in rails.iter().enumerate() {
        let hist: Vec<u64> = rail["uplink_hist"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_u64().unwrap())
            .collect();
        let want = rail["uplink_hist_expected"].as_array().unwrap();
        // Every live and dead uplink of the rail lands in one bin.
        assert_eq!(hist.iter().sum::<u64>() as usize, leaves * spines);
        let bars = &obs[oi..oi + hist.len()];
        let bottom = bars[0].num("y") + bars[0].num("height");
        let top = hist.iter().copied().max().unwrap();
        let tallest = bars[hist.iter().position(|&h| h == top).unwrap()];
        let scale = tallest.num("height") / top as f64;
        for (b, &h) in bars.iter().zip(&hist) {
            assert_eq!(b.num("y") + b.num("height"), bottom);
            assert!(
                (b.num("height") - h as f64 * scale).abs() <= 1.5,
                "rail {k}: {h} uplinks drawn {} px high",
                b.num("height")
            );
        }
        oi += hist.len();
        for e in want {
            let e = e.as_f64().unwrap();
            let dot = exp[ei];
            assert!(
                (bottom - dot.num("cy") - e * scale).abs() <= 1.5,
                "rail {k}: expected {e} drawn at {}",
                dot.num("cy")
            );
            ei += 1;
        }
        let caption = format!(
            "rail {k}: max {} paths/uplink, fullest {:.0}%",
            hist.len() - 1,
            100.0 * rail["max_uplink_util"].as_f64().unwrap()
        );
        assert_eq!(texts(&els, &caption).len(), 1, "{caption}");
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
        "<svg><polyline points=\"1,2 3,inf \"/></svg>",
        "<svg><text>a & b</text></svg>",
        "<svg></svg><svg></svg>",
        "<svg><rect x=1/></svg>",
    ] {
        let r = std::panic::catch_unwind(|| parse_svg(bad));
        assert!(r.is_err(), "accepted {bad}");
    }
    let els = parse_svg("<svg><g><rect x=\"1.5\"/><text x=\"2\">\n a &amp; b\n</text></g></svg>");
    assert_eq!(els.len(), 4);
    assert_eq!(els[3].text, "a &amp; b");
}

#[test]
fn the_example_charts_in_docs_are_well_formed() {
    let img = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img");
    let mut seen = 0;
    for e in std::fs::read_dir(&img).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("sim-") && name.ends_with(".svg") {
            let els = read(&p);
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

/// The frame of a time-series panel: its top is the panel's largest value, its bottom 0.
fn is_frame(e: &Elem) -> bool {
    e.name == "rect" && e.is_outline("#BBBBBB")
}

/// One panel of the time-series chart.
struct Panel<'a> {
    /// Pixel rows of 0 and of the largest value.
    bottom: f64,
    height: f64,
    /// Its lines (coloured polylines; the axes are black) and their legends, in order.
    lines: Vec<&'a Elem>,
    legends: Vec<&'a Elem>,
}

impl Panel<'_> {
    /// The largest value over the panel's lines, as their legends print it.
    fn ymax(&self) -> f64 {
        self.legends.iter().map(|l| max_of(l)).fold(0.0, f64::max)
    }

    /// Where a value `v` sits, in pixels.
    fn y_of(&self, v: f64) -> f64 {
        self.bottom - v / self.ymax() * self.height
    }
}

/// The "(max X)" of a legend.
fn max_of(legend: &Elem) -> f64 {
    let t = &legend.text;
    let at = t.rfind(" (max ").unwrap_or_else(|| panic!("legend {t:?}"));
    t[at + 6..].trim_end_matches(')').parse().unwrap()
}

/// The panel captioned `title` (a prefix).
fn panel<'a>(els: &'a [Elem], title: &str) -> Panel<'a> {
    let i = els
        .iter()
        .position(|e| e.name == "text" && e.text.starts_with(title))
        .unwrap_or_else(|| panic!("no panel {title:?}"));
    let f = i + els[i..].iter().position(is_frame).expect("a frame");
    let rest = &els[f + 1..];
    let mine = &rest[..rest.iter().position(is_frame).unwrap_or(rest.len())];
    let frame = &els[f];
    Panel {
        bottom: frame.num("y") + frame.num("height"),
        height: frame.num("height"),
        lines: mine
            .iter()
            .filter(|e| e.name == "polyline" && e.attr("stroke") != "#000000")
            .collect(),
        legends: mine
            .iter()
            .filter(|e| e.name == "text" && e.text.contains(" (max "))
            .collect(),
    }
}

/// The lowest y of a polyline (its highest value).
fn top_y(e: &Elem) -> f64 {
    e.points().iter().map(|p| p.1).fold(f64::INFINITY, f64::min)
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
    let els = read(&dir.join("timeseries-dqplb-q4.svg"));
    assert_eq!(els.iter().filter(|e| is_frame(e)).count(), 4, "4 panels");
    let series: Vec<&Elem> = els
        .iter()
        .filter(|e| e.name == "polyline" && e.attr("stroke") != "#000000")
        .collect();
    // 5 rate lines, 4 outstanding, 1 queue, 4 counters: one point per sample time each.
    assert_eq!(series.len(), 5 + 4 + 1 + 4);
    for e in series {
        assert_eq!(e.points().len(), times.len());
    }
    let rate = panel(&els, "DCQCN rate");
    assert_eq!(rate.lines.len(), 5, "4 QPs and the mean");
    assert_eq!(rate.legends.len(), 5);
    for (k, line) in rate.lines.iter().take(4).enumerate() {
        let want = mine
            .iter()
            .filter(|r| r[5] == "qp" && r[6] == "0" && r[7] == k.to_string())
            .map(|r| num(r, 8))
            .fold(0.0, f64::max);
        let legend = rate.legends[k];
        assert!(legend.text.starts_with(&format!("QP {k} (max ")));
        let got = max_of(legend);
        assert!((got - want).abs() < 5e-4, "QP {k}: {got} against {want}");
        let y = rate.y_of(want);
        assert!((top_y(line) - y).abs() <= 1.5, "QP {k}'s peak at {y}");
    }
    let queue = panel(&els, "deepest link queue");
    let deepest = mine
        .iter()
        .filter(|r| r[5] != "qp")
        .map(|r| num(r, 11))
        .fold(0.0, f64::max);
    assert!(deepest > 0.0);
    assert_eq!(
        queue.legends[0].text,
        format!("max over links (max {:.4})", deepest / 1024.0)
    );
    assert!((top_y(queue.lines[0]) - queue.y_of(deepest / 1024.0)).abs() <= 1.5);
    // CNPs per period: the largest step of the summed cumulative counts.
    let counts = panel(&els, "per sample period");
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
    assert_eq!(
        counts.legends[1].text,
        format!("CNPs (QPs) (max {step:.4})")
    );
    assert!((top_y(counts.lines[1]) - counts.y_of(step)).abs() <= 1.5);

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
        let els = read(&dir.join("timeseries-dqplb-q2.svg"));
        assert_eq!(els.iter().filter(|e| is_frame(e)).count(), panels, "{mode}");
    }
    let dir = tmp("ts-none");
    run_with_svg(&dir, &["--policy", "dqplb"]);
    assert!(!std::fs::read_dir(&dir).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("timeseries")));
}
