//! Figures of a trial from its samples: goodput over the measured window, per-path bytes, the
//! 10 ms time series, and (rate changes) how long until throughput and the slow share settled.

use super::scenario::Scenario;
use super::trial::{LoopGaps, Sample, TrialOutput};
use dqplb_engine::PolicyKind;

/// Throughput must hold this fraction of the new ideal after a change (issue goal: 0.85).
pub(crate) const RECOVER_FRACTION: f64 = 0.85;
/// Window over which "throughput after a change" is averaged.
pub(crate) const RECOVER_WINDOW_MS: f64 = 50.0;
/// Shortest span and tolerance (fraction of the target share) for the slow path's share: with
/// 64 KiB segments a 10 Mbit/s path completes about 4 segments in 200 ms.
pub(crate) const SHARE_WINDOW_MS: f64 = 200.0;
pub(crate) const SHARE_TOLERANCE: f64 = 0.5;

/// The result of one (scenario, policy) trial.
#[derive(Debug, Clone)]
pub(crate) struct TrialSummary {
    pub scenario: u32,
    pub scenario_name: &'static str,
    pub policy: PolicyKind,
    pub qps: usize,
    pub outstanding: u32,
    pub segment_bytes: u32,
    pub message_bytes: usize,
    pub window_ms: f64,
    /// Mean of the sum of path rates over the measured window.
    pub ideal_mbit: f64,
    /// Goodput: bytes of completed messages.
    pub achieved_mbit: f64,
    /// Acknowledged segment bytes (includes parts of messages still in flight).
    pub acked_mbit: f64,
    pub ratio: f64,
    pub path_rate_mbit: Vec<f64>,
    pub path_bytes: Vec<u64>,
    pub path_mbit: Vec<f64>,
    pub peak_outstanding: Vec<u32>,
    /// CPU stalls of the sender and receiver threads (see trial::LoopGaps).
    pub gaps: [LoopGaps; 2],
    pub change: Option<ChangeFigures>,
}

/// How the trial reacted to its first rate change.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChangeFigures {
    pub change_ms: f64,
    pub new_ideal_mbit: f64,
    /// Time d after the change such that the mean throughput from change+d to any later point
    /// (at least 50 ms on, until the next change) stays >= 0.85 of the new ideal.
    pub recover_ms: Option<f64>,
    /// Time d after the change such that the slow path's share of the bytes acknowledged from
    /// change+d to any later point (at least 200 ms on) stays within 50% of its rate share.
    pub settle_ms: Option<f64>,
    /// Fraction of the 50 ms windows of the degraded phase that reach 0.85 of the new ideal.
    pub windows_ok: f64,
    /// Mean throughput over the degraded phase / new ideal.
    pub degraded_ratio: f64,
}

/// One 10 ms bin of the time series.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SeriesPoint {
    pub t_ms: f64,
    pub ideal_mbit: f64,
    pub total_mbit: f64,
    pub path_mbit: Vec<f64>,
}

pub(super) fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub(super) fn mbit(bytes: u64, dt_ms: f64) -> f64 {
    if dt_ms <= 0.0 {
        0.0
    } else {
        bytes as f64 * 8.0 / (dt_ms * 1e3)
    }
}

pub(super) fn acked(s: &Sample) -> u64 {
    s.qp_bytes.iter().sum()
}

/// Index of the first sample at or after `t_ms`.
pub(super) fn first_at(samples: &[Sample], t_ms: f64) -> Option<usize> {
    samples.iter().position(|s| ms(s.t_ns) >= t_ms)
}

/// Summarises a trial measured over `[warmup_ms, end]`.
pub(crate) fn summarize(
    sc: &Scenario,
    policy: PolicyKind,
    out: &TrialOutput,
    warmup_ms: f64,
) -> Result<TrialSummary, String> {
    let samples = &out.samples;
    let i = first_at(samples, warmup_ms)
        .ok_or_else(|| format!("no sample after the {warmup_ms} ms warm-up"))?;
    let j = samples.len() - 1;
    if j <= i {
        return Err(format!(
            "only {} samples after the warm-up: run longer",
            j + 1 - i
        ));
    }
    let (a, b) = (&samples[i], &samples[j]);
    let dt = ms(b.t_ns) - ms(a.t_ns);
    let (from, to) = (ms(a.t_ns) as u64, ms(b.t_ns) as u64);
    let ideal = sc.mean_ideal(from, to);
    let path_bytes: Vec<u64> = b
        .qp_bytes
        .iter()
        .zip(&a.qp_bytes)
        .map(|(y, x)| y - x)
        .collect();
    let achieved = mbit(b.msg_bytes - a.msg_bytes, dt);
    Ok(TrialSummary {
        scenario: sc.id,
        scenario_name: sc.name,
        policy,
        qps: sc.qps(),
        outstanding: sc.outstanding,
        segment_bytes: sc.segment_bytes,
        message_bytes: sc.message_bytes,
        window_ms: dt,
        ideal_mbit: ideal,
        achieved_mbit: achieved,
        acked_mbit: mbit(acked(b) - acked(a), dt),
        ratio: if ideal > 0.0 { achieved / ideal } else { 0.0 },
        path_rate_mbit: sc.mean_rates(from, to),
        path_mbit: path_bytes.iter().map(|x| mbit(*x, dt)).collect(),
        path_bytes,
        peak_outstanding: out.peak_outstanding.clone(),
        gaps: out.gaps,
        change: change_figures(sc, out),
    })
}

