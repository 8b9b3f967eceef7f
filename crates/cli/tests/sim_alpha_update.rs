//! `dqplb sim --alpha-update per-cnp|per-period`, the `[fabric.sim]` key `alpha-update` and the
//! sweep's profile axis: which schedule runs, exact counts, and the refusals' exact text.

mod sim_support;

use sim_support::{default_toml, dqplb, text, toml_file};

/// 4-to-1 incast under one leaf, 4 MiB per sender, 16 x 4 MiB windows (milliseconds in debug).
const INCAST: [&str; 21] = [
    "sim",
    "--mode",
    "p",
    "--hosts",
    "5",
    "--rails",
    "1",
    "--hosts-per-leaf",
    "16",
    "--spines",
    "1",
    "--traffic",
    "incast",
    "--bytes",
    "4M",
    "--step-bytes",
    "4M",
    "--policy",
    "single-qp",
    "--outstanding",
    "16",
];

fn run_json(extra: &[&str]) -> (serde_json::Value, Vec<u8>) {
    let mut args = INCAST.to_vec();
    args.extend(["--slots", "16", "--format", "json"]);
    args.extend(extra);
    let out = dqplb(&args);
    assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    (v[0]["packet"].clone(), out.stdout)
}

#[test]
fn alpha_update_option_overrides_the_profile_in_any_order() {
    let cuts = |p: &serde_json::Value| p["rate_cuts"].as_u64().unwrap();
    let (fw, fw_bytes) = run_json(&[]);
    let (fw_period, fw_period_bytes) = run_json(&["--alpha-update", "per-period"]);
    let (fw_cnp, fw_cnp_bytes) = run_json(&["--dcqcn", "firmware", "--alpha-update", "per-cnp"]);
    let (_, fw_cnp_before) = run_json(&["--alpha-update=per-cnp", "--dcqcn", "firmware"]);
    let (paper, _) = run_json(&["--dcqcn", "paper"]);
    let (paper_period, _) = run_json(&["--alpha-update", "per-period", "--dcqcn", "paper"]);
    // The firmware profile's default is per-period; the option wins wherever it stands.
    assert_eq!(fw_bytes, fw_period_bytes);
    assert_eq!(fw_cnp_bytes, fw_cnp_before);
    assert_ne!(fw_bytes, fw_cnp_bytes);
    // Measured (4096 packets each): cuts per schedule.
    assert_eq!(
        (cuts(&fw), cuts(&fw_period), cuts(&fw_cnp)),
        (170, 170, 169)
    );
    assert_eq!((cuts(&paper), cuts(&paper_period)), (48, 45));
    assert_eq!(fw["packets"], 4096);

    for (bad, want) in [
        (
            "sometimes",
            "error: invalid value 'sometimes' for '--alpha-update <S>'\n",
        ),
        (
            "per-CNP",
            "error: invalid value 'per-CNP' for '--alpha-update <S>'\n",
        ),
        (
            "",
            "error: a value is required for '--alpha-update <S>' but none was supplied\n",
        ),
    ] {
        let mut args = INCAST.to_vec();
        args.extend(["--alpha-update", bad]);
        let out = dqplb(&args);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = text(&out.stderr);
        assert!(err.starts_with(want), "{err}");
        assert!(
            err.contains("[possible values: per-period, per-cnp]"),
            "{err}"
        );
    }
}

#[test]
fn alpha_update_key_of_fabric_sim() {
    let base = default_toml();
    let (dir, conf) = toml_file("alpha-update", &base);
    let write = |value: &str| {
        let sim = format!(
            "\n[fabric.sim]\nmode = \"p\"\nhosts = 5\nrails = 1\nhosts-per-leaf = 16\nspines = 1\n\
             traffic = \"incast\"\nbytes = \"4M\"\nstep-bytes = \"4M\"\nslots = 16\n\
             policy = \"single-qp\"\nqps = 8\noutstanding = 16\nsegment = \"128K\"\n\
             dcqcn = \"firmware\"\nalpha-update = {value}\n"
        );
        std::fs::write(&conf, format!("{base}{sim}")).unwrap();
    };
    let cfg = conf.to_str().unwrap().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec!["sim", "--config", &cfg, "--format", "json"];
        args.extend(extra);
        dqplb(&args)
    };
    // The key (before `dcqcn` in the file's sorted keys or after: the key wins over the profile)
    // gives the same run as the option; the command line wins over the key.
    write("\"per-cnp\"");
    let out = run(&[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout, run_json(&["--alpha-update", "per-cnp"]).1);
    let out = run(&["--alpha-update", "per-period"]);
    assert_eq!(out.stdout, run_json(&[]).1);
    let out = run(&["--dcqcn", "firmware"]);
    assert_eq!(out.stdout, run_json(&["--alpha-update", "per-cnp"]).1);

    for (value, shown) in [("\"never\"", "never"), ("3", "3")] {
        write(value);
        let out = run(&[]);
        assert_eq!(out.status.code(), Some(2), "{value}");
        let want = format!(
            "dqplb sim: {cfg}: [fabric.sim] --alpha-update '{shown}' (per-cnp or per-period)\n"
        );
        assert!(
            text(&out.stderr).starts_with(&want),
            "{}",
            text(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The sweep's DCQCN axis: each profile keeps its own schedule unless `--alpha-update` is
/// given, which then applies to every profile (and is named in the JSON and the block).
#[test]
fn sweep_carries_the_schedule_through_the_profile_axis() {
    let sweep = |extra: &[&str]| {
        let mut args = INCAST.to_vec();
        args[0] = "sweep";
        let mut full = vec!["sim"];
        full.extend(args);
        full.extend([
            "--slots",
            "16",
            "--qps",
            "8",
            "--segment",
            "128K",
            "--dcqcn",
            "firmware,paper",
            "--format",
            "json",
        ]);
        full.extend(extra);
        let out = dqplb(&full);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let schedules = |v: &serde_json::Value| -> Vec<String> {
        v["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["alpha_update"].as_str().unwrap().to_string())
            .collect()
    };
    let cuts = |v: &serde_json::Value| -> Vec<u64> {
        v["profile_points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["rate_cuts"].as_u64().unwrap())
            .collect()
    };
    let own = sweep(&[]);
    assert_eq!(schedules(&own), ["per-period", "per-cnp"]);
    // The same runs as dqplb sim's (firmware 170 per period, paper 48 per CNP).
    assert_eq!(cuts(&own), [170, 48]);
    let cnp = sweep(&["--alpha-update", "per-cnp"]);
    assert_eq!(schedules(&cnp), ["per-cnp", "per-cnp"]);
    assert_eq!(cuts(&cnp), [169, 48]);
    let block = cnp["dcqcn_block"].as_str().unwrap();
    assert!(
        block.contains("# Simulated with the per-cnp alpha update"),
        "{block}"
    );
}
