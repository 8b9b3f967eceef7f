//! The proxy progress thread: the ncclProxyArgs model and sendProxyProgress of src/transport/net.cc
//! (2.20-2.30), the progress-thread loop, and the GPU side of a send (fill, then isend).

use super::nccl::{ok, P};
use super::plan::{self, Msg, Proto, NCCL_STEPS, P2P_CHUNK, SHARED_STEPS};
use super::setup::Setup;
use dqplb_test_support::nccl::NetV8;
use std::os::raw::c_int;
use std::time::{Duration, Instant};

pub(super) const STEPS: usize = NCCL_STEPS as usize;
/// NCCL_ALGO_RING (src/include/device.h).
pub(crate) const ALGO_RING: u32 = 1;

/// `if (!checkedNetAttr++) setXferNetAttrs(proxyState, args, send)` (send/recvProxyProgress,
/// net.cc 2.28-2.30): the op's hints once, before its first isend/irecv. `op` = (collAPI,
/// nPeers, nChannels, algorithm, protocol).
pub(super) fn check_net_attr(
    checked: &mut bool,
    send: bool,
    op: (u32, i32, i32, u32, u32),
) -> Result<(), String> {
    if *checked {
        return Ok(());
    }
    *checked = true;
    super::versions::xfer_net_attr(send, op.0, op.1, op.2, op.3, op.4)
}

/// ncclProxySubArgs, reduced.
pub(crate) struct Sub {
    pub conn: usize,
    pub ch: usize,
    /// The messages of this sub in order (what the sender's GPU produces) and their seeds.
    pub msgs: Vec<Msg>,
    pub seeds: Vec<u64>,
    pub nsteps: u64,
    /// sub->nbytes: stepSize*sliceSteps for collectives, the whole p2p size for p2p.
    pub nbytes: usize,
    pub(super) base: u64,
    pub(super) posted: u64,
    pub(super) transmitted: u64,
    pub(super) received: u64,
    pub(super) done: u64,
    pub(super) requests: [P; STEPS],
    pub(super) mhandle: P,
    pub(super) group_size: usize,
    /// recvRequestsCache / recvRequestsSubCount (meaningful in a group's first sub).
    pub(super) cache: [P; STEPS],
    pub(super) cache_subcount: c_int,
    /// connFifo[slot].offset (shared buffers) and, receive side, the size test() reported.
    pub(super) fifo_off: [usize; STEPS],
    pub(super) got: [usize; STEPS],
    /// Emulated GPU: sendMem->head on the receive side (steps consumed); messages filled.
    pub(super) head: u64,
    pub(super) filled: usize,
    /// sub->pHandles: the per-step profiler handles whose addresses isend gets as phandle.
    pub(super) phandles: [u64; STEPS],
    /// (index, count) of this sub in the shared pool when its args is one of several that share
    /// the pool (ranks of one process sharing a proxy); None: its place in its own args.
    pub(crate) pool: Option<(u64, u64)>,
}

impl Sub {
    pub(crate) fn new(
        conn: usize,
        ch: usize,
        msgs: Vec<Msg>,
        seeds: Vec<u64>,
        slice_steps: u64,
        nbytes: usize,
    ) -> Sub {
        assert_eq!(msgs.len(), seeds.len());
        Sub {
            conn,
            ch,
            nsteps: msgs.len() as u64 * slice_steps,
            msgs,
            seeds,
            nbytes,
            base: 0,
            posted: 0,
            transmitted: 0,
            received: 0,
            done: 0,
            requests: [std::ptr::null_mut(); STEPS],
            mhandle: std::ptr::null_mut(),
            group_size: 1,
            cache: [std::ptr::null_mut(); STEPS],
            cache_subcount: 0,
            fifo_off: [0; STEPS],
            got: [0; STEPS],
            head: 0,
            filled: 0,
            phandles: [0; STEPS],
            pool: None,
        }
    }
}

