//! In-process tests of the TCP transport: one thread drives both ends over loopback, every policy,
//! byte-exact data, receive buffers larger than sends, failure when the peer goes away.

use super::*;
use crate::slots::MAX_RECVS;
use crate::{ErrorCode, UserBuf};
use dqplb_engine::PolicyKind;
use std::time::Duration;

pub(super) fn params(policy: PolicyKind, qps: u16) -> ConnParams {
    ConnParams {
        qps,
        outstanding: 4,
        segment_bytes: 4096,
        max_messages: 32,
        policy,
        fabric_id: 0,
    }
}

fn pair(p: ConnParams) -> (TcpSendComm, TcpRecvComm) {
    let opts = TcpOptions {
        nodelay: true,
        ..Default::default()
    };
    let mut l = TcpListenComm::bind("127.0.0.1".parse().unwrap(), 0, opts.clone()).unwrap();
    let mut c = TcpConnector::start(l.handle(), p, None, &opts).unwrap();
    connect(&mut l, &mut c)
}

/// Drives both ends of a connection until the connector and the listener have their comms.
pub(super) fn connect(l: &mut TcpListenComm, c: &mut TcpConnector) -> (TcpSendComm, TcpRecvComm) {
    let (mut s, mut r) = (None, None);
    for _ in 0..100_000 {
        if s.is_none() {
            s = c.progress().unwrap();
        }
        if r.is_none() {
            r = l.accept().unwrap();
        }
        match (s, r) {
            (Some(s), Some(r)) => return (s, r),
            (a, b) => (s, r) = (a, b),
        }
        std::thread::yield_now();
    }
    panic!("connect/accept did not complete");
}

/// Byte `off` of message `msg`: a mix (splitmix64) of the message index and the absolute offset,
/// so no stretch of any message repeats (a segment placed at the wrong offset, even a whole
/// multiple of the segments in flight away, is caught) and no two messages agree (a segment
/// or message delivered into the wrong buffer is caught).
fn pattern_byte(msg: usize, off: usize) -> u8 {
    let mut x = (msg as u64)
        .wrapping_mul(0xD1B5_4A32_D192_ED03)
        .wrapping_add((off / 8) as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> (8 * (off % 8))) as u8
}

/// The `n` bytes of message `msg` (see `pattern_byte`).
fn pattern(n: usize, msg: usize) -> Vec<u8> {
    (0..n).map(|off| pattern_byte(msg, off)).collect()
}

/// Asserts that `got[..want.len()]` is `want`, naming the first differing offset.
fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    if let Some(at) = (0..want.len()).find(|&o| got[o] != want[o]) {
        panic!(
            "{what} ({} bytes) differs first at offset {at}: {:#04x}, expected {:#04x}",
            want.len(),
            got[at],
            want[at]
        );
    }
}

/// Sends every size (receive buffers `extra` bytes larger) with up to 8 requests in flight.
/// `transfer` for other test modules of the transport.
pub(super) fn transfer_sizes(s: &mut TcpSendComm, r: &mut TcpRecvComm, sizes: &[usize]) {
    transfer(s, r, sizes, 0);
}

fn transfer(s: &mut TcpSendComm, r: &mut TcpRecvComm, sizes: &[usize], extra: usize) {
    transfer_with_fault(s, r, sizes, extra, usize::MAX, |_, _| {});
}

/// As `transfer`, calling `fault` once when `fault_after` receives have completed.
fn transfer_with_fault(
    s: &mut TcpSendComm,
    r: &mut TcpRecvComm,
    sizes: &[usize],
    extra: usize,
    fault_after: usize,
    mut fault: impl FnMut(&mut TcpSendComm, &mut TcpRecvComm),
) {
    let mut faulted = false;
    let mut src: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i))
        .collect();
    let mut dst: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0xEE; n + extra]).collect();
    let (mut posted_r, mut posted_s) = (0, 0);
    let mut rreq: Vec<Option<u32>> = vec![None; sizes.len()];
    let mut sreq: Vec<Option<u32>> = vec![None; sizes.len()];
    let (mut done_r, mut done_s) = (0, 0);
    let mut spins = 0u64;
    while done_r < sizes.len() || done_s < sizes.len() {
        spins += 1;
        assert!(
            spins < 50_000_000,
            "transfer stalled: sent {done_s}, received {done_r}"
        );
        if posted_r < sizes.len() && posted_r - done_r < 8 {
            let b = UserBuf::from_slice(&mut dst[posted_r]);
            if let Some(q) = r.irecv(b, 7).unwrap() {
                rreq[posted_r] = Some(q);
                posted_r += 1;
            }
        }
        if posted_s < sizes.len() && posted_s - done_s < 8 {
            let b = UserBuf::from_slice(&mut src[posted_s]);
            if let Some(q) = s.isend(b, 7).unwrap() {
                sreq[posted_s] = Some(q);
                posted_s += 1;
            }
        }
        if done_s < posted_s {
            if let Some(n) = s.test(sreq[done_s].unwrap()).unwrap() {
                assert_eq!(n, sizes[done_s]);
                done_s += 1;
            }
        }
        if done_r < posted_r {
            if let Some(n) = r.test(rreq[done_r].unwrap()).unwrap() {
                assert_eq!(n, sizes[done_r], "received size of message {done_r}");
                done_r += 1;
            }
        }
        if !faulted && done_r >= fault_after {
            faulted = true;
            fault(s, r);
        }
    }
    for (i, n) in sizes.iter().enumerate() {
        assert_bytes(&dst[i], &src[i], &format!("message {i}"));
        assert!(
            dst[i][*n..].iter().all(|b| *b == 0xEE),
            "bytes past message {i} were touched"
        );
    }
}

