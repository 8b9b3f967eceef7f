//! NCCL_DQPLB_* environment overrides: one variable per key (`NCCL_DQPLB_<SECTION>_<KEY>`), short
//! aliases that set several keys, reserved names, and errors naming the variable and accepted values.

use toml::Value;

use super::error::{ConfigError, ConfigErrorKind, ENV_ORIGIN};
use super::keys::{all_keys, env_name, find_key, set_path, ENV_PREFIX};
use super::schema::SiteConfig;
use super::validate::{validate, Provenance};

/// Variables the config loader never treats as overrides.
pub(crate) const RESERVED_VARS: &[&str] = &["NCCL_DQPLB_CONF"];
/// Prefixes of variables read elsewhere (debug switches); never treated as overrides.
pub(crate) const RESERVED_PREFIXES: &[&str] = &["NCCL_DQPLB_DEBUG_"];

const CLASSES: [&str; 3] = ["same-rail", "cross-rail", "cross-dc"];

/// A short alias and the keys it sets (specific variables win over aliases).
pub(crate) fn alias_targets(var: &str) -> Option<Vec<String>> {
    let per_class = |key: &str| CLASSES.iter().map(|c| format!("class.{c}.{key}")).collect();
    match var {
        "NCCL_DQPLB_POLICY" => Some(vec!["engine.policy".to_string()]),
        "NCCL_DQPLB_TRANSPORT" => Some(vec!["fabric.transport".to_string()]),
        "NCCL_DQPLB_QPS" => Some(per_class("qps")),
        "NCCL_DQPLB_SEGMENT_BYTES" => {
            let mut keys = vec!["engine.segment-bytes".to_string()];
            keys.extend(per_class("segment-bytes"));
            Some(keys)
        }
        "NCCL_DQPLB_OUTSTANDING" => {
            let mut keys: Vec<String> = per_class("min-outstanding");
            keys.extend(per_class("max-outstanding"));
            Some(keys)
        }
        _ => None,
    }
}

/// The short aliases, in documentation order.
pub const ALIASES: &[&str] = &[
    "NCCL_DQPLB_POLICY",
    "NCCL_DQPLB_TRANSPORT",
    "NCCL_DQPLB_QPS",
    "NCCL_DQPLB_SEGMENT_BYTES",
    "NCCL_DQPLB_OUTSTANDING",
];

/// Whether a variable is reserved (read elsewhere, ignored here).
pub(crate) fn is_reserved(var: &str) -> bool {
    RESERVED_VARS.contains(&var) || RESERVED_PREFIXES.iter().any(|p| var.starts_with(p))
}

/// Every override variable this loader accepts for `config` (keys, aliases, `[dcqcn]` keys).
pub(crate) fn accepted_variables(config: &SiteConfig) -> Vec<String> {
    let mut vars: Vec<String> = ALIASES.iter().map(|s| s.to_string()).collect();
    vars.extend(all_keys().map(|k| env_name(k.path)));
    vars.extend(dcqcn_keys(config).into_iter().map(|k| env_name(&k)));
    vars
}

/// Dotted paths of the `[dcqcn]` keys, as the section serialises itself.
fn dcqcn_keys(config: &SiteConfig) -> Vec<String> {
    match Value::try_from(&config.dcqcn) {
        Ok(Value::Table(t)) => t.keys().map(|k| format!("dcqcn.{k}")).collect(),
        _ => Vec::new(),
    }
}

/// Parses a `[dcqcn]` override by the type of the key's current value (that section is owned by
/// the DCQCN checker; its own deserialiser has the last word).
fn dcqcn_value(current: &Value, raw: &str) -> Result<Value, String> {
    let text = raw.trim();
    match current {
        Value::Integer(_) => text
            .parse()
            .map(Value::Integer)
            .map_err(|_| format!("'{}' is not an integer", crate::clip(raw))),
        Value::Float(_) => text
            .parse()
            .map(Value::Float)
            .map_err(|_| format!("'{}' is not a number", crate::clip(raw))),
        Value::Boolean(_) => match text.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Value::Boolean(true)),
            "false" | "0" | "no" | "off" => Ok(Value::Boolean(false)),
            _ => Err(format!("'{}' is not a boolean", crate::clip(raw))),
        },
        _ => Ok(Value::String(text.to_string())),
    }
}

