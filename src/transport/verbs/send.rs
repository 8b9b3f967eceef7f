//! Sender side of a verbs connection: reads receive announcements and receive credit from its FIFO
//! region (plain RDMA writes of the receiver, found in memory), feeds the engine, posts segments
//! as RDMA_WRITE_WITH_IMM while the credit allows, and turns send CQEs into engine completions.

use std::collections::VecDeque;
use std::time::Instant;

use super::completion::{OpCounters, WorkCompletion, POLL_BATCH};
use super::fifo::{
    credit_newer, credit_offset, decode_credit, trailer, trailer_offset, wire_len, FifoBuf,
    FifoEntry, FIFO_ENTRY_BYTES, FIFO_SEQ_OFFSET, FIFO_VERSION,
};
use super::peer::PeerWatch;
use super::qpset::{QpRole, QpSet};
use super::resources::{LocalSlice, MemoryRegion, RegisteredBuffer, RemoteSlice};
use super::sys::IBV_WR_RDMA_WRITE_WITH_IMM;
use crate::engine::{EngineParams, PolicyKind, QpStats, Sender};
use crate::transport::events::{CommEvents, EventDescr};
use crate::transport::slots::{GroupMatcher, Match, Slots, Sticky, Target, MAX_RECVS};
use crate::transport::tcp::ConnParams;
use crate::transport::{ErrorCode, NetError, NetResult, UserBuf};

/// An in-flight send: where its bytes are, and the receive buffer announced for it.
#[derive(Clone, Copy)]
struct Active {
    addr: u64,
    lkey: u32,
    size: usize,
    remote: FifoBuf,
    /// NCCL's profiler handle of the isend (0: none).
    parent: usize,
}

pub struct VerbsSendComm {
    qps: QpSet,
    fifo: RegisteredBuffer,
    fifo_len: u32,
    next_seq: u32,
    /// Newest receive credit seen: receives the peer has posted to its SRQ, in total (wrapping).
    credit: u32,
    /// WRITE_WITH_IMMs posted, in total (wrapping); never ahead of `credit`.
    imm_posted: u32,
    /// False only in the revert check of tests/verbs_rnr.rs (the credit is ignored).
    credit_gate: bool,
    /// Announced groups not yet matched completely, strictly in order.
    matcher: GroupMatcher<FifoBuf>,
    targets: [Target<FifoBuf>; MAX_RECVS],
    engine: Sender,
    /// Engine route of the messages posted next (0: the configured policy; see `add_route`).
    route: u8,
    /// Profiler events (NCCL v10+): per data QP, the events of its segments in flight, oldest
    /// first (a QP's completions come in posting order). Empty when no profiler is attached.
    events: CommEvents,
    event_rings: Vec<VecDeque<usize>>,
    /// The plugin's device number, for the events' descriptor.
    event_device: i32,
    slots: Slots<Active>,
    wcs: [WorkCompletion; POLL_BATCH],
    ops: OpCounters,
    failed: Sticky,
    epoch: Instant,
    params: ConnParams,
    peer: String,
    watch: PeerWatch,
}

pub(super) fn verr(e: super::error::VerbsError) -> NetError {
    NetError::system(e.to_string())
}

/// Whether `mr` covers `buf` (an empty buffer needs no registration).
pub(super) fn covers(mr: Option<&MemoryRegion>, buf: &UserBuf, what: &str) -> NetResult<u32> {
    match mr {
        Some(m)
            if buf.is_empty()
                || (buf.addr() as u64 >= m.addr()
                    && (buf.addr() + buf.len()) as u64 <= m.addr() + m.len() as u64) =>
        {
            Ok(m.lkey())
        }
        Some(m) => Err(NetError::invalid_argument(format!(
            "{what} buffer {:#x}+{} lies outside its registration {:#x}+{}",
            buf.addr(),
            buf.len(),
            m.addr(),
            m.len()
        ))),
        None if buf.is_empty() => Ok(0),
        None => Err(NetError::invalid_argument(format!(
            "{what} buffer {:#x}+{} has no memory registration (regMr first)",
            buf.addr(),
            buf.len()
        ))),
    }
}

