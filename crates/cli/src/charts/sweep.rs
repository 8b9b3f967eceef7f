//! `sweep.svg` of `dqplb sim sweep --svg DIR`: one panel per segment size, rows q, columns
//! outstanding, each cell coloured and labelled by its % of ideal, the chosen point and the cells
//! within the bound criterion marked.

// Drawing order, which tests/sim_sweep.rs reads: the 11 swatches of the colour legend, then
// panel by panel (segments ascending; caption "segment S"), row by row (q ascending), column by
// column (outstanding ascending) each cell as: its filled rectangle, its border (the chosen
// point: a black outline 3 px wide, one polyline; within the bound: a dashed black outline,
// polylines 1 px wide; any other: a light grey rectangle), its label (% of ideal, or "fault").
// Outlines are paths: the SVG backend draws a rectangle's edge 1 px wide.

use std::iter::once;

use dqplb_sim::sweep::{sorted_unique as sorted, Findings, SweepPoint};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::style::{fin, header, header_height, human_bytes, ramp_legend, render, score_colour};
use super::style::{text_style, width_for, Area, Drawn, GREY, LABEL_SIZE, TEXT_SIZE};

const CELL_W: i32 = 46;
const CELL_H: i32 = 22;
/// Left of a panel's cells: the q labels.
const LABEL_W: i32 = 124;
/// Above a panel's cells: its caption and the outstanding labels.
const TOP_H: i32 = 44;
/// The colour legend's row under the header.
const LEGEND_H: i32 = 34;
/// Light border of a cell neither chosen nor within the bound.
pub(crate) const PLAIN_BORDER: RGBColor = RGBColor(0xdd, 0xdd, 0xdd);

/// The grid of `points` (one per q x outstanding x segment, as `analyse` took them) with the
/// choices of `f`; `about` is the runs' configuration, printed under the title.
pub(crate) fn sweep_grid(
    points: &[SweepPoint],
    f: &Findings,
    about: &str,
) -> Result<String, String> {
    let qs = sorted(points.iter().map(|p| p.qps));
    let ds = sorted(points.iter().map(|p| p.outstanding));
    let ss = sorted(points.iter().map(|p| p.segment_bytes));
    let lines = [
        "dqplb sim sweep: % of ideal per q (rows) and outstanding (columns), one panel per segment"
            .to_string(),
        about.to_string(),
        format!(
            "fluid bound B* {:.2}% of ideal; dashed: within {}% of it; thick: the chosen point (q {}, outstanding {}, segment {}); grey: a run with faults",
            f.bound_pct_of_ideal,
            f.criteria.bound_pct,
            f.qps,
            f.outstanding,
            human_bytes(u64::from(f.segment_bytes))
        ),
    ];
    let panel_w = LABEL_W + ds.len() as i32 * CELL_W + 24;
    let panel_h = TOP_H + qs.len() as i32 * CELL_H + 12;
    let widest = lines.iter().map(String::len).max().unwrap_or(0);
    let w = width_for(widest, (20 + ss.len() as i32 * panel_w) as u32);
    let h = header_height(lines.len()) + LEGEND_H + panel_h;
    let grid = Grid {
        points,
        f,
        qs: &qs,
        ds: &ds,
        limit: (1.0 + f.criteria.bound_pct / 100.0) * f.bound_over_ideal,
    };
    render("sweep", (w, h as u32), |root| {
        let body = header(root, &lines)?;
        ramp_legend(&body, (16, 0), score_colour, "")?;
        let body = body.split_vertically(LEGEND_H).1;
        for (k, &seg) in ss.iter().enumerate() {
            let at = (16 + k as i32 * panel_w, 0);
            let area = body.clone().shrink(at, (panel_w as u32, panel_h as u32));
            grid.panel(&area, seg)?;
        }
        Ok(())
    })
}

/// What every panel reads.
struct Grid<'a> {
    points: &'a [SweepPoint],
    f: &'a Findings,
    qs: &'a [usize],
    ds: &'a [u32],
    /// Time over ideal within the bound criterion.
    limit: f64,
}

