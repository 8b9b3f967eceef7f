//! Path health in the sans-IO engine, driven by a deterministic simulation: the straggler re-hash
//! rule (drain, report, replace, cool-down, budget) and path failure (resend, count once).

use dqplb_engine::{
    EngineError, EngineParams, PathEvent, PolicyKind, ProtocolError, Receiver, RehashRule, Sender,
};
use std::collections::VecDeque;

const MSG: u64 = 256 << 10;
const SEG: u32 = 16 << 10;

fn params(qps: usize) -> EngineParams {
    EngineParams {
        qps,
        max_outstanding: 4,
        segment_bytes: SEG,
        max_messages: 8,
        policy: PolicyKind::Dqplb,
    }
}

fn rule(budget: u32, cooldown: u64) -> RehashRule {
    RehashRule {
        ratio: 4.0,
        window: 8,
        cooldown,
        budget,
        budget_period: 1_000_000_000,
    }
}

/// What a run did.
#[derive(Debug, Default)]
struct Run {
    makespan: u64,
    /// (time, qp) of each Replace event.
    replaced: Vec<(u64, usize)>,
    /// Segments posted per QP while it was draining (must stay 0).
    posted_while_draining: Vec<u64>,
    segs_per_qp: Vec<u64>,
    duplicates: u64,
}

/// `messages` messages of MSG bytes; QP q serves one segment at a time taking `cost[q]` time
/// units; a replaced QP takes `new_cost[q]`. `fail` = (after this many completions, QP) fails:
/// its first in-flight segment had landed (its completion is lost), the rest are lost.
fn simulate(
    qps: usize,
    cost: &[u64],
    new_cost: &[u64],
    rule: Option<RehashRule>,
    messages: u32,
    fail: Option<(u64, usize)>,
) -> Run {
    let p = params(qps);
    let mut tx = Sender::new(&p).unwrap();
    if let Some(r) = rule {
        tx.set_rehash_rule(r).unwrap();
    }
    let mut rx = Receiver::new(p.window() as u32 * 2, p.max_messages).unwrap();
    let mut cost = cost.to_vec();
    // Per QP: FIFO of (imm, len) and the time its head finishes.
    let mut q: Vec<VecDeque<(u32, u32)>> = vec![VecDeque::new(); qps];
    let mut busy_until: Vec<Option<u64>> = vec![None; qps];
    let mut run = Run {
        posted_while_draining: vec![0; qps],
        segs_per_qp: vec![0; qps],
        ..Run::default()
    };
    let mut draining = vec![false; qps];
    let (mut now, mut posted, mut tx_done, mut rx_done, mut completions) =
        (0u64, 0u32, 0u32, 0u32, 0u64);
    while tx_done < messages || rx_done < messages {
        while posted < messages && tx.messages() < p.max_messages {
            rx.post(posted, MSG).unwrap();
            tx.post(posted, MSG).unwrap();
            posted += 1;
        }
        while let Some(t) = tx.poll_transmit(now) {
            if draining[t.qp] {
                run.posted_while_draining[t.qp] += 1;
            }
            run.segs_per_qp[t.qp] += 1;
            if q[t.qp].is_empty() {
                busy_until[t.qp] = Some(now + cost[t.qp]);
            }
            q[t.qp].push_back((t.imm, t.len));
        }
        let healthy = tx.healthy_qps();
        for (qp, d) in draining.iter_mut().enumerate() {
            // A QP the sender stopped feeding without a failure is draining.
            *d = !healthy.has(qp) && !matches!(fail, Some((_, f)) if f == qp);
        }
        while let Some(PathEvent::Replace { qp }) = tx.poll_path_event() {
            assert!(
                q[qp].is_empty(),
                "QP {qp} reported drained with segments queued"
            );
            run.replaced.push((now, qp));
            cost[qp] = new_cost[qp];
            tx.path_replaced(qp).unwrap();
            draining[qp] = false;
        }
        let Some((at, qp)) = busy_until
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.map(|t| (t, i)))
            .min()
        else {
            panic!("stalled: {tx_done} sent, {rx_done} received");
        };
        now = at;
        let (imm, len) = q[qp].pop_front().unwrap();
        match rx.arrived(imm, len) {
            Ok(()) => {}
            Err(ProtocolError::Duplicate { .. }) => run.duplicates += 1,
            Err(e) => panic!("receiver: {e}"),
        }
        completions += 1;
        if let Some((after, f)) = fail {
            if completions == after {
                // QP f dies now: its head segment landed but its completion is lost; the rest
                // of its queue never lands.
                let landed = q[f].pop_front();
                if let Some((imm, len)) = landed {
                    rx.arrived(imm, len).unwrap();
                }
                let in_flight = tx.qp_stats()[f].outstanding - u32::from(f == qp);
                q[f].clear();
                busy_until[f] = None;
                if f == qp {
                    tx.completed(qp, now).unwrap();
                }
                assert_eq!(tx.path_failed(f).unwrap(), in_flight);
                if f != qp {
                    tx.completed(qp, now).unwrap();
                }
                busy_until[qp] = q[qp].front().map(|_| now + cost[qp]);
                drain_done(&mut tx, &mut rx, &mut tx_done, &mut rx_done);
                continue;
            }
        }
        tx.completed(qp, now).unwrap();
        busy_until[qp] = q[qp].front().map(|_| now + cost[qp]);
        drain_done(&mut tx, &mut rx, &mut tx_done, &mut rx_done);
    }
    run.makespan = now;
    run
}

