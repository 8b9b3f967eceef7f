//! Round-robin per message (NCCL's default): a whole message goes on one QP, the QP rotating with
//! each message; the engine uses one segment per message (one work request, as NCCL posts it).

use super::{fixed_piece, Cursor, Policy, QpStats, Room};

/// Message `n` on QP `n % qps`.
#[derive(Debug, Clone)]
pub struct RoundRobinMessage {
    qps: u64,
    segment_bytes: u32,
}

impl RoundRobinMessage {
    /// `qps` data QPs (1 ..= 128), `segment_bytes` per segment.
    pub fn new(qps: usize, segment_bytes: u32) -> RoundRobinMessage {
        RoundRobinMessage {
            qps: qps as u64,
            segment_bytes,
        }
    }
}

impl Policy for RoundRobinMessage {
    #[inline]
    fn choose(&mut self, msg: &Cursor, room: Room, _stats: &[QpStats]) -> Option<(usize, u32)> {
        let qp = (msg.serial % self.qps) as usize;
        if !room.has(qp) {
            return None;
        }
        Some((qp, fixed_piece(msg, self.segment_bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_stays_on_its_qp() {
        let mut p = RoundRobinMessage::new(3, 128);
        let c = |serial, offset| Cursor {
            len: 200,
            offset,
            index: 0,
            serial,
        };
        assert_eq!(
            p.choose(&c(4, 0), Room::from_bits(0b111), &[]),
            Some((1, 128))
        );
        assert_eq!(
            p.choose(&c(4, 128), Room::from_bits(0b111), &[]),
            Some((1, 72))
        );
        assert_eq!(p.choose(&c(5, 0), Room::from_bits(0b011), &[]), None);
    }
}
