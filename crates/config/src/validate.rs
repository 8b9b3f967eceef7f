//! Post-parse validation of a `SiteConfig`: every registered key's range, then cross-field rules.
//! Errors point at the file line of the value, or at the environment variable that set it.

use super::error::{line_col, ConfigError, ConfigErrorKind, ENV_ORIGIN};
use super::keys::{all_keys, get_path};
use super::pinning::{BucketSelectName, HashField, PathPinning};
use super::schema::{ClassSpec, SiteConfig};
use super::spans::{span_tree, SpanNode};

/// Where the current value of each key came from: a file's text, or an environment variable.
pub(crate) struct Provenance<'a> {
    origin: &'a str,
    text: &'a str,
    tree: Option<SpanNode>,
    /// (dotted key, variable) for every key an environment variable set.
    env: Vec<(String, String)>,
}

impl<'a> Provenance<'a> {
    pub(crate) fn file(origin: &'a str, text: &'a str) -> Provenance<'a> {
        Provenance {
            origin,
            text,
            tree: span_tree(text),
            env: Vec::new(),
        }
    }

    pub(crate) fn with_env(mut self, env: Vec<(String, String)>) -> Provenance<'a> {
        self.env = env;
        self
    }

    /// The variable that last set `key`, if any.
    pub(crate) fn variable_of(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// 1-based position of `key`'s value in the file, or of its table when the key is absent.
    pub(crate) fn position_of(&self, key: &str) -> Option<(usize, usize)> {
        let tree = self.tree.as_ref()?;
        if let Some(span) = tree.find(key).and_then(|n| n.value_span.as_ref()) {
            return Some(line_col(self.text, span.start));
        }
        let mut path = key;
        loop {
            path = &path[..path.rfind('.')?];
            if let Some(node) = tree.find(path) {
                if let Some(span) = node.key_span.as_ref().or(node.value_span.as_ref()) {
                    return Some(line_col(self.text, span.start));
                }
            }
        }
    }

    /// An error about `key`, located at its variable or its place in the file.
    pub(crate) fn error(&self, kind: ConfigErrorKind, key: &str, detail: String) -> ConfigError {
        match self.variable_of(key) {
            Some(var) => ConfigError::new(kind, ENV_ORIGIN, detail).variable(var),
            None => ConfigError::new(kind, self.origin, detail).at(self.position_of(key)),
        }
        .key(Some(key.to_string()))
    }
}

/// Checks every key's range and the cross-field rules.
pub(crate) fn validate(config: &SiteConfig, prov: &Provenance<'_>) -> Result<(), ConfigError> {
    let tree = toml::Value::try_from(config).map_err(|e| {
        ConfigError::new(
            ConfigErrorKind::WrongType,
            prov.origin,
            format!("cannot re-encode: {e}"),
        )
    })?;
    for spec in all_keys() {
        match get_path(&tree, spec.path) {
            Some(value) => spec.kind.check(value).map_err(|detail| {
                prov.error(ConfigErrorKind::OutOfRange, spec.path, detail)
                    .accepted(Some(spec.kind.accepted()))
            })?,
            None if spec.optional => {}
            None => {
                return Err(prov
                    .error(
                        ConfigErrorKind::WrongType,
                        spec.path,
                        "value is missing".into(),
                    )
                    .accepted(Some(spec.kind.accepted())))
            }
        }
    }
    for (name, spec) in [
        ("same-rail", &config.class.same_rail),
        ("cross-rail", &config.class.cross_rail),
        ("cross-dc", &config.class.cross_dc),
    ] {
        if spec.min_outstanding > spec.max_outstanding {
            let min_key = format!("class.{name}.min-outstanding");
            let max_key = format!("class.{name}.max-outstanding");
            let blame =
                if prov.variable_of(&min_key).is_none() && prov.variable_of(&max_key).is_some() {
                    max_key
                } else {
                    min_key
                };
            let detail = format!(
                "min-outstanding {} is greater than max-outstanding {}",
                spec.min_outstanding, spec.max_outstanding
            );
            return Err(prov
                .error(ConfigErrorKind::Inconsistent, &blame, detail)
                .accepted(Some("min-outstanding <= max-outstanding".into())));
        }
        depth_rules(name, spec, prov)?;
        pinning_rules(config, name, spec, prov)?;
    }
    paths_rules(config, prov)
}