impl VerbsSendComm {
    /// Takes a connected QP set and the FIFO region (`params.max_messages` entries and the credit
    /// word) whose address the peer has.
    pub(super) fn new(
        qps: QpSet,
        fifo: RegisteredBuffer,
        params: ConnParams,
        peer: String,
        boot: std::net::TcpStream,
    ) -> NetResult<Self> {
        let engine = Sender::new(&EngineParams {
            qps: params.qps as usize,
            max_outstanding: params.outstanding,
            segment_bytes: params.segment_bytes,
            // Up to MAX_RECVS sends per grouped receive of the peer, each one engine message.
            max_messages: params.max_messages as usize * MAX_RECVS,
            policy: params.policy,
        })
        .map_err(|e| NetError::invalid_argument(format!("engine parameters for {peer}: {e}")))?;
        let n = params.max_messages as usize;
        // Per-QP event rings only when a profiler is attached (at most `outstanding` each).
        let events = CommEvents::current();
        let event_rings = if events.enabled() {
            (0..params.qps)
                .map(|_| VecDeque::with_capacity(params.outstanding as usize))
                .collect()
        } else {
            Vec::new()
        };
        Ok(VerbsSendComm {
            qps,
            fifo_len: params.max_messages,
            fifo,
            next_seq: 0,
            credit: 0,
            imm_posted: 0,
            credit_gate: true,
            matcher: GroupMatcher::new(n),
            targets: [Target::default(); MAX_RECVS],
            engine,
            route: 0,
            event_rings,
            event_device: 0,
            events,
            slots: Slots::new(n * MAX_RECVS),
            wcs: [WorkCompletion::default(); POLL_BATCH],
            ops: OpCounters::default(),
            failed: Sticky::default(),
            epoch: Instant::now(),
            params,
            peer,
            watch: PeerWatch::new(boot),
        })
    }

    pub fn params(&self) -> &ConnParams {
        &self.params
    }

    pub fn max_requests(&self) -> usize {
        self.slots.len()
    }

    /// NCCL's profiler handle of the next isend (0: none); its segments' events hang under it.
    pub fn set_event_parent(&mut self, parent: usize) {
        self.events.next_parent = parent;
    }

    /// The plugin's device number, reported in the events' descriptor.
    pub fn set_event_device(&mut self, dev: i32) {
        self.event_device = dev;
    }

    /// Starts the profiler event of a segment just posted on data QP `qp` (net_ib's descriptor:
    /// device, wr_id, opcode, QP number, length).
    #[cold]
    fn segment_event(&mut self, qp: usize, parent: usize, wr_id: u64, len: u32) {
        let qp_num = self.qps.data(qp).map_or(0, |q| q.qpn());
        let ev = self.events.start(
            parent,
            EventDescr::Qp {
                device: self.event_device,
                wr_id,
                opcode: IBV_WR_RDMA_WRITE_WITH_IMM as i32,
                qp_num,
                length: len as usize,
            },
        );
        if let Some(r) = self.event_rings.get_mut(qp) {
            r.push_back(ev);
        }
    }

    /// Adds an engine route (`policy` over the first `qps` data QPs, 0 = all) for `set_route`.
    pub fn add_route(&mut self, policy: PolicyKind, qps: usize) -> NetResult<u8> {
        self.engine
            .add_route(policy, qps, self.params.segment_bytes)
            .map_err(|e| NetError::internal(format!("cannot add an engine route: {e}")))
    }

    /// Messages matched from now on are cut by engine route `route` (from `add_route`).
    pub fn set_route(&mut self, route: u8) {
        self.route = route;
    }