fn drain_done(tx: &mut Sender, rx: &mut Receiver, tx_done: &mut u32, rx_done: &mut u32) {
    while let Some(tok) = tx.poll_done() {
        assert_eq!(tok, *tx_done);
        *tx_done += 1;
    }
    while let Some((tok, size)) = rx.poll_done() {
        assert_eq!((tok, size), (*rx_done, MSG), "receive {rx_done}");
        *rx_done += 1;
    }
}

#[test]
fn a_straggler_is_drained_replaced_once_and_the_transfer_speeds_up() {
    let cost = [10, 10, 10, 200];
    let fixed = [10, 10, 10, 10];
    let plain = simulate(4, &cost, &cost, None, 64, None);
    let run = simulate(4, &cost, &fixed, Some(rule(4, 0)), 64, None);
    assert_eq!(run.replaced.len(), 1, "{run:?}");
    assert_eq!(run.replaced[0].1, 3);
    assert_eq!(run.posted_while_draining, vec![0; 4]);
    assert_eq!(run.duplicates, 0);
    assert!(plain.replaced.is_empty());
    // Before the re-hash QP 3 carried few segments; after it, its share is equal again.
    assert!(
        run.segs_per_qp[3] > plain.segs_per_qp[3],
        "{run:?} vs {plain:?}"
    );
    assert!(
        run.makespan < plain.makespan,
        "{} vs {}",
        run.makespan,
        plain.makespan
    );
}

#[test]
fn cooldown_and_budget_bound_rehashes() {
    // Two stragglers whose new paths are as slow: each replacement is slow again.
    let cost = [10, 10, 200, 200];
    // Budget 1 per period: exactly one re-hash in the run.
    let one = simulate(4, &cost, &cost, Some(rule(1, 0)), 64, None);
    assert_eq!(one.replaced.len(), 1, "{one:?}");
    // Budget 3, no cool-down: three re-hashes.
    let three = simulate(4, &cost, &cost, Some(rule(3, 0)), 64, None);
    assert_eq!(three.replaced.len(), 3, "{three:?}");
    // Budget 3 but a cool-down longer than the run: one.
    let cool = simulate(4, &cost, &cost, Some(rule(3, u64::MAX)), 64, None);
    assert_eq!(cool.replaced.len(), 1, "{cool:?}");
    for r in [&one, &three, &cool] {
        assert_eq!(r.posted_while_draining, vec![0; 4]);
    }
}

#[test]
fn the_rule_is_validated() {
    let mut tx = Sender::new(&params(2)).unwrap();
    for bad in [
        RehashRule {
            ratio: 1.0,
            ..rule(1, 0)
        },
        RehashRule {
            ratio: f64::NAN,
            ..rule(1, 0)
        },
        RehashRule {
            window: 0,
            ..rule(1, 0)
        },
        rule(0, 0),
        rule(65, 0),
    ] {
        assert!(
            matches!(tx.set_rehash_rule(bad), Err(EngineError::BadParam { .. })),
            "{bad:?}"
        );
    }
    tx.set_rehash_rule(rule(64, 0)).unwrap();
}

#[test]
fn a_failed_path_resends_its_segments_and_each_counts_once() {
    let cost = [10, 10, 10, 10];
    let run = simulate(4, &cost, &cost, None, 32, Some((40, 1)));
    // The landed head of QP 1 comes again on another QP: one duplicate, ignored.
    assert_eq!(run.duplicates, 1, "{run:?}");
    assert!(run.replaced.is_empty());
}

