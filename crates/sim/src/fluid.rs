//! Weighted max-min fair rates by progressive filling: flows cross links with weights (1 on a
//! fixed path, 1/n per spine when sprayed over n); the tightest link freezes its flows first.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Flow -> (link, weight) lists in one flat array (CSR).
#[derive(Debug, Clone, Default)]
pub(crate) struct Incidence {
    pub start: Vec<u32>,
    pub link: Vec<u32>,
    pub weight: Vec<f64>,
}

impl Incidence {
    pub(crate) fn new() -> Incidence {
        Incidence {
            start: vec![0],
            ..Incidence::default()
        }
    }

    /// Appends the next flow's links.
    pub(crate) fn push_flow(&mut self, links: impl IntoIterator<Item = (u32, f64)>) {
        for (l, w) in links {
            self.link.push(l);
            self.weight.push(w);
        }
        self.start.push(self.link.len() as u32);
    }

    pub(crate) fn flows(&self) -> usize {
        self.start.len() - 1
    }

    #[inline]
    pub(crate) fn of(&self, f: usize) -> std::ops::Range<usize> {
        self.start[f] as usize..self.start[f + 1] as usize
    }
}

/// The solver and its scratch space (allocated once per phase).
#[derive(Debug)]
pub(crate) struct MaxMin {
    /// Link -> flows (CSR).
    lf_start: Vec<u32>,
    lf_flow: Vec<u32>,
    wsum: Vec<f64>,
    rem: Vec<f64>,
    frozen: Vec<bool>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

const EPS: f64 = 1e-12;

impl MaxMin {
    pub(crate) fn new(inc: &Incidence, links: usize) -> MaxMin {
        let mut count = vec![0u32; links + 1];
        for &l in &inc.link {
            count[l as usize + 1] += 1;
        }
        for i in 0..links {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut lf_flow = vec![0u32; inc.link.len()];
        for f in 0..inc.flows() {
            for i in inc.of(f) {
                let l = inc.link[i] as usize;
                lf_flow[fill[l] as usize] = f as u32;
                fill[l] += 1;
            }
        }
        MaxMin {
            lf_start: count,
            lf_flow,
            wsum: vec![0.0; links],
            rem: vec![0.0; links],
            frozen: vec![false; inc.flows()],
            heap: BinaryHeap::with_capacity(links),
        }
    }

    /// Max-min rates of the `active` flows over link capacities `caps` (inactive flows get 0).
    pub(crate) fn solve(
        &mut self,
        inc: &Incidence,
        caps: &[f64],
        active: &[bool],
        rates: &mut [f64],
    ) {
        self.wsum.fill(0.0);
        self.rem.copy_from_slice(caps);
        self.heap.clear();
        for f in 0..inc.flows() {
            self.frozen[f] = !active[f];
            rates[f] = 0.0;
            if active[f] {
                for i in inc.of(f) {
                    self.wsum[inc.link[i] as usize] += inc.weight[i];
                }
            }
        }
        for l in 0..caps.len() {
            if self.wsum[l] > EPS {
                self.push(l);
            }
        }
        // Freezing a flow at the smallest share x leaves every other link's share (rem - w x) /
        // (wsum - w) no smaller, so a heap key is a lower bound of its link's share: a link is
        // re-keyed once when it reaches the top, not re-pushed at every flow frozen on it.
        while let Some(Reverse((bits, l))) = self.heap.pop() {
            let l = l as usize;
            if self.wsum[l] <= EPS {
                continue;
            }
            let x = self.share(l);
            if x.to_bits() != bits {
                self.heap.push(Reverse((x.to_bits(), l as u32)));
                continue;
            }
            for k in self.lf_start[l] as usize..self.lf_start[l + 1] as usize {
                let f = self.lf_flow[k] as usize;
                if self.frozen[f] {
                    continue;
                }
                self.frozen[f] = true;
                rates[f] = x;
                for i in inc.of(f) {
                    let l2 = inc.link[i] as usize;
                    self.rem[l2] -= inc.weight[i] * x;
                    self.wsum[l2] -= inc.weight[i];
                }
            }
        }
    }

    #[inline]
    fn share(&self, l: usize) -> f64 {
        self.rem[l].max(0.0) / self.wsum[l]
    }

    fn push(&mut self, l: usize) {
        let share = self.share(l);
        self.heap.push(Reverse((share.to_bits(), l as u32)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_max_min() {
        // Links: 0 (cap 1) shared by flows 0,1; link 1 (cap 10) by flows 1,2.
        let mut inc = Incidence::new();
        inc.push_flow([(0, 1.0)]);
        inc.push_flow([(0, 1.0), (1, 1.0)]);
        inc.push_flow([(1, 1.0)]);
        let mut m = MaxMin::new(&inc, 2);
        let mut r = vec![0.0; 3];
        m.solve(&inc, &[1.0, 10.0], &[true, true, true], &mut r);
        assert_eq!(r, vec![0.5, 0.5, 9.5]);
        m.solve(&inc, &[1.0, 10.0], &[false, true, true], &mut r);
        assert_eq!(r, vec![0.0, 1.0, 9.0]);
    }

    /// Max-min by the textbook loop: every round, the link with the smallest share over its
    /// unfrozen flows freezes them at that share (O(links) per round, no heap).
    fn reference(inc: &Incidence, caps: &[f64], active: &[bool]) -> Vec<f64> {
        let mut rate = vec![0.0; inc.flows()];
        let mut frozen: Vec<bool> = active.iter().map(|a| !a).collect();
        let mut rem = caps.to_vec();
        loop {
            let mut wsum = vec![0.0; caps.len()];
            for f in (0..inc.flows()).filter(|&f| !frozen[f]) {
                for i in inc.of(f) {
                    wsum[inc.link[i] as usize] += inc.weight[i];
                }
            }
            let best = (0..caps.len())
                .filter(|&l| wsum[l] > EPS)
                .map(|l| (rem[l].max(0.0) / wsum[l], l))
                .min_by(|a, b| a.0.total_cmp(&b.0));
            let Some((x, l)) = best else {
                return rate;
            };
            for f in 0..inc.flows() {
                if !frozen[f] && inc.of(f).any(|i| inc.link[i] as usize == l) {
                    frozen[f] = true;
                    rate[f] = x;
                    for i in inc.of(f) {
                        rem[inc.link[i] as usize] -= inc.weight[i] * x;
                    }
                }
            }
        }
    }

    #[test]
    fn lazy_keys_match_the_textbook_loop() {
        // Random fabrics: 40 links of capacities 1..4, 200 flows over 1-5 distinct links with
        // weight 1 or 1/2, a quarter of them idle; the solver against `reference`, per flow.
        let mut rng = crate::rng::Rng::new(7);
        for round in 0..50 {
            let links = 40;
            let caps: Vec<f64> = (0..links).map(|_| 1.0 + rng.below(4) as f64).collect();
            let mut inc = Incidence::new();
            let mut active = Vec::new();
            for _ in 0..200 {
                let mut ls: Vec<u32> = (0..links as u32).collect();
                rng.shuffle(&mut ls);
                let n = 1 + rng.below(5) as usize;
                let w = if rng.below(3) == 0 { 0.5 } else { 1.0 };
                inc.push_flow(ls[..n].iter().map(|&l| (l, w)));
                active.push(rng.below(4) != 0);
            }
            let mut m = MaxMin::new(&inc, links);
            let mut got = vec![0.0; inc.flows()];
            m.solve(&inc, &caps, &active, &mut got);
            let want = reference(&inc, &caps, &active);
            for f in 0..inc.flows() {
                assert!(
                    (got[f] - want[f]).abs() <= 1e-9 * want[f].max(1.0),
                    "round {round} flow {f}: {} against {}",
                    got[f],
                    want[f]
                );
                assert_eq!(got[f] > 0.0, active[f], "round {round} flow {f}");
            }
            // Feasible: no link above its capacity.
            let mut load = vec![0.0; links];
            for (f, &r) in got.iter().enumerate() {
                for i in inc.of(f) {
                    load[inc.link[i] as usize] += inc.weight[i] * r;
                }
            }
            for (l, (&x, &c)) in load.iter().zip(&caps).enumerate() {
                assert!(x <= c * (1.0 + 1e-9), "round {round} link {l}");
            }
        }
    }

    #[test]
    fn weighted_spray_fills_both_spines() {
        // One flow sprayed half/half over links 1 and 2, a fixed flow on link 1; host link 0.
        let mut inc = Incidence::new();
        inc.push_flow([(0, 1.0), (1, 0.5), (2, 0.5)]);
        inc.push_flow([(1, 1.0)]);
        let mut m = MaxMin::new(&inc, 3);
        let mut r = vec![0.0; 2];
        m.solve(&inc, &[1.0, 1.0, 1.0], &[true, true], &mut r);
        // Link 1: 0.5 r0 + r1 <= 1; host link: r0 <= 1 -> r0 = r1 = 2/3 (link 1 binds first).
        assert!(
            (r[0] - 2.0 / 3.0).abs() < 1e-12 && (r[1] - 2.0 / 3.0).abs() < 1e-12,
            "{r:?}"
        );
    }
}
