//! `timeseries-P-qQ.svg`: one run's samples, one rail (the lowest simulated) and phase 0: per-QP
//! rate and outstanding of connection 0, the deepest link queue, and per-period counters.

// Drawing order, which tests/sim_svg.rs reads: per panel its caption (the panel's title), its
// axes (black polylines), its frame (the only unfilled grey rectangle: top = the panel's largest
// value, bottom = 0), its lines (coloured polylines, one point per sample time) and then their
// legend, "NAME (max X)" in the line's colour. An all-to-all's later phases restart the clock,
// hence phase 0 only.

use std::collections::BTreeMap;

use dqplb_sim::timeseries::{TsKind, TsRow};
use dqplb_sim::{Mode, SimResult};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::style::{fin, header, header_height, render, text_style, Area, Drawn};
use super::style::{FONT, LABEL_SIZE, LINE_COLOURS, TEXT_SIZE};

/// Height of one panel, caption and axis labels included.
const PANEL_H: i32 = 190;
/// Width of the plot column and of the legend beside it.
const PLOT_W: i32 = 730;
const LEGEND_W: i32 = 250;
/// The frame's colour.
pub(crate) const FRAME: RGBColor = RGBColor(0xbb, 0xbb, 0xbb);

/// One line: a name and a value per sample time.
struct Series {
    name: String,
    values: Vec<f64>,
}

/// The samples of rail `rail`, phase 0, by time: per time, its rows.
fn by_time(rows: &[TsRow], rail: u32) -> BTreeMap<u64, Vec<&TsRow>> {
    let mut m: BTreeMap<u64, Vec<&TsRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.rail == rail && r.phase == 0) {
        m.entry(r.t_ps).or_default().push(r);
    }
    m
}

/// Per-period differences of a cumulative counter (the first sample's own value first).
fn per_period(cum: &[f64]) -> Vec<f64> {
    let mut prev = 0.0;
    cum.iter()
        .map(|&c| {
            let d = (c - prev).max(0.0);
            prev = c;
            d
        })
        .collect()
}

/// The panels of a run in `mode`: (title, lines); F mode has no link rows, so no queue panel.
fn panels(rows: &BTreeMap<u64, Vec<&TsRow>>, qps: usize, mode: Mode) -> Vec<(String, Vec<Series>)> {
    let per_time = |f: &dyn Fn(&[&TsRow]) -> f64| -> Vec<f64> {
        rows.values().map(|v| f(v.as_slice())).collect()
    };
    let qp_of_conn0 = |k: usize, f: fn(&TsRow) -> f64| {
        per_time(&|v: &[&TsRow]| {
            v.iter()
                .find(|r| r.kind == TsKind::Qp && r.id == 0 && r.qp as usize == k)
                .map_or(0.0, |r| f(r))
        })
    };
    let mut out = Vec::new();
    let mut rate: Vec<Series> = (0..qps)
        .map(|k| Series {
            name: format!("QP {k}"),
            values: qp_of_conn0(k, |r| r.rate_gbps),
        })
        .collect();
    rate.push(Series {
        name: "mean of all QPs".into(),
        values: per_time(&|v: &[&TsRow]| {
            let (sum, n) = v
                .iter()
                .filter(|r| r.kind == TsKind::Qp)
                .fold((0.0, 0usize), |(s, n), r| (s + r.rate_gbps, n + 1));
            sum / n.max(1) as f64
        }),
    });
    // What a QP row's rate is: DCQCN's (P), the fluid share (F), delivered per period (B).
    let what = match mode {
        Mode::Packet => "DCQCN rate",
        Mode::Fluid => "fluid rate",
        Mode::Burst => "delivered per period",
    };
    out.push((format!("{what} (Gb/s): connection 0's data QPs"), rate));
    let outstanding = (0..qps)
        .map(|k| Series {
            name: format!("QP {k}"),
            values: qp_of_conn0(k, |r| f64::from(r.outstanding)),
        })
        .collect();
    out.push((
        "segments outstanding: connection 0's data QPs".to_string(),
        outstanding,
    ));
    let links = rows
        .values()
        .any(|v| v.iter().any(|r| matches!(r.kind, TsKind::Link(_))));
    if links {
        out.push((
            "deepest link queue (KiB)".to_string(),
            vec![Series {
                name: "max over links".into(),
                values: per_time(&|v: &[&TsRow]| {
                    v.iter()
                        .filter(|r| matches!(r.kind, TsKind::Link(_)))
                        .map(|r| r.queue_bytes as f64 / 1024.0)
                        .fold(0.0, f64::max)
                }),
            }],
        ));
    }
    let sum = |link: bool, f: fn(&TsRow) -> u64| {
        per_period(&per_time(&|v: &[&TsRow]| {
            v.iter()
                .filter(|r| matches!(r.kind, TsKind::Link(_)) == link)
                .map(|r| f(r) as f64)
                .sum()
        }))
    };
    out.push((
        "per sample period: ECN marks, CNPs, PFC pauses, drops".to_string(),
        vec![
            Series {
                name: "ECN marks (links)".into(),
                values: sum(true, |r| r.ecn_marks),
            },
            Series {
                name: "CNPs (QPs)".into(),
                values: sum(false, |r| r.cnps),
            },
            Series {
                name: "PFC pauses (links)".into(),
                values: sum(true, |r| r.pfc_pauses),
            },
            Series {
                name: "drops (QPs)".into(),
                values: sum(false, |r| r.drops),
            },
        ],
    ));
    out
}

