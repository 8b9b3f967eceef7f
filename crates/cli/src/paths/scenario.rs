//! The five shaped-path scenarios of `dqplb paths-bench`: per-path rates, rate changes over time and
//! the engine settings (QPs, outstanding depth, segment and message size) each one runs with.

use dqplb_config::{ConnClass, SiteConfig};

/// A scheduled rate change of one path, `at_ms` after the start of the trial.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RateChange {
    pub at_ms: u64,
    pub path: usize,
    pub mbit: f64,
}

/// One scenario, already scaled to the rates this run uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scenario {
    pub id: u32,
    pub name: &'static str,
    pub what: &'static str,
    /// Initial rate of each path (= data stream = QP), Mbit/s.
    pub rates_mbit: Vec<f64>,
    pub changes: Vec<RateChange>,
    pub outstanding: u32,
    pub segment_bytes: u32,
    pub message_bytes: usize,
    /// Messages kept posted on both sides.
    pub inflight_messages: usize,
    /// Where the outstanding depth came from (printed with the results).
    pub depth_note: String,
}

/// Knobs shared by every scenario; `unit_mbit` is the rate of one "full" path.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScenarioKnobs {
    pub unit_mbit: f64,
    pub duration_ms: u64,
    pub segment_bytes: u32,
    pub outstanding: Option<u32>,
    pub message_bytes: usize,
    pub inflight_messages: usize,
    /// Rate of the slow path (scenario 2) and the degraded one (scenario 4) over a full path.
    pub slow_fraction: f64,
}

/// Ids accepted by `--scenario`.
pub(crate) const ALL_IDS: [u32; 5] = [1, 2, 3, 4, 5];

/// Path index that is slow (scenario 2) or degrades (scenario 4): not QP 0, so single-qp is not
/// trivially hurt and static-split's bound is visible.
pub(crate) const SLOW_PATH: usize = 2;

/// Emulated round trip of the cross-DC class for its outstanding plan (there is no delay qdisc on
/// this kernel, so depth comes from the plan only).
pub(crate) const CROSS_DC_RTT_US: f64 = 20_000.0;

/// Default depth for the in-rack scenarios.
pub(crate) const DEFAULT_OUTSTANDING: u32 = 4;

/// Builds scenario `id` with `k`; Err names an unknown id.
pub(crate) fn build(id: u32, k: &ScenarioKnobs) -> Result<Scenario, String> {
    let u = k.unit_mbit;
    let depth = k.outstanding.unwrap_or(DEFAULT_OUTSTANDING);
    let note = match k.outstanding {
        Some(d) => format!("--outstanding {d}"),
        None => format!("default {DEFAULT_OUTSTANDING}"),
    };
    let base = |id, name, what, rates: Vec<f64>| Scenario {
        id,
        name,
        what,
        rates_mbit: rates,
        changes: Vec::new(),
        outstanding: depth,
        segment_bytes: k.segment_bytes,
        message_bytes: k.message_bytes,
        inflight_messages: k.inflight_messages,
        depth_note: note.clone(),
    };
    Ok(match id {
        1 => base(1, "equal-4", "4 equal paths", vec![u; 4]),
        2 => {
            let mut r = vec![u; 4];
            r[SLOW_PATH] = u * k.slow_fraction;
            base(
                2,
                "one-slow-4",
                "4 paths, one at 10% (congested ECMP path)",
                r,
            )
        }
        3 => base(
            3,
            "spread-8",
            "8 paths at 1:2:...:8",
            (1..=8).map(|i| u * f64::from(i) / 8.0).collect(),
        ),
        4 => {
            let mut s = base(
                4,
                "degrade-4",
                "4 paths, one drops to 10% at 1/3 of the run, back at 2/3",
                vec![u; 4],
            );
            let (t1, t2) = (k.duration_ms / 3, 2 * k.duration_ms / 3);
            s.changes = vec![
                RateChange {
                    at_ms: t1,
                    path: SLOW_PATH,
                    mbit: u * k.slow_fraction,
                },
                RateChange {
                    at_ms: t2,
                    path: SLOW_PATH,
                    mbit: u,
                },
            ];
            s
        }
        5 => {
            let rates = vec![2.0 * u, u];
            let (outstanding, note) = match k.outstanding {
                Some(d) => (d, format!("--outstanding {d}")),
                None => cross_dc_depth(rates.iter().sum(), k.segment_bytes),
            };
            Scenario {
                outstanding,
                depth_note: note,
                ..base(
                    5,
                    "cross-dc-2",
                    "cross-DC-like: 2 deep paths at 2:1, depth from the cross-dc class plan",
                    rates,
                )
            }
        }
        other => return Err(format!("unknown scenario {other}: expected 1..=5 or all")),
    })
}

