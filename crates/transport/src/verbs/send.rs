//! Sender side of a verbs connection: reads receive announcements and receive credit from its FIFO
//! region (plain RDMA writes of the receiver, found in memory), feeds the engine, posts segments
//! as RDMA_WRITE_WITH_IMM while the credit allows, and turns send CQEs into engine completions.
//! A data QP that fails is fenced, its segments resent and the QP re-created (fence.rs).

use std::collections::VecDeque;

use super::completion::{status_str, OpCounters, WorkCompletion, POLL_BATCH};
use super::fence::{
    unconsumed, FenceMsg, FencedMsg, SendFences, FENCE_TIMEOUT_NS, KIND_FENCED, MAX_RECREATIONS,
};
use super::fifo::{
    credit_newer, credit_offset, decode_credit, trailer, trailer_offset, wire_len, FifoBuf,
    FifoEntry, FIFO_ENTRY_BYTES, FIFO_SEQ_OFFSET, FIFO_VERSION,
};
use super::peer::{unexpected, PeerWatch};
use super::qp::{QpEndpoint, RcQp};
use super::qpset::{QpRole, QpSet};
use super::resources::{LocalSlice, MemoryRegion, RegisteredBuffer, RemoteSlice};
use super::sys::IBV_WR_RDMA_WRITE_WITH_IMM;
use crate::common::{Outgoing, Requests, SendCore};
use crate::events::EventDescr;
use crate::slots::{Match, Target, MAX_RECVS};
use crate::tcp::ConnParams;
use crate::{ErrorCode, NetError, NetResult, UserBuf};
use dqplb_engine::{EngineError, PathEvent, PolicyKind, QpStats, RehashRule};

/// An in-flight send: where its bytes are, and the receive buffer announced for it.
#[derive(Clone, Copy)]
pub(crate) struct Active {
    addr: u64,
    lkey: u32,
    size: usize,
    remote: FifoBuf,
    /// NCCL's profiler handle of the isend (0: none).
    parent: usize,
}

impl Outgoing for Active {
    fn bytes(&self) -> usize {
        self.size
    }
}

pub struct VerbsSendComm {
    /// Engine, requests and the matching of isends to the receiver's announced groups.
    tx: SendCore<Active, FifoBuf>,
    qps: QpSet,
    fifo: RegisteredBuffer,
    fifo_len: u32,
    next_seq: u32,
    /// Newest receive credit seen: receives the peer has posted to its SRQ, in total (wrapping).
    credit: u32,
    /// WRITE_WITH_IMMs posted, in total (wrapping); never ahead of `credit`.
    imm_posted: u32,
    /// False only in the revert check of crates/transport/tests/verbs_rnr.rs (the credit is ignored).
    credit_gate: bool,
    targets: [Target<FifoBuf>; MAX_RECVS],
    /// Profiler events (NCCL v10+): per data QP, the events of its segments in flight, oldest
    /// first (a QP's completions come in posting order). Empty when no profiler is attached.
    event_rings: Vec<VecDeque<usize>>,
    /// The plugin's device number, for the events' descriptor.
    event_device: i32,
    wcs: [WorkCompletion; POLL_BATCH],
    ops: OpCounters,
    peer: String,
    watch: PeerWatch,
    /// Failed data QPs between their failure and the receiver's answer (fence.rs).
    fences: SendFences,
    /// Per data QP: WRITE_WITH_IMMs posted on the current QP of that index (wrapping).
    imm_on: Vec<u32>,
    /// Per data QP: failed and not (yet) replaced.
    out: Vec<bool>,
    /// Per data QP: the new QP offered in its fence, until the receiver answers.
    spares: Vec<Option<(RcQp, QpEndpoint)>>,
    /// Per data QP index: times it was re-created.
    recreations: Vec<u32>,
    /// The first data-QP failure, named when every QP has failed.
    first_failure: Option<String>,
    path: PathCounters,
    /// Test hook (`debug_slow_data_qp`): (QP, ns its completions reach the engine late).
    debug_lag: Option<(usize, u64)>,
}

