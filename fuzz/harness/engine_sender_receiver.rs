//! A sender and a receiver joined by a modelled network: random messages, policies and QP counts,
//! random arrival order and completions (a QP completes a segment only once it was delivered, as
//! TCP acks do): exact byte accounting, contiguous 128-aligned tiles, sizes and order, no stall.

use std::collections::{HashSet, VecDeque};

use arbitrary::{Arbitrary, Unstructured};
use dqplb_engine::imm::{decode, seq_add, seq_distance};
use dqplb_engine::{
    EngineError, EngineParams, PolicyKind, Receiver, Sender, Transmit, MAX_SEGMENT_BYTES,
    REORDER_SLACK, SEGMENT_ALIGN,
};

#[derive(Debug, Arbitrary)]
enum Op {
    /// Post a message of `len % 65536` bytes; the receive buffer is `extra` bytes larger.
    Post {
        len: u32,
        extra: u16,
    },
    /// Ask for up to `n` segments.
    Transmit {
        n: u8,
    },
    /// Deliver one of the segments on the wire to the receiver.
    Deliver {
        pick: u16,
    },
    /// The oldest segment on QP `qp % qps` completes, if it was delivered.
    Complete {
        qp: u8,
        dt: u16,
    },
    /// A completion on a QP index the connection does not have.
    BadComplete {
        qp: u8,
    },
    Poll,
}

#[derive(Debug, Arbitrary)]
struct Input {
    qps: u8,
    wide: bool,
    outstanding: u8,
    seg_units: u8,
    max_messages: u8,
    policy: u8,
    initial_seq: u32,
    ops: Vec<Op>,
}

/// A message as the sender should be treating it.
struct Msg {
    token: u32,
    serial: u64,
    len: u64,
    cut: u64,
    segs_cut: u64,
    segs_done: u64,
}

struct Flight {
    seq: u32,
    token: u32,
}

struct World {
    p: EngineParams,
    tx: Sender,
    rx: Receiver,
    /// Sender-side messages not yet returned by `tx.poll_done`, oldest first.
    msgs: VecDeque<Msg>,
    /// Index in `msgs` of the message being cut.
    cursor: usize,
    next_serial: u64,
    next_token: u32,
    next_seq: u32,
    /// Per-QP segments in flight, oldest first.
    qp: Vec<VecDeque<Flight>>,
    /// Transmitted, not yet delivered.
    wire: Vec<Transmit>,
    delivered: HashSet<u32>,
    /// Receives posted and not yet returned by `rx.poll_done`: (token, message length).
    recvs: VecDeque<(u32, u64)>,
    now: u64,
}

/// Runs one input; panics on any broken invariant.
pub fn check(data: &[u8]) {
    let u = Unstructured::new(data);
    let Ok(input) = Input::arbitrary_take_rest(u) else {
        return;
    };
    let qps = 1 + usize::from(input.qps) % if input.wide { 128 } else { 8 };
    let p = EngineParams {
        qps,
        max_outstanding: 1 + u32::from(input.outstanding % 16),
        segment_bytes: SEGMENT_ALIGN * (1 + u32::from(input.seg_units % 64)),
        max_messages: 1 + usize::from(input.max_messages % 16),
        policy: PolicyKind::ALL[usize::from(input.policy) % PolicyKind::ALL.len()],
    };
    let seq0 = input.initial_seq & dqplb_engine::imm::SEQ_MASK;
    let window = p.window() as u32;
    let mut w = World {
        p,
        tx: Sender::with_initial_seq(&p, seq0).expect("valid sender params"),
        rx: Receiver::with_initial_seq(window, p.max_messages, seq0).expect("valid receiver"),
        msgs: VecDeque::new(),
        cursor: 0,
        next_serial: 0,
        next_token: 0,
        next_seq: seq0,
        qp: (0..qps).map(|_| VecDeque::new()).collect(),
        wire: Vec::new(),
        delivered: HashSet::new(),
        recvs: VecDeque::new(),
        now: 0,
    };
    for op in input.ops {
        match op {
            Op::Post { len, extra } => w.post(u64::from(len % 65536), u64::from(extra)),
            Op::Transmit { n } => {
                for _ in 0..n {
                    if !w.transmit() {
                        break;
                    }
                }
            }
            Op::Deliver { pick } => {
                if !w.wire.is_empty() {
                    let i = usize::from(pick) % w.wire.len();
                    w.deliver(i);
                }
            }
            Op::Complete { qp, dt } => {
                w.now += u64::from(dt);
                w.complete(usize::from(qp) % qps);
            }
            Op::BadComplete { qp } => {
                let bad = qps + usize::from(qp);
                assert_eq!(
                    w.tx.completed(bad, w.now),
                    Err(EngineError::NoSuchQp { qp: bad, qps })
                );
            }
            Op::Poll => {
                w.poll();
            }
        }
        assert_eq!(
            w.tx.outstanding(),
            w.qp.iter().map(VecDeque::len).sum::<usize>()
        );
        assert_eq!(w.tx.messages(), w.msgs.len());
        assert_eq!(w.rx.posted(), w.recvs.len());
    }
    w.finish();
}

