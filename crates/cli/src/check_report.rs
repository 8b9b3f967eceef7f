//! Presentation of checked devices: the per-device table (parameter, expected, actual, status),
//! counters and model lines for `dqplb check`, and the same content as JSON.

use dqplb_dcqcn::compare::{DeviceReport, Row, Status};
use dqplb_dcqcn::impact::{impact, params_from_lookup, Impact};
use dqplb_dcqcn::model::{AlphaSchedule, GConvention};
use dqplb_dcqcn::reader::Reading;
use serde_json::{json, Value};

/// Line rate the model uses when the port does not report one, Mb/s.
pub(crate) const ASSUMED_LINE_RATE_MBPS: u64 = 100_000;

/// A compared device plus what its observed parameters mean for one QP.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CheckedDevice {
    pub report: DeviceReport,
    pub impact: Impact,
    /// True when the port reported no rate and [`ASSUMED_LINE_RATE_MBPS`] was used.
    pub line_rate_assumed: bool,
    /// cc_params the model took from firmware defaults because they were not readable.
    pub defaulted: Vec<&'static str>,
    /// The alpha update schedule the model ran (the firmware's, unless `--alpha-update`).
    pub alpha_schedule: AlphaSchedule,
}

/// Runs the model on the device's observed parameters at its port's line rate, updating alpha
/// on `schedule` (no cc_params file holds it).
pub(crate) fn analyse(
    report: DeviceReport,
    convention: GConvention,
    schedule: AlphaSchedule,
) -> CheckedDevice {
    let snap = &report.snapshot;
    let (mut params, defaulted) =
        params_from_lookup(|n| snap.cc(n).and_then(Reading::value), convention);
    params.alpha_schedule = schedule;
    let (line, assumed) = match snap.line_rate_mbps() {
        Some(r) => (r, false),
        None => (ASSUMED_LINE_RATE_MBPS, true),
    };
    let impact = impact(&params, line as f64);
    CheckedDevice {
        report,
        impact,
        line_rate_assumed: assumed,
        defaulted,
        alpha_schedule: schedule,
    }
}

/// "50.05 Gb/s" / "850 Mb/s".
pub(crate) fn fmt_rate(mbps: f64) -> String {
    if mbps >= 1000.0 {
        format!("{:.2} Gb/s", mbps / 1000.0)
    } else {
        format!("{mbps:.1} Mb/s")
    }
}

/// "1.234 ms" / "850.0 us" / "not within 10 s".
pub(crate) fn fmt_time(ns: Option<u64>) -> String {
    match ns {
        None => "not within 10 s".to_string(),
        Some(ns) if ns >= 1_000_000 => format!("{:.3} ms", ns as f64 / 1e6),
        Some(ns) => format!("{:.1} us", ns as f64 / 1e3),
    }
}

fn actual_text(r: &Reading) -> String {
    match r {
        Reading::Value(v) => v.to_string(),
        Reading::Unknown(_) => "?".to_string(),
        Reading::Garbage(_) => "garbage".to_string(),
    }
}

fn row_status(r: &Row) -> String {
    match (r.status, r.severity) {
        (Status::Mismatch | Status::Garbage, Some(sev)) if r.is_failure() => {
            format!("{} ({})", r.status.as_str(), sev.as_str())
        }
        (s, _) => s.as_str().to_string(),
    }
}

