//! NCCL_DQPLB_* overrides through `load_with` with an injected environment: per-key variables,
//! short aliases and their precedence, reserved names, and errors naming the variable.

use std::path::Path;

use dqplb_config::{
    load_with, ConfigError, ConfigErrorKind, LoadedConfig, PolicyName, SiteConfig, EMBEDDED_ORIGIN,
};

const NO_ETC: &str = "/nonexistent-dqplb-dir/nccl-dqplb.toml";

fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn load(list: &[(&str, &str)]) -> Result<LoadedConfig, ConfigError> {
    let all = vars(list);
    let lookup = |name: &str| all.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    load_with(&lookup, &all, Path::new(NO_ETC))
}

fn config(list: &[(&str, &str)]) -> SiteConfig {
    match load(list) {
        Ok(l) => l.config,
        Err(e) => panic!("{list:?}: {e}"),
    }
}

#[test]
fn single_key_overrides() {
    let c = config(&[
        ("NCCL_DQPLB_CLASS_CROSS_DC_QPS", "32"),
        ("NCCL_DQPLB_ENGINE_POLICY", "static-split"),
        ("NCCL_DQPLB_CLASS_SAME_RAIL_RTT_US", "2.5"),
        ("NCCL_DQPLB_TCP_NODELAY", "false"),
        ("NCCL_DQPLB_LOG_LEVEL", "trace"),
        ("NCCL_DQPLB_FABRIC_HCA_THIRD_FIELD", "rail:plane"),
    ]);
    let mut want = SiteConfig::default();
    want.class.cross_dc.qps = 32;
    want.engine.policy = PolicyName::StaticSplit;
    want.class.same_rail.rtt_us = 2.5;
    want.tcp.nodelay = false;
    want.log.level = Some(dqplb_config::LogLevel::Trace);
    want.fabric.hca_third_field = dqplb_config::HcaThirdField::RailPlane;
    assert_eq!(c, want);
}

#[test]
fn aliases_set_every_class() {
    let c = config(&[
        ("NCCL_DQPLB_POLICY", "round-robin-message"),
        ("NCCL_DQPLB_QPS", "12"),
        ("NCCL_DQPLB_SEGMENT_BYTES", "65536"),
        ("NCCL_DQPLB_OUTSTANDING", "48"),
    ]);
    assert_eq!(c.engine.policy, PolicyName::RoundRobinMessage);
    assert_eq!(c.engine.segment_bytes, 65536);
    for spec in [&c.class.same_rail, &c.class.cross_rail, &c.class.cross_dc] {
        assert_eq!(spec.qps, 12);
        assert_eq!(spec.segment_bytes, Some(65536));
        assert_eq!((spec.min_outstanding, spec.max_outstanding), (48, 48));
    }
}

#[test]
fn specific_variable_beats_alias_whatever_the_order() {
    let loaded = load(&[
        ("NCCL_DQPLB_CLASS_CROSS_DC_QPS", "64"),
        ("NCCL_DQPLB_QPS", "2"),
    ])
    .expect("loads");
    assert_eq!(loaded.config.class.cross_dc.qps, 64);
    assert_eq!(loaded.config.class.same_rail.qps, 2);
    assert_eq!(loaded.source, EMBEDDED_ORIGIN);
    assert_eq!(
        loaded.overrides,
        vars(&[
            ("NCCL_DQPLB_QPS", "2"),
            ("NCCL_DQPLB_CLASS_CROSS_DC_QPS", "64")
        ])
    );
}

#[test]
fn reserved_and_foreign_variables_are_ignored() {
    let c = config(&[
        ("NCCL_DQPLB_DEBUG_TRACE_SEGMENTS", "1"),
        ("NCCL_IB_HCA", "mlx5"),
        ("PATH", "/usr/bin"),
    ]);
    assert_eq!(c, SiteConfig::default());
}

/// An unknown NCCL_DQPLB_* variable is ignored with one warning naming the nearest accepted
/// name (NCCL ignores unknown NCCL_* variables); an empty value is unset.
#[test]
fn unknown_variable_is_one_warning_with_the_nearest_name() {
    let l = load(&[("NCCL_DQPLB_QPSS", "4")]).expect("an unknown variable is not fatal");
    assert_eq!(l.config, SiteConfig::default());
    assert_eq!(
        l.warnings,
        ["NCCL_DQPLB_QPSS=4: unknown variable, ignored; did you mean NCCL_DQPLB_QPS?"]
    );
    let l = load(&[
        ("NCCL_DQPLB_CLASS_CROSS_DC_QP", "4"),
        ("NCCL_DQPLB_POLICY", "static-split"),
    ])
    .expect("loads");
    assert_eq!(l.config.engine.policy, PolicyName::StaticSplit);
    assert_eq!(
        l.warnings,
        ["NCCL_DQPLB_CLASS_CROSS_DC_QP=4: unknown variable, ignored; did you mean NCCL_DQPLB_CLASS_CROSS_DC_QPS?"]
    );
    // A long name or value is cut in the warning.
    let long = format!("NCCL_DQPLB_{}", "X".repeat(200));
    let l = load(&[(long.as_str(), "1")]).expect("loads");
    assert!(l.warnings[0].len() < 200, "{}", l.warnings[0]);
    assert!(
        l.warnings[0].contains("... (211 bytes)=1"),
        "{}",
        l.warnings[0]
    );
    // Empty values are unset: no override, no error, no warning.
    let l = load(&[
        ("NCCL_DQPLB_QPS", ""),
        ("NCCL_DQPLB_NOPE", ""),
        ("NCCL_DQPLB_CONF", ""),
    ])
    .expect("empty is unset");
    assert_eq!(
        (l.config, l.overrides.len(), l.warnings.len()),
        (SiteConfig::default(), 0, 0)
    );
    assert_eq!(l.source, EMBEDDED_ORIGIN);
}

