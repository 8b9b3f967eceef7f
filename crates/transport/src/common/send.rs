//! The sender's half of every transport: its engine built from the connection parameters, request
//! slots, the matching of isends to the receive groups the peer announced, and engine routes.

use std::fmt::Display;
use std::time::Instant;

use dqplb_engine::{DepthRule, EngineParams, PolicyKind, QpStats, RehashRule, Sender};

use crate::common::RequestTable;
use crate::events::CommEvents;
use crate::slots::{GroupMatcher, Slots, Sticky, MAX_RECVS};
use crate::tcp::ConnParams;
use crate::{NetError, NetResult};

/// An in-flight send as a transport records it.
pub(crate) trait Outgoing: Copy {
    /// Bytes of the send: the message the engine cuts, and the size test() reports.
    fn bytes(&self) -> usize;
}

impl<A: Copy, R> RequestTable for SendCore<A, R> {
    type Active = A;
    const SIDE: &'static str = "send";

    fn slots(&mut self) -> &mut Slots<A> {
        &mut self.slots
    }

    fn sticky(&mut self) -> &mut Sticky {
        &mut self.failed
    }
}

/// A send comm's engine and requests; `A` is a transport's in-flight send, `R` where a receive
/// buffer of the peer lives (a buffer id for TCP, address and rkey for verbs).
pub(crate) struct SendCore<A: Copy, R> {
    pub(crate) engine: Sender,
    pub(crate) slots: Slots<A>,
    /// Announced groups not yet matched completely, strictly in order.
    pub(crate) matcher: GroupMatcher<R>,
    /// Engine route of the messages posted next (0: the configured policy; see `add_route`).
    pub(crate) route: u8,
    /// Profiler events (NCCL v10+).
    pub(crate) events: CommEvents,
    pub(crate) failed: Sticky,
    pub(crate) params: ConnParams,
    /// A route or a rule was added to the engine (the depth rule must come before).
    engine_set_up: bool,
    epoch: Instant,
}

impl<A: Outgoing, R: Copy + Default> SendCore<A, R> {
    /// The sender's engine for `params` (a message per send of the peer's grouped receives);
    /// `peer` names the connection in errors, `who` the comm in its failure's log line.
    pub(crate) fn new(params: ConnParams, peer: &dyn Display, who: String) -> NetResult<Self> {
        let engine = Self::engine_for(&params, params.outstanding).map_err(|e| {
            NetError::invalid_argument(format!("engine parameters for {peer}: {e}"))
        })?;
        let n = params.max_messages as usize;
        Ok(SendCore {
            engine,
            // NCCL may hold MAX_REQUESTS grouped receives' worth of sends (net_ib: 32 x 8).
            slots: Slots::new(n * MAX_RECVS),
            matcher: GroupMatcher::new(n),
            route: 0,
            events: CommEvents::current(),
            failed: Sticky::new(who),
            params,
            engine_set_up: false,
            epoch: Instant::now(),
        })
    }

    /// The engine for `params` at `depth` segments per QP.
    fn engine_for(params: &ConnParams, depth: u32) -> Result<Sender, dqplb_engine::EngineError> {
        Sender::new(&EngineParams {
            qps: params.qps as usize,
            max_outstanding: depth,
            segment_bytes: params.segment_bytes,
            // Up to MAX_RECVS sends per grouped receive of the peer, each one engine message.
            max_messages: params.max_messages as usize * MAX_RECVS,
            policy: params.policy,
        })
    }