const SIZES: &[usize] = &[
    0,
    1,
    3,
    7,
    127,
    128,
    129,
    4095,
    4096,
    65537,
    1 << 20 | 1,
    300_000,
];

#[test]
fn every_policy_moves_bytes_exactly() {
    for policy in PolicyKind::ALL {
        let (mut s, mut r) = pair(params(policy, 4));
        transfer(&mut s, &mut r, SIZES, 0);
        transfer(&mut s, &mut r, SIZES, 1000);
    }
}

#[test]
fn dqplb_spreads_segments_over_all_qps() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 4));
    transfer(&mut s, &mut r, &[1 << 20; 4], 0);
    let per_qp: Vec<u64> = s.qp_stats().iter().map(|q| q.segments).collect();
    assert_eq!(per_qp.iter().sum::<u64>(), 4 * 256, "{per_qp:?}");
    assert!(per_qp.iter().all(|n| *n > 0), "{per_qp:?}");
}

/// A send larger than the receive posted for it is cut to the receive's size, as net_ib's isend
/// does (2.20.3-2.30.7): both sides report the posted size, nothing past it is written.
#[test]
fn send_larger_than_posted_receive_is_cut_to_it() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let mut small = vec![0xEEu8; 10 * 1024 + 3];
    let mut big = pattern(64 * 1024, 5);
    let posted = 10 * 1024 - 1;
    let rreq = r
        .irecv(UserBuf::from_slice(&mut small[..posted]), 1)
        .unwrap()
        .unwrap();
    let sreq = isend_once(&mut s, &mut r, UserBuf::from_slice(&mut big), 1)
        .unwrap()
        .expect("the oversized send is accepted");
    let (mut sent, mut got) = (None, None);
    for _ in 0..2_000_000 {
        if sent.is_none() {
            sent = s.test(sreq).unwrap();
        }
        if got.is_none() {
            got = r.test(rreq).unwrap();
        }
        if sent.is_some() && got.is_some() {
            break;
        }
    }
    assert_eq!((sent, got), (Some(posted), Some(posted)));
    assert_bytes(&small, &big[..posted], "the cut send");
    assert!(
        small[posted..].iter().all(|&b| b == 0xEE),
        "wrote past the receive"
    );
}

