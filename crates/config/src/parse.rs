//! Parsing a site-config text: TOML -> `SiteConfig`, then validation, with serde/toml errors
//! turned into `ConfigError`s that name the file, line, column, key and accepted values.

use super::error::{line_col, ConfigError, ConfigErrorKind};
use super::keys::{all_keys, find_key};
use super::schema::SiteConfig;
use super::spans::span_tree;
use super::validate::{validate, Provenance};

/// Top-level tables of the site config, in documentation order.
pub(crate) const SECTIONS: &[&str] = &[
    "fabric", "engine", "patterns", "class", "tcp", "stats", "log", "dcqcn",
];

/// Parses and validates a site-config text; `origin` (a path or `<embedded default>`) names it in
/// errors.
pub fn parse_str(text: &str, origin: &str) -> Result<SiteConfig, ConfigError> {
    let config: SiteConfig = toml::from_str(text).map_err(|e| toml_error(&e, text, origin))?;
    validate(&config, &Provenance::file(origin, text))?;
    Ok(config)
}

/// The names a table accepts, from the key registry (None for tables owned elsewhere).
pub(crate) fn known_children(parent: &str) -> Option<Vec<String>> {
    if parent.is_empty() {
        return Some(SECTIONS.iter().map(|s| s.to_string()).collect());
    }
    let prefix = format!("{parent}.");
    let mut names: Vec<String> = Vec::new();
    for spec in all_keys() {
        if let Some(rest) = spec.path.strip_prefix(&prefix) {
            let child = rest.split('.').next().unwrap_or(rest).to_string();
            if !names.contains(&child) {
                names.push(child);
            }
        }
    }
    if names.is_empty() {
        None
    } else {
        Some(names)
    }
}

fn toml_error(e: &toml::de::Error, text: &str, origin: &str) -> ConfigError {
    let message = e.message().trim().replace('\n', " ");
    let tree = span_tree(text);
    let key = match (&tree, e.span()) {
        (Some(tree), Some(span)) => tree.path_of_span(&span),
        _ => None,
    };
    let kind = if tree.is_none() {
        ConfigErrorKind::Syntax
    } else if message.starts_with("unknown field") {
        ConfigErrorKind::UnknownKey
    } else {
        ConfigErrorKind::WrongType
    };
    let accepted = match (kind, &key) {
        (ConfigErrorKind::UnknownKey, Some(k)) => {
            let parent = k.rfind('.').map_or("", |i| &k[..i]);
            known_children(parent).map(|names| format!("keys {}", names.join(", ")))
        }
        (_, Some(k)) => find_key(k).map(|spec| spec.kind.accepted()),
        _ => None,
    };
    ConfigError::new(kind, origin, message)
        .at(e.span().map(|s| line_col(text, s.start)))
        .key(key)
        .accepted(accepted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::PolicyName;

    #[test]
    fn empty_text_gives_all_defaults() {
        let c = parse_str("", "t.toml").expect("empty is valid");
        assert_eq!(c, SiteConfig::default());
        assert_eq!(c.engine.segment_bytes, 65536);
        assert_eq!(c.class.cross_dc.qps, 16);
    }

    #[test]
    fn partial_class_keeps_its_own_defaults() {
        let c = parse_str("[class.cross-dc]\nqps = 32\n", "t.toml").expect("valid");
        assert_eq!(c.class.cross_dc.qps, 32);
        assert_eq!(c.class.cross_dc.max_outstanding, 3);
        assert_eq!(c.class.cross_dc.rtt_us, 2000.0);
        assert_eq!(c.class.same_rail.qps, 4);
    }

    #[test]
    fn integer_rate_is_accepted_as_number() {
        let c = parse_str("[class.same-rail]\nrate-gbps = 200\n", "t.toml").expect("valid");
        assert_eq!(c.class.same_rail.rate_gbps, 200.0);
    }

    #[test]
    fn unknown_key_names_line_key_and_choices() {
        let e = parse_str("[engine]\npolicy = \"dqplb\"\nsegments = 4\n", "f.toml").unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::UnknownKey);
        assert_eq!((e.line, e.column), (Some(3), Some(1)));
        assert_eq!(e.key.as_deref(), Some("engine.segments"));
        let accepted = e.accepted.clone().unwrap_or_default();
        assert!(accepted.contains("segment-bytes"), "{e}");
        assert!(
            e.to_string()
                .starts_with("f.toml:3:1: key 'engine.segments'"),
            "{e}"
        );
    }

    #[test]
    fn unknown_section_is_rejected() {
        let e = parse_str("[engines]\npolicy = \"dqplb\"\n", "f.toml").unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::UnknownKey);
        assert_eq!(e.line, Some(1));
        assert!(e.to_string().contains("engine"), "{e}");
    }

    #[test]
    fn bad_policy_lists_policies() {
        let e = parse_str("[engine]\npolicy = \"fastest\"\n", "f.toml").unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::WrongType);
        assert_eq!(e.key.as_deref(), Some("engine.policy"));
        assert_eq!(e.line, Some(2));
        assert!(e.to_string().contains("\"round-robin-message\""), "{e}");
        let ok = parse_str("[engine]\npolicy = \"single-qp\"\n", "f.toml").expect("valid");
        assert_eq!(ok.engine.policy, PolicyName::SingleQp);
    }

    #[test]
    fn range_error_points_at_value() {
        let e = parse_str("[class.cross-dc]\nrtt-us = 2000\nqps = 300\n", "f.toml").unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::OutOfRange);
        assert_eq!((e.line, e.column), (Some(3), Some(7)));
        assert_eq!(e.key.as_deref(), Some("class.cross-dc.qps"));
        assert_eq!(e.accepted.as_deref(), Some("an integer in 1..=128"));
    }

    #[test]
    fn min_above_max_is_inconsistent() {
        let e = parse_str("[class.same-rail]\nmin-outstanding = 16\n", "f.toml").unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::Inconsistent);
        assert_eq!(e.key.as_deref(), Some("class.same-rail.min-outstanding"));
        assert_eq!(e.line, Some(2));
        assert!(
            e.detail.contains("16 is greater than max-outstanding 2"),
            "{e}"
        );
    }

    #[test]
    fn syntax_error_has_line() {
        let e = parse_str("[engine]\npolicy = \n", "f.toml").unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::Syntax);
        assert_eq!(e.line, Some(2));
    }
}
