//! QP scheduling policies: each decides the QP and length of the next segment of the message being
//! cut, given which QPs have room; `None` stalls the sender in order until a completion frees room.

mod dqplb;
mod dqplb_led;
mod round_robin_message;
mod single_qp;
mod static_split;

pub use dqplb::Dqplb;
pub use dqplb_led::DqplbLed;
pub use round_robin_message::RoundRobinMessage;
pub use single_qp::SingleQp;
pub use static_split::StaticSplit;

use super::{EngineError, EngineParams, PolicyKind, QpStats, MAX_SEGMENT_BYTES, SEGMENT_ALIGN};

/// The message the sender is cutting, as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// Message length in bytes.
    pub len: u64,
    /// Bytes already cut into segments.
    pub offset: u64,
    /// Segments already cut from this message.
    pub index: u64,
    /// The message's position in posting order (0 for the first message of the connection).
    pub serial: u64,
}

/// Set of QPs with fewer than `max_outstanding` segments in flight (QPs 0 ..= 127), as two
/// 64-bit words so every operation is a couple of instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Room([u64; 2]);

impl Room {
    /// Bit `q` of `bits` set: QP `q` has room.
    pub(crate) fn from_bits(bits: u128) -> Room {
        Room([bits as u64, (bits >> 64) as u64])
    }

    /// QPs `0 .. qps` all have room (`qps` <= 128).
    pub fn all(qps: usize) -> Room {
        let bits = if qps >= 128 {
            u128::MAX
        } else {
            (1u128 << qps) - 1
        };
        Room::from_bits(bits)
    }

    /// The set as a 128-bit mask.
    pub fn bits(self) -> u128 {
        u128::from(self.0[0]) | (u128::from(self.0[1]) << 64)
    }

    /// QPs of this set that are not in `other`.
    #[inline]
    pub fn without(self, other: Room) -> Room {
        Room([self.0[0] & !other.0[0], self.0[1] & !other.0[1]])
    }

    /// QPs in both sets.
    #[inline]
    pub fn and(self, other: Room) -> Room {
        Room([self.0[0] & other.0[0], self.0[1] & other.0[1]])
    }

    /// QP `q` has room.
    #[inline]
    pub fn has(self, q: usize) -> bool {
        (self.0[(q >> 6) & 1] >> (q & 63)) & 1 != 0
    }

    #[inline]
    pub(crate) fn set(&mut self, q: usize) {
        self.0[(q >> 6) & 1] |= 1 << (q & 63);
    }

    #[inline]
    pub(crate) fn clear(&mut self, q: usize) {
        self.0[(q >> 6) & 1] &= !(1 << (q & 63));
    }

    /// The first QP with room at or after `start` (0 ..= 128), else the lowest with room.
    #[inline]
    pub(crate) fn next_from(self, start: usize) -> Option<usize> {
        let [lo, hi] = self.0;
        if start < 64 {
            let m = lo & (u64::MAX << start);
            if m != 0 {
                return Some(m.trailing_zeros() as usize);
            }
            if hi != 0 {
                return Some(64 + hi.trailing_zeros() as usize);
            }
        } else if start < 128 {
            let m = hi & (u64::MAX << (start - 64));
            if m != 0 {
                return Some(64 + m.trailing_zeros() as usize);
            }
        }
        if lo != 0 {
            Some(lo.trailing_zeros() as usize)
        } else if hi != 0 {
            Some(64 + hi.trailing_zeros() as usize)
        } else {
            None
        }
    }
}

/// Picks (QP, segment length) for the next segment, or `None` to stall until a completion.
pub(crate) trait Policy {
    /// Called once per segment; a `Some` answer is always transmitted. `stats` holds every data
    /// QP's counters, indexed by QP (their occupancy and completion latency).
    fn choose(&mut self, msg: &Cursor, room: Room, stats: &[QpStats]) -> Option<(usize, u32)>;

    /// Rejects at post time a message this policy could not cut into 32-bit segments.
    fn check_len(&self, _len: u64) -> Result<(), EngineError> {
        Ok(())
    }
}

/// `segment_bytes` pieces: the next one, or the message's tail (0 for a zero-byte message).
#[inline]
pub(crate) fn fixed_piece(msg: &Cursor, segment_bytes: u32) -> u32 {
    let left = msg.len - msg.offset;
    if left < u64::from(segment_bytes) {
        left as u32
    } else {
        segment_bytes
    }
}

