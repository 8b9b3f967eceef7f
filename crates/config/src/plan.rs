//! Connection classes (same-rail / cross-rail / cross-DC) from fabric ids, and the per-class plan:
//! QPs, outstanding depth N_out = ceil(rate * RTT / segment) clamped, and the in-flight budget check.

use serde::Serialize;

use super::hca::FabricId;
use super::schema::{PolicyName, SiteConfig};

/// The distance class of a connection, which selects its `[class.*]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConnClass {
    SameRail,
    CrossRail,
    CrossDc,
}

impl ConnClass {
    /// Every class, nearest first.
    pub const ALL: [ConnClass; 3] = [
        ConnClass::SameRail,
        ConnClass::CrossRail,
        ConnClass::CrossDc,
    ];

    /// The table name of the class (`same-rail`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ConnClass::SameRail => "same-rail",
            ConnClass::CrossRail => "cross-rail",
            ConnClass::CrossDc => "cross-dc",
        }
    }
}

/// Different data centre -> cross-DC; same DC, different rail -> cross-rail; else same-rail.
pub fn classify(local: &FabricId, remote: &FabricId) -> ConnClass {
    if local.dc != remote.dc {
        ConnClass::CrossDc
    } else if local.rail != remote.rail {
        ConnClass::CrossRail
    } else {
        ConnClass::SameRail
    }
}

/// What a connection of one class will use, and whether it fits the in-flight budget.
///
/// Budget rule: when `qps * outstanding * segment` exceeds `[engine] inflight-budget-bytes`,
/// outstanding is lowered to the largest depth that fits, but never below `min-outstanding`;
/// the QP count is never changed. `budget_note` says what was done; `within_budget` is false
/// only when even `min-outstanding` does not fit (the plan then still uses `min-outstanding`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassPlan {
    pub class: ConnClass,
    /// Data QPs: the class's `qps`, or 1 under the `single-qp` policy.
    pub qps: u32,
    /// Outstanding segments per QP after the budget rule.
    pub outstanding: u32,
    /// ceil(bdp / segment): the depth that covers the bandwidth-delay product.
    pub bdp_segments: u64,
    /// `bdp_segments` clamped to [min_outstanding, max_outstanding], before the budget rule.
    pub ideal_outstanding: u32,
    pub min_outstanding: u32,
    pub max_outstanding: u32,
    pub segment_bytes: u64,
    pub rate_gbps: f64,
    pub rtt_us: f64,
    /// Bandwidth-delay product, rate * RTT, rounded up to whole bytes.
    pub bdp_bytes: u64,
    /// qps * outstanding * segment_bytes.
    pub inflight_bytes: u64,
    pub budget_bytes: u64,
    pub within_budget: bool,
    pub budget_note: Option<String>,
    /// The depth rule the class's send comms install (`ClassSpec::depth_rule`): the
    /// per-QP window rises from `outstanding` to `raised` while the QPs' latencies diverge.
    pub depth_rule: Option<super::schema::DepthRuleSpec>,
    /// The re-pin rule on the depth rule (`ClassSpec::repin_rule`; verbs send comms only).
    pub repin_rule: Option<super::schema::RepinRuleSpec>,
}

/// Bandwidth-delay product in bytes: Gb/s * us * 1e9 / 8 * 1e-6 = rate * rtt * 125.
pub fn bdp_bytes(rate_gbps: f64, rtt_us: f64) -> u64 {
    let bdp = (rate_gbps * rtt_us * 125.0).ceil();
    if bdp.is_finite() && bdp > 0.0 {
        bdp as u64
    } else {
        0
    }
}

impl SiteConfig {
    /// The re-pin rule `class`'s verbs send comms install (`ClassSpec::repin_rule`), none where
    /// the switches hash the destination QPN too (`[paths] hash-dest-qpn`): there another QP's
    /// source port is not its path.
    pub fn repin_rule(&self, class: ConnClass) -> Option<super::schema::RepinRuleSpec> {
        if self.paths.hash_dest_qpn {
            return None;
        }
        self.class.get(class).repin_rule()
    }

