//! DQPLB: fixed-size segments placed round-robin over QPs, starting after the last QP used and
//! skipping full ones, so a completion refills whichever QP freed room and fast QPs carry more.

use super::{fixed_piece, Cursor, Policy, QpStats, Room};

/// Round-robin over QPs with room.
#[derive(Debug, Clone)]
pub struct Dqplb {
    segment_bytes: u32,
    last: usize,
}

impl Dqplb {
    /// `qps` data QPs (1 ..= 128), `segment_bytes` per segment.
    pub fn new(qps: usize, segment_bytes: u32) -> Dqplb {
        Dqplb {
            segment_bytes,
            // The first segment goes to QP 0.
            last: qps.saturating_sub(1),
        }
    }
}

impl Policy for Dqplb {
    #[inline]
    fn choose(&mut self, msg: &Cursor, room: Room, _stats: &[QpStats]) -> Option<(usize, u32)> {
        // QPs after the last one used first, then wrap around to the lowest with room.
        let qp = room.next_from(self.last + 1)?;
        self.last = qp;
        Some((qp, fixed_piece(msg, self.segment_bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::cur;
    use super::*;

    #[test]
    fn rotates_and_skips_full_qps() {
        let mut p = Dqplb::new(4, 256);
        let all = Room::from_bits(0b1111);
        assert_eq!(p.choose(&cur(1000, 0), all, &[]), Some((0, 256)));
        assert_eq!(p.choose(&cur(1000, 256), all, &[]), Some((1, 256)));
        // QP 2 full: skip to 3, then wrap to 0.
        assert_eq!(
            p.choose(&cur(1000, 512), Room::from_bits(0b1011), &[]),
            Some((3, 256))
        );
        assert_eq!(
            p.choose(&cur(1000, 768), Room::from_bits(0b1011), &[]),
            Some((0, 232))
        );
        assert_eq!(p.choose(&cur(0, 0), Room::default(), &[]), None);
        let mut wide = Dqplb::new(128, 128);
        assert_eq!(
            wide.choose(&cur(0, 0), Room::from_bits(1 << 127), &[]),
            Some((127, 0))
        );
        assert_eq!(wide.choose(&cur(5, 0), Room::all(128), &[]), Some((0, 5)));
    }
}
