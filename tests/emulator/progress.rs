//! The proxy progress thread: sendProxyProgress and recvProxyProgress of src/transport/net.cc
//! (2.20-2.30) over emulated ncclProxyArgs, with the GPU side (fill, read, head/tail) emulated.

use super::abi::{NetV8, PROXY_MAX_SUBS};
use super::nccl::{ok, P};
use super::plan::{self, Msg, Proto, NCCL_STEPS, P2P_CHUNK, SHARED_STEPS};
use super::setup::Setup;
use std::os::raw::c_int;
use std::time::{Duration, Instant};

const STEPS: usize = NCCL_STEPS as usize;

/// ncclProxySubArgs, reduced.
pub struct Sub {
    pub conn: usize,
    pub ch: usize,
    /// The messages of this sub in order (what the sender's GPU produces) and their seeds.
    pub msgs: Vec<Msg>,
    pub seeds: Vec<u64>,
    pub nsteps: u64,
    /// sub->nbytes: stepSize*sliceSteps for collectives, the whole p2p size for p2p.
    pub nbytes: usize,
    base: u64,
    posted: u64,
    transmitted: u64,
    received: u64,
    done: u64,
    requests: [P; STEPS],
    mhandle: P,
    group_size: usize,
    /// recvRequestsCache / recvRequestsSubCount (meaningful in a group's first sub).
    cache: [P; STEPS],
    cache_subcount: c_int,
    /// connFifo[slot].offset (shared buffers) and, receive side, the size test() reported.
    fifo_off: [usize; STEPS],
    got: [usize; STEPS],
    /// Emulated GPU: sendMem->head on the receive side (steps consumed); messages filled.
    head: u64,
    filled: usize,
}

impl Sub {
    pub fn new(
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
        }
    }
}

/// ncclProxyArgs, reduced.
pub struct Args {
    pub send: bool,
    pub proto: Proto,
    pub slice_steps: u64,
    pub chunk_steps: u64,
    pub shared: bool,
    pub subs: Vec<Sub>,
    ready: bool,
    ndone: usize,
}

impl Args {
    pub fn new(
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
        }
    }

    fn finished(&self) -> bool {
        self.ready && self.ndone == self.subs.len()
    }
}

#[derive(Default, Debug, Clone)]
pub struct Counters {
    pub isend: u64,
    pub isend_null: u64,
    pub irecv: u64,
    pub irecv_null: u64,
    pub irecv_grouped: u64,
    pub test: u64,
    pub iflush: u64,
    pub consumed: u64,
    pub bytes_verified: u64,
    pub zero_byte_msgs: u64,
}

/// When to stop as ncclCommAbort does: the progress thread exits on abortFlag mid-operation.
#[derive(Clone, Copy, Debug)]
pub struct AbortAt {
    pub sends_posted: u64,
    pub recvs_completed: u64,
}

pub struct Engine<'a, 'n> {
    pub s: &'a mut Setup<'n>,
    pub c: Counters,
    /// resources->useGdr && resources->needFlush: host buffers are never flushed (recvProxyProgress
    /// only calls iflush when a GDR buffer received data with the SIMPLE protocol).
    use_gdr: bool,
    /// resources->maxRecvs, from getProperties in recvProxySetup.
    max_recvs: usize,
    /// `if (sub->nbytes < sizes[subCount]) sizes[subCount] = sub->nbytes;` in recvProxyProgress:
    /// present in 2.20-2.28, commented out in 2.30.
    cap_nbytes: bool,
}

fn roundup(x: u64, m: u64) -> u64 {
    x.div_ceil(m) * m
}

/// sharedBuffersGet: offset of a shared slot in the per-direction pool.
fn shared_offset(ch: usize, slot: u64) -> usize {
    P2P_CHUNK * (ch * SHARED_STEPS as usize + slot as usize)
}

impl<'a, 'n> Engine<'a, 'n> {
    pub fn new(s: &'a mut Setup<'n>, max_recvs: usize, cap_nbytes: bool) -> Engine<'a, 'n> {
        Engine {
            s,
            c: Counters::default(),
            use_gdr: false,
            max_recvs,
            cap_nbytes,
        }
    }

