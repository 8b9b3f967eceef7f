//! The depth rule: a sender's per-QP window rises while its QPs' completion latencies diverge and
//! falls back to `max_outstanding` once they agree again; its guards at installation.

use dqplb_engine::{DepthRule, EngineError, EngineParams, PolicyKind, Sender, DEPTH_EVERY};

const SEG: u32 = 16 << 10;

fn sender(qps: usize) -> Sender {
    Sender::new(&EngineParams {
        qps,
        max_outstanding: 2,
        segment_bytes: SEG,
        max_messages: 64,
        policy: PolicyKind::Dqplb,
    })
    .unwrap()
}

const RULE: DepthRule = DepthRule {
    ratio: 1.5,
    raised: 3,
    hold: 2,
};

/// Posts until the sender has no room; returns segments in flight per QP.
fn fill(tx: &mut Sender, now: u64, qps: usize) -> Vec<u32> {
    while tx.poll_transmit(now).is_some() {}
    (0..qps).map(|q| tx.qp_stats()[q].outstanding).collect()
}

/// One round: every QP completes its oldest segment; QP q's took `lat[q]`.
fn round(tx: &mut Sender, posted_at: u64, lat: &[u64]) {
    for (q, &l) in lat.iter().enumerate() {
        tx.completed(q, posted_at + l).unwrap();
    }
}

#[test]
fn depth_rises_while_latencies_diverge_and_falls_back() {
    let qps = 4;
    let mut tx = sender(qps);
    assert_eq!(tx.depth_rule(), None);
    tx.set_depth_rule(RULE).unwrap();
    assert_eq!(tx.depth_rule(), Some(RULE));
    for i in 0..16 {
        tx.post(i, 64 * u64::from(SEG)).unwrap();
    }
    assert_eq!(fill(&mut tx, 0, qps), vec![2; qps]);
    assert_eq!(tx.depth(), 2);
    assert_eq!(tx.depth_raises(), 0);
    // QP 3 completes 4x slower than the others: after one check period the window is 3.
    let rounds = DEPTH_EVERY as usize / qps;
    for r in 0..rounds {
        round(&mut tx, 0, &[10, 10, 10, 40]);
        if r + 1 < rounds {
            assert_eq!(tx.depth(), 2, "before the check");
            fill(&mut tx, 0, qps);
        }
    }
    assert_eq!(tx.depth(), 3);
    assert_eq!(tx.depth_raises(), 1);
    assert_eq!(fill(&mut tx, 0, qps), vec![3; qps]);
    // The latencies agree again: after `hold` calm checks the window is back to 2; QPs above
    // it get nothing new until they drain below it.
    let mut checks = 0;
    while tx.depth() == 3 {
        round(&mut tx, 0, &[10, 10, 10, 10]);
        fill(&mut tx, 0, qps);
        checks += 1;
        assert!(checks <= 64, "depth never fell back");
    }
    assert_eq!(tx.depth(), 2);
    // Falling back is not a raise.
    assert_eq!(tx.depth_raises(), 1);
    assert!(tx.qp_stats().iter().all(|s| s.outstanding <= 3));
    round(&mut tx, 0, &[10, 10, 10, 10]);
    assert_eq!(fill(&mut tx, 0, qps), vec![2; qps]);
}

#[test]
fn equal_latencies_keep_the_configured_depth() {
    let qps = 4;
    let mut tx = sender(qps);
    tx.set_depth_rule(RULE).unwrap();
    for i in 0..16 {
        tx.post(i, 64 * u64::from(SEG)).unwrap();
    }
    for _ in 0..(4 * DEPTH_EVERY) {
        assert_eq!(fill(&mut tx, 0, qps), vec![2; qps]);
        round(&mut tx, 0, &[10, 11, 12, 13]);
    }
    assert_eq!(tx.depth(), 2);
    assert_eq!(tx.depth_raises(), 0);
}

#[test]
fn depth_rule_guards() {
    let mut tx = sender(2);
    let bad = |r: DepthRule| matches!(r.validate(2), Err(EngineError::BadParam { .. }));
    assert!(bad(DepthRule { ratio: 1.0, ..RULE }));
    assert!(bad(DepthRule { raised: 2, ..RULE }));
    assert!(bad(DepthRule { hold: 0, ..RULE }));
    tx.post(0, u64::from(SEG)).unwrap();
    assert!(matches!(
        tx.set_depth_rule(RULE),
        Err(EngineError::BadParam {
            param: "depth rule",
            ..
        })
    ));
}
