//! SVG of a `dqplb sim sweep` grid: one panel per segment size, rows q, columns outstanding, each
//! cell coloured and labelled by its % of ideal, the chosen point and the cells within bound marked.

// Same conventions as svg.rs: plain strings, and every cell carries its numbers in `data-*`
// attributes (q, outstanding, segment, % of ideal, within bound, chosen, faults) so a test can
// check the picture against the sweep's JSON.

use std::fmt::Write;

use super::svg::{fin, human_bytes, open, text_filled};
use super::sweep::{sorted_unique as sorted, Findings, SweepPoint};

const CELL_W: f64 = 46.0;
const CELL_H: f64 = 22.0;
/// Left margin of a panel (its q labels).
const LABEL_W: f64 = 116.0;

/// Colour of a fraction of ideal in 0..=1: white to dark green.
pub(crate) fn score_colour(x: f64) -> String {
    let x = fin(x).clamp(0.0, 1.0);
    let (from, to) = ([255.0, 255.0, 255.0], [20.0, 110.0, 50.0]);
    let c: [f64; 3] = [0, 1, 2].map(|i| from[i] + x * (to[i] - from[i]));
    format!(
        "#{:02x}{:02x}{:02x}",
        c[0].round() as u8,
        c[1].round() as u8,
        c[2].round() as u8
    )
}

/// Black text, or `fill`.
fn text(s: &mut String, x: f64, y: f64, anchor: &str, fill: &str, t: &str) {
    text_filled(s, x, y, anchor, (fill != "black").then_some(fill), t);
}

