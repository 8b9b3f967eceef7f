//! `dqplb plan` run as a process: the class tables, exit code 2 with a named field on bad input,
//! and the JSON output with exact figures.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn default_conf() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugin-conf/default.toml")
        .display()
        .to_string()
}

/// Runs the binary with no NCCL_IB_HCA / NCCL_DQPLB_* from the test's own environment.
fn dqplb(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dqplb"));
    cmd.args(args)
        .env_remove("NCCL_IB_HCA")
        .env_remove("NCCL_BUFFSIZE");
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_DQPLB_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    match cmd.output() {
        Ok(out) => out,
        Err(e) => panic!("cannot run dqplb: {e}"),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn table_shows_devices_and_three_classes() {
    let conf = default_conf();
    let out = dqplb(
        &["plan", "--config", &conf, "--hca", "=mlx5_0:1:0,mlx5_1:1:1"],
        &[],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(stdout.contains(&format!("config: {conf}")), "{stdout}");
    for class in ["class same-rail", "class cross-rail", "class cross-dc"] {
        assert_eq!(stdout.matches(class).count(), 1, "{class} in {stdout}");
    }
    assert!(
        stdout.contains("mlx5_0:1 <-> mlx5_1:1: cross-rail"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("mlx5_1 "))
        .unwrap_or_default();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols, ["mlx5_1", "1", "1", "0", "1", "-"], "{stdout}");
    // Cross-dc: 16 QPs x 3 x 64 KiB, the default's largest window, far inside the budget.
    assert!(
        stdout.contains("3145728 B of 1073741824 B budget (fits)"),
        "{stdout}"
    );
    assert!(!stdout.contains("note: window"), "{stdout}");
}

#[test]
fn bad_hca_exits_2_naming_the_field() {
    let conf = default_conf();
    let out = dqplb(&["plan", "--config", &conf, "--hca", "mlx5_0:x"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr).trim_end(),
        "dqplb plan: NCCL_IB_HCA entry 'mlx5_0:x': port 'x' is not a number (expected 1..=255); \
         this entry matches no port"
    );
    let out = dqplb(
        &["plan", "--config", &conf],
        &[("NCCL_IB_HCA", "mlx5_0:1:2:3:4")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("5 fields; expected dev[:port"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bad_config_and_bad_options_exit_2() {
    let dir = std::env::temp_dir().join(format!("dqplb-plan-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[class.cross-dc]\nqps = 0\n").expect("write");
    let bad_str = bad.display().to_string();
    let out = dqplb(&["plan", "--config", &bad_str], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim_end(),
        format!(
            "dqplb plan: {bad_str}:2:7: key 'class.cross-dc.qps': value 0 is out of range \
             (accepted: an integer in 1..=128)"
        )
    );
    let out = dqplb(&["plan"], &[("NCCL_DQPLB_CONF", &bad_str)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(&format!("{bad_str}:2:7")));
    let out = dqplb(&["plan", "--format", "yaml"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let out = dqplb(
        &["plan", "--config", &default_conf()],
        &[("NCCL_DQPLB_QPS", "0")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("environment: NCCL_DQPLB_QPS"));
    let out = dqplb(&["frobnicate"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let out = dqplb(&["--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("plan"));
}

#[test]
fn json_output_has_exact_figures() {
    let conf = default_conf();
    let out = dqplb(
        &[
            "plan",
            "--config",
            &conf,
            "--hca",
            "=mlx5_0:1:0,mlx5_1:1:9",
            "--format",
            "json",
        ],
        &[("NCCL_DQPLB_CLASS_CROSS_RAIL_QPS", "12")],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let v: Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(e) => panic!("bad JSON ({e}): {}", text(&out.stdout)),
    };
    assert_eq!(v["source"], Value::from(conf));
    assert_eq!(v["policy"], "dqplb-led");
    assert_eq!(
        v["overrides"][0]["variable"],
        "NCCL_DQPLB_CLASS_CROSS_RAIL_QPS"
    );
    assert_eq!(v["hca"]["exact"], true);
    assert_eq!(v["hca"]["devices"][1]["fabric_id"], 9);
    assert_eq!(v["hca"]["devices"][1]["dc"], 1);
    assert_eq!(v["hca"]["devices"][1]["rail"], 1);
    assert_eq!(v["pairs"][0]["class"], "cross-dc");
    let classes = v["classes"].as_array().cloned().unwrap_or_default();
    assert_eq!(classes.len(), 3);
    let figures: Vec<(String, u64, u64, u64, u64, u64)> = classes
        .iter()
        .map(|c| {
            let n = |k: &str| c[k].as_u64().unwrap_or(u64::MAX);
            let name = c["class"].as_str().unwrap_or("?").to_string();
            (
                name,
                n("bdp_bytes"),
                n("qps"),
                n("outstanding"),
                n("segment_bytes"),
                n("inflight_bytes"),
            )
        })
        .collect();
    assert_eq!(
        figures,
        vec![
            // 4 QPs x 2 x 64 KiB: ceil(200000 / 65536) = 4, clamped to 1..=2.
            ("same-rail".to_string(), 200_000, 4, 2, 65_536, 524_288),
            // 12 QPs x 2 x 64 KiB.
            ("cross-rail".to_string(), 600_000, 12, 2, 65_536, 1_572_864),
            // 16 QPs x 3 x 64 KiB: ceil(1e8 / 65536) = 1526, clamped to 1..=3.
            (
                "cross-dc".to_string(),
                100_000_000,
                16,
                3,
                65_536,
                3_145_728
            ),
        ]
    );
    assert_eq!(classes[2]["bdp_segments"], 1526);
    assert_eq!(classes[2]["ideal_outstanding"], 3);
    assert_eq!(classes[2]["within_budget"], true);
    assert_eq!(classes[0]["budget_note"], Value::Null);
    assert_eq!(classes[1]["rtt_us"], 12.0);
}

#[test]
fn classes_whose_window_holds_nccls_buffer_get_a_steering_note() {
    let conf = default_conf();
    // The note concerns plain dqplb (the shipped policy is dqplb-led, which steers at any
    // window); the shipped windows are sized so that plain dqplb steers too.
    let json = |env: &[(&str, &str)]| -> Value {
        let mut all = vec![("NCCL_DQPLB_ENGINE_POLICY", "dqplb")];
        all.extend_from_slice(env);
        let out = dqplb(&["plan", "--config", &conf, "--format", "json"], &all);
        assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let steer = |v: &Value| -> Vec<(String, u64, u64, bool)> {
        v["steering"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|s| {
                (
                    s["class"].as_str().unwrap_or("?").to_string(),
                    s["window_bytes"].as_u64().unwrap_or(0),
                    s["nccl_buffsize"].as_u64().unwrap_or(0),
                    s["steers"].as_bool().unwrap_or(true),
                )
            })
            .collect()
    };
    // NCCL's default 4 MiB: every default class's window (512 KiB, 1 MiB, 3 MiB) is below it,
    // so a slow QP's window fills and dqplb steers: no note (the defaults are sized for this).
    let v = json(&[]);
    let (kib, mib) = (1u64 << 10, 1u64 << 20);
    assert_eq!(
        steer(&v),
        vec![
            ("same-rail".into(), 512 * kib, 4 * mib, true),
            ("cross-rail".into(), mib, 4 * mib, true),
            ("cross-dc".into(), 3 * mib, 4 * mib, true),
        ]
    );
    assert!(v["steering"]
        .as_array()
        .is_some_and(|a| a.iter().all(|s| s["note"].is_null())));
    // NCCL_BUFFSIZE = 1 MiB (128 KiB steps): cross-rail's 1 MiB and cross-dc's 3 MiB hold it.
    let v = json(&[("NCCL_BUFFSIZE", "1048576")]);
    let s = steer(&v);
    assert_eq!(
        s.iter().map(|x| x.3).collect::<Vec<_>>(),
        [true, false, false]
    );
    // Cross-rail: 8 QPs x 64 KiB = 512 KiB per depth, so depth 1 stays under 1 MiB.
    let note = v["steering"][1]["note"].as_str().unwrap_or("");
    assert!(
        note.contains("set policy dqplb-led, or outstanding <= 1"),
        "{note}"
    );
    // Cross-dc: 16 QPs x 64 KiB = 1 MiB already at depth 1.
    let note = v["steering"][2]["note"].as_str().unwrap_or("");
    assert!(note.contains("fewer QPs or smaller segments"), "{note}");
    assert!(v["steering"][0]["note"].is_null());
    // dqplb-led steers at any window: no note.
    let v = json(&[("NCCL_DQPLB_ENGINE_POLICY", "dqplb-led")]);
    assert!(steer(&v).iter().all(|x| x.3), "{v}");
    // A bad NCCL_BUFFSIZE is named, and NCCL's default used.
    let out = dqplb(
        &["plan", "--config", &conf],
        &[
            ("NCCL_DQPLB_ENGINE_POLICY", "dqplb"),
            ("NCCL_BUFFSIZE", "4M"),
            ("NCCL_DQPLB_CLASS_SAME_RAIL_MIN_OUTSTANDING", "16"),
            ("NCCL_DQPLB_CLASS_SAME_RAIL_MAX_OUTSTANDING", "16"),
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let t = text(&out.stdout);
    assert!(
        t.contains("note: NCCL_BUFFSIZE '4M' is not a positive byte count; NCCL's default 4194304 B assumed"),
        "{t}"
    );
    // Same-rail at depth 16 (4 MiB) against the assumed 4 MiB: 256 KiB per depth -> 15.
    assert!(t.contains("outstanding <= 15"), "{t}");
}

#[test]
fn pinned_classes_show_the_ports_of_a_sample_connection() {
    let dir = std::env::temp_dir().join(format!("dqplb-plan-pin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let conf = dir.join("site.toml");
    std::fs::write(
        &conf,
        "[class.cross-rail]\nqps = 8\npath-pinning = \"relative\"\n\
         [class.cross-dc]\npath-pinning = \"relative\"\necmp-width = 128\n\
         [paths]\nhash = \"xor-fold\"\nfields = [\"protocol\", \"src-port\"]\n",
    )
    .expect("write config");
    let conf = conf.display().to_string();
    let out = dqplb(&["plan", "--config", &conf, "--format", "json"], &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let pins = v["pinning"].as_array().cloned().unwrap_or_default();
    assert_eq!(pins.len(), 2, "{v}");
    assert_eq!(pins[0]["class"], "cross-rail");
    assert_eq!(pins[0]["mode"], "relative");
    assert_eq!(pins[0]["ecmp_width"], 8);
    let qps = pins[0]["qps"].as_array().cloned().unwrap_or_default();
    assert_eq!(qps.len(), 8);
    let mut buckets: Vec<u64> = qps
        .iter()
        .map(|q| q["bucket"].as_u64().unwrap_or(99))
        .collect();
    buckets.sort_unstable();
    assert_eq!(buckets, (0..8).collect::<Vec<u64>>());
    for q in &qps {
        let (port, fl) = (
            q["port"].as_u64().unwrap_or(0),
            q["flow_label"].as_u64().unwrap_or(0),
        );
        // mlx5: 0xC000 | (fl & 0x3fff) ^ (fl >> 14) is the port.
        assert_eq!(0xC000 | ((fl & 0x3FFF) ^ (fl >> 14)), port, "{q}");
    }
    // The pinned class cuts NCCL's 512 KiB step over its 8 QPs.
    assert_eq!(v["classes"][1]["segment_bytes"], 65536);
    // Cross-dc: 128 members, but this hash's low 7 bits see only 6 port bits.
    assert_eq!(
        pins[1]["error"],
        "class cross-dc: path pinning: this hash's bucket bits depend on only 6 independent \
         source-port bits, 7 needed for the group"
    );
    let out = dqplb(&["plan", "--config", &conf], &[]);
    let t = text(&out.stdout);
    assert!(
        t.contains("path pinning, class cross-rail: relative over 8 ECMP members (xor-fold, low-bits, fields protocol,src-port)"),
        "{t}"
    );
    assert!(
        t.contains("sample connection 10.0.0.1 -> 10.0.1.1, peer QPNs 0x100 + i:"),
        "{t}"
    );
    assert!(t.contains("  error: class cross-dc: path pinning:"), "{t}");
    // 8 QPs x 2 channels over 8 or 16 members: no block note; over 32: the note.
    assert!(!t.contains("channels < ecmp-width"), "{t}");
    let out = dqplb(
        &["plan", "--config", &conf],
        &[("NCCL_DQPLB_CLASS_CROSS_RAIL_ECMP_WIDTH", "32")],
    );
    let t = text(&out.stdout);
    assert!(
        t.contains("  note: 8 QPs per connection x 2 channels < ecmp-width 32: a NIC pair's pinned QPs cover a block"),
        "{t}"
    );
    // The shipped default pins nothing: no pinning section.
    let out = dqplb(&["plan", "--config", &default_conf()], &[]);
    assert!(!text(&out.stdout).contains("path pinning"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn memory_per_comm_pair_and_a_warning_for_large_max_messages() {
    let conf = default_conf();
    let out = dqplb(&["plan", "--config", &conf, "--format", "json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mem = v["memory"].as_array().unwrap();
    assert_eq!(mem.len(), 3);
    for m in mem {
        let (s, r, p) = (
            m["send_bytes"].as_u64().unwrap(),
            m["recv_bytes"].as_u64().unwrap(),
            m["pair_bytes"].as_u64().unwrap(),
        );
        assert_eq!(s + r, p, "{m}");
        // The default max-messages (32) stays well under the 1 MiB warning.
        assert!(p > 10_000 && p < 1 << 20, "{m}");
        assert!(m["warning"].is_null(), "{m}");
    }
    let out = dqplb(
        &["plan", "--config", &conf],
        &[("NCCL_DQPLB_ENGINE_MAX_MESSAGES", "4096")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    let warnings: Vec<&str> = t.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(warnings.len(), 3, "{t}");
    for w in warnings {
        assert!(w.contains("MiB per comm pair"), "{w}");
        assert!(w.contains("for 200 pairs"), "{w}");
        assert!(
            w.contains("max-messages = 4096 drives it: 32 (the default) needs"),
            "{w}"
        );
    }
    // 4096 messages: several MiB per pair (the engine's and the request tables' rings).
    let same_rail = t
        .lines()
        .find(|l| l.trim_start().starts_with("memory"))
        .unwrap();
    let bytes: u64 = same_rail
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!((4 << 20..16 << 20).contains(&bytes), "{same_rail}");
}

#[test]
fn a_dcqcn_profile_file_is_named_as_such() {
    let profiles = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugin-conf/dcqcn-profiles.toml")
        .display()
        .to_string();
    let out = dqplb(&["plan", "--config", &profiles], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("dcqcn-profiles.toml: a DCQCN profile file ([profiles.NAME]: "),
        "{err}"
    );
    assert!(err.contains("not a site config"), "{err}");
    assert!(err.contains("`dqplb check --profile "), "{err}");
    assert!(!err.contains("unknown field"), "{err}");
}

#[test]
fn a_fabric_sim_block_is_accepted_and_ignored() {
    // The simulator's [fabric.sim] keys in a site file that dqplb sim --config also reads.
    let dir = std::env::temp_dir().join(format!("dqplb-plan-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let with = dir.join("with.toml");
    let without = dir.join("without.toml");
    let base = std::fs::read_to_string(default_conf()).unwrap();
    std::fs::write(&without, &base).unwrap();
    std::fs::write(
        &with,
        format!("{base}\n[fabric.sim]\nhosts = 16\nspines = 4\ntraffic = \"ring\"\n"),
    )
    .unwrap();
    let run = |p: &Path| {
        let out = dqplb(
            &["plan", "--config", p.to_str().unwrap(), "--format", "json"],
            &[],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let mut v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["source"] = Value::Null;
        v
    };
    assert_eq!(run(&with), run(&without));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unknown_dqplb_variables_are_warned_on_stderr_and_listed_in_json() {
    let conf = default_conf();
    let warning = "NCCL_DQPLB_QPSS=8: unknown variable, ignored; did you mean NCCL_DQPLB_QPS?";
    let table = dqplb(&["plan", "--config", &conf], &[("NCCL_DQPLB_QPSS", "8")]);
    assert_eq!(
        table.status.code(),
        Some(0),
        "stderr: {}",
        text(&table.stderr)
    );
    assert_eq!(
        text(&table.stderr),
        format!("dqplb plan: warning: {warning}\n")
    );
    let json = dqplb(
        &["plan", "--config", &conf, "--format", "json"],
        &[("NCCL_DQPLB_QPSS", "8")],
    );
    assert_eq!(
        json.status.code(),
        Some(0),
        "stderr: {}",
        text(&json.stderr)
    );
    assert_eq!(
        text(&json.stderr),
        format!("dqplb plan: warning: {warning}\n")
    );
    let v: Value = serde_json::from_slice(&json.stdout).expect("JSON on stdout");
    assert_eq!(v["warnings"], serde_json::json!([warning]));
    // Without one: an empty list and nothing on stderr.
    let clean = dqplb(&["plan", "--config", &conf, "--format", "json"], &[]);
    assert_eq!(text(&clean.stderr), "");
    let v: Value = serde_json::from_slice(&clean.stdout).expect("JSON on stdout");
    assert_eq!(v["warnings"], serde_json::json!([]));
}

#[test]
fn the_depth_rule_shows_per_class_and_prices_memory_at_the_raised_depth() {
    let conf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugin-conf/pinned-ecmp.toml")
        .display()
        .to_string();
    let out = dqplb(&["plan", "--config", &conf], &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.contains(
            "  depth rule   3 per QP while the slowest QP's latency is >= 1.25 x the median, \
             back after 4 calm checks (16 completions a check)\n"
        ),
        "{t}"
    );
    // Unpinned classes run no rule.
    assert_eq!(t.matches("  depth rule   off\n").count(), 2, "{t}");
    // The pinned class moves a QP that stays the slowest onto the fastest's port (verbs).
    assert!(
        t.contains(
            "  re-pin rule  verbs: a QP the slowest at >= 1.3 x the median for 6 checks moves \
             onto the fastest QP's source port, judged after 16 completions, at most 16 moves\n"
        ),
        "{t}"
    );
    assert_eq!(t.matches("  re-pin rule  off\n").count(), 2, "{t}");
    let out = dqplb(&["plan", "--config", &conf, "--format", "json"], &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rail = &v["classes"][1];
    assert_eq!(rail["class"], "cross-rail", "{v}");
    assert_eq!(rail["outstanding"], 2);
    assert_eq!(rail["depth_rule"]["ratio"], 1.25);
    assert_eq!(rail["depth_rule"]["raised"], 3);
    assert_eq!(rail["depth_rule"]["hold"], 4);
    assert_eq!(v["classes"][0]["depth_rule"], Value::Null);
    assert_eq!(
        rail["repin_rule"],
        serde_json::json!({"ratio": 1.3, "persist": 6, "settle": 16, "budget": 16})
    );
    assert_eq!(v["classes"][0]["repin_rule"], Value::Null);
    // The same class without the rule needs less per comm pair: the rings follow the depth.
    let off = dqplb(
        &["plan", "--config", &conf, "--format", "json"],
        &[("NCCL_DQPLB_CLASS_CROSS_RAIL_DEPTH_RAISED", "0")],
    );
    let w: Value = serde_json::from_slice(&off.stdout).expect("JSON");
    assert_eq!(w["classes"][1]["depth_rule"], Value::Null);
    let pair = |x: &Value| x["memory"][1]["pair_bytes"].as_u64().expect("pair bytes");
    assert!(pair(&v) > pair(&w), "{} <= {}", pair(&v), pair(&w));
}
