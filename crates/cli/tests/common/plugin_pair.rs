//! A connected send/receive comm pair through the plugin's Rust API on one device, and one
//! byte-checked message through it: shared by the statistics-file, depth-rule and verbs plugin tests.

use dqplb_transport::UserBuf;
use nccl_net_dqplb::plugin;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);

/// listen, then connect and accept until both sides exist (neither call blocks).
pub(crate) fn pair(dev: i32) -> (plugin::SendComm, plugin::RecvComm) {
    let mut handle = [0u8; 128];
    let mut listen = plugin::listen(dev, &mut handle).expect("listen");
    let (mut send, mut recv) = (None, None);
    let start = Instant::now();
    while send.is_none() || recv.is_none() {
        if send.is_none() {
            send = plugin::connect(dev, &mut handle).expect("connect");
        }
        if recv.is_none() {
            recv = listen.accept().expect("accept");
        }
        assert!(start.elapsed() < DEADLINE, "handshake timed out");
    }
    (send.unwrap(), recv.unwrap())
}

/// One message of `len` bytes (tag 1); returns once both sides report all of it, byte-exact.
pub(crate) fn one_message(send: &mut plugin::SendComm, recv: &mut plugin::RecvComm, len: usize) {
    let mut src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; len];
    let rreq = recv
        .irecv(&[(UserBuf::from_slice(&mut dst), 1)], &[None])
        .unwrap()
        .unwrap();
    let start = Instant::now();
    let sreq = loop {
        if let Some(r) = send.isend(UserBuf::from_slice(&mut src), 1, None).unwrap() {
            break r;
        }
        recv.test(rreq).unwrap();
        assert!(start.elapsed() < DEADLINE, "isend never accepted");
    };
    let (mut sd, mut rd) = (None, None);
    while sd.is_none() || rd.is_none() {
        if sd.is_none() {
            sd = send.test(sreq).unwrap();
        }
        if rd.is_none() {
            rd = recv.test(rreq).unwrap();
        }
        assert!(start.elapsed() < DEADLINE, "message never completed");
    }
    assert_eq!((sd, rd), (Some(len), Some(len)));
    assert!(dst == src, "payload differs");
}
