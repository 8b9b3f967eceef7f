//! Output of the port-hash scenarios: one line per trial and paths-hashed-*.csv (the SVG of the
//! throughput over time per scenario is charts/paths_hashed.rs).

use super::hashed::{HashedSummary, CONVERGE_FRACTION, RECOVER_FRACTION};
use super::metrics::SeriesPoint;

fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.0} ms"))
        .unwrap_or_else(|| "never".into())
}

fn cell(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.1}")).unwrap_or_default()
}

fn buckets(b: &[usize]) -> String {
    b.iter().map(usize::to_string).collect::<Vec<_>>().join(" ")
}

/// One human-readable line per trial.
pub(crate) fn line(s: &HashedSummary) -> String {
    let mut l = format!(
        "{:<20} {:>7.1} of {:>6.1} Mbit/s = {:.3} of ideal (acknowledged {:.3}, last third {:.3}); >= {CONVERGE_FRACTION} of ideal from {}; re-hashes {}, failures {}, resent {}, streams replaced {}; buckets {} -> {}; messages sent {} received {} corrupt {}",
        s.label,
        s.achieved_mbit,
        s.ideal_mbit,
        s.ratio,
        s.acked_ratio,
        s.late_ratio,
        opt(s.converge_ms),
        s.rehashes,
        s.failures,
        s.resent,
        s.repaths,
        buckets(&s.initial_buckets),
        buckets(&s.final_buckets),
        s.sent_messages,
        s.received_messages,
        s.corrupt_messages
    );
    if let Some(d) = &s.death {
        l.push_str(&format!(
            "; {} stream(s) replaced before the death; path death at {:.0} ms: goodput >= {RECOVER_FRACTION} of the new ideal {:.0} Mbit/s after {} (acknowledged bytes after {}), {:.3} of it from the death on",
            d.replaced_before,
            d.at_ms,
            d.new_ideal_mbit,
            opt(d.recover_ms),
            opt(d.recover_acked_ms),
            d.after_ratio
        ));
    }
    l
}

/// paths-hashed-summary.csv.
pub(crate) fn summary_csv(rows: &[HashedSummary]) -> String {
    let mut out = String::from(
        "scenario,name,variant,streams,buckets,window_ms,ideal_mbit,achieved_mbit,ratio,acked_ratio,late_ratio,converge_ms,death_ms,new_ideal_mbit,recover_ms,recover_acked_ms,after_death_ratio,replaced_before_death,rehashes,failures,resent,streams_replaced,initial_buckets,final_buckets,sent_messages,received_messages,corrupt_messages\n",
    );
    for s in rows {
        let d = s.death.as_ref();
        out.push_str(&format!(
            "{},{},{},{},{},{:.1},{:.2},{:.2},{:.4},{:.4},{:.4},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            s.scenario,
            s.name,
            s.label,
            s.streams,
            s.buckets,
            s.window_ms,
            s.ideal_mbit,
            s.achieved_mbit,
            s.ratio,
            s.acked_ratio,
            s.late_ratio,
            cell(s.converge_ms),
            cell(d.map(|d| d.at_ms)),
            cell(d.map(|d| d.new_ideal_mbit)),
            cell(d.and_then(|d| d.recover_ms)),
            cell(d.and_then(|d| d.recover_acked_ms)),
            d.map(|d| format!("{:.4}", d.after_ratio)).unwrap_or_default(),
            d.map(|d| d.replaced_before.to_string()).unwrap_or_default(),
            s.rehashes,
            s.failures,
            s.resent,
            s.repaths,
            buckets(&s.initial_buckets),
            buckets(&s.final_buckets),
            s.sent_messages,
            s.received_messages,
            s.corrupt_messages
        ));
    }
    out
}

/// paths-hashed-timeseries.csv: one row per 10 ms bin, the data streams' Mbit/s in columns.
pub(crate) fn series_csv(rows: &[(HashedSummary, Vec<SeriesPoint>)]) -> String {
    let qps = rows
        .iter()
        .flat_map(|r| r.1.iter().map(|p| p.path_mbit.len()))
        .max()
        .unwrap_or(0);
    let mut out = String::from("scenario,variant,t_ms,ideal_mbit,total_mbit");
    for q in 0..qps {
        out.push_str(&format!(",qp{q}_mbit"));
    }
    out.push('\n');
    for (s, pts) in rows {
        for p in pts {
            out.push_str(&format!(
                "{},{},{:.1},{:.1},{:.1}",
                s.scenario, s.label, p.t_ms, p.ideal_mbit, p.total_mbit
            ));
            for q in 0..qps {
                out.push_str(&format!(
                    ",{:.1}",
                    p.path_mbit.get(q).copied().unwrap_or(0.0)
                ));
            }
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::hashed::DeathFigures;

    fn row() -> HashedSummary {
        HashedSummary {
            scenario: 7,
            name: "hash-path-death",
            label: "dqplb+isolation",
            streams: 8,
            buckets: 8,
            window_ms: 2500.0,
            ideal_mbit: 733.3,
            achieved_mbit: 700.0,
            ratio: 0.9546,
            acked_ratio: 0.95,
            late_ratio: 0.97,
            converge_ms: Some(120.0),
            death: Some(DeathFigures {
                at_ms: 1000.4,
                new_ideal_mbit: 700.0,
                recover_ms: Some(150.0),
                recover_acked_ms: Some(20.0),
                after_ratio: 0.95,
                replaced_before: 0,
            }),
            rehashes: 0,
            failures: 1,
            resent: 3,
            repaths: 1,
            initial_buckets: vec![1, 2, 3, 4, 5, 6, 7, 0],
            final_buckets: vec![1, 2, 6, 4, 5, 6, 7, 0],
            sent_messages: 300,
            received_messages: 301,
            corrupt_messages: 0,
        }
    }

    #[test]
    fn csv_and_line_carry_every_figure() {
        let csv = summary_csv(&[row()]);
        let mut lines = csv.lines();
        let head: Vec<&str> = lines.next().unwrap().split(',').collect();
        let vals: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(head.len(), vals.len());
        let col = |n: &str| vals[head.iter().position(|h| *h == n).unwrap()];
        assert_eq!(col("variant"), "dqplb+isolation");
        assert_eq!(col("recover_ms"), "150.0");
        assert_eq!(col("final_buckets"), "1 2 6 4 5 6 7 0");
        assert_eq!(col("corrupt_messages"), "0");
        let l = line(&row());
        assert!(
            l.contains("after 150 ms (acknowledged bytes after 20 ms)"),
            "{l}"
        );
        assert!(
            l.contains("buckets 1 2 3 4 5 6 7 0 -> 1 2 6 4 5 6 7 0"),
            "{l}"
        );
    }
}
