//! Deterministic discrete-event simulation (in the test, not the engine) of one connection over 4
//! QPs where QP 3 serves bytes 4x slower: DQPLB shifts load off QP 3, static split cannot; with
//! a window above the data in flight only dqplb-led still does.

use dqplb_engine::{EngineParams, PolicyKind, QpStats, Receiver, Sender};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

const QPS: usize = 4;
const MSG: u64 = 1 << 20;
const MESSAGES: u32 = 64;
/// Time units per byte on each QP: QP 3 is 4x slower.
const COST: [u64; QPS] = [1, 1, 1, 4];

struct Outcome {
    stats: Vec<QpStats>,
    makespan: u64,
}

/// Runs MESSAGES messages of 1 MiB through sender and receiver; each QP serves its segments one
/// at a time in FIFO order, a segment lands and completes when its service ends.
fn simulate(policy: PolicyKind) -> Outcome {
    simulate_held(policy, 8, 4)
}

/// [`simulate`] with at most `max_messages` messages held (posted and not yet released) and
/// `max_outstanding` segments per QP.
fn simulate_held(policy: PolicyKind, max_messages: usize, max_outstanding: u32) -> Outcome {
    let p = EngineParams {
        qps: QPS,
        max_outstanding,
        segment_bytes: 64 << 10,
        max_messages,
        policy,
    };
    let mut tx = Sender::new(&p).unwrap();
    let mut rx = Receiver::new((QPS as u32) * p.max_outstanding, p.max_messages).unwrap();
    let mut queues: Vec<VecDeque<(u32, u32)>> = vec![VecDeque::new(); QPS];
    let mut events: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let (mut now, mut posted, mut tx_done, mut rx_done) = (0u64, 0u32, 0u32, 0u32);
    while tx_done < MESSAGES || rx_done < MESSAGES {
        while posted < MESSAGES && tx.messages() < p.max_messages {
            rx.post(posted, MSG).unwrap();
            tx.post(posted, MSG).unwrap();
            posted += 1;
        }
        while let Some(t) = tx.poll_transmit(now) {
            if queues[t.qp].is_empty() {
                events.push(Reverse((now + u64::from(t.len) * COST[t.qp], t.qp)));
            }
            queues[t.qp].push_back((t.imm, t.len));
        }
        let Some(Reverse((at, qp))) = events.pop() else {
            panic!("simulation stalled: nothing in flight, {tx_done} messages done");
        };
        now = at;
        let (imm, len) = queues[qp].pop_front().unwrap();
        rx.arrived(imm, len).unwrap();
        tx.completed(qp, now).unwrap();
        if let Some(&(_, next)) = queues[qp].front() {
            events.push(Reverse((now + u64::from(next) * COST[qp], qp)));
        }
        while let Some(tok) = tx.poll_done() {
            assert_eq!(tok, tx_done);
            tx_done += 1;
        }
        while let Some((tok, size)) = rx.poll_done() {
            assert_eq!((tok, size), (rx_done, MSG));
            rx_done += 1;
        }
    }
    assert!(tx.is_idle() && tx.outstanding() == 0 && rx.posted() == 0);
    Outcome {
        stats: tx.qp_stats().to_vec(),
        makespan: now,
    }
}

#[test]
fn dqplb_moves_load_off_the_slow_qp() {
    let o = simulate(PolicyKind::Dqplb);
    let segs: Vec<u64> = o.stats.iter().map(|s| s.segments).collect();
    assert_eq!(segs.iter().sum::<u64>(), u64::from(MESSAGES) * 16);
    let fast = (segs[0] + segs[1] + segs[2]) as f64 / 3.0;
    eprintln!("dqplb segments per QP {segs:?}, makespan {}", o.makespan);
    let ratio = segs[3] as f64 / fast;
    assert!(
        (0.2..=0.3).contains(&ratio),
        "slow QP share {ratio:.3} of a fast QP's (segments {segs:?})"
    );
    // Fast QPs share evenly among themselves.
    let (lo, hi) = (
        segs[..3].iter().min().unwrap(),
        segs[..3].iter().max().unwrap(),
    );
    assert!(hi - lo <= 2, "fast QPs uneven: {segs:?}");
    // Every QP kept its queue full, so the slow QP's latency is about 4x.
    let lat = o.stats[3].latency_ewma / o.stats[0].latency_ewma;
    assert!((3.0..=5.0).contains(&lat), "latency ratio {lat:.2}");
    assert!(o.stats.iter().all(|s| s.peak_outstanding == 4));
}

