//! The depth rule's trial re-pins: a QP that stays the slowest is drained and moved onto the
//! fastest QP's path, kept there if it is faster, moved back if not; budget and guards.

use dqplb_engine::{
    DepthRule, EngineError, EngineParams, PathEvent, PolicyKind, RepinPath, RepinRule, Sender,
    DEPTH_EVERY,
};

const SEG: u32 = 16 << 10;
const QPS: usize = 4;

const DEPTH: DepthRule = DepthRule {
    ratio: 1.5,
    raised: 3,
    hold: 2,
};

const REPIN: RepinRule = RepinRule {
    ratio: 1.5,
    persist: 2,
    settle: 4,
    budget: 2,
};

/// A 4-QP sender at depth 2, no rules, nothing queued.
fn bare_sender() -> Sender {
    Sender::new(&EngineParams {
        qps: QPS,
        max_outstanding: 2,
        segment_bytes: SEG,
        max_messages: 64,
        policy: PolicyKind::Dqplb,
    })
    .unwrap()
}

/// A 4-QP sender at depth 2 with the depth rule and `repin` (if any), and one long message
/// queued.
fn sender(repin: Option<RepinRule>) -> Sender {
    let mut tx = bare_sender();
    tx.set_depth_rule(DEPTH).unwrap();
    if let Some(r) = repin {
        tx.set_repin_rule(r).unwrap();
    }
    tx.post(0, 1 << 30).unwrap();
    tx
}

/// Driver time and completions so far.
struct Clock {
    t: u64,
    done: u64,
}

/// One step: every QP with room is filled at the same instant, then every segment in flight
/// completes, QP q's after `lat[q]`.
fn step(tx: &mut Sender, c: &mut Clock, lat: [u64; QPS]) {
    while tx.poll_transmit(c.t).is_some() {}
    for (q, &l) in lat.iter().enumerate() {
        while tx.qp_stats()[q].outstanding > 0 {
            tx.completed(q, c.t + l).unwrap();
            c.done += 1;
        }
    }
    c.t += 1000;
}

/// Steps until a QP is drained and reported; its index and where the rule sends it.
fn until_drained(tx: &mut Sender, c: &mut Clock, lat: [u64; QPS]) -> (usize, Option<RepinPath>) {
    for _ in 0..64 {
        step(tx, c, lat);
        if let Some(PathEvent::Replace { qp }) = tx.poll_path_event() {
            return (qp, tx.repin_path(qp));
        }
    }
    panic!("no QP drained");
}

#[test]
fn a_qp_that_stays_slowest_moves_onto_the_fastest_path_and_keeps_it_when_faster() {
    let mut tx = sender(Some(REPIN));
    assert_eq!(tx.repin_rule(), Some(REPIN));
    let mut c = Clock { t: 0, done: 0 };
    let slow = [10, 10, 10, 40];
    // Check 1 (completion 16) raises the depth and starts QP 3's streak; check 2 (completion
    // 32, in the fourth step) moves it onto QP 0's path, the first of the fastest.
    let (qp, path) = until_drained(&mut tx, &mut c, slow);
    assert_eq!((qp, path), (3, Some(RepinPath::Onto { qp: 0 })));
    assert_eq!(c.done, 8 + 8 + 12 + 12);
    assert_eq!(tx.depth(), 3);
    assert_eq!(tx.depth_repins(), 1);
    assert_eq!(tx.healthy_qps().bits(), 0b0111);
    tx.path_replaced(3).unwrap();
    assert_eq!(tx.repin_path(3), None);
    // It starts from the median of the last check, not from 0.
    assert_eq!(tx.qp_stats()[3].latency_ewma, 10.0);
    assert_eq!(tx.qp_stats()[3].rehashes, 1);
    // On its new path it is as fast as the others: kept, and nothing else moves.
    for _ in 0..(8 * DEPTH_EVERY) {
        step(&mut tx, &mut c, [10, 10, 10, 10]);
        assert_eq!(tx.poll_path_event(), None);
    }
    assert_eq!(tx.depth_repins(), 1);
    assert_eq!(tx.healthy_qps().bits(), 0b1111);
    assert_eq!(tx.depth(), 2);
}

