//! The `[dcqcn]` table of the site config: which DCQCN profile to check, how strictly, where the
//! sysfs/debugfs roots are, and site-defined profiles (same schema as plugin-conf/dcqcn-profiles.toml).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `[dcqcn]`: checked at plugin init and by `dqplb check`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DcqcnSection {
    /// Name of the profile to check (built-in or defined under `[dcqcn.profiles.<name>]`).
    #[serde(default = "default_profile")]
    pub profile: String,
    /// Fail plugin init (ncclSystemError) when a device does not match the profile.
    #[serde(default)]
    pub strict: bool,
    /// RoCE traffic priority whose ECN enables must be on; overrides the profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roce_priority: Option<u8>,
    /// Stands for /sys (tests point it at a fake tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysfs_root: Option<PathBuf>,
    /// Stands for /sys/kernel/debug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debugfs_root: Option<PathBuf>,
    /// Site profiles; a name equal to a built-in one replaces it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub profiles: BTreeMap<String, ProfileSpec>,
}

fn default_profile() -> String {
    "nvidia-default".to_string()
}

impl Default for DcqcnSection {
    fn default() -> Self {
        DcqcnSection {
            profile: default_profile(),
            strict: false,
            roce_priority: None,
            sysfs_root: None,
            debugfs_root: None,
            profiles: BTreeMap::new(),
        }
    }
}

/// One profile as written in TOML: expectations keyed by cc_params file name.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProfileSpec {
    #[serde(default)]
    pub description: String,
    /// Start from this profile's expectations, then apply ours on top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extends: Option<String>,
    /// RoCE traffic priority (0-7) whose RP and NP ECN enables must both be 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roce_priority: Option<u8>,
    #[serde(default)]
    pub expect: BTreeMap<String, ExpectSpec>,
}

/// One expectation: `value = N`, or `min`/`max` (either may be absent, inclusive).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ExpectSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    #[serde(default)]
    pub severity: Severity,
    /// One line shown when the expectation fails.
    #[serde(default)]
    pub reason: String,
}

/// How much a failed expectation matters (shown in reports; every mismatch fails the check).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Info,
    #[default]
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// The layout of plugin-conf/dcqcn-profiles.toml.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProfileFile {
    #[serde(default)]
    pub profiles: BTreeMap<String, ProfileSpec>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_parses_profiles_and_rejects_unknown_keys() {
        let text = r#"
            profile = "site"
            strict = true
            roce-priority = 5
            [profiles.site]
            extends = "ai-training"
            expect.rp_ai_rate = { min = 10, max = 40, severity = "critical", reason = "fast AI" }
        "#;
        let s: DcqcnSection = toml::from_str(text).expect("valid section");
        assert_eq!(s.profile, "site");
        assert!(s.strict);
        assert_eq!(s.roce_priority, Some(5));
        let site = &s.profiles["site"];
        assert_eq!(site.extends.as_deref(), Some("ai-training"));
        let e = &site.expect["rp_ai_rate"];
        assert_eq!(
            (e.min, e.max, e.severity),
            (Some(10), Some(40), Severity::Critical)
        );

        let err = toml::from_str::<DcqcnSection>("stric = true").unwrap_err();
        assert!(err.to_string().contains("stric"), "{err}");
        assert_eq!(
            toml::from_str::<DcqcnSection>("").unwrap(),
            DcqcnSection::default()
        );
    }
}
