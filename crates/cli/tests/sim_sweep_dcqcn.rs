//! `dqplb sim sweep --mode p --dcqcn LIST` as a process: the chosen profile is the one the stated
//! rule picks from the per-profile results it reports, its `[dcqcn]` block parses with the site
//! config parser and resolves (as `dqplb check` does) to the simulated values, a site file's
//! profile is read through `dqplb check`'s resolver, and B and F mode refuse the axis.

mod sim_support;

use std::path::PathBuf;

use dqplb_config::parse_str;
use dqplb_dcqcn::profile::resolve;
use dqplb_sim::packet::dcqcn_profile;
use dqplb_sim::sweep_profile::{cc_values, params_of_profile};
use serde_json::Value;
use sim_support::{dqplb, f, text, u};

/// 4-to-1 incast under one leaf (the receiver's downlink is the bottleneck, so ECN marks and
/// DCQCN acts), 4 MiB per sender: tens of milliseconds per run in debug.
const FABRIC: [&str; 14] = [
    "--mode",
    "p",
    "--hosts",
    "5",
    "--rails",
    "1",
    "--hosts-per-leaf",
    "8",
    "--spines",
    "1",
    "--traffic",
    "incast",
    "--bytes",
    "4M",
];

const GRID: [&str; 6] = [
    "--qps",
    "1,2",
    "--outstanding",
    "2,4",
    "--segment",
    "64K,128K",
];

fn sweep(extra: &[&str]) -> Value {
    sim_support::sweep(&FABRIC, &GRID, extra)
}

fn key(p: &Value) -> (u64, u64, u64) {
    (u(&p["qps"]), u(&p["outstanding"]), u(&p["segment_bytes"]))
}

/// A file in the temp directory, unique to this process and test.
fn temp_file(name: &str, body: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("dqplb-sweep-dcqcn-{}-{name}", std::process::id()));
    std::fs::write(&p, body).expect("write temp file");
    p
}

/// A site config in the syntax `dqplb check --config` reads: a profile extending a built-in
/// check profile (ranges) with exact overrides, the CNP interval among them.
const SITE: &str = r#"
[dcqcn]
profile = "site"

[dcqcn.profiles.site]
description = "fast recovery"
extends = "ai-training"

[dcqcn.profiles.site.expect]
rp_time_reset = { value = 100, reason = "site" }
rp_ai_rate = { value = 200, reason = "site" }
rp_dce_tcp_rtt = { value = 20, reason = "site" }
np_min_time_between_cnps = { value = 20, reason = "site" }
"#;

/// The simulated parameters of a printed `[dcqcn]` block, through the plugin's config parser and
/// `dqplb check`'s resolver: (cc_params in kernel order, CNP interval).
fn block_values(block: &str) -> (Vec<(String, u64)>, u64) {
    let site = parse_str(block, "block").unwrap_or_else(|e| panic!("{e}\n{block}"));
    let p = resolve(&site.dcqcn, &site.dcqcn.profile).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        p.rules.len(),
        17,
        "every modelled parameter, exact: {block}"
    );
    assert!(p
        .rules
        .iter()
        .all(|r| matches!(r.expected, dqplb_dcqcn::Expected::Exact(_))));
    let (rp, cnp) = params_of_profile(&p, 0);
    (
        cc_values(&rp)
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        cnp,
    )
}

fn reported_values(profile: &Value) -> (Vec<(String, u64)>, u64) {
    let cc = profile["cc_params"].as_object().unwrap();
    let names = cc_values(&dcqcn_profile("firmware").unwrap());
    (
        names
            .iter()
            .map(|(k, _)| (k.to_string(), u(&cc[*k])))
            .collect(),
        u(&profile["np_min_time_between_cnps"]),
    )
}

