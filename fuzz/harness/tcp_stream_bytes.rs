//! Bytes from a hostile sender into a real `TcpRecvComm` over loopback: well-formed, misplaced and
//! garbage segments, control-stream noise and closes. The comm must fail with an error, never
//! panic or block, and never write outside the posted buffers or report more than their capacity.

use std::io::Write;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use dqplb_engine::imm;
use dqplb_transport::tcp::wire::SegHeader;
use dqplb_transport::{ErrorCode, NetError, UserBuf};

use super::tcp_peer;

const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xC3;

#[derive(Debug, Arbitrary)]
enum Op {
    /// A framed segment; `slot` indexes the announced buffers (or is used raw past them).
    Seg {
        stream: u8,
        seq: u8,
        last: bool,
        reserved: bool,
        slot: u8,
        offset: u16,
        len: u16,
        /// Send only this many payload bytes (a torn segment), when smaller than `len`.
        cut: Option<u16>,
    },
    /// Arbitrary bytes on a data stream.
    Raw { stream: u8, bytes: Vec<u8> },
    /// Bytes on the control stream, where the sender must never write.
    Ctrl { bytes: Vec<u8> },
    /// The sender closes one stream.
    Close { stream: u8 },
    /// Let the comm run.
    Progress,
}

#[derive(Debug, Arbitrary)]
struct Input {
    qps: u8,
    caps: Vec<u16>,
    ops: Vec<Op>,
}

fn check_err(e: &NetError) {
    assert!(
        matches!(e.code, ErrorCode::RemoteError | ErrorCode::SystemError),
        "unexpected error kind {e:?}"
    );
    assert!(!e.msg.trim().is_empty(), "empty error message");
}

/// Runs one input against a fresh listener and receive comm.
pub fn check(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let qps = 1 + u16::from(input.qps % 3);
    let (mut rx, mut peer) = tcp_peer::recv_comm(tcp_peer::params(qps));
    for s in peer.data.iter().chain(std::iter::once(&peer.ctrl)) {
        // Abortive close: no TIME_WAIT pile-up over millions of runs.
        socket2::SockRef::from(s)
            .set_linger(Some(Duration::ZERO))
            .expect("SO_LINGER");
    }
    // Posted buffers with guard bytes on both sides.
    let caps: Vec<usize> = input
        .caps
        .iter()
        .take(4)
        .map(|c| usize::from(*c % 8192))
        .collect();
    let mut mem: Vec<Vec<u8>> = caps
        .iter()
        .map(|&c| vec![GUARD_BYTE; c + 2 * GUARD])
        .collect();
    // The high bit of `qps` selects grouped receives (chunks of 1..=4 buffers, tags 0, 1, ..);
    // otherwise every buffer is its own receive, as before grouped receives existed.
    let group = if input.qps >= 128 {
        1 + usize::from(input.qps / 3) % 4
    } else {
        1
    };
    let mut posted: Vec<(u32, Vec<usize>)> = Vec::new();
    let mut failed: Option<NetError> = None;
    let mut rest: &mut [Vec<u8>] = &mut mem;
    let mut cap_chunks = caps.chunks(group);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at_mut(group.min(rest.len()));
        rest = tail;
        let group_caps = cap_chunks.next().expect("one cap per buffer").to_vec();
        let bufs: Vec<(UserBuf, i32)> = chunk
            .iter_mut()
            .zip(&group_caps)
            .enumerate()
            .map(|(i, (m, &cap))| (UserBuf::from_slice(&mut m[GUARD..GUARD + cap]), i as i32))
            .collect();
        match rx.irecv_group(&bufs) {
            Ok(Some(slot)) => posted.push((slot, group_caps)),
            Ok(None) => panic!("no free receive slot with 32 allowed"),
            Err(e) => panic!("irecv failed before any peer byte: {e}"),
        }
    }
    // Wire ids of every announced buffer, in posting order.
    let slots: Vec<u32> = posted
        .iter()
        .flat_map(|(_, c)| c.iter())
        .map(|_| peer.announce().buffer_id())
        .collect();
    let mut written = 0usize;
    for op in input.ops {
        if written > 1 << 16 {
            break;
        }
        let wrote = match op {
            Op::Seg {
                stream,
                seq,
                last,
                reserved,
                slot,
                offset,
                len,
                cut,
            } => {
                let slot = slots
                    .get(usize::from(slot))
                    .copied()
                    .unwrap_or(u32::from(slot));
                let mut imm = imm::encode(u32::from(seq), last);
                if reserved {
                    imm |= 1 << 24;
                }
                let len = usize::from(len % 8192);
                let hdr = SegHeader {
                    imm,
                    slot,
                    offset: u64::from(offset % 8192),
                    len: len as u32,
                };
                let send = cut.map_or(len, |c| usize::from(c).min(len));
                let mut frame = hdr.encode().to_vec();
                frame.extend(std::iter::repeat_n(0xA5u8, send));
                let s = usize::from(stream) % peer.data.len();
                peer.data[s].write_all(&frame).map(|_| frame.len())
            }
            Op::Raw { stream, bytes } => {
                let s = usize::from(stream) % peer.data.len();
                peer.data[s].write_all(&bytes).map(|_| bytes.len())
            }
            Op::Ctrl { bytes } => peer.ctrl.write_all(&bytes).map(|_| bytes.len()),
            Op::Close { stream } => {
                let s = usize::from(stream) % peer.data.len();
                let _ = peer.data[s].shutdown(std::net::Shutdown::Both);
                Ok(0)
            }
            Op::Progress => Ok(0),
        };
        // The comm may have failed and reset its side: a peer write error is no finding.
        written += wrote.unwrap_or(0);
        drive(&mut rx, &posted, &mut failed);
    }
    for _ in 0..4 {
        drive(&mut rx, &posted, &mut failed);
    }
    // Peer first (RST), then the comm.
    drop(peer);
    drive(&mut rx, &posted, &mut failed);
    drop(rx);
    for (m, &cap) in mem.iter().zip(&caps) {
        assert!(
            m[..GUARD].iter().all(|&b| b == GUARD_BYTE)
                && m[GUARD + cap..].iter().all(|&b| b == GUARD_BYTE),
            "bytes written outside a posted {cap}-byte buffer"
        );
    }
}

/// One progress round and a test of every posted receive; checks sizes and sticky failure.
fn drive(
    rx: &mut dqplb_transport::tcp::TcpRecvComm,
    posted: &[(u32, Vec<usize>)],
    failed: &mut Option<NetError>,
) {
    let r = rx.progress();
    if let Some(e) = failed {
        assert_eq!(r.as_ref().err(), Some(&*e), "failure must be sticky");
        return;
    }
    if let Err(e) = r {
        check_err(&e);
        *failed = Some(e);
        return;
    }
    for (slot, caps) in posted {
        match rx.test_sizes(*slot) {
            Ok(Some(sizes)) => {
                assert_eq!(sizes.len(), caps.len(), "one size per buffer of the group");
                for (size, cap) in sizes.iter().zip(caps) {
                    assert!(size <= cap, "receive of {size} bytes into {cap}");
                }
            }
            Ok(None) => {}
            // A receive already returned is no longer in flight: a usage error, not a finding.
            Err(e) if e.code == ErrorCode::InvalidUsage => {}
            Err(e) => {
                check_err(&e);
                *failed = Some(e);
                return;
            }
        }
    }
}