    fn net(&self) -> &'n NetV8 {
        self.s.net
    }

    /// ncclProxyProgress's loop (progressOps in src/proxy.cc): every active op's progress
    /// function once per pass, until all are done; `abort` stops early, leaving requests posted.
    pub fn run(
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
        let nsubs = a.subs.len() as u64;
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
                    sub.fifo_off[slot] = shared_offset(sub.ch, shared_slot * nsubs + s as u64);
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

    /// recvProxyProgress (src/transport/net.cc, 2.20-2.30), its four passes in order, each
    /// returning early when it did something: post grouped irecvs, test the oldest receive (sizes
    /// array zeroed, then iflush for GDR buffers), test the flush and hand the step to the GPU,
    /// then irecvConsumed for steps the GPU consumed. Returns whether anything moved.
    fn recv_progress(&mut self, a: &mut Args) -> Result<bool, String> {
        let net = self.net();
        let p = a.proto as usize;
        if !a.ready {
            self.recv_ready(a);
        }
        let nsubs = a.subs.len() as u64;
        let max_depth = NCCL_STEPS.min(SHARED_STEPS / nsubs);
        let step_size = a.proto.step_size();
        let mut active = false;
        let irecv = net.irecv.ok_or("irecv is NULL")?;
        let test = net.test.ok_or("test is NULL")?;

        // 1. Post receives, one irecv per group of subs sharing a recvComm.
        let mut s = 0;
        while s < a.subs.len() {
            let gsize = a.subs[s].group_size;
            let mut n = 0usize;
            let mut ptrs: [P; PROXY_MAX_SUBS] = [std::ptr::null_mut(); PROXY_MAX_SUBS];
            let mut sizes = [0 as c_int; PROXY_MAX_SUBS];
            let mut tags = [0 as c_int; PROXY_MAX_SUBS];
            let mut mhs: [P; PROXY_MAX_SUBS] = [std::ptr::null_mut(); PROXY_MAX_SUBS];
            for i in 0..gsize {
                let sub = &mut a.subs[s + i];
                if sub.posted < sub.nsteps {
                    if sub.posted >= sub.done + max_depth {
                        n = 0;
                        break;
                    }
                    let conn = &self.s.conns[sub.conn];
                    let slot = ((sub.base + sub.posted) % NCCL_STEPS) as usize;
                    let b = conn.buf[p].expect("buffer");
                    let off = if a.shared {
                        let o = shared_offset(
                            sub.ch,
                            (sub.posted % max_depth) * nsubs + (s + i) as u64,
                        );
                        sub.fifo_off[slot] = o;
                        o
                    } else {
                        slot * step_size
                    };
                    // SAFETY: inside the registered buffer (checked by slice()).
                    ptrs[n] = unsafe { self.s.bufs[b].slice(off, 0).as_mut_ptr().cast() };
                    // The full step size is posted: stepSize*sliceSteps, or p2pChunkSize from
                    // sharedBuffersGet for shared buffers (2.24+; 2.20 posts stepSize*sliceSteps
                    // capped by nbytes = min(count, chunkSize), the same value); capped by nbytes up
                    // to 2.28. The sender may send less: test() reports the real size.
                    let full = if a.shared {
                        P2P_CHUNK
                    } else {
                        step_size * a.slice_steps as usize
                    };
                    sizes[n] = if self.cap_nbytes {
                        full.min(sub.nbytes)
                    } else {
                        full
                    } as c_int;
                    tags[n] = conn.tag;
                    mhs[n] = sub.mhandle;
                    n += 1;
                }
            }
            if n > 0 {
                let first = &a.subs[s];
                let step = first.posted;
                let comm = self.s.conns[first.conn].comm;
                let mut req: P = std::ptr::null_mut();
                // v9+ only: NCCL may pre-set *request = NCCL_NET_OPTIONAL_RECV_COMPLETION (0x1)
                // for single LL/LL128 receives (2.24+ with NCCL_NET_OPTIONAL_RECV_COMPLETION);
                // the v8 shim (net_v8.cc ncclNet_irecv) clears it back to NULL before calling a
                // v8 plugin, so a v8 plugin never sees the hint: *request starts NULL here.
                // SAFETY: n entries of each array are valid; request out pointer valid.
                ok("irecv", unsafe {
                    irecv(
                        comm,
                        n as c_int,
                        ptrs.as_mut_ptr(),
                        sizes.as_mut_ptr(),
                        tags.as_mut_ptr(),
                        mhs.as_mut_ptr(),
                        &mut req,
                    )
                })?;
                self.c.irecv += 1;
                if n > 1 {
                    self.c.irecv_grouped += 1;
                }
                let slot = (step % NCCL_STEPS) as usize;
                a.subs[s].requests[slot] = req;
                if !req.is_null() {
                    a.subs[s].cache[slot] = req;
                    a.subs[s].cache_subcount = n as c_int;
                    for i in 0..gsize {
                        a.subs[s + i].posted += a.slice_steps;
                    }
                    active = true;
                } else {
                    self.c.irecv_null += 1;
                }
            }
            s += gsize;
        }
        if active {
            return Ok(true);
        }

        // 2. Test the oldest posted receive of each group (sizes: NCCL_PROXY_MAX_SUBS, zeroed).
        let mut s = 0;
        while s < a.subs.len() {
            let gsize = a.subs[s].group_size;
            if a.subs[s].posted > a.subs[s].received {
                let step = a.subs[s].received;
                let slot = (step % NCCL_STEPS) as usize;
                let mut done: c_int = 0;
                let mut sizes = [0 as c_int; PROXY_MAX_SUBS];
                // SAFETY: request from irecv, not yet reported done.
                ok("test(recv)", unsafe {
                    test(a.subs[s].requests[slot], &mut done, sizes.as_mut_ptr())
                })?;
                self.c.test += 1;
                if done != 0 {
                    let mut need_flush = false;
                    let mut total = 0i64;
                    for v in sizes.iter() {
                        total += *v as i64;
                    }
                    let mut idx = 0;
                    for i in 0..gsize {
                        let sub = &mut a.subs[s + i];
                        if sub.received < sub.nsteps {
                            let got = sizes[idx];
                            idx += 1;
                            let k = (sub.received / a.slice_steps) as usize;
                            let want = sub.msgs[k].size;
                            if got < 0 || got as usize != want {
                                return Err(format!("recv test: sub {} step {step} size {got}, sender sent {want} (posted {})", s + i, step_size * a.slice_steps as usize));
                            }
                            sub.got[((sub.base + sub.received) % NCCL_STEPS) as usize] =
                                got as usize;
                        }
                        sub.received += a.slice_steps;
                        if step < sub.nsteps {
                            need_flush |= self.use_gdr;
                        }
                    }
                    a.subs[s].requests[slot] = std::ptr::null_mut();
                    if total > 0 && a.proto == Proto::Simple && need_flush {
                        // iflush(recvComm, subCount, ptrs, sizes, mhandles, &requests[step]) for GDR
                        // buffers only (or the GDRCOPY PCI-E read flush). Unreachable with host
                        // buffers: useGdr is 0, so NCCL never calls iflush here.
                        let iflush = net.iflush.ok_or("iflush is NULL")?;
                        let mut ptrs: [P; PROXY_MAX_SUBS] = [std::ptr::null_mut(); PROXY_MAX_SUBS];
                        let mut mhs: [P; PROXY_MAX_SUBS] = [std::ptr::null_mut(); PROXY_MAX_SUBS];
                        let mut n = 0;
                        for i in 0..gsize {
                            let sub = &a.subs[s + i];
                            if step < sub.nsteps {
                                let conn = &self.s.conns[sub.conn];
                                let sl = ((sub.base + sub.received - a.slice_steps) % NCCL_STEPS)
                                    as usize;
                                let off = if a.shared {
                                    sub.fifo_off[sl]
                                } else {
                                    sl * step_size
                                };
                                // SAFETY: inside the registered buffer.
                                ptrs[n] = unsafe {
                                    self.s.bufs[conn.buf[p].expect("buffer")]
                                        .slice(off, 0)
                                        .as_mut_ptr()
                                        .cast()
                                };
                                mhs[n] = sub.mhandle;
                                n += 1;
                            }
                        }
                        let comm = self.s.conns[a.subs[s].conn].comm;
                        let mut req: P = std::ptr::null_mut();
                        // SAFETY: n valid entries.
                        ok("iflush", unsafe {
                            iflush(
                                comm,
                                n as c_int,
                                ptrs.as_mut_ptr(),
                                sizes.as_mut_ptr(),
                                mhs.as_mut_ptr(),
                                &mut req,
                            )
                        })?;
                        self.c.iflush += 1;
                        a.subs[s].requests[slot] = req;
                    }
                    active = true;
                }
            }
            s += gsize;
        }
        if active {
            return Ok(true);
        }

        // 3. Flush completion (test with sizes = NULL, only if iflush posted a request), then
        // hand the step to the GPU (recvMem->tail); the emulated GPU reads and checks it.
        let mut s = 0;
        while s < a.subs.len() {
            let gsize = a.subs[s].group_size;
            if a.subs[s].received > a.subs[s].transmitted {
                let step = a.subs[s].transmitted;
                let slot = (step % NCCL_STEPS) as usize;
                let mut done: c_int = 1;
                let req = a.subs[s].requests[slot];
                if !req.is_null() {
                    // SAFETY: request from iflush.
                    ok("test(flush)", unsafe {
                        test(req, &mut done, std::ptr::null_mut())
                    })?;
                    self.c.test += 1;
                }
                if done != 0 {
                    a.subs[s].requests[slot] = std::ptr::null_mut();
                    for i in 0..gsize {
                        let sub = &mut a.subs[s + i];
                        let k = (sub.transmitted / a.slice_steps) as usize;
                        sub.transmitted += a.slice_steps;
                        if step < sub.nsteps {
                            let sl = ((sub.base + sub.transmitted - a.slice_steps) % NCCL_STEPS)
                                as usize;
                            let conn = &self.s.conns[sub.conn];
                            let off = if a.shared {
                                sub.fifo_off[sl]
                            } else {
                                sl * step_size
                            };
                            let m = sub.msgs[k];
                            let buf = &self.s.bufs[conn.buf[p].expect("buffer")];
                            // SAFETY: the receive for this slot completed; nothing writes it now.
                            let data = unsafe { buf.slice(off, sub.got[sl]) };
                            plan::check(data, sub.seeds[k], m.abs).map_err(|e| {
                                format!(
                                    "data check, recv conn {:?} channel {} message {k}: {e}",
                                    conn.key, sub.ch
                                )
                            })?;
                            self.c.bytes_verified += data.len() as u64;
                            // The GPU consumed the step and advanced sendMem->head.
                            sub.head = sub.base + sub.transmitted;
                        }
                    }
                    active = true;
                }
            }
            s += gsize;
        }
        if active {
            return Ok(true);
        }

        // 4. Steps the GPU has consumed: irecvConsumed(recvComm, subCount, request) once per
        // grouped receive, whenever the vtable entry is non-NULL (2.20-2.30). A plugin that sets it
        // and returns an error aborts the collective here: the old DQPLB vtable did exactly that.
        let mut s = 0;
        while s < a.subs.len() {
            let gsize = a.subs[s].group_size;
            for i in 0..gsize {
                if a.subs[s + i].done == a.subs[s + i].nsteps {
                    continue;
                }
                if a.subs[s + i].transmitted > a.subs[s + i].done {
                    let head = a.subs[s + i].head;
                    while head > a.subs[s + i].base + a.subs[s + i].done
                        && a.subs[s + i].transmitted > a.subs[s + i].done
                    {
                        let cslot = (a.subs[s + i].done % NCCL_STEPS) as usize;
                        let cached = a.subs[s].cache[cslot];
                        if !cached.is_null() {
                            if let Some(consumed) = net.irecv_consumed {
                                let comm = self.s.conns[a.subs[s + i].conn].comm;
                                // SAFETY: recvComm and a request test() already reported done.
                                ok("irecvConsumed", unsafe {
                                    consumed(comm, a.subs[s].cache_subcount, cached)
                                })?;
                                self.c.consumed += 1;
                            }
                            a.subs[s].cache[cslot] = std::ptr::null_mut();
                        }
                        a.subs[s + i].done += a.slice_steps;
                        active = true;
                        if a.subs[s + i].done == a.subs[s + i].nsteps {
                            a.ndone += 1;
                            break;
                        }
                    }
                }
            }
            s += gsize;
        }
        Ok(active)
    }

    /// recvProxyProgress at ncclProxyOpReady: group subs with the same recvComm (swapping a later
    /// match forward), at most maxRecvs per group, and set each sub's base step and mhandle.
    fn recv_ready(&mut self, a: &mut Args) {
        let p = a.proto as usize;
        let mut group = 0usize;
        let mut max_recvs = 1usize;
        let mut comm: P = std::ptr::null_mut();
        for s in 0..a.subs.len() {
            if group == max_recvs {
                group = 0;
            } else if s > 0 {
                let next = (s..a.subs.len()).find(|&n| self.s.conns[a.subs[n].conn].comm == comm);
                match next {
                    None => group = 0,
                    Some(n) if n != s => a.subs.swap(s, n),
                    Some(_) => {}
                }
            }
            group += 1;
            let conn = &mut self.s.conns[a.subs[s].conn];
            max_recvs = self.max_recvs;
            comm = conn.comm;
            let sub = &mut a.subs[s];
            sub.base = roundup(conn.step, a.chunk_steps);
            conn.step = sub.base + sub.nsteps;
            sub.mhandle = conn.mh[p];
            for i in 0..group {
                a.subs[s - i].group_size = group;
            }
        }
        a.ready = true;
    }
}

/// After an abort: (sends posted but never tested to completion, receives posted but never
/// reported done): the requests the closes meet.
pub fn in_flight(ops: &[Args]) -> (u64, u64) {
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
