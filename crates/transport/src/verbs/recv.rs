//! Receiver side of a verbs connection: announces each posted buffer by RDMA-writing a FIFO entry
//! (with the receive credit) into the sender's FIFO on the control QP, feeds data-QP receive CQEs
//! to the engine, refills the shared receive queue in batches and publishes the new credit.
//! Answers the sender's fences of failed data QPs (fence.rs).

use std::collections::VecDeque;
use std::io::Read;
use std::net::TcpStream;

use super::completion::{status_str, OpCounters, WorkCompletion, POLL_BATCH};
use super::fence::{FenceMsg, FencedMsg, KIND_FENCE, MAX_RECREATIONS};
use super::fifo::{
    credit_offset, encode_credit, trailer, trailer_offset, wire_len, FifoBuf, FifoEntry,
    CREDIT_WORD_BYTES, FIFO_CREDIT_OFFSET, FIFO_ENTRY_BYTES, FIFO_SEQ_OFFSET,
};
use super::peer::{unexpected, PeerWatch};
use super::qp::RcQp;
use super::qpset::{QpRole, QpSet};
use super::resources::{LocalSlice, MemoryRegion, RegisteredBuffer, RemoteSlice};
use super::send::verr;
use super::srq::SharedReceiveQueue;
use crate::common::{Grp, RecvCore, Requests};
use crate::slots::{RecvSizes, MAX_RECVS};
use crate::tcp::ConnParams;
use crate::{NetError, NetResult, UserBuf};
use std::sync::Arc;

/// Byte the sender writes on the bootstrap socket once its QPs can receive announcements.
pub(super) const READY: u8 = 0x52;

pub struct VerbsRecvComm {
    /// Engine and requests: one per grouped receive.
    rx: RecvCore,
    qps: QpSet,
    /// Bootstrap socket: until the sender's READY byte arrives, announcements wait.
    boot: Option<TcpStream>,
    /// The process that made the comm (only it shuts the bootstrap socket down at close).
    owner: crate::tcp::Owner,
    /// The same socket after READY, watched for the sender's exit.
    watch: Option<PeerWatch>,
    staging: RegisteredBuffer,
    fifo: RemoteSlice,
    fifo_len: u32,
    announced: u32,
    /// Control-QP writes posted (announcements and credit words), in total: each one's wr_id.
    ctl_writes: u32,
    /// Control writes in the control QP's send queue not yet known complete (freed when a
    /// signaled one's completion is reaped: every write before it is complete too).
    cts_in_sq: u32,
    /// Every this-many-th control write is signaled (at most half the control send queue).
    cts_signal_every: u32,
    /// The data QPs' shared receive queue.
    srq: Arc<SharedReceiveQueue>,
    /// Receives posted to the SRQ, in total (wrapping): the credit.
    posted: u32,
    /// The credit last sent to the sender (in an announcement or a credit word).
    published: u32,
    /// A credit word goes out once this many receives were posted since the last publication
    /// and no announcement carried them.
    credit_batch: u32,
    /// The control QP's send queue depth.
    cts_sq_depth: u32,
    waiting: VecDeque<u32>,
    wcs: [WorkCompletion; POLL_BATCH],
    ops: OpCounters,
    peer: String,
    /// Per data QP index: receives the current QP consumed from the SRQ (any status, wrapping).
    recv_on: Vec<u32>,
    /// Per data QP index: fenced and not replaced (in the error state; what still completes on it
    /// is dropped uncounted).
    fenced: Vec<bool>,
    /// Per data QP index: times it was re-created.
    recreations: Vec<u32>,
    /// Data QPs replaced after a fence, kept until the comm closes: a completion of theirs may
    /// still come, and their numbers must not be reused meanwhile.
    retired: Vec<RcQp>,
    /// The data QP whose fence drains the receive CQ right now (its flushes are expected).
    fencing: Option<usize>,
    path: RecvPathCounters,
}

/// What path-failure isolation did on a receive comm (plain counters, never reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvPathCounters {
    /// Fences answered.
    pub fences: u64,
    /// Data QPs re-created.
    pub replaced: u64,
    /// Immediates the fences asked about that had already been counted.
    pub already_counted: u64,
    /// Completions of data QPs after their fence, dropped uncounted (their receive went back
    /// to the SRQ without credit: the sender took the write's credit back).
    pub late: u64,
    /// Error completions on data QPs before any fence (the sender's fence follows).
    pub errors: u64,
}

