//! The sending side of one connection: a message ring cut lazily into segments, per-QP in-flight
//! rings fed by the policy, FIFO completions per QP, and in-order release of message tokens.

use super::depth::{DepthAdapt, DepthRule, DepthStep, RepinPath, RepinRule};
use super::imm::{self, seq_distance};
use super::params::{check_initial_seq, REORDER_SLACK};
use super::paths::{PathEvent, RehashRule, Straggler};
use super::policy::{AnyPolicy, Cursor, Policy, Room};
use super::{EngineError, EngineParams, PolicyKind, QpStats};
use arrayvec::ArrayVec;
use std::collections::VecDeque;

/// Most routes (policy + QP subset) one sender holds: the configured one and up to three more.
pub const MAX_ROUTES: usize = 4;

/// A way to cut messages: a policy and the QPs it may use.
#[derive(Debug, Clone)]
struct Route {
    policy: AnyPolicy,
    /// QPs this route may place segments on.
    qps: Room,
}

/// One segment to put on the wire now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Data QP index, `0 .. qps`.
    pub qp: usize,
    /// Immediate: sequence number and last flag (see [`imm`]).
    pub imm: u32,
    /// The driver's token of the message this segment belongs to.
    pub token: u32,
    /// Byte offset of the segment within its message.
    pub offset: u64,
    /// Segment length in bytes (0 only for a zero-byte message).
    pub len: u32,
}

/// A posted message in the ring.
#[derive(Debug, Clone, Copy, Default)]
struct Msg {
    len: u64,
    cut: u64,
    segs_cut: u64,
    segs_done: u64,
    token: u32,
    /// Index into the sender's routes, fixed when the message is posted.
    route: u8,
}

/// A segment in flight on a QP (what a resend on another QP needs, too).
#[derive(Debug, Clone, Copy, Default)]
struct Seg {
    /// Ring slot of its message.
    slot: u32,
    /// Its immediate (sequence number and last flag).
    imm: u32,
    posted_at: u64,
    offset: u64,
    len: u32,
}

/// Sender state machine of one connection. Laid out for the data path (`repr(C)`, hot fields
/// first): what every post and completion reads fits the first lines; route 0 follows.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct Sender {
    /// Absolute message counters: released < cut-complete (cursor) <= posted.
    msg_head: u64,
    msg_cursor: u64,
    msg_tail: u64,
    msg_mask: u64,
    /// Bit q set: QP q has room.
    room: Room,
    /// QPs that get no new segment: draining stragglers and failed paths.
    blocked: Room,
    outstanding: usize,
    next_seq: u32,
    /// A sequence number at or before the oldest incomplete segment.
    oldest_hint: u32,
    span: u32,
    stride_shift: u32,
    stride_mask: u32,
    /// Segments in flight per QP now: `max_outstanding`, or the depth rule's raised depth.
    depth: u32,
    max_outstanding: u32,
    qps: usize,
    /// Message ring, power-of-two capacity >= max_messages.
    msgs: Vec<Msg>,
    /// Per-QP in-flight rings, `stride` entries each, flattened.
    segs: Vec<Seg>,
    qp_head: Vec<u32>,
    stats: Vec<QpStats>,
    /// Route 0 is the configured policy over every QP; `add_route` appends others.
    routes: ArrayVec<Route, MAX_ROUTES>,
    /// Segments of failed QPs waiting to go out again (capacity: one QP's in-flight ring; a
    /// second QP failing while the first one's segments still wait may grow it, off the data
    /// path).
    resend: VecDeque<Seg>,
    draining: Room,
    dead: Room,
    /// Draining QPs already reported by `poll_path_event`.
    reported: Room,
    max_messages: usize,
    straggler: Option<Straggler>,
    depth_rule: Option<DepthAdapt>,
}

impl Sender {
    /// A sender whose first segment carries sequence number 0.
    pub fn new(p: &EngineParams) -> Result<Sender, EngineError> {
        Sender::with_initial_seq(p, 0)
    }

