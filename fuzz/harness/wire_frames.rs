//! Arbitrary bytes as every fixed-size frame of the TCP transport (hello, announce, segment header,
//! ack frame) and as the 128-byte listen handle: decoders never panic, errors say why, frames round-trip.

use dqplb_engine::{EngineParams, Receiver, Sender};
use dqplb_transport::tcp::handle::{ListenHandle, HANDLE_BYTES, PROTOCOL_VERSION};
use dqplb_transport::tcp::wire::{
    Acks, Announce, Control, Hello, SegHeader, ANNOUNCE_BYTES, HELLO_BYTES, SEG_HEADER_BYTES,
};
use dqplb_transport::{ErrorCode, NetError, UserBuf};

/// Flag bits of the first input byte: stamp a valid magic so the fuzzer reaches the field checks.
const STAMP_HELLO: u8 = 1;
const STAMP_ANNOUNCE: u8 = 2;
const STAMP_SEG: u8 = 4;
const STAMP_ACK: u8 = 8;
const STAMP_HANDLE: u8 = 16;

/// `N` bytes taken from `data` at `*pos` (zero-padded past its end).
fn take<const N: usize>(data: &[u8], pos: &mut usize) -> [u8; N] {
    let mut out = [0u8; N];
    let start = (*pos).min(data.len());
    let end = (*pos + N).min(data.len());
    out[..end - start].copy_from_slice(&data[start..end]);
    *pos += N;
    out
}

fn check_err(e: &NetError, code: ErrorCode, what: &str) {
    assert_eq!(e.code, code, "{what}: wrong error code for {e:?}");
    assert!(!e.to_string().trim().is_empty(), "{what}: empty error");
}

/// Runs every decoder over `data`; panics if a decoder panics or an invariant breaks.
pub fn check(data: &[u8]) {
    let flags = data.first().copied().unwrap_or(0);
    let mut pos = 1;
    hello(take(data, &mut pos), flags & STAMP_HELLO != 0);
    announce(take(data, &mut pos), flags & STAMP_ANNOUNCE != 0);
    seg_header(take(data, &mut pos), flags & STAMP_SEG != 0);
    ack(take(data, &mut pos), flags & STAMP_ACK != 0);
    handle(take(data, &mut pos), flags & STAMP_HANDLE != 0);
}

fn hello(mut b: [u8; HELLO_BYTES], stamp: bool) {
    if stamp {
        b[0..4].copy_from_slice(b"DQPS");
        b[28] %= 4;
    }
    let h = match Hello::decode(&b) {
        Ok(h) => h,
        Err(e) => return check_err(&e, ErrorCode::RemoteError, "Hello::decode"),
    };
    let again = Hello::decode(&h.encode()).expect("re-encoded hello decodes");
    assert_eq!(again, h, "hello round trip");
    match h.params.validate() {
        Err(e) => check_err(&e, ErrorCode::RemoteError, "ConnParams::validate"),
        Ok(()) => {
            // What the listener accepts, the engine must accept too (TcpRecvComm::new and the
            // sender build their engines from exactly these fields).
            let p = h.params;
            let window = u32::from(p.qps) * p.outstanding;
            if let Err(e) = Receiver::new(window, p.max_messages as usize) {
                panic!("validated params {p:?} rejected by Receiver::new: {e}");
            }
            let ep = EngineParams {
                qps: usize::from(p.qps),
                max_outstanding: p.outstanding,
                segment_bytes: p.segment_bytes,
                max_messages: p.max_messages as usize,
                policy: p.policy,
            };
            if let Err(e) = Sender::new(&ep) {
                panic!("validated params {p:?} rejected by Sender::new: {e}");
            }
        }
    }
}

fn announce(mut b: [u8; ANNOUNCE_BYTES], stamp: bool) {
    if stamp {
        let good = Announce {
            slot: 0,
            tag: 0,
            index: 0,
            count: 1,
            capacity: 0,
        }
        .encode();
        b[0..4].copy_from_slice(&good[0..4]);
        // A group shape the decoder accepts, so the fuzzer reaches the round trip.
        b[13] = b[13] % 8 + 1;
        b[12] %= b[13];
        b[14..16].fill(0);
    }
    match Announce::decode(&b) {
        Err(e) => check_err(&e, ErrorCode::RemoteError, "Announce::decode"),
        Ok(a) => {
            assert_eq!(Announce::decode(&a.encode()), Ok(a), "announce round trip");
            assert!(a.count >= 1 && a.count <= 8 && a.index < a.count, "{a:?}");
        }
    }
}

fn seg_header(mut b: [u8; SEG_HEADER_BYTES], stamp: bool) {
    if stamp {
        let good = SegHeader {
            imm: 0,
            slot: 0,
            offset: 0,
            len: 0,
        }
        .encode();
        b[20..24].copy_from_slice(&good[20..24]);
    }
    let s = match SegHeader::decode(&b) {
        Ok(s) => s,
        Err(e) => return check_err(&e, ErrorCode::RemoteError, "SegHeader::decode"),
    };
    assert_eq!(
        SegHeader::decode(&s.encode()),
        Ok(s),
        "segment header round trip"
    );
    // The receiver's bounds test on a decoded header (recv.rs): never overflows, and a slice it
    // grants lies inside the posted buffer.
    let mut backing = [0u8; 256];
    let buf = UserBuf::from_slice(&mut backing);
    if let Some(sl) = buf.slice(s.offset as usize, s.len as usize) {
        assert_eq!(sl.len(), s.len as usize);
        assert!(
            s.offset + u64::from(s.len) <= 256,
            "slice outside the buffer"
        );
    }
}

fn ack(mut b: [u8; ANNOUNCE_BYTES], stamp: bool) {
    if stamp {
        let good = Acks {
            stream: 0,
            gen: 0,
            count: 1,
            last: 0,
        }
        .encode();
        b[0..4].copy_from_slice(&good[0..4]);
        b[10..12].fill(0);
        b[16..].fill(0);
    }
    match Control::decode(&b) {
        Err(e) => check_err(&e, ErrorCode::RemoteError, "Control::decode"),
        Ok(Control::Acks(a)) => {
            assert!(a.count >= 1, "{a:?}");
            assert_eq!(
                Control::decode(&a.encode()),
                Ok(Control::Acks(a)),
                "ack frame round trip"
            );
        }
        Ok(_) => {}
    }
}

fn handle(mut b: [u8; HANDLE_BYTES], stamp: bool) {
    if stamp {
        b[0..4].copy_from_slice(b"DQPL");
        b[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    }
    let h = match ListenHandle::decode(&b) {
        Ok(h) => h,
        Err(e) => return check_err(&e, ErrorCode::InvalidArgument, "ListenHandle::decode"),
    };
    assert_ne!(h.addr.port(), 0, "handle with port 0 accepted");
    let mut out = [0xA5u8; HANDLE_BYTES];
    h.encode(&mut out);
    assert_eq!(ListenHandle::decode(&out), Ok(h), "handle round trip");
}
