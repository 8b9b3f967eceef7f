//! `dqplb paths-bench --img-dir DIR`: throughput per policy per scenario, per-path carried rate
//! against the path rate, and the time series of the rate-change scenario.

use std::path::Path;

use dqplb_engine::PolicyKind;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::style::{err, legend, FONT};
use crate::paths::metrics::{SeriesPoint, TrialSummary, RECOVER_FRACTION};
/// Bins averaged for the plotted totals (whole-message acks of round-robin-message and single-qp
/// are 1 MiB steps) and per-path lines; the CSV keeps the raw 10 ms bins.
const SMOOTH_TOTAL_BINS: usize = 10;
const SMOOTH_PATH_BINS: usize = 5;

fn color(p: PolicyKind) -> RGBColor {
    match p {
        PolicyKind::Dqplb => RGBColor(31, 119, 180),
        PolicyKind::DqplbLed => RGBColor(148, 103, 189),
        PolicyKind::StaticSplit => RGBColor(255, 127, 14),
        PolicyKind::RoundRobinMessage => RGBColor(44, 160, 44),
        PolicyKind::SingleQp => RGBColor(214, 39, 40),
    }
}

fn path_color(i: usize) -> RGBColor {
    const P: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    P[i % P.len()]
}

/// Writes paths-throughput.svg, paths-per-path.svg and (if any) paths-timeseries.svg.
pub(crate) fn all(
    dir: &Path,
    rows: &[TrialSummary],
    series: &[(u32, &str, Vec<SeriesPoint>)],
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    throughput(&dir.join("paths-throughput.svg"), rows)?;
    per_path(&dir.join("paths-per-path.svg"), rows)?;
    if let Some(sc) = series.first().map(|s| s.0) {
        let rows_sc: Vec<&TrialSummary> = rows.iter().filter(|r| r.scenario == sc).collect();
        timeseries(&dir.join("paths-timeseries.svg"), sc, &rows_sc, series)?;
    }
    Ok(())
}

fn policies_in(rows: &[TrialSummary]) -> Vec<PolicyKind> {
    PolicyKind::ALL
        .into_iter()
        .filter(|p| rows.iter().any(|r| r.policy == *p))
        .collect()
}