    /// A sender whose first segment carries `initial_seq` (< 2^24); the receiver must be built
    /// with the same value. Lets tests exercise wrap-around at 2^24.
    pub fn with_initial_seq(p: &EngineParams, initial_seq: u32) -> Result<Sender, EngineError> {
        p.validate()?;
        check_initial_seq(initial_seq)?;
        let msg_cap = p.max_messages.next_power_of_two();
        let stride = p.max_outstanding.next_power_of_two();
        let mut routes = ArrayVec::new();
        routes.push(Route {
            policy: AnyPolicy::new(p),
            qps: Room::all(p.qps),
        });
        Ok(Sender {
            routes,
            qps: p.qps,
            depth: p.max_outstanding,
            max_outstanding: p.max_outstanding,
            max_messages: p.max_messages,
            msgs: vec![Msg::default(); msg_cap],
            msg_mask: msg_cap as u64 - 1,
            msg_head: 0,
            msg_cursor: 0,
            msg_tail: 0,
            segs: vec![Seg::default(); p.qps * stride as usize],
            stride_shift: stride.trailing_zeros(),
            stride_mask: stride - 1,
            qp_head: vec![0; p.qps],
            stats: vec![QpStats::new(); p.qps],
            room: Room::all(p.qps),
            outstanding: 0,
            next_seq: initial_seq,
            oldest_hint: initial_seq,
            span: (p.window() * u64::from(REORDER_SLACK)) as u32,
            blocked: Room::default(),
            draining: Room::default(),
            dead: Room::default(),
            reported: Room::default(),
            resend: VecDeque::with_capacity(stride as usize),
            straggler: None,
            depth_rule: None,
        })
    }

    /// Adds a route: `policy` over QPs `0 .. qps` (clamped to the connection's QPs, 0 = all), with
    /// the segment size of the configured one; returns its index for `post_routed`. Called at
    /// set-up: it never allocates (at most [`MAX_ROUTES`] routes).
    pub fn add_route(
        &mut self,
        policy: PolicyKind,
        qps: usize,
        segment_bytes: u32,
    ) -> Result<u8, EngineError> {
        let n = if qps == 0 {
            self.qps
        } else {
            qps.min(self.qps)
        };
        let p = EngineParams {
            qps: n,
            max_outstanding: self.max_outstanding,
            segment_bytes,
            max_messages: self.max_messages,
            policy,
        };
        p.validate()?;
        let route = Route {
            policy: AnyPolicy::new(&p),
            qps: Room::all(n),
        };
        let index = self.routes.len();
        self.routes
            .try_push(route)
            .map_err(|_| EngineError::TooManyRoutes { limit: MAX_ROUTES })?;
        Ok(index as u8)
    }

    /// Routes held (1 + those added).
    pub fn routes(&self) -> usize {
        self.routes.len()
    }

    /// Queues a message of `len` bytes identified by the driver's `token`, on route 0.
    pub fn post(&mut self, token: u32, len: u64) -> Result<(), EngineError> {
        self.post_routed(token, len, 0)
    }

    /// Queues a message on `route` (from `add_route`; 0 = the configured policy).
    pub fn post_routed(&mut self, token: u32, len: u64, route: u8) -> Result<(), EngineError> {
        if (self.msg_tail - self.msg_head) as usize >= self.max_messages {
            return Err(EngineError::TooManyMessages {
                limit: self.max_messages,
            });
        }
        let Some(r) = self.routes.get(route as usize) else {
            return Err(EngineError::NoSuchRoute {
                route,
                routes: self.routes.len(),
            });
        };
        r.policy.check_len(len)?;
        self.msgs[(self.msg_tail & self.msg_mask) as usize] = Msg {
            len,
            cut: 0,
            segs_cut: 0,
            segs_done: 0,
            token,
            route,
        };
        self.msg_tail += 1;
        Ok(())
    }