    pub fn qp_stats(&self) -> &[QpStats] {
        self.engine.qp_stats()
    }

    /// Posts, completions and CQ polls of this comm so far (plain counters, never reset).
    pub fn op_counters(&self) -> &OpCounters {
        &self.ops
    }

    pub fn qp_set(&self) -> &QpSet {
        &self.qps
    }

    /// Segments that may still be posted before the receiver publishes more credit.
    pub fn credit_left(&self) -> u32 {
        self.credit.wrapping_sub(self.imm_posted)
    }

    /// Turns the receive-credit gate off (`false`) or on. Only for the revert check in
    /// tests/verbs_rnr.rs, which shows that without it a stalled receiver draws RNR NAKs.
    #[doc(hidden)]
    pub fn set_credit_gate(&mut self, on: bool) {
        self.credit_gate = on;
    }

    /// One-line state summary for logs and stall diagnostics.
    pub fn debug_state(&self) -> String {
        format!(
            "send to {}: {} segments outstanding, {} messages queued, next seq {}, {} announcements waiting, {} received, credit {} of which {} left, failed: {:?}",
            self.peer,
            self.engine.outstanding(),
            self.engine.queued_messages(),
            self.engine.next_seq(),
            self.matcher.len(),
            self.next_seq,
            self.credit,
            self.credit_left(),
            self.failed.check().err().map(|e| e.msg)
        )
    }

    /// Matches `buf` (registered in `mr`) to a buffer of the first grouped receive the peer
    /// announced and not yet matched completely (by tag); None means "try again later". The
    /// group goes to the engine, in buffer order, once every buffer has its send. A send whose
    /// receive was announced is accepted even after the peer left: test() reports that.
    pub fn isend(
        &mut self,
        buf: UserBuf,
        tag: i32,
        mr: Option<&MemoryRegion>,
    ) -> NetResult<Option<u32>> {
        let lkey = covers(mr, &buf, "isend")?;
        // Only the FIFO (memory) is read here: no CQ poll before a send that can go out now.
        let gone = match self.failed.check() {
            Ok(()) => match self.read_announces() {
                Ok(()) => None,
                Err(e) => return Err(self.fail(e)),
            },
            Err(e) if e.code == ErrorCode::RemoteError => {
                // Announcements the peer wrote before it left may still wait in the FIFO.
                let _ = self.read_announces();
                Some(e)
            }
            Err(e) => return Err(e),
        };
        let i = match self.matcher.find(&self.peer, buf.len(), tag)? {
            Match::Buffer(i) => i,
            Match::NoGroup | Match::Busy => {
                if let Some(e) = gone {
                    return Err(e);
                }
                // Nothing to send yet: reap what completed meanwhile.
                self.progress()?;
                if self.watch.gone() {
                    let e = NetError::remote(format!(
                        "{} {} with no receive posted for this send",
                        self.peer,
                        self.watch.why()
                    ));
                    return Err(self.fail(e));
                }
                return Ok(None);
            }
        };
        let Some(target) = self.matcher.target(i) else {
            return Err(NetError::internal("matched receive buffer vanished"));
        };
        let Some(slot) = self.slots.alloc(Active {
            addr: buf.addr() as u64,
            lkey,
            size: buf.len(),
            remote: target.remote,
            parent: self.events.next_parent,
        }) else {
            return Ok(None);
        };
        if let Some(group) = self.matcher.assign(i, slot) {
            if gone.is_none() {
                for &s in group.sends() {
                    let len = self.slots.active(s).map_or(0, |a| a.size);
                    if let Err(e) = self.engine.post_routed(s, len as u64, self.route) {
                        let e = NetError::internal(format!(
                            "engine refused a send to {}: {e}",
                            self.peer
                        ));
                        return Err(self.fail(e));
                    }
                }
                // Post before reaping: the segments go out now, their completions are reaped
                // by test().
                let now = self.now();
                if let Err(e) = self.schedule(now) {
                    return Err(self.fail(e));
                }
            }
        }
        Ok(Some(slot))
    }

