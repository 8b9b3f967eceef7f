//! `ConfigError`: what went wrong with the site config, where (file:line:column or environment
//! variable), which key, and what would have been accepted.

use std::fmt;

/// Origin name used for the configuration compiled into the plugin.
pub const EMBEDDED_ORIGIN: &str = "<embedded default>";
/// Origin name used for errors raised by environment variables.
pub const ENV_ORIGIN: &str = "environment";

/// The category of a configuration error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// The file named by NCCL_DQPLB_CONF, `--config` or /etc could not be read.
    Unreadable,
    /// Not valid TOML.
    Syntax,
    /// A key or table the schema does not have.
    UnknownKey,
    /// A value of the wrong type (string for an integer, unknown enum variant, ...).
    WrongType,
    /// A value outside its range or not a required multiple.
    OutOfRange,
    /// Values that contradict each other (min-outstanding > max-outstanding, ...).
    Inconsistent,
    /// An NCCL_DQPLB_* variable that is neither a key, an alias nor reserved.
    UnknownVariable,
}

/// A site-config error with its location; `Display` prints one self-contained line. The details
/// are boxed (errors stay one pointer wide) and readable as fields through `Deref`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError(Box<ConfigErrorDetails>);

/// The contents of a `ConfigError`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigErrorDetails {
    pub kind: ConfigErrorKind,
    /// File path, `<embedded default>` or `environment`.
    pub origin: String,
    /// 1-based line and column in `origin`, when known.
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// Dotted key path, e.g. `class.cross-dc.qps`.
    pub key: Option<String>,
    /// The environment variable that carried the bad value, if any.
    pub variable: Option<String>,
    /// What is wrong, in words.
    pub detail: String,
    /// What would be accepted, in words.
    pub accepted: Option<String>,
}

impl ConfigError {
    /// An error with only an origin, a kind and a detail; locate it with the builder methods.
    pub fn new(kind: ConfigErrorKind, origin: &str, detail: impl Into<String>) -> ConfigError {
        ConfigError(Box::new(ConfigErrorDetails {
            kind,
            origin: origin.to_string(),
            line: None,
            column: None,
            key: None,
            variable: None,
            detail: detail.into(),
            accepted: None,
        }))
    }

    pub(crate) fn at(mut self, pos: Option<(usize, usize)>) -> ConfigError {
        if let Some((line, column)) = pos {
            self.0.line = Some(line);
            self.0.column = Some(column);
        }
        self
    }

    pub(crate) fn key(mut self, key: Option<String>) -> ConfigError {
        self.0.key = key;
        self
    }

    pub(crate) fn variable(mut self, var: &str) -> ConfigError {
        self.0.variable = Some(var.to_string());
        self
    }

    pub(crate) fn accepted(mut self, accepted: Option<String>) -> ConfigError {
        self.0.accepted = accepted;
        self
    }
}

impl std::ops::Deref for ConfigError {
    type Target = ConfigErrorDetails;

    fn deref(&self) -> &ConfigErrorDetails {
        &self.0
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        match (self.line, self.column) {
            (Some(line), Some(col)) => write!(f, ":{line}:{col}")?,
            (Some(line), None) => write!(f, ":{line}")?,
            _ => {}
        }
        if let Some(var) = &self.variable {
            write!(f, ": {}", crate::clip(var))?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key '{}'", crate::clip(key))?;
        }
        write!(f, ": {}", self.detail)?;
        if let Some(accepted) = &self.accepted {
            write!(f, " (accepted: {accepted})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// 1-based (line, column) of a byte offset in `text`; columns count characters.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let text = "a = 1\n[engine]\npolicy = 'x'\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        assert_eq!(line_col(text, 24), (3, 10));
        assert_eq!(line_col(text, 1000), (4, 1));
    }

    #[test]
    fn display_names_everything_known() {
        let e = ConfigError::new(
            ConfigErrorKind::OutOfRange,
            "/etc/x.toml",
            "value 300 is out of range",
        )
        .at(Some((7, 7)))
        .key(Some("class.cross-dc.qps".into()))
        .accepted(Some("an integer in 1..=128".into()));
        assert_eq!(
            e.to_string(),
            "/etc/x.toml:7:7: key 'class.cross-dc.qps': value 300 is out of range \
             (accepted: an integer in 1..=128)"
        );
        let v = ConfigError::new(
            ConfigErrorKind::OutOfRange,
            ENV_ORIGIN,
            "value 0 is out of range",
        )
        .variable("NCCL_DQPLB_QPS");
        assert_eq!(
            v.to_string(),
            "environment: NCCL_DQPLB_QPS: value 0 is out of range"
        );
    }
}
