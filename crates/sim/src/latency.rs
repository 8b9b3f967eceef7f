//! Message completion latency (post at the sender to release at the receiver) as a log-linear
//! histogram: 8 sub-buckets per power of two, so quantiles are within 12.5%, in constant memory.

use serde::Serialize;

const SUB: u32 = 8;
const BUCKETS: usize = 64 * SUB as usize;

/// Counts of latencies in picoseconds.
#[derive(Debug, Clone)]
pub struct LatencyHist {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }
}

fn bucket(v: u64) -> usize {
    if v < u64::from(SUB) {
        return v as usize;
    }
    let octave = 63 - v.leading_zeros();
    let sub = (v >> (octave - 3)) & u64::from(SUB - 1);
    ((octave - 2) * SUB) as usize + sub as usize
}

/// Upper edge of a bucket (the largest value it holds).
fn upper(b: usize) -> u64 {
    if b < SUB as usize {
        return b as u64;
    }
    let octave = (b / SUB as usize) as u32 + 2;
    let sub = (b % SUB as usize) as u64;
    ((u64::from(SUB) + sub + 1) << (octave - 3)) - 1
}

impl LatencyHist {
    #[inline]
    pub fn add(&mut self, v: u64) {
        self.counts[bucket(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    pub(crate) fn merge(&mut self, o: &LatencyHist) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.total += o.total;
        self.max = self.max.max(o.max);
    }

    /// The latency at quantile `q` (0..=1): the upper edge of its bucket, never above the max.
    pub(crate) fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let want = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return upper(b).min(self.max);
            }
        }
        self.max
    }

    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            messages: self.total,
            p50_us: self.quantile(0.5) as f64 / 1e6,
            p99_us: self.quantile(0.99) as f64 / 1e6,
            max_us: self.max as f64 / 1e6,
        }
    }
}

/// Message latency quantiles, microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LatencySummary {
    pub messages: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values_and_quantiles_are_close() {
        for v in [0u64, 1, 7, 8, 9, 15, 16, 1000, 123_456_789, u64::MAX / 2] {
            let b = bucket(v);
            assert!(
                upper(b) >= v && (b == 0 || upper(b - 1) < v),
                "{v}: bucket {b}"
            );
        }
        let mut h = LatencyHist::default();
        for v in 1..=1000u64 {
            h.add(v * 1000);
        }
        let p50 = h.quantile(0.5) as f64;
        assert!((500_000.0..=562_500.0).contains(&p50), "{p50}");
        assert_eq!(h.quantile(1.0), 1_000_000);
    }
}