/// (index of sub `s` in the shared pool, subs sharing the pool): `maxDepth = NCCL_SHARED_STEPS /
/// nsubs` and the slot offsets of sharedBuffersGet count every sub of the pool.
pub(super) fn pool_place(a: &Args, s: usize) -> (u64, u64) {
    a.subs[s].pool.unwrap_or((s as u64, a.subs.len() as u64))
}

/// ncclProxyArgs, reduced.
pub(crate) struct Args {
    pub send: bool,
    pub proto: Proto,
    pub slice_steps: u64,
    pub chunk_steps: u64,
    pub shared: bool,
    pub subs: Vec<Sub>,
    pub(super) ready: bool,
    pub(super) ndone: usize,
    /// args->collAPI (ncclFunc_t), nPeers, nChannels and algorithm, for setXferNetAttrs.
    pub coll_api: u32,
    pub npeers: i32,
    pub nchannels: i32,
    pub algo: u32,
    /// The checkedNetAttr of send/recvProxyProgress: hints given before the first isend/irecv.
    pub(super) checked_attr: bool,
}

impl Args {
    pub(crate) fn new(
        send: bool,
        proto: Proto,
        slice_steps: u64,
        chunk_steps: u64,
        shared: bool,
        subs: Vec<Sub>,
    ) -> Args {
        Args {
            send,
            proto,
            slice_steps,
            chunk_steps,
            shared,
            subs,
            ready: false,
            ndone: 0,
            coll_api: super::versions::FUNC_ALLREDUCE,
            npeers: 1,
            nchannels: 1,
            algo: ALGO_RING,
            checked_attr: false,
        }
    }

    fn finished(&self) -> bool {
        self.ready && self.ndone == self.subs.len()
    }
}

#[derive(Default, Debug, Clone)]
pub(crate) struct Counters {
    pub isend: u64,
    /// Bytes of the isends the plugin accepted.
    pub isend_bytes: u64,
    pub isend_null: u64,
    pub irecv: u64,
    pub irecv_null: u64,
    pub irecv_grouped: u64,
    pub test: u64,
    pub iflush: u64,
    /// iflush calls that returned a request (NULL means nothing to wait for).
    pub iflush_req: u64,
    pub consumed: u64,
    pub bytes_verified: u64,
    pub zero_byte_msgs: u64,
}

/// When to stop as ncclCommAbort does: the progress thread exits on abortFlag mid-operation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AbortAt {
    pub sends_posted: u64,
    pub recvs_completed: u64,
}

pub(crate) struct Engine<'a, 'n> {
    pub s: &'a mut Setup<'n>,
    pub c: Counters,
    /// resources->useGdr && resources->needFlush: host buffers are never flushed (recvProxyProgress
    /// only calls iflush when a GDR buffer received data with the SIMPLE protocol).
    pub(super) use_gdr: bool,
    /// resources->maxRecvs, from getProperties in recvProxySetup.
    pub(super) max_recvs: usize,
    /// `if (sub->nbytes < sizes[subCount]) sizes[subCount] = sub->nbytes;` in recvProxyProgress:
    /// present in 2.20-2.28, commented out in 2.30.
    pub(super) cap_nbytes: bool,
}

pub(super) fn roundup(x: u64, m: u64) -> u64 {
    x.div_ceil(m) * m
}

/// sharedBuffersGet: offset of a shared slot in the per-direction pool.
pub(super) fn shared_offset(ch: usize, slot: u64) -> usize {
    P2P_CHUNK * (ch * SHARED_STEPS as usize + slot as usize)
}

impl<'a, 'n> Engine<'a, 'n> {
    pub(crate) fn new(s: &'a mut Setup<'n>, max_recvs: usize, cap_nbytes: bool) -> Engine<'a, 'n> {
        Engine {
            s,
            c: Counters::default(),
            use_gdr: false,
            max_recvs,
            cap_nbytes,
        }
    }

