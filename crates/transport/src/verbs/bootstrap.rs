//! Connection setup frames on the bootstrap TCP socket and their non-blocking I/O: the sender's
//! OPEN (hello with engine parameters, FIFO address/rkey, its QP endpoints), the listener's REPLY
//! (its QP endpoints) and the sender's READY byte.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};

use super::qpset::{ConnInfo, QpSetConfig};
use super::resources::RemoteSlice;
use crate::tcp::wire::{Hello, HELLO_BYTES};
use crate::tcp::ConnParams;
use crate::{NetError, NetResult};

/// Version of the verbs connection protocol, in OPEN after the FIFO (bytes 12..16 of the tail,
/// zero before 6): 6 = the path-failure fence frames on the bootstrap socket (fence.rs). The
/// hello keeps the shared handle version (checked first, as before); a sender of another verbs
/// version is refused at its OPEN.
pub(crate) const VERBS_PROTOCOL_VERSION: u32 = 6;

/// Bytes of an OPEN frame for `qps` data QPs.
pub(crate) fn open_len(qps: u16) -> usize {
    HELLO_BYTES + 16 + ConnInfo::wire_len(qps as usize)
}

/// Encodes OPEN: hello, FIFO (addr u64 LE, rkey u32 LE), verbs protocol version u32 LE,
/// connection info.
pub(crate) fn encode_open(hello: &Hello, fifo: RemoteSlice, info: &ConnInfo) -> Vec<u8> {
    let mut out = Vec::with_capacity(open_len(hello.params.qps));
    out.extend_from_slice(&hello.encode());
    out.extend_from_slice(&fifo.addr.to_le_bytes());
    out.extend_from_slice(&fifo.rkey.to_le_bytes());
    out.extend_from_slice(&VERBS_PROTOCOL_VERSION.to_le_bytes());
    out.extend_from_slice(&info.encode());
    out
}

/// Decodes the FIFO and connection-info part of OPEN (after the hello).
pub(crate) fn decode_open_tail(b: &[u8]) -> NetResult<(RemoteSlice, ConnInfo)> {
    if b.len() < 16 {
        return Err(NetError::remote(
            "verbs OPEN frame truncated before its FIFO",
        ));
    }
    let version = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
    if version != VERBS_PROTOCOL_VERSION {
        return Err(NetError::remote(format!(
            "verbs OPEN of verbs protocol {version} (this plugin speaks {VERBS_PROTOCOL_VERSION}; 0: a plugin from before 6)"
        )));
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[0..8]);
    let fifo = RemoteSlice {
        addr: u64::from_le_bytes(a),
        rkey: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
    };
    let info =
        ConnInfo::decode(&b[16..]).map_err(|e| NetError::remote(format!("verbs OPEN: {e}")))?;
    Ok((fifo, info))
}

/// Zero-length receives a receiver keeps posted per data QP's share of its SRQ: 8 windows (at
/// most 1024, never under 2 windows). Measured on rxe with per-QP receive queues, before the
/// credit: 2 windows drew 79 RNR NAKs per 64 MiB (4 QPs x 4, 1 MiB segments), 8 windows none.
pub(crate) fn data_recvs(p: &ConnParams) -> u32 {
    (8 * p.outstanding).min(1024).max(2 * p.outstanding)
}

/// Depth of a receive comm's shared receive queue: `data_recvs` for each data QP (the SRQ clamps
/// it to the device's max_srq_wr). The sender never has more writes unreceived than the credit
/// allows, so this only sets how far ahead of the receiver's polling the sender may run.
pub(crate) fn srq_recvs(p: &ConnParams) -> u32 {
    u32::from(p.qps).saturating_mul(data_recvs(p))
}

/// Control writes (announcements, credit words) the receiver's control QP holds unreaped: every
/// 64th is signaled, so a one-segment message costs 2 + 1/64 completions (net_ib: 2 + 1/32).
pub(crate) const CONTROL_WRITES: u32 = 128;

