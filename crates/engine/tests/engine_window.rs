//! Sequence-space behaviour: the sender's reorder-span throttle, wrap-around at 2^24 on both
//! sides, more than 32 messages in flight, and the documented memory figures.

use dqplb_engine::imm::{self, SEQ_MASK};
use dqplb_engine::{EngineParams, PolicyKind, Receiver, Sender, REORDER_SLACK};

fn params(qps: usize, cap: u32, seg: u32, max_messages: usize) -> EngineParams {
    EngineParams {
        qps,
        max_outstanding: cap,
        segment_bytes: seg,
        max_messages,
        policy: PolicyKind::Dqplb,
    }
}

#[test]
fn slow_qp_throttles_only_past_the_reorder_span() {
    // 2 QPs x 1 outstanding: span 2 * REORDER_SLACK. QP 1 holds seq 1 while QP 0 completes
    // everything else.
    let p = params(2, 1, 128, 4);
    let mut tx = Sender::new(&p).unwrap();
    let mut rx = Receiver::new(2, 4).unwrap();
    assert_eq!(tx.reorder_span(), 2 * REORDER_SLACK);
    assert_eq!(rx.reorder_span(), tx.reorder_span());
    tx.post(0, 128 * 100).unwrap();
    rx.post(0, 128 * 100).unwrap();
    let first = tx.poll_transmit(0).unwrap();
    let held = tx.poll_transmit(0).unwrap();
    assert_eq!((first.qp, held.qp), (0, 1));
    rx.arrived(first.imm, first.len).unwrap();
    tx.completed(0, 1).unwrap();
    let mut sent = 2;
    while let Some(t) = tx.poll_transmit(0) {
        assert_eq!(t.qp, 0);
        rx.arrived(t.imm, t.len).unwrap();
        tx.completed(0, 1).unwrap();
        sent += 1;
    }
    // Seqs 1 ..= span are the span from the held seq 1: seq span + 1 must wait.
    let span = 2 * REORDER_SLACK;
    assert_eq!(sent, span + 1);
    assert_eq!(tx.next_seq(), span + 1);
    // Anything further would have been outside the receiver's window.
    assert!(rx.arrived(imm::encode(span + 1, false), 128).is_err());
    rx.arrived(held.imm, held.len).unwrap();
    tx.completed(1, 5).unwrap();
    assert!(tx.poll_transmit(0).is_some());
}

/// Runs `n` messages of `len` bytes through both sides starting at `initial` and checks the
/// immediates wrap from 2^24 - 1 to 0.
fn run_across_wrap(policy: PolicyKind, initial: u32, n: u32, len: u64) {
    let p = EngineParams {
        policy,
        ..params(3, 2, 256, 4)
    };
    let mut tx = Sender::with_initial_seq(&p, initial).unwrap();
    let mut rx = Receiver::with_initial_seq(6, 4, initial).unwrap();
    let (mut posted, mut done, mut rx_done) = (0u32, 0u32, 0u32);
    let mut expect_seq = initial;
    let mut wrapped = false;
    let mut inflight: Vec<Vec<(u32, u32)>> = vec![Vec::new(); 3];
    while done < n || rx_done < n {
        while posted < n && tx.messages() < 4 {
            tx.post(posted, len).unwrap();
            rx.post(posted, len).unwrap();
            posted += 1;
        }
        while let Some(t) = tx.poll_transmit(0) {
            let (seq, _) = imm::decode(t.imm).unwrap();
            assert_eq!(seq, expect_seq);
            wrapped |= seq == 0 && initial != 0;
            expect_seq = (expect_seq + 1) & SEQ_MASK;
            inflight[t.qp].push((t.imm, t.len));
        }
        // Land the newest segments first (reverse order), then complete FIFO per QP.
        for q in (0..3).rev() {
            for &(imm, len) in inflight[q].iter().rev() {
                rx.arrived(imm, len).unwrap();
            }
        }
        for (q, segs) in inflight.iter_mut().enumerate() {
            for _ in segs.drain(..) {
                tx.completed(q, 1).unwrap();
            }
        }
        while let Some(tok) = tx.poll_done() {
            assert_eq!(tok, done);
            done += 1;
        }
        while let Some((tok, size)) = rx.poll_done() {
            assert_eq!((tok, size), (rx_done, len));
            rx_done += 1;
        }
    }
    assert!(wrapped, "sequence numbers did not cross 2^24");
    assert_eq!(rx.expected_seq(), expect_seq);
}