    /// The plan of one connection class under this configuration.
    pub fn plan(&self, class: ConnClass) -> ClassPlan {
        let spec = self.class.get(class);
        let segment = self.segment_bytes_for(class).max(1);
        let bdp = bdp_bytes(spec.rate_gbps, spec.rtt_us);
        let raw = bdp.div_ceil(segment);
        let (lo, hi) = (
            spec.min_outstanding,
            spec.max_outstanding.max(spec.min_outstanding),
        );
        let ideal = raw.clamp(u64::from(lo), u64::from(hi)) as u32;
        // The single-qp policy posts everything on one data QP whatever the class asks for.
        let qp_count = if self.engine.policy == PolicyName::SingleQp {
            1
        } else {
            spec.qps
        };
        let qps = u64::from(qp_count);
        let budget = self.engine.inflight_budget_bytes;
        let per_depth = qps.saturating_mul(segment).max(1);
        let wanted = per_depth.saturating_mul(u64::from(ideal));
        let (outstanding, within, note) = if wanted <= budget {
            (ideal, true, None)
        } else {
            let fit = budget / per_depth;
            if fit >= u64::from(lo) {
                let depth = fit as u32;
                let note = format!(
                    "outstanding lowered from {ideal} to {depth}: {qps} QPs x {ideal} x {segment} B \
                     = {wanted} B exceeds the in-flight budget of {budget} B"
                );
                (depth, true, Some(note))
            } else {
                let at_min = per_depth.saturating_mul(u64::from(lo));
                let note = format!(
                    "over budget even at min-outstanding {lo}: {qps} QPs x {lo} x {segment} B \
                     = {at_min} B exceeds the in-flight budget of {budget} B"
                );
                (lo, false, Some(note))
            }
        };
        ClassPlan {
            class,
            qps: qp_count,
            outstanding,
            bdp_segments: raw,
            ideal_outstanding: ideal,
            min_outstanding: lo,
            max_outstanding: hi,
            segment_bytes: segment,
            rate_gbps: spec.rate_gbps,
            rtt_us: spec.rtt_us,
            bdp_bytes: bdp,
            inflight_bytes: per_depth.saturating_mul(u64::from(outstanding)),
            budget_bytes: budget,
            within_budget: within,
            budget_note: note,
            depth_rule: spec.depth_rule(),
            repin_rule: self.repin_rule(class),
        }
    }

