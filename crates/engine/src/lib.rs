//! The sans-IO DQPLB engine: segmenting, QP scheduling policies, CQE-driven refill and in-order
//! completion, as pure state machines driven by transports and tests (no I/O, no clock, no raw code).
//!
//! # Model
//!
//! A connection has `qps` data QPs, each with at most `max_outstanding` segments in flight. The
//! [`Sender`] cuts posted messages lazily into segments (every boundary a multiple of 128 bytes
//! except a message's end), picks a QP per segment through a [`PolicyKind`], and releases message
//! tokens in posting order once every segment completed. The [`Receiver`] sees one immediate per
//! segment and releases posted receives in order with their exact sizes. Data is placed directly
//! at its offset by the transport (RDMA write semantics), so neither side holds payload bytes.
//!
//! # Immediate layout (32 bits)
//!
//! | bits  | meaning                                   |
//! |-------|-------------------------------------------|
//! | 0-23  | sequence number, per connection, wrapping |
//! | 24-30 | reserved, must be zero                    |
//! | 31    | last segment of its message               |
//!
//! # Window
//!
//! `window = qps * max_outstanding` is the number of segments that can be in flight. The sequence
//! span between the oldest segment not yet completed and the newest one sent may exceed it (a slow
//! QP holds an old sequence number while fast QPs carry on), so the sender bounds that span to
//! [`REORDER_SLACK`]` * window` and the receiver accepts sequence numbers up to
//! `REORDER_SLACK * window` ahead of the next one it expects. The transport passes
//! `qps * max_outstanding` to [`Receiver::new`], or more (e.g. twice that for verbs, where the
//! sender's CQE may precede the receiver's processing of the same segment).
//! `REORDER_SLACK * window` must stay below 2^23 so wrapped sequence numbers are unambiguous.
//!
//! # Memory per connection (all allocated at construction, none per segment)
//!
//! See [`Sender::footprint_bytes`] and [`Receiver::footprint_bytes`]; with `P(x)` the next power
//! of two at or above `x`:
//!
//! * sender: `40 * P(max_messages) + qps * (32 * P(max_outstanding) + 388) + 32 *
//!   P(max_outstanding)` bytes (message ring; per-QP in-flight rings of (message slot,
//!   immediate, post time, offset, length); per-QP head index (4 bytes) and 384-byte [`QpStats`]; the resend queue
//!   of failed paths), plus the fixed `Sender` struct and, with a [`RehashRule`], a [`DepthRule`]
//!   or a [`RepinRule`], their state (allocated when installed).
//! * receiver: `8 * P(REORDER_SLACK * window) + 24 * P(max_messages)` bytes (per-sequence
//!   arrival records of (bytes, flags); posted receives), plus the fixed `Receiver` struct.
//!
//! Payload is never buffered or copied: the transport places it at its offset in the posted
//! buffer (RDMA write semantics), so these records are all a connection needs.

#![forbid(unsafe_code)]

pub mod imm;
pub mod pinning;
pub mod policy;

mod depth;
mod error;
mod params;
mod paths;
mod receiver;
mod sender;
mod stats;

pub use depth::{DepthRule, RepinPath, RepinRule, DEPTH_EVERY};
pub use error::{EngineError, ProtocolError};
pub use params::{
    EngineParams, PolicyKind, MAX_MESSAGES, MAX_OUTSTANDING, MAX_QPS, MAX_SEGMENT_BYTES,
    REORDER_SLACK, SEGMENT_ALIGN,
};
pub use paths::{PathEvent, RehashRule, MAX_BUDGET};
pub use receiver::Receiver;
pub use sender::{Sender, Transmit, MAX_ROUTES};
pub use stats::{QpStats, LATENCY_BUCKETS};