#[test]
fn closed_peer_fails_pending_receive_with_remote_error() {
    let (s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let mut buf = vec![0u8; 1 << 16];
    let q = r.irecv(UserBuf::from_slice(&mut buf), 0).unwrap().unwrap();
    drop(s);
    let mut got = None;
    for _ in 0..1_000_000 {
        match r.test(q) {
            Ok(None) => std::thread::yield_now(),
            Ok(Some(_)) => panic!("receive completed without a sender"),
            Err(e) => {
                got = Some(e);
                break;
            }
        }
    }
    let e = got.expect("receiver never noticed the closed peer");
    assert_eq!(e.code, ErrorCode::RemoteError);
    assert!(
        e.msg.contains("127.0.0.1") && (e.msg.contains("closed") || e.msg.contains("reset")),
        "{e}"
    );
}

#[test]
fn wrong_secret_is_dropped_and_listener_keeps_serving() {
    use std::io::Write;
    let opts = TcpOptions::default();
    let mut l = TcpListenComm::bind("127.0.0.1".parse().unwrap(), 0, opts.clone()).unwrap();
    let mut bad = *l.handle();
    bad.secret = [0x55; 16];
    let mut evil = TcpConnector::start(&bad, params(PolicyKind::Dqplb, 1), None, &opts).unwrap();
    let mut junk = std::net::TcpStream::connect(l.handle().addr).unwrap();
    junk.write_all(&[0x42; 100]).unwrap();
    let mut good =
        TcpConnector::start(l.handle(), params(PolicyKind::Dqplb, 1), None, &opts).unwrap();
    let (mut s, mut r, mut evil_done) = (None, None, false);
    for _ in 0..200_000 {
        if !evil_done {
            evil_done = evil.progress().unwrap().is_some();
        }
        if s.is_none() {
            s = good.progress().unwrap();
        }
        if r.is_none() {
            r = l.accept().unwrap();
        }
        if s.is_some() && r.is_some() && evil_done {
            break;
        }
    }
    let (mut s, mut r) = (s.expect("good connect"), r.expect("good accept"));
    transfer(&mut s, &mut r, &[5000], 0);
    for _ in 0..1000 {
        assert!(
            l.accept().unwrap().is_none(),
            "a connection with the wrong secret was accepted"
        );
    }
}

#[test]
fn every_stream_gets_the_keepalive_settings() {
    let opts = TcpOptions::default();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (server, _) = l.accept().unwrap();
    for s in [&client, &server] {
        opts.apply(s).unwrap();
        let r = socket2::SockRef::from(s);
        // getsockopt(SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT)
        assert!(r.keepalive().unwrap());
        assert_eq!(r.keepalive_time().unwrap(), Duration::from_secs(20));
        assert_eq!(r.keepalive_interval().unwrap(), Duration::from_secs(5));
        assert_eq!(r.keepalive_retries().unwrap(), 6);
    }
    // About 50 s from the last byte to the error, instead of 12-15 minutes.
    assert_eq!(
        KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT,
        Duration::from_secs(50)
    );
}

/// Byte `off` of buffer `k` of group `g`: `pattern_byte` of the buffer's index in the run.
fn grouped_byte(g: usize, k: usize, off: usize) -> u8 {
    pattern_byte(g * MAX_RECVS + k, off)
}

/// One grouped receive: per buffer the send size, receive capacity and tag, and the order in
/// which the sender posts its isends (a permutation of the buffers).
struct Spec {
    sizes: Vec<usize>,
    caps: Vec<usize>,
    tags: Vec<i32>,
    order: Vec<usize>,
}

/// Moves every group byte-exact with up to `window` receive groups in flight; the sender posts
/// each group's sends in its permuted order, the receiver checks one size per buffer.
fn grouped_transfer(s: &mut TcpSendComm, r: &mut TcpRecvComm, specs: &[Spec], window: usize) {
    let mut src: Vec<Vec<Vec<u8>>> = specs
        .iter()
        .enumerate()
        .map(|(g, sp)| {
            sp.sizes
                .iter()
                .enumerate()
                .map(|(k, &n)| (0..n).map(|o| grouped_byte(g, k, o)).collect())
                .collect()
        })
        .collect();
    let mut dst: Vec<Vec<Vec<u8>>> = specs
        .iter()
        .map(|sp| sp.caps.iter().map(|&c| vec![0xEE; c]).collect())
        .collect();
    // The sender's isends, flattened in posting order: (group, buffer).
    let sends: Vec<(usize, usize)> = specs
        .iter()
        .enumerate()
        .flat_map(|(g, sp)| sp.order.iter().map(move |&k| (g, k)))
        .collect();
    let mut rreq = vec![None; specs.len()];
    let mut sreq = vec![None; sends.len()];
    let (mut posted_r, mut done_r, mut posted_s, mut done_s) = (0, 0, 0, 0);
    let mut spins = 0u64;
    while done_r < specs.len() || done_s < sends.len() {
        spins += 1;
        assert!(
            spins < 20_000_000,
            "grouped transfer stalled: {done_s}/{} sends, {done_r}/{} groups",
            sends.len(),
            specs.len()
        );
        if posted_r < specs.len() && posted_r - done_r < window {
            let sp = &specs[posted_r];
            let bufs: Vec<(UserBuf, i32)> = dst[posted_r]
                .iter_mut()
                .zip(&sp.tags)
                .map(|(d, &t)| (UserBuf::from_slice(d), t))
                .collect();
            if let Some(q) = r.irecv_group(&bufs).unwrap() {
                rreq[posted_r] = Some(q);
                posted_r += 1;
            }
        }
        if posted_s < sends.len() {
            let (g, k) = sends[posted_s];
            let b = UserBuf::from_slice(&mut src[g][k]);
            if let Some(q) = s.isend(b, specs[g].tags[k]).unwrap() {
                sreq[posted_s] = Some(q);
                posted_s += 1;
            }
        }
        if done_s < posted_s {
            if let Some(n) = s.test(sreq[done_s].unwrap()).unwrap() {
                let (g, k) = sends[done_s];
                assert_eq!(n, specs[g].sizes[k], "send size of group {g} buffer {k}");
                done_s += 1;
            }
        }
        if done_r < posted_r {
            if let Some(sizes) = r.test_sizes(rreq[done_r].unwrap()).unwrap() {
                assert_eq!(
                    &sizes[..],
                    &specs[done_r].sizes[..],
                    "received sizes of group {done_r}"
                );
                done_r += 1;
            }
        }
    }
    for (g, sp) in specs.iter().enumerate() {
        for (k, &n) in sp.sizes.iter().enumerate() {
            let d = &dst[g][k];
            if let Some(o) = (0..n).find(|&o| d[o] != grouped_byte(g, k, o)) {
                panic!("group {g} buffer {k} ({n} bytes) differs first at offset {o}");
            }
            assert!(
                d[n..].iter().all(|b| *b == 0xEE),
                "bytes past the {n} received into group {g} buffer {k} were touched"
            );
        }
    }
}

/// Group `g` of `n` buffers: sizes from a mix including 0 and segment-crossing lengths, tags
/// 10 + k, capacities a little larger for odd buffers, sends posted in a rotated, reversed order.
fn spec(g: usize, n: usize) -> Spec {
    const MIX: [usize; 9] = [0, 1, 127, 4096, 4097, 65537, 0, 300_000, 129];
    let sizes: Vec<usize> = (0..n).map(|k| MIX[(g + 3 * k) % MIX.len()]).collect();
    let caps = sizes
        .iter()
        .enumerate()
        .map(|(k, &s)| s + if k % 2 == 1 { 1000 } else { 0 })
        .collect();
    let mut order: Vec<usize> = (0..n).rev().collect();
    order.rotate_left(g % n);
    Spec {
        sizes,
        caps,
        tags: (0..n as i32).map(|k| 10 + k).collect(),
        order,
    }
}

#[test]
fn grouped_receives_of_one_to_eight_buffers_are_byte_exact() {
    for policy in [PolicyKind::Dqplb, PolicyKind::RoundRobinMessage] {
        let (mut s, mut r) = pair(params(policy, 3));
        assert_eq!(s.max_requests(), 32 * MAX_RECVS);
        assert_eq!(r.max_requests(), 32);
        for n in 1..=MAX_RECVS {
            let specs: Vec<Spec> = (0..6).map(|g| spec(g + n, n)).collect();
            grouped_transfer(&mut s, &mut r, &specs, 2);
        }
    }
}

#[test]
fn groups_of_zero_byte_buffers_complete() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let specs: Vec<Spec> = (1..=MAX_RECVS)
        .map(|n| Spec {
            sizes: vec![0; n],
            caps: (0..n).map(|k| if k == 0 { 64 } else { 0 }).collect(),
            tags: (0..n as i32).collect(),
            order: (0..n).collect(),
        })
        .collect();
    grouped_transfer(&mut s, &mut r, &specs, 4);
}

#[test]
fn many_groups_in_flight_fill_every_request() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 4));
    // 32 groups of 8 in flight: 256 send requests, the full send-side capacity.
    let specs: Vec<Spec> = (0..96)
        .map(|g| {
            let n = MAX_RECVS - g % 3;
            let mut sp = spec(g, n);
            sp.sizes.iter_mut().for_each(|x| *x %= 20_000);
            sp.caps = sp.sizes.iter().map(|x| x + 7).collect();
            sp
        })
        .collect();
    grouped_transfer(&mut s, &mut r, &specs, 32);
}