/// Per-bin rates between consecutive samples.
pub(crate) fn series(sc: &Scenario, samples: &[Sample]) -> Vec<SeriesPoint> {
    samples
        .windows(2)
        .map(|w| {
            let dt = ms(w[1].t_ns) - ms(w[0].t_ns);
            let path_mbit: Vec<f64> = w[1]
                .qp_bytes
                .iter()
                .zip(&w[0].qp_bytes)
                .map(|(y, x)| mbit(y - x, dt))
                .collect();
            SeriesPoint {
                t_ms: ms(w[1].t_ns),
                ideal_mbit: sc.ideal_at(ms(w[1].t_ns) as u64),
                total_mbit: path_mbit.iter().sum(),
                path_mbit,
            }
        })
        .collect()
}

/// Smallest delay d after `t0` such that `ok(from, to)` holds for the span from the sample at
/// t0+d to every later sample at least `min_span` later and no later than `t1` (a sustained
/// average, which a catch-up burst after a scheduling stall does not break); None if never.
pub(super) fn sustained_delay(
    samples: &[Sample],
    t0: f64,
    t1: f64,
    min_span: f64,
    ok: &dyn Fn(&Sample, &Sample) -> bool,
) -> Option<f64> {
    let start = first_at(samples, t0)?;
    let end = samples.iter().rposition(|s| ms(s.t_ns) <= t1)?;
    for i in start..=end {
        let ti = ms(samples[i].t_ns);
        let mut checked = 0;
        let mut good = true;
        for b in &samples[i..=end] {
            if ms(b.t_ns) - ti < min_span {
                continue;
            }
            checked += 1;
            if !ok(&samples[i], b) {
                good = false;
                break;
            }
        }
        if checked == 0 {
            return None;
        }
        if good {
            return Some(ti - t0);
        }
    }
    None
}

/// Fraction of the `window`-long spans starting at samples in [t0, t1 - window] where `ok` holds.
fn fraction_ok(
    samples: &[Sample],
    t0: f64,
    t1: f64,
    window: f64,
    ok: &dyn Fn(&Sample, &Sample) -> bool,
) -> f64 {
    let (mut n, mut good) = (0u32, 0u32);
    for (i, a) in samples.iter().enumerate() {
        let t = ms(a.t_ns);
        if t < t0 {
            continue;
        }
        let Some(j) = samples[i..].iter().position(|b| ms(b.t_ns) >= t + window) else {
            break;
        };
        let b = &samples[i + j];
        if ms(b.t_ns) > t1 {
            break;
        }
        n += 1;
        good += u32::from(ok(a, b));
    }
    if n == 0 {
        0.0
    } else {
        f64::from(good) / f64::from(n)
    }
}

fn change_figures(sc: &Scenario, out: &TrialOutput) -> Option<ChangeFigures> {
    let first = sc.changes.first()?;
    let (start_ns, _) = *out.actions.first()?;
    let t0 = ms(start_ns);
    let t1 = out
        .actions
        .get(1)
        .map(|a| ms(a.0))
        .unwrap_or_else(|| out.samples.last().map(|s| ms(s.t_ns)).unwrap_or(t0));
    let new_rates = sc.rates_at(first.at_ms);
    let new_ideal: f64 = new_rates.iter().sum();
    let slow = first.path;
    let target = new_rates.get(slow).copied().unwrap_or(0.0) / new_ideal;
    let floor = RECOVER_FRACTION * new_ideal;
    let fast_enough =
        |a: &Sample, b: &Sample| mbit(acked(b) - acked(a), ms(b.t_ns) - ms(a.t_ns)) >= floor;
    let share_ok = |a: &Sample, b: &Sample| {
        let total = acked(b) - acked(a);
        let mine = b
            .qp_bytes
            .get(slow)
            .zip(a.qp_bytes.get(slow))
            .map(|(y, x)| y - x)
            .unwrap_or(0);
        total > 0 && ((mine as f64 / total as f64) - target).abs() <= SHARE_TOLERANCE * target
    };
    let i = first_at(&out.samples, t0)?;
    let j = out.samples.iter().rposition(|s| ms(s.t_ns) <= t1)?;
    let (a, b) = (&out.samples[i], &out.samples[j]);
    Some(ChangeFigures {
        change_ms: t0,
        new_ideal_mbit: new_ideal,
        recover_ms: sustained_delay(&out.samples, t0, t1, RECOVER_WINDOW_MS, &fast_enough),
        settle_ms: sustained_delay(&out.samples, t0, t1, SHARE_WINDOW_MS, &share_ok),
        windows_ok: fraction_ok(&out.samples, t0, t1, RECOVER_WINDOW_MS, &fast_enough),
        degraded_ratio: mbit(acked(b) - acked(a), ms(b.t_ns) - ms(a.t_ns)) / new_ideal,
    })
}

