//! Tests of the sender's staged control reads against a scripted receiver: announcements split
//! at odd byte boundaries and more of them at once than one read takes are all matched in order.

use super::repath::StreamSetup;
use super::tests::params;
use super::wire::{
    buffer_id, encode_repath, Acks, Announce, SegHeader, ANNOUNCE_BYTES, SEG_HEADER_BYTES,
};
use super::*;
use crate::UserBuf;
use dqplb_engine::PolicyKind;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A connected loopback pair: (our end, the comm's end).
pub(super) fn stream_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let theirs = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (ours, _) = l.accept().unwrap();
    theirs.set_nonblocking(true).unwrap();
    theirs.set_nodelay(true).unwrap();
    ours.set_nodelay(true).unwrap();
    (ours, theirs)
}

/// A one-stream send comm with `p` whose receiver is our raw sockets: (comm, our control end,
/// our data end, non-blocking).
pub(super) fn scripted_send_comm(p: ConnParams) -> (TcpSendComm, TcpStream, TcpStream) {
    let (ctrl, ctrl_theirs) = stream_pair();
    let (data, data_theirs) = stream_pair();
    data.set_nonblocking(true).unwrap();
    let setup = StreamSetup {
        conn_id: 1,
        secret: [9; 16],
        params: p,
        opts: TcpOptions::default(),
        traffic_class: None,
    };
    let s = TcpSendComm::new(ctrl_theirs, vec![data_theirs], setup).unwrap();
    (s, ctrl, data)
}

/// A receiver's first control frames: its re-path port, then `n` single-buffer receives of
/// `capacity` bytes with tag 5 (slots 0..n).
pub(super) fn receiver_frames(n: u32, capacity: u64) -> Vec<u8> {
    let mut frames = encode_repath(1).to_vec();
    for slot in 0..n {
        let a = Announce {
            slot,
            tag: 5,
            index: 0,
            count: 1,
            capacity,
        };
        frames.extend_from_slice(&a.encode());
    }
    frames
}

/// Reads exactly `buf.len()` bytes from `sock` (non-blocking), moving the send comm meanwhile.
pub(super) fn read_driving(sock: &mut TcpStream, buf: &mut [u8], s: &mut TcpSendComm) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < buf.len() {
        assert!(
            Instant::now() < deadline,
            "the sender wrote {got} of {} bytes",
            buf.len()
        );
        match sock.read(&mut buf[got..]) {
            Ok(0) => panic!("the sender closed its data stream"),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => s.progress().unwrap(),
            Err(e) => panic!("data stream read: {e}"),
        }
    }
}

#[test]
fn announcements_split_and_in_bursts_are_all_matched_in_order() {
    const MSGS: u32 = 50;
    const LEN: usize = 16;
    let mut p = params(PolicyKind::Dqplb, 1);
    p.max_messages = 64;
    let (mut s, mut ctrl, mut data) = scripted_send_comm(p);
    // The receiver's frames: its re-path port, then one single-buffer receive per message
    // (50 frames, more than one control read takes).
    let frames = receiver_frames(MSGS, LEN as u64);
    // The first 11 frames dribble in 7 bytes at a time (frames split across reads), the rest
    // come in one write.
    let (dribble, burst) = frames.split_at(11 * ANNOUNCE_BYTES);
    for chunk in dribble.chunks(7) {
        ctrl.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(1));
        s.progress().unwrap();
    }
    ctrl.write_all(burst).unwrap();
    for k in 0..MSGS {
        let mut src: Vec<u8> = (0..LEN).map(|i| (k as usize * 31 + i) as u8).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        let q = loop {
            assert!(Instant::now() < deadline, "send {k} never matched");
            if let Some(q) = s.isend(UserBuf::from_slice(&mut src), 5).unwrap() {
                break q;
            }
        };
        let mut hdr = [0u8; SEG_HEADER_BYTES];
        read_driving(&mut data, &mut hdr, &mut s);
        let seg = SegHeader::decode(&hdr).unwrap();
        assert_eq!(
            seg.slot,
            buffer_id(k, 0),
            "send {k} went to the wrong receive"
        );
        assert_eq!((seg.offset, seg.len), (0, LEN as u32));
        let mut payload = [0u8; LEN];
        read_driving(&mut data, &mut payload, &mut s);
        assert_eq!(&payload[..], &src[..], "send {k} arrived changed");
        let ack = Acks {
            stream: 0,
            gen: 0,
            count: 1,
            last: seg.imm,
        };
        ctrl.write_all(&ack.encode()).unwrap();
        let done = loop {
            assert!(Instant::now() < deadline, "send {k} never completed");
            if let Some(n) = s.test(q).unwrap() {
                break n;
            }
        };
        assert_eq!(done, LEN);
    }
}