    /// The next segment to put on the wire, if the policy finds room for it; `now` (driver
    /// units) is recorded to measure the segment's completion latency.
    #[inline]
    pub fn poll_transmit(&mut self, now: u64) -> Option<Transmit> {
        if !self.resend.is_empty() {
            return self.transmit_resend(now);
        }
        if self.msg_cursor == self.msg_tail {
            return None;
        }
        if seq_distance(self.oldest_hint, self.next_seq) >= self.span && !self.refresh_oldest() {
            return None;
        }
        let slot = (self.msg_cursor & self.msg_mask) as usize;
        let msg = &mut self.msgs[slot];
        let cursor = Cursor {
            len: msg.len,
            offset: msg.cut,
            index: msg.segs_cut,
            serial: self.msg_cursor,
        };
        // The route index was checked at post; `get_mut` keeps a corrupt one from panicking.
        let r = self.routes.get_mut(msg.route as usize)?;
        let (qp, len) = r
            .policy
            .choose(&cursor, self.room.and(r.qps), &self.stats)?;
        let seq = self.next_seq;
        self.next_seq = imm::seq_add(seq, 1);
        let offset = msg.cut;
        let cut = offset + u64::from(len);
        let last = cut == msg.len;
        let token = msg.token;
        msg.cut = cut;
        msg.segs_cut += 1;
        if last {
            self.msg_cursor += 1;
        }
        let st = &mut self.stats[qp];
        let pos = (self.qp_head[qp] + st.outstanding) & self.stride_mask;
        let imm = imm::encode(seq, last);
        self.segs[(qp << self.stride_shift) | pos as usize] = Seg {
            slot: slot as u32,
            imm,
            posted_at: now,
            offset,
            len,
        };
        st.on_post(len);
        if st.outstanding == self.depth {
            self.room.clear(qp);
        }
        self.outstanding += 1;
        Some(Transmit {
            qp,
            imm,
            token,
            offset,
            len,
        })
    }

    /// The oldest segment of a failed QP again, on the first healthy QP with room (same
    /// immediate, offset and length: the receiver counts its sequence number once).
    #[cold]
    fn transmit_resend(&mut self, now: u64) -> Option<Transmit> {
        let qp = self.room.next_from(0)?;
        let mut seg = self.resend.pop_front()?;
        seg.posted_at = now;
        let st = &mut self.stats[qp];
        let pos = (self.qp_head[qp] + st.outstanding) & self.stride_mask;
        self.segs[(qp << self.stride_shift) | pos as usize] = seg;
        st.on_post(seg.len);
        st.resent += 1;
        if st.outstanding == self.depth {
            self.room.clear(qp);
        }
        self.outstanding += 1;
        Some(Transmit {
            qp,
            imm: seg.imm,
            token: self.msgs[seg.slot as usize].token,
            offset: seg.offset,
            len: seg.len,
        })
    }

    /// Installs the straggler re-hash rule (allocates its per-QP state now, never later).
    pub fn set_rehash_rule(&mut self, rule: RehashRule) -> Result<(), EngineError> {
        rule.validate()?;
        self.straggler = Some(Straggler::new(rule, self.qps));
        Ok(())
    }

    /// Installs the depth rule: the per-QP window rises to `rule.raised` while the QPs'
    /// latencies diverge. Allocates its state and the deeper in-flight rings now, so it must
    /// come before the first message is posted.
    pub fn set_depth_rule(&mut self, rule: DepthRule) -> Result<(), EngineError> {
        rule.validate(self.max_outstanding)?;
        if !self.is_idle() || self.outstanding != 0 {
            return super::error::bad_param(
                "depth rule",
                self.messages() as u64,
                "must be installed before the first message is posted",
            );
        }
        let stride = rule.raised.next_power_of_two();
        if stride > self.stride_mask + 1 {
            self.segs = vec![Seg::default(); self.qps * stride as usize];
            self.stride_shift = stride.trailing_zeros();
            self.stride_mask = stride - 1;
            self.qp_head.iter_mut().for_each(|h| *h = 0);
        }
        self.depth_rule = Some(DepthAdapt::new(rule, self.qps));
        Ok(())
    }

