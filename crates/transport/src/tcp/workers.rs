//! Helper threads for the TCP data streams (NCCL net_socket's NCCL_SOCKET_NTHREADS and
//! NCCL_NSOCKS_PERTHREAD): the calling thread hands whole segment transfers to them through rings.
//!
//! The engine still decides which stream carries which segment; a helper only moves the bytes of
//! the segments it is handed, in order, on the streams it serves (stream `i` -> thread `i %
//! threads`, as net_socket's `nextFd % nThreads`). Each stream has a single-producer
//! single-consumer ring of `outstanding` task slots allocated with the pool: posting a task is a
//! slot write and one atomic store (plus an eventfd write when the helper sleeps), completion is
//! one atomic load, so isend/irecv/test never wait on a helper and allocate nothing per segment.
//! A helper waits in poll(2) on its streams and its eventfd when nothing can move. Threads start
//! with the first segment of at least [`MIN_CHUNK_BYTES`] on a comm and are stopped and joined
//! when the comm is dropped.

use std::cell::UnsafeCell;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::wire::SEG_HEADER_BYTES;

/// net_socket's MAX_THREADS: helper threads per comm at most (NCCL_SOCKET_NTHREADS above it is
/// lowered to it with a warning).
pub const MAX_THREADS: u32 = 16;
/// net_socket's MAX_SOCKETS: threads x streams per thread at most.
pub const MAX_SOCKETS: u32 = 64;
/// net_socket's MIN_CHUNKSIZE: transfers smaller than this stay on the calling thread (net_socket
/// never cuts a message into tasks smaller than 64 KiB).
pub const MIN_CHUNK_BYTES: usize = 64 * 1024;

/// Smallest segment handed to a helper: MIN_CHUNK_BYTES, or NCCL_DQPLB_DEBUG_TCP_HELPER_MIN_BYTES.
pub(crate) fn hand_off_min() -> usize {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        std::env::var("NCCL_DQPLB_DEBUG_TCP_HELPER_MIN_BYTES")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(MIN_CHUNK_BYTES)
            .max(1)
    })
}

/// Which sides start helpers: NCCL_DQPLB_DEBUG_TCP_HELPER_SIDES = send, recv or both (default).
pub(crate) fn side_enabled(send: bool) -> bool {
    static SIDES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let v = SIDES.get_or_init(|| {
        std::env::var("NCCL_DQPLB_DEBUG_TCP_HELPER_SIDES").unwrap_or_else(|_| "both".into())
    });
    match v.as_str() {
        "send" => send,
        "recv" => !send,
        _ => true,
    }
}

/// How many helper threads a comm uses for its data streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadPlan {
    /// Helper threads (0: the calling thread moves every byte, as before).
    pub threads: u32,
    /// NCCL_NSOCKS_PERTHREAD after its limits (reported; our stream count is the plan's QPs).
    pub streams_per_thread: u32,
}

impl ThreadPlan {
    /// No helper threads.
    pub const OFF: ThreadPlan = ThreadPlan {
        threads: 0,
        streams_per_thread: 1,
    };

    /// net_socket's ncclNetSocketGetNsockNthread (src/transport/net_socket.cc; these limits and
    /// vendors from NCCL 2.5 through 2.2x, where an unknown NIC gets 0 threads; 2.4 gave it 1)
    /// over the variables' values (None: unset or -2, auto) and the NIC's PCI vendor. Auto: AWS
    /// ENA (0x1d0f) 2 threads x 8 sockets, gVNIC (0x1ae0) 4 x 1, else 0 threads (the calling
    /// thread moves every byte: on a 2-core host helpers lost to it, docs/performance.md).
    /// Returns the plan and the warnings NCCL would print.
    pub fn resolve(
        nthreads: Option<i64>,
        nsocks: Option<i64>,
        vendor: Option<&str>,
    ) -> (ThreadPlan, Vec<String>) {
        let mut warn = Vec::new();
        let (auto_nt, auto_ns) = match vendor.map(str::trim) {
            Some("0x1d0f") => (2, 8),
            Some("0x1ae0") => (4, 1),
            _ => (0, 1),
        };
        let nt = match nthreads {
            Some(n) if n > i64::from(MAX_THREADS) => {
                warn.push(format!("NCCL_SOCKET_NTHREADS={n} is greater than the maximum allowed, setting to {MAX_THREADS}"));
                MAX_THREADS
            }
            Some(n) if n >= 0 => n as u32,
            _ => auto_nt,
        };
        let mut ns = match nsocks {
            Some(n) if n >= 1 => n.min(i64::from(MAX_SOCKETS)) as u32,
            _ => auto_ns,
        };
        if nt > 0 && nt * ns > MAX_SOCKETS {
            ns = MAX_SOCKETS / nt;
            warn.push(format!("the total number of sockets is greater than the maximum allowed, setting NCCL_NSOCKS_PERTHREAD to {ns}"));
        }
        (
            ThreadPlan {
                threads: nt,
                streams_per_thread: ns.max(1),
            },
            warn,
        )
    }

