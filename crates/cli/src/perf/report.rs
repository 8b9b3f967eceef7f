//! Printing `dqplb perf` results: an nccl-tests style table, CSV or JSON, with the configuration
//! actually used in the header.

use super::args::{Format, Units};
use super::bw::Row;
use std::fmt::Write as _;

/// What the header states about the run.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct RunInfo {
    pub mode: String,
    pub policy: String,
    pub qps: u32,
    pub outstanding: u32,
    pub segment_bytes: u64,
    pub inflight: usize,
    pub check: bool,
    pub units: Units,
    pub plugin_line: Option<String>,
    /// With `--plugin`: the .so, its vtable's name and the device used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
}

/// One latency result: transport name, median and p99 round trip (us), sample count.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct LatRow {
    pub transport: String,
    pub median_us: f64,
    pub p99_us: f64,
    pub samples: usize,
}

fn header(info: &RunInfo, out: &mut String) {
    if let Some(peer) = &info.peer {
        // Another plugin: the dqplb configuration does not apply to it.
        let _ = writeln!(
            out,
            "# dqplb perf: {}, {} in flight, check {}",
            info.mode,
            info.inflight,
            if info.check { "every iteration" } else { "off" }
        );
        let _ = writeln!(out, "# plugin: {peer}");
        return;
    }
    let _ = writeln!(
        out,
        "# dqplb perf: {}, policy {}, {} data QPs, {} outstanding/QP, segment {} B, {} in flight, check {}",
        info.mode,
        info.policy,
        info.qps,
        info.outstanding,
        info.segment_bytes,
        info.inflight,
        if info.check { "every iteration" } else { "off" }
    );
    if let Some(l) = &info.plugin_line {
        let _ = writeln!(out, "# plugin: {l}");
    }
}

pub(crate) fn bandwidth(info: &RunInfo, rows: &[Row], format: Format) -> String {
    let mut out = String::new();
    let (k, label, suffix) = (
        info.units.factor(),
        format!("({})", info.units.label()),
        info.units.suffix(),
    );
    match format {
        Format::Table => {
            header(info, &mut out);
            let _ = writeln!(out, "#");
            let _ = writeln!(
                out,
                "# {:>12} {:>12} {:>6} {:>10} {:>8} {:>8} {:>7} {:>7}",
                "size", "count", "type", "iters", "time", "algbw", "busbw", "#wrong"
            );
            let _ = writeln!(
                out,
                "# {:>12} {:>12} {:>6} {:>10} {:>8} {:>8} {:>7} {:>7}",
                "(B)", "(elements)", "", "", "(us)", label, label, ""
            );
            for r in rows {
                let _ = writeln!(
                    out,
                    "  {:>12} {:>12} {:>6} {:>10} {:>8.2} {:>8.2} {:>7.2} {:>7}",
                    r.size,
                    r.size / 4,
                    "float",
                    r.iters,
                    r.time_us(),
                    r.algbw() * k,
                    r.algbw() * k,
                    r.wrong
                );
            }
            let avg = if rows.is_empty() {
                0.0
            } else {
                rows.iter().map(Row::algbw).sum::<f64>() * k / rows.len() as f64
            };
            let _ = writeln!(
                out,
                "# Out of bounds values : {} {}",
                rows.iter().map(|r| r.wrong).sum::<u64>(),
                if rows.iter().all(|r| r.wrong == 0) {
                    "OK"
                } else {
                    "FAILED"
                }
            );
            let _ = writeln!(out, "# Avg bus bandwidth    : {avg:.4}");
        }
        Format::Csv => {
            let _ = writeln!(
                out,
                "size,count,type,iters,time_us,algbw_{suffix},busbw_{suffix},wrong"
            );
            for r in rows {
                let _ = writeln!(
                    out,
                    "{},{},float,{},{:.3},{:.4},{:.4},{}",
                    r.size,
                    r.size / 4,
                    r.iters,
                    r.time_us(),
                    r.algbw() * k,
                    r.algbw() * k,
                    r.wrong
                );
            }
        }
        Format::Json => {
            let rows: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| {
                    let mut v = serde_json::json!({"size": r.size, "count": r.size / 4, "type": "float", "iters": r.iters,
                        "time_us": r.time_us(), "wrong": r.wrong});
                    v[format!("algbw_{suffix}")] = (r.algbw() * k).into();
                    v[format!("busbw_{suffix}")] = (r.algbw() * k).into();
                    v
                })
                .collect();
            let v = serde_json::json!({"config": info, "rows": rows});
            let _ = writeln!(out, "{v}");
        }
    }
    out
}

pub(crate) fn latency(info: &RunInfo, bytes: u64, rows: &[LatRow], format: Format) -> String {
    let mut out = String::new();
    match format {
        Format::Table => {
            header(info, &mut out);
            let _ = writeln!(out, "# {bytes}-byte ping-pong round trip");
            let _ = writeln!(
                out,
                "# {:>10} {:>10} {:>12} {:>12}",
                "transport", "samples", "median(us)", "p99(us)"
            );
            for r in rows {
                let _ = writeln!(
                    out,
                    "  {:>10} {:>10} {:>12.2} {:>12.2}",
                    r.transport, r.samples, r.median_us, r.p99_us
                );
            }
            if let [p, t] = rows {
                if t.median_us > 0.0 {
                    let _ = writeln!(
                        out,
                        "# {}/{} median ratio: {:.2}",
                        p.transport,
                        t.transport,
                        p.median_us / t.median_us
                    );
                }
            }
        }
        Format::Csv => {
            let _ = writeln!(out, "transport,samples,median_us,p99_us");
            for r in rows {
                let _ = writeln!(
                    out,
                    "{},{},{:.3},{:.3}",
                    r.transport, r.samples, r.median_us, r.p99_us
                );
            }
        }
        Format::Json => {
            let _ = writeln!(
                out,
                "{}",
                serde_json::json!({"config": info, "bytes": bytes, "latency": rows})
            );
        }
    }
    out
}
