//! Per-QP telemetry end to end over TCP: the plugin writes `[stats] file` from NCCL's own calls
//! (no thread), and `dqplb stats` prints exactly the counters the send comm holds, as a table,
//! JSON and Prometheus text.

#[path = "common/plugin_pair.rs"]
mod plugin_pair;

use nccl_net_dqplb::plugin::{self, telemetry};
use plugin_pair::{one_message, pair};
use std::process::Command;

/// One test function: init and the environment are process-wide.
#[test]
fn stats_file_shows_the_send_comms_counters() {
    let dir = std::env::temp_dir().join(format!("dqplb-stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let template = dir.join("s.%p.toml");
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    std::env::set_var("NCCL_DQPLB_STATS_FILE", template.to_str().unwrap());
    std::env::set_var("NCCL_DQPLB_CLASS_SAME_RAIL_QPS", "3");
    std::env::set_var("NCCL_DQPLB_CLASS_CROSS_RAIL_QPS", "3");
    plugin::init(None).expect("init");
    let (mut send, mut recv) = pair(0);
    for len in [1 << 20, 3 << 19, 4096] {
        one_message(&mut send, &mut recv, len);
    }
    let before = send.qp_stats().to_vec();
    // The file is rewritten at most once a second: after a second, the first test() of one more
    // (zero-byte) message publishes the counters, that message's segment possibly in flight.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    one_message(&mut send, &mut recv, 0);
    let after = send.qp_stats().to_vec();
    let path = telemetry::expand_path(template.to_str().unwrap());
    let f = telemetry::read_file(&path).expect("stats file");
    assert_eq!(f.pid, std::process::id());
    assert_eq!(f.comms.len(), 1, "{f:?}");
    let c = &f.comms[0];
    assert_eq!((c.transport.as_str(), c.qps.len()), ("tcp", 3), "{c:?}");
    for (q, got) in c.qps.iter().enumerate() {
        let (b, a) = (&before[q], &after[q]);
        assert_eq!(got.qp, q as u32);
        // Between the state before the zero-byte message and the final one, and consistent.
        assert!(
            (b.segments..=a.segments).contains(&got.segments),
            "QP {q}: {got:?}"
        );
        assert!(
            (b.completed..=a.completed).contains(&got.completed),
            "QP {q}: {got:?}"
        );
        assert_eq!(
            got.bytes, b.bytes,
            "QP {q}: the zero-byte message adds no bytes"
        );
        assert_eq!(
            got.segments - got.completed,
            u64::from(got.outstanding),
            "QP {q}"
        );
        let hist: u64 = got.latency_log2_ns.iter().sum();
        assert_eq!(
            hist, got.completed,
            "QP {q}: one histogram sample per completion"
        );
    }
    let total: u64 = c.qps.iter().map(|q| q.bytes).sum();
    assert_eq!(
        total,
        (1 << 20) + (3 << 19) + 4096,
        "bytes of the 3 messages"
    );
    let want = c.qps.clone();
    let bin = env!("CARGO_BIN_EXE_dqplb");
    let run = |args: &[&str]| {
        let out = Command::new(bin)
            .arg("stats")
            .args(args)
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "dqplb stats {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let table = run(&[]);
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 3, "{table}");
    for (q, row) in rows.iter().enumerate() {
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[4], q.to_string(), "{row}");
        assert_eq!(cols[5], want[q].segments.to_string(), "{row}");
        assert_eq!(cols[6], want[q].bytes.to_string(), "{row}");
        assert_eq!(cols[7], want[q].completed.to_string(), "{row}");
    }
    let json = run(&["--json"]);
    for w in &want {
        assert!(
            json.contains(&format!(
                "\"segments\":{},\"bytes\":{}",
                w.segments, w.bytes
            )),
            "{json}"
        );
    }
    let prom = run(&["--prometheus"]);
    for (q, w) in want.iter().enumerate() {
        let line = prom
            .lines()
            .find(|l| {
                l.starts_with("dqplb_qp_segments_total{") && l.contains(&format!("qp=\"{q}\""))
            })
            .unwrap_or_else(|| panic!("no segments line for QP {q}: {prom}"));
        assert!(line.ends_with(&format!(" {}", w.segments)), "{line}");
        let count = prom
            .lines()
            .find(|l| {
                l.starts_with("dqplb_qp_completion_latency_seconds_count{")
                    && l.contains(&format!("qp=\"{q}\""))
            })
            .unwrap();
        assert!(count.ends_with(&format!(" {}", w.completed)), "{count}");
    }
    // A file that is not a stats file is exit 2 with its name.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "pid = \"x\"\n").unwrap();
    let out = Command::new(bin)
        .args(["stats"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.toml"));
    drop(send);
    drop(recv);
    let _ = std::fs::remove_dir_all(&dir);
}
