//! Engine memory measured, not restated: a counting global allocator checks that construction
//! allocates exactly the reported footprint and that a long transfer allocates nothing at all.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use dqplb_engine::{EngineParams, PolicyKind, Receiver, Sender};

/// Counts this thread's allocations and live heap bytes (other test threads don't disturb it).
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counters are plain thread-local cells.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        let _ = LIVE.try_with(|c| c.set(c.get() + l.size() as i64));
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let _ = LIVE.try_with(|c| c.set(c.get() - l.size() as i64));
        // SAFETY: p came from alloc with layout l.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        let _ = LIVE.try_with(|c| c.set(c.get() + new as i64 - l.size() as i64));
        // SAFETY: as for alloc/dealloc.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn counters() -> (u64, i64) {
    (ALLOCS.with(Cell::get), LIVE.with(Cell::get))
}

fn params(qps: usize, cap: u32, seg: u32, max_messages: usize, policy: PolicyKind) -> EngineParams {
    EngineParams {
        qps,
        max_outstanding: cap,
        segment_bytes: seg,
        max_messages,
        policy,
    }
}

#[test]
fn construction_allocates_exactly_the_reported_footprint() {
    for (qps, cap, max_messages) in [(16, 128, 64), (1, 1, 1), (128, 7, 33), (65, 2048, 1000)] {
        let p = params(qps, cap, 512 << 10, max_messages, PolicyKind::Dqplb);
        let (_, live0) = counters();
        let tx = Sender::new(&p).unwrap();
        let (_, live1) = counters();
        assert_eq!(
            (live1 - live0) as usize,
            tx.footprint_bytes() - std::mem::size_of::<Sender>(),
            "sender heap for {qps} QPs x {cap}, {max_messages} messages"
        );
        let rx = Receiver::new(qps as u32 * cap, max_messages).unwrap();
        let (_, live2) = counters();
        assert_eq!(
            (live2 - live1) as usize,
            rx.footprint_bytes() - std::mem::size_of::<Receiver>(),
            "receiver heap for window {}, {max_messages} messages",
            qps as u32 * cap
        );
        drop((tx, rx));
        assert_eq!(counters().1, live0, "everything freed on drop");
    }
}

/// Runs `messages` messages of `len` bytes through a sender/receiver pair, completing QPs in a
/// skewed order (QP 0 slow) and re-posting as messages finish, message i on route i % routes;
/// returns segments moved.
fn transfer_routed(
    tx: &mut Sender,
    rx: &mut Receiver,
    qps: usize,
    messages: u32,
    len: u64,
    routes: u32,
) -> u64 {
    let (mut posted, mut done, mut segs, mut now) = (0u32, 0u32, 0u64, 0u64);
    let mut in_flight: Vec<Vec<u32>> = (0..qps).map(|_| Vec::with_capacity(4096)).collect();
    let before = counters().0;
    while done < messages {
        while posted < messages && tx.post_routed(posted, len, (posted % routes) as u8).is_ok() {
            rx.post(posted, len).unwrap();
            posted += 1;
        }
        now += 1;
        while let Some(t) = tx.poll_transmit(now) {
            in_flight[t.qp].push(t.imm);
            rx.arrived(t.imm, t.len).unwrap();
            segs += 1;
        }
        for (q, f) in in_flight.iter_mut().enumerate() {
            let n = if q == 0 { f.len().min(1) } else { f.len() };
            for _ in 0..n {
                f.remove(0);
                tx.completed(q, now).unwrap();
            }
        }
        while tx.poll_done().is_some() {}
        while rx.poll_done().is_some() {
            done += 1;
        }
    }
    assert_eq!(counters().0, before, "the data path allocated");
    segs
}

fn transfer(tx: &mut Sender, rx: &mut Receiver, qps: usize, messages: u32, len: u64) -> u64 {
    transfer_routed(tx, rx, qps, messages, len, 1)
}

#[test]
fn routed_messages_allocate_nothing() {
    let p = params(16, 8, 4096, 32, PolicyKind::Dqplb);
    let mut tx = Sender::new(&p).unwrap();
    let (_, live) = counters();
    tx.add_route(PolicyKind::StaticSplit, 4, 4096).unwrap();
    tx.add_route(PolicyKind::RoundRobinMessage, 8, 4096)
        .unwrap();
    tx.add_route(PolicyKind::SingleQp, 0, 4096).unwrap();
    assert_eq!(counters().1, live, "adding a route allocated");
    let mut rx = Receiver::new(16 * 8, 32).unwrap();
    let segs = transfer_routed(&mut tx, &mut rx, 16, 2000, 64 << 10, 4);
    assert!(segs >= 2000, "{segs} segments");
}

#[test]
fn the_data_path_allocates_nothing() {
    for policy in PolicyKind::ALL {
        let p = params(16, 8, 4096, 32, policy);
        let mut tx = Sender::new(&p).unwrap();
        let mut rx = Receiver::new(16 * 8, 32).unwrap();
        let segs = transfer(&mut tx, &mut rx, 16, 2000, 64 << 10);
        assert!(segs >= 2000, "{policy}: {segs} segments");
    }
}