    /// Segments in flight allowed per QP now (`max_outstanding` unless the depth rule raised it).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Times the depth rule raised the per-QP window (0 without the rule).
    pub fn depth_raises(&self) -> u64 {
        self.depth_rule.as_ref().map_or(0, |d| d.raises())
    }

    /// The depth rule installed, if any.
    pub fn depth_rule(&self) -> Option<DepthRule> {
        self.depth_rule.as_ref().map(|d| d.rule())
    }

    /// What a depth-rule check asked: a new per-QP window, a QP to drain for a re-pin.
    #[cold]
    fn depth_step(&mut self, step: DepthStep) {
        if let Some(raise) = step.raise {
            let depth = match (&self.depth_rule, raise) {
                (Some(d), true) => d.raised_depth(),
                _ => self.max_outstanding,
            };
            self.set_depth(depth);
        }
        if let Some((q, _)) = step.repin {
            self.draining.set(q);
            self.block(q);
        }
    }

    /// Adds trial re-pins to the installed depth rule (see [`RepinRule`]): a QP that stays the
    /// slowest is drained and reported as [`PathEvent::Replace`], and
    /// [`repin_path`](Self::repin_path) says which path its replacement takes. Allocates its
    /// state now; the depth rule must be installed first.
    pub fn set_repin_rule(&mut self, rule: RepinRule) -> Result<(), EngineError> {
        rule.validate()?;
        let Some(d) = &mut self.depth_rule else {
            return super::error::bad_param(
                "repin rule",
                0,
                "needs the depth rule installed first",
            );
        };
        d.set_repin(rule, self.qps);
        Ok(())
    }

    /// Where the replacement of drained QP `qp` goes when the re-pin rule drained it (None: it
    /// was drained by the re-hash rule, or is not draining: a new path as the transport picks).
    /// Valid from the [`PathEvent::Replace`] until `path_replaced`.
    pub fn repin_path(&self, qp: usize) -> Option<RepinPath> {
        if !self.draining.has(qp) {
            return None;
        }
        self.depth_rule.as_ref()?.repin_path(qp)
    }

    /// The trial re-pin rule installed, if any.
    pub fn repin_rule(&self) -> Option<RepinRule> {
        self.depth_rule.as_ref().and_then(|d| d.repin_rule())
    }

    /// Moves the re-pin rule made (not counting the moves back; 0 without the rule).
    pub fn depth_repins(&self) -> u32 {
        self.depth_rule.as_ref().map_or(0, |d| d.repins())
    }

    /// The per-QP window becomes `depth`: QPs below it get room, QPs at or above it lose it.
    #[cold]
    fn set_depth(&mut self, depth: u32) {
        self.depth = depth;
        for q in 0..self.qps {
            if self.stats[q].outstanding < depth && !self.blocked.has(q) {
                self.room.set(q);
            } else {
                self.room.clear(q);
            }
        }
    }

    /// QPs that may carry new segments (neither draining nor failed).
    pub fn healthy_qps(&self) -> Room {
        Room::all(self.qps).without(self.blocked)
    }

    /// Stops scheduling on `qp` (draining or dead).
    fn block(&mut self, qp: usize) {
        self.blocked.set(qp);
        self.room.clear(qp);
    }

    /// The next thing the transport must do for path health, if any: a drained straggler to
    /// replace (reported once).
    pub fn poll_path_event(&mut self) -> Option<PathEvent> {
        let mut waiting = self.draining.without(self.reported);
        let mut q = waiting.next_from(0)?;
        loop {
            if self.stats[q].outstanding == 0 {
                self.reported.set(q);
                return Some(PathEvent::Replace { qp: q });
            }
            waiting.clear(q);
            q = waiting.next_from(q)?;
        }
    }