#[test]
fn path_failure_bookkeeping_is_exact() {
    let mut tx = Sender::new(&params(2)).unwrap();
    tx.post(0, u64::from(SEG) * 6).unwrap();
    let mut first = Vec::new();
    while let Some(t) = tx.poll_transmit(0) {
        first.push(t);
    }
    // 2 QPs x 4 outstanding, 6 segments: QP 0 and QP 1 get 3 each.
    assert_eq!(first.len(), 6);
    assert_eq!(tx.outstanding(), 6);
    assert_eq!(tx.path_failed(1).unwrap(), 3);
    assert_eq!(tx.outstanding(), 3);
    assert_eq!(
        tx.path_failed(1).unwrap(),
        0,
        "a second failure moves nothing"
    );
    // QP 0 has room for one: the oldest of QP 1's segments goes first, same immediate.
    let lost: Vec<_> = first.iter().filter(|t| t.qp == 1).collect();
    let again = tx.poll_transmit(5).unwrap();
    assert_eq!(
        (again.qp, again.imm, again.offset, again.len),
        (0, lost[0].imm, lost[0].offset, lost[0].len)
    );
    assert!(tx.poll_transmit(5).is_none(), "QP 0 full, QP 1 dead");
    assert_eq!(tx.qp_stats()[1].failures, 1);
    assert_eq!(tx.qp_stats()[0].resent, 1);
    assert_eq!(
        tx.path_replaced(0),
        Ok(()),
        "replacing a healthy QP is a no-op"
    );
    tx.path_replaced(1).unwrap();
    let t = tx.poll_transmit(6).unwrap();
    assert_eq!((t.qp, t.imm), (1, lost[1].imm));
    assert_eq!(tx.path_failed(0).map(|_| ()), Ok(()));
    assert_eq!(
        tx.path_failed(1),
        Err(EngineError::AllPathsFailed { qps: 2 })
    );
    assert_eq!(
        tx.path_failed(2),
        Err(EngineError::NoSuchQp { qp: 2, qps: 2 })
    );
}

