//! DCQCN profiles: the expectation types (exact value or range, severity, reason) and the
//! resolution of a profile name against the built-in file and the site's `[dcqcn]` table.

use super::names;
use dqplb_config::dcqcn::{DcqcnSection, ExpectSpec, ProfileFile, ProfileSpec, Severity};
use std::collections::BTreeMap;
use std::fmt;

/// The built-in profiles, embedded at build time.
pub(crate) const BUILTIN_PROFILES_TOML: &str =
    include_str!("../../../plugin-conf/dcqcn-profiles.toml");

/// RoCE traffic priority checked when neither the profile nor the section names one.
pub(crate) const DEFAULT_ROCE_PRIORITY: u8 = 3;

/// What a value must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    Exact(u64),
    /// Inclusive bounds; `None` leaves that end open.
    Range {
        min: Option<u64>,
        max: Option<u64>,
    },
}

impl Expected {
    pub fn accepts(&self, v: u64) -> bool {
        match *self {
            Expected::Exact(x) => v == x,
            Expected::Range { min, max } => {
                min.is_none_or(|lo| v >= lo) && max.is_none_or(|hi| v <= hi)
            }
        }
    }

    /// The accepted value closest to `actual` (the lower bound when `actual` is not known).
    pub fn nearest(&self, actual: Option<u64>) -> u64 {
        match *self {
            Expected::Exact(x) => x,
            Expected::Range { min, max } => {
                let lo = min.unwrap_or(0);
                let hi = max.unwrap_or(u64::MAX).max(lo);
                match actual {
                    Some(v) => v.clamp(lo, hi),
                    None => min.or(max).unwrap_or(0),
                }
            }
        }
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Expected::Exact(x) => write!(f, "{x}"),
            Expected::Range {
                min: Some(lo),
                max: Some(hi),
            } => write!(f, "{lo}..{hi}"),
            Expected::Range {
                min: Some(lo),
                max: None,
            } => write!(f, ">={lo}"),
            Expected::Range {
                min: None,
                max: Some(hi),
            } => write!(f, "<={hi}"),
            Expected::Range {
                min: None,
                max: None,
            } => write!(f, "any"),
        }
    }
}

/// One checked cc_params file.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// cc_params file name.
    pub param: &'static str,
    pub expected: Expected,
    pub severity: Severity,
    pub reason: String,
}

/// A resolved profile: rules in kernel order of the cc_params names.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub roce_priority: u8,
    pub rules: Vec<Rule>,
}

impl Profile {
    pub fn rule(&self, param: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.param == param)
    }
}

/// Why a profile could not be resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum ProfileError {
    /// No built-in or site profile has this name.
    Unknown { name: String, known: Vec<String> },
    /// An expectation is malformed.
    BadExpectation {
        profile: String,
        param: String,
        why: String,
    },
    /// `roce-priority` outside 0..=7.
    BadPriority { profile: String, priority: u8 },
    /// `extends` chain loops.
    ExtendsCycle { chain: Vec<String> },
    /// The embedded built-in file does not parse (a build defect).
    Builtin(String),
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::Unknown { name, known } => write!(
                f,
                "unknown DCQCN profile \"{name}\" (known: {})",
                known.join(", ")
            ),
            ProfileError::BadExpectation {
                profile,
                param,
                why,
            } => {
                write!(f, "DCQCN profile \"{profile}\", expectation {param}: {why}")
            }
            ProfileError::BadPriority { profile, priority } => write!(
                f,
                "DCQCN profile \"{profile}\": roce-priority {priority} is not in 0..7"
            ),
            ProfileError::ExtendsCycle { chain } => {
                write!(
                    f,
                    "DCQCN profiles extend each other in a loop: {}",
                    chain.join(" -> ")
                )
            }
            ProfileError::Builtin(e) => {
                write!(
                    f,
                    "built-in plugin-conf/dcqcn-profiles.toml is invalid: {e}"
                )
            }
        }
    }
}