#[test]
fn wrap_around_at_2_pow_24_all_policies() {
    for policy in PolicyKind::ALL {
        run_across_wrap(policy, SEQ_MASK - 5, 20, 1000);
        run_across_wrap(policy, SEQ_MASK, 5, 0);
    }
}

#[test]
fn more_than_32_messages_in_flight() {
    // 16 QPs x 4: 64 single-segment messages all in flight at once, max_messages 64 > 32.
    let mut tx = Sender::new(&params(16, 4, 1 << 16, 64)).unwrap();
    let mut rx = Receiver::new(64, 64).unwrap();
    for i in 0..64u32 {
        tx.post(i, 1000 + u64::from(i)).unwrap();
        rx.post(i, 4096).unwrap();
    }
    assert!(tx.post(64, 1).is_err());
    let mut segs = Vec::new();
    while let Some(t) = tx.poll_transmit(0) {
        segs.push(t);
    }
    assert_eq!(segs.len(), 64);
    assert_eq!(tx.outstanding(), 64);
    assert_eq!(tx.queued_messages(), 0);
    assert!(tx.qp_stats().iter().all(|s| s.outstanding == 4));
    // Land and complete everything except message 0 (on QP 0, first in its FIFO): nothing
    // may be released on either side.
    for t in segs.iter().skip(1).rev() {
        rx.arrived(t.imm, t.len).unwrap();
    }
    for q in 1..16 {
        for _ in 0..4 {
            tx.completed(q, 1).unwrap();
        }
    }
    assert_eq!(tx.poll_done(), None);
    assert_eq!(rx.poll_done(), None);
    assert_eq!(rx.pending(), 64);
    rx.arrived(segs[0].imm, segs[0].len).unwrap();
    for _ in 0..4 {
        tx.completed(0, 1).unwrap();
    }
    for i in 0..64u32 {
        assert_eq!(tx.poll_done(), Some(i));
        assert_eq!(rx.poll_done(), Some((i, 1000 + u64::from(i))));
    }
    assert!(tx.is_idle());
    // 40 multi-segment messages (3 segments each) with max_messages 40.
    let mut tx = Sender::new(&params(4, 8, 128, 40)).unwrap();
    let mut rx = Receiver::new(32, 40).unwrap();
    for i in 0..40u32 {
        tx.post(i, 300).unwrap();
        rx.post(i, 300).unwrap();
    }
    let mut done = 0;
    let mut rx_done = 0;
    while done < 40 {
        let mut sent = Vec::new();
        while let Some(t) = tx.poll_transmit(0) {
            sent.push(t);
        }
        for t in sent.iter().rev() {
            rx.arrived(t.imm, t.len).unwrap();
        }
        for t in &sent {
            tx.completed(t.qp, 0).unwrap();
        }
        while let Some(tok) = tx.poll_done() {
            assert_eq!(tok, done);
            done += 1;
        }
        while let Some((tok, size)) = rx.poll_done() {
            assert_eq!((tok, size), (rx_done, 300));
            rx_done += 1;
        }
    }
    assert_eq!(rx_done, 40);
}

/// The documented per-connection figures (docs/records/engine.md) for NCCLX's default 16 QPs x 128.
/// crates/engine/tests/engine_alloc.rs measures that construction allocates exactly `footprint_bytes`.
#[test]
fn documented_footprint_figures() {
    let tx = Sender::new(&params(16, 128, 512 << 10, 64)).unwrap();
    let rx = Receiver::new(16 * 128, 64).unwrap();
    assert_eq!(
        (tx.footprint_bytes(), rx.footprint_bytes()),
        (79_104, 263_816)
    );
}