/// Posts one group and keeps both ends moving until the sender's isend answers (Some or Err).
fn isend_once(
    s: &mut TcpSendComm,
    r: &mut TcpRecvComm,
    buf: UserBuf,
    tag: i32,
) -> crate::NetResult<Option<u32>> {
    for _ in 0..1_000_000 {
        match s.isend(buf, tag) {
            Ok(None) => r.progress().unwrap(),
            other => return other,
        }
    }
    panic!("isend never saw the announcement");
}

/// Posts one grouped receive of `a` (tag 1) and `b` (tag 2).
fn post_tags_1_2(r: &mut TcpRecvComm, a: &mut [u8], b: &mut [u8]) {
    r.irecv_group(&[(UserBuf::from_slice(a), 1), (UserBuf::from_slice(b), 2)])
        .unwrap()
        .unwrap();
}

/// A tag absent from the next group, or whose buffers there are taken, is no error: the send
/// waits (NULL request) for a later group, as net_ib's isend answers (2.20.3-2.30.7).
#[test]
fn send_tag_absent_from_the_next_group_waits() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let (mut a, mut b) = (vec![0u8; 100], vec![0u8; 100]);
    post_tags_1_2(&mut r, &mut a, &mut b);
    let mut x = vec![1u8; 10];
    let first = isend_once(&mut s, &mut r, UserBuf::from_slice(&mut x), 1).unwrap();
    assert!(first.is_some());
    let mut y = vec![2u8; 10];
    for tag in [1, 3] {
        for _ in 0..1000 {
            assert_eq!(s.isend(UserBuf::from_slice(&mut y), tag).unwrap(), None);
            r.progress().unwrap();
        }
    }
}

/// The sends of one round (one per tag) offered as NCCL's proxy offers them: every pending send
/// in turn, again and again, a NULL request leaving it pending. Returns each send's size from
/// test() and each group's sizes, once all have completed.
fn offer_round_robin(
    s: &mut TcpSendComm,
    r: &mut TcpRecvComm,
    sends: &mut [(i32, Vec<u8>)],
    groups: &[u32],
) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut sreq: Vec<Option<u32>> = vec![None; sends.len()];
    let mut sent = vec![usize::MAX; sends.len()];
    let mut got: Vec<Option<Vec<usize>>> = vec![None; groups.len()];
    let mut spins = 0u64;
    while sent.contains(&usize::MAX) || got.iter().any(|g| g.is_none()) {
        spins += 1;
        assert!(spins < 5_000_000, "stalled: {sreq:?} {sent:?} {got:?}");
        for (k, (tag, data)) in sends.iter_mut().enumerate() {
            match sreq[k] {
                None => sreq[k] = s.isend(UserBuf::from_slice(data), *tag).unwrap(),
                Some(q) if sent[k] == usize::MAX => {
                    if let Some(n) = s.test(q).unwrap() {
                        sent[k] = n;
                    }
                }
                Some(_) => {}
            }
        }
        for (g, &q) in groups.iter().enumerate() {
            if got[g].is_none() {
                got[g] = r.test_sizes(q).unwrap().map(|v| v.to_vec());
            }
        }
    }
    (sent, got.into_iter().map(Option::unwrap).collect())
}

/// aws-ofi-nccl's "Grouped Recv Multi-Tag": irecv(n=1, tag 8) then irecv(n=8, tags 0-7), the
/// sender offering tags 0, 1, .., 8 in that order: tag 0 meets the head group {8} first and must
/// wait, not fail; every byte lands in the buffer of its tag.
#[test]
fn multi_tag_groups_match_sends_offered_in_proxy_order() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 4));
    let len = |tag: i32| 3000 + 1000 * tag as usize;
    let mut one = vec![0xEEu8; len(8)];
    let mut eight: Vec<Vec<u8>> = (0..8).map(|t| vec![0xEE; len(t)]).collect();
    let q1 = r
        .irecv_group(&[(UserBuf::from_slice(&mut one), 8)])
        .unwrap()
        .unwrap();
    let bufs: Vec<(UserBuf, i32)> = eight
        .iter_mut()
        .enumerate()
        .map(|(t, b)| (UserBuf::from_slice(b), t as i32))
        .collect();
    let q8 = r.irecv_group(&bufs).unwrap().unwrap();
    let mut sends: Vec<(i32, Vec<u8>)> =
        (0..=8).map(|t| (t, pattern(len(t), t as usize))).collect();
    let (sent, got) = offer_round_robin(&mut s, &mut r, &mut sends, &[q1, q8]);
    assert_eq!(sent, (0..=8).map(len).collect::<Vec<_>>());
    assert_eq!(got[0], vec![len(8)]);
    assert_eq!(got[1], (0..8).map(len).collect::<Vec<_>>());
    assert_bytes(&one, &sends[8].1, "tag 8");
    for t in 0..8 {
        assert_bytes(&eight[t], &sends[t].1, &format!("tag {t}"));
    }
}

/// An oversized send in a group is cut to its buffer and the rest of the group is unaffected.
#[test]
fn send_larger_than_its_group_buffer_is_cut_to_it() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let (mut a, mut b) = (vec![0xEEu8; 30], vec![0xEEu8; 24]);
    let q = r
        .irecv_group(&[
            (UserBuf::from_slice(&mut a), 1),
            (UserBuf::from_slice(&mut b[..20]), 2),
        ])
        .unwrap()
        .unwrap();
    let mut sends = vec![(2, pattern(21, 2)), (1, pattern(30, 1))];
    let (sent, got) = offer_round_robin(&mut s, &mut r, &mut sends, &[q]);
    assert_eq!((sent, got), (vec![20, 30], vec![vec![30, 20]]));
    assert_bytes(&a, &sends[1].1, "tag 1");
    assert_bytes(&b, &sends[0].1[..20], "tag 2");
    assert_eq!(&b[20..], &[0xEE; 4], "wrote past the buffer");
}