#[test]
fn a_move_that_is_no_faster_goes_back() {
    let mut tx = sender(Some(REPIN));
    let mut c = Clock { t: 0, done: 0 };
    let (qp, path) = until_drained(&mut tx, &mut c, [10, 10, 10, 40]);
    assert_eq!((qp, path), (3, Some(RepinPath::Onto { qp: 0 })));
    tx.path_replaced(3).unwrap();
    // Still 4x the others on QP 0's path: once it completed its 3 segments of the old path and
    // `settle` more, the next check sends it back.
    let before = c.done;
    let (qp, path) = until_drained(&mut tx, &mut c, [10, 10, 10, 40]);
    assert_eq!((qp, path), (3, Some(RepinPath::Back)));
    assert_eq!(c.done - before, 12 + 12);
    // Moves back are not counted against the budget.
    assert_eq!(tx.depth_repins(), 1);
    tx.path_replaced(3).unwrap();
    assert_eq!(tx.repin_path(3), None);
    assert_eq!(tx.qp_stats()[3].rehashes, 2);
}

#[test]
fn the_budget_bounds_the_moves() {
    let mut tx = sender(Some(RepinRule { budget: 1, ..REPIN }));
    let mut c = Clock { t: 0, done: 0 };
    let (qp, _) = until_drained(&mut tx, &mut c, [10, 10, 10, 40]);
    tx.path_replaced(qp).unwrap();
    let (qp, path) = until_drained(&mut tx, &mut c, [10, 10, 10, 40]);
    assert_eq!((qp, path), (3, Some(RepinPath::Back)));
    tx.path_replaced(qp).unwrap();
    // QP 3 stays the slowest, but the one move is spent.
    for _ in 0..(8 * DEPTH_EVERY) {
        step(&mut tx, &mut c, [10, 10, 10, 40]);
        assert_eq!(tx.poll_path_event(), None);
    }
    assert_eq!(tx.depth_repins(), 1);
    assert_eq!(tx.depth(), 3);
}

#[test]
fn without_the_rule_a_slow_qp_only_raises_the_depth() {
    let mut tx = sender(None);
    let mut c = Clock { t: 0, done: 0 };
    for _ in 0..(8 * DEPTH_EVERY) {
        step(&mut tx, &mut c, [10, 10, 10, 40]);
        assert_eq!(tx.poll_path_event(), None);
    }
    assert_eq!(tx.repin_rule(), None);
    assert_eq!(tx.depth_repins(), 0);
    assert_eq!(tx.depth(), 3);
}

#[test]
fn repin_rule_guards() {
    let bad = |r: RepinRule| matches!(r.validate(), Err(EngineError::BadParam { .. }));
    assert!(bad(RepinRule {
        ratio: 1.0,
        ..REPIN
    }));
    assert!(bad(RepinRule {
        ratio: f64::NAN,
        ..REPIN
    }));
    assert!(bad(RepinRule {
        persist: 0,
        ..REPIN
    }));
    assert!(bad(RepinRule { settle: 0, ..REPIN }));
    assert!(bad(RepinRule { budget: 0, ..REPIN }));
    assert_eq!(REPIN.validate(), Ok(()));
    let mut tx = bare_sender();
    assert!(matches!(
        tx.set_repin_rule(REPIN),
        Err(EngineError::BadParam {
            param: "repin rule",
            ..
        })
    ));
    tx.set_depth_rule(DEPTH).unwrap();
    assert!(matches!(
        tx.set_repin_rule(RepinRule {
            persist: 0,
            ..REPIN
        }),
        Err(EngineError::BadParam {
            param: "repin persist",
            ..
        })
    ));
    tx.set_repin_rule(REPIN).unwrap();
    assert_eq!(tx.repin_rule(), Some(REPIN));
}
