//! Replays, on the stable toolchain, the committed fuzz seeds and every minimized fuzz finding
//! through the same checks the cargo-fuzz targets run (fuzz/harness); see docs/records/robustness.md.

#[path = "../fuzz/harness/mod.rs"]
#[allow(unreachable_pub)] // the cargo-fuzz lib's public items, included here as a module
mod harness;

use std::path::{Path, PathBuf};

/// Files of `fuzz/<kind>/<target>/`, sorted, with their bytes.
fn inputs(kind: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, bytes)
        })
        .collect()
}

/// Runs `check` on every seed and fixed regression of `target`; returns how many ran.
fn replay(target: &str, check: fn(&[u8])) -> usize {
    let mut n = 0;
    for kind in ["seeds", "regressions"] {
        for (path, bytes) in inputs(kind, target) {
            let r = std::panic::catch_unwind(|| check(&bytes));
            assert!(r.is_ok(), "{} failed its fuzz check", path.display());
            n += 1;
        }
    }
    n
}

#[test]
fn wire_frames_corpus() {
    assert!(replay("wire_frames", harness::wire_frames::check) >= 4);
}

#[test]
fn engine_receiver_corpus() {
    assert!(replay("engine_receiver", harness::engine_receiver::check) >= 4);
}

#[test]
fn engine_sender_receiver_corpus() {
    assert!(
        replay(
            "engine_sender_receiver",
            harness::engine_sender_receiver::check
        ) >= 4
    );
}

#[test]
fn config_toml_corpus() {
    assert!(replay("config_toml", harness::config_toml::check) >= 4);
}

#[test]
fn tcp_stream_bytes_corpus() {
    assert!(replay("tcp_stream_bytes", harness::tcp_stream_bytes::check) >= 3);
}

// ---- Findings in src/ (fixed): each test states the correct behaviour. ----

use std::io::{Read, Write};

use dqplb_engine::imm;
use dqplb_transport::tcp::wire::{Acks, SegHeader, SEG_HEADER_BYTES};
use dqplb_transport::tcp::TcpOptions;
use dqplb_transport::{ErrorCode, NetResult, UserBuf};
use harness::tcp_peer;

/// Calls `f` until it yields Some or an error (at most ~5 s).
fn poll_until<T>(mut f: impl FnMut() -> NetResult<Option<T>>) -> NetResult<Option<T>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match f() {
            Ok(None) if std::time::Instant::now() < deadline => std::thread::yield_now(),
            other => return other,
        }
    }
}

/// A peer's segment whose offset is not the message's next byte: the receive completes with the
/// segment's length as its size although bytes `0..size` were never written.
#[test]
fn tcp_recv_rejects_segment_at_wrong_offset() {
    let (mut rx, mut peer) = tcp_peer::recv_comm(tcp_peer::params(1));
    let mut buf = vec![0xEEu8; 1024];
    let slot = rx
        .irecv(UserBuf::from_slice(&mut buf), 0)
        .expect("irecv")
        .expect("a free slot");
    let a = peer.announce();
    let hdr = SegHeader {
        imm: imm::encode(0, true),
        slot: a.buffer_id(),
        offset: 512,
        len: 100,
    };
    peer.data[0].write_all(&hdr.encode()).expect("header");
    peer.data[0].write_all(&[0xAB; 100]).expect("payload");
    let r = poll_until(|| rx.test(slot));
    let done = r.as_ref().ok().copied().flatten();
    assert!(
        matches!(&r, Err(e) if e.code == ErrorCode::RemoteError),
        "receive completed as {done:?} bytes; buf[0..4] = {:02x?} was never written (data sits at 512..612)",
        &buf[0..4]
    );
}

/// A peer's segment naming another posted receive's slot: the data lands in the second buffer
/// while the first receive completes with that size.
#[test]
fn tcp_recv_rejects_segment_for_another_receive() {
    let (mut rx, mut peer) = tcp_peer::recv_comm(tcp_peer::params(1));
    let mut first = vec![0xEEu8; 256];
    let mut second = vec![0xEEu8; 256];
    let s1 = rx
        .irecv(UserBuf::from_slice(&mut first), 0)
        .expect("irecv")
        .expect("slot");
    let _s2 = rx
        .irecv(UserBuf::from_slice(&mut second), 0)
        .expect("irecv")
        .expect("slot");
    let _a1 = peer.announce();
    let a2 = peer.announce();
    let hdr = SegHeader {
        imm: imm::encode(0, true),
        slot: a2.buffer_id(),
        offset: 0,
        len: 16,
    };
    peer.data[0].write_all(&hdr.encode()).expect("header");
    peer.data[0].write_all(&[0xAB; 16]).expect("payload");
    let r = poll_until(|| rx.test(s1));
    let done = r.as_ref().ok().copied().flatten();
    assert!(
        matches!(&r, Err(e) if e.code == ErrorCode::RemoteError),
        "first receive completed as {done:?} bytes but holds {:02x?}; its data went to the second",
        &first[0..4]
    );
}

