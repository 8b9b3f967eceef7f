//! `dqplb sim` run as a process: the table, JSON and CSV outputs, a site TOML with a
//! `[fabric.sim]` block, and exit code 2 with the option named on bad input.

mod sim_support;

use serde_json::Value;
use sim_support::{default_toml, dqplb, dqplb_env, site_toml, text, toml_file};

const SMALL: [&str; 10] = [
    "sim",
    "--hosts",
    "16",
    "--rails",
    "2",
    "--hosts-per-leaf",
    "4",
    "--spines",
    "4",
    "--bytes=2M",
];

#[test]
fn table_lists_each_policy_and_q() {
    let mut args = SMALL.to_vec();
    args.extend([
        "--policy",
        "single-qp,static-split,dqplb,spray",
        "--qps",
        "4",
        "--mode",
        "b",
    ]);
    let out = dqplb(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    for p in ["single-qp", "static-split", "dqplb", "spray"] {
        assert!(s.lines().any(|l| l.starts_with(p)), "{p} missing:\n{s}");
    }
    assert!(s.contains("%ideal") && s.contains("split_bound%"), "{s}");
}

#[test]
fn json_and_csv_carry_the_same_run() {
    let mut args = SMALL.to_vec();
    args.extend(["--traffic", "permutation", "--format", "json"]);
    let out = dqplb(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let r = &v[0];
    assert_eq!(r["policy"], "dqplb");
    assert_eq!(r["qps"], 8);
    assert_eq!(r["traffic"], "permutation");
    assert_eq!(r["errors"]["protocol"], 0);
    assert_eq!(r["per_rail"].as_array().map(Vec::len), Some(2));
    let pct = r["pct_of_ideal"].as_f64().unwrap();
    assert!(pct > 0.0 && pct <= 100.0, "{pct}");
    // Same seed, same bytes, run after run.
    assert_eq!(dqplb(&args).stdout, out.stdout);
    let mut csv = SMALL.to_vec();
    csv.extend(["--traffic", "permutation", "--format", "csv"]);
    let out = dqplb(&csv);
    let s = text(&out.stdout);
    let mut lines = s.lines();
    assert!(lines.next().unwrap().starts_with("mode,policy,qps"));
    let row = lines.next().unwrap();
    assert!(row.starts_with("F,dqplb,8,"), "{row}");
    assert!(row.contains(&format!("{pct:.3}")), "{row} vs {pct}");
}

/// A 16-host, 1-rail leaf-shift of 1 MiB as a `[fabric.sim]` table.
const SIM_BLOCK: &str = "[fabric.sim]\nhosts = 16\nrails = 1\nhosts-per-leaf = 4\nspines = 4\nbytes = \"1M\"\ntraffic = \"leaf-shift\"\n";

#[test]
fn site_toml_with_a_fabric_sim_block() {
    // A sub-table of [fabric] may come anywhere after it: at the end of the file.
    let (dir, conf) = site_toml("sim-cli", &format!("\n{SIM_BLOCK}"));
    let out = dqplb(&[
        "sim",
        "--config",
        conf.to_str().unwrap(),
        "--format",
        "json",
        "--spines",
        "2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let r = &v[0];
    assert_eq!(r["hosts"], 16);
    assert_eq!(r["traffic"], "leaf-shift");
    // The command line wins over the file; the engine shape comes from the same-rail class.
    assert_eq!(r["spines"], 2);
    assert_eq!(r["qps"], 4);
    assert_eq!(r["policy"], "dqplb-led");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_exits_2_naming_the_option() {
    for (args, needle) in [
        (vec!["sim", "--policy", "ecmp"], "unknown policy"),
        // Every policy is named, the engine's and the simulator's own.
        (
            vec!["sim", "--policy", "ecmp"],
            "expected one of dqplb, dqplb-led, static-split, round-robin-message, single-qp, spray, dqplb-rehash, dqplb-led-rehash, lp-split",
        ),
        (vec!["sim", "--mode", "q"], "unknown mode 'q' (f, b or p)"),
        (
            vec!["sim", "--sample-us", "-5"],
            "error: invalid value '-5' for '--sample-us <U>': microseconds, 0 or more",
        ),
        (
            vec!["sim", "sweep", "--timeseries", "t.csv"],
            "--timeseries: the sweep writes no time series",
        ),
        (
            vec!["sim", "--mode", "p", "--ecn", "maybe"],
            "error: invalid value 'maybe' for '--ecn <on|off>': not on or off",
        ),
        (
            vec!["sim", "--hosts", "x"],
            "error: invalid value 'x' for '--hosts <N>': 'x' is not a valid number",
        ),
        (
            vec!["sim", "--frobnicate", "1"],
            "error: unexpected argument '--frobnicate' found",
        ),
        (
            vec!["sim", "--host", "8"],
            "tip: a similar argument exists: '--hosts'",
        ),
        (
            vec!["sim", "sweep", "--segment", "2K"],
            "error: invalid value '2K' for '--segment <LIST>': 2K: a multiple of 128 in 4K ..= 64M",
        ),
    ] {
        let out = dqplb(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(needle),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn an_unwritable_svg_directory_fails_before_the_run() {
    for args in [
        vec!["sim", "--svg", "/proc/dqplb-no-such-dir", "--hosts", "16"],
        vec![
            "sim",
            "sweep",
            "--svg",
            "/proc/dqplb-no-such-dir",
            "--qps",
            "1",
        ],
    ] {
        let out = dqplb(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("--svg /proc/dqplb-no-such-dir: cannot create it:"),
            "{args:?}: {err}"
        );
        // Nothing ran: no table, not even its header.
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    }
}

#[test]
fn progress_is_accepted_and_quiet_on_a_short_run() {
    let out = dqplb(&[
        "sim",
        "--progress",
        "--hosts",
        "16",
        "--policy",
        "dqplb,spray",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("runs done"),
        "{}",
        text(&out.stderr)
    );
}

/// `[fabric.sim]` first, then plugin-conf/default.toml with `engine.policy` set to `policy`.
fn sim_block_then_default(tag: &str, policy: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let base = default_toml().replace("policy = \"dqplb-led\"", &format!("policy = \"{policy}\""));
    toml_file(&format!("sim-{tag}"), &format!("{SIM_BLOCK}\n{base}"))
}

#[test]
fn config_errors_name_the_files_own_line_and_env_overrides_apply() {
    // The plugin's parser reads the file with [fabric.sim] blanked line for line: its message
    // names the line of the bad value in the file itself, not in a copy.
    let (dir, conf) = sim_block_then_default("cfg-line", "fast");
    let file = std::fs::read_to_string(&conf).unwrap();
    let line = 1 + file.lines().position(|l| l == "policy = \"fast\"").unwrap();
    let out = dqplb(&["sim", "--config", conf.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    let want = format!("{}:{line}:10: key 'engine.policy'", conf.display());
    assert!(err.contains(&want), "{want} not in {err}");
    let _ = std::fs::remove_dir_all(&dir);

    // NCCL_DQPLB_* overrides apply as in the plugin, and say so on stderr.
    let (dir, conf) = sim_block_then_default("cfg-env", "dqplb");
    let out = dqplb_env(
        &[
            "sim",
            "--config",
            conf.to_str().unwrap(),
            "--format",
            "json",
        ],
        &[("NCCL_DQPLB_ENGINE_POLICY", "dqplb-led")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v[0]["policy"], "dqplb-led");
    assert_eq!(v[0]["hosts"], 16);
    assert!(
        text(&out.stderr).contains("NCCL_DQPLB_ENGINE_POLICY=dqplb-led applies"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
