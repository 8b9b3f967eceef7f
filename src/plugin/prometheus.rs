//! The per-QP statistics in the Prometheus text exposition format, for `dqplb stats --prometheus`
//! and the node exporter textfile the plugin writes; series with equal labels are summed.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::telemetry::{CommEntry, QpEntry, StatsFile};

/// Which labels the series carry besides `host`, `dev`, `transport`, `class` and `qp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Labels {
    /// `pid`: the writing process.
    pub pid: bool,
    /// `comm`: the process's connection number.
    pub comm: bool,
    /// `peer`: the peer's address.
    pub peer: bool,
}

impl Labels {
    /// Every label: one series per connection and QP (`dqplb stats --prometheus`).
    pub const ALL: Labels = Labels {
        pid: true,
        comm: true,
        peer: true,
    };
    /// Bounded: no label grows with the number of connections over time (the textfile default).
    pub const BOUNDED: Labels = Labels {
        pid: false,
        comm: false,
        peer: false,
    };
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_set(want: Labels, f: &StatsFile, c: &CommEntry, q: &QpEntry) -> String {
    let mut l = format!("host=\"{}\"", escape(&f.host));
    if want.pid {
        let _ = write!(l, ",pid=\"{}\"", f.pid);
    }
    if want.comm {
        let _ = write!(l, ",comm=\"{}\"", c.id);
    }
    let _ = write!(
        l,
        ",dev=\"{}\",transport=\"{}\"",
        c.dev,
        escape(&c.transport)
    );
    if want.peer {
        let _ = write!(l, ",peer=\"{}\"", escape(&c.peer));
    }
    let _ = write!(l, ",class=\"{}\",qp=\"{}\"", escape(&c.class), q.qp);
    l
}

/// `a` += `b`, counter by counter (outstanding too: the sum of the summed series' in-flight
/// segments); the EWMA is not exported.
fn add(a: &mut QpEntry, b: &QpEntry) {
    a.segments += b.segments;
    a.bytes += b.bytes;
    a.completed += b.completed;
    a.outstanding += b.outstanding;
    a.resent += b.resent;
    a.rehashes += b.rehashes;
    a.failures += b.failures;
    if a.latency_log2_ns.len() < b.latency_log2_ns.len() {
        a.latency_log2_ns.resize(b.latency_log2_ns.len(), 0);
    }
    for (x, y) in a.latency_log2_ns.iter_mut().zip(&b.latency_log2_ns) {
        *x += y;
    }
}

/// Every QP of `files` as (labels, counters), in first-seen order, equal label sets summed.
fn series(files: &[StatsFile], want: Labels) -> Vec<(String, QpEntry)> {
    let mut out: Vec<(String, QpEntry)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for f in files {
        for c in &f.comms {
            for q in &c.qps {
                let l = label_set(want, f, c, q);
                match index.get(&l) {
                    Some(&i) => add(&mut out[i].1, q),
                    None => {
                        index.insert(l.clone(), out.len());
                        out.push((l, q.clone()));
                    }
                }
            }
        }
    }
    out
}

/// The text exposition of `files` with the labels `want` asks for.
pub fn render(files: &[StatsFile], want: Labels) -> String {
    let all = series(files, want);
    let mut o = String::new();
    type Counter = (&'static str, &'static str, fn(&QpEntry) -> u64);
    let counters: [Counter; 6] = [
        (
            "dqplb_qp_segments_total",
            "Segments posted on the QP",
            |q| q.segments,
        ),
        (
            "dqplb_qp_bytes_total",
            "Payload bytes posted on the QP",
            |q| q.bytes,
        ),
        (
            "dqplb_qp_completed_total",
            "Segments completed on the QP",
            |q| q.completed,
        ),
        (
            "dqplb_qp_resent_total",
            "Segments the QP carried again after another path failed",
            |q| q.resent,
        ),
        (
            "dqplb_qp_rehashes_total",
            "Times the QP was replaced as a straggler",
            |q| q.rehashes,
        ),
        (
            "dqplb_qp_failures_total",
            "Times the QP's path failed",
            |q| q.failures,
        ),
    ];
    for (name, help, get) in counters {
        let _ = writeln!(o, "# HELP {name} {help}.\n# TYPE {name} counter");
        for (l, q) in &all {
            let _ = writeln!(o, "{name}{{{l}}} {}", get(q));
        }
    }
    let _ = writeln!(
        o,
        "# HELP dqplb_qp_outstanding Segments in flight on the QP.\n# TYPE dqplb_qp_outstanding gauge"
    );
    for (l, q) in &all {
        let _ = writeln!(o, "dqplb_qp_outstanding{{{l}}} {}", q.outstanding);
    }
    let name = "dqplb_qp_completion_latency_seconds";
    let _ = writeln!(
        o,
        "# HELP {name} Post-to-completion latency of the QP's segments.\n# TYPE {name} histogram"
    );
    for (l, q) in &all {
        let mut cum = 0u64;
        let last = q.latency_log2_ns.len().saturating_sub(1);
        for (k, &n) in q.latency_log2_ns.iter().enumerate() {
            cum += n;
            if k == last {
                break;
            }
            // Bucket k holds latencies below 2^k ns.
            let le = (1u64 << k) as f64 / 1e9;
            let _ = writeln!(o, "{name}_bucket{{{l},le=\"{le:e}\"}} {cum}");
        }
        let _ = writeln!(o, "{name}_bucket{{{l},le=\"+Inf\"}} {cum}");
        let _ = writeln!(o, "{name}_count{{{l}}} {cum}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qp(qp: u32, segments: u64, hist: Vec<u64>) -> QpEntry {
        QpEntry {
            qp,
            segments,
            bytes: segments * 10,
            completed: hist.iter().sum(),
            outstanding: 1,
            peak_outstanding: 1,
            latency_ewma_ns: 5.0,
            latency_log2_ns: hist,
            resent: 0,
            rehashes: 0,
            failures: 0,
        }
    }

    fn file() -> StatsFile {
        let comm = |id, peer: &str, segs| CommEntry {
            id,
            dev: 0,
            transport: "tcp".into(),
            peer: peer.into(),
            class: "same-rail".into(),
            qps: vec![qp(0, segs, vec![0, 1, 2]), qp(1, segs + 1, vec![1, 0, 0])],
        };
        StatsFile {
            pid: 42,
            host: "n\"1".into(),
            written_unix_ms: 0,
            comms: vec![comm(1, "10.0.0.2:5", 3), comm(2, "10.0.0.3:6", 4)],
        }
    }

    #[test]
    fn bounded_labels_sum_the_connections() {
        let t = render(&[file()], Labels::BOUNDED);
        let l0 = "host=\"n\\\"1\",dev=\"0\",transport=\"tcp\",class=\"same-rail\",qp=\"0\"";
        assert!(
            t.contains(&format!("dqplb_qp_segments_total{{{l0}}} 7\n")),
            "{t}"
        );
        assert!(
            t.contains(&format!("dqplb_qp_bytes_total{{{l0}}} 70\n")),
            "{t}"
        );
        assert!(
            t.contains(&format!("dqplb_qp_outstanding{{{l0}}} 2\n")),
            "{t}"
        );
        assert!(
            t.contains(&format!(
                "dqplb_qp_completion_latency_seconds_bucket{{{l0},le=\"2e-9\"}} 2\n"
            )),
            "{t}"
        );
        assert!(
            t.contains(&format!(
                "dqplb_qp_completion_latency_seconds_count{{{l0}}} 6\n"
            )),
            "{t}"
        );
        // Two QPs: two series per counter, no pid / comm / peer.
        assert_eq!(t.matches("dqplb_qp_segments_total{").count(), 2, "{t}");
        assert!(!t.contains("pid=") && !t.contains("peer=") && !t.contains("comm="));
    }

    #[test]
    fn every_label_keeps_one_series_per_connection() {
        let t = render(&[file()], Labels::ALL);
        assert_eq!(t.matches("dqplb_qp_segments_total{").count(), 4, "{t}");
        assert!(t.contains(
            "dqplb_qp_segments_total{host=\"n\\\"1\",pid=\"42\",comm=\"2\",dev=\"0\",transport=\"tcp\",peer=\"10.0.0.3:6\",class=\"same-rail\",qp=\"1\"} 5\n"
        ), "{t}");
        let pid_peer = render(
            &[file()],
            Labels {
                pid: true,
                comm: false,
                peer: true,
            },
        );
        assert_eq!(pid_peer.matches("dqplb_qp_segments_total{").count(), 4);
    }
}
