//! The receiving side of one connection: per-sequence arrival records over the reorder span and a
//! ring of posted receives released strictly in order with their exact sizes.

use super::imm::{self, seq_distance};
use super::params::{check_initial_seq, check_max_messages, check_window, REORDER_SLACK};
use super::{EngineError, ProtocolError};

const ARRIVED: u8 = 1;
const LAST: u8 = 2;

/// What arrived for one sequence number not yet consumed.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    bytes: u32,
    flags: u8,
}

/// A posted receive buffer.
#[derive(Debug, Clone, Copy, Default)]
struct Posted {
    capacity: u64,
    received: u64,
    token: u32,
}

/// Receiver state machine of one connection.
#[derive(Debug, Clone)]
pub struct Receiver {
    /// Arrival records indexed by `seq & slot_mask`.
    slots: Vec<Slot>,
    slot_mask: u32,
    /// Sequence numbers in `[expected, expected + span)` are accepted.
    span: u32,
    /// Lowest sequence number not yet consumed.
    expected: u32,
    posted: Vec<Posted>,
    post_mask: u64,
    max_messages: usize,
    /// Absolute receive counters: released (head) <= being filled (filling) <= posted (tail).
    head: u64,
    filling: u64,
    tail: u64,
    /// Set by an error found while consuming in order; every later arrival returns it.
    failed: Option<ProtocolError>,
}

impl Receiver {
    /// `window`: segments that can be in flight (`qps * max_outstanding`, or more for slack);
    /// sequence numbers up to `REORDER_SLACK * window` ahead of the next expected are accepted.
    pub fn new(window: u32, max_messages: usize) -> Result<Receiver, EngineError> {
        Receiver::with_initial_seq(window, max_messages, 0)
    }

    /// As [`Receiver::new`], expecting `initial_seq` (< 2^24) first, like the sender's.
    pub fn with_initial_seq(
        window: u32,
        max_messages: usize,
        initial_seq: u32,
    ) -> Result<Receiver, EngineError> {
        check_window(u64::from(window))?;
        check_max_messages(max_messages)?;
        check_initial_seq(initial_seq)?;
        let span = window * REORDER_SLACK;
        let slots = span.next_power_of_two();
        let posts = max_messages.next_power_of_two();
        Ok(Receiver {
            slots: vec![Slot::default(); slots as usize],
            slot_mask: slots - 1,
            span,
            expected: initial_seq,
            posted: vec![Posted::default(); posts],
            post_mask: posts as u64 - 1,
            max_messages,
            head: 0,
            filling: 0,
            tail: 0,
            failed: None,
        })
    }

    /// Posts a receive buffer of `capacity` bytes; buffers match messages in posting order.
    pub fn post(&mut self, token: u32, capacity: u64) -> Result<(), EngineError> {
        if (self.tail - self.head) as usize >= self.max_messages {
            return Err(EngineError::TooManyMessages {
                limit: self.max_messages,
            });
        }
        self.posted[(self.tail & self.post_mask) as usize] = Posted {
            capacity,
            received: 0,
            token,
        };
        self.tail += 1;
        Ok(())
    }

    /// One segment landed (its bytes already placed by the transport): immediate and length.
    #[inline]
    pub fn arrived(&mut self, imm: u32, bytes: u32) -> Result<(), ProtocolError> {
        let (seq, last) = imm::decode(imm)?;
        if let Some(e) = self.failed {
            return Err(e);
        }
        let ahead = seq_distance(self.expected, seq);
        if ahead >= self.span {
            // Within one span behind `expected`: a sequence number already consumed.
            if seq_distance(seq, self.expected) <= self.span {
                return Err(ProtocolError::Duplicate { seq });
            }
            return Err(ProtocolError::OutOfWindow {
                seq,
                expected: self.expected,
                span: self.span,
            });
        }
        if self.filling == self.tail {
            return Err(ProtocolError::NoPostedReceive { seq });
        }
        if ahead != 0 {
            let slot = &mut self.slots[(seq & self.slot_mask) as usize];
            if slot.flags & ARRIVED != 0 {
                return Err(ProtocolError::Duplicate { seq });
            }
            *slot = Slot {
                bytes,
                flags: ARRIVED | if last { LAST } else { 0 },
            };
            return Ok(());
        }
        self.consume(seq, bytes, last)?;
        self.drain()
    }

    /// Whether `imm`'s sequence number already arrived (pending or consumed within the span):
    /// a transport that resends after a path failure asks before placing a segment's bytes, so
    /// a second copy never lands in a buffer that may already be back in the caller's hands.
    #[inline]
    pub fn is_duplicate(&self, imm: u32) -> bool {
        let seq = imm::seq_of(imm);
        let ahead = seq_distance(self.expected, seq);
        if ahead >= self.span {
            return seq_distance(seq, self.expected) <= self.span;
        }
        ahead != 0 && self.slots[(seq & self.slot_mask) as usize].flags & ARRIVED != 0
    }

    /// Consumes records that arrived ahead, now next in order.
    #[inline]
    fn drain(&mut self) -> Result<(), ProtocolError> {
        loop {
            let idx = (self.expected & self.slot_mask) as usize;
            let slot = self.slots[idx];
            if slot.flags & ARRIVED == 0 {
                return Ok(());
            }
            self.consume(self.expected, slot.bytes, slot.flags & LAST != 0)?;
            self.slots[idx].flags = 0;
        }
    }

    /// Adds in-order segment `seq` to the receive being filled.
    #[inline]
    fn consume(&mut self, seq: u32, bytes: u32, last: bool) -> Result<(), ProtocolError> {
        if self.filling == self.tail {
            return Err(self.fail(ProtocolError::NoPostedReceive { seq }));
        }
        let p = &mut self.posted[(self.filling & self.post_mask) as usize];
        let size = p.received.saturating_add(u64::from(bytes));
        if size > p.capacity {
            let e = ProtocolError::SizeBeyondPosted {
                seq,
                token: p.token,
                size,
                capacity: p.capacity,
            };
            return Err(self.fail(e));
        }
        p.received = size;
        if last {
            self.filling += 1;
        }
        self.expected = imm::seq_add(seq, 1);
        Ok(())
    }

    #[cold]
    fn fail(&mut self, e: ProtocolError) -> ProtocolError {
        self.failed = Some(e);
        e
    }

    /// (token, exact received size) of the oldest receive if complete, strictly in posting order.
    #[inline]
    pub fn poll_done(&mut self) -> Option<(u32, u64)> {
        if self.head == self.filling {
            return None;
        }
        let p = self.posted[(self.head & self.post_mask) as usize];
        self.head += 1;
        Some((p.token, p.received))
    }

    /// Receives posted and not yet returned by `poll_done`.
    pub fn posted(&self) -> usize {
        (self.tail - self.head) as usize
    }

    /// Receives posted and not yet complete.
    pub fn pending(&self) -> usize {
        (self.tail - self.filling) as usize
    }

    /// Lowest sequence number not yet consumed.
    pub fn expected_seq(&self) -> u32 {
        self.expected
    }

    /// Sequence numbers accepted ahead of `expected_seq`: `REORDER_SLACK * window`.
    pub fn reorder_span(&self) -> u32 {
        self.span
    }

    /// The error that stopped in-order consumption, if any (sticky).
    pub fn failure(&self) -> Option<ProtocolError> {
        self.failed
    }

    /// Bytes of state this receiver holds (all allocated at construction).
    pub fn footprint_bytes(&self) -> usize {
        use std::mem::size_of;
        size_of::<Receiver>()
            + self.slots.len() * size_of::<Slot>()
            + self.posted.len() * size_of::<Posted>()
    }
}