/// The human-readable report for every device, ending with one summary line.
pub(crate) fn format_table(devices: &[CheckedDevice]) -> String {
    let mut out = String::new();
    for d in devices {
        let r = &d.report;
        let s = &r.snapshot;
        out.push_str(&format!(
            "device {}  pci {}  netdev {}  profile {}  roce-priority {}\n",
            s.device,
            s.bdf.as_deref().unwrap_or("?"),
            s.netdev.as_deref().unwrap_or("?"),
            r.profile,
            r.roce_priority
        ));
        out.push_str(&format!(
            "  {:<32} {:<14} {:<10} {}\n",
            "parameter", "expected", "actual", "status"
        ));
        for row in &r.rows {
            let exp = row.expected.map_or("-".to_string(), |e| e.to_string());
            out.push_str(&format!(
                "  {:<32} {:<14} {:<10} {}\n",
                row.param,
                exp,
                actual_text(&row.actual),
                row_status(row)
            ));
        }
        for row in r.failures() {
            let detail = match &row.actual {
                Reading::Garbage(g) => format!("garbage in file: {g}"),
                other => format!("actual {}", actual_text(other)),
            };
            out.push_str(&format!(
                "  ! {}: expected {}, {} - {}\n",
                row.param,
                row.expected.map_or("-".to_string(), |e| e.to_string()),
                detail,
                row.reason.as_deref().unwrap_or("")
            ));
        }
        for row in r
            .rows
            .iter()
            .filter(|x| x.status == Status::Garbage && x.expected.is_none())
        {
            if let Reading::Garbage(g) = &row.actual {
                out.push_str(&format!(
                    "  ~ {}: garbage in file (not checked): {g}\n",
                    row.param
                ));
            }
        }
        for why in r.unknown_reasons() {
            out.push_str(&format!("  ? unknown: {why}\n"));
        }
        for p in &s.ports {
            let rate = p
                .rate_mbps
                .map_or("rate ?".to_string(), |m| fmt_rate(m as f64));
            let counters: Vec<String> = p
                .counters
                .iter()
                .map(|(n, v)| match v {
                    Reading::Value(x) => format!("{n} {x}"),
                    Reading::Unknown(_) => format!("{n} ?"),
                    Reading::Garbage(g) => format!("{n} garbage({g})"),
                })
                .collect();
            out.push_str(&format!(
                "  counters port {} ({rate}): {}\n",
                p.port,
                counters.join("  ")
            ));
        }
        let m = &d.impact;
        out.push_str(&format!(
            "  model at {}{}: after 1 CNP {}, after 5 CNPs {}; back to 95% in {} (1 CNP), {} (5 CNPs); alpha {}\n",
            fmt_rate(m.line_rate_mbps),
            if d.line_rate_assumed { " (line rate unknown, assumed)" } else { "" },
            fmt_rate(m.after_1_cnp_mbps),
            fmt_rate(m.after_5_cnps_mbps),
            fmt_time(m.recover_after_1_ns),
            fmt_time(m.recover_after_5_ns),
            d.alpha_schedule.name(),
        ));
        if !d.defaulted.is_empty() {
            out.push_str(&format!(
                "  model used firmware defaults for {} unreadable parameter(s)\n",
                d.defaulted.len()
            ));
        }
        out.push_str(&format!(
            "  => {}: {} ok, {} failed, {} unknown\n\n",
            r.verdict().as_str(),
            r.matched_count(),
            r.failure_count(),
            r.unknown_count()
        ));
    }
    let count = |v: dqplb_dcqcn::compare::Verdict| {
        devices.iter().filter(|d| d.report.verdict() == v).count()
    };
    out.push_str(&format!(
        "summary: {} device(s), {} matching, {} unverified (unreadable values), {} with mismatches\n",
        devices.len(),
        count(dqplb_dcqcn::compare::Verdict::Match),
        count(dqplb_dcqcn::compare::Verdict::Unverified),
        count(dqplb_dcqcn::compare::Verdict::Mismatch)
    ));
    out
}

fn reading_json(r: &Reading) -> (Value, Value) {
    match r {
        Reading::Value(v) => (json!(v), Value::Null),
        Reading::Unknown(w) => (Value::Null, json!(format!("unknown: {w}"))),
        Reading::Garbage(g) => (Value::Null, json!(format!("garbage: {g}"))),
    }
}

/// The report as one JSON document (stable keys, for job launchers).
pub(crate) fn format_json(devices: &[CheckedDevice]) -> String {
    let devs: Vec<Value> = devices
        .iter()
        .map(|d| {
            let r = &d.report;
            let s = &r.snapshot;
            let rows: Vec<Value> = r
                .rows
                .iter()
                .map(|row| {
                    let (value, note) = reading_json(&row.actual);
                    json!({
                        "param": row.param,
                        "expected": row.expected.map(|e| e.to_string()),
                        "value": value,
                        "note": note,
                        "status": row.status.as_str(),
                        "failed": row.is_failure(),
                        "severity": row.severity.map(|s| s.as_str()),
                        "reason": row.reason,
                    })
                })
                .collect();
            let ports: Vec<Value> = s
                .ports
                .iter()
                .map(|p| {
                    let mut counters = serde_json::Map::new();
                    for (n, v) in &p.counters {
                        counters.insert(n.to_string(), reading_json(v).0);
                    }
                    json!({"port": p.port, "rate_mbps": p.rate_mbps, "counters": counters})
                })
                .collect();
            let m = &d.impact;
            json!({
                "device": s.device,
                "bdf": s.bdf,
                "netdev": s.netdev,
                "driver": s.driver,
                "profile": r.profile,
                "roce_priority": r.roce_priority,
                "match": r.all_match(),
                "verdict": r.verdict().as_str(),
                "failed": r.failure_count(),
                "unknown": r.unknown_count(),
                "unknown_reasons": r.unknown_reasons(),
                "rows": rows,
                "ports": ports,
                "model": {
                    "line_rate_mbps": m.line_rate_mbps,
                    "line_rate_assumed": d.line_rate_assumed,
                    "after_1_cnp_mbps": m.after_1_cnp_mbps,
                    "after_5_cnps_mbps": m.after_5_cnps_mbps,
                    "recover_95_after_1_cnp_ns": m.recover_after_1_ns,
                    "recover_95_after_5_cnps_ns": m.recover_after_5_ns,
                    "defaulted_params": d.defaulted,
                    "alpha_update": d.alpha_schedule.name(),
                },
            })
        })
        .collect();
    let all = devices.iter().all(|d| d.report.all_match());
    let worst = devices
        .iter()
        .map(|d| d.report.verdict())
        .max()
        .unwrap_or(dqplb_dcqcn::compare::Verdict::Match);
    let doc = json!({ "match": all, "verdict": worst.as_str(), "devices": devs });
    let mut text =
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    text.push('\n');
    text
}
