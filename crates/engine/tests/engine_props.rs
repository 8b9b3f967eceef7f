//! Property tests of the engine: random sizes, QP counts, caps, policies, completion interleavings
//! and arrival permutations, checked against an independent model of what must happen.

use dqplb_engine::imm::{self, SEQ_MASK};
use dqplb_engine::{
    EngineParams, PolicyKind, Receiver, Sender, Transmit, MAX_OUTSTANDING, MAX_QPS,
};
use proptest::prelude::*;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
struct Case {
    policy: PolicyKind,
    qps: usize,
    cap: u32,
    segment_bytes: u32,
    max_messages: usize,
    sizes: Vec<u64>,
    slack: Vec<u64>,
    initial_seq: u32,
    actions: Vec<u32>,
    /// Slow QPs: their arrivals and completions are rarely picked, so the sequence span grows
    /// (empty in about a quarter of the cases; always valid QP indices).
    slow: Vec<usize>,
}

impl Case {
    fn is_slow(&self, q: usize) -> bool {
        self.slow.contains(&q)
    }
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(127),
        Just(128),
        Just(129),
        Just(255),
        Just(256),
        0u64..1500,
        1500u64..12_000,
        // Enough segments to fill 128 QPs several deep at 128-512 B segments.
        12_000u64..400_000,
    ]
}

/// QP counts up to the engine's limit (MAX_QPS = 128), around the 64-bit split of its QP bitset.
fn qps() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 1usize..=16,
        2 => 60usize..=70,
        1 => 120usize..=MAX_QPS,
    ]
}

/// Per-QP caps up to the engine's limit (MAX_OUTSTANDING = 2048).
fn cap() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => 1u32..=8,
        1 => 9u32..=256,
        1 => (MAX_OUTSTANDING - 8)..=MAX_OUTSTANDING,
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(PolicyKind::ALL.to_vec()),
        qps(),
        cap(),
        1u32..=4,
        1usize..=6,
        prop::collection::vec((size(), prop_oneof![Just(0u64), 0u64..300]), 1..24),
        prop_oneof![Just(0u32), (SEQ_MASK - 200)..=SEQ_MASK, 0u32..=SEQ_MASK],
        prop::collection::vec(any::<u32>(), 0..700),
        prop_oneof![
            1 => Just(Vec::new()),
            3 => prop::collection::vec(any::<usize>(), 1..=3),
        ],
    )
        .prop_map(
            |(policy, qps, cap, seg128, max_messages, msgs, initial_seq, actions, slow)| Case {
                slow: slow.into_iter().map(|q| q % qps).collect(),
                policy,
                qps,
                cap,
                segment_bytes: seg128 * 128,
                max_messages,
                sizes: msgs.iter().map(|m| m.0).collect(),
                slack: msgs.iter().map(|m| m.1).collect(),
                initial_seq,
                actions,
            },
        )
}

/// One transmitted segment as the model tracks it.
#[derive(Debug, Clone, Copy)]
struct Seg {
    abs_seq: u64,
    msg: usize,
    qp: usize,
    arrived: bool,
}

struct Sim {
    c: Case,
    tx: Sender,
    rx: Receiver,
    /// Messages posted on both sides so far.
    posted: usize,
    /// Model of the sender's cut position: message index and offset, segments cut.
    cut_msg: usize,
    cut_off: u64,
    cut_idx: u64,
    /// Per message: absolute sequence number of its last segment once cut; segments completed/cut.
    last_seq: Vec<Option<u64>>,
    segs_cut: Vec<u64>,
    segs_done: Vec<u64>,
    segs: Vec<Seg>,
    lens: Vec<u32>,
    next_abs: u64,
    /// Per QP FIFO of segment ids in flight (sender's view).
    qp_fifo: Vec<VecDeque<usize>>,
    /// Segment ids transmitted but not yet arrived.
    in_transit: Vec<usize>,
    /// Arrival bitmap by absolute seq and its contiguous prefix.
    arrived_abs: Vec<bool>,
    prefix: u64,
    tx_done: usize,
    rx_done: usize,
    last_dqplb_qp: usize,
    now: u64,
}

