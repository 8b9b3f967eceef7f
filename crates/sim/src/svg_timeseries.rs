//! SVG of one run's time series (`--svg DIR` with samples): per-QP rate and outstanding of the
//! first connection, the deepest link queue, and ECN marks, CNPs, PFC pauses and drops per period.

// One rail (the lowest simulated) and phase 0: an all-to-all's later phases restart the clock.
// Every line carries its largest value (`data-max`) and point count (`data-points`); a panel's y
// axis runs from 0 at its bottom to `data-ymax` at its top, so a point's height is testable.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::report::SimResult;
use super::run::Mode;
use super::svg::{esc, fin, open, text_filled};
use super::timeseries::{TsKind, TsRow};

/// Plot area of a panel, in pixels.
pub(crate) const PLOT_W: f64 = 640.0;
pub(crate) const PLOT_H: f64 = 120.0;
const LEFT: f64 = 70.0;
const PANEL_GAP: f64 = 48.0;

/// Line colours, one per series of a panel.
const COLOURS: [&str; 8] = [
    "#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#9c6ade", "#76b7b2", "#edc948", "#b07aa1",
];

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
pub fn timeseries(r: &SimResult) -> Option<String> {
    let rows = r.series();
    let rail = rows.iter().map(|x| x.rail).min()?;
    let m = by_time(rows, rail);
    let times: Vec<f64> = m.keys().map(|&t| t as f64 / 1e6).collect();
    let (t0, t1) = (times[0], *times.last()?);
    let span = if t1 > t0 { t1 - t0 } else { 1.0 };
    let ps = panels(&m, r.qps, r.mode);
    let top = 44.0;
    let w = LEFT + PLOT_W + 200.0;
    let h = top + ps.len() as f64 * (PLOT_H + PANEL_GAP) + 10.0;
    let mut s = open(w, h);
    let title = format!(
        "time series: {} q={} ({} mode, {}), rail {rail}, phase 0, {} samples",
        r.policy,
        r.qps,
        r.mode,
        r.traffic,
        times.len()
    );
    text_filled(&mut s, LEFT, 16.0, "start", None, &title);
    text_filled(
        &mut s,
        LEFT,
        30.0,
        "start",
        None,
        &format!("time {t0:.1} to {t1:.1} us"),
    );
    for (i, (name, lines)) in ps.iter().enumerate() {
        let y0 = top + i as f64 * (PLOT_H + PANEL_GAP) + 16.0;
        let base = y0 + PLOT_H;
        let vmax = lines
            .iter()
            .flat_map(|l| l.values.iter().copied())
            .fold(0.0, f64::max);
        let ymax = if vmax > 0.0 { fin(vmax) } else { 1.0 };
        let _ = writeln!(
            s,
            "<g class=\"panel\" data-title=\"{}\" data-ymax=\"{ymax}\" data-top=\"{y0}\" data-bottom=\"{base}\">",
            esc(name)
        );
        text_filled(&mut s, LEFT, y0 - 4.0, "start", None, name);
        let _ = writeln!(
            s,
            "<rect x=\"{LEFT}\" y=\"{y0}\" width=\"{PLOT_W}\" height=\"{PLOT_H}\" fill=\"none\" stroke=\"#bbb\"/>"
        );
        text_filled(
            &mut s,
            LEFT - 4.0,
            y0 + 8.0,
            "end",
            None,
            &format!("{ymax:.4}"),
        );
        text_filled(&mut s, LEFT - 4.0, base, "end", None, "0");
        text_filled(
            &mut s,
            LEFT,
            base + 13.0,
            "start",
            None,
            &format!("{t0:.1} us"),
        );
        text_filled(
            &mut s,
            LEFT + PLOT_W,
            base + 13.0,
            "end",
            None,
            &format!("{t1:.1} us"),
        );
        for (k, line) in lines.iter().enumerate() {
            let colour = COLOURS[k % COLOURS.len()];
            let lmax = line.values.iter().copied().fold(0.0, f64::max);
            let mut pts = String::with_capacity(line.values.len() * 16);
            for (t, v) in times.iter().zip(&line.values) {
                let x = LEFT + (t - t0) / span * PLOT_W;
                let y = base - fin(*v) / ymax * PLOT_H;
                let _ = write!(pts, "{x:.2},{y:.3} ");
            }
            let _ = writeln!(
                s,
                "<polyline class=\"series\" data-name=\"{}\" data-max=\"{}\" data-points=\"{}\" points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.2\"/>",
                esc(&line.name),
                fin(lmax),
                line.values.len(),
                pts.trim_end()
            );
            text_filled(
                &mut s,
                LEFT + PLOT_W + 8.0,
                y0 + 10.0 + 13.0 * k as f64,
                "start",
                Some(colour),
                &format!("{} (max {:.4})", line.name, lmax),
            );
        }
        let _ = writeln!(s, "</g>");
    }
    s.push_str("</svg>\n");
    Some(s)
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
