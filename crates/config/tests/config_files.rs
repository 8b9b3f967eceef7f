//! Every shipped site config in plugin-conf/ parses, validates and yields its documented figures
//! (files named dcqcn* belong to the DCQCN checker and are tested there).

use std::path::{Path, PathBuf};

use dqplb_config::{
    embedded_default, load_path, ConnClass, HcaThirdField, LogLevel, PolicyName, SiteConfig,
};

fn conf_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugin-conf")
}

fn load(name: &str) -> SiteConfig {
    let path = conf_dir().join(name);
    match load_path(&path, &[]) {
        Ok(loaded) => loaded.config,
        Err(e) => panic!("{name}: {e}"),
    }
}

#[test]
fn every_site_file_parses() {
    let mut names: Vec<String> = std::fs::read_dir(conf_dir())
        .expect("plugin-conf/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml") && !n.starts_with("dcqcn"))
        .collect();
    names.sort();
    for required in [
        "default.toml",
        "rail-optimized-8rail-roce.toml",
        "two-dc.toml",
    ] {
        assert!(
            names.iter().any(|n| n == required),
            "missing {required} in {names:?}"
        );
    }
    for name in &names {
        let loaded = load_path(&conf_dir().join(name), &[]);
        assert!(
            loaded.is_ok(),
            "{name}: {:?}",
            loaded.err().map(|e| e.to_string())
        );
    }
}

#[test]
fn default_file_equals_built_in_defaults() {
    let from_file = load("default.toml");
    assert_eq!(from_file, SiteConfig::default());
    assert_eq!(
        embedded_default().expect("embedded default parses"),
        SiteConfig::default()
    );
    assert_eq!(from_file.engine.policy, PolicyName::DqplbLed);
    assert_eq!(from_file.engine.segment_bytes, 65_536);
    assert_eq!(from_file.engine.max_messages, 32);
    assert_eq!(from_file.engine.inflight_budget_bytes, 1 << 30);
    assert_eq!(from_file.fabric.hca_third_field, HcaThirdField::FabricId);
    assert_eq!(from_file.fabric.max_rails, 8);
    assert_eq!(from_file.class.cross_dc.qps, 16);
    assert_eq!(from_file.class.cross_dc.max_outstanding, 3);
    assert!(from_file.tcp.nodelay);
    assert!(from_file.stats.log_on_close);
    assert_eq!(from_file.log.level, None);
}

/// No shipped class may hold all of NCCL's data in flight: dqplb steers only when a slow QP's
/// window fills (docs/records/simulation.md, Sizing; `dqplb plan` notes such a class).
#[test]
fn every_site_class_window_is_below_nccls_data_in_flight() {
    let names = std::fs::read_dir(conf_dir())
        .expect("plugin-conf/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml") && !n.starts_with("dcqcn"));
    let embedded = embedded_default().expect("embedded default parses");
    let mut checked = 0;
    for (name, c) in names
        .map(|n| (n.clone(), load(&n)))
        .chain([("embedded".to_string(), embedded)])
    {
        for p in c.plans() {
            assert!(p.inflight_bytes < NCCL_INFLIGHT, "{name}: {p:?}");
            // A segment below NCCL's 512 KiB step: each step is several segments.
            assert!(p.segment_bytes < 512 * 1024, "{name}: {p:?}");
            checked += 1;
        }
    }
    assert!(checked >= 12, "{checked}");
}

/// NCCL's data in flight per connection: 8 steps of NCCL_BUFFSIZE / 8 (4 MiB by default).
const NCCL_INFLIGHT: u64 = 4 << 20;

