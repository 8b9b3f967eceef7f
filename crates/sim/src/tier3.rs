//! The third tier: leafs grouped into pods, each pod's spines (aggregation switches) wired to core
//! switches, ECMP at the leaf and again at the aggregation; and the classic k-ary fat-tree preset.

use super::error::SimError;
use super::hashing::ecmp_hash;
use super::topology::{nic_ip, FabricSpec, Path, Rail};

// Core c = j x (cores per agg) + u is wired to aggregation switch j of every pod (its uplink u),
// as in the k-ary fat tree. Link ids after the two-tier ones: [agg -> core | core -> agg].
//
// Hash bits: CRC-32 is affine in its initial value (crc(s1, m) ^ crc(s2, m) depends only on the
// seeds and the length of m), so two switches hashing the same 5-tuple with different seeds get
// results that differ by a constant. With power-of-two groups at both tiers the aggregation's
// low bits would be a fixed function of the leaf's choice (hash polarization: one core uplink
// per aggregation switch carries everything). Switches are configured with a different hash bit
// offset per tier for this reason; the aggregation here takes bits 16 and up.
const AGG_HASH_SHIFT: u32 = 16;

impl FabricSpec {
    /// The classic k-ary fat tree (Al-Fares et al.): k pods of k/2 edge (leaf) and k/2
    /// aggregation switches, (k/2)^2 cores, k^3/4 hosts, every link at the host rate; one rail.
    pub fn fattree(k: usize, base: &FabricSpec) -> Result<FabricSpec, SimError> {
        if k < 2 || !k.is_multiple_of(2) || k > 128 {
            return Err(SimError::Config(format!(
                "fat-tree k {k} must be even, 2 ..= 128"
            )));
        }
        Ok(FabricSpec {
            hosts: k * k * k / 4,
            rails: 1,
            hosts_per_leaf: k / 2,
            spines: k / 2,
            oversub: 1.0,
            pods: k,
            cores: k * k / 4,
            ..base.clone()
        })
    }

    /// Leafs per pod (all leafs with two tiers; the last pod may be short).
    pub fn leaves_per_pod(&self) -> usize {
        if self.pods == 0 {
            self.leaves()
        } else {
            self.leaves().div_ceil(self.pods)
        }
    }

    /// Core switches per rail (the default is non-blocking at the aggregation).
    pub fn cores_total(&self) -> usize {
        if self.pods == 0 {
            0
        } else if self.cores == 0 {
            self.spines * self.leaves_per_pod()
        } else {
            self.cores
        }
    }

    /// Core uplinks of each aggregation switch.
    pub(crate) fn cores_per_agg(&self) -> usize {
        self.cores_total() / self.spines.max(1)
    }

    /// Aggregation-core links per rail, one direction (0 with two tiers).
    pub(crate) fn core_links(&self) -> usize {
        self.pods * self.spines * self.cores_per_agg()
    }

    /// Aggregation-core rate: what the pod's leaf uplinks bring into an aggregation switch,
    /// split over its core uplinks (divided by `dci_oversub`, 1 by default).
    pub fn core_gbps(&self) -> f64 {
        self.uplink_gbps() * self.leaves_per_pod() as f64
            / self.cores_per_agg().max(1) as f64
            / self.dci_oversub
    }

    pub(crate) fn validate_tier3(&self) -> Result<(), SimError> {
        if self.pods == 0 {
            return if self.cores == 0 {
                Ok(())
            } else {
                Err(SimError::Config(
                    "--cores needs --pods (a third tier)".into(),
                ))
            };
        }
        if self.pods > self.leaves() {
            return Err(SimError::Config(format!(
                "pods {} exceed the {} leafs of a rail",
                self.pods,
                self.leaves()
            )));
        }
        let c = self.cores_total();
        if c < self.spines || !c.is_multiple_of(self.spines) || c > 1 << 16 {
            return Err(SimError::Config(format!(
                "cores {c} must be a multiple of spines {} (every aggregation switch the same \
                 number of core uplinks), at most 65536",
                self.spines
            )));
        }
        Ok(())
    }
}