/// Receives posted since the last publication that make a credit word worth a write: half the
/// SRQ's room beyond the window, so the sender keeps more than a window of credit while the
/// receiver polls (a quarter of the SRQ when it is not deeper than the window).
fn credit_batch(srq_depth: u32, window: u32) -> u32 {
    if srq_depth > window {
        ((srq_depth - window) / 2).max(1)
    } else {
        (srq_depth / 4).max(1)
    }
}

/// The largest power of two at most half of `sq_depth - 1` (at least 1): a send queue of
/// `sq_depth` then always holds a signaled write among the unreaped ones before it fills, also
/// across the u32 wrap of the sequence number.
fn signal_interval(sq_depth: u32) -> u32 {
    let half = (sq_depth.saturating_sub(1) / 2).max(1);
    1 << (31 - half.leading_zeros())
}

impl VerbsRecvComm {
    /// Takes a connected QP set whose SRQ is full (every receive posted); `fifo` is the sender's
    /// FIFO region (`params.max_messages` entries, then the credit word).
    pub(super) fn new(
        qps: QpSet,
        boot: TcpStream,
        fifo: RemoteSlice,
        params: ConnParams,
        peer: String,
    ) -> NetResult<Self> {
        let n = params.max_messages as usize;
        let window = params.qps as u32 * params.outstanding;
        let rx = RecvCore::new(params, &peer, format!("verbs receive comm from {peer}"))?;
        let cts_sq_depth = qps.control().caps().max_send_wr.max(1);
        // the announcements by slot, then one credit word per control send-queue entry
        let staging_bytes = credit_offset(n as u32) + cts_sq_depth as usize * CREDIT_WORD_BYTES;
        let staging = RegisteredBuffer::new(qps.pd(), staging_bytes).map_err(verr)?;
        let srq = qps.srq().cloned().ok_or_else(|| {
            NetError::internal("verbs receive comm without a shared receive queue")
        })?;
        let posted = srq.depth();
        Ok(VerbsRecvComm {
            rx,
            qps,
            boot: Some(boot),
            owner: crate::tcp::Owner::this_process(),
            watch: None,
            staging,
            fifo,
            fifo_len: n as u32,
            announced: 0,
            ctl_writes: 0,
            cts_in_sq: 0,
            cts_signal_every: signal_interval(cts_sq_depth),
            cts_sq_depth,
            credit_batch: credit_batch(posted, window),
            srq,
            posted,
            published: 0,
            waiting: VecDeque::with_capacity(n),
            wcs: [WorkCompletion::default(); POLL_BATCH],
            ops: OpCounters::default(),
            recv_on: vec![0; params.qps as usize],
            fenced: vec![false; params.qps as usize],
            recreations: vec![0; params.qps as usize],
            retired: Vec::new(),
            fencing: None,
            path: RecvPathCounters::default(),
            peer,
        })
    }

    /// What path-failure isolation did so far.
    pub fn path_counters(&self) -> RecvPathCounters {
        self.path
    }

    /// Sequence numbers counted so far, each once (the engine's next expected one).
    pub fn seqs_counted(&self) -> u32 {
        self.rx.engine.expected_seq()
    }

    pub fn params(&self) -> &ConnParams {
        &self.rx.params
    }

    pub fn max_requests(&self) -> usize {
        self.rx.slots.len()
    }

    /// Posts, completions and CQ polls of this comm so far (plain counters, never reset).
    pub fn op_counters(&self) -> &OpCounters {
        &self.ops
    }

    /// Receives the shared receive queue holds when full (the sender's first credit).
    pub fn srq_depth(&self) -> u32 {
        self.srq.depth()
    }

    /// A credit word goes out after this many receives posted without an announcement.
    pub fn credit_batch(&self) -> u32 {
        self.credit_batch
    }

    pub fn qp_set(&self) -> &QpSet {
        &self.qps
    }

    /// One-line state summary for logs and stall diagnostics.
    pub fn debug_state(&self) -> String {
        format!(
            "recv from {}: expected seq {}, {} posted, {} pending, {} announced, {} waiting, credit {} published {}, ready {}, failed: {:?}",
            self.peer,
            self.rx.engine.expected_seq(),
            self.rx.engine.posted(),
            self.rx.engine.pending(),
            self.announced,
            self.waiting.len(),
            self.posted,
            self.published,
            self.boot.is_none(),
            self.rx.failed.check().err().map(|e| e.msg)
        )
    }

