//! The depth rule per class (`depth-ratio`, `depth-raised`, `depth-hold`): on by default for a
//! pinned class only, its environment overrides, the plan's view and the validation errors.

use dqplb_config::load::load_text;
use dqplb_config::{parse_str, ConfigErrorKind, ConnClass, DepthRuleSpec, SiteConfig};

fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn off_by_default_and_on_for_a_pinned_class() {
    let c = SiteConfig::default();
    for class in ConnClass::ALL {
        let spec = c.class.get(class);
        assert_eq!(
            (spec.depth_ratio, spec.depth_raised, spec.depth_hold),
            (1.25, None, 4)
        );
        assert_eq!(spec.depth_rule(), None, "{class:?}");
        assert_eq!(c.plan(class).depth_rule, None);
        // No rule: the transport holds the plan's depth.
        assert_eq!(spec.depth_bound(2), 2);
    }
    // A pinned class runs max-outstanding + 1 while its latencies diverge.
    let text = "[class.cross-rail]\nqps = 16\nmax-outstanding = 2\npath-pinning = \"relative\"\n\
                ecmp-width = 32\n";
    let c = parse_str(text, "site.toml").unwrap();
    let want = DepthRuleSpec {
        ratio: 1.25,
        raised: 3,
        hold: 4,
    };
    assert_eq!(c.class.cross_rail.depth_rule(), Some(want));
    assert_eq!(c.plan(ConnClass::CrossRail).depth_rule, Some(want));
    assert_eq!(c.plan(ConnClass::CrossRail).outstanding, 2);
    // The transport bound is max(raised, the plan's depth).
    assert_eq!(c.class.cross_rail.depth_bound(2), 3);
    assert_eq!(c.class.cross_rail.depth_bound(1), 3);
    assert_eq!(c.class.same_rail.depth_rule(), None);
    // depth-raised = 0 turns it off on a pinned class.
    let c = parse_str(&format!("{text}depth-raised = 0\n"), "site.toml").unwrap();
    assert_eq!(c.class.cross_rail.depth_rule(), None);
    assert_eq!(c.class.cross_rail.depth_bound(2), 2);
}

#[test]
fn the_shipped_pinned_example_runs_the_rule_on_its_pinned_class() {
    let text = include_str!("../../../plugin-conf/pinned-ecmp.toml");
    let c = parse_str(text, "pinned-ecmp.toml").unwrap();
    assert_eq!(
        c.plan(ConnClass::CrossRail).depth_rule,
        Some(DepthRuleSpec {
            ratio: 1.25,
            raised: 3,
            hold: 4
        })
    );
    assert_eq!(c.plan(ConnClass::SameRail).depth_rule, None);
    assert_eq!(c.plan(ConnClass::CrossDc).depth_rule, None);
}

#[test]
fn an_unpinned_class_runs_it_when_asked_and_the_environment_overrides_it() {
    let c = parse_str(
        "[class.same-rail]\ndepth-raised = 6\ndepth-ratio = 1.25\ndepth-hold = 8\n",
        "site.toml",
    )
    .unwrap();
    assert_eq!(
        c.class.same_rail.depth_rule(),
        Some(DepthRuleSpec {
            ratio: 1.25,
            raised: 6,
            hold: 8
        })
    );
    let env = vars(&[
        ("NCCL_DQPLB_CLASS_CROSS_DC_DEPTH_RAISED", "8"),
        ("NCCL_DQPLB_CLASS_CROSS_DC_DEPTH_RATIO", "1.4"),
        ("NCCL_DQPLB_CLASS_CROSS_DC_DEPTH_HOLD", "2"),
    ]);
    let l = load_text("", "site.toml", &env).unwrap();
    assert_eq!(
        l.config.class.cross_dc.depth_rule(),
        Some(DepthRuleSpec {
            ratio: 1.4,
            raised: 8,
            hold: 2
        })
    );
}

#[test]
fn a_raised_depth_not_above_max_outstanding_is_refused() {
    let e = parse_str(
        "[class.cross-dc]\nmax-outstanding = 3\ndepth-raised = 3\n",
        "site.toml",
    )
    .unwrap_err();
    assert_eq!(e.kind, ConfigErrorKind::Inconsistent);
    assert_eq!(e.key.as_deref(), Some("class.cross-dc.depth-raised"));
    assert_eq!(e.line, Some(3));
    assert_eq!(
        e.detail,
        "class cross-dc raises its depth to 3 segments per QP, not above its max-outstanding 3: \
         the depth rule deepens the window past the planned depth"
    );
    assert_eq!(
        e.accepted.as_deref(),
        Some("0 (off) or 4..=256 (above max-outstanding)")
    );
    // From the environment the error names the variable.
    let env = vars(&[("NCCL_DQPLB_CLASS_SAME_RAIL_DEPTH_RAISED", "1")]);
    let e = load_text("", "site.toml", &env).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("class.same-rail.depth-raised"));
    assert_eq!(
        e.variable.as_deref(),
        Some("NCCL_DQPLB_CLASS_SAME_RAIL_DEPTH_RAISED")
    );
}

#[test]
fn out_of_range_values_name_the_key_and_the_accepted_ones() {
    let e = parse_str("[class.same-rail]\ndepth-ratio = 1.0\n", "site.toml").unwrap_err();
    assert_eq!(e.kind, ConfigErrorKind::OutOfRange);
    assert_eq!(e.key.as_deref(), Some("class.same-rail.depth-ratio"));
    assert_eq!(
        e.accepted.as_deref(),
        Some("a number greater than 1 and at most 1000")
    );
    let e = parse_str("[class.same-rail]\ndepth-raised = 257\n", "site.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("class.same-rail.depth-raised"));
    assert_eq!(e.accepted.as_deref(), Some("an integer in 0..=256"));
    let e = parse_str("[class.cross-rail]\ndepth-hold = 0\n", "site.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("class.cross-rail.depth-hold"));
    assert_eq!(e.accepted.as_deref(), Some("an integer in 1..=65536"));
    let e = parse_str("[class.cross-rail]\ndepth-rule = true\n", "site.toml").unwrap_err();
    assert!(e.detail.contains("depth-rule"), "{e}");
}