fn token(i: usize) -> u32 {
    0x1000 + i as u32 * 7
}

impl Sim {
    fn new(c: Case) -> Sim {
        let p = EngineParams {
            qps: c.qps,
            max_outstanding: c.cap,
            segment_bytes: c.segment_bytes,
            max_messages: c.max_messages,
            policy: c.policy,
        };
        let tx = Sender::with_initial_seq(&p, c.initial_seq).expect("valid params");
        let rx = Receiver::with_initial_seq(c.qps as u32 * c.cap, c.max_messages, c.initial_seq)
            .expect("valid receiver");
        let n = c.sizes.len();
        Sim {
            qp_fifo: vec![VecDeque::new(); c.qps],
            last_dqplb_qp: c.qps - 1,
            c,
            tx,
            rx,
            posted: 0,
            cut_msg: 0,
            cut_off: 0,
            cut_idx: 0,
            last_seq: vec![None; n],
            segs_cut: vec![0; n],
            segs_done: vec![0; n],
            segs: Vec::new(),
            lens: Vec::new(),
            next_abs: 0,
            in_transit: Vec::new(),
            arrived_abs: Vec::new(),
            prefix: 0,
            tx_done: 0,
            rx_done: 0,
            now: 0,
        }
    }

    fn post(&mut self) {
        if self.posted == self.c.sizes.len() {
            return;
        }
        let i = self.posted;
        let held = self.posted - self.tx_done;
        let r = self.tx.post(token(i), self.c.sizes[i]);
        if held >= self.c.max_messages {
            assert!(r.is_err(), "post beyond max_messages accepted");
            return;
        }
        r.expect("post within max_messages");
        self.rx
            .post(token(i), self.c.sizes[i] + self.c.slack[i])
            .expect("receiver post");
        self.posted += 1;
    }

    fn outstanding(&self, qp: usize) -> u32 {
        self.qp_fifo[qp].len() as u32
    }

    fn span_limited(&self) -> bool {
        let oldest = self
            .qp_fifo
            .iter()
            .filter_map(|f| f.front().map(|&s| self.segs[s].abs_seq))
            .min()
            .unwrap_or(self.next_abs);
        self.next_abs - oldest >= u64::from(self.tx.reorder_span())
    }

    /// The QP the policy must use for the next segment, and its length.
    fn expected_choice(&self) -> (usize, u32) {
        let size = self.c.sizes[self.cut_msg];
        let left = size - self.cut_off;
        let piece = |seg: u64| left.min(seg) as u32;
        match self.c.policy {
            PolicyKind::Dqplb => {
                let q = (1..=self.c.qps)
                    .map(|k| (self.last_dqplb_qp + k) % self.c.qps)
                    .find(|&q| self.outstanding(q) < self.c.cap)
                    .unwrap_or(usize::MAX);
                (q, piece(u64::from(self.c.segment_bytes)))
            }
            // Least expected delay: (outstanding + 1) x the engine's latency EWMA, the first
            // minimum in round-robin order after the last QP used.
            PolicyKind::DqplbLed => {
                let stats = self.tx.qp_stats();
                let mut best = (usize::MAX, f64::INFINITY);
                for q in (1..=self.c.qps).map(|k| (self.last_dqplb_qp + k) % self.c.qps) {
                    let o = self.outstanding(q);
                    let cost = f64::from(o + 1) * stats[q].latency_ewma;
                    if o < self.c.cap && cost < best.1 {
                        best = (q, cost);
                    }
                }
                (best.0, piece(u64::from(self.c.segment_bytes)))
            }
            PolicyKind::StaticSplit => {
                let chunk = size.div_ceil(self.c.qps as u64).div_ceil(128) * 128;
                (self.cut_idx as usize, piece(chunk))
            }
            // NCCL's baselines: one segment (work request) per message.
            PolicyKind::RoundRobinMessage => (self.cut_msg % self.c.qps, piece(u64::MAX)),
            PolicyKind::SingleQp => (0, piece(u64::MAX)),
        }
    }

