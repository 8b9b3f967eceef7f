//! `dqplb sim sweep`'s analysis of a full qps x outstanding x segment grid of runs: the smallest q
//! near the fluid bound, the smallest loss-free depth, the largest segment without HoL cost.

// The criteria, exactly (docs/records/simulation.md, "Sweep"); t(q, d, s) is a run's time over ideal:
// * B* = the lowest `bound_upper` of the grid (the best split over the hashed QP paths at the
//   grid's best q). q* = the smallest q with min over (d, s) of t(q, d, s) <= (1 + bound%) B*;
//   when no q meets it, the q with the lowest time stands in and `q_met` is false.
// * B and F links are lossless, so what a too-shallow window loses is throughput: depth d is
//   loss-free at (q*, s) when the run is clean (no engine, protocol or order error, every message
//   released) and t(q*, d, s) <= (1 + loss%) min over d' of t(q*, d', s). d*(s) = the smallest.
// * Head-of-line cost: with s0 the smallest segment, segment s has none when the message latency
//   p99 at (q*, d*(s), s) is <= (1 + hol%) that at (q*, d*(s0), s0). s* = the largest such s
//   whose t(q*, d*(s), s) also stays within the bound when q* met it (so the printed point does);
//   when none does, the largest s without head-of-line cost.

use serde::Serialize;

use super::error::SimError;

/// One grid point's outcome (what the analysis reads from a run).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SweepPoint {
    pub qps: usize,
    pub outstanding: u32,
    pub segment_bytes: u32,
    pub time_over_ideal: f64,
    pub pct_of_ideal: f64,
    /// Best split over this q's hashed paths, time over ideal (`SimResult::bound_upper`).
    pub bound_upper: f64,
    pub bound_lower: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Engine, protocol and order errors plus messages not released.
    pub faults: u64,
    pub events: u64,
}

impl SweepPoint {
    pub fn clean(&self) -> bool {
        self.faults == 0
    }
}

/// Tolerances, in percent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Criteria {
    /// q: time within this much of the fluid bound B*.
    pub bound_pct: f64,
    /// Depth: time within this much of the best depth at the same q and segment.
    pub loss_pct: f64,
    /// Segment: latency p99 within this much of the smallest segment's.
    pub hol_pct: f64,
}

impl Default for Criteria {
    fn default() -> Self {
        Criteria {
            bound_pct: 5.0,
            loss_pct: 1.0,
            hol_pct: 10.0,
        }
    }
}

/// Per q: its best time over the grid's depths and segments, and its fluid bound.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PerQ {
    pub qps: usize,
    pub best_time_over_ideal: f64,
    pub best_outstanding: u32,
    pub best_segment_bytes: u32,
    pub bound_upper: f64,
    /// best time <= (1 + bound%) B*.
    pub within_bound: bool,
}

/// Per segment at q*: the smallest loss-free depth and its latency p99.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PerSegment {
    pub segment_bytes: u32,
    /// None when no depth ran clean at this segment.
    pub outstanding: Option<u32>,
    pub time_over_ideal: f64,
    pub p99_us: f64,
    /// p99 <= (1 + hol%) the smallest segment's.
    pub no_hol_cost: bool,
    /// time <= (1 + bound%) B*.
    pub within_bound: bool,
}

/// What the sweep concludes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Findings {
    pub criteria: Criteria,
    /// B*, time over ideal, and as % of ideal.
    pub bound_over_ideal: f64,
    pub bound_pct_of_ideal: f64,
    pub per_q: Vec<PerQ>,
    /// The smallest q within bound% of B* (or the fastest q when none is: `q_met` false).
    pub qps: usize,
    pub q_met: bool,
    pub per_segment: Vec<PerSegment>,
    /// s*: the largest segment without head-of-line cost, and d*(s*).
    pub segment_bytes: u32,
    pub outstanding: u32,
    /// t(q*, d*(s*), s*).
    pub time_over_ideal: f64,
}