#[test]
fn the_chosen_profile_follows_the_rule_and_its_block_round_trips() {
    let site = temp_file("site.toml", SITE);
    let site_arg = site.display().to_string();
    let v = sweep(&["--dcqcn", &format!("firmware,paper,{site_arg}")]);
    let profiles = v["profiles"].as_array().unwrap();
    let names: Vec<&str> = profiles
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["firmware", "paper", "site"]);
    // The built-ins are P mode's profiles; the site profile is ai-training's ranges at the value
    // nearest the firmware default, with the site's exact values on top.
    for (i, n) in ["firmware", "paper"].iter().enumerate() {
        let rp = dcqcn_profile(n).unwrap();
        let want: Vec<(String, u64)> = cc_values(&rp)
            .iter()
            .map(|(k, x)| (k.to_string(), *x))
            .collect();
        assert_eq!(reported_values(&profiles[i]), (want, 4));
    }
    let (site_cc, site_cnp) = reported_values(&profiles[2]);
    let get = |k: &str| site_cc.iter().find(|(n, _)| n == k).unwrap().1;
    assert_eq!(site_cnp, 20);
    assert_eq!(
        (
            get("rp_time_reset"),
            get("rp_ai_rate"),
            get("rp_dce_tcp_rtt")
        ),
        (100, 200, 20)
    );
    // ai-training: hai 100..2000 (firmware 50 -> 100), byte_reset 16384..32767 (32767 stays),
    // threshold 1..5 (1 stays); unchecked dce_tcp_g keeps 1019.
    assert_eq!(
        (
            get("rp_hai_rate"),
            get("rp_byte_reset"),
            get("rp_threshold"),
            get("rp_dce_tcp_g")
        ),
        (100, 32767, 1, 1019)
    );

    // Every grid point once per profile.
    let pts = v["profile_points"].as_array().unwrap();
    assert_eq!(pts.len(), 2 * 2 * 2 * 3);
    assert_eq!(v["points"].as_array().unwrap().len(), pts.len());
    // The q / depth / segment analysis ran on the fastest clean profile per point: its chosen
    // time is that envelope's time at the chosen point.
    let fi = &v["findings"];
    let at = (
        u(&fi["qps"]),
        u(&fi["outstanding"]),
        u(&fi["segment_bytes"]),
    );
    let here: Vec<&Value> = pts.iter().filter(|p| key(&p["point"]) == at).collect();
    assert_eq!(here.len(), 3);
    let clean: Vec<&&Value> = here
        .iter()
        .filter(|p| u(&p["point"]["faults"]) == 0)
        .collect();
    let t_min = clean
        .iter()
        .map(|p| f(&p["point"]["time_over_ideal"]))
        .fold(f64::INFINITY, f64::min);
    assert_eq!(f(&fi["time_over_ideal"]), t_min);
    for q in [1, 2] {
        for d in [2, 4] {
            for s in [64 << 10, 128 << 10] {
                let best = pts
                    .iter()
                    .filter(|p| key(&p["point"]) == (q, d, s) && u(&p["point"]["faults"]) == 0)
                    .map(|p| f(&p["point"]["time_over_ideal"]))
                    .fold(f64::INFINITY, f64::min);
                let per_q = fi["per_q"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| u(&x["qps"]) == q)
                    .unwrap();
                assert!(f(&per_q["best_time_over_ideal"]) <= best, "q={q}");
            }
        }
    }

    // The per-profile report is the runs at that point, and the choice is the stated rule:
    // among the clean profiles within 0.5% of the fastest, fewest marks, then lowest peak
    // queue, then the first listed.
    let c = &v["dcqcn"];
    assert_eq!(
        (u(&c["qps"]), u(&c["outstanding"]), u(&c["segment_bytes"])),
        at
    );
    let per = c["per_profile"].as_array().unwrap();
    assert_eq!(per.len(), 3);
    for (i, r) in per.iter().enumerate() {
        let p = here.iter().find(|p| u(&p["profile"]) == i as u64).unwrap();
        assert_eq!(r["name"].as_str().unwrap(), names[i]);
        assert_eq!(r["time_over_ideal"], p["point"]["time_over_ideal"]);
        for k in ["ecn_marks", "cnps", "rate_cuts", "max_queue_bytes"] {
            assert_eq!(r[k], p[k], "{k}");
        }
    }
    let tied: Vec<usize> = (0..3)
        .filter(|&i| u(&per[i]["faults"]) == 0 && f(&per[i]["time_over_ideal"]) <= 1.005 * t_min)
        .collect();
    for (i, r) in per.iter().enumerate() {
        assert_eq!(r["tied"].as_bool().unwrap(), tied.contains(&i));
    }
    let want = *tied
        .iter()
        .min_by_key(|&&i| (u(&per[i]["ecn_marks"]), u(&per[i]["max_queue_bytes"]), i))
        .unwrap();
    assert_eq!(u(&c["chosen"]), want as u64);
    assert_eq!(c["chosen_name"].as_str().unwrap(), names[want]);
    // DCQCN acted here: the incast is marked under both built-in profiles.
    assert!(per
        .iter()
        .all(|r| u(&r["ecn_marks"]) > 0 && u(&r["cnps"]) > 0));

    // The block parses with the site config parser and resolves to the chosen profile's values.
    let block = v["dcqcn_block"].as_str().unwrap();
    assert!(block.contains(&format!("profile = \"sim-{}\"", names[want])));
    assert_eq!(block_values(block), reported_values(&profiles[want]));
    // Pasted into the shipped default config (which has no [dcqcn] table) it still parses.
    let base = include_str!("../../../plugin-conf/default.toml");
    assert!(!base.contains("\n[dcqcn]"));
    let merged = format!("{base}\n{block}");
    assert_eq!(
        parse_str(&merged, "merged").unwrap().dcqcn,
        parse_str(block, "block").unwrap().dcqcn
    );

    // The site profile alone: chosen, and its block carries the site's values.
    let v = sweep(&["--dcqcn", &site_arg, "--qps", "1", "--outstanding", "4"]);
    assert_eq!(v["dcqcn"]["chosen_name"].as_str().unwrap(), "site");
    let block = v["dcqcn_block"].as_str().unwrap();
    assert_eq!(block_values(block), (site_cc.clone(), 20));

    // The table output prints the per-profile lines and the same block.
    let mut args = vec!["sim", "sweep"];
    args.extend(FABRIC);
    args.extend(["--qps", "1", "--outstanding", "4", "--segment", "64K,128K"]);
    args.extend(["--dcqcn", &site_arg]);
    let out = dqplb(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains(block), "{s}");
    assert!(s.contains("chosen DCQCN profile: site"), "{s}");
    let _ = std::fs::remove_file(site);
}

