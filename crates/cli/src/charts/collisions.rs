//! `collisions-P-qQ.svg`: per rail, how many leaf uplinks carry i QP paths (bars) against the
//! expectation under a uniform hash, sum over leaves of M x Binomial(K_leaf, 1/M)(i) (dots).

// Drawing order, which tests/sim_svg.rs reads: rail by rail, its axes, then one bar per bin
// (filled rectangles in OBSERVED, zero-high for an empty bin), then one dot per expected bin
// (circles in EXPECTED).

use std::iter::once;

use dqplb_sim::{RailResult, SimResult};
use plotters::prelude::*;

use super::sim_subtitle;
use super::style::{fin, header, render, width_for, Area, Drawn, FONT, TEXT_SIZE};

pub(crate) const OBSERVED: RGBColor = RGBColor(0x4e, 0x79, 0xa7);
pub(crate) const EXPECTED: RGBColor = RGBColor(0xe1, 0x57, 0x59);

/// Panels per row.
const COLS: usize = 4;

/// The histograms of every simulated rail of `r`.
pub(crate) fn collisions(r: &SimResult) -> Result<String, String> {
    let n = r.per_rail.len().max(1);
    let (cols, rows) = (n.min(COLS), n.div_ceil(COLS));
    let title = format!(
        "uplink collisions per rail, {} q={}: uplinks with i QP paths (bars) vs Binomial(n, 1/{}) (dots)",
        r.policy, r.qps, r.spines
    );
    let sub = sim_subtitle(r);
    let w = width_for(title.len().max(sub.len()), (30 + 300 * cols) as u32);
    let h = (64 + 240 * rows) as u32;
    render("collisions", (w, h), |root| {
        let body = header(root, &[title, sub])?;
        let panels = body.split_evenly((rows, cols));
        for (rail, area) in r.per_rail.iter().zip(&panels) {
            let name = if r.is_plane() {
                "all rails (one plane)".to_string()
            } else {
                format!("rail {}", rail.rail)
            };
            panel(area, rail, &name)?;
        }
        Ok(())
    })
}

fn panel(area: &Area<'_>, rail: &RailResult, name: &str) -> Drawn {
    let bins = rail
        .uplink_hist
        .len()
        .max(rail.uplink_hist_expected.len())
        .max(1);
    let top = rail
        .uplink_hist
        .iter()
        .map(|&c| c as f64)
        .chain(rail.uplink_hist_expected.iter().map(|&e| fin(e)))
        .fold(1.0, f64::max);
    let caption = format!(
        "{name}: max {} paths/uplink, fullest {:.0}%",
        rail.uplink_hist.len().saturating_sub(1),
        100.0 * rail.max_uplink_util
    );
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, TEXT_SIZE))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(44)
        .build_cartesian_2d(-0.5..(bins as f64 - 0.5), 0.0..top * 1.08)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(0xee, 0xee, 0xee))
        .x_labels(bins.min(10))
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                format!("{i:.0}")
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_desc("QP paths on the uplink")
        .y_desc("uplinks")
        .draw()?;
    for (i, &c) in rail.uplink_hist.iter().enumerate() {
        let x = i as f64;
        chart.draw_series(once(Rectangle::new(
            [(x - 0.4, 0.0), (x + 0.4, c as f64)],
            OBSERVED.filled(),
        )))?;
    }
    for (i, &e) in rail.uplink_hist_expected.iter().enumerate() {
        chart.draw_series(once(Circle::new((i as f64, fin(e)), 3, EXPECTED.filled())))?;
    }
    Ok(())
}
