//! RDMA_WRITE_WITH_IMM between loopback-connected QP sets: immediates intact (network order), data
//! byte-exact for 0 / 1 / 4096 / 1 MiB+1 bytes, 32 writes in flight, data QPs on one shared SRQ.
#![cfg(feature = "verbs")]

use dqplb_test_support::verbs::{assert_quiet, loopback, pattern, require_device, wait_for, Side};
use dqplb_transport::verbs::{QpRole, QpSetConfig, QpState, RegisteredBuffer, WcOpcode};
use std::collections::BTreeSet;

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn write_with_imm_sizes_are_byte_exact() {
    let dev = require_device("write_with_imm_sizes_are_byte_exact");
    let lb = loopback(&dev, QpSetConfig::default());
    assert_eq!(lb.a.control().state().expect("state"), QpState::Rts);
    let max = (1 << 20) + 1;
    let mut src = RegisteredBuffer::new(&lb.pd, max).expect("src");
    let mut dst = RegisteredBuffer::new(&lb.pd, max).expect("dst");
    // immediates chosen so a byte-order slip would show: asymmetric bytes, top bit set
    let cases: [(usize, u32); 4] = [
        (0, 0x8000_0001),
        (1, 0x0012_3456),
        (4096, 0x81ab_cdef),
        ((1 << 20) + 1, 0x00ff_fffe),
    ];
    for (round, &(len, imm)) in cases.iter().enumerate() {
        let qp = round % lb.a.n_data();
        let data = pattern(round as u32 + 1, len);
        src.write(0, &data).expect("fill src");
        dst.fill(0xee);
        lb.b.data(qp)
            .expect("qp")
            .post_recv(500 + round as u64)
            .expect("post recv");
        lb.a.data(qp)
            .expect("qp")
            .post_write(
                100 + round as u64,
                src.mr().local(0, len).expect("local"),
                dst.mr().remote(0).expect("remote"),
                Some(imm),
                true,
            )
            .expect("post write");

        let sent = wait_for(&lb.a, Side::Send, 1);
        lb.a.check(&sent[0]).expect("send completion ok");
        assert_eq!(sent[0].wr_id, 100 + round as u64);
        assert_eq!(sent[0].opcode, WcOpcode::RdmaWrite);
        assert_eq!(lb.a.role_of(sent[0].qp_num), Some(QpRole::Data(qp)));

        let got = wait_for(&lb.b, Side::Recv, 1);
        let wc = got[0];
        lb.b.check(&wc).expect("recv completion ok");
        assert_eq!(wc.wr_id, 500 + round as u64);
        assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!(wc.imm, Some(imm), "immediate for {len} bytes");
        assert_eq!(wc.byte_len as usize, len);
        assert_eq!(lb.b.role_of(wc.qp_num), Some(QpRole::Data(qp)));

        let mut back = vec![0u8; max];
        dst.read(0, &mut back).expect("read dst");
        assert!(back[..len] == data[..], "payload of {len} bytes differs");
        assert!(
            back[len..].iter().all(|&b| b == 0xee),
            "write of {len} bytes overran"
        );
    }
    assert_quiet(&lb.a, Side::Send);
    assert_quiet(&lb.b, Side::Recv);
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn thirty_two_writes_in_flight_over_four_qps() {
    let dev = require_device("thirty_two_writes_in_flight_over_four_qps");
    let cfg = QpSetConfig {
        n_data: 4,
        send_depth: 16,
        recv_depth: 16,
        srq_depth: 0,
    };
    let lb = loopback(&dev, cfg);
    const N: usize = 32;
    const SEG: usize = 4096;
    let mut src = RegisteredBuffer::new(&lb.pd, N * SEG).expect("src");
    let dst = RegisteredBuffer::new(&lb.pd, N * SEG).expect("dst");
    let data = pattern(77, N * SEG);
    src.write(0, &data).expect("fill");
    for q in 0..4 {
        for k in 0..N / 4 {
            lb.b.data(q)
                .expect("qp")
                .post_recv((q * 100 + k) as u64)
                .expect("recv");
        }
    }
    // all 32 posted before any completion is polled: 8 outstanding per QP
    for seq in 0..N {
        let q = seq % 4;
        let imm = seq as u32 | if seq == N - 1 { 1 << 31 } else { 0 };
        lb.a.data(q)
            .expect("qp")
            .post_write(
                seq as u64,
                src.mr().local(seq * SEG, SEG).expect("local"),
                dst.mr().remote(seq * SEG).expect("remote"),
                Some(imm),
                true,
            )
            .expect("post");
    }
    let sent = wait_for(&lb.a, Side::Send, N);
    let mut send_ids = BTreeSet::new();
    for wc in &sent {
        lb.a.check(wc).expect("send ok");
        assert_eq!(
            lb.a.role_of(wc.qp_num),
            Some(QpRole::Data(wc.wr_id as usize % 4))
        );
        send_ids.insert(wc.wr_id);
    }
    assert_eq!(send_ids, (0..N as u64).collect());

    let recvd = wait_for(&lb.b, Side::Recv, N);
    let mut seqs = BTreeSet::new();
    for wc in &recvd {
        lb.b.check(wc).expect("recv ok");
        let imm = wc.imm.expect("immediate present");
        let seq = (imm & 0x00ff_ffff) as usize;
        assert_eq!(
            imm >> 31 == 1,
            seq == N - 1,
            "last flag only on the last segment"
        );
        assert_eq!(wc.byte_len as usize, SEG);
        assert_eq!(lb.b.role_of(wc.qp_num), Some(QpRole::Data(seq % 4)));
        assert!(seqs.insert(seq), "sequence {seq} delivered twice");
    }
    assert_eq!(seqs, (0..N).collect());
    let mut back = vec![0u8; N * SEG];
    dst.read(0, &mut back).expect("read");
    assert!(back == data, "destination differs from source");
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn control_qp_carries_plain_writes() {
    let dev = require_device("control_qp_carries_plain_writes");
    let lb = loopback(&dev, QpSetConfig::default());
    let mut src = RegisteredBuffer::new(&lb.pd, 64).expect("src");
    let dst = RegisteredBuffer::new(&lb.pd, 4096).expect("dst");
    src.write(0, b"fifo entry: addr rkey size tag")
        .expect("fill");
    // a plain RDMA write (no immediate) consumes no receive and raises no receive completion
    lb.a.control()
        .post_write(
            9,
            src.mr().local(0, 30).expect("local"),
            dst.mr().remote(128).expect("remote"),
            None,
            true,
        )
        .expect("post");
    let sent = wait_for(&lb.a, Side::Send, 1);
    lb.a.check(&sent[0]).expect("ok");
    assert_eq!(lb.a.role_of(sent[0].qp_num), Some(QpRole::Control));
    let mut back = [0u8; 30];
    dst.read(128, &mut back).expect("read");
    assert_eq!(&back, b"fifo entry: addr rkey size tag");
    assert_quiet(&lb.b, Side::Recv);
}

/// The receiver's data QPs draw from one shared receive queue: 40 receives posted once (chained
/// posts of up to 32), then 40 writes of which QP 0 takes 25 (far beyond a quarter) all land; a
/// QP on the SRQ refuses receives of its own.
#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn data_qps_share_one_receive_queue() {
    let dev = require_device("data_qps_share_one_receive_queue");
    let cfg = QpSetConfig {
        n_data: 4,
        send_depth: 32,
        recv_depth: 1,
        srq_depth: 40,
    };
    let lb = loopback(&dev, cfg);
    let srq = lb.b.srq().expect("srq");
    assert_eq!(srq.depth(), 40);
    assert!(lb.b.data(1).expect("qp").post_recv(1).is_err());
    srq.post_zero_len(40).expect("40 receives");
    const N: usize = 40;
    const SEG: usize = 1024;
    let mut src = RegisteredBuffer::new(&lb.pd, N * SEG).expect("src");
    let dst = RegisteredBuffer::new(&lb.pd, N * SEG).expect("dst");
    let data = pattern(9, N * SEG);
    src.write(0, &data).expect("fill");
    let qp_of = |seq: usize| if seq < 25 { 0 } else { seq % 4 };
    for seq in 0..N {
        lb.a.data(qp_of(seq))
            .expect("qp")
            .post_write(
                seq as u64,
                src.mr().local(seq * SEG, SEG).expect("local"),
                dst.mr().remote(seq * SEG).expect("remote"),
                Some(seq as u32),
                seq % 8 == 7 || seq == N - 1,
            )
            .expect("post");
        if seq % 8 == 7 {
            // keep each send queue within its depth: reap the signaled write
            lb.a.check(&wait_for(&lb.a, Side::Send, 1)[0])
                .expect("send ok");
        }
    }
    let recvd = wait_for(&lb.b, Side::Recv, N);
    let mut seqs = BTreeSet::new();
    for wc in &recvd {
        lb.b.check(wc).expect("recv ok");
        let seq = wc.imm.expect("immediate") as usize;
        assert_eq!(lb.b.role_of(wc.qp_num), Some(QpRole::Data(qp_of(seq))));
        assert!(seqs.insert(seq), "sequence {seq} delivered twice");
    }
    assert_eq!(seqs, (0..N).collect());
    let mut back = vec![0u8; N * SEG];
    dst.read(0, &mut back).expect("read dst");
    assert!(back == data, "payload differs");
    assert_quiet(&lb.b, Side::Recv);
}
