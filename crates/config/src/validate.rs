//! Post-parse validation of a `SiteConfig`: every registered key's range, then cross-field rules.
//! Errors point at the file line of the value, or at the environment variable that set it.

use super::error::{line_col, ConfigError, ConfigErrorKind, ENV_ORIGIN};
use super::keys::{all_keys, get_path};
use super::schema::SiteConfig;
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
    }
    Ok(())
}
