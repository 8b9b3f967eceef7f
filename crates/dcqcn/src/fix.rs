//! `--fix-commands`: the exact commands that would bring a drifted device to its profile, in the
//! runtime form (writing cc_params / ecn files) and the persistent mlxconfig form. Prints only.

use super::compare::DeviceReport;
use super::names;
use super::reader::Reading;

/// Commands for one device; empty `runtime` means nothing to fix.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FixPlan {
    pub device: String,
    pub runtime: Vec<String>,
    /// One `mlxconfig -d <BDF> -y set NAME_Pn=v ...` line, when any drifted value has a name.
    pub firmware: Option<String>,
    /// Values that only the runtime form can set, and other caveats.
    pub notes: Vec<String>,
}

/// mlxconfig port suffix of a PCI function: ConnectX exposes each physical port as its own PCI
/// function, so function 0 is `_P1`, function 1 is `_P2` (assumption stated in docs).
pub(crate) fn mlxconfig_port(bdf: &str) -> u32 {
    bdf.rsplit('.')
        .next()
        .and_then(|f| u32::from_str_radix(f, 16).ok())
        .map_or(1, |f| f + 1)
}

/// Builds the plan for one compared device.
pub fn fix_plan(report: &DeviceReport) -> FixPlan {
    let snap = &report.snapshot;
    let mut plan = FixPlan {
        device: snap.device.clone(),
        ..FixPlan::default()
    };
    let port = snap.bdf.as_deref().map_or(1, mlxconfig_port);
    let mut settings: Vec<String> = Vec::new();
    let mut ecn_fix = false;
    for row in report.failures() {
        let Some(expected) = row.expected else {
            continue;
        };
        let value = expected.nearest(row.actual.value());
        if let Some(rest) = row.param.strip_prefix("ecn/") {
            ecn_fix = true;
            match &snap.ecn_dir {
                Some(ecn) => {
                    let path = ecn.join(rest);
                    plan.runtime
                        .push(format!("echo {value} > {}", path.display()));
                }
                None => plan.notes.push(format!(
                    "{}: netdev unknown, cannot write {rest}",
                    snap.device
                )),
            }
            continue;
        }
        match &snap.cc_dir {
            Some(dir) => plan
                .runtime
                .push(format!("echo {value} > {}", dir.join(&row.param).display())),
            None => plan
                .notes
                .push(format!("{}: cc_params directory unknown", row.param)),
        }
        match names::mlxconfig_name(&row.param) {
            Some(stem) => settings.push(format!("{stem}_P{port}={value}")),
            None => plan.notes.push(format!(
                "{} has no mlxconfig equivalent: runtime form only",
                row.param
            )),
        }
    }
    if ecn_fix {
        let mut mask = 1u32 << report.roce_priority.min(7);
        for (prio, (rp, np)) in snap.ecn_rp.iter().zip(&snap.ecn_np).enumerate() {
            if matches!((rp, np), (Reading::Value(1), Reading::Value(1))) {
                mask |= 1 << prio;
            }
        }
        settings.push(format!("{}_P{port}={mask}", names::MLXCONFIG_PRIO_MASK));
    }
    if !settings.is_empty() {
        plan.firmware = Some(match &snap.bdf {
            Some(bdf) => format!("mlxconfig -d {bdf} -y set {}", settings.join(" ")),
            None => format!(
                "mlxconfig -d <{}: PCI address unknown> -y set {}",
                snap.device,
                settings.join(" ")
            ),
        });
    }
    plan
}

/// Text for all plans, with the warnings an operator needs before running anything.
pub fn format_fix_plans(plans: &[FixPlan]) -> String {
    let mut out = String::new();
    if plans
        .iter()
        .all(|p| p.runtime.is_empty() && p.firmware.is_none())
    {
        out.push_str("# nothing to fix: every readable value matches the profile\n");
        return out;
    }
    out.push_str("# NOT RUN: review, then run as root.\n");
    out.push_str("# Runtime form: takes effect now, LOST ON REBOOT or driver reload.\n");
    out.push_str("# Firmware form (mlxconfig): persistent, needs a firmware reset or reboot\n");
    out.push_str("#   (mlxfwreset -d <dev> reset) before it applies.\n");
    for p in plans {
        if p.runtime.is_empty() && p.firmware.is_none() && p.notes.is_empty() {
            continue;
        }
        out.push_str(&format!("\n# {}: runtime\n", p.device));
        for c in &p.runtime {
            out.push_str(c);
            out.push('\n');
        }
        if let Some(fw) = &p.firmware {
            out.push_str(&format!("# {}: persistent (firmware)\n{fw}\n", p.device));
        }
        for n in &p.notes {
            out.push_str(&format!("# note: {n}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_suffix_from_pci_function() {
        assert_eq!(mlxconfig_port("0000:3b:00.0"), 1);
        assert_eq!(mlxconfig_port("0000:3b:00.1"), 2);
        assert_eq!(mlxconfig_port("weird"), 1);
    }
}