/// What path-failure isolation did on a send comm (plain counters, never reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathCounters {
    /// Data QPs that failed.
    pub failures: u64,
    /// Fences the receiver answered.
    pub fences: u64,
    /// Data QPs re-created (a new QP pair in place of a failed one).
    pub replaced: u64,
    /// Resent segments the receiver had not counted: sent again with their bytes.
    pub resent_data: u64,
    /// Resent segments the receiver had already counted: a zero-length write without immediate.
    pub resent_empty: u64,
    /// Send credit given back for writes of failed QPs that consumed no receive.
    pub credit_returned: u64,
    /// Drained stragglers given a new QP pair (new QPNs: a new ECMP hash).
    pub rehashed: u64,
}

/// wr_id of a data write: the segment's immediate in the upper half (what a fence needs from a
/// flushed completion), the request slot in the lower.
fn wr_id(imm: u32, token: u32) -> u64 {
    (u64::from(imm) << 32) | u64::from(token)
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
    /// Installs the engine's re-pin rule on its depth rule (`DepthControl::set_depth_rule`
    /// first): a data QP that stays the slowest moves onto the fastest QP's UDP source port and
    /// back if it is no faster there. Pinned QPs only (unpinned ones are re-hashed as the
    /// re-hash rule's stragglers are).
    pub fn set_repin_rule(&mut self, rule: dqplb_engine::RepinRule) -> NetResult<()> {
        self.tx
            .engine
            .set_repin_rule(rule)
            .map_err(|e| NetError::invalid_argument(format!("re-pin rule: {e}")))
    }

    /// Moves the engine's re-pin rule made so far (not counting moves back).
    pub fn repins(&self) -> u32 {
        self.tx.engine.depth_repins()
    }

    /// Takes a connected QP set and the FIFO region (`params.max_messages` entries and the credit
    /// word) whose address the peer has.
    pub(super) fn new(
        qps: QpSet,
        fifo: RegisteredBuffer,
        params: ConnParams,
        peer: String,
        boot: std::net::TcpStream,
    ) -> NetResult<Self> {
        let tx = SendCore::new(params, &peer, format!("verbs send comm to {peer}"))?;
        // Per-QP event rings only when a profiler is attached (at most `outstanding` each).
        let event_rings = if tx.events.enabled() {
            (0..params.qps)
                .map(|_| VecDeque::with_capacity(params.outstanding as usize))
                .collect()
        } else {
            Vec::new()
        };
        Ok(VerbsSendComm {
            tx,
            qps,
            fifo_len: params.max_messages,
            fifo,
            next_seq: 0,
            credit: 0,
            imm_posted: 0,
            credit_gate: true,
            targets: [Target::default(); MAX_RECVS],
            event_rings,
            event_device: 0,
            wcs: [WorkCompletion::default(); POLL_BATCH],
            ops: OpCounters::default(),
            imm_on: vec![0; params.qps as usize],
            out: vec![false; params.qps as usize],
            spares: (0..params.qps).map(|_| None).collect(),
            recreations: vec![0; params.qps as usize],
            peer,
            watch: PeerWatch::new(boot),
            fences: SendFences::default(),
            first_failure: None,
            path: PathCounters::default(),
            debug_lag: None,
        })
    }

    /// Whether a fence (a failed QP's, or a drained straggler's re-hash) is not answered yet.
    pub fn fences_pending(&self) -> bool {
        self.fences.any_pending()
    }

    /// What path-failure isolation and re-hashing did so far.
    pub fn path_counters(&self) -> PathCounters {
        self.path
    }

    /// Sequence numbers the engine has issued so far (the receiver counts each one once).
    pub fn seqs_issued(&self) -> u32 {
        self.tx.engine.next_seq()
    }

    /// Fault injection for tests: completions of data QP `q` reach the engine `lag_ns` late (a
    /// slow path, for the straggler rule) until the QP is re-created.
    #[doc(hidden)]
    pub fn debug_slow_data_qp(&mut self, q: usize, lag_ns: u64) {
        self.debug_lag = Some((q, lag_ns));
    }

    /// Fault injection for tests: moves the sender's end of data QP `q` to the error state, as a
    /// failed link would (its work requests in flight complete flushed). With `notice_now` the
    /// comm treats it as failed at once, before reaping completions already waiting (as when
    /// another QP's failure or the port state shows it first): segments that completed, and that
    /// the receiver counted, are then among those fenced.
    #[doc(hidden)]
    pub fn debug_fail_data_qp(&mut self, q: usize, notice_now: bool) -> NetResult<()> {
        self.qps.data(q).and_then(RcQp::set_error).map_err(verr)?;
        if notice_now {
            let now = self.now();
            let why = format!("data QP {q} failed by debug_fail_data_qp");
            if let Err(e) = self.path_failure(q, why, None, now) {
                return Err(self.fail(e));
            }
        }
        Ok(())
    }

    pub fn params(&self) -> &ConnParams {
        &self.tx.params
    }

    pub fn max_requests(&self) -> usize {
        self.tx.slots.len()
    }

    /// NCCL's profiler handle of the next isend (0: none); its segments' events hang under it.
    pub fn set_event_parent(&mut self, parent: usize) {
        self.tx.events.next_parent = parent;
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
        let ev = self.tx.events.start(
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
        self.tx.add_route(policy, qps)
    }

    /// Messages matched from now on are cut by engine route `route` (from `add_route`).
    pub fn set_route(&mut self, route: u8) {
        self.tx.route = route;
    }

    pub fn qp_stats(&self) -> &[QpStats] {
        self.tx.qp_stats()
    }

    /// Posts, completions and CQ polls of this comm so far (plain counters, never reset).
    pub fn op_counters(&self) -> &OpCounters {
        &self.ops
    }

    pub fn qp_set(&self) -> &QpSet {
        &self.qps
    }

    /// Segments that may still be posted before the receiver publishes more credit.
    pub(crate) fn credit_left(&self) -> u32 {
        self.credit.wrapping_sub(self.imm_posted)
    }

    /// Turns the receive-credit gate off (`false`) or on. Only for the revert check in
    /// crates/transport/tests/verbs_rnr.rs, which shows that without it a stalled receiver draws RNR NAKs.
    #[doc(hidden)]
    pub fn set_credit_gate(&mut self, on: bool) {
        self.credit_gate = on;
    }

    /// One-line state summary for logs and stall diagnostics.
    pub fn debug_state(&self) -> String {
        format!(
            "send to {}: {} segments outstanding, {} messages queued, next seq {}, {} announcements waiting, {} received, credit {} of which {} left, {}, failed: {:?}",
            self.peer,
            self.tx.engine.outstanding(),
            self.tx.engine.queued_messages(),
            self.tx.engine.next_seq(),
            self.tx.matcher.len(),
            self.next_seq,
            self.credit,
            self.credit_left(),
            self.fences.describe(),
            self.tx.failed.check().err().map(|e| e.msg)
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
        let gone = match self.tx.failed.check() {
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
        let (i, buf) = match self.tx.matcher.find(buf.len(), tag) {
            // A send larger than the buffer is cut to it, as net_ib's isend does.
            Match::Buffer(i, len) => (i, buf.prefix(len)),
            Match::NoGroup | Match::Busy => {
                if let Some(e) = gone {
                    return Err(e);
                }
                // Nothing to send yet: reap what completed meanwhile.
                self.progress()?;
                self.check_peer(format_args!("with no receive posted for this send"))?;
                return Ok(None);
            }
        };
        let active = |remote, parent| Active {
            addr: buf.addr() as u64,
            lkey,
            size: buf.len(),
            remote,
            parent,
        };
        let Some((slot, posted)) = self.tx.claim(i, active, gone.is_some(), &self.peer)? else {
            return Ok(None);
        };
        // Post before reaping: the segments go out now, their completions are reaped by test().
        if posted {
            let now = self.now();
            if let Err(e) = self.schedule(now) {
                return Err(self.fail(e));
            }
        }
        Ok(Some(slot))
    }

    /// Some(size) once every segment of request `slot` completed on the wire. A request that
    /// already completed is reported even if the peer has gone since.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        self.test_request(slot)
    }

    fn now(&self) -> u64 {
        self.tx.now()
    }

    /// Fails the comm once the receiver is gone (its bootstrap socket's EOF, after PeerWatch's
    /// grace), naming what was `waiting` for it.
    fn check_peer(&mut self, waiting: std::fmt::Arguments<'_>) -> NetResult<()> {
        if self.watch.gone() {
            let e = NetError::remote(format!("{} {} {waiting}", self.peer, self.watch.why()));
            return Err(self.fail(e));
        }
        Ok(())
    }

    /// Moves everything that can move without blocking (never sleeps).
    pub fn progress(&mut self) -> NetResult<()> {
        self.advance()
    }

    /// Installs the engine's straggler re-hash rule: a drained straggler gets a new QP pair
    /// through the same fence exchange as a failed QP (with nothing to resend).
    pub fn set_rehash_rule(&mut self, rule: RehashRule) -> NetResult<()> {
        self.tx.set_rehash_rule(rule)
    }

    /// The engine drained straggler `qp` (nothing in flight): ask the receiver for a new QP
    /// pair. The QP gets nothing new meanwhile (the engine blocks it).
    #[cold]
    fn begin_rehash(&mut self, qp: usize, now: u64) {
        if self.out[qp] || self.fences.is_pending(qp) {
            return;
        }
        // The engine's re-pin rule names the port (another QP's, or the one it had); the
        // pinner chooses for the re-hash rule's stragglers.
        if let Some(port) = self.qps.aim_repin(qp, self.tx.engine.repin_path(qp)) {
            tracing::info!(target: "dqplb::net", "verbs send comm to {}: data QP {qp} drained by the re-pin rule ({:?}); moving it to UDP source port {port}", self.peer, self.tx.engine.repin_path(qp));
        }
        // A pinned QP moves to another path in place where the device can change a live QP's
        // port (mlx5dv_modify_qp_udp_sport): nothing is in flight on it, so nothing reorders.
        match self.qps.repin_live(qp) {
            Ok(Some(port)) => {
                tracing::info!(target: "dqplb::net", "verbs send comm to {}: data QP {qp} drained as a straggler; re-pinned in place to UDP source port {port} (mlx5dv_modify_qp_udp_sport)", self.peer);
                self.path.rehashed += 1;
                self.path.replaced += 1;
                if let Err(e) = self.tx.engine.path_replaced(qp) {
                    tracing::warn!(target: "dqplb::net", "verbs send comm to {}: data QP {qp} re-pinned but not reopened: {e}", self.peer);
                }
                return;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::info!(target: "dqplb::net", "verbs send comm to {}: data QP {qp}: in-place re-pin failed ({e}); replacing the QP pair", self.peer);
            }
        }
        tracing::info!(target: "dqplb::net", "verbs send comm to {}: data QP {qp} drained as a straggler; asking for a new QP pair (new QPNs, a new ECMP hash)", self.peer);
        self.out[qp] = true;
        self.fences.start_rehash(qp, now);
    }

    /// Data QP `qp` failed (`why`): the engine moves its segments in flight to the resend queue
    /// and stops using it; nothing is posted until the receiver has answered its fence. `imm`:
    /// the immediate of the segment whose completion or post showed the failure. Every other data
    /// QP is then asked for its state (a port going down fails them all at once). Err only when
    /// every data QP has failed.
    #[cold]
    fn path_failure(
        &mut self,
        qp: usize,
        why: String,
        imm: Option<u32>,
        now: u64,
    ) -> NetResult<()> {
        let mut todo = vec![(qp, why, imm)];
        while let Some((qp, why, imm)) = todo.pop() {
            if self.out[qp] {
                continue;
            }
            self.out[qp] = true;
            self.path.failures += 1;
            let first = self
                .first_failure
                .get_or_insert_with(|| why.clone())
                .clone();
            // Their events end with the QP; resends start new ones.
            if let Some(r) = self.event_rings.get_mut(qp) {
                for ev in r.drain(..) {
                    self.tx.events.stop(ev);
                }
            }
            match self.tx.engine.path_failed(qp) {
                Ok(moved) => {
                    // INFO, as TCP's stream failure: isolated, the comm goes on; if it fails after
                    // all (every QP, or the peer gone), that failure is the WARN.
                    tracing::info!(target: "dqplb::net", "verbs send comm to {}: {why}; {moved} segment(s) in flight on it wait for the receiver's fence, then go out again on the other QPs", self.peer);
                    self.fences.start(qp, moved, now);
                    if let Some(i) = imm {
                        self.fences.collect(qp, i);
                    }
                }
                Err(EngineError::AllPathsFailed { qps }) => {
                    return Err(NetError::remote(format!(
                        "{first}; every one of the {qps} data QPs to {} has failed",
                        self.peer
                    )))
                }
                Err(e) => return Err(NetError::internal(format!("{}: {e}", self.peer))),
            }
            for q in 0..self.out.len() {
                if self.out[q] {
                    continue;
                }
                if let Ok(super::qp::QpState::Error) = self.qps.data(q).and_then(RcQp::state) {
                    let qpn = self.qps.data(q).map_or(0, RcQp::qpn);
                    todo.push((
                        q,
                        format!(
                            "data QP {q} (QPN {qpn}) on {} found in the error state",
                            self.qps.device()
                        ),
                        None,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Sends the fences whose immediates are all in (with a new QP for the index, unless it was
    /// re-created MAX_RECREATIONS times), takes the receiver's answers, and fails the comm when
    /// one is overdue.
    #[cold]
    fn drive_fences(&mut self, now: u64) -> NetResult<()> {
        while let Some((qp, imms)) = self.fences.ready() {
            let imms = imms.to_vec();
            let rehash = self.fences.is_rehash(qp);
            let endpoint = if rehash || self.recreations[qp] < MAX_RECREATIONS {
                match self.qps.create_spare() {
                    Ok((spare, ep)) => {
                        self.spares[qp] = Some((spare, ep));
                        Some(ep)
                    }
                    Err(e) => {
                        tracing::warn!(target: "dqplb::net", "verbs send comm to {}: no new QP for data QP {qp}, it stays out: {e}", self.peer);
                        None
                    }
                }
            } else {
                None
            };
            let msg = FenceMsg {
                qp: qp as u16,
                imms,
                endpoint,
            };
            self.watch.send(&msg.encode());
            self.fences.sent(qp);
        }
        while let Some((kind, body)) = self.watch.next_frame(true, &self.peer)? {
            if kind != KIND_FENCED {
                return Err(unexpected(&self.peer, kind));
            }
            let m = FencedMsg::decode(&body, &self.peer)?;
            self.fenced(m)?;
        }
        if let Some(qp) = self.fences.overdue(now, FENCE_TIMEOUT_NS) {
            let first = self.first_failure.clone().unwrap_or_default();
            return Err(NetError::remote(format!(
                "{first}; {} did not answer the fence of data QP {qp} within {} s",
                self.peer,
                FENCE_TIMEOUT_NS / 1_000_000_000
            )));
        }
        Ok(())
    }

    /// The receiver's answer to the fence of one QP: verdicts for the resends, credit back for
    /// writes it never received, and the new QP connected.
    #[cold]
    fn fenced(&mut self, m: FencedMsg) -> NetResult<()> {
        let qp = usize::from(m.qp);
        if qp >= self.out.len() {
            return Err(NetError::remote(format!(
                "{}: FENCED for data QP {qp} of {}",
                self.peer,
                self.out.len()
            )));
        }
        let rehash = self.fences.is_rehash(qp);
        self.fences
            .answered(qp, &m.counted)
            .map_err(|e| NetError::remote(format!("{}: {e}", self.peer)))?;
        self.path.fences += 1;
        let lost = unconsumed(self.imm_on[qp], m.consumed);
        if lost > self.imm_on[qp] {
            return Err(NetError::remote(format!(
                "{}: FENCED says data QP {qp} consumed {} receives, {} writes with immediate were posted on it",
                self.peer, m.consumed, self.imm_on[qp]
            )));
        }
        self.imm_posted = self.imm_posted.wrapping_sub(lost);
        self.imm_on[qp] = 0;
        self.path.credit_returned += u64::from(lost);
        let counted = m.counted.iter().filter(|c| **c).count();
        tracing::info!(target: "dqplb::net", "verbs send comm to {}: data QP {qp} fenced: {} of its {} segment(s) were already counted, {lost} write(s) never arrived", self.peer, counted, m.counted.len());
        let spare = self.spares[qp].take();
        if let (Some((new, ep)), Some(remote)) = (spare, m.endpoint) {
            match self.qps.connect_spare_for(qp, &new, &ep, &remote) {
                Ok(()) => {
                    let old = self.qps.swap_data(qp, new, ep).map_err(verr)?;
                    // Every work request of the old QP has completed (the fence waited for them).
                    self.qps.forget(old.qpn());
                    drop(old);
                    if rehash {
                        self.path.rehashed += 1;
                        if self.debug_lag.is_some_and(|(q, _)| q == qp) {
                            self.debug_lag = None;
                        }
                    } else {
                        self.recreations[qp] += 1;
                    }
                    self.out[qp] = false;
                    self.path.replaced += 1;
                    self.tx.engine.path_replaced(qp).map_err(|e| {
                        NetError::internal(format!(
                            "{}: data QP {qp} not replaceable: {e}",
                            self.peer
                        ))
                    })?;
                    tracing::info!(target: "dqplb::net", "verbs send comm to {}: data QP {qp} re-created as QPN {} (peer QPN {})", self.peer, ep.qpn, remote.qpn);
                }
                Err(e) => {
                    tracing::warn!(target: "dqplb::net", "verbs send comm to {}: the new data QP {qp} did not connect, it stays out: {e}", self.peer);
                }
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
            self.tx
                .matcher
                .push(&self.peer, &self.targets[..bufs.len()])?;
        }
    }

    fn reap_sends(&mut self, now: u64) -> NetResult<bool> {
        let mut any = false;
        loop {
            let n = self.qps.poll_send(&mut self.wcs).map_err(verr)?;
            self.ops.polled(&self.wcs[..n]);
            for i in 0..n {
                let wc = self.wcs[i];
                let Some(QpRole::Data(qp)) = self.qps.role_of(wc.qp_num) else {
                    self.qps
                        .check(&wc)
                        .map_err(|e| NetError::remote(format!("{}: {e}", self.peer)))?;
                    return Err(NetError::internal(format!(
                        "{}: send completion on a non-data QP {}",
                        self.peer, wc.qp_num
                    )));
                };
                if !wc.is_success() || self.out[qp] {
                    self.failed_completion(qp, &wc, now)?;
                    any = true;
                    continue;
                }
                let at = match self.debug_lag {
                    Some((q, lag)) if q == qp => now + lag,
                    _ => now,
                };
                self.tx.engine.completed(qp, at).map_err(|e| {
                    NetError::internal(format!(
                        "{}: completion without a segment in flight: {e}",
                        self.peer
                    ))
                })?;
                if self.tx.events.enabled() {
                    if let Some(ev) = self.event_rings.get_mut(qp).and_then(VecDeque::pop_front) {
                        self.tx.events.stop(ev);
                    }
                }
                any = true;
            }
            if n < POLL_BATCH {
                return Ok(any);
            }
        }
    }

    /// A completion of data QP `qp` that failed, or of one already failed (a success that came
    /// after the failure was seen: its segment was moved for resending too). Its immediate goes to
    /// the QP's fence.
    #[cold]
    fn failed_completion(&mut self, qp: usize, wc: &WorkCompletion, now: u64) -> NetResult<()> {
        let imm = (wc.wr_id >> 32) as u32;
        if self.out[qp] {
            if !self.fences.collect(qp, imm) {
                return Err(NetError::internal(format!(
                    "{}: completion of data QP {qp} (QPN {}) after its fence was sent",
                    self.peer, wc.qp_num
                )));
            }
            return Ok(());
        }
        let why = format!(
            "data QP {qp} (QPN {}) on {}: {} (status {}, vendor error {:#x})",
            wc.qp_num,
            self.qps.device(),
            status_str(wc.status),
            wc.status,
            wc.vendor_err
        );
        self.path_failure(qp, why, Some(imm), now)
    }

    /// Posts what the engine schedules while the receive credit lasts: every WRITE_WITH_IMM
    /// consumes one receive of the peer's SRQ, so one beyond the credit could draw an RNR NAK.
    /// The engine is asked for a segment only when one may go out (it is not changed).
    fn schedule(&mut self, now: u64) -> NetResult<bool> {
        let mut any = false;
        // A failed QP's segments wait in the engine's resend queue (served first) for the fence.
        while !self.fences.holding() && (self.credit_left() > 0 || !self.credit_gate) {
            let Some(t) = self.tx.engine.poll_transmit(now) else {
                break;
            };
            let Active {
                addr,
                lkey,
                remote,
                parent,
                ..
            } = self.tx.scheduled(t.token)?;
            if t.offset + u64::from(t.len) > remote.capacity {
                return Err(NetError::internal(format!(
                    "segment {}+{} beyond the announced {} bytes",
                    t.offset, t.len, remote.capacity
                )));
            }
            // A resend of a segment the receiver already counted carries no byte and no immediate:
            // it only completes the segment, in order, on its new QP.
            let counted = self.fences.resends_left() > 0 && self.resend_counted(t.imm)?;
            let local = LocalSlice {
                addr: addr + t.offset,
                len: if counted { 0 } else { t.len },
                lkey,
            };
            let dst = RemoteSlice {
                addr: remote.addr + t.offset,
                rkey: remote.rkey,
            };
            let id = wr_id(t.imm, t.token);
            let imm = (!counted).then_some(t.imm);
            let posted = self
                .qps
                .data(t.qp)
                .and_then(|qp| qp.post_write(id, local, dst, imm, true));
            if let Err(e) = posted {
                // The segment is in the engine's ring of that QP: it goes with the QP's others.
                let qpn = self.qps.data(t.qp).map_or(0, RcQp::qpn);
                let why = format!("data QP {} (QPN {qpn}): {e}", t.qp);
                self.path_failure(t.qp, why, Some(t.imm), now)?;
                continue;
            }
            self.ops.send_posts += 1;
            if !counted {
                self.imm_posted = self.imm_posted.wrapping_add(1);
                self.imm_on[t.qp] = self.imm_on[t.qp].wrapping_add(1);
            }
            if self.tx.events.enabled() {
                self.segment_event(t.qp, parent, id, local.len);
            }
            any = true;
        }
        Ok(any)
    }

    /// The fence's verdict for a resend of `imm`, and the resend counted.
    #[cold]
    fn resend_counted(&mut self, imm: u32) -> NetResult<bool> {
        let Some(counted) = self.fences.take_verdict(imm) else {
            return Err(NetError::internal(format!(
                "{}: the engine resent immediate {imm:#x}, which no fence answered",
                self.peer
            )));
        };
        if counted {
            self.path.resent_empty += 1;
        } else {
            self.path.resent_data += 1;
        }
        Ok(counted)
    }
}

impl Requests for VerbsSendComm {
    type Core = SendCore<Active, FifoBuf>;

    fn core(&mut self) -> &mut SendCore<Active, FifoBuf> {
        &mut self.tx
    }

    /// One pass: the FIFO, then post before reaping; the clock is read once. Another round only
    /// when completions freed window room for segments still queued.
    fn step(&mut self) -> NetResult<()> {
        self.read_announces()?;
        let now = self.now();
        for _round in 0..4 {
            self.schedule(now)?;
            let completed = self.reap_sends(now)?;
            self.tx.finish_done();
            if !completed || self.tx.engine.queued_messages() == 0 {
                break;
            }
        }
        while let Some(PathEvent::Replace { qp }) = self.tx.engine.poll_path_event() {
            self.begin_rehash(qp, now);
        }
        if self.fences.any_pending() {
            let held = self.fences.holding();
            self.drive_fences(now)?;
            if held && !self.fences.holding() {
                // answered: the resends go out now
                self.schedule(now)?;
            }
        }
        Ok(())
    }

    /// RDMA alone shows a vanished receiver only once a write exhausts its retries (tens of
    /// seconds, or never for a send still held back for its group): the bootstrap socket's EOF,
    /// after PeerWatch's grace for completions on their way, fails it now.
    fn check_pending(&mut self, slot: u32) -> NetResult<()> {
        self.check_peer(format_args!("while send {slot} was still pending"))
    }
}

impl Drop for VerbsSendComm {
    fn drop(&mut self) {
        // Segments still in flight end their profiler events with the comm.
        for r in &self.event_rings {
            for &ev in r {
                self.tx.events.stop(ev);
            }
        }
        // One line per comm at close (NCCL_DEBUG=INFO); `dqplb perf` turns it into per-message
        // figures.
        tracing::info!(target: "dqplb::stats", "verbs send comm to {} closed: op counts: {}", self.peer, self.ops.summary());
    }
}
