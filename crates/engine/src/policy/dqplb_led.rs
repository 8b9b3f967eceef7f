//! DQPLB with least-expected-delay choice: fixed-size segments, each to the QP with room whose
//! expected completion `(outstanding + 1) x latency EWMA` is lowest, ties in round-robin order.

// Plain DQPLB only steers when QPs are full: with room on several QPs it rotates over them, so
// a window at or above the data NCCL keeps in flight splits bytes like the static split. Here
// a QP on a crowded path (long completion latency) is passed over while a faster one has room,
// whatever the window. A QP with no completion yet (latency EWMA 0, also after a path
// replacement) costs 0, so every QP is tried before it is judged. See docs/records/simulation.md.

use super::{fixed_piece, Cursor, Policy, Room};
use crate::QpStats;

/// Least expected delay over QPs with room.
#[derive(Debug, Clone)]
pub struct DqplbLed {
    segment_bytes: u32,
    last: usize,
}

impl DqplbLed {
    /// `qps` data QPs (1 ..= 128), `segment_bytes` per segment.
    pub fn new(qps: usize, segment_bytes: u32) -> DqplbLed {
        DqplbLed {
            segment_bytes,
            // Ties start after the last QP used: the first segment goes to QP 0.
            last: qps.saturating_sub(1),
        }
    }
}

/// Expected completion of one more segment on a QP, in the driver's time unit.
#[inline]
fn expected_delay(st: &QpStats) -> f64 {
    f64::from(st.outstanding + 1) * st.latency_ewma
}

impl Policy for DqplbLed {
    #[inline]
    fn choose(&mut self, msg: &Cursor, room: Room, stats: &[QpStats]) -> Option<(usize, u32)> {
        // The QPs with room in round-robin order from after the last one used (QPs start..n,
        // then 0..start), keeping the first with the lowest expected delay. Room bits past
        // `stats` (no such QP) are dropped.
        let n = stats.len().min(128);
        let start = if self.last + 1 >= n { 0 } else { self.last + 1 };
        let (mut best, mut best_cost) = (usize::MAX, f64::INFINITY);
        for (from, to) in [(start, n), (0, start)] {
            for (w, &word) in room.0.iter().enumerate() {
                let base = w * 64;
                let mut set =
                    word & bits_between(from.saturating_sub(base), to.saturating_sub(base));
                while set != 0 {
                    let q = base + set.trailing_zeros() as usize;
                    set &= set - 1;
                    let cost = expected_delay(&stats[q]);
                    // Costs are finite (latencies below 2^63 x at most 2^11 segments).
                    if cost < best_cost {
                        (best, best_cost) = (q, cost);
                    }
                }
            }
        }
        if best == usize::MAX {
            return None;
        }
        self.last = best;
        Some((best, fixed_piece(msg, self.segment_bytes)))
    }
}

/// Bits `from .. to` of a 64-bit word (either end clamped to 64).
#[inline]
fn bits_between(from: usize, to: usize) -> u64 {
    let upto = |k: usize| if k >= 64 { u64::MAX } else { (1u64 << k) - 1 };
    upto(to) & !upto(from)
}

#[cfg(test)]
mod tests {
    use super::super::cur;
    use super::*;

    fn qp(outstanding: u32, latency: f64) -> QpStats {
        let mut s = QpStats::new();
        s.outstanding = outstanding;
        s.latency_ewma = latency;
        s
    }

    #[test]
    fn unmeasured_qps_rotate_like_dqplb() {
        let stats = vec![qp(0, 0.0); 4];
        let mut p = DqplbLed::new(4, 256);
        let all = Room::from_bits(0b1111);
        let picks: Vec<usize> = (0..6)
            .map(|i| p.choose(&cur(2000, i * 256), all, &stats).unwrap().0)
            .collect();
        assert_eq!(picks, [0, 1, 2, 3, 0, 1]);
        assert_eq!(p.choose(&cur(300, 256), all, &stats), Some((2, 44)));
        assert_eq!(p.choose(&cur(0, 0), Room::default(), &stats), None);
    }

    #[test]
    fn picks_the_lowest_expected_delay_with_room() {
        // Costs (outstanding + 1) x latency: 2 x 10, 1 x 30, 3 x 5, 1 x 40.
        let stats = [qp(1, 10.0), qp(0, 30.0), qp(2, 5.0), qp(0, 40.0)];
        let mut p = DqplbLed::new(4, 128);
        let all = Room::from_bits(0b1111);
        assert_eq!(p.choose(&cur(1000, 0), all, &stats), Some((2, 128)));
        // Only QPs 1 and 3 with room: rotation from after QP 2 meets 3 first, but 1 is cheaper.
        assert_eq!(
            p.choose(&cur(1000, 0), Room::from_bits(0b1010), &stats),
            Some((1, 128))
        );
        // QP 2 full: QP 0 (20) beats QP 1 (30) and QP 3 (40).
        assert_eq!(
            p.choose(&cur(1000, 0), Room::from_bits(0b1011), &stats),
            Some((0, 128))
        );
    }

    #[test]
    fn a_fresh_qp_is_tried_first_and_ties_rotate() {
        // QP 2 was just replaced (EWMA reset to 0): it costs 0 however busy the others are.
        let stats = [qp(0, 9.0), qp(0, 9.0), qp(0, 0.0), qp(0, 9.0)];
        let mut p = DqplbLed::new(4, 128);
        let all = Room::from_bits(0b1111);
        assert_eq!(p.choose(&cur(1000, 0), all, &stats).unwrap().0, 2);
        // Without it, QPs 0, 1, 3 tie at 9: the first after the last used (2) is 3, then 0.
        let rest = Room::from_bits(0b1011);
        assert_eq!(p.choose(&cur(1000, 0), rest, &stats).unwrap().0, 3);
        assert_eq!(p.choose(&cur(1000, 0), rest, &stats).unwrap().0, 0);
        assert_eq!(p.choose(&cur(1000, 0), rest, &stats).unwrap().0, 1);
    }

    #[test]
    fn reaches_qp_127_and_ignores_stats_it_lacks() {
        let mut stats = vec![qp(0, 50.0); 128];
        stats[127] = qp(3, 1.0);
        let mut p = DqplbLed::new(128, 4096);
        assert_eq!(
            p.choose(&cur(10, 0), Room::all(128), &stats),
            Some((127, 10))
        );
        // A room bit past the stats slice (no such QP) is never chosen.
        let short = [qp(0, 50.0)];
        let mut p = DqplbLed::new(2, 4096);
        assert_eq!(
            p.choose(&cur(10, 0), Room::from_bits(0b11), &short),
            Some((0, 10))
        );
    }
}
