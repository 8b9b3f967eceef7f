//! Exact per-message operation counts of the verbs data path on rxe0: posts,
//! completions and CQ polls of one send comm and one receive comm, read through
//! `op_counters()`. Each step of a message is driven once after the previous one has settled
//! on the wire, so the counts do not depend on timing: posts and completions are exact by
//! construction, and so are the polls as long as every completion is there when polled (a
//! message that needed a second test() call is reported and left out of the poll check).
#![cfg(feature = "verbs")]

use dqplb_test_support::verbs::{buf, comm_pair, conn_params, pattern, Buf, DEADLINE};
use dqplb_transport::verbs::completion::OpCounters;
use dqplb_transport::verbs::{VerbsRecvComm, VerbsSendComm};
use dqplb_transport::UserBuf;
use std::time::{Duration, Instant};

/// Long enough for rxe under TCG to finish a small write and its completion.
const SETTLE: Duration = Duration::from_millis(150);

/// Per-message counts of one side: (send posts, recv posts, completions, polls).
type Counts = (u64, u64, u64, u64);

fn counts(c: &OpCounters) -> Counts {
    (c.send_posts, c.recv_posts, c.completions, c.polls())
}

/// One message of `len` bytes, each step after the previous settled. Returns the send and
/// receive comms' counts for it and whether every test() succeeded at the first call.
fn one_message(
    s: &mut VerbsSendComm,
    r: &mut VerbsRecvComm,
    src: &mut Buf,
    dst: &mut Buf,
    len: usize,
) -> (OpCounters, OpCounters, bool) {
    let (s0, r0) = (*s.op_counters(), *r.op_counters());
    let rreq = r
        .irecv(UserBuf::from_slice(&mut dst.mem[..len]), 7, Some(&dst.mr))
        .expect("irecv")
        .expect("receive slot free");
    std::thread::sleep(SETTLE);
    let mut clean = true;
    let start = Instant::now();
    let sreq = loop {
        let ub = UserBuf::from_slice(&mut src.mem[..len]);
        if let Some(q) = s.isend(ub, 7, Some(&src.mr)).expect("isend") {
            break q;
        }
        clean = false;
        assert!(start.elapsed() < DEADLINE, "isend never accepted");
        std::thread::sleep(SETTLE);
    };
    std::thread::sleep(SETTLE);
    while s.test(sreq).expect("send test").is_none() {
        clean = false;
        assert!(start.elapsed() < DEADLINE, "send never completed");
        std::thread::sleep(SETTLE);
    }
    while r.test(rreq).expect("recv test").is_none() {
        clean = false;
        assert!(start.elapsed() < DEADLINE, "receive never completed");
        std::thread::sleep(SETTLE);
    }
    assert!(
        dst.mem[..len] == src.mem[..len],
        "{len}-byte payload differs"
    );
    (
        s.op_counters().since(&s0),
        r.op_counters().since(&r0),
        clean,
    )
}

/// Messages measured per test (and warmed up before): with 8 receive slots, and fewer control
/// writes in all than the control send queue holds, no control completion falls in the window.
const MESSAGES: u64 = 8;

