//! Balls-in-bins expectations the simulator is checked against: Binomial(n, 1/M) per uplink, the
//! exact distribution of the fullest of M bins, and the static-split time over ideal it implies.

// Derivation (docs/records/simulation.md): K = h*q QP flows leave each leaf over M uplinks, each hashed
// uniformly; a flow of B/q bytes on an uplink with c flows runs at min(C/q, U/c) (U = h*C/(M*o)),
// and the flows of the fullest uplink keep that rate to the end, so T/T_ideal = max(1, c*M*o/(q*h))
// with c the fullest uplink of the fabric: P(c <= k) = P(fullest of M bins <= k)^(leaves*rails).

/// ln(n!) for n = 0 ..= max.
fn ln_factorials(max: usize) -> Vec<f64> {
    let mut v = vec![0.0; max + 1];
    for n in 1..=max {
        v[n] = v[n - 1] + (n as f64).ln();
    }
    v
}

/// P(X = j) for X ~ Binomial(n, p), from a ln-factorial table covering n.
fn binom(lf: &[f64], n: usize, j: usize, p: f64) -> f64 {
    if j > n {
        return 0.0;
    }
    if p >= 1.0 {
        return if j == n { 1.0 } else { 0.0 };
    }
    let ln = lf[n] - lf[j] - lf[n - j] + j as f64 * p.ln() + (n - j) as f64 * (1.0 - p).ln();
    ln.exp()
}

/// Binomial(n, p) probabilities for 0 ..= n.
pub(crate) fn binomial_pmf(n: usize, p: f64) -> Vec<f64> {
    let lf = ln_factorials(n);
    (0..=n).map(|j| binom(&lf, n, j, p)).collect()
}

/// P(every one of `m` bins holds at most `k` of `n` uniformly thrown balls).
pub(crate) fn p_fullest_at_most(n: usize, m: usize, k: usize) -> f64 {
    let lf = ln_factorials(n);
    // g[x] = P(x balls spread uniformly over b bins leave every bin <= k), b = 1 .. m.
    let mut g: Vec<f64> = (0..=n).map(|x| if x <= k { 1.0 } else { 0.0 }).collect();
    let mut next = vec![0.0; n + 1];
    for b in 2..=m {
        let p = 1.0 / b as f64;
        for x in 0..=n {
            let mut s = 0.0;
            for j in 0..=k.min(x) {
                s += binom(&lf, x, j, p) * g[x - j];
            }
            next[x] = s;
        }
        std::mem::swap(&mut g, &mut next);
    }
    g[n]
}

/// Distribution of the fullest uplink over `groups` independent leaves of `n` flows on `m`
/// uplinks each: `(k, P(fullest = k))` for every k with non-negligible mass.
pub(crate) fn fullest_distribution(n: usize, m: usize, groups: usize) -> Vec<(usize, f64)> {
    let mut out = Vec::new();
    let mut prev = 0.0;
    let lo = n.div_ceil(m.max(1));
    for k in lo..=n {
        let cdf = p_fullest_at_most(n, m, k).powf(groups as f64);
        if cdf - prev > 0.0 {
            out.push((k, cdf - prev));
        }
        prev = cdf;
        if 1.0 - cdf < 1e-12 {
            break;
        }
    }
    out
}

/// Expected static-split (and single-QP) time over ideal for the leaf-shift pattern: `h` hosts
/// per leaf each with one cross-leaf connection of `q` QPs, `m` uplinks per leaf, oversubscription
/// `o`, `groups` = leaves x rails.
pub fn expected_static_time_over_ideal(h: usize, q: usize, m: usize, o: f64, groups: usize) -> f64 {
    fullest_distribution(h * q, m, groups)
        .into_iter()
        .map(|(k, p)| p * (k as f64 * m as f64 * o / (q as f64 * h as f64)).max(1.0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_cases_by_hand() {
        // 2 balls, 2 bins: both in one bin with probability 1/2.
        assert!((p_fullest_at_most(2, 2, 1) - 0.5).abs() < 1e-12);
        // 3 balls, 3 bins: all different = 3!/27.
        assert!((p_fullest_at_most(3, 3, 1) - 6.0 / 27.0).abs() < 1e-12);
        let pmf = binomial_pmf(4, 0.5);
        assert!((pmf[2] - 0.375).abs() < 1e-12);
        let d = fullest_distribution(3, 3, 1);
        let total: f64 = d.iter().map(|x| x.1).sum();
        assert!((total - 1.0).abs() < 1e-9, "{d:?}");
        // One host, one QP, one uplink: always ideal.
        assert!((expected_static_time_over_ideal(1, 1, 1, 1.0, 4) - 1.0).abs() < 1e-12);
    }
}