    /// The threads a comm with `streams` data streams starts: the plan's count, never more than
    /// there are streams (our stream count is the plan's QPs, not threads x sockets per thread:
    /// stream i is served by thread i % threads, as net_socket deals its sockets).
    pub fn for_streams(&self, streams: usize) -> usize {
        self.threads.min(streams as u32).min(MAX_THREADS) as usize
    }

    /// The plan from NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD and the vendor of the interface
    /// that holds `local` (warnings are logged).
    pub fn from_env(local: Option<IpAddr>) -> ThreadPlan {
        let num = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|&v| v != -2)
        };
        let vendor = local.and_then(vendor_of);
        let (plan, warns) = ThreadPlan::resolve(
            num("NCCL_SOCKET_NTHREADS"),
            num("NCCL_NSOCKS_PERTHREAD"),
            vendor.as_deref(),
        );
        for w in warns {
            tracing::warn!(target: "dqplb::net", "NET/Socket: {w}");
        }
        plan
    }
}

/// PCI vendor id ("0x1d0f") of the interface holding address `ip`, from sysfs.
fn vendor_of(ip: IpAddr) -> Option<String> {
    let ifs = super::iface::system_interfaces().ok()?;
    let (name, _, _) = ifs.into_iter().find(|(_, a, _)| *a == ip)?;
    std::fs::read_to_string(format!("/sys/class/net/{name}/device/vendor"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// One transfer handed to a helper: header bytes then payload (send), or payload only (receive).
#[derive(Clone, Copy)]
struct Task {
    hdr: [u8; SEG_HEADER_BYTES],
    hdr_len: usize,
    ptr: *mut u8,
    len: usize,
}

const EMPTY: Task = Task {
    hdr: [0; SEG_HEADER_BYTES],
    hdr_len: 0,
    ptr: std::ptr::null_mut(),
    len: 0,
};

/// Cancel states of a lane.
const RUN: u8 = 0;
const CANCEL: u8 = 1;
const CANCELLED: u8 = 2;

/// What a helper reports about a lane it stopped on.
const EOF: i32 = -1;

/// One data stream's ring. The caller writes `tasks[posted % cap]` then bumps `posted`; the helper
/// reads tasks `done..posted` and bumps `done` after each. `cancel`/`error` stop the helper
/// touching the lane (its socket and its buffers).
struct Lane {
    fd: AtomicI32,
    send: bool,
    tasks: Box<[UnsafeCell<Task>]>,
    posted: AtomicUsize,
    done: AtomicUsize,
    /// Bytes of the current task moved so far (the helper's; read by the caller after a cancel).
    offset: AtomicUsize,
    error: AtomicI32,
    cancel: AtomicU8,
    worker: usize,
}

struct Sleeper {
    efd: OwnedFd,
    sleeping: AtomicBool,
}

struct Shared {
    lanes: Vec<Lane>,
    sleepers: Vec<Sleeper>,
    stop: AtomicBool,
    /// Test hook: microseconds a helper waits between finishing a task and publishing it.
    delay_done_us: std::sync::atomic::AtomicU64,
}

// SAFETY: a task slot is written by the caller only while it is outside `done..posted` (not the
// helper's), and read by the one helper only inside it; the Release store of `posted` / Acquire
// load by the helper (and `done` the other way) order those accesses. The raw pointers in tasks
// are user buffers the comm keeps valid until their request completes or the comm is closed,
// and the comm cancels a lane (waiting for the helper to let go) before either can happen early.
unsafe impl Sync for Shared {}
// SAFETY: as above; the pointers are only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// The helper threads of one comm and the rings of its data streams.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
    /// Per lane: tasks the caller has seen completed (`done` as last read).
    taken: Vec<usize>,
}

/// A helper lane failed: the errno, or None for EOF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneError(pub Option<i32>);

impl LaneError {
    pub(crate) fn to_io(self) -> std::io::Error {
        match self.0 {
            Some(e) => std::io::Error::from_raw_os_error(e),
            None => std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "peer closed"),
        }
    }
}

impl Pool {
    /// Starts `threads` helpers (>= 1) for `fds` (send: writes, else reads), each ring holding
    /// `depth` tasks. Err: a thread or eventfd could not be made (the caller goes on without).
    pub(crate) fn start(
        fds: &[RawFd],
        send: bool,
        threads: usize,
        depth: usize,
        name: &str,
    ) -> std::io::Result<Pool> {
        let threads = threads.clamp(1, fds.len().max(1));
        let depth = depth.max(1);
        let lanes = fds
            .iter()
            .enumerate()
            .map(|(i, &fd)| Lane {
                fd: AtomicI32::new(fd),
                send,
                tasks: (0..depth).map(|_| UnsafeCell::new(EMPTY)).collect(),
                posted: AtomicUsize::new(0),
                done: AtomicUsize::new(0),
                offset: AtomicUsize::new(0),
                error: AtomicI32::new(0),
                cancel: AtomicU8::new(RUN),
                worker: i % threads,
            })
            .collect();
        let mut sleepers = Vec::with_capacity(threads);
        for _ in 0..threads {
            // SAFETY: plain eventfd(2); the result is checked before it is owned.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            sleepers.push(Sleeper {
                // SAFETY: fd is a fresh descriptor nobody else owns.
                efd: unsafe { OwnedFd::from_raw_fd(fd) },
                sleeping: AtomicBool::new(false),
            });
        }
        let shared = Arc::new(Shared {
            lanes,
            sleepers,
            stop: AtomicBool::new(false),
            delay_done_us: std::sync::atomic::AtomicU64::new(0),
        });
        let mut pool = Pool {
            shared,
            handles: Vec::with_capacity(threads),
            taken: vec![0; fds.len()],
        };
        for w in 0..threads {
            let s = Arc::clone(&pool.shared);
            let h = std::thread::Builder::new()
                .name(format!("dqplb-{name}{w}"))
                .spawn(move || run(&s, w))?;
            pool.handles.push(h);
        }
        Ok(pool)
    }

    #[cfg(test)]
    /// Test hook: helpers publish each finished task `us` microseconds late (so the peer's ack
    /// for a segment arrives before its completion is seen).
    pub(crate) fn debug_delay_done(&self, us: u64) {
        self.shared.delay_done_us.store(us, Ordering::Relaxed);
    }

    pub(crate) fn threads(&self) -> usize {
        self.handles.len()
    }

    /// Tasks handed to lane `i` and not yet seen completed by `completed`.
    #[cfg(test)]
    pub(crate) fn pending(&self, i: usize) -> usize {
        self.shared.lanes[i].posted.load(Ordering::Relaxed) - self.taken[i]
    }

    /// Hands lane `i` a transfer of `hdr` then `len` bytes at `ptr`; false when its ring is full.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid (and untouched by the caller for a receive) until the task
    /// is reported by `completed`, or `cancel` returned for the lane, or the pool is dropped.
    pub(crate) unsafe fn post(&mut self, i: usize, hdr: &[u8], ptr: *mut u8, len: usize) -> bool {
        let l = &self.shared.lanes[i];
        let p = l.posted.load(Ordering::Relaxed);
        if p - self.taken[i] >= l.tasks.len() {
            return false;
        }
        let mut t = Task {
            hdr: [0; SEG_HEADER_BYTES],
            hdr_len: hdr.len().min(SEG_HEADER_BYTES),
            ptr,
            len,
        };
        t.hdr[..t.hdr_len].copy_from_slice(&hdr[..t.hdr_len]);
        // SAFETY: slot p is outside done..posted, so the helper does not read it (see Shared).
        unsafe { *l.tasks[p % l.tasks.len()].get() = t };
        l.posted.store(p + 1, Ordering::SeqCst);
        // A helper still busy with an older task of this lane stores its `done` after this load in
        // the SeqCst order, then loads `posted` and finds this task: no wake-up (syscall) needed.
        if l.done.load(Ordering::SeqCst) == p {
            self.wake(l.worker);
        }
        true
    }

    fn wake(&self, w: usize) {
        let s = &self.shared.sleepers[w];
        if s.sleeping.load(Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: 8-byte write of a valid u64 to our eventfd; a full counter only means the
            // helper is awake already.
            let _ = unsafe {
                libc::write(
                    s.efd.as_raw_fd(),
                    &one as *const u64 as *const libc::c_void,
                    8,
                )
            };
        }
    }

    /// Tasks of lane `i` completed since the last call (in posting order), or the lane's error.
    pub(crate) fn completed(&mut self, i: usize) -> Result<usize, LaneError> {
        let l = &self.shared.lanes[i];
        let d = l.done.load(Ordering::Acquire);
        let n = d - self.taken[i];
        self.taken[i] = d;
        if n == 0 {
            let e = l.error.load(Ordering::Acquire);
            if e != 0 {
                return Err(LaneError((e != EOF).then_some(e)));
            }
        }
        Ok(n)
    }

    /// Stops lane `i` and forgets its tasks: the helper lets go of the socket and the buffers
    /// before this returns (it notices within one non-blocking syscall or at once when asleep).
    /// Returns the bytes of the oldest unfinished task it had moved. Then serves `fd`.
    pub(crate) fn cancel(&mut self, i: usize, fd: RawFd) -> usize {
        let l = &self.shared.lanes[i];
        let moved = if l.posted.load(Ordering::Relaxed) != l.done.load(Ordering::Acquire)
            && l.error.load(Ordering::Acquire) == 0
        {
            l.cancel.store(CANCEL, Ordering::SeqCst);
            let s = &self.shared.sleepers[l.worker];
            s.sleeping.store(true, Ordering::SeqCst);
            self.wake(l.worker);
            while l.cancel.load(Ordering::Acquire) != CANCELLED {
                std::thread::yield_now();
            }
            l.offset.load(Ordering::Acquire)
        } else {
            0
        };
        let d = l.done.load(Ordering::Acquire);
        l.posted.store(d, Ordering::SeqCst);
        self.taken[i] = d;
        l.offset.store(0, Ordering::Relaxed);
        l.fd.store(fd, Ordering::Relaxed);
        l.error.store(0, Ordering::Relaxed);
        l.cancel.store(RUN, Ordering::SeqCst);
        moved
    }
}

