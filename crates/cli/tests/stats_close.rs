//! The statistics file and the node exporter textfile at close: a closing send comm rewrites
//! them at once with its final counters; the last one to close removes both.

#[path = "common/plugin_pair.rs"]
mod plugin_pair;

use nccl_net_dqplb::plugin::{self, telemetry};
use plugin_pair::{one_message, pair};

/// One test function: init and the environment are process-wide.
#[test]
fn close_rewrites_the_files_and_the_last_close_removes_them() {
    let dir = std::env::temp_dir().join(format!("dqplb-stats-close-{}", std::process::id()));
    let prom_dir = dir.join("textfile");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let template = dir.join("s.%p.toml");
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    std::env::set_var("NCCL_DQPLB_STATS_FILE", template.to_str().unwrap());
    std::env::set_var("NCCL_DQPLB_STATS_TEXTFILE_DIR", prom_dir.to_str().unwrap());
    std::env::set_var("NCCL_DQPLB_QPS", "2");
    plugin::init(None).expect("init");
    let (mut a_send, mut a_recv) = pair(0);
    let (mut b_send, mut b_recv) = pair(0);
    // The first test() publishes and writes; the later messages land within the same second, so
    // only the close can bring the file up to date.
    for len in [4096, 1 << 20, 3 << 19, 5000] {
        one_message(&mut a_send, &mut a_recv, len);
    }
    one_message(&mut b_send, &mut b_recv, 100);
    let path = telemetry::expand_path(template.to_str().unwrap());
    let prom = prom_dir.join(format!("dqplb_{}.prom", std::process::id()));
    let final_a = a_send.qp_stats().to_vec();
    drop(a_send);
    let f = telemetry::read_file(&path).expect("stats file after the first close");
    assert_eq!(f.comms.len(), 2, "{f:?}");
    let a = &f.comms[0];
    for (q, s) in final_a.iter().enumerate() {
        let got = &a.qps[q];
        assert_eq!(
            (got.segments, got.bytes, got.completed, got.outstanding),
            (s.segments, s.bytes, s.completed, s.outstanding),
            "QP {q}: {got:?}"
        );
        assert_eq!(got.outstanding, 0, "QP {q}: every segment completed");
    }
    let bytes: u64 = a.qps.iter().map(|q| q.bytes).sum();
    assert_eq!(bytes, 4096 + (1 << 20) + (3 << 19) + 5000);
    // The textfile: bounded labels, both connections (same labels) summed per QP.
    let text = std::fs::read_to_string(&prom).expect("textfile after the first close");
    let b_now = &f.comms[1];
    let host = &f.host;
    for q in 0..2 {
        let line = format!(
            "dqplb_qp_bytes_total{{host=\"{host}\",dev=\"0\",transport=\"tcp\",class=\"{}\",qp=\"{q}\"}} {}\n",
            a.class,
            a.qps[q].bytes + b_now.qps[q].bytes
        );
        assert!(text.contains(&line), "{line}: {text}");
    }
    assert!(!text.contains("pid=") && !text.contains("peer="), "{text}");
    let left: Vec<_> = std::fs::read_dir(&prom_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
    drop(b_send);
    assert!(!path.exists(), "the last close removes the stats file");
    assert!(!prom.exists(), "the last close removes the textfile");
    drop(a_recv);
    drop(b_recv);
    let _ = std::fs::remove_dir_all(&dir);
}