    fn transmit(&mut self) -> bool {
        self.now += 1;
        let got = self.tx.poll_transmit(self.now);
        let pending = self.cut_msg < self.posted;
        let Some(t) = got else {
            if pending {
                let (q, _) = self.expected_choice();
                let full = q == usize::MAX || self.outstanding(q) >= self.c.cap;
                assert!(
                    full || self.span_limited(),
                    "sender stalled with QP {q} free and span open"
                );
            }
            return false;
        };
        assert!(pending, "transmit with nothing posted: {t:?}");
        self.check_transmit(t);
        true
    }

    fn check_transmit(&mut self, t: Transmit) {
        let i = self.cut_msg;
        let size = self.c.sizes[i];
        let (want_qp, want_len) = self.expected_choice();
        assert_eq!(
            (t.qp, t.len),
            (want_qp, want_len),
            "policy choice for msg {i}"
        );
        assert_eq!(t.token, token(i));
        assert_eq!(t.offset, self.cut_off, "segments must tile the message");
        let (seq, last) = imm::decode(t.imm).expect("sender immediates are valid");
        let want_seq = (u64::from(self.c.initial_seq) + self.next_abs) as u32 & SEQ_MASK;
        assert_eq!(seq, want_seq, "sequence numbers are consecutive mod 2^24");
        let end = t.offset + u64::from(t.len);
        assert!(end <= size);
        assert_eq!(last, end == size, "last flag exactly on the message end");
        if !last {
            assert_eq!(end % 128, 0, "inner boundary not 128-aligned");
            assert!(t.len > 0);
        }
        assert!(self.outstanding(t.qp) < self.c.cap, "QP over its cap");
        let id = self.segs.len();
        self.segs.push(Seg {
            abs_seq: self.next_abs,
            msg: i,
            qp: t.qp,
            arrived: false,
        });
        self.lens.push(t.len);
        self.qp_fifo[t.qp].push_back(id);
        assert_eq!(
            self.tx.qp_stats()[t.qp].outstanding,
            self.outstanding(t.qp),
            "stats occupancy"
        );
        self.in_transit.push(id);
        self.arrived_abs.push(false);
        self.next_abs += 1;
        self.segs_cut[i] += 1;
        self.cut_off = end;
        self.cut_idx += 1;
        if matches!(self.c.policy, PolicyKind::Dqplb | PolicyKind::DqplbLed) {
            self.last_dqplb_qp = t.qp;
        }
        if last {
            self.last_seq[i] = Some(self.segs[id].abs_seq);
            self.cut_msg += 1;
            self.cut_off = 0;
            self.cut_idx = 0;
        }
    }

    fn arrive(&mut self, pick: usize, lazy_lands: bool) {
        if self.in_transit.is_empty() {
            return;
        }
        let at = pick % self.in_transit.len();
        if self.c.is_slow(self.segs[self.in_transit[at]].qp) && !lazy_lands {
            return;
        }
        let id = self.in_transit.swap_remove(at);
        let s = self.segs[id];
        let len = self.seg_len(id);
        let last = self.last_seq[s.msg] == Some(s.abs_seq);
        let wire = (u64::from(self.c.initial_seq) + s.abs_seq) as u32;
        self.rx
            .arrived(imm::encode(wire, last), len)
            .expect("legal arrival accepted");
        self.segs[id].arrived = true;
        self.arrived_abs[s.abs_seq as usize] = true;
        while (self.prefix as usize) < self.arrived_abs.len()
            && self.arrived_abs[self.prefix as usize]
        {
            self.prefix += 1;
        }
        // A duplicate of what just arrived must be refused without changing state.
        if pick.is_multiple_of(5) {
            assert!(self.rx.arrived(imm::encode(wire, last), len).is_err());
        }
    }

    fn seg_len(&self, id: usize) -> u32 {
        self.lens[id]
    }

