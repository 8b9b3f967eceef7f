//! Single QP: every message on QP 0 (the engine uses one segment per message, one work request
//! as NCCL posts it); the baseline that shows what multi-QP policies gain.

use super::{fixed_piece, Cursor, Policy, QpStats, Room};

/// Everything on QP 0.
#[derive(Debug, Clone)]
pub struct SingleQp {
    segment_bytes: u32,
}

impl SingleQp {
    /// `segment_bytes` per segment.
    pub fn new(segment_bytes: u32) -> SingleQp {
        SingleQp { segment_bytes }
    }
}

impl Policy for SingleQp {
    #[inline]
    fn choose(&mut self, msg: &Cursor, room: Room, _stats: &[QpStats]) -> Option<(usize, u32)> {
        if !room.has(0) {
            return None;
        }
        Some((0, fixed_piece(msg, self.segment_bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_qp_zero() {
        let mut p = SingleQp::new(128);
        let c = Cursor {
            len: 129,
            offset: 128,
            index: 1,
            serial: 9,
        };
        assert_eq!(p.choose(&c, Room::from_bits(0b11), &[]), Some((0, 1)));
        assert_eq!(p.choose(&c, Room::from_bits(0b10), &[]), None);
    }
}