impl Rail {
    /// Links per path at most: 6 with a third tier, else 4.
    pub(crate) fn max_hops(&self) -> u8 {
        if self.pods > 0 {
            6
        } else {
            4
        }
    }

    pub(crate) fn pod_of_leaf(&self, leaf: usize) -> usize {
        if self.pods == 0 {
            0
        } else {
            leaf / self.leaves_per_pod
        }
    }

    pub(crate) fn same_pod(&self, a: usize, b: usize) -> bool {
        self.pod_of_leaf(a) == self.pod_of_leaf(b)
    }

    pub(crate) fn agg_up_base(&self) -> usize {
        2 * self.hosts + 2 * self.leaves * self.spines
    }

    pub(crate) fn core_down_base(&self) -> usize {
        self.agg_up_base() + self.pods * self.spines * self.cores_per_agg
    }

    /// Aggregation switch `spine` of `pod` to its core uplink `u`.
    pub(crate) fn agg_up(&self, pod: usize, spine: usize, u: usize) -> u32 {
        (self.agg_up_base() + (pod * self.spines + spine) * self.cores_per_agg + u) as u32
    }

    /// Core `core` down to its aggregation switch in `pod`.
    pub(crate) fn core_down(&self, core: usize, pod: usize) -> u32 {
        (self.core_down_base() + core * self.pods + pod) as u32
    }

    /// Both directions of aggregation-core pair `q` (0 .. pods x spines x cores per agg).
    pub(crate) fn core_pair(&self, q: usize) -> [u32; 2] {
        let (g, u) = (q / self.cores_per_agg, q % self.cores_per_agg);
        let (pod, s) = (g / self.spines, g % self.spines);
        let core = s * self.cores_per_agg + u;
        [self.agg_up(pod, s, u), self.core_down(core, pod)]
    }

    fn core_alive(&self, pa: usize, s: usize, u: usize, pb: usize) -> bool {
        let core = s * self.cores_per_agg + u;
        self.alive[self.agg_up(pa, s, u) as usize] && self.alive[self.core_down(core, pb) as usize]
    }

    /// Core uplinks `u` of aggregation switch `s` in `pa` that reach pod `pb` (both links up).
    fn live_cores(&self, pa: usize, s: usize, pb: usize) -> usize {
        (0..self.cores_per_agg)
            .filter(|&u| self.core_alive(pa, s, u, pb))
            .count()
    }

    fn nth_core(&self, pa: usize, s: usize, pb: usize, mut k: usize) -> usize {
        for u in 0..self.cores_per_agg {
            if self.core_alive(pa, s, u, pb) {
                if k == 0 {
                    return u;
                }
                k -= 1;
            }
        }
        unreachable!("core beyond the group")
    }

    /// Distinct live shortest paths from leaf `a` to leaf `b` in another pod.
    pub(crate) fn core_paths(&self, a: usize, b: usize) -> usize {
        let (pa, pb) = (self.pod_of_leaf(a), self.pod_of_leaf(b));
        (0..self.spines)
            .filter(|&s| self.via(a, b, s))
            .map(|s| self.live_cores(pa, s, pb))
            .sum()
    }

    fn six_hops(&self, src: usize, dst: usize, s: usize, u: usize) -> Path {
        let (a, b) = (self.leaf_of(src), self.leaf_of(dst));
        let (pa, pb) = (self.pod_of_leaf(a), self.pod_of_leaf(b));
        Path {
            links: [
                self.host_up(src),
                self.leaf_up(a, s),
                self.agg_up(pa, s, u),
                self.core_down(s * self.cores_per_agg + u, pb),
                self.spine_down(s, b),
                self.host_down(dst),
            ],
            hops: 6,
        }
    }

    /// The `k`-th (`k < core_paths`) live path between pods, aggregation-major order.
    pub(crate) fn core_path_via(&self, src: usize, dst: usize, mut k: usize) -> Path {
        let (a, b) = (self.leaf_of(src), self.leaf_of(dst));
        let (pa, pb) = (self.pod_of_leaf(a), self.pod_of_leaf(b));
        for s in 0..self.spines {
            if !self.via(a, b, s) {
                continue;
            }
            let n = self.live_cores(pa, s, pb);
            if k < n {
                return self.six_hops(src, dst, s, self.nth_core(pa, s, pb, k));
            }
            k -= n;
        }
        unreachable!("path beyond the live paths")
    }