#[test]
fn irecv_group_size_is_checked() {
    let (_s, mut r) = pair(params(PolicyKind::Dqplb, 1));
    assert_eq!(
        r.irecv_group(&[]).unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    let mut v: Vec<Vec<u8>> = (0..9).map(|_| vec![0u8; 4]).collect();
    let nine: Vec<(UserBuf, i32)> = v.iter_mut().map(|b| (UserBuf::from_slice(b), 0)).collect();
    let e = r.irecv_group(&nine).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.msg.contains("1..=8"), "{e}");
}

/// Runs `f` until it answers with something other than Ok(None) (bounded).
fn until<T>(what: &str, mut f: impl FnMut() -> crate::NetResult<Option<T>>) -> crate::NetResult<T> {
    for _ in 0..2_000_000 {
        match f() {
            Ok(None) => std::thread::yield_now(),
            Ok(Some(v)) => return Ok(v),
            Err(e) => return Err(e),
        }
    }
    panic!("{what}: no answer");
}

/// aws-ofi-nccl's inflight_close: the receiver posts 32 receives and closes its comm. Every
/// isend matching one of them is still accepted; test() then reports ncclRemoteError; an isend
/// beyond them fails at once with ncclRemoteError. Nothing hangs.
#[test]
fn receiver_closing_with_posted_receives_fails_their_sends_in_test_not_isend() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let mut dst: Vec<Vec<u8>> = (0..32).map(|_| vec![0u8; 8192]).collect();
    for d in dst.iter_mut() {
        until("irecv", || r.irecv(UserBuf::from_slice(d), 5)).unwrap();
    }
    drop(r);
    let mut src: Vec<Vec<u8>> = (0..32).map(|i| pattern(8192, i)).collect();
    let mut reqs = Vec::new();
    for (i, b) in src.iter_mut().enumerate() {
        let q = until("isend", || s.isend(UserBuf::from_slice(b), 5))
            .unwrap_or_else(|e| panic!("isend {i} of an announced receive failed: {e}"));
        reqs.push(q);
    }
    for (i, &q) in reqs.iter().enumerate() {
        let e = until("send test", || s.test(q)).expect_err("send completed without a receiver");
        assert_eq!(e.code, ErrorCode::RemoteError, "send {i}: {e}");
    }
    let mut extra = vec![0u8; 10];
    let e = until("isend", || s.isend(UserBuf::from_slice(&mut extra), 5)).unwrap_err();
    assert_eq!(e.code, ErrorCode::RemoteError, "{e}");
}

/// Grouped variant: a group of 3 announced, the receiver closes; the three sends are accepted,
/// each test() says ncclRemoteError.
#[test]
fn receiver_closing_with_a_posted_group_accepts_its_sends() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let mut dst: Vec<Vec<u8>> = (0..3).map(|_| vec![0u8; 1000]).collect();
    let bufs: Vec<(UserBuf, i32)> = dst
        .iter_mut()
        .enumerate()
        .map(|(k, d)| (UserBuf::from_slice(d), k as i32))
        .collect();
    r.irecv_group(&bufs).unwrap().unwrap();
    r.progress().unwrap();
    drop(r);
    let mut src: Vec<Vec<u8>> = (0..3).map(|k| pattern(1000, k)).collect();
    let mut reqs = Vec::new();
    for (k, b) in src.iter_mut().enumerate().rev() {
        reqs.push(until("isend", || s.isend(UserBuf::from_slice(b), k as i32)).unwrap());
    }
    for q in reqs {
        let e = until("send test", || s.test(q)).unwrap_err();
        assert_eq!(e.code, ErrorCode::RemoteError, "{e}");
    }
}

/// Posts a receive into each of `dst` and a send of each of `src` (tag 1): their requests.
fn post_all(
    s: &mut TcpSendComm,
    r: &mut TcpRecvComm,
    dst: &mut [Vec<u8>],
    src: &mut [Vec<u8>],
) -> (Vec<u32>, Vec<u32>) {
    let mut rq = Vec::new();
    for d in dst.iter_mut() {
        rq.push(until("irecv", || r.irecv(UserBuf::from_slice(d), 1)).unwrap());
    }
    let mut sq = Vec::new();
    for b in src.iter_mut() {
        sq.push(until("isend", || s.isend(UserBuf::from_slice(b), 1)).unwrap());
    }
    (rq, sq)
}

/// Sends that completed before the receiver closed still test as done afterwards.
#[test]
fn sends_completed_before_the_close_still_report_done() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let mut dst: Vec<Vec<u8>> = (0..3).map(|_| vec![0u8; 5000]).collect();
    let mut src: Vec<Vec<u8>> = (0..2).map(|i| pattern(5000, i)).collect();
    let (rq, sq) = post_all(&mut s, &mut r, &mut dst, &mut src);
    // Both ends progress (no test) until the receiver has both messages and the sender their
    // acknowledgements.
    for _ in 0..200_000 {
        r.progress().unwrap();
        s.progress().unwrap();
    }
    assert_eq!(until("recv test", || r.test(rq[0])).unwrap(), 5000);
    assert_bytes(&dst[0], &src[0], "message 0");
    drop(r);
    for q in sq {
        assert_eq!(until("send test", || s.test(q)).unwrap(), 5000);
    }
}