    /// A healthy QP with segments in flight that completed nothing for `timeout` and whose
    /// oldest segment was posted at least `timeout` before `now`, while another QP completed a
    /// segment after that post (a blackholed path: no completion, no error, the connection
    /// alive around it); the lowest-numbered one. The transport then treats it as failed
    /// (`path_failed`). When no other QP completed anything since, the whole connection is
    /// silent (the peer or this host stalled, not one path): no QP is reported. A scan over the
    /// QPs: call it at most every `timeout / 4` or so, not per segment.
    #[cold]
    pub fn stalled(&self, now: u64, timeout: u64) -> Option<usize> {
        (0..self.qps).find(|&q| {
            let posted_at =
                self.segs[(q << self.stride_shift) | self.qp_head[q] as usize].posted_at;
            !self.dead.has(q)
                && self.stats[q].outstanding > 0
                && now.saturating_sub(posted_at) >= timeout
                && now.saturating_sub(self.stats[q].last_completed_at) >= timeout
                && (0..self.qps).any(|p| p != q && self.stats[p].last_completed_at > posted_at)
        })
    }

    /// Path `qp` failed (verbs: a QP in error, TCP: a reset stream): its segments in flight go out
    /// again on healthy QPs, and it gets nothing new until `path_replaced`. Returns how many were
    /// moved; Err when no QP is left that is not failed.
    pub fn path_failed(&mut self, qp: usize) -> Result<u32, EngineError> {
        if qp >= self.qps {
            return Err(EngineError::NoSuchQp { qp, qps: self.qps });
        }
        let moved = if self.dead.has(qp) {
            0
        } else {
            let st = &mut self.stats[qp];
            let n = st.outstanding;
            for k in 0..n {
                let pos = (self.qp_head[qp] + k) & self.stride_mask;
                self.resend
                    .push_back(self.segs[(qp << self.stride_shift) | pos as usize]);
            }
            st.outstanding = 0;
            st.failures += 1;
            self.qp_head[qp] = 0;
            self.outstanding -= n as usize;
            n
        };
        self.dead.set(qp);
        self.draining.clear(qp);
        self.reported.clear(qp);
        self.block(qp);
        if self.dead.bits() == Room::all(self.qps).bits() {
            return Err(EngineError::AllPathsFailed { qps: self.qps });
        }
        Ok(moved)
    }

    /// `qp` has a new path (a replaced straggler or a re-created failed QP): it is scheduled again
    /// with fresh latency figures.
    pub fn path_replaced(&mut self, qp: usize) -> Result<(), EngineError> {
        if qp >= self.qps {
            return Err(EngineError::NoSuchQp { qp, qps: self.qps });
        }
        if !self.blocked.has(qp) {
            return Ok(());
        }
        if self.stats[qp].outstanding != 0 {
            return Err(EngineError::PathBusy {
                qp,
                outstanding: self.stats[qp].outstanding,
            });
        }
        let st = &mut self.stats[qp];
        if self.draining.has(qp) {
            st.rehashes += 1;
        }
        // A QP the re-pin rule moved starts from the connection's median latency.
        st.latency_ewma = self
            .depth_rule
            .as_mut()
            .and_then(|d| d.replaced(qp))
            .unwrap_or(0.0);
        for r in [
            &mut self.blocked,
            &mut self.draining,
            &mut self.dead,
            &mut self.reported,
        ] {
            r.clear(qp);
        }
        self.qp_head[qp] = 0;
        self.room.set(qp);
        if let Some(s) = &mut self.straggler {
            s.reset(qp);
        }
        Ok(())
    }

    /// Moves the oldest-incomplete hint to the true oldest; true if the span now allows a send.
    #[cold]
    fn refresh_oldest(&mut self) -> bool {
        let mut oldest = self.next_seq;
        let mut age = 0;
        if let Some(s) = self.resend.front() {
            let seq = imm::seq_of(s.imm);
            age = seq_distance(seq, self.next_seq);
            oldest = seq;
        }
        for qp in 0..self.qps {
            if self.stats[qp].outstanding > 0 {
                let seq = imm::seq_of(
                    self.segs[(qp << self.stride_shift) | self.qp_head[qp] as usize].imm,
                );
                let a = seq_distance(seq, self.next_seq);
                if a > age {
                    age = a;
                    oldest = seq;
                }
            }
        }
        self.oldest_hint = oldest;
        age < self.span
    }