#[cfg(test)]
mod tests {
    use super::super::scenario::{build, ScenarioKnobs};
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

    /// Samples every 10 ms of a sender moving `rate(t)` Mbit/s per QP.
    fn synth(n: usize, qps: usize, rate: &dyn Fn(f64, usize) -> f64) -> Vec<Sample> {
        let mut acc = vec![0f64; qps];
        let mut msg = 0f64;
        (0..n)
            .map(|k| {
                let t = k as f64 * 10.0;
                if k > 0 {
                    for (q, a) in acc.iter_mut().enumerate() {
                        let b = rate(t, q) * 1e3 * 10.0 / 8.0;
                        *a += b;
                        msg += b;
                    }
                }
                Sample {
                    t_ns: (t * 1e6) as u64,
                    msg_bytes: msg as u64,
                    qp_bytes: acc.iter().map(|x| *x as u64).collect(),
                }
            })
            .collect()
    }

    #[test]
    fn summary_of_a_perfect_trial_is_ideal() {
        let sc = build(2, &knobs()).unwrap();
        let samples = synth(301, 4, &|_, q| sc.rates_mbit[q]);
        let out = TrialOutput {
            samples,
            actions: vec![],
            peak_outstanding: vec![4; 4],
            gaps: Default::default(),
            ..Default::default()
        };
        let s = summarize(&sc, PolicyKind::Dqplb, &out, 500.0).unwrap();
        assert!((s.ideal_mbit - 310.0).abs() < 1e-9);
        assert!((s.ratio - 1.0).abs() < 1e-3, "{}", s.ratio);
        assert!((s.path_mbit[2] - 10.0).abs() < 0.01, "{:?}", s.path_mbit);
        assert_eq!(s.path_bytes[0], 31_250_000);
        assert!(s.change.is_none());
    }

    #[test]
    fn recovery_and_settle_are_measured_from_the_change() {
        let sc = build(4, &knobs()).unwrap();
        // Slow path drops at 1000 ms; the fast paths stall for 60 ms, then all is at the new rates.
        let samples = synth(301, 4, &|t, q| {
            if t <= 1000.0 || t > 2000.0 {
                100.0
            } else if q == 2 {
                10.0
            } else if t <= 1060.0 {
                0.0
            } else {
                100.0
            }
        });
        let out = TrialOutput {
            samples,
            actions: vec![(1_000_000_000, 5_000_000), (2_000_000_000, 5_000_000)],
            peak_outstanding: vec![],
            gaps: Default::default(),
            ..Default::default()
        };
        let s = summarize(&sc, PolicyKind::Dqplb, &out, 500.0).unwrap();
        let c = s.change.unwrap();
        assert_eq!(c.change_ms, 1000.0);
        assert_eq!(c.new_ideal_mbit, 310.0);
        // From 1000: 50 ms in, only 10 Mbit/s moved. From 1040: 20 ms of stall then 310, the mean
        // at 1090 is (20*10 + 30*310)/50 = 190 < 263.5; the first start that holds for every
        // later end is 1050 (at 1100: (10*10 + 40*310)/50 = 250 fails), so 1060.
        assert_eq!(c.recover_ms, Some(60.0));
        // Share from 1000 to 1200 (the first end 200 ms on): the slow path moved 20 bins x 10 of
        // 6 x 10 + 14 x 310 = 4400: 4.5%, within 50% of 10/310 = 3.2%, and closer later.
        let s_ms = c.settle_ms.unwrap();
        assert_eq!(s_ms, 0.0);
        // Windows 1000..=1050 (6 of them) contain stall bins and fail; 1060..=1950 pass.
        assert!(
            (c.windows_ok - 90.0 / 96.0).abs() < 1e-9,
            "{}",
            c.windows_ok
        );
        assert!(
            c.degraded_ratio < 1.0 && c.degraded_ratio > 0.8,
            "{}",
            c.degraded_ratio
        );
        let pts = series(&sc, &out.samples);
        assert_eq!(pts.len(), 300);
        assert_eq!(pts[110].ideal_mbit, 310.0);
        assert!((pts[110].total_mbit - 310.0).abs() < 0.1);
    }

    #[test]
    fn never_recovering_is_none() {
        let sc = build(4, &knobs()).unwrap();
        let samples = synth(301, 4, &|t, _| if t > 1000.0 { 10.0 } else { 100.0 });
        let out = TrialOutput {
            samples,
            actions: vec![(1_000_000_000, 1)],
            peak_outstanding: vec![],
            gaps: Default::default(),
            ..Default::default()
        };
        let c = summarize(&sc, PolicyKind::StaticSplit, &out, 500.0)
            .unwrap()
            .change
            .unwrap();
        assert_eq!(c.recover_ms, None);
    }
}
