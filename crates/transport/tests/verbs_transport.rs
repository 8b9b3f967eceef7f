//! The verbs transport end to end on rxe0 in one process: bootstrap handshake over 127.0.0.1,
//! FIFO announcements on the control QP, engine segments as WRITE_WITH_IMM over 4 data QPs;
//! byte-exact messages, several in flight, and the NCCL usage errors (tag, size).
#![cfg(feature = "verbs")]

use dqplb_test_support::verbs::{
    buf, comm_pair as pair, conn_params as params, isend, pattern, wait_both, Buf, DEADLINE,
};
use dqplb_transport::{ErrorCode, UserBuf};
use std::time::Instant;

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn messages_arrive_byte_exact() {
    let (domain, mut s, mut r) = pair("messages_arrive_byte_exact", params(8));
    for (i, &len) in [0usize, 1, 4096, (1 << 20) + 1, (3 << 20) + 5]
        .iter()
        .enumerate()
    {
        let data = pattern(i as u32 + 11, len);
        let mut src = buf(&domain, data.clone());
        let mut dst = buf(&domain, vec![0xcc; len + 100]);
        let rreq = r
            .irecv(UserBuf::from_slice(&mut dst.mem), 3, Some(&dst.mr))
            .expect("irecv")
            .expect("slot free");
        let sreq = isend(&mut s, &mut r, &mut src, len, 3);
        let (ssize, rsize) = wait_both(&mut s, sreq, &mut r, rreq);
        assert_eq!((ssize, rsize), (len, len), "sizes for {len}");
        assert!(dst.mem[..len] == data[..], "payload of {len} bytes differs");
        assert!(
            dst.mem[len..].iter().all(|&b| b == 0xcc),
            "{len}-byte message overran"
        );
    }
    let segs: u64 = s.qp_stats().iter().map(|q| q.segments).sum();
    assert!(segs >= 8 + 25 + 3, "segments counted: {segs}");
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn eight_messages_in_flight_complete_in_order() {
    let (domain, mut s, mut r) = pair("eight_messages_in_flight", params(8));
    const LEN: usize = 300 << 10; // 3 segments each
    let mut srcs: Vec<Buf> = (0..8)
        .map(|i| buf(&domain, pattern(100 + i, LEN)))
        .collect();
    let mut dsts: Vec<Buf> = (0..8).map(|_| buf(&domain, vec![0; LEN])).collect();
    let rreqs: Vec<u32> = dsts
        .iter_mut()
        .map(|d| {
            r.irecv(UserBuf::from_slice(&mut d.mem), 9, Some(&d.mr))
                .expect("irecv")
                .expect("slot")
        })
        .collect();
    let sreqs: Vec<u32> = srcs
        .iter_mut()
        .map(|b| isend(&mut s, &mut r, b, LEN, 9))
        .collect();
    for (sreq, rreq) in sreqs.into_iter().zip(rreqs) {
        assert_eq!(wait_both(&mut s, sreq, &mut r, rreq), (LEN, LEN));
    }
    for (i, d) in dsts.iter().enumerate() {
        assert!(d.mem == srcs[i].mem, "message {i} differs");
    }
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn tag_and_size_mismatches_are_usage_errors() {
    let (domain, mut s, mut r) = pair("tag_and_size_mismatches", params(4));
    let mut src = buf(&domain, vec![1; 8192]);
    let mut dst = buf(&domain, vec![0; 4096]);
    let rreq = r
        .irecv(UserBuf::from_slice(&mut dst.mem), 5, Some(&dst.mr))
        .expect("irecv")
        .expect("slot");
    let start = Instant::now();
    let err = loop {
        match s.isend(UserBuf::from_slice(&mut src.mem), 5, Some(&src.mr)) {
            Ok(None) => {
                r.progress().expect("progress");
                assert!(start.elapsed() < DEADLINE, "announcement never arrived");
            }
            Ok(Some(_)) => panic!("8 KiB send into a 4 KiB receive was accepted"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.code, ErrorCode::InvalidUsage);
    assert!(
        err.msg.contains("exceeds the receive buffer of 4096"),
        "{}",
        err.msg
    );

    // a usage error leaves the comm usable: the announcement stays first in line
    let err = s
        .isend(UserBuf::from_slice(&mut src.mem[..64]), 8, Some(&src.mr))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidUsage);
    assert!(
        err.msg.contains("tag 8") && err.msg.contains("tag 5"),
        "{}",
        err.msg
    );
    // a matching send of 4 KiB goes through into the same announced receive
    let sreq = isend(&mut s, &mut r, &mut src, 4096, 5);
    assert_eq!(wait_both(&mut s, sreq, &mut r, rreq), (4096, 4096));
    assert!(dst.mem.iter().all(|&b| b == 1));
    // unregistered memory is refused up front
    let mut loose = vec![0u8; 16];
    let e = s
        .isend(UserBuf::from_slice(&mut loose), 8, None)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
}