impl std::error::Error for ProfileError {}

/// The built-in profile specs.
pub(crate) fn builtin_specs() -> Result<BTreeMap<String, ProfileSpec>, ProfileError> {
    toml::from_str::<ProfileFile>(BUILTIN_PROFILES_TOML)
        .map(|f| f.profiles)
        .map_err(|e| ProfileError::Builtin(e.to_string()))
}

/// Built-in specs overlaid with the section's site profiles.
fn all_specs(section: &DcqcnSection) -> Result<BTreeMap<String, ProfileSpec>, ProfileError> {
    let mut specs = builtin_specs()?;
    for (name, spec) in &section.profiles {
        specs.insert(name.clone(), spec.clone());
    }
    Ok(specs)
}

/// Resolves `name` (following `extends`) into checked rules; the section's `roce-priority`
/// overrides the profile's.
pub fn resolve(section: &DcqcnSection, name: &str) -> Result<Profile, ProfileError> {
    let specs = all_specs(section)?;
    let mut chain: Vec<String> = Vec::new();
    let mut cursor = Some(name.to_string());
    while let Some(n) = cursor {
        if chain.contains(&n) {
            chain.push(n);
            return Err(ProfileError::ExtendsCycle { chain });
        }
        let spec = specs.get(&n).ok_or_else(|| ProfileError::Unknown {
            name: n.clone(),
            known: specs.keys().cloned().collect(),
        })?;
        cursor = spec.extends.clone();
        chain.push(n);
    }
    // Apply from the base outwards so the named profile wins.
    let mut merged: BTreeMap<String, ExpectSpec> = BTreeMap::new();
    let mut priority = None;
    let mut description = String::new();
    for n in chain.iter().rev() {
        let spec = &specs[n];
        merged.extend(spec.expect.iter().map(|(k, v)| (k.clone(), v.clone())));
        priority = spec.roce_priority.or(priority);
        if !spec.description.is_empty() {
            description = spec.description.clone();
        }
    }
    let roce_priority = section
        .roce_priority
        .or(priority)
        .unwrap_or(DEFAULT_ROCE_PRIORITY);
    if roce_priority > 7 {
        return Err(ProfileError::BadPriority {
            profile: name.to_string(),
            priority: roce_priority,
        });
    }
    let mut rules = Vec::with_capacity(merged.len());
    for param in names::CC_PARAM_NAMES {
        if let Some(spec) = merged.remove(param) {
            rules.push(rule_from_spec(name, param, &spec)?);
        }
    }
    if let Some(param) = merged.keys().next() {
        return Err(ProfileError::BadExpectation {
            profile: name.to_string(),
            param: param.clone(),
            why: "not an mlx5 cc_params name".to_string(),
        });
    }
    Ok(Profile {
        name: name.to_string(),
        description,
        roce_priority,
        rules,
    })
}

