//! In-process tests of the TCP transport: one thread drives both ends over loopback, every policy,
//! byte-exact data, receive buffers larger than sends, failure when the peer goes away.

use super::*;
use crate::engine::PolicyKind;
use crate::transport::{ErrorCode, UserBuf};

fn params(policy: PolicyKind, qps: u16) -> ConnParams {
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

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed ^ (i >> 8) as u8)
        })
        .collect()
}

/// Sends every size (receive buffers `extra` bytes larger) with up to 8 requests in flight.
fn transfer(s: &mut TcpSendComm, r: &mut TcpRecvComm, sizes: &[usize], extra: usize) {
    let mut src: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u8))
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
    }
    for (i, n) in sizes.iter().enumerate() {
        assert!(
            dst[i][..*n] == src[i][..],
            "message {i} ({n} bytes) differs"
        );
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
    for policy in [
        PolicyKind::Dqplb,
        PolicyKind::StaticSplit,
        PolicyKind::RoundRobinMessage,
        PolicyKind::SingleQp,
    ] {
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

#[test]
fn send_larger_than_posted_receive_is_invalid_usage() {
    let (mut s, mut r) = pair(params(PolicyKind::Dqplb, 2));
    let mut small = vec![0u8; 10];
    let mut big = vec![1u8; 11];
    r.irecv(UserBuf::from_slice(&mut small), 1)
        .unwrap()
        .unwrap();
    let mut err = None;
    for _ in 0..1_000_000 {
        match s.isend(UserBuf::from_slice(&mut big), 1) {
            Ok(None) => {
                r.progress().unwrap();
            }
            Ok(Some(_)) => panic!("oversized send accepted"),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let e = err.expect("isend never saw the announcement");
    assert_eq!(e.code, ErrorCode::InvalidUsage);
    assert!(
        e.msg.contains("11 bytes") && e.msg.contains("10 bytes"),
        "{e}"
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