#[test]
fn bad_values_name_variable_key_and_range() {
    let e = load(&[("NCCL_DQPLB_CLASS_CROSS_DC_QPS", "129")]).expect_err("out of range");
    assert_eq!(e.kind, ConfigErrorKind::OutOfRange);
    assert_eq!(
        e.to_string(),
        "environment: NCCL_DQPLB_CLASS_CROSS_DC_QPS: key 'class.cross-dc.qps': value 129 is out \
         of range (accepted: an integer in 1..=128)"
    );
    let e = load(&[("NCCL_DQPLB_POLICY", "fast")]).expect_err("bad policy");
    assert_eq!(
        e.to_string(),
        "environment: NCCL_DQPLB_POLICY: key 'engine.policy': 'fast' is not accepted (accepted: \
         one of \"dqplb\", \"dqplb-led\", \"static-split\", \"round-robin-message\", \"single-qp\")"
    );
    let e = load(&[("NCCL_DQPLB_SEGMENT_BYTES", "1000")]).expect_err("bad segment");
    assert!(
        e.to_string()
            .contains("a multiple of 128 in 4096..=67108864"),
        "{e}"
    );
    let e = load(&[("NCCL_DQPLB_STATS_LOG_ON_CLOSE", "maybe")]).expect_err("bad bool");
    assert!(
        e.to_string()
            .contains("'maybe' is not a boolean (accepted: true or false)"),
        "{e}"
    );
}

#[test]
fn cross_field_error_blames_the_variable() {
    // The file's min-outstanding 4 against the variable's max 2 (the default's min is 1, so the
    // file sets one above it).
    let path = std::env::temp_dir().join(format!("dqplb-cross-field-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "[class.same-rail]\nmin-outstanding = 4\nmax-outstanding = 8\n",
    )
    .expect("temp config written");
    let conf = path.display().to_string();
    let e = load(&[
        ("NCCL_DQPLB_CONF", conf.as_str()),
        ("NCCL_DQPLB_CLASS_SAME_RAIL_MAX_OUTSTANDING", "2"),
    ])
    .expect_err("min > max");
    let _ = std::fs::remove_file(&path);
    assert_eq!(e.kind, ConfigErrorKind::Inconsistent);
    assert_eq!(
        e.variable.as_deref(),
        Some("NCCL_DQPLB_CLASS_SAME_RAIL_MAX_OUTSTANDING")
    );
    assert_eq!(e.key.as_deref(), Some("class.same-rail.max-outstanding"));
    assert!(
        e.to_string()
            .contains("min-outstanding 4 is greater than max-outstanding 2"),
        "{e}"
    );
}

#[test]
fn dcqcn_keys_are_overridable_by_their_own_type() {
    let table = match toml::Value::try_from(SiteConfig::default().dcqcn) {
        Ok(toml::Value::Table(t)) => t,
        other => panic!("[dcqcn] does not serialise to a table: {other:?}"),
    };
    let mut tried = 0;
    for (key, value) in &table {
        let var = format!(
            "NCCL_DQPLB_DCQCN_{}",
            key.to_ascii_uppercase().replace('-', "_")
        );
        let (raw, want) = match value {
            toml::Value::Boolean(b) => ((!b).to_string(), toml::Value::Boolean(!b)),
            toml::Value::String(_) => ("x-test".to_string(), toml::Value::String("x-test".into())),
            _ => continue,
        };
        tried += 1;
        let c = config(&[(var.as_str(), raw.as_str())]);
        let got = toml::Value::try_from(c.dcqcn).expect("serialises");
        assert_eq!(got.get(key), Some(&want), "{var}");
    }
    assert!(
        tried > 0,
        "no bool or string key in [dcqcn] to exercise: {table:?}"
    );
    let l = load(&[("NCCL_DQPLB_DCQCN_NO_SUCH_KEY", "1")]).expect("unknown dcqcn key");
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    assert!(l.warnings[0].starts_with("NCCL_DQPLB_DCQCN_NO_SUCH_KEY=1: unknown variable, ignored; did you mean NCCL_DQPLB_DCQCN_"), "{:?}", l.warnings);
}