    /// The oldest outstanding segment on `qp` completed at driver time `now`.
    #[inline]
    pub fn completed(&mut self, qp: usize, now: u64) -> Result<(), EngineError> {
        let Some(st) = self.stats.get_mut(qp) else {
            return Err(EngineError::NoSuchQp { qp, qps: self.qps });
        };
        if st.outstanding == 0 {
            return Err(EngineError::NothingOutstanding { qp });
        }
        let head = self.qp_head[qp];
        let seg = self.segs[(qp << self.stride_shift) | head as usize];
        self.qp_head[qp] = (head + 1) & self.stride_mask;
        if st.outstanding == self.depth && !self.blocked.has(qp) {
            self.room.set(qp);
        }
        let latency = now.saturating_sub(seg.posted_at);
        st.on_complete(latency, now);
        self.outstanding -= 1;
        self.msgs[seg.slot as usize].segs_done += 1;
        if let Some(s) = &mut self.straggler {
            if !self.blocked.has(qp) {
                let eligible = Room::all(self.qps).without(self.blocked);
                if let Some(q) = s.on_complete(qp, latency, now, &self.stats, eligible) {
                    self.draining.set(q);
                    self.block(q);
                }
            }
        }
        if let Some(d) = &mut self.depth_rule {
            let eligible = Room::all(self.qps).without(self.blocked);
            if let Some(step) = d.on_complete(&self.stats, eligible) {
                self.depth_step(step);
            }
        }
        Ok(())
    }

    /// Token of the oldest message if all its segments completed; tokens come strictly in
    /// posting order.
    #[inline]
    pub fn poll_done(&mut self) -> Option<u32> {
        if self.msg_head == self.msg_cursor {
            return None;
        }
        let m = &self.msgs[(self.msg_head & self.msg_mask) as usize];
        if m.segs_done != m.segs_cut {
            return None;
        }
        self.msg_head += 1;
        Some(m.token)
    }

    /// Per-QP counters, indexed by QP.
    pub fn qp_stats(&self) -> &[QpStats] {
        &self.stats
    }

    /// Messages posted whose segments are not all transmitted yet (including a partly cut one).
    pub fn queued_messages(&self) -> usize {
        (self.msg_tail - self.msg_cursor) as usize
    }

    /// Messages held: posted and not yet returned by `poll_done`.
    pub fn messages(&self) -> usize {
        (self.msg_tail - self.msg_head) as usize
    }

    /// Segments transmitted and not yet completed, over all QPs.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// No message held: nothing queued, in flight, or awaiting `poll_done`.
    pub fn is_idle(&self) -> bool {
        self.msg_tail == self.msg_head
    }

    /// Sequence number the next segment will carry.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// Largest sequence span (oldest incomplete to newest sent, plus one) the sender allows:
    /// `REORDER_SLACK * qps * max_outstanding`.
    pub fn reorder_span(&self) -> u32 {
        self.span
    }

    /// Bytes of state this sender holds (all allocated at construction).
    pub fn footprint_bytes(&self) -> usize {
        use std::mem::size_of;
        size_of::<Sender>()
            + self.msgs.len() * size_of::<Msg>()
            + self.segs.len() * size_of::<Seg>()
            + self.qp_head.len() * size_of::<u32>()
            + self.stats.len() * size_of::<QpStats>()
            + self.resend.capacity() * size_of::<Seg>()
            + self.straggler.as_ref().map_or(0, |s| s.footprint_bytes())
            + self.depth_rule.as_ref().map_or(0, |d| d.footprint_bytes())
    }
}
