//! Tests of acknowledgements on the control stream against scripted peers: one frame per data
//! stream and pass, held for one pass after a completion, and the sender's checks of each frame.

use super::recv::Auth;
use super::stage_tests::{read_driving, receiver_frames, scripted_send_comm, stream_pair};
use super::tests::params;
use super::wire::{buffer_id, Acks, Control, SegHeader, ANNOUNCE_BYTES, SEG_HEADER_BYTES};
use super::*;
use crate::{ErrorCode, UserBuf};
use dqplb_engine::{imm, PolicyKind};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};

const LEN: usize = 16;

/// Every whole control frame the comm has written so far (our end is non-blocking).
fn frames(ctrl: &mut TcpStream) -> Vec<Control> {
    let mut bytes = Vec::new();
    let mut b = [0u8; 1024];
    loop {
        match ctrl.read(&mut b) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("control stream read: {e}"),
        }
    }
    assert_eq!(bytes.len() % ANNOUNCE_BYTES, 0, "a torn control frame");
    bytes
        .chunks(ANNOUNCE_BYTES)
        .map(|c| Control::decode(c.try_into().unwrap()).unwrap())
        .collect()
}

/// An ack frame for data stream 0, socket `gen`: `count` segments ending at message `last_seq`.
fn acks(gen: u16, count: u16, last_seq: u32) -> Acks {
    Acks {
        stream: 0,
        gen,
        count,
        last: imm::encode(last_seq, true),
    }
}

fn ack(count: u16, last_seq: u32) -> Control {
    Control::Acks(acks(0, count, last_seq))
}

/// A one-stream receive comm whose sender is our two raw sockets (control, data).
fn recv_comm() -> (TcpRecvComm, TcpStream, TcpStream) {
    let (ctrl, ctrl_theirs) = stream_pair();
    let (data, data_theirs) = stream_pair();
    ctrl.set_nonblocking(true).unwrap();
    let auth = Auth {
        conn_id: 1,
        secret: [9; 16],
    };
    let p = params(PolicyKind::Dqplb, 1);
    let r = TcpRecvComm::new(
        ctrl_theirs,
        vec![data_theirs],
        p,
        auth,
        TcpOptions::default(),
    )
    .unwrap();
    (r, ctrl, data)
}

/// Writes message `seq` (one segment, LEN bytes of value `seq`) for posted receive `slot`.
fn send_segment(data: &mut TcpStream, seq: u32, slot: u32) {
    let h = SegHeader {
        imm: imm::encode(seq, true),
        slot: buffer_id(slot, 0),
        offset: 0,
        len: LEN as u32,
    };
    data.write_all(&h.encode()).unwrap();
    data.write_all(&[seq as u8; LEN]).unwrap();
}

#[test]
fn a_pass_acks_each_stream_in_one_frame_and_holds_it_for_the_next_announcement() {
    let (mut r, mut ctrl, mut data) = recv_comm();
    let mut dst = [[0u8; LEN]; 4];
    let mut q = Vec::new();
    for b in dst.iter_mut().take(3) {
        q.push(r.irecv(UserBuf::from_slice(b), 5).unwrap().unwrap());
    }
    let f = frames(&mut ctrl);
    assert_eq!(f.len(), 4, "{f:?}");
    assert!(matches!(f[0], Control::Repath { .. }), "{f:?}");
    assert!(f[1..].iter().all(|c| matches!(c, Control::Announce(_))));

    // Two messages arrive before the receiver looks: the pass that finds them completes both,
    // acks both in one frame, and holds it while the third receive is still in flight.
    send_segment(&mut data, 0, q[0]);
    send_segment(&mut data, 1, q[1]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while r.test(q[0]).unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "message 0 never arrived"
        );
    }
    // The test that completed message 0 found message 1 there too (both were in the socket):
    // its acks wait for the next call, which carries them out with its announcement.
    assert_eq!(frames(&mut ctrl), vec![], "written by the completing pass");
    q.push(
        r.irecv(UserBuf::from_slice(&mut dst[3]), 5)
            .unwrap()
            .unwrap(),
    );
    let f = frames(&mut ctrl);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0], ack(2, 1));
    assert!(
        matches!(f[1], Control::Announce(a) if a.slot == q[3]),
        "{f:?}"
    );
    assert_eq!(r.test(q[1]).unwrap(), Some(LEN));

    // With nothing else in flight after it, a completing pass writes its ack at once.
    send_segment(&mut data, 2, q[2]);
    send_segment(&mut data, 3, q[3]);
    while r.test(q[2]).unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "message 2 never arrived"
        );
    }
    assert_eq!(r.test(q[3]).unwrap(), Some(LEN));
    let f = frames(&mut ctrl);
    assert_eq!(f, vec![ack(2, 3)]);
    for (i, b) in dst.iter().enumerate() {
        assert_eq!(b, &[i as u8; LEN], "message {i}");
    }
}

