//! The `[dcqcn]` table of the site config: which DCQCN profile to check and how strictly.
//! Profile contents and their schema are defined here; the checker lives in crate::dcqcn.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DcqcnSection {
    #[serde(default = "default_profile")]
    pub profile: String,
    #[serde(default)]
    pub strict: bool,
}

fn default_profile() -> String {
    "nvidia-default".to_string()
}

impl Default for DcqcnSection {
    fn default() -> Self {
        DcqcnSection {
            profile: default_profile(),
            strict: false,
        }
    }
}