/// Static dispatch over the five policies.
#[derive(Debug, Clone)]
pub(crate) enum AnyPolicy {
    Dqplb(Dqplb),
    DqplbLed(DqplbLed),
    StaticSplit(StaticSplit),
    RoundRobinMessage(RoundRobinMessage),
    SingleQp(SingleQp),
}

impl AnyPolicy {
    /// The policy `p.policy` configured by `p` (assumed validated).
    pub(crate) fn new(p: &EngineParams) -> AnyPolicy {
        match p.policy {
            PolicyKind::Dqplb => AnyPolicy::Dqplb(Dqplb::new(p.qps, p.segment_bytes)),
            PolicyKind::DqplbLed => AnyPolicy::DqplbLed(DqplbLed::new(p.qps, p.segment_bytes)),
            PolicyKind::StaticSplit => AnyPolicy::StaticSplit(StaticSplit::new(p.qps)),
            // NCCL posts each isend as one work request: these baselines send whole messages as
            // one segment, so consecutive messages run on their QPs concurrently.
            PolicyKind::RoundRobinMessage => {
                AnyPolicy::RoundRobinMessage(RoundRobinMessage::new(p.qps, MAX_SEGMENT_BYTES))
            }
            PolicyKind::SingleQp => AnyPolicy::SingleQp(SingleQp::new(MAX_SEGMENT_BYTES)),
        }
    }
}

impl Policy for AnyPolicy {
    #[inline]
    fn choose(&mut self, msg: &Cursor, room: Room, stats: &[QpStats]) -> Option<(usize, u32)> {
        match self {
            AnyPolicy::Dqplb(p) => p.choose(msg, room, stats),
            AnyPolicy::DqplbLed(p) => p.choose(msg, room, stats),
            AnyPolicy::StaticSplit(p) => p.choose(msg, room, stats),
            AnyPolicy::RoundRobinMessage(p) => p.choose(msg, room, stats),
            AnyPolicy::SingleQp(p) => p.choose(msg, room, stats),
        }
    }

    fn check_len(&self, len: u64) -> Result<(), EngineError> {
        match self {
            AnyPolicy::Dqplb(p) => p.check_len(len),
            AnyPolicy::DqplbLed(p) => p.check_len(len),
            AnyPolicy::StaticSplit(p) => p.check_len(len),
            AnyPolicy::RoundRobinMessage(p) => p.check_len(len),
            AnyPolicy::SingleQp(p) => p.check_len(len),
        }
    }
}

/// Tests: the first segment's cursor of a `len`-byte message, `offset` bytes cut.
#[cfg(test)]
pub(crate) fn cur(len: u64, offset: u64) -> Cursor {
    Cursor {
        len,
        offset,
        index: 0,
        serial: 0,
    }
}

/// Rounds `x` up to a multiple of 128.
#[inline]
pub(crate) fn align_up(x: u64) -> u64 {
    x.div_ceil(u64::from(SEGMENT_ALIGN)) * u64::from(SEGMENT_ALIGN)
}

/// Longest segment any policy may produce.
pub(crate) const MAX_PIECE: u64 = MAX_SEGMENT_BYTES as u64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_set_clear_and_search() {
        let mut r = Room::all(128);
        assert_eq!(r.bits(), u128::MAX);
        r.clear(0);
        r.clear(127);
        r.clear(64);
        assert!(!r.has(0) && !r.has(64) && !r.has(127) && r.has(1) && r.has(65));
        assert_eq!(r.next_from(0), Some(1));
        assert_eq!(r.next_from(64), Some(65));
        assert_eq!(r.next_from(127), Some(1));
        assert_eq!(r.next_from(128), Some(1));
        let only_high = Room::from_bits(1 << 100);
        assert_eq!(only_high.next_from(3), Some(100));
        assert_eq!(only_high.next_from(101), Some(100));
        let only_low = Room::from_bits(1 << 5);
        assert_eq!(only_low.next_from(70), Some(5));
        assert_eq!(Room::default().next_from(0), None);
        assert_eq!(Room::all(5).bits(), 0b11111);
        let mut s = Room::default();
        s.set(77);
        assert_eq!(s.bits(), 1 << 77);
    }
}