#[test]
fn rail_optimized_site_figures() {
    let c = load("rail-optimized-8rail-roce.toml");
    assert_eq!(c.fabric.max_rails, 8);
    assert_eq!(c.engine.segment_bytes, 65_536);
    assert_eq!(c.class.same_rail.segment_bytes, None);
    assert_eq!(c.tcp.socket_buffer_bytes, 4 << 20);
    // same-rail: 400 Gb/s * 3 us = 150000 B = ceil(2.29) = 3 segments of 64 KiB -> max 2.
    let same = c.plan(ConnClass::SameRail);
    assert_eq!(
        (same.bdp_bytes, same.bdp_segments, same.outstanding),
        (150_000, 3, 2)
    );
    assert_eq!(same.inflight_bytes, 4 * 2 * 65_536);
    // cross-rail: 400 * 8 * 125 = 400000 B -> 7 segments of 64 KiB -> max 2; 1 MiB.
    let cross = c.plan(ConnClass::CrossRail);
    assert_eq!(
        (cross.bdp_bytes, cross.outstanding, cross.inflight_bytes),
        (400_000, 2, 1_048_576)
    );
    // cross-dc: 400 * 1000 * 125 = 5e7 B -> 763 segments -> max 3; 16 * 3 * 64 KiB = 3 MiB.
    let dc = c.plan(ConnClass::CrossDc);
    assert_eq!(
        (dc.outstanding, dc.inflight_bytes, dc.within_budget),
        (3, 3_145_728, true)
    );
    assert_eq!(dc.budget_note, None);
    for p in c.plans() {
        assert!(p.inflight_bytes < NCCL_INFLIGHT, "{p:?}");
    }
}

#[test]
fn two_dc_site_figures() {
    let c = load("two-dc.toml");
    assert_eq!(c.engine.max_messages, 64);
    assert_eq!(c.log.level, Some(LogLevel::Info));
    // cross-dc: 200 Gb/s * 4000 us = 1e8 B -> ceil(1017.3) = 1018 segments of 96 KiB -> max 1;
    // 32 QPs * 1 * 96 KiB = 3 MiB, below NCCL's 4 MiB in flight.
    let dc = c.plan(ConnClass::CrossDc);
    assert_eq!(dc.bdp_bytes, 100_000_000);
    assert_eq!((dc.qps, dc.ideal_outstanding, dc.outstanding), (32, 1, 1));
    assert_eq!(dc.segment_bytes, 98_304);
    assert_eq!(dc.inflight_bytes, 3_145_728);
    assert!(dc.within_budget);
    assert_eq!(dc.budget_note, None);
    let rail = c.plan(ConnClass::CrossRail);
    assert_eq!(
        (rail.bdp_bytes, rail.outstanding, rail.inflight_bytes),
        (500_000, 2, 1_048_576)
    );
    for p in c.plans() {
        assert!(p.inflight_bytes < NCCL_INFLIGHT, "{p:?}");
    }
}

#[test]
fn docs_name_every_key_and_variable() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/configuration.md exists");
    let mut missing = Vec::new();
    for spec in dqplb_config::keys::all_keys() {
        let leaf = spec.path.rsplit('.').next().unwrap_or(spec.path);
        if !doc.contains(&format!("`{leaf}`")) {
            missing.push(spec.path.to_string());
        }
        let var = dqplb_config::keys::env_name(spec.path);
        if !spec.path.starts_with("class.") && !doc.contains(&var) {
            missing.push(var);
        }
    }
    for alias in dqplb_config::env::ALIASES {
        if !doc.contains(alias) {
            missing.push(alias.to_string());
        }
    }
    assert!(missing.is_empty(), "not documented: {missing:?}");
}

#[test]
fn pinned_ecmp_site_figures() {
    let c = load("pinned-ecmp.toml");
    assert_eq!(
        c.class.cross_rail.path_pinning,
        dqplb_config::PathPinning::Relative
    );
    assert_eq!(c.class.cross_rail.ecmp_width(), 32);
    assert_eq!(
        c.class.same_rail.path_pinning,
        dqplb_config::PathPinning::Off
    );
    // NCCL's 512 KiB step over the 32 spines: 16 KiB; 16 QPs x 2 x 16 KiB = 512 KiB.
    let p = c.plan(ConnClass::CrossRail);
    assert_eq!(
        (p.qps, p.segment_bytes, p.outstanding, p.inflight_bytes),
        (16, 16_384, 2, 524_288)
    );
    assert_eq!(c.paths.polynomial, Some(0x04C1_1DB7));
}