impl Drop for Pool {
    /// Stops and joins every helper (each notices at once: it is woken through its eventfd).
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for w in 0..self.shared.sleepers.len() {
            self.shared.sleepers[w]
                .sleeping
                .store(true, Ordering::SeqCst);
            self.wake(w);
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Moves bytes of the current task of lane `l`; Ok(true) when it finished, Ok(false) would block.
fn step_task(l: &Lane, t: &Task) -> Result<bool, i32> {
    let fd = l.fd.load(Ordering::Relaxed);
    let total = t.hdr_len + t.len;
    loop {
        let off = l.offset.load(Ordering::Relaxed);
        if off >= total {
            return Ok(true);
        }
        let r = if l.send {
            let mut iov = [
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                },
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                },
            ];
            let mut n = 0;
            if off < t.hdr_len {
                iov[0] = libc::iovec {
                    iov_base: t.hdr[off..].as_ptr() as *mut libc::c_void,
                    iov_len: t.hdr_len - off,
                };
                n = 1;
            }
            let poff = off.saturating_sub(t.hdr_len);
            iov[n] = libc::iovec {
                // SAFETY: poff < len; the task's buffer is valid for len bytes (Pool::post).
                iov_base: unsafe { t.ptr.add(poff) } as *mut libc::c_void,
                iov_len: t.len - poff,
            };
            n += 1;
            // SAFETY: a msghdr over the iovecs above, which live across the call.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = n as _;
            // SAFETY: fd is the lane's socket (kept open while the lane runs); msg is valid.
            unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) }
        } else {
            // SAFETY: the buffer is valid for writes of len bytes (Pool::post); off < len.
            unsafe {
                libc::recv(
                    fd,
                    t.ptr.add(off) as *mut libc::c_void,
                    t.len - off,
                    libc::MSG_DONTWAIT,
                )
            }
        };
        if r > 0 {
            l.offset.store(off + r as usize, Ordering::Relaxed);
            continue;
        }
        if r == 0 {
            return Err(EOF);
        }
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if e == libc::EINTR {
            continue;
        }
        if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
            return Ok(false);
        }
        return Err(e);
    }
}

