//! `dqplb paths-bench` port-hash scenarios (6, 7): paths-hashed-SCENARIO.svg, the acknowledged
//! throughput over time of every variant against the ideal, and the moment a path dies.

use std::path::Path;

use plotters::prelude::*;

use super::style::{legend, FONT};
use crate::paths::hashed::HashedSummary;
use crate::paths::metrics::SeriesPoint;

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
];
/// Bins averaged for the plotted lines (the CSV keeps the raw bins).
const SMOOTH_BINS: usize = 5;

fn smooth(pts: &[SeriesPoint]) -> Vec<(f64, f64)> {
    (0..pts.len())
        .map(|i| {
            let lo = i.saturating_sub(SMOOTH_BINS - 1);
            let n = (i + 1 - lo) as f64;
            let total: f64 = pts[lo..=i].iter().map(|p| p.total_mbit).sum();
            (pts[i].t_ms, total / n)
        })
        .collect()
}

/// paths-hashed-SCENARIO.svg for every scenario in `rows`.
pub(crate) fn plots(dir: &Path, rows: &[(HashedSummary, Vec<SeriesPoint>)]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let mut ids: Vec<u32> = rows.iter().map(|r| r.0.scenario).collect();
    ids.dedup();
    for id in ids {
        let mine: Vec<&(HashedSummary, Vec<SeriesPoint>)> =
            rows.iter().filter(|r| r.0.scenario == id).collect();
        plot_one(&dir.join(format!("paths-hashed-{id}.svg")), &mine)?;
    }
    Ok(())
}

fn plot_one(path: &Path, rows: &[&(HashedSummary, Vec<SeriesPoint>)]) -> Result<(), String> {
    let e = |err: DrawingAreaErrorKind<std::io::Error>| format!("plot {}: {err:?}", path.display());
    let root = SVGBackend::new(path, (960, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let Some(first) = rows.first() else {
        return root.present().map_err(e);
    };
    let tmax = rows
        .iter()
        .flat_map(|r| r.1.last())
        .map(|p| p.t_ms)
        .fold(1.0, f64::max);
    let ymax = rows
        .iter()
        .flat_map(|r| r.1.iter())
        .map(|p| p.ideal_mbit.max(p.total_mbit))
        .fold(1.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "scenario {} ({}): acknowledged Mbit/s, {} ms moving average",
                first.0.scenario,
                first.0.name,
                SMOOTH_BINS * 10
            ),
            (FONT, 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..tmax, 0f64..ymax)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("ms since start")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc("Mbit/s")
        .draw()
        .map_err(e)?;
    let ideal: Vec<(f64, f64)> = first.1.iter().map(|p| (p.t_ms, p.ideal_mbit)).collect();
    chart
        .draw_series(LineSeries::new(ideal, BLACK.stroke_width(2)))
        .map_err(e)?
        .label("ideal")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.stroke_width(2)));
    for (i, (s, pts)) in rows.iter().map(|r| (&r.0, &r.1)).enumerate() {
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(smooth(pts), c.stroke_width(2)))
            .map_err(e)?
            .label(s.label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], c.stroke_width(2)));
    }
    if let Some(d) = &first.0.death {
        chart
            .draw_series(LineSeries::new(
                [(d.at_ms, 0.0), (d.at_ms, ymax)],
                BLACK.mix(0.5),
            ))
            .map_err(e)?
            .label("path dies")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.mix(0.5)));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight).map_err(e)?;
    root.present().map_err(e)
}