/// Receives that completed before the sender closed still test as done; the one still pending
/// reports ncclRemoteError, and so does a new irecv.
#[test]
fn receives_completed_before_the_close_still_report_done() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let mut dst: Vec<Vec<u8>> = (0..3).map(|_| vec![0u8; 5000]).collect();
    let mut src: Vec<Vec<u8>> = (0..2).map(|i| pattern(5000, i)).collect();
    let (rq, sq) = post_all(&mut s, &mut r, &mut dst, &mut src);
    for q in sq {
        assert_eq!(
            until("send test", || {
                r.progress().unwrap();
                s.test(q)
            })
            .unwrap(),
            5000
        );
    }
    drop(s);
    for _ in 0..10_000 {
        // The close reaches the receiver; completed receives stay reportable.
        if r.progress().is_err() {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(until("recv test", || r.test(rq[0])).unwrap(), 5000);
    assert_eq!(until("recv test", || r.test(rq[1])).unwrap(), 5000);
    assert_bytes(&dst[0], &src[0], "message 0");
    assert_bytes(&dst[1], &src[1], "message 1");
    let e = until("recv test", || r.test(rq[2])).unwrap_err();
    assert_eq!(e.code, ErrorCode::RemoteError, "{e}");
    let mut more = vec![0u8; 10];
    let e = until("irecv", || r.irecv(UserBuf::from_slice(&mut more), 1)).unwrap_err();
    assert_eq!(e.code, ErrorCode::RemoteError, "{e}");
}

/// Either side closing in the middle of an 8 MiB transfer: the other side's test() reports
/// ncclRemoteError within the bound, never hangs or crashes.
#[test]
fn close_in_the_middle_of_a_transfer_fails_the_other_side() {
    for receiver_closes in [true, false] {
        let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 4));
        let mut dst = vec![0u8; 8 << 20];
        let mut src = pattern(8 << 20, 0);
        let rq = until("irecv", || r.irecv(UserBuf::from_slice(&mut dst), 2)).unwrap();
        let sq = until("isend", || {
            r.progress().unwrap();
            s.isend(UserBuf::from_slice(&mut src), 2)
        })
        .unwrap();
        for _ in 0..50 {
            s.progress().unwrap();
            r.progress().unwrap();
        }
        let e = if receiver_closes {
            drop(r);
            until("send test", || s.test(sq)).unwrap_err()
        } else {
            drop(s);
            until("recv test", || r.test(rq)).unwrap_err()
        };
        assert_eq!(e.code, ErrorCode::RemoteError, "{e}");
    }
}

/// Resets the TCP connection behind `fd` (RST to the peer, as a failing middlebox or NIC would)
/// and leaves `fd` naming a fresh unconnected socket, so its owner sees the failure on its next
/// read or write instead of a closed descriptor.
fn reset_stream(fd: std::os::fd::RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: plain socket calls on a descriptor the comm owns; dup2 replaces it atomically, and
    // with linger 0 the old socket's last close sends RST.
    unsafe {
        assert_eq!(
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                &linger as *const libc::linger as *const libc::c_void,
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            ),
            0
        );
        let fresh = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
        assert!(fresh >= 0);
        assert_eq!(libc::dup2(fresh, fd), fd);
        libc::close(fresh);
    }
}

/// One of four data streams reset mid-transfer (issue 17, path-failure isolation): the sender
/// sends that stream's segments in flight again on the other three, the receiver places every
/// sequence number once (a second copy of one that had landed is read and dropped), and all 48
/// messages arrive byte-exact; the stream's QP shows the failure, the others the resends, and
/// the stream is re-created from a new source port through the receiver's re-path listener and
/// carries segments again.
#[test]
fn a_reset_stream_mid_transfer_is_survived_byte_exact() {
    let sizes = vec![(256 << 10) + 129; 48];
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 4));
    let mut segs_at_fault = 0;
    let port_before = s.data_stream_addrs()[2].0.port();
    let (mut in_flight, mut unread) = (0, 0);
    transfer_with_fault(&mut s, &mut r, &sizes, 0, 6, |s, r| {
        // Only the sender moves until stream 2 got new segments the receiver has not read:
        // the reset destroys them with the receiver's end of the stream. The receiver's acks
        // held back by its last pass go out first (NCCL would call it again).
        r.debug_flush_held();
        let s0 = s.qp_stats()[2].segments;
        for _ in 0..1_000_000 {
            if s.qp_stats()[2].segments > s0 {
                break;
            }
            s.progress().unwrap();
        }
        unread = s.qp_stats()[2].segments - s0;
        in_flight = u64::from(s.qp_stats()[2].outstanding);
        reset_stream(r.data_stream_fds()[2]);
        segs_at_fault = s.qp_stats()[2].segments;
    });
    assert!(
        unread > 0,
        "stream 2 never got a segment during the fault window"
    );
    let st = s.qp_stats();
    assert_eq!(st[2].failures, 1, "{st:?}");
    assert_eq!(st[2].outstanding, 0);
    assert_eq!((s.repaths(), r.repaths()), (1, 1), "{st:?}");
    assert!(
        st[2].segments > segs_at_fault,
        "the new stream 2 carried nothing: {st:?}"
    );
    let port_after = s.data_stream_addrs()[2].0.port();
    assert_ne!(
        port_before, port_after,
        "the replacement reused the source port"
    );
    // The segments the receiver never read went out again on the other streams; older ones in
    // flight too unless their acknowledgement was already on its way back.
    let resent: u64 = st.iter().map(|q| q.resent).sum();
    assert!(
        (unread..=in_flight).contains(&resent),
        "resent {resent}, unread {unread}, in flight {in_flight}: {st:?}"
    );
    assert_eq!(st[0].failures + st[1].failures + st[3].failures, 0);
}