/// A helper: runs the tasks of its lanes, waits in poll(2) on the blocked ones and its eventfd.
fn run(s: &Shared, me: usize) {
    let mine: Vec<&Lane> = s.lanes.iter().filter(|l| l.worker == me).collect();
    let efd = s.sleepers[me].efd.as_raw_fd();
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(mine.len() + 1);
    loop {
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        fds.clear();
        fds.push(libc::pollfd {
            fd: efd,
            events: libc::POLLIN,
            revents: 0,
        });
        let mut moved = false;
        for l in &mine {
            if l.cancel.load(Ordering::Acquire) == CANCEL {
                l.cancel.store(CANCELLED, Ordering::Release);
                continue;
            }
            if l.cancel.load(Ordering::Acquire) != RUN || l.error.load(Ordering::Acquire) != 0 {
                continue;
            }
            loop {
                let d = l.done.load(Ordering::Relaxed);
                if d == l.posted.load(Ordering::SeqCst) {
                    break;
                }
                // SAFETY: slot d is inside done..posted: the caller does not write it (Shared).
                let t = unsafe { *l.tasks[d % l.tasks.len()].get() };
                let before = l.offset.load(Ordering::Relaxed);
                match step_task(l, &t) {
                    Ok(true) => {
                        let delay = s.delay_done_us.load(Ordering::Relaxed);
                        if delay > 0 {
                            std::thread::sleep(std::time::Duration::from_micros(delay));
                        }
                        l.offset.store(0, Ordering::Relaxed);
                        l.done.store(d + 1, Ordering::SeqCst);
                        moved = true;
                    }
                    Ok(false) => {
                        moved |= l.offset.load(Ordering::Relaxed) != before;
                        fds.push(libc::pollfd {
                            fd: l.fd.load(Ordering::Relaxed),
                            events: if l.send { libc::POLLOUT } else { libc::POLLIN },
                            revents: 0,
                        });
                        break;
                    }
                    Err(e) => {
                        l.offset.store(0, Ordering::Relaxed);
                        l.error.store(e, Ordering::Release);
                        break;
                    }
                }
                if l.cancel.load(Ordering::Acquire) != RUN {
                    break;
                }
            }
        }
        if moved {
            continue;
        }
        let sl = &s.sleepers[me].sleeping;
        sl.store(true, Ordering::SeqCst);
        // Work posted (or a cancel asked) after the scan above: go round again instead of sleeping.
        let fresh = s.stop.load(Ordering::SeqCst)
            || mine.iter().any(|l| {
                l.cancel.load(Ordering::SeqCst) == CANCEL
                    || (l.error.load(Ordering::SeqCst) == 0
                        && l.cancel.load(Ordering::SeqCst) == RUN
                        && l.posted.load(Ordering::SeqCst) != l.done.load(Ordering::Relaxed)
                        && !fds[1..]
                            .iter()
                            .any(|p| p.fd == l.fd.load(Ordering::Relaxed)))
            });
        if !fresh {
            // SAFETY: fds is a valid pollfd array of its length.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
            if fds[0].revents != 0 {
                let mut v: u64 = 0;
                // SAFETY: 8-byte read into a u64 from our non-blocking eventfd.
                let _ = unsafe { libc::read(efd, &mut v as *mut u64 as *mut libc::c_void, 8) };
            }
        }
        sl.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_follows_net_socket() {
        // Unset, no known NIC: no helpers (NCCL 2.5+).
        let (p, w) = ThreadPlan::resolve(None, None, Some("0x8086"));
        assert!(w.is_empty());
        assert_eq!(p, ThreadPlan::OFF);
        assert_eq!(ThreadPlan::resolve(None, None, None).0.for_streams(4), 0);
        // Set: that many, never more than the streams.
        let (p, _) = ThreadPlan::resolve(Some(4), None, None);
        assert_eq!((p.for_streams(8), p.for_streams(2)), (4, 2));
        // AWS ENA: 2 x 8; gVNIC 4 x 1.
        let (p, _) = ThreadPlan::resolve(None, None, Some("0x1d0f\n"));
        assert_eq!((p.threads, p.streams_per_thread), (2, 8));
        let (p, _) = ThreadPlan::resolve(None, None, Some("0x1ae0"));
        assert_eq!((p.threads, p.streams_per_thread), (4, 1));
        assert_eq!(p.for_streams(2), 2);
        // 0 turns helpers off.
        let (p, _) = ThreadPlan::resolve(Some(0), None, None);
        assert_eq!(p.for_streams(4), 0);
        // Above MAX_THREADS: lowered with NCCL's warning.
        let (p, w) = ThreadPlan::resolve(Some(40), Some(1), None);
        assert_eq!(p.threads, 16);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("NCCL_SOCKET_NTHREADS=40"), "{w:?}");
        // threads x streams above MAX_SOCKETS: streams per thread lowered.
        let (p, w) = ThreadPlan::resolve(Some(16), Some(8), None);
        assert_eq!(p.streams_per_thread, 4);
        assert!(w[0].contains("NCCL_NSOCKS_PERTHREAD to 4"), "{w:?}");
    }

    #[test]
    fn a_pool_moves_bytes_in_order_and_joins_its_helpers() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let mut src: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; src.len() + 8];
        let mut tx = Pool::start(&[a.as_raw_fd()], true, 1, 4, "t").unwrap();
        let mut rx = Pool::start(&[b.as_raw_fd()], false, 1, 4, "r").unwrap();
        assert_eq!(tx.threads() + rx.threads(), 2);
        // SAFETY: src and dst outlive both pools (dropped below before them).
        unsafe {
            assert!(tx.post(0, b"HDRHDRHD", src.as_mut_ptr(), src.len()));
            assert!(rx.post(0, &[], dst.as_mut_ptr(), dst.len()));
        }
        let t0 = std::time::Instant::now();
        let (mut s, mut r) = (0, 0);
        while s + r < 2 {
            s += tx.completed(0).unwrap();
            r += rx.completed(0).unwrap();
            assert!(t0.elapsed().as_secs() < 20, "transfer hung");
            std::thread::yield_now();
        }
        assert_eq!(&dst[..8], b"HDRHDRHD");
        assert_eq!(&dst[8..], &src[..]);
        // Dropping joins the helpers (a hang here is a helper that missed its stop).
        drop(tx);
        drop(rx);
    }

    #[test]
    fn cancel_lets_go_of_a_blocked_lane_and_reports_progress() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut big = vec![1u8; 64 << 20];
        let mut tx = Pool::start(&[a.as_raw_fd()], true, 1, 2, "c").unwrap();
        // SAFETY: big outlives the pool; the lane is cancelled before big is touched again.
        unsafe { assert!(tx.post(0, &[], big.as_mut_ptr(), big.len())) };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(tx.completed(0), Ok(0));
        let moved = tx.cancel(0, a.as_raw_fd());
        assert!(moved > 0 && moved < big.len(), "{moved}");
        assert_eq!(tx.pending(0), 0);
        big[0] = 2;
    }

    #[test]
    fn a_closed_peer_is_reported_as_the_lanes_error() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut rx = Pool::start(&[a.as_raw_fd()], false, 1, 2, "e").unwrap();
        // SAFETY: buf outlives the pool.
        unsafe { assert!(rx.post(0, &[], buf.as_mut_ptr(), buf.len())) };
        drop(b);
        let t0 = std::time::Instant::now();
        loop {
            match rx.completed(0) {
                Ok(0) => {}
                Ok(n) => panic!("{n} completed"),
                Err(e) => {
                    assert_eq!(e, LaneError(None));
                    break;
                }
            }
            assert!(t0.elapsed().as_secs() < 20);
            std::thread::yield_now();
        }
    }
}
