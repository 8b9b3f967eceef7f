//! Random windows, posts and arrivals driven into `engine::Receiver`, checked against a plain
//! reference model: no panic, no false accept or reject, exact sizes, tokens once and in order.

use std::collections::{HashMap, VecDeque};

use arbitrary::{Arbitrary, Unstructured};
use dqplb_engine::imm::{seq_add, seq_distance, RESERVED_MASK, SEQ_MASK};
use dqplb_engine::{Receiver, REORDER_SLACK};

#[derive(Debug, Arbitrary)]
enum Op {
    Post {
        token: u32,
        capacity: u64,
    },
    /// An immediate relative to the next expected sequence number (near the window, mostly).
    ArriveNear {
        ahead: u16,
        last: bool,
        bytes: u32,
    },
    /// A raw 32-bit immediate (reserved bits, far sequence numbers).
    ArriveRaw {
        imm: u32,
        bytes: u32,
    },
    Poll,
}

#[derive(Debug, Arbitrary)]
struct Input {
    window: u16,
    max_messages: u8,
    initial_seq: u32,
    small_sizes: bool,
    ops: Vec<Op>,
}

/// The receiver as the documentation describes it, written the obvious way.
struct Model {
    span: u32,
    expected: u32,
    arrived: HashMap<u32, (u32, bool)>,
    /// (token, capacity, received) of posted receives not yet complete, oldest first.
    open: VecDeque<(u32, u64, u64)>,
    /// Completed (token, size) not yet polled.
    done: VecDeque<(u32, u64)>,
    /// Completed or open receives held (max_messages bounds this).
    held: usize,
    max_messages: usize,
    failed: bool,
}

impl Model {
    /// Why the receiver must refuse `imm` without changing state, if it must.
    fn refuses(&self, imm: u32) -> bool {
        if imm & RESERVED_MASK != 0 {
            return true;
        }
        let seq = imm & SEQ_MASK;
        seq_distance(self.expected, seq) >= self.span
            || self.arrived.contains_key(&seq)
            || self.open.is_empty()
    }

    /// Consumes what is now in order; false when a receive overflows or none is posted.
    fn drain(&mut self) -> bool {
        while let Some((bytes, last)) = self.arrived.remove(&self.expected) {
            let Some(front) = self.open.front_mut() else {
                return false;
            };
            let size = front.2.saturating_add(u64::from(bytes));
            if size > front.1 {
                return false;
            }
            front.2 = size;
            if last {
                let (token, _, size) = self.open.pop_front().expect("front exists");
                self.done.push_back((token, size));
            }
            self.expected = seq_add(self.expected, 1);
        }
        true
    }
}

/// Runs one input; panics on any divergence from the model.
pub fn check(data: &[u8]) {
    let u = Unstructured::new(data);
    let Ok(input) = Input::arbitrary_take_rest(u) else {
        return;
    };
    // Window 0 and max_messages 0 are kept: construction must refuse them with a reason.
    let window = u32::from(input.window % 1024);
    let max_messages = usize::from(input.max_messages % 65);
    let rx = Receiver::with_initial_seq(window, max_messages, input.initial_seq);
    let mut rx = match rx {
        Ok(rx) => rx,
        Err(e) => {
            assert!(
                window == 0 || max_messages == 0 || input.initial_seq > SEQ_MASK,
                "valid parameters refused: window {window} max {max_messages} seq {}: {e}",
                input.initial_seq
            );
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    assert!(window > 0 && max_messages > 0 && input.initial_seq <= SEQ_MASK);
    let mut m = Model {
        span: window * REORDER_SLACK,
        expected: input.initial_seq,
        arrived: HashMap::new(),
        open: VecDeque::new(),
        done: VecDeque::new(),
        held: 0,
        max_messages,
        failed: false,
    };
    assert_eq!(rx.reorder_span(), m.span);
    for op in input.ops {
        match op {
            Op::Post { token, capacity } => {
                let capacity = if input.small_sizes {
                    capacity % 4096
                } else {
                    capacity
                };
                let r = rx.post(token, capacity);
                if m.held >= m.max_messages {
                    let e = r.expect_err("post beyond max_messages accepted");
                    assert!(!e.to_string().is_empty());
                } else {
                    r.expect("post within max_messages refused");
                    m.held += 1;
                    m.open.push_back((token, capacity, 0));
                }
            }
            Op::ArriveNear { ahead, last, bytes } => {
                let seq = seq_add(m.expected, u32::from(ahead));
                let bytes = if input.small_sizes {
                    bytes % 1024
                } else {
                    bytes
                };
                arrive(&mut rx, &mut m, seq | if last { 1 << 31 } else { 0 }, bytes);
            }
            Op::ArriveRaw { imm, bytes } => arrive(&mut rx, &mut m, imm, bytes),
            Op::Poll => {
                poll(&mut rx, &mut m);
            }
        }
        assert_eq!(rx.posted(), m.held, "posted() disagrees");
        if !m.failed {
            assert_eq!(rx.expected_seq(), m.expected, "expected_seq disagrees");
            assert_eq!(rx.pending(), m.open.len(), "pending() disagrees");
        }
    }
    // Both sides must run dry together; `poll` compares each completion.
    while poll(&mut rx, &mut m) {}
}

fn arrive(rx: &mut Receiver, m: &mut Model, imm: u32, bytes: u32) {
    let r = rx.arrived(imm, bytes);
    if m.failed {
        let e = r.expect_err("arrival accepted after a sticky failure");
        assert!(!e.to_string().is_empty());
        return;
    }
    match r {
        Ok(()) => {
            assert!(
                !m.refuses(imm),
                "receiver accepted imm {imm:#x} the model refuses"
            );
            m.arrived
                .insert(imm & SEQ_MASK, (bytes, imm & (1 << 31) != 0));
            assert!(m.drain(), "receiver accepted imm {imm:#x} that overflows");
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            if rx.failure().is_some() {
                // Failed while consuming in order: the model must fail on the same arrival.
                assert!(!m.refuses(imm), "sticky failure on a refusable imm: {e}");
                m.arrived
                    .insert(imm & SEQ_MASK, (bytes, imm & (1 << 31) != 0));
                assert!(!m.drain(), "receiver failed ({e}) where the model did not");
                m.failed = true;
            } else {
                assert!(m.refuses(imm), "receiver refused imm {imm:#x}: {e}");
            }
        }
    }
}

/// Polls one completion from both; true if there was one.
fn poll(rx: &mut Receiver, m: &mut Model) -> bool {
    match (rx.poll_done(), m.done.pop_front()) {
        (None, None) => false,
        (Some(got), Some(want)) => {
            assert_eq!(got, want, "completed receive (token, size) disagrees");
            m.held -= 1;
            true
        }
        (got, want) => panic!("receiver completed {got:?}, model {want:?}"),
    }
}
