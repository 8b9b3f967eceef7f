//! Shared helpers of the `dqplb sim` process tests: run the built binary, read its output and its
//! charts (svg.rs), run a sweep as JSON, read JSON numbers with a message when they are not.
#![allow(dead_code)]

pub(crate) mod svg;

use std::process::{Command, Output};

use serde_json::Value;

/// The fabric of the dqplb-led and lp-split ring tests: 64 hosts x 2 rails, 8 leaves of 8, 8
/// spines.
pub(crate) fn fabric_64x2() -> dqplb_sim::FabricSpec {
    dqplb_sim::FabricSpec {
        hosts: 64,
        rails: 2,
        hosts_per_leaf: 8,
        spines: 8,
        ..Default::default()
    }
}

/// Runs the built `dqplb` with `args`.
pub(crate) fn dqplb(args: &[&str]) -> Output {
    dqplb_env(args, &[])
}

/// Runs the built `dqplb` with `args` and the extra environment variables `env`.
pub(crate) fn dqplb_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .args(args)
        .envs(env.iter().copied())
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("cannot run dqplb: {e}"),
    }
}

/// Runs `dqplb` with `prefix` then `extra`, which must exit 2 with `want` in its stderr.
pub(crate) fn assert_refused(prefix: &[&str], extra: &[&str], want: &str) {
    let args = [prefix, extra].concat();
    let out = dqplb(&args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = text(&out.stderr);
    assert!(err.contains(want), "{args:?}: {err}");
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `dqplb sim sweep FABRIC GRID --format json EXTRA`, which must succeed; its JSON.
pub(crate) fn sweep(fabric: &[&str], grid: &[&str], extra: &[&str]) -> Value {
    let mut args = vec!["sim", "sweep"];
    args.extend(fabric);
    args.extend(grid);
    args.extend(["--format", "json"]);
    args.extend(extra);
    let out = dqplb(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `dqplb sim --traffic TRAFFIC ARGS --format json`, which must succeed with every message
/// delivered once and no engine, protocol or order error; its results.
pub(crate) fn run_clean(traffic: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["sim", "--traffic", traffic, "--format", "json"];
    all.extend(args);
    let out = dqplb(&all);
    assert!(out.status.success(), "{all:?}: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rs = v.as_array().expect("array").clone();
    for r in &rs {
        assert_eq!(u(&r["missing"]), 0, "{r}");
        assert_eq!(
            u(&r["errors"]["engine"]) + u(&r["errors"]["protocol"]),
            0,
            "{r}"
        );
        assert_eq!(u(&r["errors"]["order"]), 0, "{r}");
        assert_eq!(r["traffic"], traffic);
    }
    rs
}

pub(crate) fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

pub(crate) fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// plugin-conf/default.toml's text.
pub(crate) fn default_toml() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugin-conf/default.toml"),
    )
    .unwrap()
}

/// `text` as site.toml in a fresh temp directory named after `tag`; returns the directory
/// (remove it) and the file.
pub(crate) fn toml_file(tag: &str, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("dqplb-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("site.toml");
    std::fs::write(&conf, text).unwrap();
    (dir, conf)
}

/// A site config in a fresh temp directory named after `tag`: plugin-conf/default.toml followed
/// by `block` (a `[fabric.sim]` table); returns the directory (remove it) and the file.
pub(crate) fn site_toml(tag: &str, block: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    toml_file(tag, &format!("{}{block}", default_toml()))
}