    /// The plans of all three classes, nearest first.
    pub fn plans(&self) -> [ClassPlan; 3] {
        ConnClass::ALL.map(|c| self.plan(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(dc: u32, rail: u32) -> FabricId {
        FabricId {
            id: dc * 8 + rail,
            dc,
            rail,
            plane: None,
        }
    }

    #[test]
    fn classify_by_dc_then_rail() {
        assert_eq!(classify(&fid(0, 1), &fid(0, 1)), ConnClass::SameRail);
        assert_eq!(classify(&fid(0, 1), &fid(0, 2)), ConnClass::CrossRail);
        assert_eq!(classify(&fid(0, 1), &fid(1, 1)), ConnClass::CrossDc);
        assert_eq!(classify(&fid(1, 3), &fid(0, 5)), ConnClass::CrossDc);
    }

    /// The default's windows are sized below NCCL's 4 MiB in flight per connection (the note
    /// `dqplb plan` prints otherwise), so these figures pin the shipped sizing.
    #[test]
    fn default_same_rail_plan_is_clamped_down_to_max() {
        // 400 Gb/s * 4 us = 200000 B; ceil(200000 / 65536) = 4 -> max 2; 4 * 2 * 65536.
        let p = SiteConfig::default().plan(ConnClass::SameRail);
        assert_eq!(p.bdp_bytes, 200_000);
        assert_eq!(
            (p.bdp_segments, p.min_outstanding, p.max_outstanding),
            (4, 1, 2)
        );
        assert_eq!((p.qps, p.ideal_outstanding, p.outstanding), (4, 2, 2));
        assert_eq!(p.inflight_bytes, 524_288);
        assert!(p.within_budget);
        assert_eq!(p.budget_note, None);
    }

    #[test]
    fn default_cross_rail_plan() {
        // 400 * 12 * 125 = 600000 B; ceil(600000 / 65536) = 10 -> max 2; 8 * 2 * 65536.
        let p = SiteConfig::default().plan(ConnClass::CrossRail);
        assert_eq!(p.bdp_bytes, 600_000);
        assert_eq!((p.qps, p.bdp_segments, p.outstanding), (8, 10, 2));
        assert_eq!(p.inflight_bytes, 1_048_576);
    }

    #[test]
    fn default_cross_dc_plan_stays_below_nccls_buffer() {
        // 400 * 2000 * 125 = 1e8 B; ceil(1e8 / 65536) = 1526 -> max 3; 16 * 3 * 65536 = 3 MiB.
        let p = SiteConfig::default().plan(ConnClass::CrossDc);
        assert_eq!(p.bdp_bytes, 100_000_000);
        assert_eq!((p.bdp_segments, p.ideal_outstanding), (1526, 3));
        assert_eq!(p.outstanding, 3);
        assert_eq!(p.inflight_bytes, 3_145_728);
        assert_eq!(p.budget_note, None);
    }

    #[test]
    fn budget_cut_lowers_outstanding() {
        // The former cross-dc sizing: 16 QPs, 64..=256 outstanding of 512 KiB.
        let mut c = SiteConfig::default();
        c.engine.segment_bytes = 524_288;
        (
            c.class.cross_dc.min_outstanding,
            c.class.cross_dc.max_outstanding,
        ) = (64, 256);
        // ceil(1e8 / 524288) = 191 (in 64..=256); 16 * 191 * 524288 = 1602224128 > 1 GiB
        // -> 1073741824 / (16 * 524288) = 128.
        let p = c.plan(ConnClass::CrossDc);
        assert_eq!((p.bdp_segments, p.ideal_outstanding), (191, 191));
        assert_eq!(p.outstanding, 128);
        assert_eq!(p.inflight_bytes, 1_073_741_824);
        assert!(p.within_budget);
        let note = p.budget_note.unwrap_or_default();
        assert!(note.contains("from 191 to 128"), "{note}");
        assert!(note.contains("1602224128 B"), "{note}");
    }

    #[test]
    fn over_budget_even_at_min_is_reported() {
        let mut c = SiteConfig::default();
        c.engine.segment_bytes = 524_288;
        c.engine.inflight_budget_bytes = 256 << 20;
        (
            c.class.cross_dc.min_outstanding,
            c.class.cross_dc.max_outstanding,
        ) = (64, 256);
        // cross-dc: min 64 * 16 QPs * 512 KiB = 512 MiB > 256 MiB.
        let p = c.plan(ConnClass::CrossDc);
        assert_eq!(p.outstanding, 64);
        assert!(!p.within_budget);
        assert_eq!(p.inflight_bytes, 536_870_912);
    }

    #[test]
    fn class_segment_override_and_max_clamp() {
        let mut c = SiteConfig::default();
        c.class.cross_rail.segment_bytes = Some(65536);
        (
            c.class.cross_rail.min_outstanding,
            c.class.cross_rail.max_outstanding,
        ) = (8, 32);
        c.class.cross_rail.rtt_us = 20.0;
        // 400 * 20 * 125 = 1e6 B; ceil(1e6 / 65536) = 16 (within 8..=32); 8 * 16 * 65536.
        let p = c.plan(ConnClass::CrossRail);
        assert_eq!((p.segment_bytes, p.outstanding), (65536, 16));
        assert_eq!(p.inflight_bytes, 8_388_608);
        c.class.cross_rail.rtt_us = 100.0;
        // 5e6 / 65536 = 76.3 -> 77 -> clamped to 32.
        let p = c.plan(ConnClass::CrossRail);
        assert_eq!(
            (p.bdp_segments, p.ideal_outstanding, p.outstanding),
            (77, 32, 32)
        );
    }

    #[test]
    fn single_qp_policy_plans_one_qp() {
        let mut c = SiteConfig::default();
        c.engine.policy = PolicyName::SingleQp;
        c.engine.segment_bytes = 524_288;
        (
            c.class.cross_dc.min_outstanding,
            c.class.cross_dc.max_outstanding,
        ) = (64, 256);
        // cross-dc: 1 QP x 191 x 524288 = 100139008 B, within 1 GiB, so no budget cut.
        let p = c.plan(ConnClass::CrossDc);
        assert_eq!(
            (p.qps, p.outstanding, p.inflight_bytes),
            (1, 191, 100_139_008)
        );
        assert_eq!(p.budget_note, None);
    }

    #[test]
    fn fractional_rate_and_rtt() {
        assert_eq!(bdp_bytes(100.0, 2.5), 31_250);
        assert_eq!(bdp_bytes(0.001, 0.001), 1);
    }
}