#[test]
fn a_draining_qp_with_segments_in_flight_cannot_take_a_new_path() {
    let cost = [10, 400];
    // Drive by hand: QP 1 slow until it is drained.
    let mut tx = Sender::new(&params(2)).unwrap();
    tx.set_rehash_rule(RehashRule {
        window: 2,
        ..rule(8, 0)
    })
    .unwrap();
    let mut rx = Receiver::new(64, 8).unwrap();
    let mut q: [VecDeque<(u32, u32, u64)>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut now = 0;
    let mut posted = 0;
    let mut event = None;
    for _ in 0..10_000 {
        while tx.messages() < 8 {
            tx.post(posted, MSG).unwrap();
            rx.post(posted, MSG).unwrap();
            posted += 1;
        }
        while let Some(t) = tx.poll_transmit(now) {
            let start = q[t.qp].back().map_or(now, |&(_, _, e)| e);
            q[t.qp].push_back((t.imm, t.len, start + cost[t.qp]));
        }
        if !tx.healthy_qps().has(1) && event.is_none() {
            if tx.qp_stats()[1].outstanding > 0 {
                assert_eq!(
                    tx.path_replaced(1),
                    Err(EngineError::PathBusy {
                        qp: 1,
                        outstanding: tx.qp_stats()[1].outstanding
                    })
                );
                assert_eq!(tx.poll_path_event(), None);
            } else {
                event = tx.poll_path_event();
                assert_eq!(event, Some(PathEvent::Replace { qp: 1 }));
                assert_eq!(tx.poll_path_event(), None, "reported once");
                break;
            }
        }
        let qp = if q[1].front().map(|x| x.2) < q[0].front().map(|x| x.2) || q[0].is_empty() {
            1
        } else {
            0
        };
        let (imm, len, at) = q[qp].pop_front().expect("something in flight");
        now = at;
        rx.arrived(imm, len).unwrap();
        tx.completed(qp, now).unwrap();
        while tx.poll_done().is_some() {}
        while rx.poll_done().is_some() {}
    }
    assert_eq!(event, Some(PathEvent::Replace { qp: 1 }));
}

#[test]
fn a_blackholed_qp_is_found_stalled_and_its_segments_move() {
    let mut tx = Sender::new(&params(3)).unwrap();
    tx.post(0, u64::from(SEG) * 6).unwrap();
    let first: Vec<_> = std::iter::from_fn(|| tx.poll_transmit(100)).collect();
    assert_eq!(first.len(), 6);
    // QPs 0 and 2 complete at 150; QP 1 never does.
    for t in &first {
        if t.qp != 1 {
            tx.completed(t.qp, 150).unwrap();
        }
    }
    assert_eq!(tx.stalled(150, 1000), None);
    assert_eq!(tx.stalled(1099, 1000), None);
    assert_eq!(tx.stalled(1100, 1000), Some(1));
    assert_eq!(tx.path_failed(1).unwrap(), 2);
    assert_eq!(
        tx.stalled(5000, 1000),
        None,
        "a failed QP is not reported again"
    );
    let again: Vec<_> = std::iter::from_fn(|| tx.poll_transmit(5000)).collect();
    let lost: Vec<u32> = first.iter().filter(|t| t.qp == 1).map(|t| t.imm).collect();
    assert_eq!(again.iter().map(|t| t.imm).collect::<Vec<_>>(), lost);
    assert!(again.iter().all(|t| t.qp != 1));
}

#[test]
fn a_silent_connection_is_not_a_failed_path() {
    let mut tx = Sender::new(&params(3)).unwrap();
    tx.post(0, u64::from(SEG) * 6).unwrap();
    let first: Vec<_> = std::iter::from_fn(|| tx.poll_transmit(100)).collect();
    assert_eq!(first.len(), 6);
    // Nothing completes anywhere (the receiver's host stalled): no QP is singled out.
    assert_eq!(tx.stalled(100_000, 1000), None);
    // Completions resume on QP 0 only, long after the posts: QPs 1 and 2 are behind the
    // connection's progress and the lowest is reported.
    let on0: Vec<_> = first.iter().filter(|t| t.qp == 0).collect();
    tx.completed(0, 100_001).unwrap();
    assert_eq!(on0.len(), 2);
    assert_eq!(tx.stalled(100_001, 1000), Some(1));
    // A completion at the very post time is no evidence either way (strictly after).
    let mut tx = Sender::new(&params(2)).unwrap();
    tx.post(0, u64::from(SEG) * 2).unwrap();
    let t: Vec<_> = std::iter::from_fn(|| tx.poll_transmit(500)).collect();
    tx.completed(t[0].qp, 500).unwrap();
    assert_eq!(tx.stalled(10_000, 1000), None);
}

/// Drives `tx` for `rounds` rounds: each round posts one message, sends every transmit and
/// completes them in QP order with latency `lat(round, qp)`; returns the Replace events.
fn rounds(tx: &mut Sender, rounds: u64, t0: u64, lat: &dyn Fn(u64, usize) -> u64) -> Vec<usize> {
    let mut replaced = Vec::new();
    let mut now = t0;
    for r in 0..rounds {
        tx.post(r as u32, MSG).unwrap();
        let mut sent: Vec<_> = std::iter::from_fn(|| tx.poll_transmit(now)).collect();
        sent.sort_by_key(|t| t.qp);
        for t in sent {
            tx.completed(t.qp, now + lat(r, t.qp)).unwrap();
        }
        now += 1_000;
        while tx.poll_done().is_some() {}
        while let Some(PathEvent::Replace { qp }) = tx.poll_path_event() {
            tx.path_replaced(qp).unwrap();
            replaced.push(qp);
        }
    }
    replaced
}

#[test]
fn every_qp_slowing_at_once_is_not_a_straggler() {
    let mut p = params(4);
    p.max_messages = 64;
    let mut tx = Sender::new(&p).unwrap();
    tx.set_rehash_rule(RehashRule {
        ratio: 2.0,
        window: 4,
        ..rule(8, 0)
    })
    .unwrap();
    // 40 rounds at latency 10 everywhere, then 12 rounds at 100 everywhere (a host stall): the
    // cached median lags and every completion of the stall looks slow, but no QP stands out.
    let calm_then_stall = |r: u64, _q: usize| if r < 40 { 10 } else { 100 };
    assert_eq!(
        rounds(&mut tx, 52, 0, &calm_then_stall),
        Vec::<usize>::new()
    );
    // QP 3 alone at 10x the others: drained and replaced.
    let one_slow = |_r: u64, q: usize| if q == 3 { 1_000 } else { 100 };
    let got = rounds(&mut tx, 40, 100_000, &one_slow);
    assert_eq!(got.first(), Some(&3), "{got:?}");
}
