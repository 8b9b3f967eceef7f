//! Spraying over a subset of the ECMP group (`--spray-paths K`, htsim's `-paths`): every QP draws
//! K distinct choices of its group once, then sprays segments (B) or packets (P) over them.

// With K = 0 (the default) or K at least the group's size a QP sprays over the whole group and
// draws exactly what it drew before subsets existed, one `below(n)` per segment or packet, so
// those runs are unchanged. F mode spreads a QP evenly over its K paths (fmode.rs).

use super::rng::Rng;
use super::topology::Rail;

/// The path choices of every QP (`conn * qps + qp`), K per QP, or none (the whole group).
#[derive(Debug, Default)]
pub(crate) struct SpraySets {
    k: usize,
    choices: Vec<u32>,
}

impl SpraySets {
    /// Draws the subsets of `ends` (each QP's source and destination host, in QP order) on
    /// `rail` from `rng`; nothing when `k` is 0.
    pub(crate) fn new(
        rail: &Rail,
        ends: impl Iterator<Item = (usize, usize)>,
        k: usize,
        rng: &mut Rng,
    ) -> SpraySets {
        if k == 0 {
            return SpraySets::default();
        }
        let mut choices = Vec::new();
        let mut all: Vec<u32> = Vec::new();
        for (src, dst) in ends {
            let n = rail.spines_between(src, dst);
            all.clear();
            all.extend(0..n as u32);
            // A partial Fisher-Yates shuffle: the first k are a uniform k-subset. A group of k
            // or fewer is taken whole without a draw (`pick` then draws as without subsets).
            let c = k.min(n);
            let draws = if k < n { k } else { 0 };
            for i in 0..draws {
                let j = i + rng.below((n - i) as u64) as usize;
                all.swap(i, j);
            }
            choices.extend_from_slice(&all[..c]);
            choices.resize(choices.len() + (k - c), u32::MAX);
        }
        SpraySets { k, choices }
    }

    /// QP `g`'s choices in a group of `n` paths (all of them when no subset was drawn).
    pub(crate) fn of(&self, g: usize, n: usize) -> Vec<usize> {
        if self.k == 0 || self.k >= n {
            return (0..n).collect();
        }
        self.choices[g * self.k..(g + 1) * self.k]
            .iter()
            .map(|&c| c as usize)
            .collect()
    }

    /// The path choice of QP `g`'s next segment or packet in a group of `n` (> 1) paths.
    #[inline]
    pub(crate) fn pick(&self, g: usize, n: usize, rng: &mut Rng) -> usize {
        if self.k == 0 || self.k >= n {
            return rng.below(n as u64) as usize;
        }
        self.choices[g * self.k + rng.below(self.k as u64) as usize] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::FabricSpec;

    #[test]
    fn subsets_are_distinct_choices_and_picks_stay_in_them() {
        // 4 leafs x 8 spines: hosts 0 and 40 are on different leafs (8 paths).
        let spec = FabricSpec {
            hosts: 64,
            rails: 1,
            hosts_per_leaf: 16,
            spines: 8,
            ..FabricSpec::default()
        };
        let mut rng = Rng::new(3);
        let rail = Rail::new(&spec, 0, &mut rng);
        let ends = [(0, 40), (1, 41), (2, 3)];
        let s = SpraySets::new(&rail, ends.iter().copied(), 3, &mut rng);
        for g in 0..2 {
            let mut c = s.of(g, 8);
            assert_eq!(c.len(), 3);
            c.sort();
            c.dedup();
            assert_eq!(c.len(), 3, "distinct");
            for _ in 0..200 {
                assert!(c.contains(&s.pick(g, 8, &mut rng)));
            }
        }
        // Same leaf: no group; 8 paths and K = 8 or none: the whole group, as without subsets.
        assert!(s.of(2, 0).is_empty());
        let none = SpraySets::new(&rail, ends.iter().copied(), 0, &mut rng);
        assert_eq!(none.of(0, 8), (0..8).collect::<Vec<_>>());
        let (mut a, mut b) = (Rng::new(9), Rng::new(9));
        assert_eq!(none.pick(0, 8, &mut a), b.below(8) as usize);
    }
}