/// An acknowledgement that names no segment the sender wrote (wrong immediate, sent before any
/// byte was read): the send completes, so NCCL may reuse a buffer still being written.
#[test]
fn tcp_send_rejects_ack_for_unsent_segment() {
    let opts = TcpOptions {
        socket_buffer_bytes: 4096,
        ..TcpOptions::default()
    };
    let mut p = tcp_peer::params(1);
    p.segment_bytes = 65536;
    let (mut tx, mut peer) = tcp_peer::send_comm(p, &opts);
    let ann = dqplb_transport::tcp::wire::Announce {
        slot: 0,
        tag: 0,
        index: 0,
        count: 1,
        capacity: 1 << 20,
    };
    peer.ctrl.write_all(&ann.encode()).expect("announce");
    let mut msg = vec![0x5Au8; 4 * 65536];
    let slot = poll_until(|| tx.isend(UserBuf::from_slice(&mut msg), 0)).expect("isend");
    let slot = slot.expect("isend accepted");
    // An ack of four segments with a bogus immediate, before the peer reads a single byte.
    let ack = Acks {
        stream: 0,
        gen: 0,
        count: 4,
        last: 0x00AB_CDEF,
    };
    peer.ctrl.write_all(&ack.encode()).expect("ack");
    let r = poll_until(|| tx.test(slot));
    let done = r.as_ref().ok().copied().flatten();
    assert!(
        matches!(&r, Err(e) if e.code == ErrorCode::RemoteError),
        "send of {} bytes completed as {done:?} on bogus acks, before the peer read any byte",
        msg.len()
    );
    // What the comm wrote is a well-formed first segment of the announced receive: the ack was
    // wrong, not the stream.
    let mut hdr = [0u8; SEG_HEADER_BYTES];
    peer.data[0].read_exact(&mut hdr).expect("segment header");
    let seg = SegHeader::decode(&hdr).expect("segment header");
    assert_eq!((seg.slot, seg.offset), (0, 0));
}

/// A segment torn across reads while another stream completes the same receive: when the rest of
/// the payload arrives, the comm fails with InternalError ("receive slot 0 vanished"), blaming
/// itself for the peer's protocol violation. Found by the `tcp_stream_bytes` target.
#[test]
fn tcp_recv_torn_segment_into_completed_receive_is_remote_error() {
    let (mut rx, mut peer) = tcp_peer::recv_comm(tcp_peer::params(2));
    let mut buf = vec![0xEEu8; 256];
    let slot = rx
        .irecv(UserBuf::from_slice(&mut buf), 0)
        .expect("irecv")
        .expect("slot");
    let a = peer.announce();
    // Stream 2: a 100-byte segment for the same receive, only 10 payload bytes sent for now.
    let torn = SegHeader {
        imm: imm::encode(1, true),
        slot: a.buffer_id(),
        offset: 16,
        len: 100,
    };
    peer.data[1].write_all(&torn.encode()).expect("header");
    peer.data[1].write_all(&[0xAB; 10]).expect("payload start");
    // Stream 1: the whole message in one segment; the receive completes and is returned.
    let whole = SegHeader {
        imm: imm::encode(0, true),
        slot: a.buffer_id(),
        offset: 0,
        len: 16,
    };
    peer.data[0].write_all(&whole.encode()).expect("header");
    peer.data[0].write_all(&[0xCD; 16]).expect("payload");
    // The receive must not be handed back while a segment naming it is still arriving: the comm
    // fails with RemoteError then, or at the latest when the rest of the payload arrives.
    let r = match poll_until(|| rx.test(slot)) {
        Ok(Some(_)) => {
            peer.data[1].write_all(&[0xAB; 90]).expect("payload rest");
            poll_until(|| rx.progress().map(|()| None::<()>))
        }
        other => other.map(|_| None),
    };
    assert!(
        matches!(&r, Err(e) if e.code == ErrorCode::RemoteError),
        "peer violation reported as {r:?}"
    );
}

/// A receiver that announces buffer 1 of a group before buffer 0: a protocol error
/// (RemoteError), never a match against a half-known group.
#[test]
fn tcp_send_rejects_group_announced_out_of_order() {
    let (mut tx, mut peer) = tcp_peer::send_comm(tcp_peer::params(1), &TcpOptions::default());
    let ann = dqplb_transport::tcp::wire::Announce {
        slot: 0,
        tag: 0,
        index: 1,
        count: 2,
        capacity: 64,
    };
    peer.ctrl.write_all(&ann.encode()).expect("announce");
    let mut msg = vec![1u8; 8];
    let r = poll_until(|| tx.isend(UserBuf::from_slice(&mut msg), 0));
    assert!(
        matches!(&r, Err(e) if e.code == ErrorCode::RemoteError && e.msg.contains("out of order")),
        "{r:?}"
    );
}

/// A receiver that closes after announcing 1 of the 2 buffers of a group: the next isend fails
/// with RemoteError instead of waiting forever for the rest of the group.
#[test]
fn tcp_send_fails_on_close_inside_a_group_announcement() {
    let (mut tx, mut peer) = tcp_peer::send_comm(tcp_peer::params(1), &TcpOptions::default());
    let ann = dqplb_transport::tcp::wire::Announce {
        slot: 0,
        tag: 0,
        index: 0,
        count: 2,
        capacity: 64,
    };
    peer.ctrl.write_all(&ann.encode()).expect("announce");
    drop(peer);
    let mut msg = vec![1u8; 8];
    let r = poll_until(|| tx.isend(UserBuf::from_slice(&mut msg), 0));
    assert!(
        matches!(&r, Err(e) if e.code == ErrorCode::RemoteError),
        "{r:?}"
    );
}
