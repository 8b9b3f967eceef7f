//! The re-pin rule per class (`repin-ratio`, `repin-persist`, `repin-settle`, `repin-budget`): on
//! by default where a class pins and runs the depth rule, its overrides and the accepted values.

use dqplb_config::load::load_text;
use dqplb_config::{parse_str, ConfigErrorKind, ConnClass, RepinRuleSpec, SiteConfig};

const PINNED: &str = "[class.cross-rail]\nqps = 16\nmax-outstanding = 2\n\
                      path-pinning = \"relative\"\necmp-width = 32\n";

const DEFAULT: RepinRuleSpec = RepinRuleSpec {
    ratio: 1.3,
    persist: 6,
    settle: 16,
    budget: 16,
};

#[test]
fn off_without_pinning_and_on_for_a_pinned_class_with_the_depth_rule() {
    let c = SiteConfig::default();
    for class in ConnClass::ALL {
        let spec = c.class.get(class);
        assert_eq!(
            (
                spec.repin_ratio,
                spec.repin_persist,
                spec.repin_settle,
                spec.repin_budget
            ),
            (1.3, None, 16, 16)
        );
        assert_eq!(spec.repin_rule(), None, "{class:?}");
        assert_eq!(c.plan(class).repin_rule, None);
    }
    let c = parse_str(PINNED, "site.toml").unwrap();
    assert_eq!(c.class.cross_rail.repin_rule(), Some(DEFAULT));
    assert_eq!(c.plan(ConnClass::CrossRail).repin_rule, Some(DEFAULT));
    assert_eq!(c.class.same_rail.repin_rule(), None);
    // repin-persist = 0 turns it off; so does turning the depth rule off.
    let c = parse_str(&format!("{PINNED}repin-persist = 0\n"), "site.toml").unwrap();
    assert_eq!(c.class.cross_rail.repin_rule(), None);
    assert!(c.class.cross_rail.depth_rule().is_some());
    let c = parse_str(&format!("{PINNED}depth-raised = 0\n"), "site.toml").unwrap();
    assert_eq!(c.class.cross_rail.repin_rule(), None);
    // An unpinned class has no source port to move onto, even with the depth rule and a
    // persist set.
    let c = parse_str(
        "[class.same-rail]\ndepth-raised = 4\nrepin-persist = 3\n",
        "site.toml",
    )
    .unwrap();
    assert!(c.class.same_rail.depth_rule().is_some());
    assert_eq!(c.class.same_rail.repin_rule(), None);
}

#[test]
fn not_where_the_switches_hash_the_destination_qpn() {
    let c = parse_str(
        &format!("{PINNED}[paths]\nhash-dest-qpn = true\n"),
        "site.toml",
    )
    .unwrap();
    assert_eq!(c.class.cross_rail.repin_rule(), Some(DEFAULT));
    assert_eq!(c.repin_rule(ConnClass::CrossRail), None);
    assert_eq!(c.plan(ConnClass::CrossRail).repin_rule, None);
    assert!(c.plan(ConnClass::CrossRail).depth_rule.is_some());
    let c = parse_str(PINNED, "site.toml").unwrap();
    assert_eq!(c.repin_rule(ConnClass::CrossRail), Some(DEFAULT));
}

#[test]
fn the_file_and_the_environment_set_it() {
    let c = parse_str(
        &format!(
            "{PINNED}repin-ratio = 1.5\nrepin-persist = 3\nrepin-settle = 8\nrepin-budget = 4\n"
        ),
        "site.toml",
    )
    .unwrap();
    assert_eq!(
        c.class.cross_rail.repin_rule(),
        Some(RepinRuleSpec {
            ratio: 1.5,
            persist: 3,
            settle: 8,
            budget: 4
        })
    );
    let env: Vec<(String, String)> = [
        ("NCCL_DQPLB_CLASS_CROSS_RAIL_REPIN_RATIO", "1.4"),
        ("NCCL_DQPLB_CLASS_CROSS_RAIL_REPIN_PERSIST", "9"),
        ("NCCL_DQPLB_CLASS_CROSS_RAIL_REPIN_SETTLE", "32"),
        ("NCCL_DQPLB_CLASS_CROSS_RAIL_REPIN_BUDGET", "2"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let l = load_text(PINNED, "site.toml", &env).unwrap();
    assert_eq!(
        l.config.class.cross_rail.repin_rule(),
        Some(RepinRuleSpec {
            ratio: 1.4,
            persist: 9,
            settle: 32,
            budget: 2
        })
    );
}

#[test]
fn out_of_range_values_name_the_key_and_the_accepted_ones() {
    let e = parse_str("[class.same-rail]\nrepin-ratio = 1\n", "site.toml").unwrap_err();
    assert_eq!(e.kind, ConfigErrorKind::OutOfRange);
    assert_eq!(e.key.as_deref(), Some("class.same-rail.repin-ratio"));
    assert_eq!(
        e.accepted.as_deref(),
        Some("a number greater than 1 and at most 1000")
    );
    let e = parse_str("[class.cross-dc]\nrepin-persist = -1\n", "site.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("class.cross-dc.repin-persist"));
    assert_eq!(e.accepted.as_deref(), Some("an integer in 0..=65536"));
    let e = parse_str("[class.cross-rail]\nrepin-settle = 0\n", "site.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("class.cross-rail.repin-settle"));
    assert_eq!(e.accepted.as_deref(), Some("an integer in 1..=65536"));
    let e = parse_str("[class.cross-rail]\nrepin-budget = 0\n", "site.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("class.cross-rail.repin-budget"));
    assert_eq!(e.accepted.as_deref(), Some("an integer in 1..=65536"));
}
