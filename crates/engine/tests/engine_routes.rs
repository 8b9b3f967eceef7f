//! Per-message routes: a sender holding the configured policy and others over QP subsets (the
//! per-traffic-pattern choice of setNetAttr), each message cut by the route it was posted on.

use dqplb_engine::{EngineError, EngineParams, PolicyKind, Receiver, Sender, Transmit, MAX_ROUTES};

fn params(qps: usize) -> EngineParams {
    EngineParams {
        qps,
        max_outstanding: 4,
        segment_bytes: 1024,
        max_messages: 16,
        policy: PolicyKind::Dqplb,
    }
}

/// Transmits everything posted, completing each segment at once; returns the segments in order.
fn drain(tx: &mut Sender, rx: &mut Receiver) -> Vec<Transmit> {
    let mut out = Vec::new();
    while let Some(t) = tx.poll_transmit(0) {
        rx.arrived(t.imm, t.len).unwrap();
        tx.completed(t.qp, 1).unwrap();
        out.push(t);
    }
    out
}

#[test]
fn static_split_over_four_of_eight_qps() {
    let p = params(8);
    let mut tx = Sender::new(&p).unwrap();
    let mut rx = Receiver::new(p.window() as u32 * 4, 16).unwrap();
    let spray = tx.add_route(PolicyKind::StaticSplit, 4, 1024).unwrap();
    assert_eq!((spray, tx.routes()), (1, 2));
    // 8 KiB on the spray route: 4 chunks of 2 KiB on QPs 0..3, nothing on 4..7.
    tx.post_routed(7, 8192, spray).unwrap();
    rx.post(7, 8192).unwrap();
    let segs = drain(&mut tx, &mut rx);
    let placed: Vec<(usize, u64, u32)> = segs.iter().map(|t| (t.qp, t.offset, t.len)).collect();
    assert_eq!(
        placed,
        vec![
            (0, 0, 2048),
            (1, 2048, 2048),
            (2, 4096, 2048),
            (3, 6144, 2048)
        ]
    );
    assert_eq!(tx.poll_done(), Some(7));
    assert_eq!(rx.poll_done(), Some((7, 8192)));
    // The same size on route 0 (DQPLB, 1 KiB segments) uses all 8 QPs once.
    tx.post(8, 8192).unwrap();
    rx.post(8, 8192).unwrap();
    let segs = drain(&mut tx, &mut rx);
    let qps: Vec<usize> = segs.iter().map(|t| t.qp).collect();
    assert_eq!(qps, vec![0, 1, 2, 3, 4, 5, 6, 7]);
    assert!(segs.iter().all(|t| t.len == 1024));
    assert_eq!(tx.poll_done(), Some(8));
    assert_eq!(rx.poll_done(), Some((8, 8192)));
}

#[test]
fn routes_interleave_and_complete_in_posting_order() {
    let p = params(8);
    let mut tx = Sender::new(&p).unwrap();
    let mut rx = Receiver::new(p.window() as u32 * 4, 16).unwrap();
    let dqplb4 = tx.add_route(PolicyKind::Dqplb, 4, 512).unwrap();
    let single = tx.add_route(PolicyKind::SingleQp, 0, 1024).unwrap();
    let plan = [(0u32, 0u8), (1, dqplb4), (2, single), (3, dqplb4), (4, 0)];
    for &(tok, route) in &plan {
        tx.post_routed(tok, 4096, route).unwrap();
        rx.post(tok, 4096).unwrap();
    }
    let segs = drain(&mut tx, &mut rx);
    let per_msg = |tok: u32| -> Vec<(usize, u32)> {
        segs.iter()
            .filter(|t| t.token == tok)
            .map(|t| (t.qp, t.len))
            .collect()
    };
    // Route 0: DQPLB 1 KiB over 8 QPs, starting at QP 0.
    assert_eq!(per_msg(0), vec![(0, 1024), (1, 1024), (2, 1024), (3, 1024)]);
    // DQPLB over QPs 0..3 with 512-byte segments: 8 segments, never beyond QP 3.
    let m1 = per_msg(1);
    assert_eq!(m1.len(), 8);
    assert!(m1.iter().all(|&(q, l)| q < 4 && l == 512));
    // Single QP: one 4 KiB segment on QP 0.
    assert_eq!(per_msg(2), vec![(0, 4096)]);
    assert_eq!(per_msg(3).len(), 8);
    // Route 0 again continues its own rotation (QPs 4..7).
    assert_eq!(per_msg(4), vec![(4, 1024), (5, 1024), (6, 1024), (7, 1024)]);
    for tok in 0..5 {
        assert_eq!(tx.poll_done(), Some(tok));
        assert_eq!(rx.poll_done(), Some((tok, 4096)));
    }
    assert!(tx.is_idle());
}

#[test]
fn route_errors_are_exact() {
    let mut tx = Sender::new(&params(2)).unwrap();
    assert_eq!(
        tx.post_routed(0, 10, 1),
        Err(EngineError::NoSuchRoute {
            route: 1,
            routes: 1
        })
    );
    for _ in 1..MAX_ROUTES {
        tx.add_route(PolicyKind::StaticSplit, 0, 1024).unwrap();
    }
    assert_eq!(
        tx.add_route(PolicyKind::Dqplb, 0, 1024),
        Err(EngineError::TooManyRoutes { limit: MAX_ROUTES })
    );
    // A route is validated like the configured policy: segment 0 is refused.
    let mut tx = Sender::new(&params(2)).unwrap();
    assert!(matches!(
        tx.add_route(PolicyKind::Dqplb, 1, 0),
        Err(EngineError::BadParam { .. })
    ));
    // More QPs than the connection has are clamped to it.
    let r = tx.add_route(PolicyKind::StaticSplit, 16, 1024).unwrap();
    let mut rx = Receiver::new(64, 16).unwrap();
    tx.post_routed(1, 4096, r).unwrap();
    rx.post(1, 4096).unwrap();
    let qps: Vec<usize> = drain(&mut tx, &mut rx).iter().map(|t| t.qp).collect();
    assert_eq!(qps, vec![0, 1]);
}
