//! Weighted max-min fair rates by progressive filling: flows cross links with weights (1 on a
//! fixed path, 1/n per spine when sprayed over n); the tightest link freezes its flows first.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Flow -> (link, weight) lists in one flat array (CSR).
#[derive(Debug, Clone, Default)]
pub struct Incidence {
    pub start: Vec<u32>,
    pub link: Vec<u32>,
    pub weight: Vec<f64>,
}

impl Incidence {
    pub fn new() -> Incidence {
        Incidence {
            start: vec![0],
            ..Incidence::default()
        }
    }

    /// Appends the next flow's links.
    pub fn push_flow(&mut self, links: impl IntoIterator<Item = (u32, f64)>) {
        for (l, w) in links {
            self.link.push(l);
            self.weight.push(w);
        }
        self.start.push(self.link.len() as u32);
    }

    pub fn flows(&self) -> usize {
        self.start.len() - 1
    }

    #[inline]
    pub fn of(&self, f: usize) -> std::ops::Range<usize> {
        self.start[f] as usize..self.start[f + 1] as usize
    }
}

/// The solver and its scratch space (allocated once per phase).
#[derive(Debug)]
pub struct MaxMin {
    /// Link -> flows (CSR).
    lf_start: Vec<u32>,
    lf_flow: Vec<u32>,
    wsum: Vec<f64>,
    rem: Vec<f64>,
    stamp: Vec<u32>,
    frozen: Vec<bool>,
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
}

const EPS: f64 = 1e-12;

impl MaxMin {
    pub fn new(inc: &Incidence, links: usize) -> MaxMin {
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
            stamp: vec![0; links],
            frozen: vec![false; inc.flows()],
            heap: BinaryHeap::with_capacity(links),
        }
    }

    /// Max-min rates of the `active` flows over link capacities `caps` (inactive flows get 0).
    pub fn solve(&mut self, inc: &Incidence, caps: &[f64], active: &[bool], rates: &mut [f64]) {
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
        while let Some(Reverse((bits, l, st))) = self.heap.pop() {
            let l = l as usize;
            if st != self.stamp[l] || self.wsum[l] <= EPS {
                continue;
            }
            let x = f64::from_bits(bits);
            self.stamp[l] += 1;
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
                    if l2 != l {
                        self.stamp[l2] += 1;
                        if self.wsum[l2] > EPS {
                            self.push(l2);
                        }
                    }
                }
            }
        }
    }

    fn push(&mut self, l: usize) {
        let share = self.rem[l].max(0.0) / self.wsum[l];
        self.heap
            .push(Reverse((share.to_bits(), l as u32, self.stamp[l])));
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
