//! Profile check on fake sysfs/debugfs trees: match, mismatch, missing, unreadable and garbage
//! files through the library (compare, preflight and its log lines) and the `dqplb check` binary.

use dqplb_config::dcqcn::DcqcnSection;
use dqplb_dcqcn::compare::Verdict;
use dqplb_dcqcn::fake_tree::{cc_rel, FakeTree};
use dqplb_dcqcn::{compare, preflight, read_device, resolve, PreflightError, Reading, Status};
use std::io::Write;
use std::process::Command;
use std::sync::{Arc, Mutex};

const BDF: &str = "0000:3b:00.0";

/// One mlx5 device at firmware defaults with ECN on priority 3.
fn stock_tree(tag: &str) -> FakeTree {
    let t = FakeTree::new(tag).expect("temp tree");
    t.add_device(
        "mlx5_0",
        BDF,
        "mlx5_core",
        Some("ens1f0"),
        "100 Gb/sec (4X EDR)",
    )
    .unwrap();
    t.set_cc_params(BDF, &[], true).unwrap();
    t.set_ecn("ens1f0", &[3], &[3]).unwrap();
    t
}

fn check_with(t: &FakeTree, profile: &str) -> dqplb_dcqcn::DeviceReport {
    let p = resolve(&DcqcnSection::default(), profile).unwrap();
    compare(&read_device(&t.roots(), "mlx5_0"), &p)
}

fn row<'a>(r: &'a dqplb_dcqcn::DeviceReport, param: &str) -> &'a dqplb_dcqcn::Row {
    r.rows
        .iter()
        .find(|x| x.param == param)
        .unwrap_or_else(|| panic!("no row {param}"))
}

/// Runs `dqplb check` on the tree with an empty environment and an empty site config file.
fn dqplb(t: &FakeTree, extra: &[&str]) -> (i32, String, String) {
    dqplb_env(t, extra, &[])
}

