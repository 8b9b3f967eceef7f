//! The plugin-init DCQCN check: compares each selected device with the configured profile and
//! logs (tracing target "dqplb::dcqcn"); fails only when `strict` and something does not match.

use super::compare::{compare, DeviceReport, Row};
use super::profile::{resolve, ProfileError};
use super::reader::{read_device, DeviceSnapshot, Reading, Roots};
use dqplb_config::dcqcn::DcqcnSection;
use std::fmt;

/// What the pre-flight found (returned also when not strict and something mismatched).
#[derive(Debug, Clone, PartialEq)]
pub struct PreflightSummary {
    pub profile: String,
    pub reports: Vec<DeviceReport>,
    /// Mismatched (or garbage) checked values over all devices.
    pub failures: usize,
    /// Checked values that could not be read, over all devices.
    pub unknown: usize,
    /// Set when the profile could not be resolved (not strict: nothing was checked).
    pub profile_error: Option<ProfileError>,
}

/// Why a strict pre-flight fails init (map to ncclSystemError).
#[derive(Debug, Clone, PartialEq)]
pub enum PreflightError {
    Profile(ProfileError),
    Mismatch {
        profile: String,
        failures: usize,
        devices: Vec<String>,
    },
}

impl fmt::Display for PreflightError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PreflightError::Profile(e) => write!(f, "dcqcn.strict: {e}"),
            PreflightError::Mismatch {
                profile,
                failures,
                devices,
            } => write!(
                f,
                "dcqcn.strict: {failures} value(s) differ from profile {profile} on {}",
                devices.join(", ")
            ),
        }
    }
}

impl std::error::Error for PreflightError {}

/// Path of the file behind a row (for messages).
pub(crate) fn row_path(snap: &DeviceSnapshot, row: &Row) -> String {
    if let Some(rest) = row.param.strip_prefix("ecn/") {
        return match &snap.ecn_dir {
            Some(d) => d.join(rest).display().to_string(),
            None => format!("<{} netdev unknown>/ecn/{rest}", snap.device),
        };
    }
    match &snap.cc_dir {
        Some(d) => d.join(&row.param).display().to_string(),
        None => format!("<{} cc_params>/{}", snap.device, row.param),
    }
}

/// Checks `devices` against `section.profile`. Logs one INFO summary per device, one WARN per
/// mismatch (file, expected, actual, severity, reason), one INFO line per device for unreadable
/// values. Never writes anything. Err only when `section.strict` and the profile is invalid or
/// a checked value mismatched / is garbage.
pub fn preflight(
    section: &DcqcnSection,
    devices: &[String],
    roots: &Roots,
) -> Result<PreflightSummary, PreflightError> {
    let profile = match resolve(section, &section.profile) {
        Ok(p) => p,
        Err(e) => {
            if section.strict {
                tracing::warn!(target: "dqplb::dcqcn", "dcqcn: {e}");
                return Err(PreflightError::Profile(e));
            }
            tracing::warn!(target: "dqplb::dcqcn", "dcqcn: {e}; DCQCN check skipped");
            return Ok(PreflightSummary {
                profile: section.profile.clone(),
                reports: Vec::new(),
                failures: 0,
                unknown: 0,
                profile_error: Some(e),
            });
        }
    };
    if devices.is_empty() {
        tracing::info!(target: "dqplb::dcqcn", "dcqcn: no RDMA device selected, nothing to check");
    }
    let mut reports = Vec::with_capacity(devices.len());
    for dev in devices {
        let snap = read_device(roots, dev);
        let report = compare(&snap, &profile);
        log_report(&report);
        reports.push(report);
    }
    let failures = reports.iter().map(DeviceReport::failure_count).sum();
    let unknown = reports.iter().map(DeviceReport::unknown_count).sum();
    if section.strict && failures > 0 {
        let devices = reports
            .iter()
            .filter(|r| r.failure_count() > 0)
            .map(|r| r.snapshot.device.clone())
            .collect();
        return Err(PreflightError::Mismatch {
            profile: profile.name,
            failures,
            devices,
        });
    }
    Ok(PreflightSummary {
        profile: profile.name,
        reports,
        failures,
        unknown,
        profile_error: None,
    })
}

fn log_report(r: &DeviceReport) {
    let s = &r.snapshot;
    tracing::info!(
        target: "dqplb::dcqcn",
        "dcqcn: {} (pci {}, netdev {}): profile {}: {} ok, {} mismatched, {} unknown",
        s.device,
        s.bdf.as_deref().unwrap_or("?"),
        s.netdev.as_deref().unwrap_or("?"),
        r.profile,
        r.matched_count(),
        r.failure_count(),
        r.unknown_count()
    );
    for row in r.failures() {
        let actual = match &row.actual {
            Reading::Value(v) => v.to_string(),
            Reading::Garbage(g) => format!("garbage ({g})"),
            Reading::Unknown(w) => format!("unknown ({w})"),
        };
        tracing::warn!(
            target: "dqplb::dcqcn",
            "dcqcn: {}: {} expected {}, actual {} [{}]: {}",
            s.device,
            row_path(s, row),
            row.expected.map_or("-".to_string(), |e| e.to_string()),
            actual,
            row.severity.map_or("warning", |v| v.as_str()),
            row.reason.as_deref().unwrap_or("")
        );
    }
    let reasons = r.unknown_reasons();
    if !reasons.is_empty() {
        tracing::info!(
            target: "dqplb::dcqcn",
            "dcqcn: {}: UNVERIFIED: {} checked value(s) unreadable, so DCQCN cannot be confirmed (not a failure): {}",
            s.device,
            r.unknown_count(),
            reasons.join("; ")
        );
    }
}