/// QP set sizes for a connection: send queues deep enough for the outstanding window and for
/// CONTROL_WRITES; the receiver's data QPs share one SRQ of `srq_recvs`. No QP has receives of its
/// own: announcements and credit words are plain RDMA writes (the minimum of 1 is verbs' floor).
pub(crate) fn qp_config(p: &ConnParams, receiver: bool) -> QpSetConfig {
    QpSetConfig {
        n_data: p.qps as usize,
        send_depth: p.outstanding.max(p.max_messages).max(CONTROL_WRITES) + 1,
        recv_depth: 1,
        srq_depth: if receiver { srq_recvs(p) } else { 0 },
    }
}

/// Idle time before the first keepalive probe on a bootstrap socket (TCP_KEEPIDLE).
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(20);
/// Interval between keepalive probes (TCP_KEEPINTVL).
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes before the kernel reports the connection dead (TCP_KEEPCNT).
pub(crate) const KEEPALIVE_PROBES: u32 = 6;

/// Turns on TCP keepalive for a bootstrap socket: a peer host that vanishes without a reset
/// (power loss, cable pull) surfaces as a socket error within 20 s + 6 x 5 s = 50 s, the same
/// numbers as the TCP transport's streams.
pub(crate) fn keepalive(sock: SockRef<'_>, who: &str) -> NetResult<()> {
    let ka = TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    sock.set_tcp_keepalive(&ka)
        .map_err(|e| NetError::io(&format!("{who}: SO_KEEPALIVE"), &e))
}

/// Writes what the socket takes of `buf[*done..]`; true once all is written.
pub fn push(sock: &mut TcpStream, buf: &[u8], done: &mut usize, who: &str) -> NetResult<bool> {
    while *done < buf.len() {
        match sock.write(&buf[*done..]) {
            Ok(0) => return Err(NetError::remote(format!("{who}: bootstrap socket closed"))),
            Ok(n) => *done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(NetError::io(&format!("{who}: bootstrap write"), &e)),
        }
    }
    Ok(true)
}

/// Reads into `buf[*got..]`; true once full. EOF is an error.
pub fn pull(sock: &mut TcpStream, buf: &mut [u8], got: &mut usize, who: &str) -> NetResult<bool> {
    while *got < buf.len() {
        match sock.read(&mut buf[*got..]) {
            Ok(0) => {
                return Err(NetError::remote(format!(
                    "{who}: bootstrap socket closed by the peer"
                )))
            }
            Ok(n) => *got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(NetError::io(&format!("{who}: bootstrap read"), &e)),
        }
    }
    Ok(true)
}