fn rule_from_spec(
    profile: &str,
    param: &'static str,
    spec: &ExpectSpec,
) -> Result<Rule, ProfileError> {
    let bad = |why: &str| ProfileError::BadExpectation {
        profile: profile.to_string(),
        param: param.to_string(),
        why: why.to_string(),
    };
    let expected = match (spec.value, spec.min, spec.max) {
        (Some(v), None, None) => Expected::Exact(v),
        (Some(_), _, _) => return Err(bad("give either value or min/max, not both")),
        (None, None, None) => return Err(bad("needs value, min or max")),
        (None, Some(lo), Some(hi)) if lo > hi => return Err(bad("min is greater than max")),
        (None, min, max) => Expected::Range { min, max },
    };
    let reason = if spec.reason.trim().is_empty() {
        format!("{param} differs from profile {profile}")
    } else {
        spec.reason.trim().to_string()
    };
    Ok(Rule {
        param,
        expected,
        severity: spec.severity,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_resolve_with_kernel_ordered_rules() {
        let s = DcqcnSection::default();
        for name in ["nvidia-default", "ai-training", "latency-sensitive"] {
            let p = resolve(&s, name).expect(name);
            assert_eq!(p.roce_priority, 3);
            assert!(!p.rules.is_empty());
            let idx: Vec<usize> = p
                .rules
                .iter()
                .map(|r| {
                    names::CC_PARAM_NAMES
                        .iter()
                        .position(|n| *n == r.param)
                        .unwrap()
                })
                .collect();
            assert!(idx.windows(2).all(|w| w[0] < w[1]), "{name}: {idx:?}");
        }
        let d = resolve(&s, "nvidia-default").unwrap();
        assert_eq!(
            d.rule("rp_time_reset").unwrap().expected,
            Expected::Exact(300)
        );
        assert_eq!(d.rules.len(), 19);
    }

    #[test]
    fn site_profile_extends_and_overrides() {
        let s: DcqcnSection = toml::from_str(
            r#"
            roce-priority = 4
            [profiles.site]
            extends = "ai-training"
            expect.rp_ai_rate = { value = 40, reason = "site" }
        "#,
        )
        .unwrap();
        let p = resolve(&s, "site").unwrap();
        assert_eq!(p.roce_priority, 4);
        assert_eq!(p.rule("rp_ai_rate").unwrap().expected, Expected::Exact(40));
        assert_eq!(
            p.rule("rp_time_reset").unwrap().expected,
            Expected::Range {
                min: Some(50),
                max: Some(300)
            }
        );
    }

    #[test]
    fn bad_profiles_are_errors() {
        let s = DcqcnSection::default();
        assert!(matches!(
            resolve(&s, "nope"),
            Err(ProfileError::Unknown { .. })
        ));
        let loopy: DcqcnSection =
            toml::from_str("[profiles.a]\nextends = \"b\"\n[profiles.b]\nextends = \"a\"\n")
                .unwrap();
        assert!(matches!(
            resolve(&loopy, "a"),
            Err(ProfileError::ExtendsCycle { .. })
        ));
        let typo: DcqcnSection =
            toml::from_str("[profiles.a]\nexpect.rp_ai_rat = { value = 1 }\n").unwrap();
        let err = resolve(&typo, "a").unwrap_err();
        assert!(err.to_string().contains("rp_ai_rat"), "{err}");
        let both: DcqcnSection =
            toml::from_str("[profiles.a]\nexpect.rp_ai_rate = { value = 1, min = 0 }\n").unwrap();
        assert!(matches!(
            resolve(&both, "a"),
            Err(ProfileError::BadExpectation { .. })
        ));
        let inverted: DcqcnSection =
            toml::from_str("[profiles.a]\nexpect.rp_ai_rate = { min = 9, max = 1 }\n").unwrap();
        assert!(matches!(
            resolve(&inverted, "a"),
            Err(ProfileError::BadExpectation { .. })
        ));
        let prio: DcqcnSection = toml::from_str("roce-priority = 9").unwrap();
        assert!(matches!(
            resolve(&prio, "ai-training"),
            Err(ProfileError::BadPriority { .. })
        ));
    }

    #[test]
    fn expected_accepts_and_nearest() {
        let r = Expected::Range {
            min: Some(10),
            max: Some(20),
        };
        assert!(r.accepts(10) && r.accepts(20) && !r.accepts(9) && !r.accepts(21));
        assert_eq!(r.nearest(Some(5)), 10);
        assert_eq!(r.nearest(Some(25)), 20);
        assert_eq!(r.nearest(None), 10);
        assert_eq!(
            Expected::Range {
                min: None,
                max: Some(4)
            }
            .nearest(Some(9)),
            4
        );
        assert_eq!(r.to_string(), "10..20");
        assert_eq!(Expected::Exact(7).to_string(), "7");
    }
}
