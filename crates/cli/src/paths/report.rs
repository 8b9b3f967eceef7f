//! Text and CSV output of `paths-bench`: one line per trial on stdout, and paths-summary.csv,
//! paths-per-path.csv and paths-timeseries.csv in the data directory.

use std::fmt::Write as _;
use std::path::Path;

use super::metrics::{SeriesPoint, TrialSummary};

fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.0}"))
        .unwrap_or_else(|| "never".into())
}

/// One human line per trial.
pub(crate) fn line(s: &TrialSummary) -> String {
    let paths: Vec<String> = s.path_mbit.iter().map(|m| format!("{m:.1}")).collect();
    let mut l = format!(
        "scenario {} {:<11} {:<20} achieved {:7.1} Mbit/s  ideal {:7.1}  ratio {:.3}  per-path Mbit/s [{}]",
        s.scenario,
        s.scenario_name,
        s.policy.name(),
        s.achieved_mbit,
        s.ideal_mbit,
        s.ratio,
        paths.join(" ")
    );
    let [tx, rx] = s.gaps;
    if tx.count + rx.count > 0 {
        let _ = write!(
            l,
            "  | CPU stalls > 5 ms: sender {} (max {:.0} ms), receiver {} (max {:.0} ms)",
            tx.count,
            tx.max_ns as f64 / 1e6,
            rx.count,
            rx.max_ns as f64 / 1e6
        );
    }
    if let Some(c) = &s.change {
        let _ = write!(
            l,
            "  | change at {:.0} ms: degraded-phase ratio {:.3}, 50 ms windows >= 0.85: {:.0}%, sustained >= 0.85 of new ideal after {} ms, slow share settled after {} ms",
            c.change_ms,
            c.degraded_ratio,
            c.windows_ok * 100.0,
            opt(c.recover_ms),
            opt(c.settle_ms)
        );
    }
    l
}

pub(crate) const SUMMARY_HEADER: &str = "scenario,name,policy,qps,outstanding,segment_bytes,message_bytes,window_ms,ideal_mbit,achieved_mbit,acked_mbit,ratio,change_ms,degraded_ratio,windows_ok,recover_ms,settle_ms,tx_stalls,tx_stall_max_ms,rx_stalls,rx_stall_max_ms";

fn cell(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.1}")).unwrap_or_default()
}

pub(crate) fn summary_csv(rows: &[TrialSummary]) -> String {
    let mut out = String::from(SUMMARY_HEADER);
    out.push('\n');
    for s in rows {
        let c = s.change.as_ref();
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{:.1},{:.2},{:.2},{:.2},{:.4},{},{},{},{},{},{},{:.1},{},{:.1}",
            s.scenario,
            s.scenario_name,
            s.policy.name(),
            s.qps,
            s.outstanding,
            s.segment_bytes,
            s.message_bytes,
            s.window_ms,
            s.ideal_mbit,
            s.achieved_mbit,
            s.acked_mbit,
            s.ratio,
            cell(c.map(|c| c.change_ms)),
            c.map(|c| format!("{:.4}", c.degraded_ratio))
                .unwrap_or_default(),
            c.map(|c| format!("{:.3}", c.windows_ok))
                .unwrap_or_default(),
            cell(c.and_then(|c| c.recover_ms)),
            cell(c.and_then(|c| c.settle_ms)),
            s.gaps[0].count,
            s.gaps[0].max_ns as f64 / 1e6,
            s.gaps[1].count,
            s.gaps[1].max_ns as f64 / 1e6,
        );
    }
    out
}

pub(crate) fn per_path_csv(rows: &[TrialSummary]) -> String {
    let mut out =
        String::from("scenario,policy,path,rate_mbit,bytes,carried_mbit,share,peak_outstanding\n");
    for s in rows {
        let total: u64 = s.path_bytes.iter().sum();
        for (i, b) in s.path_bytes.iter().enumerate() {
            let share = if total > 0 {
                *b as f64 / total as f64
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                "{},{},{},{:.2},{},{:.2},{:.4},{}",
                s.scenario,
                s.policy.name(),
                i,
                s.path_rate_mbit.get(i).copied().unwrap_or(0.0),
                b,
                s.path_mbit.get(i).copied().unwrap_or(0.0),
                share,
                s.peak_outstanding
                    .get(i)
                    .map(|p| p.to_string())
                    .unwrap_or_default()
            );
        }
    }
    out
}

/// Long-format series: one row per (trial, bin).
pub(crate) fn series_csv(series: &[(u32, &str, Vec<SeriesPoint>)]) -> String {
    let width = series
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|x| x.path_mbit.len()))
        .max()
        .unwrap_or(0);
    let mut out = String::from("scenario,policy,t_ms,ideal_mbit,total_mbit");
    for i in 0..width {
        let _ = write!(out, ",path{i}_mbit");
    }
    out.push('\n');
    for (sc, policy, pts) in series {
        for p in pts {
            let _ = write!(
                out,
                "{sc},{policy},{:.2},{:.1},{:.2}",
                p.t_ms, p.ideal_mbit, p.total_mbit
            );
            for i in 0..width {
                let _ = write!(
                    out,
                    ",{}",
                    p.path_mbit
                        .get(i)
                        .map(|m| format!("{m:.2}"))
                        .unwrap_or_default()
                );
            }
            out.push('\n');
        }
    }
    out
}

/// Writes `text` to `dir/name`, creating `dir`.
pub(crate) fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let p = dir.join(name);
    std::fs::write(&p, text).map_err(|e| format!("write {}: {e}", p.display()))
}