/// The distinct values of `it`, ascending (a grid's q, outstanding or segment axis).
pub fn sorted_unique<T: Copy + Ord>(it: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = it.collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Applies the criteria to a full grid (every q x outstanding x segment combination once).
pub fn analyse(points: &[SweepPoint], c: &Criteria) -> Result<Findings, SimError> {
    let qs = sorted_unique(points.iter().map(|p| p.qps));
    let ds = sorted_unique(points.iter().map(|p| p.outstanding));
    let ss = sorted_unique(points.iter().map(|p| p.segment_bytes));
    if points.is_empty() || points.len() != qs.len() * ds.len() * ss.len() {
        return Err(SimError::IncompleteGrid {
            points: points.len(),
            qps: qs.len(),
            depths: ds.len(),
            segments: ss.len(),
        });
    }
    let at = |q: usize, d: u32, s: u32| {
        points
            .iter()
            .find(|p| p.qps == q && p.outstanding == d && p.segment_bytes == s)
    };
    let b_star = points
        .iter()
        .map(|p| p.bound_upper)
        .filter(|b| *b > 0.0)
        .fold(f64::INFINITY, f64::min);
    if !b_star.is_finite() {
        return Err(SimError::NoBound);
    }
    let limit = (1.0 + c.bound_pct / 100.0) * b_star;
    let mut per_q = Vec::new();
    for &q in &qs {
        let best = points
            .iter()
            .filter(|p| p.qps == q && p.clean())
            .min_by(|a, b| a.time_over_ideal.total_cmp(&b.time_over_ideal));
        let bound = points
            .iter()
            .filter(|p| p.qps == q)
            .map(|p| p.bound_upper)
            .fold(f64::INFINITY, f64::min);
        if let Some(b) = best {
            per_q.push(PerQ {
                qps: q,
                best_time_over_ideal: b.time_over_ideal,
                best_outstanding: b.outstanding,
                best_segment_bytes: b.segment_bytes,
                bound_upper: bound,
                within_bound: b.time_over_ideal <= limit,
            });
        }
    }
    let met = per_q.iter().find(|p| p.within_bound).copied();
    let fastest = per_q
        .iter()
        .min_by(|a, b| a.best_time_over_ideal.total_cmp(&b.best_time_over_ideal))
        .copied()
        .ok_or(SimError::NoCleanPoint)?;
    let q_star = met.unwrap_or(fastest).qps;
    let mut per_segment = Vec::new();
    for &s in &ss {
        let clean: Vec<&SweepPoint> = ds
            .iter()
            .filter_map(|&d| at(q_star, d, s))
            .filter(|p| p.clean())
            .collect();
        let best = clean
            .iter()
            .map(|p| p.time_over_ideal)
            .fold(f64::INFINITY, f64::min);
        let pick = clean
            .iter()
            .find(|p| p.time_over_ideal <= (1.0 + c.loss_pct / 100.0) * best);
        per_segment.push(PerSegment {
            segment_bytes: s,
            outstanding: pick.map(|p| p.outstanding),
            time_over_ideal: pick.map_or(0.0, |p| p.time_over_ideal),
            p99_us: pick.map_or(0.0, |p| p.p99_us),
            no_hol_cost: false,
            within_bound: pick.is_some_and(|p| p.time_over_ideal <= limit),
        });
    }
    let p0 = per_segment
        .iter()
        .find(|p| p.outstanding.is_some())
        .map(|p| p.p99_us)
        .ok_or(SimError::NoCleanSegment)?;
    for p in &mut per_segment {
        p.no_hol_cost = p.outstanding.is_some() && p.p99_us <= (1.0 + c.hol_pct / 100.0) * p0;
    }
    let chosen = per_segment
        .iter()
        .rev()
        .find(|p| p.no_hol_cost && (p.within_bound || met.is_none()))
        .or_else(|| per_segment.iter().rev().find(|p| p.no_hol_cost))
        .copied()
        .ok_or(SimError::NoSegmentWithoutHol)?;
    Ok(Findings {
        criteria: *c,
        bound_over_ideal: b_star,
        bound_pct_of_ideal: 100.0 / b_star,
        per_q,
        qps: q_star,
        q_met: met.is_some(),
        per_segment,
        segment_bytes: chosen.segment_bytes,
        outstanding: chosen.outstanding.unwrap_or(1),
        time_over_ideal: chosen.time_over_ideal,
    })
}

/// The same table for class `class` (`same-rail` or `cross-dc`), `rtt_note` saying what the
/// written round trip is.
pub fn class_snippet(
    f: &Findings,
    class: &str,
    rate_gbps: f64,
    rtt_us: f64,
    rtt_note: &str,
    policy: &str,
) -> String {
    let c = &f.criteria;
    let q_note = if f.q_met {
        format!(
            "qps {} is the smallest q within {}% of the fluid bound ({:.1}% of ideal).",
            f.qps, c.bound_pct, f.bound_pct_of_ideal
        )
    } else {
        format!(
            "no q came within {}% of the fluid bound ({:.1}% of ideal): qps {} is the fastest.",
            c.bound_pct, f.bound_pct_of_ideal, f.qps
        )
    };
    let row = |kv: String, note: &str| {
        if note.is_empty() {
            format!("{kv}\n")
        } else {
            format!("{kv:<31} # {note}\n")
        }
    };
    let mut s = format!("[class.{class}]\n");
    s.push_str(&format!(
        "# From dqplb sim sweep, [engine] policy = \"{policy}\": {:.2}% of ideal at this point;\n# {q_note}\n",
        100.0 / f.time_over_ideal.max(1e-12)
    ));
    s.push_str(&row(format!("rate-gbps = {}", toml_number(rate_gbps)), ""));
    s.push_str(&row(format!("rtt-us = {}", toml_number(rtt_us)), rtt_note));
    s.push_str(&row(format!("qps = {}", f.qps), ""));
    s.push_str(&row(
        format!("min-outstanding = {}", f.outstanding),
        &format!(
            "smallest depth within {}% of the best depth's time",
            c.loss_pct
        ),
    ));
    s.push_str(&row(
        format!("max-outstanding = {}", f.outstanding),
        "min = max: the plan takes this depth whatever the BDP",
    ));
    s.push_str(&row(
        format!("segment-bytes = {}", f.segment_bytes),
        &format!(
            "largest segment without head-of-line cost (p99 within {}%)",
            c.hol_pct
        ),
    ));
    s
}

/// A number as plugin-conf/ writes it: an integer when it is one (the parser takes integers for
/// its float keys), else Rust's shortest form, which TOML reads back exactly.
fn toml_number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Tests: a clean grid point of time `t` over ideal, bound `bound`, message p99 `p99` us.
#[cfg(test)]
pub(crate) fn test_point(q: usize, d: u32, s: u32, t: f64, bound: f64, p99: f64) -> SweepPoint {
    SweepPoint {
        qps: q,
        outstanding: d,
        segment_bytes: s,
        time_over_ideal: t,
        pct_of_ideal: 100.0 / t,
        bound_upper: bound,
        bound_lower: 1.0,
        p50_us: p99 / 2.0,
        p99_us: p99,
        faults: 0,
        events: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::test_point as pt;
    use super::*;

    #[test]
    fn picks_by_the_stated_rules() {
        // B* = 1.0 (q = 4). q = 2's best 1.04 is within 5%; q = 1's 2.0 is not.
        let mut v = Vec::new();
        for (q, bound, base) in [(1, 2.0, 2.0), (2, 1.2, 1.04), (4, 1.0, 1.01)] {
            // depth 1 slower by 3%, depth 2 within 0.5% of depth 4 (the best); segment 2 adds
            // 5% latency, segment 3 adds 20%.
            for (s, lat) in [(1, 10.0), (2, 10.5), (3, 12.0)] {
                v.push(pt(q, 1, s, base * 1.03, bound, lat));
                v.push(pt(q, 2, s, base * 1.005, bound, lat));
                v.push(pt(q, 4, s, base, bound, lat));
            }
        }
        let f = analyse(&v, &Criteria::default()).unwrap();
        assert_eq!((f.qps, f.q_met), (2, true));
        assert_eq!(f.bound_over_ideal, 1.0);
        assert!(f.per_segment.iter().all(|p| p.outstanding == Some(2)));
        assert_eq!(
            f.per_segment
                .iter()
                .map(|p| p.no_hol_cost)
                .collect::<Vec<_>>(),
            [true, true, false]
        );
        assert_eq!((f.segment_bytes, f.outstanding), (2, 2));
        // Segment 2 at q = 2 slower by 2% everywhere: 1.0452 x 1.02 > 1.05, out of the bound,
        // so segment 1 is the largest that keeps the chosen point within it.
        let mut slow = v.clone();
        slow.iter_mut()
            .filter(|p| p.qps == 2 && p.segment_bytes == 2)
            .for_each(|p| p.time_over_ideal *= 1.02);
        let f = analyse(&slow, &Criteria::default()).unwrap();
        assert_eq!((f.qps, f.segment_bytes, f.outstanding), (2, 1, 2));
        assert!(f.per_segment[1].no_hol_cost && !f.per_segment[1].within_bound);
        // A faulty best depth does not count, and a q that never runs clean is skipped.
        v.iter_mut()
            .filter(|p| p.qps == 2 && p.outstanding == 2)
            .for_each(|p| p.faults = 1);
        let f = analyse(&v, &Criteria::default()).unwrap();
        assert_eq!((f.qps, f.outstanding), (2, 4));
        // Tighter bound: nothing within 0.5% of 1.0, so the fastest q (4) stands in.
        let tight = Criteria {
            bound_pct: 0.5,
            ..Criteria::default()
        };
        let f = analyse(&v, &tight).unwrap();
        assert_eq!((f.qps, f.q_met), (4, false));
        v.pop();
        assert!(analyse(&v, &tight).is_err());
    }
}