    fn complete(&mut self, pick: usize) {
        let ready: Vec<usize> = (0..self.c.qps)
            .filter(|&q| {
                self.qp_fifo[q]
                    .front()
                    .is_some_and(|&s| self.segs[s].arrived)
            })
            .collect();
        if ready.is_empty() {
            return;
        }
        let mut q = ready[pick % ready.len()];
        if self.c.is_slow(q) && !pick.is_multiple_of(16) {
            if let Some(&fast) = ready.iter().find(|&&r| !self.c.is_slow(r)) {
                q = fast;
            }
        }
        let id = self.qp_fifo[q].pop_front().expect("non-empty");
        assert_eq!(self.segs[id].qp, q);
        self.now += 1;
        self.tx.completed(q, self.now).expect("completion accepted");
        self.segs_done[self.segs[id].msg] += 1;
    }

    fn poll(&mut self) {
        while let Some(tok) = self.tx.poll_done() {
            let i = self.tx_done;
            assert_eq!(tok, token(i), "sender releases in posting order");
            assert!(self.last_seq[i].is_some() && self.segs_done[i] == self.segs_cut[i]);
            self.tx_done += 1;
        }
        // The next message is not complete, or not yet fully cut.
        if self.tx_done < self.cut_msg {
            assert!(self.segs_done[self.tx_done] < self.segs_cut[self.tx_done]);
        }
        while let Some((tok, size)) = self.rx.poll_done() {
            let i = self.rx_done;
            assert_eq!(tok, token(i), "receiver releases in posting order");
            assert_eq!(size, self.c.sizes[i], "exact received size of msg {i}");
            let last = self.last_seq[i].expect("released receive was fully cut");
            assert!(
                last < self.prefix,
                "released before all its segments arrived"
            );
            self.rx_done += 1;
        }
        if self.rx_done < self.cut_msg {
            let last = self.last_seq[self.rx_done].expect("cut");
            assert!(last >= self.prefix, "complete receive not released");
        }
    }

    fn step(&mut self, a: u32) {
        let pick = (a >> 3) as usize;
        match a % 6 {
            0 => self.post(),
            1 | 2 => {
                self.transmit();
            }
            3 => self.arrive(pick, pick.is_multiple_of(16)),
            4 => {
                self.complete(pick);
                self.complete(pick / 7);
            }
            _ => self.poll(),
        }
    }

    fn drain(&mut self) {
        let total = self.c.sizes.len();
        let mut rounds = 0;
        while self.tx_done < total || self.rx_done < total {
            rounds += 1;
            assert!(rounds < 1_000_000, "no progress: engine hung");
            // Post as much as the engine takes, so large windows really fill.
            while self.posted < total && self.posted - self.tx_done < self.c.max_messages {
                self.post();
            }
            while self.transmit() {}
            // Everything lands, except the slow QPs' segments, which land every 24th round.
            let n = self.in_transit.len();
            for k in 0..n {
                self.arrive(n - 1 - k, rounds % 24 == 0);
            }
            for q in 0..self.c.qps {
                if self.c.is_slow(q) && rounds % 24 != 0 {
                    continue;
                }
                if rounds % 2 == 0 {
                    while !self.qp_fifo[q].is_empty() {
                        self.complete_qp(q);
                    }
                } else if !self.qp_fifo[q].is_empty() {
                    self.complete_qp(q);
                }
            }
            self.poll();
        }
        assert!(self.tx.is_idle());
        assert_eq!(self.tx.outstanding(), 0);
        assert_eq!(self.rx.posted(), 0);
        let stats = self.tx.qp_stats();
        assert_eq!(stats.iter().map(|s| s.segments).sum::<u64>(), self.next_abs);
        assert_eq!(
            stats.iter().map(|s| s.bytes).sum::<u64>(),
            self.c.sizes.iter().sum::<u64>()
        );
        assert!(stats.iter().all(|s| s.peak_outstanding <= self.c.cap));
    }

    fn complete_qp(&mut self, q: usize) {
        let id = self.qp_fifo[q].pop_front().expect("non-empty");
        self.now += 1;
        self.tx.completed(q, self.now).expect("completion accepted");
        self.segs_done[self.segs[id].msg] += 1;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn every_message_completes_once_in_order(c in case()) {
        let mut sim = Sim::new(c.clone());
        for &a in &c.actions {
            sim.step(a);
        }
        sim.drain();
        prop_assert_eq!(sim.tx_done, c.sizes.len());
        prop_assert_eq!(sim.rx_done, c.sizes.len());
    }
}