#[test]
fn profiles_files_and_bad_lists() {
    // The layout of plugin-conf/dcqcn-profiles.toml: [profiles.NAME], chosen by FILE:NAME.
    let file = temp_file(
        "profiles.toml",
        "[profiles.a.expect]\nrp_ai_rate = { value = 77 }\n\
         [profiles.b]\nextends = \"a\"\n[profiles.b.expect]\nrp_hai_rate = { value = 99 }\n",
    );
    let path = file.display().to_string();
    let v = sweep(&[
        "--dcqcn",
        &format!("{path}:b,firmware"),
        "--qps",
        "1",
        "--outstanding",
        "4",
        "--segment",
        "128K",
    ]);
    let b = &v["profiles"][0];
    assert_eq!(b["name"], "b");
    assert_eq!(
        (
            u(&b["cc_params"]["rp_ai_rate"]),
            u(&b["cc_params"]["rp_hai_rate"])
        ),
        (77, 99)
    );
    for (list, needle) in [
        ("fast", "firmware or paper"),
        ("firmware,firmware", "twice"),
        (path.as_str(), "name one of its profiles (a, b)"),
        ("/nonexistent/x.toml", "/nonexistent/x.toml"),
        (&format!("{path}:zz"), "unknown DCQCN profile \"zz\""),
    ] {
        let mut args = vec!["sim", "sweep"];
        args.extend(FABRIC);
        args.extend(["--qps", "1", "--dcqcn", list]);
        let out = dqplb(&args);
        assert_eq!(out.status.code(), Some(2), "{list}");
        assert!(
            text(&out.stderr).contains(needle),
            "{list}: {}",
            text(&out.stderr)
        );
    }
    let _ = std::fs::remove_file(file);
}

#[test]
fn b_and_f_mode_refuse_the_axis() {
    let msg = "dqplb sim sweep: --dcqcn is a P-mode axis: B and F mode model no ECN, CNPs or DCQCN (add --mode p)";
    for mode in [None, Some("b"), Some("f")] {
        let mut args = vec![
            "sim",
            "sweep",
            "--hosts",
            "8",
            "--rails",
            "1",
            "--qps",
            "1",
            "--dcqcn",
            "firmware,paper",
        ];
        if let Some(m) = mode {
            args.extend(["--mode", m]);
        }
        let out = dqplb(&args);
        assert_eq!(out.status.code(), Some(2), "{mode:?}");
        let err = text(&out.stderr);
        assert!(err.starts_with(&format!("{msg}\n")), "{mode:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}