impl Grid<'_> {
    fn panel(&self, area: &Area<'_>, seg: u32) -> Drawn {
        let (qs, ds) = (self.qs, self.ds);
        let black = |h, v| text_style(TEXT_SIZE, BLACK, h, v);
        area.draw(&Text::new(
            format!("segment {}", human_bytes(u64::from(seg))),
            (LABEL_W, 2),
            black(HPos::Left, VPos::Top),
        ))?;
        for (j, &d) in ds.iter().enumerate() {
            let x = LABEL_W + j as i32 * CELL_W + CELL_W / 2;
            area.draw(&Text::new(
                format!("out {d}"),
                (x, TOP_H - 10),
                black(HPos::Center, VPos::Center),
            ))?;
        }
        for (i, &q) in qs.iter().enumerate() {
            let bound = self
                .points
                .iter()
                .find(|p| p.qps == q)
                .map_or(0.0, |p| 100.0 / p.bound_upper.max(1e-12));
            let y = TOP_H + i as i32 * CELL_H + CELL_H / 2;
            area.draw(&Text::new(
                format!("q {q} (bound {bound:.1}%)"),
                (LABEL_W - 6, y),
                black(HPos::Right, VPos::Center),
            ))?;
        }
        let (cw, ch) = (ds.len() as i32 * CELL_W, qs.len() as i32 * CELL_H);
        // One pixel more than the cells: plotters maps a range onto the first to last pixel.
        let cells = area
            .clone()
            .shrink((LABEL_W, TOP_H), (cw as u32 + 1, ch as u32 + 1));
        let mut chart = ChartBuilder::on(&cells)
            .build_cartesian_2d(0.0..ds.len() as f64, 0.0..qs.len() as f64)?;
        for (i, &q) in qs.iter().enumerate() {
            for (j, &d) in ds.iter().enumerate() {
                let Some(p) = self
                    .points
                    .iter()
                    .find(|p| p.qps == q && p.outstanding == d && p.segment_bytes == seg)
                else {
                    continue;
                };
                // The smallest q on top.
                let (x, y) = (j as f64, (qs.len() - 1 - i) as f64);
                let corners = [(x, y), (x + 1.0, y + 1.0)];
                let fill = if p.clean() {
                    score_colour(p.pct_of_ideal / 100.0)
                } else {
                    GREY
                };
                chart.draw_series(once(Rectangle::new(corners, fill.filled())))?;
                let within = p.clean() && p.time_over_ideal <= self.limit;
                let f = self.f;
                let (x1, y1) = (x + 1.0, y + 1.0);
                let outline = vec![(x, y), (x1, y), (x1, y1), (x, y1), (x, y)];
                if (q, d, seg) == (f.qps, f.outstanding, f.segment_bytes) {
                    chart.draw_series(once(PathElement::new(outline, BLACK.stroke_width(3))))?;
                } else if within {
                    chart.draw_series(once(DashedPathElement::new(
                        outline,
                        3,
                        2,
                        BLACK.stroke_width(1),
                    )))?;
                } else {
                    chart
                        .draw_series(once(Rectangle::new(corners, PLAIN_BORDER.stroke_width(1))))?;
                }
                let (label, colour) = if !p.clean() {
                    ("fault".to_string(), BLACK)
                } else if p.pct_of_ideal > 55.0 {
                    (format!("{:.1}", fin(p.pct_of_ideal)), WHITE)
                } else {
                    (format!("{:.1}", fin(p.pct_of_ideal)), BLACK)
                };
                chart.draw_series(once(
                    EmptyElement::at((x + 0.5, y + 0.5))
                        + Text::new(
                            label,
                            (0, 0),
                            text_style(LABEL_SIZE, colour, HPos::Center, VPos::Center),
                        ),
                ))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use dqplb_sim::sweep::{analyse, Criteria};

    use super::*;

    fn pt(q: usize, d: u32, s: u32, t: f64, faults: u64) -> SweepPoint {
        SweepPoint {
            qps: q,
            outstanding: d,
            segment_bytes: s,
            time_over_ideal: t,
            pct_of_ideal: 100.0 / t,
            bound_upper: 1.0 + 1.0 / q as f64,
            bound_lower: 1.0,
            p50_us: 10.0,
            p99_us: 20.0,
            faults,
            events: 1,
        }
    }

    #[test]
    fn one_cell_per_point_with_its_label_and_marks() {
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
        let svg = sweep_grid(&pts, &f, "a <small> fabric").unwrap();
        assert_eq!(svg, sweep_grid(&pts, &f, "a <small> fabric").unwrap());
        let filled = |l: &&str| l.starts_with("<rect") && !l.contains("fill=\"none\"");
        // Background, 11 swatches, 8 cells.
        assert_eq!(svg.lines().filter(filled).count(), 20);
        // The chosen point: one 3 px black outline.
        assert_eq!(
            svg.matches("stroke=\"#000000\" stroke-width=\"3\"").count(),
            1
        );
        // B* = 1.25 (q = 4): q = 4's times 1.28 and 1.29 are within 5% (1.3125), q = 1's are
        // not: four light borders; the three within but not chosen are dashed (at least one
        // dash per side).
        assert_eq!(svg.matches("stroke=\"#DDDDDD\"").count(), 4);
        let dashes = svg.matches("stroke=\"#000000\" stroke-width=\"1\"").count();
        assert!(dashes >= 3 * 4, "{dashes}");
        assert_eq!(svg.matches("\nfault\n").count(), 1);
        assert!(svg.contains("fill=\"#9E9E9E\""));
        assert!(svg.contains("a &lt;small&gt; fabric") && svg.contains("q 4 (bound 80.0%)"));
        assert_eq!(svg.matches("\nsegment ").count(), 2);
    }
}
