//! Path-failure isolation on verbs, on rxe0 in the VM: one data QP moved to the error
//! state mid-transfer no longer fails the comm. Its segments are fenced (the receiver closes its
//! end and says what it counted), resent on the healthy QPs, and the QP pair is re-created; every
//! message arrives byte-exact into reused receive buffers, each sequence number counted once.
//! Erroring every data QP fails the comm with an error that says so.
#![cfg(feature = "verbs")]

use dqplb_engine::{PolicyKind, QpStats, RehashRule};
use dqplb_test_support::verbs::{buf, comm_pair, pattern, Buf, DEADLINE};
use dqplb_transport::tcp::ConnParams;
use dqplb_transport::verbs::recv::RecvPathCounters;
use dqplb_transport::verbs::send::PathCounters;
use dqplb_transport::verbs::{VerbsDomain, VerbsRecvComm, VerbsSendComm};
use dqplb_transport::{ErrorCode, UserBuf};
use std::time::Instant;

const QPS: usize = 4;
const OUTSTANDING: u32 = 4;
const SEGMENT: usize = 64 << 10;
/// A few hundred KiB and not a whole number of segments: 5 segments, the last one 129 bytes.
const MSG: usize = (256 << 10) + 129;
const SEGMENTS_PER_MSG: u32 = MSG.div_ceil(SEGMENT) as u32;
const MESSAGES: usize = 48;
/// Receive (and send) buffers, reused round robin: a late or second write of an old message
/// would overwrite a newer one, which the per-message check then sees.
const POOL: usize = 6;
/// QP 2 is failed once this many messages were received.
const FAULT_AFTER: usize = 6;

fn params() -> ConnParams {
    ConnParams {
        qps: QPS as u16,
        outstanding: OUTSTANDING,
        segment_bytes: SEGMENT as u32,
        max_messages: 8,
        policy: PolicyKind::Dqplb,
        fabric_id: 0,
    }
}

fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Streams MESSAGES messages through POOL buffers each side, checking every message byte for
/// byte when its receive completes (before its buffer is announced again); `fault` runs once,
/// once FAULT_AFTER messages were received and the engine has segments in flight on QP 2.
fn stream(
    dom: &VerbsDomain,
    s: &mut VerbsSendComm,
    r: &mut VerbsRecvComm,
    mut fault: impl FnMut(&mut VerbsSendComm, &mut VerbsRecvComm),
) {
    let mut src: Vec<Buf> = (0..POOL).map(|_| buf(dom, vec![0; MSG])).collect();
    let mut dst: Vec<Buf> = (0..POOL).map(|_| buf(dom, vec![0; MSG])).collect();
    let (mut posted_r, mut posted_s, mut done_r, mut done_s) = (0, 0, 0, 0);
    let mut rreq = [0u32; MESSAGES];
    let mut sreq = [0u32; MESSAGES];
    let mut filled = [usize::MAX; POOL];
    let mut faulted = false;
    let start = Instant::now();
    while done_r < MESSAGES || done_s < MESSAGES {
        assert!(
            start.elapsed() < DEADLINE,
            "transfer stalled: sent {done_s}, received {done_r}: {} / {} / {:?}",
            s.debug_state(),
            r.debug_state(),
            s.qp_stats()
        );
        if posted_r < MESSAGES && posted_r - done_r < POOL {
            let d = &mut dst[posted_r % POOL];
            d.mem.fill(0xEE);
            let ub = UserBuf::from_slice(&mut d.mem[..]);
            if let Some(q) = r.irecv(ub, 7, Some(&d.mr)).expect("irecv") {
                rreq[posted_r] = q;
                posted_r += 1;
            }
        }
        if posted_s < MESSAGES && posted_s - done_s < POOL {
            let b = &mut src[posted_s % POOL];
            if filled[posted_s % POOL] != posted_s {
                // in place: the buffer stays where it was registered
                b.mem.copy_from_slice(&pattern(posted_s as u32, MSG));
                filled[posted_s % POOL] = posted_s;
            }
            let ub = UserBuf::from_slice(&mut b.mem[..]);
            if let Some(q) = s.isend(ub, 7, Some(&b.mr)).expect("isend") {
                sreq[posted_s] = q;
                posted_s += 1;
            }
        }
        // Right after isend posted (test() below reaps, and rxe is quick): QP 2 may have
        // segments in flight now.
        if !faulted && done_r >= FAULT_AFTER && s.qp_stats()[2].outstanding > 0 {
            faulted = true;
            fault(s, r);
        }
        if done_s < posted_s {
            if let Some(n) = s.test(sreq[done_s]).expect("send test") {
                assert_eq!(n, MSG);
                done_s += 1;
            }
        }
        if done_r < posted_r {
            if let Some(n) = r.test(rreq[done_r]).expect("recv test") {
                assert_eq!(n, MSG, "size of message {done_r}");
                let got = &dst[done_r % POOL].mem;
                let want = pattern(done_r as u32, MSG);
                if let Some(at) = got.iter().zip(&want).position(|(a, b)| a != b) {
                    panic!("message {done_r} differs from byte {at} on");
                }
                done_r += 1;
            }
        }
    }
    assert!(
        faulted,
        "QP 2 never had a segment in flight after {FAULT_AFTER} messages"
    );
}