/// A new hello for the connecting side.
pub fn hello(params: ConnParams, secret: [u8; 16]) -> NetResult<Hello> {
    let id = crate::tcp::handle::random_secret()?;
    let mut conn_id = [0u8; 8];
    conn_id.copy_from_slice(&id[..8]);
    Ok(Hello {
        version: crate::tcp::handle::PROTOCOL_VERSION,
        stream: 0,
        gen: 0,
        conn_id: u64::from_le_bytes(conn_id),
        secret,
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::qp::QpEndpoint;
    use dqplb_engine::PolicyKind;

    fn params(outstanding: u32) -> ConnParams {
        ConnParams {
            qps: 2,
            outstanding,
            segment_bytes: 1 << 20,
            max_messages: 32,
            policy: PolicyKind::Dqplb,
            fabric_id: 3,
        }
    }

    fn ep(qpn: u32) -> QpEndpoint {
        QpEndpoint {
            qpn,
            psn: qpn * 3,
            gid: [9; 16],
            lid: 0,
            mtu: 4096,
        }
    }

    #[test]
    fn open_frame_round_trips() {
        let h = hello(params(4), [7; 16]).expect("hello");
        let info = ConnInfo {
            control: ep(1),
            data: vec![ep(2), ep(3)],
        };
        let fifo = RemoteSlice {
            addr: 0x7f00_0000_1000,
            rkey: 0x1234,
        };
        let b = encode_open(&h, fifo, &info);
        assert_eq!(b.len(), open_len(2));
        let mut head = [0u8; HELLO_BYTES];
        head.copy_from_slice(&b[..HELLO_BYTES]);
        let back = Hello::decode(&head).expect("hello decodes");
        assert_eq!(back.version, crate::tcp::handle::PROTOCOL_VERSION);
        assert_eq!(back.params, params(4));
        assert_eq!(back.secret, [7; 16]);
        let (f, i) = decode_open_tail(&b[HELLO_BYTES..]).expect("tail decodes");
        assert_eq!(f, fifo);
        assert_eq!(i, info);
        assert!(decode_open_tail(&b[HELLO_BYTES..HELLO_BYTES + 10]).is_err());
        assert!(decode_open_tail(&b[HELLO_BYTES..b.len() - 1]).is_err());
        // a sender from before protocol 6 (zeros there) is refused, naming both versions
        let mut old = b[HELLO_BYTES..].to_vec();
        old[12..16].fill(0);
        let e = decode_open_tail(&old).unwrap_err();
        assert!(
            e.msg.contains("verbs protocol 0 (this plugin speaks 6"),
            "{}",
            e.msg
        );
    }

    /// A connection running the depth rule is connected with `outstanding` = max(raised, base):
    /// its send queues and the receiver's shared receive queue follow the raised depth.
    #[test]
    fn queues_follow_the_depth_the_connection_was_sized_for() {
        let bound = |base: u32, raised: u32| params(raised.max(base));
        // Below CONTROL_WRITES the send queue is the control writes' anyway.
        assert_eq!(qp_config(&params(2), false).send_depth, CONTROL_WRITES + 1);
        assert_eq!(
            qp_config(&bound(2, 3), false).send_depth,
            CONTROL_WRITES + 1
        );
        // A raised depth above it sizes every send queue, not the base depth.
        let raised = qp_config(&bound(2, 200), false);
        assert_eq!(raised.send_depth, 201);
        assert_eq!(qp_config(&bound(200, 150), false).send_depth, 201);
        // The receiver's SRQ holds 8 windows of the raised depth per data QP (at most 1024).
        assert_eq!(data_recvs(&params(2)), 16);
        assert_eq!(data_recvs(&bound(2, 3)), 24);
        assert_eq!(qp_config(&bound(2, 3), true).srq_depth, 2 * 24);
        assert_eq!(data_recvs(&bound(2, 200)), 1024);
        assert_eq!(qp_config(&bound(2, 200), true).srq_depth, 2 * 1024);
    }

    #[test]
    fn keepalive_uses_the_agreed_numbers() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        keepalive(SockRef::from(&c), "test").expect("keepalive");
        let s = SockRef::from(&c);
        assert!(s.keepalive().expect("SO_KEEPALIVE"));
        assert_eq!(
            s.keepalive_time().expect("KEEPIDLE"),
            Duration::from_secs(20)
        );
        assert_eq!(
            s.keepalive_interval().expect("KEEPINTVL"),
            Duration::from_secs(5)
        );
        assert_eq!(s.keepalive_retries().expect("KEEPCNT"), 6);
    }

    #[test]
    fn receive_depth_covers_the_window() {
        assert_eq!(data_recvs(&params(4)), 32);
        assert_eq!(data_recvs(&params(256)), 1024);
        assert_eq!(data_recvs(&params(2048)), 4096);
        assert_eq!(srq_recvs(&params(4)), 2 * 32);
        let c = qp_config(&params(4), true);
        assert_eq!((c.n_data, c.recv_depth, c.srq_depth), (2, 1, 64));
        assert_eq!(c.send_depth, 129, "control QP: 128 unreaped writes");
        assert_eq!(qp_config(&params(256), true).send_depth, 257);
        assert_eq!(
            qp_config(&params(4), false).srq_depth,
            0,
            "the sender receives nothing"
        );
    }
}
