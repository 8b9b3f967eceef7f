//! Receiver-not-ready made impossible by the receive credit, on rxe0 in the VM: a
//! stalled receiver stops the sender at exactly its credit, a 50 ms receiver stall mid-stream draws
//! no RNR NAK (rxe's hw_counters), and the revert check: without the gate the same stall draws them.
#![cfg(feature = "verbs")]

use dqplb_engine::PolicyKind;
use dqplb_test_support::verbs::{buf, comm_pair, pattern, Buf, DEADLINE};
use dqplb_transport::tcp::ConnParams;
use dqplb_transport::verbs::{VerbsDomain, VerbsRecvComm, VerbsSendComm};
use dqplb_transport::UserBuf;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// rxe's counters are per device: the tests of this file must not overlap.
static SERIAL: Mutex<()> = Mutex::new(());

/// 2 QPs x 2 outstanding: an SRQ of 2 x 16 = 32 receives, so a few messages in flight already
/// hold more segments (8 per 256 KiB message) than the receiver has receives posted.
fn params() -> ConnParams {
    ConnParams {
        qps: 2,
        outstanding: 2,
        segment_bytes: 32 << 10,
        max_messages: 8,
        policy: PolicyKind::Dqplb,
        fabric_id: 0,
    }
}

const MSG: usize = 256 << 10;
const SEGMENTS_PER_MSG: u64 = (MSG / (32 << 10)) as u64;
const IN_FLIGHT: usize = 8;

fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Every RNR counter rxe exposes for `dev` (name -> value); fails when there is none, since the
/// test could then prove nothing.
fn rnr_counters(dev: &str) -> BTreeMap<String, u64> {
    let dir = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let e = e.expect("dir entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if name.contains("rnr") {
            let v = std::fs::read_to_string(e.path()).expect("counter");
            out.insert(name, v.trim().parse().expect("counter value"));
        }
    }
    for want in ["rcvd_rnr_err", "send_rnr_err"] {
        assert!(out.contains_key(want), "{dir} has no {want}: {out:?}");
    }
    out
}

/// Per-counter growth between two readings.
fn grown(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .collect()
}

fn dev_name(r: &VerbsRecvComm) -> String {
    r.qp_set().device().to_string()
}

