//! The verbs transport end to end on rxe0 in one process: bootstrap handshake over 127.0.0.1,
//! FIFO announcements on the control QP, engine segments as WRITE_WITH_IMM over 4 data QPs;
//! byte-exact messages, several in flight, and net_ib's matching (tags, oversized sends).
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

/// net_ib's isend rules (ncclIbIsend, 2.20.3-2.30.7): a send larger than the receive is cut to
/// the receive's size; a tag the next receive does not carry waits (NULL request), no error.
#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn oversized_sends_are_cut_and_other_tags_wait() {
    let (domain, mut s, mut r) = pair("oversized_and_other_tags", params(4));
    let mut src = buf(&domain, pattern(7, 8192));
    let mut dst = buf(&domain, vec![0xcc; 4096 + 64]);
    let rreq = r
        .irecv(UserBuf::from_slice(&mut dst.mem[..4096]), 5, Some(&dst.mr))
        .expect("irecv")
        .expect("slot");
    // another tag waits for a later receive, however often it is offered
    let start = Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(200) {
        let ub = UserBuf::from_slice(&mut src.mem[..64]);
        assert_eq!(s.isend(ub, 8, Some(&src.mr)).expect("isend tag 8"), None);
        r.progress().expect("progress");
    }
    let sreq = isend(&mut s, &mut r, &mut src, 8192, 5);
    assert_eq!(wait_both(&mut s, sreq, &mut r, rreq), (4096, 4096));
    assert!(dst.mem[..4096] == src.mem[..4096], "the cut send differs");
    assert!(
        dst.mem[4096..].iter().all(|&b| b == 0xcc),
        "wrote past the receive"
    );
    // unregistered memory is refused up front
    let mut loose = vec![0u8; 16];
    let e = s
        .isend(UserBuf::from_slice(&mut loose), 8, None)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
}

/// aws-ofi-nccl's "Grouped Recv Multi-Tag" over verbs: irecv(n=1, tag 8), irecv(n=8, tags 0-7),
/// sends offered as NCCL's proxy offers them (every pending one in turn, tag 0 first): each
/// lands byte-exact in the buffer of its tag.
#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn multi_tag_groups_match_sends_offered_in_proxy_order() {
    let (domain, mut s, mut r) = pair("multi_tag_groups", params(4));
    let len = |t: usize| 3000 + 1000 * t;
    let mut srcs: Vec<Buf> = (0..=8)
        .map(|t| buf(&domain, pattern(40 + t as u32, len(t))))
        .collect();
    let mut dsts: Vec<Buf> = (0..=8).map(|t| buf(&domain, vec![0xcc; len(t)])).collect();
    let (eight, one) = dsts.split_at_mut(8);
    let q1 = r
        .irecv_group(&[(UserBuf::from_slice(&mut one[0].mem), 8, Some(&one[0].mr))])
        .expect("irecv")
        .expect("slot");
    let bufs: Vec<_> = eight
        .iter_mut()
        .enumerate()
        .map(|(t, d)| (UserBuf::from_slice(&mut d.mem), t as i32, Some(&*d.mr)))
        .collect();
    let q8 = r.irecv_group(&bufs).expect("irecv 8").expect("slot");
    drop(bufs);
    let mut sreq: Vec<Option<u32>> = vec![None; 9];
    let mut sent = [None; 9];
    let (mut g1, mut g8) = (None, None);
    let start = Instant::now();
    while sent.iter().any(Option::is_none) || g1.is_none() || g8.is_none() {
        for t in 0..=8 {
            match sreq[t] {
                None => {
                    let ub = UserBuf::from_slice(&mut srcs[t].mem);
                    sreq[t] = s.isend(ub, t as i32, Some(&srcs[t].mr)).expect("isend");
                }
                Some(q) if sent[t].is_none() => sent[t] = s.test(q).expect("send test"),
                Some(_) => {}
            }
        }
        if g1.is_none() {
            g1 = r.test_sizes(q1).expect("recv test");
        }
        if g8.is_none() {
            g8 = r.test_sizes(q8).expect("recv test");
        }
        assert!(start.elapsed() < DEADLINE, "stalled: {sreq:?} {sent:?}");
    }
    assert_eq!(sent.map(Option::unwrap), std::array::from_fn(len));
    assert_eq!(&g1.unwrap()[..], &[len(8)]);
    assert_eq!(&g8.unwrap()[..], &(0..8).map(len).collect::<Vec<_>>()[..]);
    for t in 0..=8 {
        assert!(dsts[t].mem == srcs[t].mem, "tag {t} differs");
    }
}