impl World {
    fn post(&mut self, len: u64, extra: u64) {
        let token = self.next_token;
        if self.recvs.len() >= self.p.max_messages {
            assert!(
                self.rx.post(token, len + extra).is_err(),
                "receiver over-posted"
            );
            return;
        }
        if self.msgs.len() >= self.p.max_messages {
            let e = self.tx.post(token, len).expect_err("sender over-posted");
            assert_eq!(
                e,
                EngineError::TooManyMessages {
                    limit: self.p.max_messages
                }
            );
            return;
        }
        self.rx
            .post(token, len + extra)
            .expect("receive within limits");
        self.tx.post(token, len).expect("message within limits");
        self.recvs.push_back((token, len));
        self.msgs.push_back(Msg {
            token,
            serial: self.next_serial,
            len,
            cut: 0,
            segs_cut: 0,
            segs_done: 0,
        });
        self.next_serial += 1;
        self.next_token += 1;
    }

    /// One `poll_transmit`, checked against the model; false when the sender had nothing.
    fn transmit(&mut self) -> bool {
        let Some(t) = self.tx.poll_transmit(self.now) else {
            return false;
        };
        let p = self.p;
        assert!(t.qp < p.qps, "QP {} of {}", t.qp, p.qps);
        assert!(
            self.qp[t.qp].len() < p.max_outstanding as usize,
            "QP {} over max_outstanding",
            t.qp
        );
        let (seq, last) = decode(t.imm).expect("sender sets no reserved bits");
        assert_eq!(seq, self.next_seq, "sequence numbers must be consecutive");
        // The span from the oldest incomplete segment to this one stays inside the reorder span.
        for f in self.qp.iter().flat_map(VecDeque::iter) {
            assert!(
                seq_distance(f.seq, seq) < window_span(&p),
                "segment {seq} sent while {} still incomplete",
                f.seq
            );
        }
        let m = self
            .msgs
            .get_mut(self.cursor)
            .expect("transmit with no message left to cut");
        assert_eq!(t.token, m.token, "segment of the wrong message");
        assert_eq!(t.offset, m.cut, "tiles must be contiguous");
        let end = t.offset + u64::from(t.len);
        assert!(end <= m.len, "segment past the end of its message");
        assert!(
            t.len > 0 || m.len == 0,
            "empty segment of a non-empty message"
        );
        assert_eq!(last, end == m.len, "last flag must mark the message's end");
        if !last {
            assert_eq!(
                end % u64::from(SEGMENT_ALIGN),
                0,
                "unaligned inner boundary"
            );
        }
        let whole = (m.len - t.offset).min(u64::from(MAX_SEGMENT_BYTES));
        match p.policy {
            // NCCL's baselines post each message as one work request (policy/mod.rs): the
            // engine cuts them in MAX_SEGMENT_BYTES pieces, not segment_bytes.
            PolicyKind::SingleQp => {
                assert_eq!(t.qp, 0);
                assert_eq!(u64::from(t.len), whole);
            }
            PolicyKind::RoundRobinMessage => {
                assert_eq!(t.qp as u64, m.serial % p.qps as u64);
                assert_eq!(u64::from(t.len), whole);
            }
            PolicyKind::Dqplb | PolicyKind::DqplbLed => assert!(t.len <= p.segment_bytes),
            PolicyKind::StaticSplit => {
                assert_eq!(t.qp as u64, m.segs_cut, "chunk i goes on QP i");
                let chunk = m.len.div_ceil(p.qps as u64).div_ceil(128) * 128;
                assert!(u64::from(t.len) <= chunk);
            }
        }
        m.cut = end;
        m.segs_cut += 1;
        if last {
            self.cursor += 1;
        }
        self.qp[t.qp].push_back(Flight {
            seq,
            token: t.token,
        });
        self.wire.push(t);
        self.next_seq = seq_add(seq, 1);
        true
    }

