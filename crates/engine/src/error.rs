//! Error values of the engine: `EngineError` for bad parameters and driver misuse, and
//! `ProtocolError` for receiver-side violations of the wire protocol by the peer.

use std::fmt;

/// A bad parameter or a call the engine's state does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineError {
    /// A construction parameter is out of range.
    BadParam {
        param: &'static str,
        value: u64,
        reason: &'static str,
    },
    /// `post` while `limit` messages (or receives) are already held.
    TooManyMessages { limit: usize },
    /// `add_route` beyond the sender's fixed route capacity.
    TooManyRoutes { limit: usize },
    /// `post_routed` named a route the sender does not have.
    NoSuchRoute { route: u8, routes: usize },
    /// A message whose segments would not fit the 32-bit segment length.
    MessageTooLarge { len: u64, max: u64 },
    /// `completed` named a QP index the connection does not have.
    NoSuchQp { qp: usize, qps: usize },
    /// `completed` on a QP with no segment in flight.
    NothingOutstanding { qp: usize },
    /// Every data QP of the connection has failed.
    AllPathsFailed { qps: usize },
    /// `path_replaced` on a QP that still has segments in flight.
    PathBusy { qp: usize, outstanding: u32 },
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EngineError::BadParam {
                param,
                value,
                reason,
            } => write!(f, "engine parameter {param} = {value} is invalid: {reason}"),
            EngineError::TooManyMessages { limit } => write!(
                f,
                "cannot post: {limit} messages already held (max_messages = {limit})"
            ),
            EngineError::AllPathsFailed { qps } => {
                write!(f, "all {qps} data paths of the connection failed")
            }
            EngineError::PathBusy { qp, outstanding } => write!(
                f,
                "QP {qp} cannot take a new path with {outstanding} segments still in flight"
            ),
            EngineError::TooManyRoutes { limit } => write!(
                f,
                "cannot add a route: a sender holds at most {limit} (policy, QP subset) routes"
            ),
            EngineError::NoSuchRoute { route, routes } => write!(
                f,
                "cannot post on route {route}: the sender has {routes} route(s)"
            ),
            EngineError::MessageTooLarge { len, max } => write!(
                f,
                "message of {len} bytes would need a segment longer than the {max}-byte maximum"
            ),
            EngineError::NoSuchQp { qp, qps } => {
                write!(f, "completion on QP {qp}, but the connection has {qps} QPs")
            }
            EngineError::NothingOutstanding { qp } => {
                write!(f, "completion on QP {qp}, which has no segment outstanding")
            }
        }
    }
}

impl std::error::Error for EngineError {}

/// A peer's segment that breaks the protocol; the connection should be torn down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolError {
    /// Bits 24-30 of the immediate are set.
    ReservedBits { imm: u32 },
    /// The sequence number already arrived (still pending, or consumed within the last window).
    Duplicate { seq: u32 },
    /// The sequence number lies outside `[expected, expected + span)`.
    OutOfWindow { seq: u32, expected: u32, span: u32 },
    /// The message being filled grew beyond its posted receive buffer.
    SizeBeyondPosted {
        seq: u32,
        token: u32,
        size: u64,
        capacity: u64,
    },
    /// Data arrived for a message with no posted receive.
    NoPostedReceive { seq: u32 },
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ProtocolError::ReservedBits { imm } => write!(
                f,
                "immediate {imm:#010x} has reserved bits 24-30 set (must be zero)"
            ),
            ProtocolError::Duplicate { seq } => {
                write!(f, "duplicate segment: sequence number {seq} already arrived")
            }
            ProtocolError::OutOfWindow {
                seq,
                expected,
                span,
            } => write!(
                f,
                "sequence number {seq} is outside the receive window [{expected}, {expected} + {span}) (mod 2^24)"
            ),
            ProtocolError::SizeBeyondPosted {
                seq,
                token,
                size,
                capacity,
            } => write!(
                f,
                "segment {seq} brings receive {token} to {size} bytes, beyond its posted {capacity}-byte buffer"
            ),
            ProtocolError::NoPostedReceive { seq } => write!(
                f,
                "segment {seq} arrived for a message with no posted receive"
            ),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// `Err(EngineError::BadParam { .. })`, for the parameter checks.
pub(crate) fn bad_param<T>(
    param: &'static str,
    value: u64,
    reason: &'static str,
) -> Result<T, EngineError> {
    Err(EngineError::BadParam {
        param,
        value,
        reason,
    })
}