    /// Some(size) once every segment of request `slot` completed on the wire.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        // A request that already completed is reported even if the peer has gone since.
        if let Some(n) = self.slots.take_done(slot) {
            return Ok(Some(n));
        }
        self.progress()?;
        let done = self.slots.test(slot, "send")?;
        // RDMA alone shows a vanished receiver only once a write exhausts its retries (tens of
        // seconds, or never for a send still held back for its group): the bootstrap socket's
        // EOF, after PeerWatch's grace for completions on their way, fails it now.
        if done.is_none() && self.watch.gone() {
            let e = NetError::remote(format!(
                "{} {} while send {slot} was still pending",
                self.peer,
                self.watch.why()
            ));
            return Err(self.fail(e));
        }
        Ok(done)
    }

    fn fail(&mut self, e: NetError) -> NetError {
        let who = format!("verbs send comm to {}", self.peer);
        self.failed.fail(&who, e)
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Moves everything that can move without blocking (never sleeps).
    pub fn progress(&mut self) -> NetResult<()> {
        self.failed.check()?;
        match self.step() {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// One pass: the FIFO, then post before reaping; the clock is read once. Another round only
    /// when completions freed window room for segments still queued.
    fn step(&mut self) -> NetResult<()> {
        self.read_announces()?;
        let now = self.now();
        for _round in 0..4 {
            self.schedule(now)?;
            let completed = self.reap_sends(now)?;
            while let Some(token) = self.engine.poll_done() {
                if let Some(a) = self.slots.active(token) {
                    self.slots.finish(token, a.size);
                }
            }
            if !completed || self.engine.queued_messages() == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Takes the credit word and every complete announcement from the FIFO region. Memory reads
    /// only, no CQ.
    fn read_announces(&mut self) -> NetResult<()> {
        let off = credit_offset(self.fifo_len);
        let lo = self.fifo.read_u32_volatile(off).map_err(verr)?;
        let hi = self.fifo.read_u32_volatile(off + 4).map_err(verr)?;
        if let Some(c) = decode_credit(lo, hi) {
            self.take_credit(c);
        }
        self.read_entries()
    }

    fn take_credit(&mut self, c: u32) {
        if credit_newer(c, self.credit) {
            self.credit = c;
        }
    }

    /// Takes every complete announcement from the FIFO, in order: entry `next_seq % fifo_len`
    /// once its header seq is `next_seq`, its version non-zero and its trailer `!next_seq` (see
    /// fifo.rs); the entry is zeroed after it is read.
    fn read_entries(&mut self) -> NetResult<()> {
        loop {
            let seq = self.next_seq;
            let off = (seq % self.fifo_len) as usize * FIFO_ENTRY_BYTES;
            if self
                .fifo
                .read_u32_volatile(off + FIFO_SEQ_OFFSET)
                .map_err(verr)?
                != seq
            {
                return Ok(());
            }
            // bytes 4..8: count, version, reserved
            let word = self.fifo.read_u32_volatile(off + 4).map_err(verr)?;
            let (count, version) = (word as u8, (word >> 8) as u8);
            if version == 0 {
                return Ok(()); // not written yet (a zeroed entry's seq 0 matched)
            }
            if version == FIFO_VERSION {
                let t = trailer_offset(usize::from(count));
                if self.fifo.read_u32_volatile(off + t).map_err(verr)? != trailer(seq) {
                    return Ok(()); // still being written
                }
            }
            // A foreign version is decoded only for validate() to name it.
            let mut raw = [0u8; FIFO_ENTRY_BYTES];
            self.fifo.read(off, &mut raw).map_err(verr)?;
            let entry = FifoEntry::decode(&raw);
            entry.validate(seq, &self.peer)?;
            self.take_credit(entry.credit);
            self.fifo
                .zero(off, wire_len(usize::from(count)))
                .map_err(verr)?;
            self.next_seq = seq.wrapping_add(1);
            let bufs = entry.buffers();
            for (t, f) in self.targets.iter_mut().zip(bufs) {
                *t = Target {
                    tag: f.tag,
                    capacity: f.capacity,
                    remote: *f,
                };
            }
            self.matcher
                .push(&self.targets[..bufs.len()])
                .map_err(|why| NetError::remote(format!("{}: peer announced {why}", self.peer)))?;
        }
    }

    fn reap_sends(&mut self, now: u64) -> NetResult<bool> {
        let mut any = false;
        loop {
            let n = self.qps.poll_send(&mut self.wcs).map_err(verr)?;
            self.ops.polled(&self.wcs[..n]);
            for i in 0..n {
                let wc = self.wcs[i];
                self.qps
                    .check(&wc)
                    .map_err(|e| NetError::remote(format!("{}: {e}", self.peer)))?;
                let Some(QpRole::Data(qp)) = self.qps.role_of(wc.qp_num) else {
                    return Err(NetError::internal(format!(
                        "{}: send completion on a non-data QP {}",
                        self.peer, wc.qp_num
                    )));
                };
                self.engine.completed(qp, now).map_err(|e| {
                    NetError::internal(format!(
                        "{}: completion without a segment in flight: {e}",
                        self.peer
                    ))
                })?;
                if self.events.enabled() {
                    if let Some(ev) = self.event_rings.get_mut(qp).and_then(VecDeque::pop_front) {
                        self.events.stop(ev);
                    }
                }
                any = true;
            }
            if n < POLL_BATCH {
                return Ok(any);
            }
        }
    }

    /// Posts what the engine schedules while the receive credit lasts: every WRITE_WITH_IMM
    /// consumes one receive of the peer's SRQ, so one beyond the credit could draw an RNR NAK.
    /// The engine is asked for a segment only when one may go out (it is not changed).
    fn schedule(&mut self, now: u64) -> NetResult<bool> {
        let mut any = false;
        while self.credit_left() > 0 || !self.credit_gate {
            let Some(t) = self.engine.poll_transmit(now) else {
                break;
            };
            let Some(Active {
                addr,
                lkey,
                remote,
                parent,
                ..
            }) = self.slots.active(t.token)
            else {
                return Err(NetError::internal(format!(
                    "engine scheduled a segment of unknown request {}",
                    t.token
                )));
            };
            if t.offset + u64::from(t.len) > remote.capacity {
                return Err(NetError::internal(format!(
                    "segment {}+{} beyond the announced {} bytes",
                    t.offset, t.len, remote.capacity
                )));
            }
            let local = LocalSlice {
                addr: addr + t.offset,
                len: t.len,
                lkey,
            };
            let dst = RemoteSlice {
                addr: remote.addr + t.offset,
                rkey: remote.rkey,
            };
            self.qps
                .data(t.qp)
                .and_then(|qp| qp.post_write(u64::from(t.token), local, dst, Some(t.imm), true))
                .map_err(verr)?;
            self.ops.send_posts += 1;
            self.imm_posted = self.imm_posted.wrapping_add(1);
            if self.events.enabled() {
                self.segment_event(t.qp, parent, u64::from(t.token), t.len);
            }
            any = true;
        }
        Ok(any)
    }
}

impl Drop for VerbsSendComm {
    fn drop(&mut self) {
        // Segments still in flight end their profiler events with the comm.
        for r in &self.event_rings {
            for &ev in r {
                self.events.stop(ev);
            }
        }
        // One line per comm at close (NCCL_DEBUG=INFO); `dqplb perf` turns it into per-message
        // figures.
        tracing::info!(target: "dqplb::stats", "verbs send comm to {} closed: op counts: {}", self.peer, self.ops.summary());
    }
}
