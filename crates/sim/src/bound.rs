//! The fluid bound of any policy that splits each connection over its q hashed QP paths: the
//! min-max link load of the best fractional split (an LP), bracketed from both sides.

// Upper: a feasible split built greedily in `ROUNDS` slices (each slice on the path whose
// bottleneck stays lowest). Lower: LP duality: for link weights y >= 0 summing to 1,
// max_l load_l/cap_l >= sum_l y_l load_l/cap_l >= sum_c B_c min_k sum_{l in path_ck} y_l / cap_l,
// for every split; y is a soft-max of the greedy loads at a few temperatures, the best kept.

use super::topology::{Path, Rail};
use super::traffic::Phase;

/// Slices of each connection's bytes in the greedy split (and the sub-QPs of `lp-split`).
pub const ROUNDS: usize = 64;

/// Time over ideal of the best split over the QP paths: `lower <= optimum <= upper`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Bracket {
    pub lower: f64,
    pub upper: f64,
}

/// [`multipath_bound`] of one simulated step of `phase`: each connection's chunk against the
/// phase's ideal bytes per step.
pub(crate) fn phase_bound(rail: &Rail, paths: &[Path], qps: usize, phase: &Phase) -> Bracket {
    multipath_bound(
        rail,
        paths,
        qps,
        phase.chunk as f64,
        phase.ideal_bytes_per_step(),
    )
}

/// [`phase_bound`] and the split behind its upper value: `picks[r * conns + c]` is the QP
/// (0 .. qps) that slice r of connection c takes, for r in 0 .. [`ROUNDS`].
pub(crate) fn phase_split(
    rail: &Rail,
    paths: &[Path],
    qps: usize,
    phase: &Phase,
) -> (Bracket, Vec<u8>) {
    let mut picks = Vec::new();
    let b = bound_and_split(
        rail,
        paths,
        qps,
        phase.chunk as f64,
        phase.ideal_bytes_per_step(),
        Some(&mut picks),
    );
    (b, picks)
}

/// `paths[c * qps + k]`: QP k of connection c; every connection moves `bytes`, and the ideal
/// is `ideal_bytes` at the NIC rate (a connection's bytes, or for a tree a NIC's bus bytes).
pub(crate) fn multipath_bound(
    rail: &Rail,
    paths: &[Path],
    qps: usize,
    bytes: f64,
    ideal_bytes: f64,
) -> Bracket {
    bound_and_split(rail, paths, qps, bytes, ideal_bytes, None)
}

/// [`multipath_bound`], recording the greedy split's choices in `picks` when given.
fn bound_and_split(
    rail: &Rail,
    paths: &[Path],
    qps: usize,
    bytes: f64,
    ideal_bytes: f64,
    mut picks: Option<&mut Vec<u8>>,
) -> Bracket {
    let n = rail.links();
    let ppb = &rail.ps_per_byte;
    let ideal = ideal_bytes * ppb[0];
    let conns = paths.len() / qps.max(1);
    let mut load = vec![0.0f64; n]; // picoseconds of work per link
    let slice = bytes / ROUNDS as f64;
    if let Some(v) = picks.as_deref_mut() {
        v.clear();
        v.reserve(ROUNDS * conns);
    }
    for _ in 0..ROUNDS {
        for c in 0..conns {
            let cand = &paths[c * qps..(c + 1) * qps];
            let mut best = 0;
            let mut best_v = f64::INFINITY;
            for (k, p) in cand.iter().enumerate() {
                let v = p
                    .links()
                    .iter()
                    .map(|&l| load[l as usize] + slice * ppb[l as usize])
                    .fold(0.0, f64::max);
                if v < best_v {
                    best_v = v;
                    best = k;
                }
            }
            for &l in cand[best].links() {
                load[l as usize] += slice * ppb[l as usize];
            }
            if let Some(v) = picks.as_deref_mut() {
                v.push(best as u8);
            }
        }
    }
    let umax = load.iter().copied().fold(0.0, f64::max);
    if umax <= 0.0 || ideal <= 0.0 {
        return Bracket {
            lower: 1.0,
            upper: 1.0,
        };
    }
    let mut lower: f64 = 1.0;
    let mut y = vec![0.0f64; n];
    for beta in [4.0, 16.0, 64.0, 256.0] {
        let mut sum = 0.0;
        for l in 0..n {
            y[l] = if load[l] > 0.0 {
                (beta * (load[l] / umax - 1.0)).exp()
            } else {
                0.0
            };
            sum += y[l];
        }
        let mut lb = 0.0;
        for c in 0..conns {
            let d = paths[c * qps..(c + 1) * qps]
                .iter()
                .map(|p| {
                    p.links()
                        .iter()
                        .map(|&l| y[l as usize] / sum * bytes * ppb[l as usize])
                        .sum::<f64>()
                })
                .fold(f64::INFINITY, f64::min);
            lb += d;
        }
        lower = lower.max(lb / ideal);
    }
    // The dual value can pass the greedy one by rounding only (lower <= optimum <= upper).
    let upper = umax / ideal;
    Bracket {
        lower: lower.min(upper),
        upper,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::topology::FabricSpec;

    #[test]
    fn two_connections_forced_onto_one_spine() {
        let spec = FabricSpec {
            hosts: 4,
            hosts_per_leaf: 2,
            spines: 2,
            ..FabricSpec::default()
        };
        let rail = Rail::new(&spec, 0, &mut Rng::new(1));
        // Hosts 0, 1 (leaf 0) -> 2, 3 (leaf 1); uplinks run at 400G (2 x 400 / 2).
        let p = |s, d, k| rail.path_via(s, d, k);
        // One QP each, both via spine 0: time 2x ideal exactly.
        let b = multipath_bound(&rail, &[p(0, 2, 0), p(1, 3, 0)], 1, 1e6, 1e6);
        assert!(
            (b.upper - 2.0).abs() < 1e-9 && (b.lower - 2.0).abs() < 1e-6,
            "{b:?}"
        );
        // Against an ideal of twice the bytes (a NIC's bus bytes), the same loads are 1x.
        let b = multipath_bound(&rail, &[p(0, 2, 0), p(1, 3, 0)], 1, 1e6, 2e6);
        assert!((b.upper - 1.0).abs() < 1e-9, "{b:?}");
        // Two QPs each over both spines: the split reaches the ideal.
        let b = multipath_bound(
            &rail,
            &[p(0, 2, 0), p(0, 2, 1), p(1, 3, 0), p(1, 3, 1)],
            2,
            1e6,
            1e6,
        );
        assert!(
            (b.upper - 1.0).abs() < 1e-9 && b.lower <= b.upper + 1e-9,
            "{b:?}"
        );
    }
}