    fn deliver(&mut self, i: usize) {
        let t = self.wire.swap_remove(i);
        if let Err(e) = self.rx.arrived(t.imm, t.len) {
            panic!("receiver refused a well-formed segment {t:?}: {e}");
        }
        self.delivered.insert(t.imm & dqplb_engine::imm::SEQ_MASK);
    }

    /// Completes the oldest segment on `qp` if it was delivered; false otherwise.
    fn complete(&mut self, qp: usize) -> bool {
        let Some(front) = self.qp[qp].front() else {
            assert_eq!(
                self.tx.completed(qp, self.now),
                Err(EngineError::NothingOutstanding { qp })
            );
            return false;
        };
        if !self.delivered.remove(&front.seq) {
            return false;
        }
        let token = front.token;
        self.qp[qp].pop_front();
        self.tx
            .completed(qp, self.now)
            .expect("completion of an outstanding segment");
        let m = self
            .msgs
            .iter_mut()
            .find(|m| m.token == token)
            .expect("completed segment's message is held");
        m.segs_done += 1;
        assert!(m.segs_done <= m.segs_cut);
        true
    }

    /// Polls both sides once; true if either returned a completion.
    fn poll(&mut self) -> bool {
        let mut any = false;
        let ready = self.cursor > 0 && {
            let m = &self.msgs[0];
            m.segs_done == m.segs_cut
        };
        match (self.tx.poll_done(), ready) {
            (Some(token), true) => {
                let m = self.msgs.pop_front().expect("ready message");
                assert_eq!(token, m.token, "sender tokens out of order");
                assert_eq!(m.cut, m.len, "sum of segment lengths != message length");
                self.cursor -= 1;
                any = true;
            }
            (None, false) => {}
            (got, ready) => panic!("sender poll_done {got:?}, model ready {ready}"),
        }
        if let Some((token, size)) = self.rx.poll_done() {
            let (want_token, len) = self.recvs.pop_front().expect("receiver completed extra");
            assert_eq!(token, want_token, "receiver tokens out of order");
            assert_eq!(size, len, "received size != sent size");
            any = true;
        }
        any
    }

    /// Runs everything to completion: every message must finish on both sides, no stall.
    fn finish(&mut self) {
        loop {
            let mut moved = false;
            while self.transmit() {
                moved = true;
            }
            while !self.wire.is_empty() {
                self.deliver(self.wire.len() - 1);
                moved = true;
            }
            for qp in 0..self.p.qps {
                while self.complete(qp) {
                    moved = true;
                }
            }
            while self.poll() {
                moved = true;
            }
            if !moved {
                break;
            }
        }
        assert!(
            self.tx.is_idle() && self.msgs.is_empty(),
            "sender stalled with {} messages held",
            self.msgs.len()
        );
        assert!(
            self.recvs.is_empty() && self.rx.posted() == 0,
            "receiver stalled with {} receives held",
            self.recvs.len()
        );
    }
}

fn window_span(p: &EngineParams) -> u32 {
    p.window() as u32 * REORDER_SLACK
}