/// Every data stream reset and the receiver gone: the comm fails with ncclRemoteError naming
/// the first failure and that every stream failed.
#[test]
fn resetting_every_stream_fails_the_comm() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let mut dst = vec![0u8; 4 << 20];
    let mut src = pattern(4 << 20, 0);
    let _rq = until("irecv", || r.irecv(UserBuf::from_slice(&mut dst), 2)).unwrap();
    let sq = until("isend", || {
        r.progress().unwrap();
        s.isend(UserBuf::from_slice(&mut src), 2)
    })
    .unwrap();
    for _ in 0..20 {
        s.progress().unwrap();
        r.progress().unwrap();
    }
    for fd in r.data_stream_fds() {
        reset_stream(fd);
    }
    // The receiver goes with them (a dead host): no replacement stream can be made.
    drop(r);
    let e = until("send test", || s.test(sq)).unwrap_err();
    assert_eq!(e.code, ErrorCode::RemoteError, "{e}");
    assert!(e.msg.contains("every one of the 2 data streams to"), "{e}");
    assert!(e.msg.starts_with("data stream "), "{e}");
}

/// The straggler path end to end on loopback: the receiver reads stream 2 (QP 1) only every 8th
/// pass, the rule (ratio 4 over 8 completions, budget 8, no cool-down) drains it, and it is replaced by a new stream from a new source port (read every
/// pass) while 48 messages go through byte-exact; the other QPs, whose latencies are all alike,
/// are never taken for stragglers, and the re-hash the engine counts is the stream both ends
/// swapped.
#[test]
fn straggler_rehash_replaces_streams_byte_exact() {
    let sizes = vec![(256 << 10) + 7; 48];
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 4));
    r.debug_slow_stream(1, 8);
    let before = s.data_stream_addrs()[1].0;
    // Ratio 4 over 8 completions: QP 1 is ~8x slower every time; a busy machine that stalls this
    // thread during a few of another QP's completions must not make that QP a straggler.
    s.set_rehash_rule(dqplb_engine::RehashRule {
        ratio: 4.0,
        window: 8,
        cooldown: 0,
        budget: 8,
        budget_period: u64::MAX,
    })
    .unwrap();
    transfer(&mut s, &mut r, &sizes, 0);
    // Let replacements still in progress land before counting.
    for _ in 0..10_000 {
        s.progress().unwrap();
        r.progress().unwrap();
    }
    let per_qp: Vec<u64> = s.qp_stats().iter().map(|q| q.rehashes).collect();
    assert_eq!(per_qp, vec![0, 1, 0, 0], "{:?}", s.qp_stats());
    assert_eq!((s.repaths(), r.repaths()), (1, 1));
    assert_ne!(
        s.data_stream_addrs()[1].0,
        before,
        "QP 1 kept its source port"
    );
}

/// A blackholed stream (no reset, no error: the receiver simply stops reading it) mid-transfer:
/// after the stall timeout (200 ms here) the sender treats it as failed, resends its segments on
/// the other streams and re-creates it; 32 messages arrive byte-exact.
#[test]
fn a_blackholed_stream_is_failed_by_the_stall_timeout() {
    let sizes = vec![(256 << 10) + 5; 32];
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 4));
    s.set_stall_timeout_ms(200);
    transfer_with_fault(&mut s, &mut r, &sizes, 0, 4, |_, r| {
        r.debug_blackhole_stream(1)
    });
    for _ in 0..10_000 {
        s.progress().unwrap();
        r.progress().unwrap();
    }
    let st = s.qp_stats();
    assert_eq!(st[1].failures, 1, "{st:?}");
    assert_eq!((s.repaths(), r.repaths()), (1, 1), "{st:?}");
    assert_eq!(st.iter().map(|q| q.failures).sum::<u64>(), 1);
}

/// A stream stops part-way through a segment (blackholed), the sender gives it up as stalled
/// and resends the segment on the other stream, that copy completes the receive, and only then
/// does the rest of the stale copy arrive: it must be dropped (its receive may already be back
/// with NCCL), not placed and not taken for a protocol error.
#[test]
fn a_stale_copy_finishing_after_its_resend_is_dropped() {
    let mut p = params(PolicyKind::Dqplb, 2);
    p.segment_bytes = 1 << 20;
    let (mut s, mut r) = pair(p);
    s.set_stall_timeout_ms(100);
    r.debug_hold_replacements(true);
    r.debug_blackhole_mid_segment(1);
    let n = 16;
    let size = (4 << 20) + 3;
    let mut src: Vec<Vec<u8>> = (0..n).map(|i| pattern(size, i)).collect();
    let mut dst: Vec<Vec<u8>> = (0..n).map(|_| vec![0xEE; size]).collect();
    let (mut rreq, mut sreq) = (vec![None; n], vec![None; n]);
    let (mut posted_r, mut posted_s, mut done_r, mut done_s) = (0, 0, 0, 0);
    let mut stopped_in: Option<usize> = None;
    let mut reopened = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while done_r < n || done_s < n {
        assert!(
            std::time::Instant::now() < deadline,
            "stalled: sent {done_s}, received {done_r}, stopped in {stopped_in:?}"
        );
        if posted_r < n && posted_r - done_r < 8 {
            if let Some(q) = r.irecv(UserBuf::from_slice(&mut dst[posted_r]), 0).unwrap() {
                rreq[posted_r] = Some(q);
                posted_r += 1;
            }
        }
        if posted_s < n && posted_s - done_s < 8 {
            if let Some(q) = s.isend(UserBuf::from_slice(&mut src[posted_s]), 0).unwrap() {
                sreq[posted_s] = Some(q);
                posted_s += 1;
            }
        }
        if done_s < posted_s && s.test(sreq[done_s].unwrap()).unwrap().is_some() {
            done_s += 1;
        }
        if done_r < posted_r && r.test(rreq[done_r].unwrap()).unwrap().is_some() {
            done_r += 1;
        }
        if stopped_in.is_none() {
            if let Some(slot) = r.debug_stopped_in_slot(1) {
                // Receive requests are handed out in posting order: find the message.
                stopped_in = rreq.iter().position(|q| *q == Some(slot));
                assert!(stopped_in.is_some(), "slot {slot} is not a posted receive");
            }
        }
        // The stale copy's receive completed through the resend: now let the rest arrive.
        if let (Some(m), false) = (stopped_in, reopened) {
            if done_r > m {
                assert_eq!(s.qp_stats()[1].failures, 1);
                r.debug_reopen_stream(1);
                for _ in 0..200 {
                    r.progress().unwrap();
                }
                reopened = true;
                r.debug_hold_replacements(false);
            }
        }
    }
    for i in 0..n {
        assert_bytes(&dst[i], &src[i], &format!("message {i}"));
    }
    assert!(reopened, "the stale copy never got its turn");
    assert_eq!(s.qp_stats()[1].failures, 1);
    assert!(
        r.duplicates() >= 1,
        "the stale copy was not dropped as a duplicate"
    );
}