    /// ECMP between pods: the source leaf hashes over its aggregation switches that still reach
    /// the destination; that aggregation switch hashes (its own seed) over its live core uplinks.
    /// The way down is determined by the destination.
    pub(crate) fn core_ecmp_path(
        &self,
        src: usize,
        dst: usize,
        sport: u16,
        rqpn: u32,
    ) -> Option<Path> {
        let (a, b) = (self.leaf_of(src), self.leaf_of(dst));
        let (pa, pb) = (self.pod_of_leaf(a), self.pod_of_leaf(b));
        let ok = |s: usize| self.via(a, b, s) && self.live_cores(pa, s, pb) > 0;
        let n = (0..self.spines).filter(|&s| ok(s)).count();
        if n == 0 {
            return None;
        }
        let (sip, dip) = (nic_ip(self.index, src), nic_ip(self.index, dst));
        let rail = (self.index as u32) << 16;
        let leaf_seed = 0x5eed_0000 ^ rail ^ a as u32;
        let h = ecmp_hash(leaf_seed, self.hash, sip, dip, sport, rqpn);
        let s = (0..self.spines)
            .filter(|&s| ok(s))
            .nth(h as usize % n)
            .expect("member of the group");
        let agg_seed = 0xa99_0000 ^ rail ^ (pa * self.spines + s) as u32;
        let h = ecmp_hash(agg_seed, self.hash, sip, dip, sport, rqpn) >> AGG_HASH_SHIFT;
        let m = self.live_cores(pa, s, pb);
        Some(self.six_hops(src, dst, s, self.nth_core(pa, s, pb, h as usize % m)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::hashing::HashFields;
    use super::super::rng::Rng;
    use super::super::topology::LinkKind;
    use super::*;

    fn k4() -> Rail {
        let spec = FabricSpec::fattree(4, &FabricSpec::default()).unwrap();
        spec.validate().unwrap();
        Rail::new(&spec, 0, &mut Rng::new(1))
    }

    #[test]
    fn ids_are_distinct_and_kinds_right() {
        let r = k4();
        // 16 hosts x 2 + 8 leafs x 2 aggs x 2 + 4 pods x 2 aggs x 2 cores x 2.
        assert_eq!(r.links(), 32 + 32 + 32);
        let mut seen = vec![false; r.links()];
        for q in 0..16 {
            for id in r.core_pair(q) {
                assert!(!seen[id as usize]);
                seen[id as usize] = true;
            }
        }
        assert_eq!(r.kind(r.agg_up(3, 1, 1)), LinkKind::AggUp);
        assert_eq!(r.kind(r.core_down(3, 3)), LinkKind::CoreDown);
        assert_eq!(r.kind(r.spine_down(1, 7)), LinkKind::SpineDown);
        let p = r.ecmp_path(0, 15, 100, 200).unwrap();
        assert_eq!(p.hops, 6);
        assert_eq!(r.ecmp_path(0, 2, 100, 200).unwrap().hops, 4);
    }

    #[test]
    fn seed_only_low_bits_would_polarize() {
        // Low bits of two seeds' CRCs of the same tuple differ by a constant: the reason the
        // aggregation takes other bits.
        let f = HashFields::default();
        let d: Vec<u32> = (0..64u32)
            .map(|q| {
                let p = 0xC000 | q as u16;
                (ecmp_hash(1, f, 10, 20, p, q + 7) ^ ecmp_hash(2, f, 10, 20, p, q + 7)) & 3
            })
            .collect();
        assert!(d.iter().all(|&x| x == d[0]));
        let r = k4();
        let mut used = [[false; 2]; 2];
        for q in 0..256u32 {
            let p = r.ecmp_path(0, 15, 1000 + q, 5000 + 3 * q).unwrap();
            let s = (p.links[1] - r.leaf_up(0, 0)) as usize;
            let u = (p.links[2] - r.agg_up(0, s, 0)) as usize;
            used[s][u] = true;
        }
        assert!(
            used.iter().flatten().all(|&x| x),
            "every (agg, core) pair used"
        );
    }
}