/// The time-series chart of `r`, or None when it has no samples.
pub(crate) fn timeseries(r: &SimResult) -> Option<Result<String, String>> {
    let rows = r.series();
    let rail = rows.iter().map(|x| x.rail).min()?;
    let m = by_time(rows, rail);
    let times: Vec<f64> = m.keys().map(|&t| t as f64 / 1e6).collect();
    let (t0, t1) = (times[0], *times.last()?);
    let t_end = if t1 > t0 { t1 } else { t0 + 1.0 };
    let ps = panels(&m, r.qps, r.mode);
    let lines = [
        format!(
            "time series: {} q={} ({} mode, {}), rail {rail}, phase 0, {} samples",
            r.policy,
            r.qps,
            r.mode,
            r.traffic,
            times.len()
        ),
        format!("time {t0:.1} to {t1:.1} us"),
    ];
    let h = header_height(lines.len()) + ps.len() as i32 * PANEL_H;
    Some(render(
        "timeseries",
        ((PLOT_W + LEGEND_W) as u32, h as u32),
        |root| {
            let body = header(root, &lines)?;
            let areas = body.split_evenly((ps.len(), 1));
            for ((name, series), area) in ps.iter().zip(&areas) {
                panel(area, name, series, &times, (t0, t_end))?;
            }
            Ok(())
        },
    ))
}

fn panel(
    area: &Area<'_>,
    name: &str,
    series: &[Series],
    times: &[f64],
    (t0, t1): (f64, f64),
) -> Drawn {
    let (plot, legend) = area.split_horizontally(PLOT_W);
    let vmax = series
        .iter()
        .flat_map(|l| l.values.iter().copied())
        .fold(0.0, f64::max);
    let ymax = if vmax > 0.0 { fin(vmax) } else { 1.0 };
    let mut chart = ChartBuilder::on(&plot)
        .caption(name, (FONT, TEXT_SIZE))
        .margin(6)
        .margin_left(12)
        .x_label_area_size(34)
        .y_label_area_size(64)
        .build_cartesian_2d(t0..t1, 0.0..ymax)?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(0xee, 0xee, 0xee))
        .x_labels(8)
        .y_labels(5)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .x_desc("us")
        .draw()?;
    chart.draw_series(std::iter::once(Rectangle::new(
        [(t0, 0.0), (t1, ymax)],
        FRAME.stroke_width(1),
    )))?;
    for (k, line) in series.iter().enumerate() {
        let colour = LINE_COLOURS[k % LINE_COLOURS.len()];
        let pts = times.iter().zip(&line.values).map(|(&t, &v)| (t, fin(v)));
        chart.draw_series(LineSeries::new(pts, colour.stroke_width(1)))?;
    }
    for (k, line) in series.iter().enumerate() {
        let colour = LINE_COLOURS[k % LINE_COLOURS.len()];
        let lmax = line.values.iter().copied().fold(0.0, f64::max);
        legend.draw(&Text::new(
            format!("{} (max {:.4})", line.name, lmax),
            (6, 26 + 15 * k as i32),
            text_style(LABEL_SIZE, colour, HPos::Left, VPos::Top),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_become_per_period_differences() {
        assert_eq!(per_period(&[2.0, 5.0, 5.0, 9.0]), vec![2.0, 3.0, 0.0, 4.0]);
        assert_eq!(per_period(&[]), Vec::<f64>::new());
    }
}