/// Parameters whose segments are large enough for the helper threads (workers::MIN_CHUNK_BYTES).
fn helper_params(qps: u16) -> ConnParams {
    ConnParams {
        segment_bytes: 128 << 10,
        ..params(PolicyKind::Dqplb, qps)
    }
}

fn helper_pair(qps: u16, threads: u32) -> (TcpSendComm, TcpRecvComm) {
    let (mut s, mut r) = pair(helper_params(qps));
    let plan = workers::ThreadPlan {
        threads,
        streams_per_thread: 1,
    };
    s.set_thread_plan(plan);
    r.set_thread_plan(plan);
    (s, r)
}

/// Helper threads start with the first segment of at least 64 KiB (not before, not for small
/// ones), move every byte in place (odd sizes, segments cut anywhere, small segments written
/// by the calling thread between helper ones) and are gone once the comms are dropped.
#[test]
fn helper_threads_start_lazily_and_move_bytes_exactly() {
    let (mut s, mut r) = helper_pair(4, 2);
    transfer(&mut s, &mut r, &[0, 1, 4095, 65535], 0);
    assert_eq!((s.helper_threads(), r.helper_threads()), (0, 0));
    let sizes = [
        (4 << 20) + 1,
        1 << 20,
        65536,
        (128 << 10) + 65535,
        3,
        (1 << 20) + 7,
    ];
    transfer(&mut s, &mut r, &sizes, 16);
    assert_eq!((s.helper_threads(), r.helper_threads()), (2, 2));
    let names = || -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
            .filter(|n| n.starts_with("dqplb-tx") || n.starts_with("dqplb-rx"))
            .collect()
    };
    assert!(names().len() >= 4, "{:?}", names());
    drop(s);
    drop(r);
    // Other tests' comms may run helpers meanwhile; this pair's were joined by the drops above
    // (Pool::drop), which the workers module's own tests check by joining.
}

/// With NCCL_SOCKET_NTHREADS=0 semantics (threads 0) the calling thread moves everything.
#[test]
fn zero_helper_threads_keep_every_stream_on_the_calling_thread() {
    let (mut s, mut r) = helper_pair(2, 0);
    transfer(&mut s, &mut r, &[(2 << 20) + 3, 1 << 20], 0);
    assert_eq!((s.helper_threads(), r.helper_threads()), (0, 0));
}

/// A stream reset under a helper thread mid-transfer: the helper reports the failure, lets go of
/// the stream, the engine resends on the other streams and every message arrives byte-exact.
#[test]
fn a_reset_stream_under_a_helper_is_survived_byte_exact() {
    let sizes = vec![(1 << 20) + 129; 24];
    let (mut s, mut r) = helper_pair(4, 2);
    transfer_with_fault(&mut s, &mut r, &sizes, 0, 4, |s, r| {
        let s0 = s.qp_stats()[2].segments;
        for _ in 0..1_000_000 {
            if s.qp_stats()[2].segments > s0 {
                break;
            }
            s.progress().unwrap();
        }
        reset_stream(r.data_stream_fds()[2]);
    });
    assert_eq!((s.helper_threads(), r.helper_threads()), (2, 2));
    let st = s.qp_stats();
    assert_eq!(st[2].failures, 1, "{st:?}");
    assert_eq!(st[0].failures + st[1].failures + st[3].failures, 0);
    // What was resent depends on what stream 2 still had unacknowledged at the reset (possibly
    // nothing): the messages' bytes, checked by `transfer_with_fault`, are what must hold.
    let resent: u64 = st.iter().map(|q| q.resent).sum();
    assert!(
        resent <= 4,
        "more resent than one stream's outstanding: {st:?}"
    );
}

/// Acknowledgements that arrive before the sender sees its helper finish the segment they name
/// (the helper publishes 3 ms late) are kept and taken once it does, even though the socket has
/// nothing new by then: no stream stalls (stall timeout 500 ms), none is replaced, bytes exact.
#[test]
fn acks_ahead_of_a_helpers_completion_are_not_lost() {
    let (mut s, mut r) = helper_pair(2, 2);
    s.set_stall_timeout_ms(500);
    s.debug_helper_delay(3000);
    let sizes = vec![(1 << 20) + 5; 16];
    transfer(&mut s, &mut r, &sizes, 0);
    let st = s.qp_stats();
    assert_eq!(st.iter().map(|q| q.failures).sum::<u64>(), 0, "{st:?}");
    assert_eq!((s.repaths(), r.repaths()), (0, 0), "{st:?}");
}
