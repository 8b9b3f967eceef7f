//! `heatmap-P-qQ.svg`: per rail, one cell per leaf->spine uplink (rows: leaves, columns:
//! spines), coloured by its busy fraction over the simulated time; failed links are grey.

// Drawing order, which tests/sim_svg.rs reads: the 11 swatches of the colour legend, then rail
// by rail (as SimResult::uplink_rails cuts them) one filled square per uplink, leaf by leaf,
// spine by spine within a leaf, each caption "rail R: fullest X%, mean Y%" before its cells.

use std::iter::once;

use dqplb_sim::report::RailUplinks;
use dqplb_sim::SimResult;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::sim_subtitle;
use super::style::{header, header_height, ramp_legend, render, text_style, util_colour};
use super::style::{width_for, Area, Drawn, GREY, LABEL_SIZE, TEXT_SIZE};

/// Panels per row.
const COLS: usize = 4;
/// Left of a panel's cells: the leaf numbers.
const LABEL_W: i32 = 36;
/// Above a panel's cells: its caption.
const CAPTION_H: i32 = 22;
/// Below a panel's cells: the spine numbers, and the gap to the next row of panels.
const BELOW_H: i32 = 36;
/// The colour legend's row under the header.
const LEGEND_H: i32 = 34;

/// The heatmaps of every simulated rail of `r`.
pub(crate) fn heatmap(r: &SimResult) -> Result<String, String> {
    let (leaves, spines) = (r.leaves.max(1), r.spines.max(1));
    let cell = (240 / leaves.max(spines)).clamp(2, 16) as i32;
    let panel_w = (LABEL_W + spines as i32 * cell + 24).max(210);
    let panel_h = CAPTION_H + leaves as i32 * cell + BELOW_H;
    let panels = r.uplink_rails();
    let cols = panels.len().clamp(1, COLS);
    let rows = panels.len().max(1).div_ceil(cols);
    let title = format!(
        "uplink utilisation per rail, {} q={} (rows: {leaves} leaves, columns: {spines} spines)",
        r.policy, r.qps
    );
    let sub = sim_subtitle(r);
    let w = width_for(
        title.len().max(sub.len()),
        20 + cols as u32 * panel_w as u32,
    );
    let h = header_height(2) + LEGEND_H + rows as i32 * panel_h;
    render("heatmap", (w, h as u32), |root| {
        let body = header(root, &[title, sub])?;
        ramp_legend(&body, (16, 0), util_colour, "grey: failed link")?;
        let body = body.split_vertically(LEGEND_H).1;
        for (k, p) in panels.iter().enumerate() {
            let at = (
                16 + (k % cols) as i32 * panel_w,
                (k / cols) as i32 * panel_h,
            );
            let area = body.clone().shrink(at, (panel_w as u32, panel_h as u32));
            panel(&area, p, (leaves, spines), cell)?;
        }
        Ok(())
    })
}

fn panel(
    area: &Area<'_>,
    p: &RailUplinks<'_>,
    (leaves, spines): (usize, usize),
    cell: i32,
) -> Drawn {
    let caption = format!(
        "rail {}: fullest {:.0}%, mean {:.0}%",
        p.rail,
        100.0 * p.max,
        100.0 * p.mean
    );
    let left = text_style(TEXT_SIZE, BLACK, HPos::Left, VPos::Top);
    area.draw(&Text::new(caption, (LABEL_W, 2), left))?;
    let (pw, ph) = (spines as i32 * cell, leaves as i32 * cell);
    // Plotters maps a range onto the area's first to last pixel: one more than the cells' width
    // and height, so that each cell is `cell` pixels square.
    let cells = area
        .clone()
        .shrink((LABEL_W, CAPTION_H), (pw as u32 + 1, ph as u32 + 1));
    let mut chart =
        ChartBuilder::on(&cells).build_cartesian_2d(0.0..spines as f64, 0.0..leaves as f64)?;
    for (i, &u) in p.util.iter().enumerate() {
        let (leaf, spine) = (i / spines, i % spines);
        let fill = if p.failed.contains(&(i as u32)) {
            GREY
        } else {
            util_colour(u)
        };
        // Leaf 0 on top.
        let (x, y) = (spine as f64, (leaves - 1 - leaf) as f64);
        chart.draw_series(once(Rectangle::new(
            [(x, y), (x + 1.0, y + 1.0)],
            fill.filled(),
        )))?;
    }
    // Numbers at least 14 px apart.
    let step = ((14 + cell - 1) / cell) as usize;
    let under = text_style(LABEL_SIZE, BLACK, HPos::Center, VPos::Top);
    for s in (0..spines).step_by(step) {
        let x = LABEL_W + s as i32 * cell + cell / 2;
        area.draw(&Text::new(
            s.to_string(),
            (x, CAPTION_H + ph + 3),
            under.clone(),
        ))?;
    }
    let beside = text_style(LABEL_SIZE, BLACK, HPos::Right, VPos::Center);
    for l in (0..leaves).step_by(step) {
        let y = CAPTION_H + l as i32 * cell + cell / 2;
        area.draw(&Text::new(l.to_string(), (LABEL_W - 4, y), beside.clone()))?;
    }
    Ok(())
}
