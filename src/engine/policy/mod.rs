//! QP scheduling policies: each decides the QP and length of the next segment of the message being
//! cut, given which QPs have room; `None` stalls the sender in order until a completion frees room.

mod dqplb;
mod round_robin_message;
mod single_qp;
mod static_split;

pub use dqplb::Dqplb;
pub use round_robin_message::RoundRobinMessage;
pub use single_qp::SingleQp;
pub use static_split::StaticSplit;

use super::{EngineError, EngineParams, PolicyKind, MAX_SEGMENT_BYTES, SEGMENT_ALIGN};

/// The message the sender is cutting, as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Message length in bytes.
    pub len: u64,
    /// Bytes already cut into segments.
    pub offset: u64,
    /// Segments already cut from this message.
    pub index: u64,
    /// The message's position in posting order (0 for the first message of the connection).
    pub serial: u64,
}

/// Bit `q` set: QP `q` has fewer than `max_outstanding` segments in flight.
pub type Room = u128;

/// Picks (QP, segment length) for the next segment, or `None` to stall until a completion.
pub trait Policy {
    /// Called once per segment; a `Some` answer is always transmitted.
    fn choose(&mut self, msg: &Cursor, room: Room) -> Option<(usize, u32)>;

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

/// Static dispatch over the four policies.
#[derive(Debug, Clone)]
pub enum AnyPolicy {
    Dqplb(Dqplb),
    StaticSplit(StaticSplit),
    RoundRobinMessage(RoundRobinMessage),
    SingleQp(SingleQp),
}

impl AnyPolicy {
    /// The policy `p.policy` configured by `p` (assumed validated).
    pub fn new(p: &EngineParams) -> AnyPolicy {
        match p.policy {
            PolicyKind::Dqplb => AnyPolicy::Dqplb(Dqplb::new(p.qps, p.segment_bytes)),
            PolicyKind::StaticSplit => AnyPolicy::StaticSplit(StaticSplit::new(p.qps)),
            PolicyKind::RoundRobinMessage => {
                AnyPolicy::RoundRobinMessage(RoundRobinMessage::new(p.qps, p.segment_bytes))
            }
            PolicyKind::SingleQp => AnyPolicy::SingleQp(SingleQp::new(p.segment_bytes)),
        }
    }
}

impl Policy for AnyPolicy {
    #[inline]
    fn choose(&mut self, msg: &Cursor, room: Room) -> Option<(usize, u32)> {
        match self {
            AnyPolicy::Dqplb(p) => p.choose(msg, room),
            AnyPolicy::StaticSplit(p) => p.choose(msg, room),
            AnyPolicy::RoundRobinMessage(p) => p.choose(msg, room),
            AnyPolicy::SingleQp(p) => p.choose(msg, room),
        }
    }

    fn check_len(&self, len: u64) -> Result<(), EngineError> {
        match self {
            AnyPolicy::Dqplb(p) => p.check_len(len),
            AnyPolicy::StaticSplit(p) => p.check_len(len),
            AnyPolicy::RoundRobinMessage(p) => p.check_len(len),
            AnyPolicy::SingleQp(p) => p.check_len(len),
        }
    }
}

/// Rounds `x` up to a multiple of 128.
#[inline]
pub(crate) fn align_up(x: u64) -> u64 {
    x.div_ceil(u64::from(SEGMENT_ALIGN)) * u64::from(SEGMENT_ALIGN)
}

/// Longest segment any policy may produce.
pub(crate) const MAX_PIECE: u64 = MAX_SEGMENT_BYTES as u64;