/// Receiver stalls with IN_FLIGHT receives announced (more segments than its SRQ holds): the
/// sender is driven alone until its posts stop growing. Returns the sender's posts then; the
/// transfer is finished afterwards and checked byte for byte.
fn stall_until_sender_stops(
    s: &mut VerbsSendComm,
    r: &mut VerbsRecvComm,
    dom: &VerbsDomain,
) -> u64 {
    let mut dst: Vec<Buf> = (0..IN_FLIGHT).map(|_| buf(dom, vec![0; MSG])).collect();
    let mut src: Vec<Buf> = (0..IN_FLIGHT)
        .map(|k| buf(dom, pattern(100 + k as u32, MSG)))
        .collect();
    let rreqs: Vec<u32> = dst
        .iter_mut()
        .map(|d| {
            r.irecv(UserBuf::from_slice(&mut d.mem[..]), 1, Some(&d.mr))
                .expect("irecv")
                .expect("receive slot")
        })
        .collect();
    let start = Instant::now();
    let mut sreqs = Vec::new();
    for b in src.iter_mut() {
        loop {
            let ub = UserBuf::from_slice(&mut b.mem[..]);
            if let Some(q) = s.isend(ub, 1, Some(&b.mr)).expect("isend") {
                sreqs.push(q);
                break;
            }
            assert!(start.elapsed() < DEADLINE, "isend never accepted");
        }
    }
    // the receiver does nothing now: drive the sender until its posts settle
    let mut sdone = vec![false; sreqs.len()];
    let mut last = (s.op_counters().send_posts, Instant::now());
    while last.1.elapsed() < Duration::from_millis(1500) {
        for (i, &q) in sreqs.iter().enumerate() {
            if !sdone[i] {
                sdone[i] = s.test(q).expect("send test").is_some();
            }
        }
        let p = s.op_counters().send_posts;
        if p != last.0 {
            last = (p, Instant::now());
        }
        assert!(start.elapsed() < DEADLINE, "sender never settled");
        std::thread::sleep(Duration::from_millis(5));
    }
    let stalled_posts = last.0;
    say(&format!(
        "RNRTEST stalled: sender posts {stalled_posts}, {}, receiver srq {} batch {}",
        s.debug_state(),
        r.srq_depth(),
        r.credit_batch()
    ));
    // resume: everything completes, byte for byte
    let mut rdone = vec![false; rreqs.len()];
    while !(sdone.iter().all(|d| *d) && rdone.iter().all(|d| *d)) {
        for (i, &q) in sreqs.iter().enumerate() {
            if !sdone[i] {
                sdone[i] = s.test(q).expect("send test").is_some();
            }
        }
        for (i, &q) in rreqs.iter().enumerate() {
            if !rdone[i] {
                rdone[i] = match r.test(q).expect("recv test") {
                    Some(n) => {
                        assert_eq!(n, MSG);
                        true
                    }
                    None => false,
                };
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "transfer never finished: {} / {}",
            s.debug_state(),
            r.debug_state()
        );
    }
    for (k, d) in dst.iter().enumerate() {
        assert!(d.mem == src[k].mem, "message {k} differs");
    }
    stalled_posts
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn stalled_receiver_stops_the_sender_at_exactly_its_credit() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (domain, mut s, mut r) = comm_pair("credit_stop", params());
    let dev = dev_name(&r);
    let srq = u64::from(r.srq_depth());
    assert_eq!(srq, 32, "2 data QPs x 16 receives");
    assert!(
        IN_FLIGHT as u64 * SEGMENTS_PER_MSG > srq,
        "the stall must outlast the SRQ"
    );
    let before = rnr_counters(&dev);
    let posts = stall_until_sender_stops(&mut s, &mut r, &domain);
    let d = grown(&before, &rnr_counters(&dev));
    say(&format!(
        "RNRTEST credit stop: posts {posts} of srq {srq}, rnr growth {d:?}"
    ));
    // every receive the receiver had posted (its SRQ) and not one more
    assert_eq!(posts, srq);
    assert!(d.values().all(|v| *v == 0), "RNR counters grew: {d:?}");
    assert_eq!(
        s.op_counters().send_posts,
        IN_FLIGHT as u64 * SEGMENTS_PER_MSG
    );
    assert_eq!(s.op_counters().rnr_errors + r.op_counters().rnr_errors, 0);
}

/// The 50 ms stall of the issue: two threads stream `MESSAGES` messages with IN_FLIGHT in flight;
/// the receiver's thread sleeps 50 ms after message STALL_AT. Returns the RNR counters' growth.
fn fifty_ms_stall(gate: bool) -> BTreeMap<String, u64> {
    const MESSAGES: usize = 64;
    const STALL_AT: usize = 16;
    let (domain, mut s, mut r) = comm_pair("fifty_ms_stall", params());
    s.set_credit_gate(gate);
    let dev = dev_name(&r);
    let before = rnr_counters(&dev);
    let d2 = std::sync::Arc::clone(&domain);
    let sender = std::thread::spawn(move || {
        let mut bufs: Vec<Buf> = (0..IN_FLIGHT).map(|_| buf(&d2, vec![0; MSG])).collect();
        let mut inflight = std::collections::VecDeque::new();
        let start = Instant::now();
        for m in 0..MESSAGES {
            if inflight.len() == IN_FLIGHT {
                let q = inflight.pop_front().expect("in flight");
                while s.test(q).expect("send test").is_none() {
                    assert!(start.elapsed() < DEADLINE, "send {m}: {}", s.debug_state());
                }
            }
            let b = &mut bufs[m % IN_FLIGHT];
            b.mem.copy_from_slice(&pattern(m as u32, MSG));
            loop {
                let ub = UserBuf::from_slice(&mut b.mem[..]);
                if let Some(q) = s.isend(ub, 3, Some(&b.mr)).expect("isend") {
                    inflight.push_back(q);
                    break;
                }
                assert!(start.elapsed() < DEADLINE, "isend {m}: {}", s.debug_state());
            }
        }
        for q in inflight {
            while s.test(q).expect("send test").is_none() {
                assert!(start.elapsed() < DEADLINE, "{}", s.debug_state());
            }
        }
        s
    });
    let mut bufs: Vec<Buf> = (0..IN_FLIGHT).map(|_| buf(&domain, vec![0; MSG])).collect();
    let mut posted = std::collections::VecDeque::new();
    let start = Instant::now();
    let mut next = 0;
    for m in 0..MESSAGES {
        while next < MESSAGES && posted.len() < IN_FLIGHT {
            let b = &mut bufs[next % IN_FLIGHT];
            let ub = UserBuf::from_slice(&mut b.mem[..]);
            let q = r.irecv(ub, 3, Some(&b.mr)).expect("irecv").expect("slot");
            posted.push_back(q);
            next += 1;
        }
        let q = posted.pop_front().expect("posted");
        loop {
            if let Some(n) = r.test(q).expect("recv test") {
                assert_eq!(n, MSG);
                break;
            }
            assert!(start.elapsed() < DEADLINE, "recv {m}: {}", r.debug_state());
        }
        assert!(
            bufs[m % IN_FLIGHT].mem == pattern(m as u32, MSG),
            "message {m} differs"
        );
        if m == STALL_AT {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let s = sender.join().expect("sender thread");
    let d = grown(&before, &rnr_counters(&dev));
    say(&format!(
        "RNRTEST 50 ms stall (gate {gate}): rnr growth {d:?}; send {} | recv {}",
        s.op_counters().summary(),
        r.op_counters().summary()
    ));
    d
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn fifty_ms_receiver_stall_draws_no_rnr_nak() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = fifty_ms_stall(true);
    assert!(d.values().all(|v| *v == 0), "RNR counters grew: {d:?}");
}

/// Revert check: the same stalls with the credit gate off. The stall held until the sender stops
/// must draw RNR NAKs: the sender posts beyond the SRQ until a whole window of writes hangs in
/// RNR retries (no completion frees the window); the 50 ms stall's counters are reported. Both
/// transfers still complete (rnr_retry 7 retries forever).
#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn without_the_credit_gate_a_stall_draws_rnr_naks() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (domain, mut s, mut r) = comm_pair("no_gate", params());
    s.set_credit_gate(false);
    let dev = dev_name(&r);
    let before = rnr_counters(&dev);
    let posts = stall_until_sender_stops(&mut s, &mut r, &domain);
    let d = grown(&before, &rnr_counters(&dev));
    say(&format!("RNRTEST no gate: posts {posts}, rnr growth {d:?}"));
    let window = u64::from(params().qps) * u64::from(params().outstanding);
    assert_eq!(
        posts,
        u64::from(r.srq_depth()) + window,
        "the SRQ, then one stuck window"
    );
    assert!(d["rcvd_rnr_err"] > 0 && d["send_rnr_err"] > 0, "{d:?}");
    let d50 = fifty_ms_stall(false);
    say(&format!("RNRTEST no gate, 50 ms stall: rnr growth {d50:?}"));
}