#[test]
fn static_split_gives_equal_shares_and_waits_for_the_slow_qp() {
    let o = simulate(PolicyKind::StaticSplit);
    for s in &o.stats {
        assert_eq!(s.segments, u64::from(MESSAGES));
        assert_eq!(s.bytes, u64::from(MESSAGES) * MSG / 4);
    }
    let d = simulate(PolicyKind::Dqplb);
    eprintln!(
        "makespan: static-split {}, dqplb {}",
        o.makespan, d.makespan
    );
    // All bytes at 3.25x a fast QP's rate vs every message waiting on QP 3's quarter.
    assert!(
        d.makespan * 2 < o.makespan,
        "dqplb {} vs static {}",
        d.makespan,
        o.makespan
    );
    let total = u64::from(MESSAGES) * MSG;
    assert!(o.makespan >= total / 4 * COST[3]);
    assert!(d.makespan >= total * 4 / 13);
}

#[test]
fn round_robin_message_and_single_qp_complete_in_order() {
    // One segment (work request) per message, as NCCL posts it.
    let r = simulate(PolicyKind::RoundRobinMessage);
    for s in &r.stats {
        assert_eq!(s.segments, u64::from(MESSAGES) / 4);
        assert_eq!(s.bytes, u64::from(MESSAGES) / 4 * MSG);
    }
    let s = simulate(PolicyKind::SingleQp);
    assert_eq!(s.stats[0].segments, u64::from(MESSAGES));
    assert!(s.stats[1..].iter().all(|q| q.segments == 0));
}

#[test]
fn with_room_on_every_qp_only_dqplb_led_steers() {
    // One 1 MiB message (16 segments) held at a time, 32 segments of window: no QP ever fills,
    // so dqplb rotates 4 segments onto each QP, like the static split.
    let d = simulate_held(PolicyKind::Dqplb, 1, 8);
    let dsegs: Vec<u64> = d.stats.iter().map(|s| s.segments).collect();
    assert_eq!(dsegs, vec![u64::from(MESSAGES) * 4; QPS]);
    // Each message then waits for QP 3's 4 segments: 4 x 64 KiB x 4 units.
    assert_eq!(d.makespan, u64::from(MESSAGES) * 4 * (64 << 10) * COST[3]);
    let l = simulate_held(PolicyKind::DqplbLed, 1, 8);
    let lsegs: Vec<u64> = l.stats.iter().map(|s| s.segments).collect();
    eprintln!(
        "one message held: dqplb {dsegs:?} in {}, dqplb-led {lsegs:?} in {}",
        d.makespan, l.makespan
    );
    assert_eq!(lsegs.iter().sum::<u64>(), u64::from(MESSAGES) * 16);
    // dqplb-led measures QP 3 on the first message (EWMA 0 until then), then passes it over
    // while a fast QP's (outstanding + 1) x latency is lower: 2 segments per message on QP 3
    // instead of 4 (the latency of a queued segment includes its wait, so not the 1.2 of the
    // rate split), pinned exactly, and so half the time.
    assert_eq!(lsegs, [299, 299, 298, 128]);
    assert!(l.stats.iter().all(|s| s.peak_outstanding <= 8));
    assert!(
        l.makespan * 19 < d.makespan * 10,
        "dqplb-led {} vs dqplb {}",
        l.makespan,
        d.makespan
    );
}