/// The grid of `points` (one per q x outstanding x segment, as `analyse` took them) with the
/// choices of `f`; `about` is the runs' configuration, printed under the title.
pub fn sweep_grid(points: &[SweepPoint], f: &Findings, about: &str) -> String {
    let qs = sorted(points.iter().map(|p| p.qps));
    let ds = sorted(points.iter().map(|p| p.outstanding));
    let ss = sorted(points.iter().map(|p| p.segment_bytes));
    let limit = (1.0 + f.criteria.bound_pct / 100.0) * f.bound_over_ideal;
    let panel_w = LABEL_W + ds.len() as f64 * CELL_W + 24.0;
    let top = 92.0;
    let w = (20.0 + ss.len() as f64 * panel_w).max(7.0 * about.len() as f64 + 40.0);
    let h = top + 30.0 + qs.len() as f64 * CELL_H + 30.0;
    let mut s = open(w, h);
    text(
        &mut s,
        20.0,
        16.0,
        "start",
        "black",
        "dqplb sim sweep: % of ideal per q (rows) and outstanding (columns), one panel per segment",
    );
    text(&mut s, 20.0, 30.0, "start", "black", about);
    text(
        &mut s,
        20.0,
        44.0,
        "start",
        "black",
        &format!(
            "fluid bound B* {:.2}% of ideal; dashed: within {}% of it; thick: the chosen point (q {}, outstanding {}, segment {}); grey: a run with faults",
            f.bound_pct_of_ideal,
            f.criteria.bound_pct,
            f.qps,
            f.outstanding,
            human_bytes(u64::from(f.segment_bytes))
        ),
    );
    for i in 0..=10 {
        let _ = writeln!(
            s,
            "<rect x=\"{:.1}\" y=\"54\" width=\"14\" height=\"10\" fill=\"{}\" stroke=\"#cccccc\" stroke-width=\"0.5\"/>",
            20.0 + f64::from(i) * 14.0,
            score_colour(f64::from(i) / 10.0)
        );
    }
    text(&mut s, 20.0, 76.0, "start", "black", "0%");
    text(&mut s, 20.0 + 11.0 * 14.0, 76.0, "end", "black", "100%");
    for (k, &seg) in ss.iter().enumerate() {
        let ox = 20.0 + k as f64 * panel_w;
        let _ = writeln!(s, "<g class=\"panel\" data-segment=\"{seg}\">");
        text(
            &mut s,
            ox + LABEL_W,
            top,
            "start",
            "black",
            &format!("segment {}", human_bytes(u64::from(seg))),
        );
        for (j, &d) in ds.iter().enumerate() {
            text(
                &mut s,
                ox + LABEL_W + (j as f64 + 0.5) * CELL_W,
                top + 20.0,
                "middle",
                "black",
                &format!("out {d}"),
            );
        }
        for (i, &q) in qs.iter().enumerate() {
            let y = top + 26.0 + i as f64 * CELL_H;
            let bound = points
                .iter()
                .find(|p| p.qps == q)
                .map_or(0.0, |p| 100.0 / p.bound_upper.max(1e-12));
            text(
                &mut s,
                ox + LABEL_W - 6.0,
                y + 15.0,
                "end",
                "black",
                &format!("q {q} (bound {bound:.1}%)"),
            );
            for (j, &d) in ds.iter().enumerate() {
                let Some(p) = points
                    .iter()
                    .find(|p| p.qps == q && p.outstanding == d && p.segment_bytes == seg)
                else {
                    continue;
                };
                let x = ox + LABEL_W + j as f64 * CELL_W;
                let within = p.clean() && p.time_over_ideal <= limit;
                let chosen = (q, d, seg) == (f.qps, f.outstanding, f.segment_bytes);
                let fill = if p.clean() {
                    score_colour(p.pct_of_ideal / 100.0)
                } else {
                    "#9e9e9e".to_string()
                };
                let stroke = if chosen {
                    "stroke=\"black\" stroke-width=\"3\""
                } else if within {
                    "stroke=\"black\" stroke-width=\"1\" stroke-dasharray=\"3,2\""
                } else {
                    "stroke=\"#dddddd\" stroke-width=\"0.5\""
                };
                let _ = writeln!(
                    s,
                    "<rect class=\"cell\" data-qps=\"{q}\" data-outstanding=\"{d}\" data-segment=\"{seg}\" data-pct=\"{}\" data-within=\"{}\" data-chosen=\"{}\" data-faults=\"{}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{CELL_W:.1}\" height=\"{CELL_H:.1}\" fill=\"{fill}\" {stroke}><title>q {q}, outstanding {d}, segment {}: {:.2}% of ideal</title></rect>",
                    fin(p.pct_of_ideal),
                    u8::from(within),
                    u8::from(chosen),
                    p.faults,
                    human_bytes(u64::from(seg)),
                    p.pct_of_ideal
                );
                let (label, colour) = if !p.clean() {
                    ("fault".to_string(), "black")
                } else if p.pct_of_ideal > 55.0 {
                    (format!("{:.1}", p.pct_of_ideal), "white")
                } else {
                    (format!("{:.1}", p.pct_of_ideal), "black")
                };
                text(&mut s, x + CELL_W / 2.0, y + 15.0, "middle", colour, &label);
            }
        }
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::{analyse, test_point, Criteria};

    fn pt(q: usize, d: u32, s: u32, t: f64, faults: u64) -> SweepPoint {
        let mut p = test_point(q, d, s, t, 1.0 + 1.0 / q as f64, 20.0);
        p.faults = faults;
        p
    }

    #[test]
    fn one_cell_per_point_with_its_numbers_and_marks() {
        let mut pts = Vec::new();
        for q in [1, 4] {
            for d in [1, 2] {
                for s in [65536, 131072] {
                    let t = if q == 1 {
                        2.5
                    } else {
                        1.3 - 0.01 * f64::from(d)
                    };
                    pts.push(pt(q, d, s, t, u64::from(q == 1 && d == 2 && s == 65536)));
                }
            }
        }
        let f = analyse(&pts, &Criteria::default()).unwrap();
        let svg = sweep_grid(&pts, &f, "a <small> fabric");
        assert_eq!(svg.matches("<rect class=\"cell\"").count(), 8);
        assert_eq!(svg.matches("data-chosen=\"1\"").count(), 1);
        let chosen = format!(
            "data-qps=\"{}\" data-outstanding=\"{}\" data-segment=\"{}\"",
            f.qps, f.outstanding, f.segment_bytes
        );
        let line = svg.lines().find(|l| l.contains(&chosen)).unwrap();
        assert!(line.contains("data-chosen=\"1\"") && line.contains("stroke-width=\"3\""));
        // B* = 1.25 (q = 4): q = 4's times 1.28 and 1.29 are within 5% (1.3125), q = 1's are not.
        assert_eq!(svg.matches("data-within=\"1\"").count(), 4);
        assert_eq!(svg.matches("data-faults=\"1\"").count(), 1);
        assert!(svg.contains(">fault</text>") && svg.contains("fill=\"#9e9e9e\""));
        assert!(svg.contains("a &lt;small&gt; fabric") && svg.contains("q 4 (bound 80.0%)"));
        assert_eq!(score_colour(0.0), "#ffffff");
        assert_eq!(score_colour(1.0), "#146e32");
        assert_eq!(score_colour(f64::NAN), "#ffffff");
    }
}
