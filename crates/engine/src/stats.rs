//! Per-QP counters the sender keeps: segments and bytes posted, occupancy, and completion latency
//! (EWMA and a log2 histogram) in whatever unit the driver's `now` timestamps use.

/// Buckets of the latency histogram: bucket 0 holds latency 0, bucket k >= 1 holds
/// `[2^(k-1), 2^k)`, the last bucket everything at or above `2^(LATENCY_BUCKETS - 2)`.
pub const LATENCY_BUCKETS: usize = 32;

/// Weight of a new sample in the latency EWMA.
const EWMA_WEIGHT: f64 = 1.0 / 8.0;

/// Counters of one data QP. Laid out for the data path: the counters a post or a completion
/// updates share the first cache line (the histogram's bucket is the only other line touched).
#[derive(Debug, Clone, PartialEq)]
#[repr(C, align(64))]
pub struct QpStats {
    /// Segments posted on this QP.
    pub segments: u64,
    /// Payload bytes posted on this QP.
    pub bytes: u64,
    /// Segments completed on this QP.
    pub completed: u64,
    /// Segments in flight now.
    pub outstanding: u32,
    /// Highest `outstanding` seen.
    pub peak_outstanding: u32,
    /// EWMA (weight 1/8) of post-to-completion latency, driver units; 0 before any completion.
    pub latency_ewma: f64,
    /// Driver time of the latest completion (0 before any).
    pub last_completed_at: u64,
    /// Segments this QP carried again after another QP failed.
    pub resent: u64,
    /// Times this QP was replaced after draining as a straggler.
    pub rehashes: u64,
    /// Times this QP's path failed.
    pub failures: u64,
    /// Log2 histogram of post-to-completion latency, driver units.
    pub latency_log2: [u64; LATENCY_BUCKETS],
}

impl Default for QpStats {
    fn default() -> QpStats {
        QpStats::new()
    }
}

impl QpStats {
    pub(crate) fn new() -> QpStats {
        QpStats {
            segments: 0,
            bytes: 0,
            completed: 0,
            outstanding: 0,
            peak_outstanding: 0,
            latency_ewma: 0.0,
            latency_log2: [0; LATENCY_BUCKETS],
            resent: 0,
            rehashes: 0,
            failures: 0,
            last_completed_at: 0,
        }
    }

    #[inline]
    pub(crate) fn on_post(&mut self, len: u32) {
        self.segments += 1;
        self.bytes += u64::from(len);
        self.outstanding += 1;
        if self.outstanding > self.peak_outstanding {
            self.peak_outstanding = self.outstanding;
        }
    }

    #[inline]
    pub(crate) fn on_complete(&mut self, latency: u64, now: u64) {
        self.outstanding -= 1;
        self.last_completed_at = now;
        // Through i64: one conversion instruction on x86-64 (latencies never reach 2^63).
        let sample = latency.min(i64::MAX as u64) as i64 as f64;
        self.latency_ewma = if self.completed == 0 {
            sample
        } else {
            self.latency_ewma + (sample - self.latency_ewma) * EWMA_WEIGHT
        };
        self.completed += 1;
        let bucket = (64 - latency.leading_zeros() as usize).min(LATENCY_BUCKETS - 1);
        self.latency_log2[bucket] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_ewma() {
        let mut s = QpStats::new();
        for lat in [0u64, 1, 2, 3, 4, 1 << 40] {
            s.on_post(10);
            s.on_complete(lat, 1000 + lat);
        }
        assert_eq!(s.latency_log2[0], 1);
        assert_eq!(s.latency_log2[1], 1);
        assert_eq!(s.latency_log2[2], 2);
        assert_eq!(s.latency_log2[3], 1);
        assert_eq!(s.latency_log2[LATENCY_BUCKETS - 1], 1);
        assert_eq!(
            (s.segments, s.bytes, s.completed, s.outstanding),
            (6, 60, 6, 0)
        );
        let mut e = QpStats::new();
        e.on_post(1);
        e.on_post(1);
        e.on_complete(80, 500);
        assert_eq!(e.latency_ewma, 80.0);
        assert_eq!(e.last_completed_at, 500);
        e.on_complete(0, 700);
        assert_eq!(e.latency_ewma, 70.0);
        assert_eq!(e.last_completed_at, 700);
        assert_eq!(e.peak_outstanding, 2);
    }
}