/// The accepted variable nearest to `var` (Levenshtein distance; ties: the first in
/// documentation order), for the WARN about an unknown one.
pub(crate) fn nearest_variable(var: &str, config: &SiteConfig) -> String {
    let mut names = accepted_variables(config);
    names.extend(RESERVED_VARS.iter().map(|s| s.to_string()));
    names
        .into_iter()
        .min_by_key(|n| strsim::levenshtein(var, n))
        .unwrap_or_default()
}

/// What applying the environment did: the new config, the (variable, value) pairs applied, and
/// one warning per NCCL_DQPLB_* variable that is not ours (ignored, as NCCL ignores unknown
/// NCCL_* variables), naming the nearest accepted name.
pub(crate) type Applied = (SiteConfig, Vec<(String, String)>, Vec<String>);

/// Applies every NCCL_DQPLB_* variable in `vars` to `config` (read from `origin`/`text`), then
/// re-validates. An empty value is unset, as NCCL reads its own variables (ncclGetEnv + strlen);
/// an unknown name is a warning, never an error.
pub(crate) fn apply_env(
    config: &SiteConfig,
    vars: &[(String, String)],
    origin: &str,
    text: &str,
) -> Result<Applied, ConfigError> {
    let mut ours: Vec<&(String, String)> = vars
        .iter()
        .filter(|(k, v)| k.starts_with(ENV_PREFIX) && !is_reserved(k) && !v.is_empty())
        .collect();
    if ours.is_empty() {
        return Ok((config.clone(), Vec::new(), Vec::new()));
    }
    // Aliases first so that a specific variable set alongside an alias wins.
    ours.sort_by_key(|(k, _)| (alias_targets(k).is_none(), k.clone()));
    let mut tree = Value::try_from(config).map_err(|e| {
        ConfigError::new(
            ConfigErrorKind::WrongType,
            origin,
            format!("cannot re-encode: {e}"),
        )
    })?;
    let dcqcn = dcqcn_keys(config);
    let mut set_by: Vec<(String, String)> = Vec::new();
    let mut applied: Vec<(String, String)> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    for (var, raw) in ours {
        let bad = |kind, key: &str, detail: String, accepted: Option<String>| {
            ConfigError::new(kind, ENV_ORIGIN, detail)
                .variable(var)
                .key(Some(key.to_string()))
                .accepted(accepted)
        };
        let targets: Vec<String> = if let Some(keys) = alias_targets(var) {
            keys
        } else if let Some(spec) = all_keys().find(|k| env_name(k.path) == *var) {
            vec![spec.path.to_string()]
        } else if let Some(key) = dcqcn.iter().find(|k| env_name(k) == *var) {
            vec![key.clone()]
        } else {
            warnings.push(format!(
                "{}={}: unknown variable, ignored; did you mean {}?",
                crate::clip(var),
                crate::clip(raw),
                nearest_variable(var, config)
            ));
            continue;
        };
        for key in &targets {
            let value = match find_key(key) {
                Some(spec) => spec.kind.parse_env(raw).map_err(|d| {
                    bad(
                        ConfigErrorKind::OutOfRange,
                        key,
                        d,
                        Some(spec.kind.accepted()),
                    )
                })?,
                None => {
                    let current = super::keys::get_path(&tree, key)
                        .cloned()
                        .unwrap_or(Value::Boolean(false));
                    dcqcn_value(&current, raw).map_err(|d| {
                        bad(
                            ConfigErrorKind::WrongType,
                            key,
                            d,
                            Some(format!("a {}", current.type_str())),
                        )
                    })?
                }
            };
            if !set_path(&mut tree, key, value) {
                return Err(bad(
                    ConfigErrorKind::WrongType,
                    key,
                    "cannot be set".into(),
                    None,
                ));
            }
            set_by.push((key.clone(), var.clone()));
        }
        applied.push((var.clone(), raw.clone()));
    }
    let updated: SiteConfig = tree.try_into().map_err(|e: toml::de::Error| {
        let names: Vec<&str> = applied.iter().map(|(v, _)| v.as_str()).collect();
        ConfigError::new(
            ConfigErrorKind::WrongType,
            ENV_ORIGIN,
            e.message().trim().to_string(),
        )
        .variable(&names.join(", "))
    })?;
    validate(&updated, &Provenance::file(origin, text).with_env(set_by))?;
    Ok((updated, applied, warnings))
}