fn scenarios_in(rows: &[TrialSummary]) -> Vec<(u32, &'static str)> {
    let mut v: Vec<(u32, &'static str)> = Vec::new();
    for r in rows {
        if !v.iter().any(|(id, _)| *id == r.scenario) {
            v.push((r.scenario, r.scenario_name));
        }
    }
    v
}

/// Grouped bars: achieved / ideal per scenario and policy, with the 0.9 goal line.
fn throughput(path: &Path, rows: &[TrialSummary]) -> Result<(), String> {
    let e = err("throughput");
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let scen = scenarios_in(rows);
    let pols = policies_in(rows);
    let ymax = rows.iter().map(|r| r.ratio).fold(1.1f64, f64::max) * 1.3;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Achieved throughput / ideal (sum of path rates)",
            (FONT, 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.5f64..(scen.len() as f64 - 0.5), 0f64..ymax)
        .map_err(&e)?;
    let labels: Vec<String> = scen
        .iter()
        .map(|(id, name)| format!("{id}: {name}"))
        .collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(scen.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("achieved / ideal")
        .draw()
        .map_err(&e)?;
    let width = 0.8 / pols.len().max(1) as f64;
    for (k, p) in pols.iter().enumerate() {
        let c = color(*p);
        let bars: Vec<(f64, f64)> = scen
            .iter()
            .enumerate()
            .filter_map(|(i, (id, _))| {
                rows.iter()
                    .find(|r| r.scenario == *id && r.policy == *p)
                    .map(|r| (i as f64 - 0.4 + k as f64 * width, r.ratio))
            })
            .collect();
        chart
            .draw_series(
                bars.iter()
                    .map(|(x, y)| Rectangle::new([(*x, 0.0), (x + width * 0.9, *y)], c.filled())),
            )
            .map_err(&e)?
            .label(p.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        chart
            .draw_series(bars.iter().map(|(x, y)| {
                Text::new(
                    format!("{y:.2}"),
                    (*x, y + ymax * 0.01),
                    (FONT, 11).into_font().transform(FontTransform::Rotate270),
                )
            }))
            .map_err(&e)?;
    }
    let xr = (-0.5, scen.len() as f64 - 0.5);
    chart
        .draw_series(LineSeries::new([(xr.0, 0.9), (xr.1, 0.9)], BLACK.mix(0.5)))
        .map_err(&e)?
        .label("goal 0.9 (scenarios 2, 3)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.mix(0.5)));
    legend(&mut chart, SeriesLabelPosition::UpperRight).map_err(&e)?;
    root.present().map_err(&e)
}

/// One panel per scenario: carried Mbit/s per path per policy, black ticks at the path rate.
fn per_path(path: &Path, rows: &[TrialSummary]) -> Result<(), String> {
    let e = err("per-path");
    let scen = scenarios_in(rows);
    let root = SVGBackend::new(path, (960, 260 * scen.len().max(1) as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let panels = root.split_evenly((scen.len().max(1), 1));
    let pols = policies_in(rows);
    for ((id, name), area) in scen.iter().zip(panels.iter()) {
        let rs: Vec<&TrialSummary> = rows.iter().filter(|r| r.scenario == *id).collect();
        panel_per_path(area, *id, name, &rs, &pols).map_err(&e)?;
    }
    root.present().map_err(&e)
}

fn panel_per_path(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    id: u32,
    name: &str,
    rs: &[&TrialSummary],
    pols: &[PolicyKind],
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let n = rs.iter().map(|r| r.path_mbit.len()).max().unwrap_or(1);
    let ymax = rs
        .iter()
        .flat_map(|r| r.path_mbit.iter().chain(r.path_rate_mbit.iter()))
        .fold(1.0f64, |a, b| a.max(*b))
        * 1.6;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("scenario {id} ({name}): Mbit/s carried per path (black: path rate)"),
            (FONT, 16),
        )
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 {
                format!("path {i:.0}")
            } else {
                String::new()
            }
        })
        .y_desc("Mbit/s")
        .draw()?;
    let width = 0.8 / pols.len().max(1) as f64;
    for (k, p) in pols.iter().enumerate() {
        let Some(r) = rs.iter().find(|r| r.policy == *p) else {
            continue;
        };
        let c = color(*p);
        chart
            .draw_series(r.path_mbit.iter().enumerate().map(|(i, y)| {
                let x = i as f64 - 0.4 + k as f64 * width;
                Rectangle::new([(x, 0.0), (x + width * 0.9, *y)], c.filled())
            }))?
            .label(p.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    if let Some(r) = rs.first() {
        chart.draw_series(r.path_rate_mbit.iter().enumerate().map(|(i, y)| {
            PathElement::new(
                [(i as f64 - 0.45, *y), (i as f64 + 0.45, *y)],
                BLACK.stroke_width(2),
            )
        }))?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// Moving average over `bins` bins of `f(point)`.
fn smooth(pts: &[SeriesPoint], bins: usize, f: &dyn Fn(&SeriesPoint) -> f64) -> Vec<(f64, f64)> {
    (0..pts.len())
        .map(|i| {
            let lo = i.saturating_sub(bins.max(1) - 1);
            let (mut acc, mut dt) = (0.0, 0.0);
            for j in lo..=i {
                let prev = if j == 0 { 0.0 } else { pts[j - 1].t_ms };
                let w = pts[j].t_ms - prev;
                acc += f(&pts[j]) * w;
                dt += w;
            }
            (pts[i].t_ms, if dt > 0.0 { acc / dt } else { 0.0 })
        })
        .collect()
}

/// Top: total throughput of every policy with the ideal; bottom: dqplb per path.
fn timeseries(
    path: &Path,
    sc: u32,
    rows: &[&TrialSummary],
    series: &[(u32, &str, Vec<SeriesPoint>)],
) -> Result<(), String> {
    let e = err("timeseries");
    let root = SVGBackend::new(path, (960, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let (top, bottom) = root.split_vertically(400);
    let mine: Vec<&(u32, &str, Vec<SeriesPoint>)> = series.iter().filter(|s| s.0 == sc).collect();
    let tmax = mine
        .iter()
        .flat_map(|s| s.2.last())
        .map(|p| p.t_ms)
        .fold(1.0, f64::max);
    let ymax = mine
        .iter()
        .flat_map(|s| s.2.iter())
        .map(|p| p.ideal_mbit)
        .fold(1.0, f64::max)
        * 1.3;
    let change = rows
        .iter()
        .find_map(|r| r.change.as_ref().map(|c| c.change_ms));
    let mut chart = ChartBuilder::on(&top)
        .caption(
            format!(
                "scenario {sc}: throughput over time ({} ms moving average of 10 ms bins)",
                SMOOTH_TOTAL_BINS * 10
            ),
            (FONT, 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..tmax, 0f64..ymax)
        .map_err(&e)?;
    chart
        .configure_mesh()
        .x_desc("ms since start")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc("Mbit/s acknowledged")
        .draw()
        .map_err(&e)?;
    if let Some((_, _, pts)) = mine.first() {
        let ideal: Vec<(f64, f64)> = pts.iter().map(|p| (p.t_ms, p.ideal_mbit)).collect();
        let floor: Vec<(f64, f64)> = pts
            .iter()
            .map(|p| (p.t_ms, p.ideal_mbit * RECOVER_FRACTION))
            .collect();
        chart
            .draw_series(LineSeries::new(ideal, BLACK.stroke_width(2)))
            .map_err(&e)?
            .label("ideal")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.stroke_width(2)));
        chart
            .draw_series(LineSeries::new(floor, BLACK.mix(0.4)))
            .map_err(&e)?
            .label("0.85 x ideal")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.mix(0.4)));
    }
    for (_, name, pts) in &mine {
        let Ok(p) = name.parse::<PolicyKind>() else {
            continue;
        };
        let c = color(p);
        chart
            .draw_series(LineSeries::new(
                smooth(pts, SMOOTH_TOTAL_BINS, &|q| q.total_mbit),
                c.stroke_width(2),
            ))
            .map_err(&e)?
            .label(p.name())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], c.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight).map_err(&e)?;
    let Some((_, _, pts)) = mine.iter().find(|s| s.1 == PolicyKind::Dqplb.name()) else {
        return root.present().map_err(&e);
    };
    let n = pts.iter().map(|p| p.path_mbit.len()).max().unwrap_or(0);
    let ymax2 = pts
        .iter()
        .flat_map(|p| p.path_mbit.iter())
        .fold(1.0f64, |a, b| a.max(*b))
        .min(ymax)
        * 1.1;
    let mut chart = ChartBuilder::on(&bottom)
        .caption(
            format!(
                "dqplb: Mbit/s per path ({} ms moving average)",
                SMOOTH_PATH_BINS * 10
            ),
            (FONT, 16),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..tmax, 0f64..ymax2)
        .map_err(&e)?;
    chart
        .configure_mesh()
        .x_desc("ms since start")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc("Mbit/s")
        .draw()
        .map_err(&e)?;
    for i in 0..n {
        let c = path_color(i);
        chart
            .draw_series(LineSeries::new(
                smooth(pts, SMOOTH_PATH_BINS, &|q| {
                    q.path_mbit.get(i).copied().unwrap_or(0.0)
                }),
                c.stroke_width(2),
            ))
            .map_err(&e)?
            .label(format!("path {i}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], c.stroke_width(2)));
    }
    if let Some(t) = change {
        chart
            .draw_series(LineSeries::new([(t, 0.0), (t, ymax2)], BLACK.mix(0.5)))
            .map_err(&e)?
            .label("rate change")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.mix(0.5)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight).map_err(&e)?;
    root.present().map_err(&e)
}