fn dqplb_env(t: &FakeTree, extra: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let roots = t.roots();
    t.write("empty.toml", "").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .arg("check")
        .arg("--sysfs-root")
        .arg(&roots.sysfs)
        .arg("--debugfs-root")
        .arg(&roots.debugfs)
        .args(extra)
        .env_clear()
        .env("NCCL_DQPLB_CONF", t.root().join("empty.toml"))
        .envs(env.iter().copied())
        .output()
        .expect("run dqplb");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn stock_device_matches_nvidia_default() {
    let t = stock_tree("match");
    let r = check_with(&t, "nvidia-default");
    let s = &r.snapshot;
    assert_eq!(s.bdf.as_deref(), Some(BDF));
    assert_eq!(s.netdev.as_deref(), Some("ens1f0"));
    assert_eq!(s.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(s.line_rate_mbps(), Some(100_000));
    assert_eq!(s.cc_params.len(), 22);
    assert!(r.all_match(), "{:?}", r.failures().collect::<Vec<_>>());
    assert_eq!(r.matched_count(), 19 + 2);
    assert_eq!(row(&r, "np_cnp_prio_mode").status, Status::NotChecked);
    assert_eq!(row(&r, "ecn/roce_rp/enable/3").status, Status::Match);

    let (code, out, err) = dqplb(&t, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("device mlx5_0  pci 0000:3b:00.0  netdev ens1f0  profile nvidia-default"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["rp_time_reset", "300", "300", "ok"]),
        "{out}"
    );
    assert!(out.contains("counters port 1 (100.00 Gb/s): rp_cnp_handled 0  rp_cnp_ignored 0  np_cnp_sent 0  np_ecn_marked_roce_packets 0"), "{out}");
    assert!(
        out.contains("model at 100.00 Gb/s: after 1 CNP 50.05 Gb/s"),
        "{out}"
    );
    assert!(
        out.contains("=> MATCH: 21 ok, 0 failed, 0 unknown"),
        "{out}"
    );
    assert!(
        out.ends_with(
            "summary: 1 device(s), 1 matching, 0 unverified (unreadable values), 0 with mismatches\n"
        ),
        "{out}"
    );
}

#[test]
fn mismatch_is_reported_with_reason_and_exit_1() {
    let t = stock_tree("mismatch");
    t.set_cc_raw(BDF, "rp_ai_rate", "7\n").unwrap();
    let r = check_with(&t, "nvidia-default");
    let ai = row(&r, "rp_ai_rate");
    assert_eq!(ai.status, Status::Mismatch);
    assert_eq!(ai.actual, Reading::Value(7));
    assert_eq!(r.failure_count(), 1);

    let (code, out, _) = dqplb(&t, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "! rp_ai_rate: expected 5, actual 7 - firmware default additive increase is 5 Mb/s"
        ),
        "{out}"
    );
    assert!(out.contains("MISMATCH (warning)"), "{out}");

    let (code, out, _) = dqplb(&t, &["--format", "json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["match"], false);
    let rows = v["devices"][0]["rows"].as_array().unwrap();
    let ai = rows.iter().find(|r| r["param"] == "rp_ai_rate").unwrap();
    assert_eq!(ai["value"], 7);
    assert_eq!(ai["expected"], "5");
    assert_eq!(ai["status"], "MISMATCH");
    assert_eq!(ai["severity"], "warning");
    assert_eq!(v["devices"][0]["failed"], 1);
    assert_eq!(v["devices"][0]["ports"][0]["counters"]["np_cnp_sent"], 0);
}

#[test]
fn ai_training_flags_stock_values_and_ranges() {
    let t = stock_tree("ai");
    let r = check_with(&t, "ai-training");
    // Stock: AI 5 < 20, HAI 50 < 100; time_reset 300 and byte_reset 32767 are in range.
    let failed: Vec<&str> = r.failures().map(|x| x.param.as_str()).collect();
    assert_eq!(failed, vec!["rp_ai_rate", "rp_hai_rate"]);
    assert_eq!(row(&r, "rp_time_reset").status, Status::Match);
    let (code, out, _) = dqplb(&t, &["--profile", "ai-training"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("! rp_ai_rate: expected 20..400, actual 5"),
        "{out}"
    );
}

#[test]
fn ecn_disabled_on_roce_priority_fails() {
    let t = stock_tree("ecn");
    t.set_ecn("ens1f0", &[3], &[0]).unwrap();
    let r = check_with(&t, "nvidia-default");
    let np = row(&r, "ecn/roce_np/enable/3");
    assert_eq!(np.status, Status::Mismatch);
    assert_eq!(np.actual, Reading::Value(0));
    assert_eq!(row(&r, "ecn/roce_rp/enable/3").status, Status::Match);
    let (code, out, _) = dqplb(&t, &[]);
    assert_eq!(code, 1);
    assert!(out.contains("MISMATCH (critical)"), "{out}");
}

#[test]
fn missing_files_are_unknown_not_failures() {
    let t = stock_tree("missing");
    // An older kernel: no rp_max_rate nor np_min_time_between_cnps; no ecn/ (inbox driver).
    t.remove(&cc_rel(BDF, "rp_max_rate")).unwrap();
    t.remove(&cc_rel(BDF, "np_min_time_between_cnps")).unwrap();
    t.remove("sys/class/net/ens1f0/ecn").unwrap();
    let r = check_with(&t, "nvidia-default");
    // Unknowns are not failures, but not a match either.
    assert!(!r.all_match());
    assert_eq!(r.verdict(), Verdict::Unverified);
    assert_eq!(r.failure_count(), 0);
    assert_eq!(r.unknown_count(), 4);
    assert_eq!(
        row(&r, "rp_max_rate").actual,
        Reading::Unknown("file missing (older kernel or firmware)".into())
    );
    let reasons = r.unknown_reasons();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[1].contains("out-of-tree"), "{reasons:?}");

    let (code, out, _) = dqplb(&t, &[]);
    assert_eq!(code, 3, "unverified exits 3: {out}");
    assert!(
        out.contains("? unknown: file missing (older kernel or firmware)"),
        "{out}"
    );
    assert!(
        out.contains("=> UNVERIFIED: 17 ok, 0 failed, 4 unknown"),
        "{out}"
    );
}

#[test]
fn unreadable_sources_are_unknown_once() {
    // No debugfs at all.
    let t = stock_tree("nodebugfs");
    t.remove("debug/mlx5").unwrap();
    let r = check_with(&t, "nvidia-default");
    // 19 of 21 checked values unreadable: never a MATCH.
    assert_eq!(r.verdict(), Verdict::Unverified);
    assert_eq!(r.matched_count(), 2);
    assert_eq!(r.unknown_count(), 19);
    assert_eq!(r.unknown_reasons().len(), 1);
    assert!(
        r.unknown_reasons()[0].starts_with("no mlx5 debugfs at"),
        "{:?}",
        r.unknown_reasons()
    );
    let (code, out, _) = dqplb(&t, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("=> UNVERIFIED: 2 ok, 0 failed, 19 unknown"),
        "{out}"
    );
    assert_eq!(out.matches("? unknown:").count(), 1, "{out}");
    assert!(
        out.contains("model used firmware defaults for 16 unreadable parameter(s)"),
        "{out}"
    );

    // A file that cannot be read (a directory in its place).
    let t = stock_tree("unreadable");
    t.make_unreadable(&cc_rel(BDF, "rp_gd")).unwrap();
    let r = check_with(&t, "nvidia-default");
    assert_eq!(row(&r, "rp_gd").status, Status::Unknown);
    assert_eq!(r.verdict(), Verdict::Unverified);

    // Not an mlx5 device: cc_params are not even looked for.
    let t = FakeTree::new("rxe").unwrap();
    t.add_device(
        "mlx5_0",
        "0000:00:03.0",
        "virtio-pci",
        None,
        "10 Gb/sec (1X QDR)",
    )
    .unwrap();
    let r = check_with(&t, "nvidia-default");
    assert_eq!(
        row(&r, "rp_ai_rate").actual,
        Reading::Unknown("not an mlx5 device (driver virtio-pci)".into())
    );
    assert_eq!(r.verdict(), Verdict::Unverified);
    assert_eq!(r.unknown_reasons().len(), 2); // cc_params, and no netdev for ECN
}

#[test]
fn garbage_is_reported_as_such() {
    let t = stock_tree("garbage");
    t.set_cc_raw(BDF, "rp_ai_rate", "abc\n").unwrap();
    t.set_cc_raw(BDF, "rp_time_reset", "").unwrap();
    t.set_cc_raw(BDF, "rp_byte_reset", "99999999999\n").unwrap();
    t.set_cc_raw(BDF, "np_cnp_prio_mode", "1 2\n").unwrap(); // not checked by the profile
    t.set_counter("mlx5_0", 1, "np_cnp_sent", 0).unwrap();
    t.write(
        "sys/class/infiniband/mlx5_0/ports/1/hw_counters/rp_cnp_handled",
        "lots\n",
    )
    .unwrap();
    let r = check_with(&t, "nvidia-default");
    assert!(
        matches!(&row(&r, "rp_ai_rate").actual, Reading::Garbage(g) if g == "not a number: \"abc\"")
    );
    assert!(matches!(&row(&r, "rp_time_reset").actual, Reading::Garbage(g) if g == "empty"));
    assert!(
        matches!(&row(&r, "rp_byte_reset").actual, Reading::Garbage(g) if g.starts_with("out of range (max 4294967295)"))
    );
    assert_eq!(row(&r, "np_cnp_prio_mode").status, Status::Garbage);
    assert_eq!(r.failure_count(), 3); // unchecked garbage is shown, not failed

    let (code, out, _) = dqplb(&t, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("! rp_ai_rate: expected 5, garbage in file: not a number: \"abc\""),
        "{out}"
    );
    assert!(
        out.contains("! rp_time_reset: expected 300, garbage in file: empty"),
        "{out}"
    );
    assert!(
        out.contains("~ np_cnp_prio_mode: garbage in file (not checked): not a number: \"1 2\""),
        "{out}"
    );
    assert!(
        out.contains("rp_cnp_handled garbage(not a number: \"lots\")"),
        "{out}"
    );
}

#[test]
fn fix_commands_print_runtime_and_firmware_forms() {
    let t = stock_tree("fix");
    t.set_cc_raw(BDF, "rp_ai_rate", "7\n").unwrap();
    t.set_cc_raw(BDF, "rp_time_reset", "1000\n").unwrap();
    t.set_ecn("ens1f0", &[0, 3], &[0]).unwrap();
    let (code, out, _) = dqplb(&t, &["--profile", "ai-training", "--fix-commands"]);
    assert_eq!(code, 1);
    let roots = t.roots();
    let cc = roots.debugfs.join("mlx5").join(BDF).join("cc_params");
    let ecn = roots.sysfs.join("class/net/ens1f0/ecn");
    let expected_lines = [
        format!("echo 300 > {}", cc.join("rp_time_reset").display()),
        format!("echo 20 > {}", cc.join("rp_ai_rate").display()),
        format!("echo 100 > {}", cc.join("rp_hai_rate").display()),
        format!("echo 1 > {}", ecn.join("roce_np/enable/3").display()),
        // Priority 0 has both sides on? No (np 0 is on, rp 0 is on): mask = bit 0 | bit 3 = 9.
        format!(
            "mlxconfig -d {BDF} -y set RPG_TIME_RESET_P1=300 RPG_AI_RATE_P1=20 RPG_HAI_RATE_P1=100 ROCE_CC_PRIO_MASK_P1=9"
        ),
    ];
    for l in &expected_lines {
        assert!(out.lines().any(|x| x == l), "missing line {l:?} in\n{out}");
    }
    assert!(out.contains("LOST ON REBOOT"), "{out}");
    assert!(out.contains("needs a firmware reset"), "{out}");
    // Nothing was written.
    assert_eq!(
        std::fs::read_to_string(cc.join("rp_ai_rate")).unwrap(),
        "7\n"
    );

    let clean = stock_tree("fixclean");
    let (code, out, _) = dqplb(&clean, &["--fix-commands"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "# nothing to fix: every readable value matches the profile\n"
    );
}

#[test]
fn the_alpha_schedule_is_an_option_of_the_model() {
    // The stock device at 100 Gb/s: per period (the default) and per CNP give the same first cut
    // (alpha starts at 1023 either way) and differ after 5 CNPs, where per-CNP alpha has been
    // raised at each cut; the table and the JSON name the schedule.
    let t = stock_tree("alpha");
    let model = |extra: &[&str]| {
        let (code, out, err) = dqplb(&t, extra);
        assert_eq!(code, 0, "{out}{err}");
        out.lines()
            .find(|l| l.trim_start().starts_with("model at"))
            .unwrap_or_else(|| panic!("{out}"))
            .to_string()
    };
    let period = model(&[]);
    let cnp = model(&["--alpha-update", "per-cnp"]);
    assert!(period.ends_with("; alpha per-period"), "{period}");
    assert!(cnp.ends_with("; alpha per-cnp"), "{cnp}");
    assert_eq!(model(&["--alpha-update", "per-period"]), period);
    let after = |l: &str, k: &str| {
        l.split(k)
            .nth(1)
            .unwrap()
            .split([',', ';'])
            .next()
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(after(&period, "after 1 CNP"), after(&cnp, "after 1 CNP"));
    assert_ne!(
        after(&period, "after 5 CNPs"),
        after(&cnp, "after 5 CNPs"),
        "{period}\n{cnp}"
    );
    let (_, json, _) = dqplb(&t, &["--alpha-update", "per-cnp", "--format", "json"]);
    assert!(json.contains("\"alpha_update\": \"per-cnp\""), "{json}");
}

#[test]
fn usage_errors_exit_2() {
    let t = stock_tree("usage");
    for (args, needle) in [
        (vec!["--bogus"], "error: unexpected argument '--bogus' found"),
        (
            vec!["--format", "xml"],
            "error: invalid value 'xml' for '--format <F>'\n  [possible values: table, json]",
        ),
        (vec!["--profile", "nope"], "unknown DCQCN profile \"nope\""),
        (vec!["--hca", "=mlx5_9"], "selects none of: mlx5_0"),
        (
            vec!["--config", "/nonexistent/dqplb.toml"],
            "cannot read the config file",
        ),
        (vec!["--hca", "mlx5_0:x"], "NCCL_IB_HCA entry 'mlx5_0:x'"),
        (
            vec!["--alpha-update", "per-rtt"],
            "error: invalid value 'per-rtt' for '--alpha-update <S>'\n  [possible values: per-period, per-cnp]",
        ),
        (
            vec!["--samples", "2"],
            "error: the following required arguments were not provided:\n  --watch <SECONDS>",
        ),
    ] {
        let (code, out, err) = dqplb(&t, &args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let empty = FakeTree::new("empty").unwrap();
    let (code, _, err) = dqplb(&empty, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("no RDMA device under"), "{err}");
}

#[test]
fn config_file_and_hca_selection() {
    let t = stock_tree("config");
    t.add_device(
        "mlx5_1",
        "0000:3b:00.1",
        "mlx5_core",
        Some("ens1f1"),
        "200 Gb/sec (4X HDR)",
    )
    .unwrap();
    t.set_cc_params("0000:3b:00.1", &[("rp_ai_rate", 50)], true)
        .unwrap();
    t.set_ecn("ens1f1", &[5], &[5]).unwrap();
    let cfg = t.root().join("site.toml");
    let mut f = std::fs::File::create(&cfg).unwrap();
    writeln!(
        f,
        "[fabric]\nmax-rails = 8\n\n[dcqcn]\nprofile = \"site\"\nroce-priority = 5\n\
         [dcqcn.profiles.site]\nextends = \"nvidia-default\"\n\
         expect.rp_ai_rate = {{ min = 40, max = 60, severity = \"critical\", reason = \"site AI\" }}\n"
    )
    .unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let (code, out, err) = dqplb(&t, &["--config", cfg_s, "--hca", "=mlx5_1:1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(
            "device mlx5_1  pci 0000:3b:00.1  netdev ens1f1  profile site  roce-priority 5"
        ),
        "{out}"
    );
    assert!(!out.contains("device mlx5_0"), "{out}");
    assert!(out.contains("model at 200.00 Gb/s"), "{out}");
    // NCCL_IB_HCA selects when --hca is absent; NCCL_DQPLB_DCQCN_PROFILE overrides the file.
    let (code, out, _) = dqplb_env(
        &t,
        &["--config", cfg_s],
        &[
            ("NCCL_IB_HCA", "^mlx5_0"),
            ("NCCL_DQPLB_DCQCN_PROFILE", "ai-training"),
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("device mlx5_1  pci 0000:3b:00.1  netdev ens1f1  profile ai-training"),
        "{out}"
    );
    assert!(
        out.contains("=> MISMATCH: 15 ok, 1 failed, 0 unknown"),
        "{out}"
    );
    assert!(
        out.contains("! rp_hai_rate: expected 100..2000, actual 50"),
        "{out}"
    );
    assert!(!out.contains("device mlx5_0"), "{out}");
    // mlx5_0 has AI 5 and ECN only on priority 3.
    let (code, out, _) = dqplb(&t, &["--config", cfg_s, "--hca", "mlx5_0"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("! rp_ai_rate: expected 40..60, actual 5 - site AI"),
        "{out}"
    );
    assert!(out.contains("! ecn/roce_rp/enable/5"), "{out}");
    // Unknown key in [dcqcn] is a usage error naming it.
    std::fs::write(&cfg, "[dcqcn]\nprofil = \"x\"\n").unwrap();
    let (code, _, err) = dqplb(&t, &["--config", cfg_s]);
    assert_eq!(code, 2);
    assert!(err.contains("profil"), "{err}");
}

#[test]
fn watch_prints_counter_rates() {
    let t = stock_tree("watch");
    let (code, out, err) = dqplb(&t, &["--watch", "0.05", "--samples", "2"]);
    assert_eq!(code, 0, "{err}");
    let rates: Vec<&str> = out.lines().filter(|l| l.starts_with("t=")).collect();
    assert_eq!(rates.len(), 2, "{out}");
    assert!(rates[0].contains("mlx5_0 port 1: rp_cnp_handled 0.0/s  rp_cnp_ignored 0.0/s  np_cnp_sent 0.0/s  np_ecn_marked_roce_packets 0.0/s"), "{out}");
}

/// Collects formatted tracing output.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    let cap = Capture::default();
    let writer = cap.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .finish();
    let out = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8(cap.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

#[test]
fn preflight_logs_and_strict_failure() {
    let t = stock_tree("preflight");
    t.set_cc_raw(BDF, "rp_ai_rate", "7\n").unwrap();
    t.set_cc_raw(BDF, "rp_gd", "x\n").unwrap();
    t.remove(&cc_rel(BDF, "rp_max_rate")).unwrap();
    let devices = vec!["mlx5_0".to_string()];
    let section = DcqcnSection::default();

    let (res, log) = logged(|| preflight(&section, &devices, &t.roots()));
    let summary = res.expect("not strict: Ok");
    assert_eq!((summary.failures, summary.unknown), (2, 1));
    let infos: Vec<&str> = log.lines().filter(|l| l.contains("INFO")).collect();
    let warns: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(infos.len(), 2, "{log}"); // summary + one unknown line
    assert!(infos[0].contains("dqplb::dcqcn"), "{log}");
    assert!(infos[0].contains("mlx5_0 (pci 0000:3b:00.0, netdev ens1f0): profile nvidia-default: 18 ok, 2 mismatched, 1 unknown"), "{log}");
    assert!(
        infos[1].contains(
            "UNVERIFIED: 1 checked value(s) unreadable, so DCQCN cannot be confirmed (not a failure): file missing"
        ),
        "{log}"
    );
    assert_eq!(warns.len(), 2, "{log}");
    let ai_path = t
        .roots()
        .debugfs
        .join("mlx5")
        .join(BDF)
        .join("cc_params/rp_ai_rate");
    assert!(
        warns[0].contains(&format!(
            "{} expected 5, actual 7 [warning]",
            ai_path.display()
        )),
        "{log}"
    );
    assert!(
        warns[1].contains("actual garbage (not a number: \"x\")"),
        "{log}"
    );

    let strict = DcqcnSection {
        strict: true,
        ..DcqcnSection::default()
    };
    match preflight(&strict, &devices, &t.roots()) {
        Err(PreflightError::Mismatch {
            failures,
            devices,
            profile,
        }) => {
            assert_eq!(
                (failures, devices, profile.as_str()),
                (2, vec!["mlx5_0".to_string()], "nvidia-default")
            );
        }
        other => panic!("expected strict mismatch, got {other:?}"),
    }
    // Unknown values alone never fail, even strict.
    let clean = stock_tree("preflight-clean");
    clean.remove("debug/mlx5").unwrap();
    assert!(preflight(&strict, &devices, &clean.roots()).is_ok());
    // A bad profile name: warning and Ok when not strict, Err when strict.
    let bad = DcqcnSection {
        profile: "nope".into(),
        ..DcqcnSection::default()
    };
    let s = preflight(&bad, &devices, &clean.roots()).unwrap();
    assert!(s.profile_error.is_some() && s.reports.is_empty());
    let bad_strict = DcqcnSection {
        strict: true,
        ..bad
    };
    assert!(matches!(
        preflight(&bad_strict, &devices, &clean.roots()),
        Err(PreflightError::Profile(_))
    ));
}