    /// Installs the engine's depth rule: the connection was sized (and told its peer) for
    /// `params.outstanding` segments per QP, at least `rule.raised`; the engine now runs `base`
    /// per QP and rises to `rule.raised` while its QPs' latencies diverge. The engine is rebuilt,
    /// so this comes before any route, re-hash rule or message.
    pub(crate) fn set_depth_rule(&mut self, base: u32, rule: DepthRule) -> NetResult<()> {
        let bad = |what: String| Err(NetError::invalid_argument(format!("depth rule: {what}")));
        if self.engine_set_up || self.engine.next_seq() != 0 || !self.engine.is_idle() {
            return bad("must be installed before any route, re-hash rule or message".into());
        }
        if rule.raised > self.params.outstanding {
            return bad(format!(
                "raised depth {} is above the {} segments per QP the connection was sized for",
                rule.raised, self.params.outstanding
            ));
        }
        let mut engine = Self::engine_for(&self.params, base)
            .map_err(|e| NetError::invalid_argument(format!("depth rule base: {e}")))?;
        engine
            .set_depth_rule(rule)
            .map_err(|e| NetError::invalid_argument(format!("depth rule: {e}")))?;
        self.engine = engine;
        Ok(())
    }

    /// Bytes of state beside the struct itself: the engine, the request table, the matcher.
    pub(crate) fn footprint_bytes(&self) -> usize {
        self.engine.footprint_bytes()
            + self.slots.footprint_bytes()
            + self.matcher.footprint_bytes()
    }

    /// Nanoseconds since the comm was made: the engine's clock.
    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Adds an engine route (`policy` over the first `qps` data QPs, 0 = all).
    pub(crate) fn add_route(&mut self, policy: PolicyKind, qps: usize) -> NetResult<u8> {
        self.engine_set_up = true;
        self.engine
            .add_route(policy, qps, self.params.segment_bytes)
            .map_err(|e| NetError::internal(format!("cannot add an engine route: {e}")))
    }

    pub(crate) fn qp_stats(&self) -> &[QpStats] {
        self.engine.qp_stats()
    }

    /// Installs the engine's straggler re-hash rule.
    pub(crate) fn set_rehash_rule(&mut self, rule: RehashRule) -> NetResult<()> {
        self.engine_set_up = true;
        self.engine
            .set_rehash_rule(rule)
            .map_err(|e| NetError::invalid_argument(format!("re-hash rule: {e}")))
    }

    /// Takes a request for buffer `i` of the first announced group (`make` builds it from the
    /// buffer's location and the isend's profiler parent). When it completes the group, the group
    /// goes to the engine in buffer order, unless `hold` (the peer is gone). Ok(None): every
    /// request slot is busy; Ok(Some((slot, true))): a group went to the engine.
    pub(crate) fn claim(
        &mut self,
        i: usize,
        make: impl FnOnce(R, usize) -> A,
        hold: bool,
        peer: &dyn Display,
    ) -> NetResult<Option<(u32, bool)>> {
        let Some(target) = self.matcher.target(i) else {
            return Err(NetError::internal("matched receive buffer vanished"));
        };
        let Some(slot) = self
            .slots
            .alloc(make(target.remote, self.events.next_parent))
        else {
            return Ok(None);
        };
        let Some(group) = self.matcher.assign(i, slot) else {
            return Ok(Some((slot, false)));
        };
        if hold {
            return Ok(Some((slot, false)));
        }
        for &s in group.sends() {
            let len = self.slots.active(s).map_or(0, |a| a.bytes());
            if let Err(e) = self.engine.post_routed(s, len as u64, self.route) {
                let e = NetError::internal(format!("engine refused a send to {peer}: {e}"));
                return Err(self.failed.fail(e));
            }
        }
        Ok(Some((slot, true)))
    }

    /// The send that segment `token` the engine just scheduled belongs to.
    pub(crate) fn scheduled(&self, token: u32) -> NetResult<A> {
        self.slots.active(token).ok_or_else(|| {
            NetError::internal(format!(
                "engine scheduled a segment of unknown request {token}"
            ))
        })
    }

    /// Marks the sends whose every segment the engine saw complete done, with their size.
    pub(crate) fn finish_done(&mut self) {
        while let Some(token) = self.engine.poll_done() {
            if let Some(a) = self.slots.active(token) {
                self.slots.finish(token, a.bytes());
            }
        }
    }
}