    /// Posts one receive buffer (a group of one); see [`VerbsRecvComm::irecv_group`].
    pub fn irecv(
        &mut self,
        buf: UserBuf,
        tag: i32,
        mr: Option<&MemoryRegion>,
    ) -> NetResult<Option<u32>> {
        self.irecv_group(&[(buf, tag, mr)])
    }

    /// Posts a grouped receive of 1..=MAX_RECVS buffers (each registered in its region) as one
    /// request and announces it in one FIFO entry; None when all request slots are busy.
    pub fn irecv_group(
        &mut self,
        bufs: &[(UserBuf, i32, Option<&MemoryRegion>)],
    ) -> NetResult<Option<u32>> {
        let n = bufs.len();
        RecvCore::check_count(n)?;
        let mut fifo = [FifoBuf::default(); MAX_RECVS];
        for (f, (buf, tag, mr)) in fifo.iter_mut().zip(bufs) {
            super::send::covers(*mr, buf, "irecv")?;
            *f = FifoBuf {
                addr: buf.addr() as u64,
                rkey: mr.map(MemoryRegion::rkey).unwrap_or(0),
                capacity: buf.len() as u64,
                tag: *tag,
            };
        }
        self.rx.failed.check()?;
        let grp = Grp {
            n: n as u8,
            left: n as u8,
        };
        let slot = match self.rx.slots.alloc(grp) {
            Some(s) => s,
            None => {
                // Every slot busy: reap, then try once more.
                self.progress()?;
                match self.rx.slots.alloc(grp) {
                    Some(s) => s,
                    None => return Ok(None),
                }
            }
        };
        for (k, f) in fifo[..n].iter().enumerate() {
            let token = slot * MAX_RECVS as u32 + k as u32;
            self.rx.post(token, f.capacity, &self.peer)?;
        }
        // The sequence number is stamped when announced.
        let entry = FifoEntry::new(slot, &fifo[..n]);
        let off = slot as usize * FIFO_ENTRY_BYTES;
        self.staging.write(off, &entry.encode()).map_err(verr)?;
        self.waiting.push_back(slot);
        // Announce now, reap in test(): no CQ poll on the way out.
        let announced = self.check_ready().and_then(|()| self.announce());
        if let Err(e) = announced {
            return Err(self.fail(e));
        }
        Ok(Some(slot))
    }