/// Writes past the test harness's output capture, so the counts show in the VM log even when the
/// test passes.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Runs MESSAGES warmup then MESSAGES measured messages of `len` bytes; prints each one's counts
/// and checks the measured totals: posts and completions always, CQ polls when `exact_polls` and
/// every message settled cleanly.
fn check(test: &str, len: usize, want_send: Counts, want_recv: Counts, exact_polls: bool) {
    let (domain, mut s, mut r) = comm_pair(test, conn_params(8));
    let mut src = buf(&domain, pattern(5, len));
    let mut dst = buf(&domain, vec![0; len]);
    for _ in 0..MESSAGES {
        one_message(&mut s, &mut r, &mut src, &mut dst, len);
    }
    let (s0, r0) = (*s.op_counters(), *r.op_counters());
    let mut all_clean = true;
    for i in 0..MESSAGES {
        let (so, ro, clean) = one_message(&mut s, &mut r, &mut src, &mut dst, len);
        say(&format!(
            "OPCOUNTS {test} len={len} msg={i} clean={clean} send: {} | recv: {}",
            so.summary(),
            ro.summary()
        ));
        all_clean &= clean;
    }
    let (so, ro) = (s.op_counters().since(&s0), r.op_counters().since(&r0));
    say(&format!(
        "OPCOUNTS {test} len={len} total of {MESSAGES} clean={all_clean} send: {} | recv: {}",
        so.summary(),
        ro.summary()
    ));
    assert_eq!(
        so.rnr_errors + so.retry_errors + ro.rnr_errors + ro.retry_errors,
        0
    );
    let (sc, rc) = (counts(&so), counts(&ro));
    assert_eq!(
        (sc.0, sc.1, sc.2),
        (want_send.0, want_send.1, want_send.2),
        "{test}: send comm (send posts, recv posts, completions) over {MESSAGES} messages"
    );
    assert_eq!(
        (rc.0, rc.1, rc.2),
        (want_recv.0, want_recv.1, want_recv.2),
        "{test}: recv comm (send posts, recv posts, completions) over {MESSAGES} messages"
    );
    if exact_polls && all_clean {
        assert_eq!(sc.3, want_send.3, "{test}: send comm CQ polls");
        assert_eq!(rc.3, want_recv.3, "{test}: recv comm CQ polls");
    }
}

/// One segment (4 KiB < the 128 KiB segment size). Totals over MESSAGES = 8 messages.
///
/// BEFORE (announcement by signaled WRITE_WITH_IMM, control receive reposted per announcement,
/// two CQs polled per pass, two passes in isend and irecv), measured on rxe0: per message send
/// comm 1 + 1 posts, 2 completions, 6 polls; recv comm 1 + 1 posts, 2 completions, 6 polls:
/// (8, 8, 16, 48) and (8, 8, 16, 48) here. Protocol 3 (9-deep control send queue, every 4th
/// announcement signaled): recv comm (8, 8, 10, 9).
#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn one_segment_message_counts() {
    check(
        "one_segment_message_counts",
        4096,
        // send comm: the write, its completion, one poll (in test(); isend posts, reads the
        // FIFO in memory and polls nothing)
        (8, 0, 8, 8),
        // recv comm: the announcement (plain write) + 1 SRQ receive repost per message; the data
        // completion and one poll per message. The control QP's 129-deep send queue (every 64th
        // write signaled) is reaped only when 128 writes are in it: never in these 16 messages
        // (amortized 2 completions and 1 poll per 128 messages)
        (8, 8, 8, 8),
        true,
    );
}

/// 4 MiB = 32 segments of 128 KiB over 4 QPs x 4 outstanding (the window refills twice); the
/// polls depend on how completions batch up and are not checked. The receiver's 32 receives go
/// back into its SRQ in one chained post of 32 (counted as 32 receive posts), fewer than the 56
/// (credit_batch) that would need a credit word: the next announcement carries the credit.
///
/// BEFORE: send comm 32 + 1 posts, 33 completions; recv comm 1 + 32 posts, 33 completions per
/// message: (256, 8, 264) and (8, 256, 264) here.
#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn large_message_counts() {
    check(
        "large_message_counts",
        4 << 20,
        (32 * 8, 0, 32 * 8, 0),
        (8, 32 * 8, 32 * 8, 0),
        false,
    );
}

/// 16 MiB = 128 segments: the whole SRQ (4 QPs x 32 receives), so the sender's credit from the
/// announcement lasts exactly one message. The receiver reaps the 128 completions in one test()
/// (4 polls of 32, each batch reposted), then 128 >= 56 receives are unpublished and one credit
/// word goes out: 2 control writes per message (announcement + credit word); the 32 control
/// writes of the test never fill the control send queue, so none is reaped.
#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn whole_srq_message_counts() {
    check(
        "whole_srq_message_counts",
        16 << 20,
        (128 * 8, 0, 128 * 8, 0),
        (2 * 8, 128 * 8, 128 * 8, 0),
        false,
    );
}