/// What one QP failure did, for the asserts.
struct Outcome {
    in_flight: u32,
    sp: PathCounters,
    rp: RecvPathCounters,
    st: Vec<QpStats>,
}

/// 48 messages, QP 2 failed mid-transfer: `settle` first lets the receiver count everything the
/// sender posted (the sender reaps nothing meanwhile) and has the sender notice the failure before
/// it reaps, so every segment fenced was already counted. Asserts what holds either way.
fn one_qp_fails(test: &str, settle: bool) -> Outcome {
    let (domain, mut s, mut r) = comm_pair(test, params());
    let (s_qpn, r_qpn) = (
        s.qp_set().data(2).expect("qp 2").qpn(),
        r.qp_set().data(2).expect("qp 2").qpn(),
    );
    let (mut in_flight, mut segs_at_fault) = (0u32, 0u64);
    stream(&domain, &mut s, &mut r, |s, r| {
        // QP 2 has segments in flight (for the engine: rxe may have finished some already); its
        // end goes to the error state: what is not complete yet completes flushed, whether or not
        // the receiver got it.
        if settle {
            let start = Instant::now();
            while r.seqs_counted() != s.seqs_issued() {
                r.progress().expect("receiver progress");
                assert!(start.elapsed() < DEADLINE, "receiver never caught up");
            }
        }
        in_flight = s.qp_stats()[2].outstanding;
        segs_at_fault = s.qp_stats()[2].segments;
        s.debug_fail_data_qp(2, settle)
            .expect("QP 2 to the error state");
    });
    let (sp, rp, st) = (s.path_counters(), r.path_counters(), s.qp_stats().to_vec());
    say(&format!(
        "PATHFAIL {test}: in flight on QP 2 at the fault {in_flight}; sender {sp:?}; receiver {rp:?}; seqs issued {} counted {}; QPN {s_qpn} -> {}, peer {r_qpn} -> {}; per QP segments {:?} resent {:?} failures {:?}; {}; {}",
        s.seqs_issued(),
        r.seqs_counted(),
        s.qp_set().data(2).expect("qp 2").qpn(),
        r.qp_set().data(2).expect("qp 2").qpn(),
        st.iter().map(|q| q.segments).collect::<Vec<_>>(),
        st.iter().map(|q| q.resent).collect::<Vec<_>>(),
        st.iter().map(|q| q.failures).collect::<Vec<_>>(),
        s.op_counters().summary(),
        r.op_counters().summary(),
    ));
    assert!(in_flight > 0);
    // one failure, one fence, one new QP pair
    assert_eq!((sp.failures, sp.fences, sp.replaced), (1, 1, 1), "{sp:?}");
    assert_eq!((rp.fences, rp.replaced, rp.errors), (1, 1, 0), "{rp:?}");
    assert_eq!(st[2].failures, 1);
    assert_eq!(st[0].failures + st[1].failures + st[3].failures, 0);
    // Each sequence number counted once: the receiver's engine refuses a second copy (the comm
    // would have failed), and it counted exactly as many as were issued.
    let seqs = MESSAGES as u32 * SEGMENTS_PER_MSG;
    assert_eq!(s.seqs_issued(), seqs);
    assert_eq!(r.seqs_counted(), seqs);
    // What the engine moved off QP 2 went out again exactly once each: at least the segment whose
    // completion (or post) showed the failure, at most QP 2's window.
    let resent: u64 = st.iter().map(|q| q.resent).sum();
    assert_eq!(resent, sp.resent_data + sp.resent_empty, "{sp:?}");
    assert!(
        (1..=u64::from(OUTSTANDING)).contains(&resent),
        "resent {resent}"
    );
    assert_eq!(rp.already_counted, sp.resent_empty, "{rp:?} / {sp:?}");
    // new QP numbers on both ends, and the new QP 2 carried segments
    assert_ne!(s.qp_set().data(2).expect("qp 2").qpn(), s_qpn);
    assert_ne!(r.qp_set().data(2).expect("qp 2").qpn(), r_qpn);
    assert!(
        st[2].segments > segs_at_fault,
        "the new QP 2 carried nothing: {st:?}"
    );
    assert_eq!(s.op_counters().rnr_errors + r.op_counters().rnr_errors, 0);
    Outcome {
        in_flight,
        sp,
        rp,
        st,
    }
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn an_errored_qp_mid_transfer_is_survived_byte_exact() {
    let o = one_qp_fails("qp_error_mid_transfer", false);
    // Those the receiver had counted went as zero-length writes: at most the ones in flight when
    // the QP failed (a write posted after that cannot have landed).
    assert!(o.sp.resent_empty <= u64::from(o.in_flight), "{:?}", o.sp);
    // The credit of writes that never arrived came back: every uncounted resend's original,
    // less one whose post itself failed (it was never counted as posted).
    assert!(
        (o.sp.resent_data.saturating_sub(1)..=o.sp.resent_data).contains(&o.sp.credit_returned),
        "{:?}",
        o.sp
    );
}

/// The case the fence exists for: every segment in flight on QP 2 had landed and been counted
/// (some of their messages already handed back, their buffers announced again) when the sender
/// learnt of the failure. Resent with their bytes they would overwrite newer messages; the fence
/// makes them zero-length writes, exactly as many as were in flight, and no credit is returned.
#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn segments_the_receiver_counted_are_not_written_again() {
    let o = one_qp_fails("qp_error_after_delivery", true);
    assert_eq!(o.sp.resent_empty, u64::from(o.in_flight), "{:?}", o.sp);
    assert_eq!(o.sp.resent_data, 0, "{:?}", o.sp);
    assert_eq!(o.rp.already_counted, u64::from(o.in_flight), "{:?}", o.rp);
    assert_eq!(o.sp.credit_returned, 0, "{:?}", o.sp);
    assert_eq!(
        o.st.iter().map(|q| q.resent).sum::<u64>(),
        u64::from(o.in_flight)
    );
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn erroring_every_qp_fails_the_comm() {
    let (domain, mut s, mut r) = comm_pair("every_qp_errored", params());
    const BIG: usize = 4 << 20;
    let mut src = buf(&domain, pattern(1, BIG));
    let mut dst = buf(&domain, vec![0; BIG]);
    let rq = r
        .irecv(UserBuf::from_slice(&mut dst.mem[..]), 3, Some(&dst.mr))
        .expect("irecv")
        .expect("receive slot");
    let start = Instant::now();
    let sq = loop {
        let ub = UserBuf::from_slice(&mut src.mem[..]);
        if let Some(q) = s.isend(ub, 3, Some(&src.mr)).expect("isend") {
            break q;
        }
        r.progress().expect("receiver progress");
        assert!(start.elapsed() < DEADLINE, "isend never accepted");
    };
    // 64 segments of 64 KiB and a window of 16: every QP has writes in flight now.
    for q in 0..QPS {
        s.debug_fail_data_qp(q, false).expect("to the error state");
    }
    let e = loop {
        match s.test(sq) {
            Ok(None) => {}
            Ok(Some(n)) => panic!("the send completed ({n} bytes) with every QP in error"),
            Err(e) => break e,
        }
        let _ = r.test(rq);
        assert!(start.elapsed() < DEADLINE, "the comm never failed");
    };
    say(&format!(
        "PATHFAIL every QP: {e}; sender {:?}",
        s.path_counters()
    ));
    assert_eq!(e.code, ErrorCode::RemoteError, "{e}");
    assert!(
        e.msg.contains("every one of the 4 data QPs to"),
        "{}",
        e.msg
    );
    assert!(e.msg.starts_with("data QP "), "{}", e.msg);
    assert_eq!(s.path_counters().failures, 4);
    // sticky: the comm stays failed
    assert!(s.test(sq).is_err());
}

/// The straggler rule on verbs: QP 2's completions reach the engine 50 ms late (a slow path,
/// injected in the sender), the rule (2 x the median over 4 completions, judged again a median
/// period later) drains it, and it gets a new QP pair through the fence exchange, with nothing to
/// resend; the other QPs, on equal paths, are left alone. Every message byte-exact.
#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn a_drained_straggler_gets_a_new_qp_pair_byte_exact() {
    let (domain, mut s, mut r) = comm_pair("rehash", params());
    s.set_rehash_rule(RehashRule {
        ratio: 2.0,
        window: 4,
        cooldown: 0,
        budget: 8,
        budget_period: 60_000_000_000,
    })
    .expect("rule");
    s.debug_slow_data_qp(2, 50_000_000);
    let qpns: Vec<u32> = (0..QPS)
        .map(|q| s.qp_set().data(q).expect("qp").qpn())
        .collect();
    stream(&domain, &mut s, &mut r, |_, _| {});
    // A re-hash asked for near the end may still wait for its answer: let it land.
    let start = Instant::now();
    while s.fences_pending() {
        s.progress().expect("sender progress");
        r.progress().expect("receiver progress");
        assert!(
            start.elapsed() < DEADLINE,
            "a re-hash fence was never answered"
        );
    }
    let (sp, rp, st) = (s.path_counters(), r.path_counters(), s.qp_stats().to_vec());
    let rehashes: u64 = st.iter().map(|q| q.rehashes).sum();
    say(&format!(
        "REHASH: sender {sp:?}; receiver {rp:?}; per QP segments {:?} re-hashes {:?}; QPNs {qpns:?} -> {:?}",
        st.iter().map(|q| q.segments).collect::<Vec<_>>(),
        st.iter().map(|q| q.rehashes).collect::<Vec<_>>(),
        (0..QPS)
            .map(|q| s.qp_set().data(q).expect("qp").qpn())
            .collect::<Vec<_>>()
    ));
    assert_eq!(
        st.iter().map(|q| q.rehashes).collect::<Vec<_>>(),
        vec![0, 0, 1, 0],
        "{st:?}"
    );
    assert_eq!(
        (sp.rehashed, sp.replaced, sp.fences),
        (rehashes, rehashes, rehashes),
        "{sp:?}"
    );
    assert_eq!(
        (sp.failures, sp.resent_data, sp.resent_empty),
        (0, 0, 0),
        "{sp:?}"
    );
    assert_eq!(
        (rp.fences, rp.replaced, rp.already_counted, rp.errors),
        (rehashes, rehashes, 0, 0),
        "{rp:?}"
    );
    let seqs = MESSAGES as u32 * SEGMENTS_PER_MSG;
    assert_eq!((s.seqs_issued(), r.seqs_counted()), (seqs, seqs));
    // Each re-hashed QP index has a new QP number.
    for (q, st) in st.iter().enumerate() {
        let now = s.qp_set().data(q).expect("qp").qpn();
        assert_eq!(st.rehashes > 0, now != qpns[q], "QP {q}: {st:?}");
    }
    assert_eq!(s.op_counters().rnr_errors + r.op_counters().rnr_errors, 0);
}