    pub(super) fn net(&self) -> &'n NetV8 {
        self.s.net
    }

    /// ncclProxyProgress's loop (progressOps in src/proxy.cc): every active op's progress
    /// function once per pass, until all are done; `abort` stops early, leaving requests posted.
    pub(crate) fn run(
        &mut self,
        ops: &mut [Args],
        limit: Duration,
        abort: Option<AbortAt>,
    ) -> Result<(), String> {
        let start = Instant::now();
        let mut last_progress = Instant::now();
        loop {
            let mut idle = true;
            for a in ops.iter_mut() {
                if a.finished() {
                    continue;
                }
                let active = if a.send {
                    self.send_progress(a)?
                } else {
                    self.recv_progress(a)?
                };
                idle &= !active;
            }
            if let Some(at) = abort {
                let (mut sent, mut got) = (0, 0);
                for a in ops.iter() {
                    for s in &a.subs {
                        if a.send {
                            sent += s.transmitted / a.slice_steps;
                        } else {
                            got += s.received / a.slice_steps;
                        }
                    }
                }
                if sent >= at.sends_posted && got >= at.recvs_completed {
                    return Ok(());
                }
            }
            if ops.iter().all(|a| a.finished()) {
                return Ok(());
            }
            if !idle {
                last_progress = Instant::now();
            } else {
                std::thread::yield_now();
            }
            if last_progress.elapsed() > limit || start.elapsed() > 4 * limit {
                return Err(format!("progress stalled for {limit:?}: {}", dump(ops)));
            }
        }
    }

    /// sendProxyProgress (src/transport/net.cc, 2.20-2.30): per sub, one action per call (post a
    /// credit while posted < done + maxDepth, maxDepth = min(NCCL_STEPS, NCCL_SHARED_STEPS/nsubs);
    /// else isend the next ready step, tag = tpRank, retried while *request comes back NULL;
    /// else test() the oldest isend). Returns whether anything moved (args->idle == 0).
    fn send_progress(&mut self, a: &mut Args) -> Result<bool, String> {
        let net = self.net();
        let p = a.proto as usize;
        if !a.ready {
            for sub in a.subs.iter_mut() {
                let conn = &mut self.s.conns[sub.conn];
                // Round to next multiple of chunkSteps; set step base for the next op.
                sub.base = roundup(conn.step, a.chunk_steps);
                conn.step = sub.base + sub.nsteps;
                sub.mhandle = conn.mh[p];
            }
            a.ready = true;
        }
        let mut active = false;
        let nsubs = pool_place(a, 0).1;
        let max_depth = NCCL_STEPS.min(SHARED_STEPS / nsubs);
        let step_size = a.proto.step_size();
        let isend = net.isend.ok_or("isend is NULL")?;
        let test = net.test.ok_or("test is NULL")?;
        for (s, sub) in a.subs.iter_mut().enumerate() {
            if sub.done == sub.nsteps {
                continue;
            }
            let conn = &self.s.conns[sub.conn];
            // Post buffers to the GPU (credits); shared buffers get their slot offset here.
            if sub.posted < sub.nsteps && sub.posted < sub.done + max_depth {
                let slot = ((sub.base + sub.posted) % NCCL_STEPS) as usize;
                if a.shared {
                    let shared_slot = sub.posted % max_depth;
                    let index = sub.pool.map_or(s as u64, |p| p.0);
                    sub.fifo_off[slot] = shared_offset(sub.ch, shared_slot * nsubs + index);
                }
                sub.posted += a.slice_steps;
                active = true;
                continue;
            }
            // Data from the GPU ready: send it to the network.
            if sub.transmitted < sub.posted && sub.transmitted < sub.done + NCCL_STEPS {
                let slot = ((sub.base + sub.transmitted) % NCCL_STEPS) as usize;
                let k = (sub.transmitted / a.slice_steps) as usize;
                let m = sub.msgs[k];
                let (b, off) = if a.shared {
                    (conn.buf[p].expect("pool"), sub.fifo_off[slot])
                } else {
                    (conn.buf[p].expect("buffer"), slot * step_size)
                };
                let buf = &self.s.bufs[b];
                if sub.filled <= k {
                    // Emulated GPU: the kernel has written the slot and set connFifo[slot].size.
                    // SAFETY: slot range inside the registered buffer; no send of it in flight.
                    plan::fill(unsafe { buf.slice(off, m.size) }, sub.seeds[k], m.abs);
                    sub.filled = k + 1;
                }
                let mut req: P = std::ptr::null_mut();
                // `if (!checkedNetAttr++) setXferNetAttrs(proxyState, args, 1)` right before
                // the first isend of the args (sendProxyProgress, net.cc 2.28-2.30).
                check_net_attr(
                    &mut a.checked_attr,
                    true,
                    (a.coll_api, a.npeers, a.nchannels, a.algo, a.proto as u32),
                )?;
                // phandle = &sub->pHandles[DIVUP(transmittedStepId, sliceSteps) % NCCL_STEPS].
                let ph =
                    &sub.phandles[(sub.transmitted.div_ceil(a.slice_steps) % NCCL_STEPS) as usize];
                super::versions::NEXT_PHANDLE.store(
                    ph as *const u64 as usize,
                    std::sync::atomic::Ordering::Relaxed,
                );
                // SAFETY: registered buffer, size <= stepSize*sliceSteps, tag = tpRank.
                ok("isend", unsafe {
                    isend(
                        conn.comm,
                        buf.ptr.add(off).cast(),
                        m.size as c_int,
                        conn.tag,
                        sub.mhandle,
                        &mut req,
                    )
                })?;
                self.c.isend += 1;
                sub.requests[slot] = req;
                if !req.is_null() {
                    self.c.isend_bytes += m.size as u64;
                    if m.size == 0 {
                        self.c.zero_byte_msgs += 1;
                    }
                    sub.transmitted += a.slice_steps;
                    active = true;
                    continue;
                }
                self.c.isend_null += 1;
            }
            // Has the network completed some sends? test() in posting order.
            if sub.done < sub.transmitted {
                let slot = ((sub.base + sub.done) % NCCL_STEPS) as usize;
                let (mut done, mut size): (c_int, c_int) = (0, -1);
                // SAFETY: request from isend, not yet reported done.
                ok("test(send)", unsafe {
                    test(sub.requests[slot], &mut done, &mut size)
                })?;
                self.c.test += 1;
                if done != 0 {
                    let k = (sub.done / a.slice_steps) as usize;
                    if size != sub.msgs[k].size as c_int {
                        return Err(format!(
                            "send test reported size {size}, isend size was {}",
                            sub.msgs[k].size
                        ));
                    }
                    sub.requests[slot] = std::ptr::null_mut();
                    sub.done += a.slice_steps;
                    active = true;
                    if sub.done == sub.nsteps {
                        a.ndone += 1;
                    }
                }
            }
        }
        Ok(active)
    }
}

/// After an abort: (sends posted but never tested to completion, receives posted but never
/// reported done): the requests the closes meet.
pub(crate) fn in_flight(ops: &[Args]) -> (u64, u64) {
    let (mut s, mut r) = (0, 0);
    for a in ops {
        for sub in &a.subs {
            if a.send {
                s += (sub.transmitted - sub.done) / a.slice_steps;
            } else {
                r += (sub.posted - sub.received) / a.slice_steps;
            }
        }
    }
    (s, r)
}

fn dump(ops: &[Args]) -> String {
    let mut out = String::new();
    for (i, a) in ops.iter().enumerate() {
        out += &format!(
            "\n  op {i} {} {:?}:",
            if a.send { "send" } else { "recv" },
            a.proto
        );
        for s in &a.subs {
            out += &format!(
                " [ch{} n{} posted{} tx{} rx{} done{}]",
                s.ch, s.nsteps, s.posted, s.transmitted, s.received, s.done
            );
        }
    }
    out
}
