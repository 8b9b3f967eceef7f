//! `dqplb perf` end to end: tiny sweeps for every policy and for --raw-tcp must print one row per
//! size with #wrong 0; latency prints both transports; bad arguments exit 2 with a message.

use std::process::{Command, Output};

fn dqplb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .arg("perf")
        .args(args)
        .env("NCCL_SOCKET_IFNAME", "lo")
        .output()
        .expect("run dqplb")
}

/// Data rows of the table: (size, count, iters, #wrong).
fn rows(stdout: &str) -> Vec<(u64, u64, u64, u64)> {
    stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 8, "row {l:?}");
            let n = |i: usize| {
                f[i].parse::<u64>()
                    .unwrap_or_else(|_| panic!("field {i} of {l:?}"))
            };
            (n(0), n(1), n(3), n(7))
        })
        .collect()
}

fn sweep(extra: &[&str]) -> String {
    let mut args = vec![
        "--min-bytes",
        "3",
        "--max-bytes",
        "16K",
        "--step-factor",
        "4",
        "--iters",
        "5",
        "--warmup",
        "1",
    ];
    args.extend_from_slice(extra);
    let out = dqplb(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{extra:?}: exit {}: {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let r = rows(&stdout);
    let sizes: Vec<u64> = r.iter().map(|x| x.0).collect();
    assert_eq!(
        sizes,
        vec![3, 12, 48, 192, 768, 3072, 12288, 16384],
        "{extra:?}: {stdout}"
    );
    for (size, count, iters, wrong) in r {
        assert_eq!(count, size / 4, "{stdout}");
        assert_eq!(iters, 5, "{stdout}");
        assert_eq!(wrong, 0, "{extra:?} size {size}: {stdout}");
    }
    stdout
}

#[test]
fn every_policy_moves_checked_data() {
    for policy in [
        "dqplb",
        "dqplb-led",
        "static-split",
        "round-robin-message",
        "single-qp",
    ] {
        let out = sweep(&["--policy", policy, "--qps", "2", "--segment", "4K"]);
        let head = out.lines().next().unwrap_or("");
        assert!(head.contains(&format!("policy {policy}")), "{head}");
        // single-qp uses one data QP whatever --qps says
        let qps = if policy == "single-qp" { 1 } else { 2 };
        assert!(
            head.contains(&format!("{qps} data QPs")) && head.contains("segment 4096 B"),
            "{head}"
        );
        let plugin = out.lines().nth(1).unwrap_or("");
        assert!(
            plugin.starts_with("# plugin: dev 0 connecting to 127.0.0.1")
                && plugin.contains(&format!("{qps} data QPs"))
                && plugin.contains(&format!("policy {policy}")),
            "the plugin's connect line is missing or disagrees: {out}"
        );
    }
}

#[test]
fn raw_tcp_ceiling_runs_the_same_sweep() {
    let out = sweep(&["--raw-tcp", "--qps", "3"]);
    assert!(
        out.lines().next().unwrap_or("").contains("raw TCP") && out.contains("3 data QPs"),
        "{out}"
    );
}

#[test]
fn raw_tcp_from_one_polling_thread() {
    let out = sweep(&["--raw-tcp", "--raw-threads", "one", "--qps", "3"]);
    assert!(
        out.lines()
            .next()
            .unwrap_or("")
            .contains("one polling thread"),
        "{out}"
    );
}

#[test]
fn csv_and_json_formats() {
    let out = dqplb(&[
        "--min-bytes",
        "64",
        "--max-bytes",
        "64",
        "--iters",
        "3",
        "--format",
        "csv",
    ]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{s}");
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        lines[0],
        "size,count,type,iters,time_us,algbw_gbps,busbw_gbps,wrong"
    );
    assert!(
        lines[1].starts_with("64,16,float,3,") && lines[1].ends_with(",0"),
        "{s}"
    );
    let out = dqplb(&[
        "--min-bytes",
        "64",
        "--max-bytes",
        "128",
        "--iters",
        "3",
        "--format",
        "json",
        "--raw-tcp",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json output");
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["rows"][1]["size"], 128);
    assert_eq!(v["rows"][1]["wrong"], 0);
}

#[test]
fn latency_reports_plugin_and_raw_tcp() {
    let out = dqplb(&[
        "--latency",
        "--iters",
        "50",
        "--warmup",
        "5",
        "--format",
        "csv",
    ]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 3, "{s}");
    for (line, name) in lines[1..].iter().zip(["plugin", "raw-tcp"]) {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f[0], name);
        assert_eq!(f[1], "50");
        let (med, p99): (f64, f64) = (f[2].parse().expect("median"), f[3].parse().expect("p99"));
        assert!(med > 0.0 && p99 >= med, "{line}");
    }
}

#[test]
fn bad_arguments_exit_2_with_a_message() {
    for (args, needle) in [
        (
            vec!["--policy", "nope"],
            "error: invalid value 'nope' for '--policy <POLICY>'\n  [possible values: dqplb, dqplb-led, static-split, round-robin-message, single-qp]",
        ),
        (
            vec!["--max-bytes", "12Q"],
            "error: invalid value '12Q' for '--max-bytes <BYTES>': '12Q' is not a byte count (examples: 8, 64K, 1M, 2G)",
        ),
        (
            vec!["--min-bytes", "1M", "--max-bytes", "1K"],
            "error: --min-bytes 1048576 is larger than --max-bytes 1024\n\nUsage: dqplb perf [OPTIONS]",
        ),
        (
            vec!["--inflight", "0"],
            "error: invalid value '0' for '--inflight <N>': 0 is outside 1..=32",
        ),
        (
            vec!["--frobnicate"],
            "error: unexpected argument '--frobnicate' found",
        ),
        (
            vec!["--qps"],
            "error: a value is required for '--qps <N>' but none was supplied",
        ),
        (
            vec!["--raw-threads", "two"],
            "error: invalid value 'two' for '--raw-threads <RAW_THREADS>'\n  [possible values: per-stream, one]",
        ),
        (
            vec!["--inflihgt", "2"],
            "tip: a similar argument exists: '--inflight'",
        ),
        // The plugin's range check of an option names the option, not the variable perf sets.
        (
            vec!["--segment", "100"],
            "dqplb perf: --segment 100: key 'engine.segment-bytes': value 100 is out of range",
        ),
        (
            vec!["--bidir"],
            "error: --bidir needs a two-node run (--server or --client HOST)",
        ),
        (
            vec!["--client", "h", "--latency"],
            "error: --latency is not available in a two-node run",
        ),
        (
            vec!["--server", "--client", "h"],
            "error: the argument '--server' cannot be used with '--client <HOST>'",
        ),
        (
            vec!["--units", "MB/s"],
            "[possible values: GB/s, Gb/s]",
        ),
    ] {
        let out = dqplb(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed a table");
    }
}
