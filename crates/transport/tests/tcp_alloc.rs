//! TCP comms measured for allocations: once connected and warmed up, a test() that completes
//! nothing and a whole transfer (irecv, isend, test per request) allocate nothing on their thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use dqplb_engine::PolicyKind;
use dqplb_transport::tcp::{
    ConnParams, TcpConnector, TcpListenComm, TcpOptions, TcpRecvComm, TcpSendComm,
};
use dqplb_transport::UserBuf;

/// Counts this thread's allocations (other test threads don't disturb it).
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a plain thread-local cell.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: p came from alloc with layout l.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as for alloc/dealloc.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

const MSG: usize = 1 << 20;

fn pair() -> (TcpSendComm, TcpRecvComm) {
    let p = ConnParams {
        qps: 4,
        outstanding: 4,
        segment_bytes: 64 << 10,
        max_messages: 8,
        policy: PolicyKind::Dqplb,
        fabric_id: 0,
    };
    let opts = TcpOptions::default();
    let mut l = TcpListenComm::bind("127.0.0.1".parse().unwrap(), 0, opts.clone()).unwrap();
    let mut c = TcpConnector::start(l.handle(), p, None, &opts).unwrap();
    let (mut s, mut r) = (None, None);
    for _ in 0..1_000_000 {
        if s.is_none() {
            s = c.progress().unwrap();
        }
        if r.is_none() {
            r = l.accept().unwrap();
        }
        if let (Some(_), Some(_)) = (&s, &r) {
            return (s.unwrap(), r.unwrap());
        }
        std::thread::yield_now();
    }
    panic!("connect/accept did not complete");
}

/// Posts a receive and its send; the send's request once the sender matched it.
fn post(s: &mut TcpSendComm, r: &mut TcpRecvComm, src: &mut [u8], dst: &mut [u8]) -> (u32, u32) {
    let rq = r.irecv(UserBuf::from_slice(dst), 1).unwrap().unwrap();
    for _ in 0..1_000_000 {
        if let Some(sq) = s.isend(UserBuf::from_slice(src), 1).unwrap() {
            return (sq, rq);
        }
        r.progress().unwrap();
    }
    panic!("isend never matched the receive");
}

/// Drives both ends until both requests are done.
fn finish(s: &mut TcpSendComm, r: &mut TcpRecvComm, (sq, rq): (u32, u32)) {
    let (mut sent, mut got) = (false, false);
    for _ in 0..10_000_000 {
        sent = sent || s.test(sq).unwrap().is_some();
        got = got || r.test(rq).unwrap() == Some(MSG);
        if sent && got {
            return;
        }
    }
    panic!("transfer did not complete");
}

#[test]
fn idle_tests_and_a_whole_transfer_allocate_nothing() {
    let (mut s, mut r) = pair();
    let (mut src, mut dst) = (vec![7u8; MSG], vec![0u8; MSG]);
    // Warm-up: the first messages size what grows once (socket buffers, stage reads).
    for _ in 0..4 {
        let reqs = post(&mut s, &mut r, &mut src, &mut dst);
        finish(&mut s, &mut r, reqs);
    }

    // A receive posted with nothing sent: its test() completes nothing.
    let rq = r.irecv(UserBuf::from_slice(&mut dst), 1).unwrap().unwrap();
    let before = allocs();
    for _ in 0..1000 {
        assert_eq!(r.test(rq).unwrap(), None);
    }
    assert_eq!(allocs() - before, 0, "idle receive test() allocated");

    // Its send matched and written while the receiver stands still: the sender's test() waits.
    let mut sq = None;
    while sq.is_none() {
        sq = s.isend(UserBuf::from_slice(&mut src), 1).unwrap();
    }
    let sq = sq.unwrap();
    let before = allocs();
    for _ in 0..1000 {
        assert_eq!(s.test(sq).unwrap(), None);
    }
    assert_eq!(allocs() - before, 0, "idle send test() allocated");
    finish(&mut s, &mut r, (sq, rq));

    // Whole messages: irecv, isend and every test() until done.
    let before = allocs();
    for _ in 0..32 {
        let reqs = post(&mut s, &mut r, &mut src, &mut dst);
        finish(&mut s, &mut r, reqs);
    }
    assert_eq!(allocs() - before, 0, "a transfer of 32 MiB allocated");
    assert!(dst.iter().all(|&b| b == 7));
}