/// What `send_comm` hands back: the comm, our control and data ends, the send requests and
/// their buffers (alive as long as the requests).
type Sending = (
    TcpSendComm,
    TcpStream,
    TcpStream,
    Vec<u32>,
    Vec<Box<[u8; LEN]>>,
);

/// A one-stream send comm whose receiver is our raw sockets, with `n` single-buffer receives
/// of LEN bytes announced and one LEN-byte send matched to each, every segment read off our end.
fn send_comm(n: u32) -> Sending {
    let (mut s, mut ctrl, mut data) = scripted_send_comm(params(PolicyKind::Dqplb, 1));
    ctrl.write_all(&receiver_frames(n, LEN as u64)).unwrap();
    let mut q = Vec::new();
    let mut srcs: Vec<Box<[u8; LEN]>> = (0..n).map(|k| Box::new([k as u8; LEN])).collect();
    for (k, src) in srcs.iter_mut().enumerate() {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        q.push(loop {
            assert!(
                std::time::Instant::now() < deadline,
                "send {k} never matched"
            );
            if let Some(q) = s.isend(UserBuf::from_slice(&mut src[..]), 5).unwrap() {
                break q;
            }
        });
        let mut seg = [0u8; SEG_HEADER_BYTES + LEN];
        read_driving(&mut data, &mut seg, &mut s);
        assert_eq!(seg[SEG_HEADER_BYTES..], [k as u8; LEN]);
    }
    (s, ctrl, data, q, srcs)
}

fn write_ack(ctrl: &mut TcpStream, a: Acks) {
    ctrl.write_all(&a.encode()).unwrap();
}

/// Moves the comm until request `q` completes (or fails), within 10 s.
fn wait(s: &mut TcpSendComm, q: u32) -> NetResult<usize> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "send {q} never finished"
        );
        if let Some(n) = s.test(q)? {
            return Ok(n);
        }
    }
}

#[test]
fn one_frame_completes_several_sends_and_frames_of_an_old_socket_are_dropped() {
    let (mut s, mut ctrl, _data, q, _bufs) = send_comm(3);
    // An ack naming another socket of the stream (a replaced one) changes nothing.
    write_ack(&mut ctrl, acks(4, 3, 2));
    for _ in 0..100 {
        assert_eq!(s.test(q[0]).unwrap(), None);
    }
    write_ack(&mut ctrl, acks(0, 2, 1));
    assert_eq!(wait(&mut s, q[0]).unwrap(), LEN);
    assert_eq!(wait(&mut s, q[1]).unwrap(), LEN);
    assert_eq!(s.test(q[2]).unwrap(), None);
    assert_eq!(s.qp_stats()[0].outstanding, 1);
}

#[test]
fn acks_for_a_missing_stream_or_beyond_what_was_written_fail_the_comm() {
    let (mut s, mut ctrl, _data, q, _bufs) = send_comm(1);
    write_ack(
        &mut ctrl,
        Acks {
            stream: 5,
            gen: 0,
            count: 1,
            last: imm::encode(0, true),
        },
    );
    let e = wait(&mut s, q[0]).unwrap_err();
    assert_eq!(e.code, ErrorCode::RemoteError);
    assert!(
        e.msg.contains("data stream 5 of a 1-stream connection"),
        "{e}"
    );

    let (mut s, mut ctrl, _data, q, _bufs) = send_comm(1);
    write_ack(&mut ctrl, acks(0, 2, 1));
    let e = wait(&mut s, q[0]).unwrap_err();
    assert_eq!(e.code, ErrorCode::RemoteError);
    assert!(
        e.msg
            .contains("acknowledgement of 2 segment(s) while 1 written segment(s) await one"),
        "{e}"
    );
}

#[test]
fn a_closed_data_stream_waits_for_acks_on_the_control_stream() {
    // The receiver closes its data stream after reading; its acks come afterwards on the
    // control stream (as they may over a network): the sends complete.
    let (mut s, mut ctrl, data, q, _bufs) = send_comm(2);
    data.shutdown(Shutdown::Both).unwrap();
    for _ in 0..100 {
        assert_eq!(s.test(q[0]).unwrap(), None);
    }
    write_ack(&mut ctrl, acks(0, 2, 1));
    assert_eq!(wait(&mut s, q[0]).unwrap(), LEN);
    assert_eq!(wait(&mut s, q[1]).unwrap(), LEN);

    // Without acks, the close of the control stream too settles it: the sends failed.
    let (mut s, ctrl, data, q, _bufs) = send_comm(1);
    data.shutdown(Shutdown::Both).unwrap();
    for _ in 0..100 {
        assert_eq!(s.test(q[0]).unwrap(), None);
    }
    ctrl.shutdown(Shutdown::Both).unwrap();
    let e = wait(&mut s, q[0]).unwrap_err();
    assert_eq!(e.code, ErrorCode::RemoteError);
    assert!(
        e.msg
            .contains("peer closed the connection with 1 segment(s) unacknowledged"),
        "{e}"
    );
}
