//! A hand-driven peer for the TCP transport: raw loopback sockets that speak (or break) the wire
//! protocol against a real `TcpRecvComm` or `TcpSendComm`, for fuzzing and regression tests.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use dqplb_engine::PolicyKind;
use dqplb_transport::tcp::handle::{ListenHandle, PROTOCOL_VERSION};
use dqplb_transport::tcp::wire::{Announce, ConnParams, Control, Hello, ANNOUNCE_BYTES};
use dqplb_transport::tcp::{TcpConnector, TcpListenComm, TcpOptions, TcpRecvComm, TcpSendComm};

/// Parameters small enough for quick loopback tests.
pub fn params(qps: u16) -> ConnParams {
    ConnParams {
        qps,
        outstanding: 4,
        segment_bytes: 4096,
        max_messages: 32,
        policy: PolicyKind::Dqplb,
        fabric_id: 0,
    }
}

/// A `TcpRecvComm` whose sender is raw sockets: `ctrl` then one data stream per QP.
pub struct RawSender {
    pub ctrl: TcpStream,
    pub data: Vec<TcpStream>,
}

/// Connects raw streams with valid hellos to a fresh listener and accepts the receive comm.
pub fn recv_comm(p: ConnParams) -> (TcpRecvComm, RawSender) {
    let opts = TcpOptions::default();
    let mut l = TcpListenComm::bind("127.0.0.1".parse().expect("ip"), 0, opts).expect("bind");
    let h = *l.handle();
    let mut streams = Vec::new();
    for i in 0..=p.qps {
        let mut s = TcpStream::connect(h.addr).expect("connect to the listener");
        s.set_nodelay(true).expect("nodelay");
        let hello = Hello {
            version: PROTOCOL_VERSION,
            stream: i,
            gen: 0,
            conn_id: 7,
            secret: h.secret,
            params: p,
        };
        s.write_all(&hello.encode()).expect("hello");
        streams.push(s);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let comm = loop {
        if let Some(c) = l.accept().expect("accept") {
            break c;
        }
        assert!(Instant::now() < deadline, "listener never accepted");
        std::thread::yield_now();
    };
    let mut it = streams.into_iter();
    let ctrl = it.next().expect("control stream");
    ctrl.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    (
        comm,
        RawSender {
            ctrl,
            data: it.collect(),
        },
    )
}

impl RawSender {
    /// Reads the next announcement the receive comm sent (blocking, 5 s timeout), past the
    /// re-path frame that opens the control stream and any ack frames.
    pub fn announce(&mut self) -> Announce {
        loop {
            let mut b = [0u8; ANNOUNCE_BYTES];
            self.ctrl.read_exact(&mut b).expect("announcement");
            match Control::decode(&b).expect("well-formed control frame") {
                Control::Announce(a) => return a,
                Control::Repath { .. } | Control::Acks(_) => continue,
                Control::Refused(why) => panic!("the receive comm refused: {}", why.describe()),
            }
        }
    }
}

/// A `TcpSendComm` whose receiver is raw sockets accepted from a plain listener.
pub struct RawReceiver {
    pub ctrl: TcpStream,
    pub data: Vec<TcpStream>,
}

/// Starts a real connector against a raw listener; returns the send comm and the raw streams
/// ordered by their hello's stream index.
pub fn send_comm(p: ConnParams, opts: &TcpOptions) -> (TcpSendComm, RawReceiver) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let h = ListenHandle {
        addr: listener.local_addr().expect("addr"),
        fabric_id: 0,
        secret: [3; 16],
    };
    let mut c = TcpConnector::start(&h, p, None, opts).expect("connector");
    let mut raw: Vec<TcpStream> = Vec::new();
    let mut comm = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while comm.is_none() || raw.len() < usize::from(p.qps) + 1 {
        assert!(Instant::now() < deadline, "connector never finished");
        if comm.is_none() {
            comm = c.progress().expect("connector progress");
        }
        match listener.accept() {
            Ok((s, _)) => raw.push(s),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => panic!("accept: {e}"),
        }
    }
    let mut by_index: Vec<Option<TcpStream>> = (0..raw.len()).map(|_| None).collect();
    for mut s in raw {
        s.set_nonblocking(false).expect("blocking");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut b = [0u8; 64];
        s.read_exact(&mut b).expect("hello");
        let hello = Hello::decode(&b).expect("well-formed hello");
        by_index[usize::from(hello.stream)] = Some(s);
    }
    let mut it = by_index.into_iter().map(|s| s.expect("every stream"));
    let ctrl = it.next().expect("control stream");
    (
        comm.expect("send comm"),
        RawReceiver {
            ctrl,
            data: it.collect(),
        },
    )
}
