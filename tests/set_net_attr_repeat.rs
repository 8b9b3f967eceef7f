//! setNetAttr as NCCL 2.28-2.30 calls it, before every connect/accept retry: repeated identical
//! hints through the v11 and v12 entry points log nothing, allocate nothing and change nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::null_mut;

use dqplb_test_support::logger::CLogger;
use nccl_net_dqplb::ffi::sys::{ncclDebugLogger_t, ncclNetAttr_v11_t, ncclResult_t};
use nccl_net_dqplb::ffi::vtable::{ncclNetPlugin_v11, ncclNetPlugin_v12};
use nccl_net_dqplb::plugin::{CommContext, Pattern};

/// Counts this thread's allocations.
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

/// Log lines of every level the logger has seen.
fn lines(l: &CLogger) -> i64 {
    (0..8).map(|lvl| l.count(lvl)).sum()
}

/// The calls one rank made during one 0.2 s accept poll under NCCL 2.32.3.
const REPEATS: usize = 9_625;

/// One test function: init and the logger are process-wide.
#[test]
fn repeated_identical_hints_are_silent_allocation_free_and_change_nothing() {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    // Every level reaches the logger: even a TRACE line per call would be counted.
    std::env::set_var("NCCL_DEBUG", "TRACE");
    let log = CLogger::load().expect("test logger");
    // SAFETY: both are `unsafe extern "C" fn(int, unsigned long, const char*, int, const char*, ...)`.
    let logger: ncclDebugLogger_t = unsafe { std::mem::transmute(Some(log.logger)) };
    for (version, init, set) in [
        (
            11,
            ncclNetPlugin_v11.0.init.unwrap(),
            ncclNetPlugin_v11.0.setNetAttr.unwrap(),
        ),
        (
            12,
            ncclNetPlugin_v12.0.init.unwrap(),
            ncclNetPlugin_v12.0.setNetAttr.unwrap(),
        ),
    ] {
        let mut ctx: *mut c_void = null_mut();
        // SAFETY: our own vtable, called as NCCL calls it.
        let rc = unsafe { init(&mut ctx, 0x5eed, null_mut(), logger, None) };
        assert_eq!(rc, ncclResult_t::ncclSuccess, "v{version} init");
        // SAFETY: ctx came from init and is not finalized until the end.
        let c = unsafe { &*(ctx as *const CommContext) };
        // A per-transfer hint: AlltoAll with 16 concurrent peers (setXferNetAttrs).
        let mut attr: ncclNetAttr_v11_t = unsafe { std::mem::zeroed() };
        attr.op = 1 << 8;
        attr.sendCommAttr.maxConcurrentPeers = 16;
        attr.sendCommAttr.minConcurrentPeers = 16;
        attr.recvCommAttr.maxConcurrentPeers = 16;
        attr.recvCommAttr.minConcurrentPeers = 16;
        // SAFETY: live context and attribute struct.
        assert_eq!(unsafe { set(ctx, &mut attr) }, ncclResult_t::ncclSuccess);
        let first = c.net_attr().expect("hints stored");
        assert_eq!(c.pattern.get(), Pattern::AllToAll);
        let (logged, allocated) = (lines(&log), allocs());
        for _ in 0..REPEATS {
            // SAFETY: as above.
            let rc = unsafe { set(ctx, &mut attr) };
            assert_eq!(rc, ncclResult_t::ncclSuccess);
        }
        let (logged, allocated) = (lines(&log) - logged, allocs() - allocated);
        assert_eq!(
            (logged, allocated),
            (0, 0),
            "v{version}: {REPEATS} identical setNetAttr calls logged {logged} lines and allocated {allocated} times"
        );
        assert_eq!(c.net_attr(), Some(first));
        assert_eq!(c.pattern.get(), Pattern::AllToAll);
        // A change is still taken (and logged).
        attr.op = 1 << 4;
        let before = lines(&log);
        // SAFETY: as above.
        assert_eq!(unsafe { set(ctx, &mut attr) }, ncclResult_t::ncclSuccess);
        assert_eq!(c.pattern.get(), Pattern::Collective);
        assert!(lines(&log) > before, "a change of pattern is logged");
        let finalize = if version == 11 {
            ncclNetPlugin_v11.0.finalize.unwrap()
        } else {
            ncclNetPlugin_v12.0.finalize.unwrap()
        };
        // SAFETY: ctx from init, finalized once.
        assert_eq!(unsafe { finalize(ctx) }, ncclResult_t::ncclSuccess);
    }
}