    /// Some(total bytes received) once every buffer of request `slot` is complete.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        Ok(self.test_sizes(slot)?.map(|s| s.iter().sum()))
    }

    /// Some(received size of each buffer, in posting order) once every buffer of request `slot`
    /// arrived completely and in order. A request that already completed is reported even if
    /// the peer has gone since.
    pub fn test_sizes(&mut self, slot: u32) -> NetResult<Option<RecvSizes>> {
        Ok(self.test_request(slot)?.map(|n| self.rx.sizes(slot, n)))
    }

    /// Moves everything that can move without blocking (never sleeps).
    pub fn progress(&mut self) -> NetResult<()> {
        self.advance()
    }

    /// Reads the sender's READY byte; the bootstrap socket is dropped after it.
    fn check_ready(&mut self) -> NetResult<()> {
        let Some(sock) = self.boot.as_mut() else {
            return Ok(());
        };
        let mut b = [0u8; 1];
        match sock.read(&mut b) {
            Ok(1) if b[0] == READY => {
                self.watch = self.boot.take().map(PeerWatch::new);
                Ok(())
            }
            Ok(0) => Err(NetError::remote(format!(
                "{}: bootstrap socket closed before the sender was ready",
                self.peer
            ))),
            Ok(_) => Err(NetError::remote(format!(
                "{}: bootstrap byte {:#x}, expected READY",
                self.peer, b[0]
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(NetError::io(&format!("{}: bootstrap read", self.peer), &e)),
        }
    }

    fn announce(&mut self) -> NetResult<()> {
        if self.boot.is_some() {
            return Ok(());
        }
        while let Some(&slot) = self.waiting.front() {
            if !self.control_room()? {
                return Ok(());
            }
            self.waiting.pop_front();
            let off = slot as usize * FIFO_ENTRY_BYTES;
            let count = self.rx.slots.active(slot).map_or(1, |g| usize::from(g.n));
            let seq = self.announced;
            self.staging
                .write(off + FIFO_SEQ_OFFSET, &seq.to_le_bytes())
                .map_err(verr)?;
            self.staging
                .write(off + FIFO_CREDIT_OFFSET, &self.posted.to_le_bytes())
                .map_err(verr)?;
            self.staging
                .write(off + trailer_offset(count), &trailer(seq).to_le_bytes())
                .map_err(verr)?;
            let idx = seq % self.fifo_len;
            let local = self
                .staging
                .mr()
                .local(off, wire_len(count))
                .map_err(verr)?;
            let remote = RemoteSlice {
                addr: self.fifo.addr + u64::from(idx) * FIFO_ENTRY_BYTES as u64,
                rkey: self.fifo.rkey,
            };
            self.post_control(local, remote)?;
            self.published = self.posted;
            self.announced = self.announced.wrapping_add(1);
        }
        Ok(())
    }

    /// Whether the control send queue has room for one more write (reaping it when full).
    fn control_room(&mut self) -> NetResult<bool> {
        if self.cts_in_sq + 1 >= self.cts_sq_depth {
            // Send queue full of unsignaled writes: reap the signaled one among them.
            self.reap_control()?;
        }
        Ok(self.cts_in_sq + 1 < self.cts_sq_depth)
    }

    /// Posts one control write (announcement or credit word), signaled every k-th.
    fn post_control(&mut self, local: LocalSlice, remote: RemoteSlice) -> NetResult<()> {
        let k = self.ctl_writes;
        let signaled = k % self.cts_signal_every == self.cts_signal_every - 1;
        self.qps
            .control()
            .post_write(u64::from(k), local, remote, None, signaled)
            .map_err(verr)?;
        self.ops.send_posts += 1;
        self.cts_in_sq += 1;
        self.ctl_writes = k.wrapping_add(1);
        Ok(())
    }

    /// Writes the credit word into the sender's FIFO region once `credit_batch` receives were
    /// posted since the last publication (an announcement waiting to go carries them instead).
    /// Its source is one of `cts_sq_depth` staging words, by write count: a word is rewritten
    /// only after the write that read it is known complete.
    fn publish_credit(&mut self) -> NetResult<()> {
        if self.boot.is_some()
            || !self.waiting.is_empty()
            || self.posted.wrapping_sub(self.published) < self.credit_batch
            || !self.control_room()?
        {
            return Ok(());
        }
        let credit = self.posted;
        let src = credit_offset(self.fifo_len)
            + (self.ctl_writes % self.cts_sq_depth) as usize * CREDIT_WORD_BYTES;
        self.staging
            .write(src, &encode_credit(credit))
            .map_err(verr)?;
        let local = self
            .staging
            .mr()
            .local(src, CREDIT_WORD_BYTES)
            .map_err(verr)?;
        let remote = RemoteSlice {
            addr: self.fifo.addr + credit_offset(self.fifo_len) as u64,
            rkey: self.fifo.rkey,
        };
        self.post_control(local, remote)?;
        self.published = credit;
        Ok(())
    }

    fn reap_control(&mut self) -> NetResult<()> {
        loop {
            let n = self.qps.poll_send(&mut self.wcs).map_err(verr)?;
            self.ops.polled(&self.wcs[..n]);
            for i in 0..n {
                let wc = self.wcs[i];
                self.qps.check(&wc).map_err(|e| {
                    NetError::remote(format!("{}: control write failed: {e}", self.peer))
                })?;
                // wr_id = the write's number: it and every control write before it are done.
                let done = self
                    .ctl_writes
                    .wrapping_sub(wc.wr_id as u32)
                    .wrapping_sub(1);
                self.cts_in_sq = self.cts_in_sq.min(done);
            }
            if n < POLL_BATCH {
                return Ok(());
            }
        }
    }

    fn reap_data(&mut self) -> NetResult<()> {
        loop {
            let n = self.qps.poll_recv(&mut self.wcs).map_err(verr)?;
            self.ops.polled(&self.wcs[..n]);
            // receives that go back into the SRQ with credit (not those of fenced QPs)
            let mut credited = n as u32;
            for i in 0..n {
                let wc = self.wcs[i];
                let q = match self.qps.role_of(wc.qp_num) {
                    Some(QpRole::Data(q)) if !self.fenced[q] => q,
                    Some(QpRole::Data(_) | QpRole::Retired(_)) => {
                        self.late_completion(&wc);
                        credited -= 1;
                        continue;
                    }
                    _ => {
                        self.qps
                            .check(&wc)
                            .map_err(|e| NetError::remote(format!("{}: {e}", self.peer)))?;
                        return Err(NetError::remote(format!(
                            "{}: receive completion on non-data QP {}",
                            self.peer, wc.qp_num
                        )));
                    }
                };
                self.recv_on[q] = self.recv_on[q].wrapping_add(1);
                if !wc.is_success() {
                    self.data_error(q, &wc);
                    continue;
                }
                let imm = wc.imm.ok_or_else(|| {
                    NetError::remote(format!("{}: data segment without immediate", self.peer))
                })?;
                self.rx
                    .engine
                    .arrived(imm, wc.byte_len)
                    .map_err(|e| NetError::remote(format!("{}: protocol error: {e}", self.peer)))?;
            }
            // the batch's receives back into the SRQ in one chained post, before any credit for
            // them is published
            if n > 0 {
                self.srq.post_zero_len(n as u32).map_err(verr)?;
                self.ops.recv_posts += n as u64;
                self.posted = self.posted.wrapping_add(credited);
            }
            if n < POLL_BATCH {
                return Ok(());
            }
        }
    }
}

impl VerbsRecvComm {
    /// A completion of a data QP after its fence: whatever it wrote landed in a buffer still
    /// posted (the sequence number was not counted when the fence answered, so its message is
    /// incomplete) and the resend writes the same bytes there; it is not counted, and its
    /// receive goes back to the SRQ without credit because the sender already took the write's
    /// credit back.
    #[cold]
    fn late_completion(&mut self, wc: &WorkCompletion) {
        self.path.late += 1;
        tracing::info!(target: "dqplb::net", "verbs recv comm from {}: completion of fenced QP {} dropped ({})", self.peer, wc.qp_num, status_str(wc.status));
    }

    /// An error completion on data QP `q` at this end: its receive is consumed and nothing is
    /// counted; the QP is moved to the error state (nothing more may land through it) and the
    /// sender, whose writes on it now fail, fences it.
    #[cold]
    fn data_error(&mut self, q: usize, wc: &WorkCompletion) {
        if self.fencing == Some(q) {
            return; // flushed by the fence itself
        }
        self.path.errors += 1;
        let _ = self.qps.data(q).and_then(RcQp::set_error);
        // INFO: isolated, the comm goes on; a failure of the comm after all is the WARN.
        tracing::info!(target: "dqplb::net", "verbs recv comm from {}: data QP {q} (QPN {}): {} (status {}); waiting for the sender's fence", self.peer, wc.qp_num, status_str(wc.status), wc.status);
    }

    /// Answers the sender's fences (read at most every few ms from the bootstrap socket).
    fn serve_fences(&mut self) -> NetResult<()> {
        loop {
            let Some(w) = self.watch.as_mut() else {
                return Ok(());
            };
            let Some((kind, body)) = w.next_frame(false, &self.peer)? else {
                return Ok(());
            };
            if kind != KIND_FENCE {
                return Err(unexpected(&self.peer, kind));
            }
            let m = FenceMsg::decode(&body, &self.peer)?;
            self.fence(m)?;
        }
    }

    /// The fence of data QP `m.qp`: its end goes to the error state, the receive CQ is drained,
    /// and the answer says which of the asked immediates were counted, how many receives the QP
    /// consumed, and the endpoint of a new QP connected to the sender's new one.
    #[cold]
    fn fence(&mut self, m: FenceMsg) -> NetResult<()> {
        let q = usize::from(m.qp);
        if q >= self.fenced.len() || m.imms.len() > self.rx.params.outstanding as usize {
            return Err(NetError::remote(format!(
                "{}: FENCE of data QP {q} ({} data QPs) for {} segments (at most {} in flight)",
                self.peer,
                self.fenced.len(),
                m.imms.len(),
                self.rx.params.outstanding
            )));
        }
        if let Err(e) = self.qps.data(q).and_then(RcQp::set_error) {
            // Unfenced, a late write could land in a buffer NCCL has again: fail instead.
            return Err(NetError::system(format!(
                "{}: cannot fence data QP {q}: {e}",
                self.peer
            )));
        }
        // Everything that came through the QP before the error state is counted now.
        self.fencing = Some(q);
        let drained = self.reap_data();
        self.fencing = None;
        drained?;
        self.fenced[q] = true;
        let counted: Vec<bool> = m
            .imms
            .iter()
            .map(|&i| self.rx.engine.is_duplicate(i))
            .collect();
        let consumed = std::mem::replace(&mut self.recv_on[q], 0);
        let mut endpoint = None;
        if let Some(remote) = m.endpoint.filter(|_| self.recreations[q] < MAX_RECREATIONS) {
            let made = self.qps.create_spare().and_then(|(new, ep)| {
                self.qps.connect_spare(&new, &ep, &remote)?;
                Ok((new, ep))
            });
            match made {
                Ok((new, ep)) => {
                    let old = self.qps.swap_data(q, new, ep).map_err(verr)?;
                    self.retired.push(old);
                    self.fenced[q] = false;
                    self.recreations[q] += 1;
                    self.path.replaced += 1;
                    endpoint = Some(ep);
                }
                Err(e) => {
                    tracing::warn!(target: "dqplb::net", "verbs recv comm from {}: no new QP for data QP {q}, it stays out: {e}", self.peer);
                }
            }
        }
        self.path.fences += 1;
        let already = counted.iter().filter(|c| **c).count();
        self.path.already_counted += already as u64;
        tracing::info!(target: "dqplb::net", "verbs recv comm from {}: data QP {q} fenced: {already} of {} segment(s) already counted, {consumed} receive(s) consumed{}", self.peer, counted.len(),
            endpoint.map_or(String::new(), |e| format!(", new QPN {}", e.qpn)));
        let answer = FencedMsg {
            qp: m.qp,
            counted,
            consumed,
            endpoint,
        };
        if let Some(w) = self.watch.as_mut() {
            w.send(&answer.encode());
        }
        Ok(())
    }
}

impl Requests for VerbsRecvComm {
    type Core = RecvCore;

    fn core(&mut self) -> &mut RecvCore {
        &mut self.rx
    }

    fn step(&mut self) -> NetResult<()> {
        self.check_ready()?;
        self.announce()?;
        self.reap_data()?;
        self.serve_fences()?;
        self.publish_credit()?;
        while let Some((token, size)) = self.rx.engine.poll_done() {
            if !self.rx.complete(token, size) {
                return Err(NetError::internal(format!(
                    "{}: engine completed receive buffer {token} of no posted request",
                    self.peer
                )));
            }
        }
        Ok(())
    }

    /// The sender's exit (the bootstrap socket's EOF, after PeerWatch's grace) fails a receive
    /// still pending: RDMA alone never shows it.
    fn check_pending(&mut self, slot: u32) -> NetResult<()> {
        if let Some(w) = self.watch.as_mut() {
            if w.gone() {
                let e = NetError::remote(format!(
                    "{} {} while receive {slot} was still pending",
                    self.peer,
                    w.why()
                ));
                return Err(self.fail(e));
            }
        }
        Ok(())
    }
}

impl Drop for VerbsRecvComm {
    fn drop(&mut self) {
        // A bootstrap socket not yet handed to the peer watch (which shuts its own down).
        if let Some(b) = &self.boot {
            self.owner.shutdown(b);
        }
        // One line per comm at close (NCCL_DEBUG=INFO); `dqplb perf` turns it into per-message
        // figures.
        tracing::info!(target: "dqplb::stats", "verbs recv comm from {} closed: op counts: {}", self.peer, self.ops.summary());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn signal_interval_is_a_power_of_two_within_half_the_queue() {
        assert_eq!(super::signal_interval(1), 1);
        assert_eq!(super::signal_interval(2), 1);
        assert_eq!(super::signal_interval(9), 4);
        assert_eq!(super::signal_interval(10), 4);
        assert_eq!(super::signal_interval(129), 64);
        assert_eq!(super::credit_batch(128, 16), 56);
        assert_eq!(super::credit_batch(16, 16), 4);
        assert_eq!(super::credit_batch(2, 16), 1);
        for (d, w) in [(128, 16), (1024, 512), (18, 16), (4096, 1)] {
            let b = super::credit_batch(d, w);
            assert!(
                d - b > w,
                "{d}/{w}: the sender keeps more than a window of credit"
            );
        }
        for d in 3..300 {
            let k = super::signal_interval(d);
            assert!(k.is_power_of_two() && 2 * k < d, "{d} -> {k}");
        }
    }
}
