//! Static split (NCCL_IB_SPLIT_DATA_ON_QPS=1): each message is cut into at most `qps` equal
//! 128-aligned chunks, chunk i on QP i, one segment per chunk, no refill: a full QP blocks.

use super::{align_up, Cursor, Policy, QpStats, Room, MAX_PIECE};
use crate::EngineError;

/// Even split of every message over all QPs.
#[derive(Debug, Clone)]
pub struct StaticSplit {
    qps: u64,
}

impl StaticSplit {
    /// `qps` data QPs (1 ..= 128).
    pub fn new(qps: usize) -> StaticSplit {
        StaticSplit { qps: qps as u64 }
    }

    /// Chunk size for a message of `len` bytes: ceil(ceil(len / qps) / 128) * 128.
    #[inline]
    pub fn chunk(&self, len: u64) -> u64 {
        align_up(len.div_ceil(self.qps))
    }
}

impl Policy for StaticSplit {
    #[inline]
    fn choose(&mut self, msg: &Cursor, room: Room, _stats: &[QpStats]) -> Option<(usize, u32)> {
        // Chunk i goes on QP i; a zero-byte message is one segment on QP 0.
        let qp = msg.index as usize;
        if !room.has(qp) {
            return None;
        }
        let left = msg.len - msg.offset;
        let piece = self.chunk(msg.len).min(left);
        Some((qp, piece as u32))
    }

    fn check_len(&self, len: u64) -> Result<(), EngineError> {
        if self.chunk(len) > MAX_PIECE {
            return Err(EngineError::MessageTooLarge {
                len,
                max: MAX_PIECE,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_even_and_aligned() {
        let p = StaticSplit::new(4);
        assert_eq!(p.chunk(0), 0);
        assert_eq!(p.chunk(1), 128);
        assert_eq!(p.chunk(512), 128);
        assert_eq!(p.chunk(513), 256);
        assert_eq!(p.chunk(1 << 20), 1 << 18);
        let mut p = StaticSplit::new(4);
        let c = |offset, index| Cursor {
            len: 300,
            offset,
            index,
            serial: 0,
        };
        assert_eq!(
            p.choose(&c(0, 0), Room::from_bits(0b1111), &[]),
            Some((0, 128))
        );
        assert_eq!(
            p.choose(&c(128, 1), Room::from_bits(0b1111), &[]),
            Some((1, 128))
        );
        assert_eq!(p.choose(&c(256, 2), Room::from_bits(0b1011), &[]), None);
        assert_eq!(
            p.choose(&c(256, 2), Room::from_bits(0b0100), &[]),
            Some((2, 44))
        );
        assert!(p.check_len(4 * MAX_PIECE).is_ok());
        assert_eq!(
            p.check_len(4 * MAX_PIECE + 1),
            Err(EngineError::MessageTooLarge {
                len: 4 * MAX_PIECE + 1,
                max: MAX_PIECE
            })
        );
    }
}
