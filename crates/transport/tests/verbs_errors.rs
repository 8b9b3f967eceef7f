//! Error paths on real verbs: a write with a wrong rkey completes with a remote access error that
//! names device, QP and status; a QP forced to ERR flushes its receives; bad ranges are refused.
#![cfg(feature = "verbs")]

use dqplb_test_support::verbs::{loopback, require_device, wait_for, Side};
use dqplb_transport::verbs::{QpSetConfig, QpState, RegisteredBuffer, RemoteSlice, VerbsError};

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn wrong_rkey_gives_remote_access_error() {
    let dev = require_device("wrong_rkey_gives_remote_access_error");
    let lb = loopback(&dev, QpSetConfig::default());
    let src = RegisteredBuffer::new(&lb.pd, 4096).expect("src");
    let dst = RegisteredBuffer::new(&lb.pd, 4096).expect("dst");
    let good = dst.mr().remote(0).expect("remote");
    let bad = RemoteSlice {
        addr: good.addr,
        rkey: good.rkey ^ 0x00ff_ff00,
    };
    lb.b.data(2).expect("qp").post_recv(1).expect("recv");
    let qp = lb.a.data(2).expect("qp");
    qp.post_write(
        42,
        src.mr().local(0, 4096).expect("local"),
        bad,
        Some(7),
        true,
    )
    .expect("post");
    let wc = wait_for(&lb.a, Side::Send, 1)[0];
    assert!(!wc.is_success());
    assert_eq!(wc.wr_id, 42);
    assert_eq!(wc.qp_num, qp.qpn());
    let err = lb.a.check(&wc).unwrap_err();
    match &err {
        VerbsError::Completion {
            device,
            qpn,
            status_str,
            ..
        } => {
            assert_eq!(device, &dev.name);
            assert_eq!(*qpn, qp.qpn());
            assert_eq!(status_str, "remote access error");
        }
        other => panic!("expected a completion error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&dev.name) && text.contains(&format!("QP {}", qp.qpn())),
        "{text}"
    );
    eprintln!("mapped error: {text}");
    // the requester QP is now in the error state
    assert_eq!(qp.state().expect("state"), QpState::Error);
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn forced_error_state_flushes_receives() {
    let dev = require_device("forced_error_state_flushes_receives");
    let lb = loopback(&dev, QpSetConfig::default());
    let qp = lb.b.data(1).expect("qp");
    for id in 10..15 {
        qp.post_recv(id).expect("recv");
    }
    qp.set_error().expect("to ERR");
    assert_eq!(qp.state().expect("state"), QpState::Error);
    let flushed = wait_for(&lb.b, Side::Recv, 5);
    let mut ids: Vec<u64> = flushed.iter().map(|w| w.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![10, 11, 12, 13, 14]);
    for wc in &flushed {
        assert!(wc.is_flush(), "{wc:?}");
        assert_eq!(wc.qp_num, qp.qpn());
        let text = lb.b.check(wc).unwrap_err().to_string();
        assert!(text.contains("Flush"), "{text}");
    }
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn out_of_range_slices_are_refused() {
    let dev = require_device("out_of_range_slices_are_refused");
    let lb = loopback(&dev, QpSetConfig::default());
    let mut buf = RegisteredBuffer::new(&lb.pd, 100).expect("buf");
    assert!(buf.mr().local(90, 11).is_err());
    assert!(buf.mr().local(usize::MAX, 2).is_err());
    assert!(buf.mr().remote(101).is_err());
    assert!(buf.write(99, &[1, 2]).is_err());
    assert!(buf.read(0, &mut [0u8; 101]).is_err());
    assert!(lb.a.data(4).is_err(), "only 4 data QPs exist");
    assert!(RegisteredBuffer::new(&lb.pd, 0).is_err());
}