/// An explicit `depth-raised` must be above the class's `max-outstanding` (0 turns the rule off):
/// the rule raises the per-QP window above every depth the plan can choose.
fn depth_rules(name: &str, spec: &ClassSpec, prov: &Provenance<'_>) -> Result<(), ConfigError> {
    match spec.depth_raised {
        Some(raised) if raised != 0 && raised <= spec.max_outstanding => {
            let key = format!("class.{name}.depth-raised");
            let detail = format!(
                "class {name} raises its depth to {raised} segments per QP, not above its \
                 max-outstanding {}: the depth rule deepens the window past the planned depth",
                spec.max_outstanding
            );
            Err(prov
                .error(ConfigErrorKind::Inconsistent, &key, detail)
                .accepted(Some(format!(
                    "0 (off) or {}..=256 (above max-outstanding)",
                    spec.max_outstanding + 1
                ))))
        }
        _ => Ok(()),
    }
}

/// A pinned class's group against `[paths]`: relative mode and low-bits selection need a
/// power-of-two group, and the switches must hash the source port for a port to choose a path.
fn pinning_rules(
    config: &SiteConfig,
    name: &str,
    spec: &ClassSpec,
    prov: &Provenance<'_>,
) -> Result<(), ConfigError> {
    let mode = spec.path_pinning;
    if mode == PathPinning::Off {
        return Ok(());
    }
    let mode_key = format!("class.{name}.path-pinning");
    if !config.paths.fields.contains(&HashField::SrcPort) {
        return Err(prov
            .error(
                ConfigErrorKind::Inconsistent,
                "paths.fields",
                format!(
                    "class {name} pins source ports ({mode_key} = \"{}\"), but the listed \
                     hash fields do not include \"src-port\": no port could choose a path",
                    mode.as_str()
                ),
            )
            .accepted(Some("fields that include \"src-port\"".into())));
    }
    let width = spec.ecmp_width();
    let needs_pow2 =
        mode == PathPinning::Relative || config.paths.select == BucketSelectName::LowBits;
    if needs_pow2 && !width.is_power_of_two() {
        let key = if spec.ecmp_width.is_some() {
            format!("class.{name}.ecmp-width")
        } else {
            format!("class.{name}.qps")
        };
        let why = if mode == PathPinning::Relative {
            "relative pinning moves a port by a fixed bucket offset only in a power-of-two group \
             (for another size describe the hash in full: path-pinning = \"absolute\" with \
             [paths] select = \"mod\")"
                .to_string()
        } else {
            "[paths] select = \"low-bits\" takes log2(group) bits of the hash (use select = \
             \"mod\" for this group)"
                .to_string()
        };
        return Err(prov
            .error(
                ConfigErrorKind::Inconsistent,
                &key,
                format!(
                    "class {name} pins {} paths over an ECMP group of {width}, not a power of \
                     two: {why}",
                    mode.as_str()
                ),
            )
            .accepted(Some("a power of two: 1, 2, 4, ..., 16384".into())));
    }
    Ok(())
}

/// `[paths] polynomial`, when given, must be the family's: the families are fixed CRCs.
fn paths_rules(config: &SiteConfig, prov: &Provenance<'_>) -> Result<(), ConfigError> {
    let paths = &config.paths;
    let Some(poly) = paths.polynomial else {
        return Ok(());
    };
    match paths.hash.polynomial() {
        Some(want) if want == poly => Ok(()),
        want => {
            let accepted = match want {
                Some(w) => format!("{w:#x} ({w}) for hash = \"{}\"", paths.hash.as_str()),
                None => format!(
                    "no polynomial for hash = \"{}\" (remove the key)",
                    paths.hash.as_str()
                ),
            };
            Err(prov
                .error(
                    ConfigErrorKind::Inconsistent,
                    "paths.polynomial",
                    format!(
                        "polynomial {poly:#x} is not the generator of hash = \"{}\"; the \
                         supported families are CRC-32 (0x4c11db7), CRC-16-CCITT (0x1021) and \
                         the XOR fold",
                        paths.hash.as_str()
                    ),
                )
                .accepted(Some(accepted)))
        }
    }
}