/// Outstanding depth of the cross-dc class plan for a 2-QP connection of `total_mbit` over an
/// emulated `CROSS_DC_RTT_US` round trip.
fn cross_dc_depth(total_mbit: f64, segment_bytes: u32) -> (u32, String) {
    let mut cfg = SiteConfig::default();
    let spec = &mut cfg.class.cross_dc;
    spec.rate_gbps = total_mbit / 1000.0;
    spec.rtt_us = CROSS_DC_RTT_US;
    spec.qps = 2;
    spec.min_outstanding = 8;
    spec.max_outstanding = 64;
    spec.segment_bytes = Some(u64::from(segment_bytes));
    let p = cfg.plan(ConnClass::CrossDc);
    let note = format!(
        "cross-dc plan: {} Gb/s x {} us = {} B BDP / {} B segment -> {} (clamped 8..=64)",
        p.rate_gbps, p.rtt_us, p.bdp_bytes, p.segment_bytes, p.outstanding
    );
    (p.outstanding, note)
}

impl Scenario {
    /// Rate of each path at `t_ms` after the start, applying the changes due by then.
    pub(crate) fn rates_at(&self, t_ms: u64) -> Vec<f64> {
        let mut r = self.rates_mbit.clone();
        for c in self.changes.iter().filter(|c| c.at_ms <= t_ms) {
            if let Some(x) = r.get_mut(c.path) {
                *x = c.mbit;
            }
        }
        r
    }

    /// Sum of the path rates at `t_ms` (the ideal throughput), Mbit/s.
    pub(crate) fn ideal_at(&self, t_ms: u64) -> f64 {
        self.rates_at(t_ms).iter().sum()
    }

    /// Time-weighted mean of the ideal over `[from_ms, to_ms)`.
    pub(crate) fn mean_ideal(&self, from_ms: u64, to_ms: u64) -> f64 {
        if to_ms <= from_ms {
            return self.ideal_at(from_ms);
        }
        let mut cuts: Vec<u64> = self
            .changes
            .iter()
            .map(|c| c.at_ms)
            .filter(|t| *t > from_ms && *t < to_ms)
            .collect();
        cuts.push(to_ms);
        cuts.sort_unstable();
        let (mut acc, mut t) = (0.0, from_ms);
        for c in cuts {
            acc += self.ideal_at(t) * (c - t) as f64;
            t = c;
        }
        acc / (to_ms - from_ms) as f64
    }

    /// Time-weighted mean rate of each path over `[from_ms, to_ms)`.
    pub(crate) fn mean_rates(&self, from_ms: u64, to_ms: u64) -> Vec<f64> {
        let n = self.rates_mbit.len();
        if to_ms <= from_ms {
            return self.rates_at(from_ms);
        }
        let mut cuts: Vec<u64> = self
            .changes
            .iter()
            .map(|c| c.at_ms)
            .filter(|t| *t > from_ms && *t < to_ms)
            .collect();
        cuts.push(to_ms);
        cuts.sort_unstable();
        let (mut acc, mut t) = (vec![0.0; n], from_ms);
        for c in cuts {
            for (a, r) in acc.iter_mut().zip(self.rates_at(t)) {
                *a += r * (c - t) as f64;
            }
            t = c;
        }
        acc.iter().map(|a| a / (to_ms - from_ms) as f64).collect()
    }

    pub(crate) fn qps(&self) -> usize {
        self.rates_mbit.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs() -> ScenarioKnobs {
        ScenarioKnobs {
            unit_mbit: 100.0,
            duration_ms: 3000,
            segment_bytes: 65536,
            outstanding: None,
            message_bytes: 4 << 20,
            inflight_messages: 8,
            slow_fraction: 0.1,
        }
    }

    #[test]
    fn rates_and_ideals() {
        let k = knobs();
        assert_eq!(build(1, &k).unwrap().ideal_at(0), 400.0);
        let s2 = build(2, &k).unwrap();
        assert_eq!(s2.rates_mbit, vec![100.0, 100.0, 10.0, 100.0]);
        let s3 = build(3, &k).unwrap();
        assert_eq!(s3.qps(), 8);
        assert_eq!(s3.rates_mbit[0], 12.5);
        assert_eq!(s3.ideal_at(0), 450.0);
        let s4 = build(4, &k).unwrap();
        assert_eq!(s4.ideal_at(999), 400.0);
        assert_eq!(s4.ideal_at(1000), 310.0);
        assert_eq!(s4.ideal_at(2000), 400.0);
        // [500, 3000): 500 ms at 400, 1000 at 310, 1000 at 400.
        assert!(
            (s4.mean_ideal(500, 3000) - (500.0 * 400.0 + 1000.0 * 310.0 + 1000.0 * 400.0) / 2500.0)
                .abs()
                < 1e-9
        );
        let m = s4.mean_rates(1000, 2000);
        assert_eq!(m, vec![100.0, 100.0, 10.0, 100.0]);
        assert!(build(6, &k).unwrap_err().contains("unknown scenario 6"));
    }

    #[test]
    fn cross_dc_depth_comes_from_the_plan() {
        let s5 = build(5, &knobs()).unwrap();
        // 0.3 Gb/s * 20000 us * 125 = 750000 B; ceil(750000 / 65536) = 12.
        assert_eq!(s5.outstanding, 12);
        assert!(s5.depth_note.contains("750000 B"), "{}", s5.depth_note);
        let s5b = build(
            5,
            &ScenarioKnobs {
                outstanding: Some(3),
                ..knobs()
            },
        )
        .unwrap();
        assert_eq!(s5b.outstanding, 3);
    }
}
