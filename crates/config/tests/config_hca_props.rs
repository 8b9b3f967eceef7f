//! Property tests of the NCCL_IB_HCA parser: generated valid lists round-trip, arbitrary strings
//! never panic, prefix versus exact matching, and exclusion.

use dqplb_config::{HcaEntry, HcaList, HcaThirdField};
use proptest::prelude::*;

fn mode() -> impl Strategy<Value = HcaThirdField> {
    prop_oneof![
        Just(HcaThirdField::FabricId),
        Just(HcaThirdField::RailPlane)
    ]
}

/// An entry's fields: (name, port, third, fourth).
type Fields = (String, Option<u32>, Option<u32>, Option<u32>);

/// A valid entry for either mode with 8 rails.
fn entry_text() -> impl Strategy<Value = Fields> {
    (
        "[a-z][a-z0-9_]{0,10}",
        proptest::option::of(1u32..=255),
        proptest::option::of(0u32..=65535),
        proptest::option::of(0u32..=32767),
    )
        .prop_map(|(n, p, t, f)| (n, p, p.and(t), p.and(t).and(f)))
}

fn render(exclude: bool, exact: bool, mode: HcaThirdField, entries: &[Fields]) -> String {
    let mut s = String::new();
    if exclude {
        s.push('^');
    }
    if exact {
        s.push('=');
    }
    let mut seen: Vec<(String, Option<u32>)> = Vec::new();
    let mut first = true;
    for (name, port, third, fourth) in entries {
        if seen.contains(&(name.clone(), *port)) {
            continue;
        }
        seen.push((name.clone(), *port));
        if !first {
            s.push(',');
        }
        first = false;
        s.push_str(name);
        if let Some(p) = port {
            s.push_str(&format!(":{p}"));
            if let (Some(t), false) = (third, exclude) {
                let t = match mode {
                    HcaThirdField::FabricId => *t,
                    HcaThirdField::RailPlane => t % 8,
                };
                s.push_str(&format!(":{t}"));
                if let (Some(f), HcaThirdField::RailPlane) = (fourth, mode) {
                    s.push_str(&format!(":{f}"));
                }
            }
        }
    }
    s
}

proptest! {
    #[test]
    fn valid_lists_round_trip(
        exclude in any::<bool>(),
        exact in any::<bool>(),
        mode in mode(),
        entries in proptest::collection::vec(entry_text(), 1..32),
    ) {
        let text = render(exclude, exact, mode, &entries);
        let list = HcaList::parse(&text, mode, 8);
        prop_assert!(list.is_ok(), "{text}: {:?}", list.err());
        let list = list.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(list.to_string(), text.clone());
        prop_assert_eq!(list.exclude, exclude);
        prop_assert_eq!(list.exact, exact);
        let again = HcaList::parse(&list.to_string(), mode, 8);
        prop_assert_eq!(again.ok(), Some(list.clone()));
        for e in &list.entries {
            if let Some(f) = e.fabric {
                match mode {
                    HcaThirdField::FabricId => {
                        prop_assert_eq!((f.dc, f.rail, f.plane), (f.id / 8, f.id % 8, None));
                    }
                    HcaThirdField::RailPlane => prop_assert_eq!((f.dc, f.rail), (0, f.id)),
                }
            }
        }
    }

    #[test]
    fn arbitrary_strings_never_panic(s in "\\PC{0,80}", mode in mode(), rails in 0u32..20) {
        if let Ok(list) = HcaList::parse(&s, mode, rails) {
            prop_assert!(!list.entries.is_empty() && list.entries.len() <= 32);
            let _ = list.select("mlx5_0", 1);
        }
    }

    #[test]
    fn structured_noise_never_panics(
        parts in proptest::collection::vec("[a-z0-9_:,^=x -]{0,12}", 0..8),
        mode in mode(),
    ) {
        let s = parts.concat();
        let _ = HcaList::parse(&s, mode, 8).map(|l| l.selects_device("mlx5_1"));
    }

    #[test]
    fn prefix_versus_exact(base in "[a-z][a-z0-9]{0,6}", suffix in "[a-z0-9_]{1,4}", port in 1u32..=4) {
        let longer = format!("{base}{suffix}");
        let prefix = HcaList::parse(&base, HcaThirdField::FabricId, 8)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let exact = HcaList::parse(&format!("={base}"), HcaThirdField::FabricId, 8)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(prefix.select(&longer, port).is_some());
        prop_assert!(prefix.select(&base, port).is_some());
        prop_assert!(exact.select(&longer, port).is_none());
        prop_assert!(exact.select(&base, port).is_some());
        prop_assert!(!exact.selects_device(&longer));
    }

    #[test]
    fn exclusion_is_the_complement(
        names in proptest::collection::btree_set("[a-z]{1,3}_[0-9]", 1..6),
        probe in "[a-z]{1,3}_[0-9]",
        port in 1u32..=2,
    ) {
        let list: Vec<String> = names.iter().cloned().collect();
        let joined = list.join(",");
        let inc = HcaList::parse(&format!("={joined}"), HcaThirdField::FabricId, 8)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let exc = HcaList::parse(&format!("^={joined}"), HcaThirdField::FabricId, 8)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let listed = names.contains(&probe);
        prop_assert_eq!(inc.select(&probe, port).is_some(), listed);
        prop_assert_eq!(exc.select(&probe, port).is_some(), !listed);
        prop_assert_eq!(exc.selects_device(&probe), !listed);
        let want: Vec<HcaEntry> = list
            .iter()
            .map(|n| HcaEntry { name: n.clone(), port: None, fabric: None })
            .collect();
        prop_assert_eq!(exc.entries, want);
    }
}
