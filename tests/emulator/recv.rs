//! recvProxyProgress of src/transport/net.cc (2.20-2.30) for the emulated proxy: grouped irecv,
//! test in posting order, the iflush condition, the GPU hand-off and irecvConsumed.

use super::nccl::{ok, P};
use super::plan::{self, Proto, NCCL_STEPS, P2P_CHUNK, PROXY_MAX_SUBS, SHARED_STEPS};
use super::progress::{roundup, shared_offset, Args, Engine};
use std::os::raw::c_int;

impl Engine<'_, '_> {
    /// recvProxyProgress (src/transport/net.cc, 2.20-2.30), its four passes in order, each
    /// returning early when it did something: post grouped irecvs, test the oldest receive (sizes
    /// array zeroed, then iflush for GDR buffers), test the flush and hand the step to the GPU,
    /// then irecvConsumed for steps the GPU consumed. Returns whether anything moved.
    pub(super) fn recv_progress(&mut self, a: &mut Args) -> Result<bool, String> {
        let net = self.net();
        let p = a.proto as usize;
        if !a.ready {
            self.recv_ready(a);
        }
        let nsubs = super::progress::pool_place(a, 0).1;
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
                        let index = sub.pool.map_or((s + i) as u64, |p| p.0);
                        let o = shared_offset(sub.ch, (sub.posted % max_depth) * nsubs + index);
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
                // `if (!checkedNetAttr++) setXferNetAttrs(proxyState, args, 0)` right before
                // the first irecv of the args (recvProxyProgress, net.cc 2.28-2.30).
                super::progress::check_net_attr(
                    &mut a.checked_attr,
                    false,
                    (a.coll_api, a.npeers, a.nchannels, a.algo, a.proto as u32),
                )?;
                // v9+ only: since 2.24 recvProxyProgress pre-sets *request =
                // NCCL_NET_OPTIONAL_RECV_COMPLETION (0x1) for single (subCount 1) LL/LL128
                // receives (NCCL_NET_OPTIONAL_RECV_COMPLETION, default 1); the v8 shim's irecv
                // (ncclNet_v8_as_v9 in src/net.cc 2.24-2.27, ncclNet_irecv in
                // src/plugin/net/net_v8.cc 2.28-2.30) resets it to NULL before calling the v8
                // plugin, and 2.20-2.23 have no hint: a v8 plugin always sees *request = NULL.
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
                        self.c.iflush_req += u64::from(!req.is_null());
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
