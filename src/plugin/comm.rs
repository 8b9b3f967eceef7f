//! Listen, send and receive comms as NCCL sees them, over whichever transport carries them (TCP
//! streams, or RDMA verbs with feature `verbs`); memory registrations; per-QP statistics on close.

#[cfg(feature = "verbs")]
use std::sync::{Arc, OnceLock};

use super::pattern::{self, Pattern, PatternCell, PATTERNS};
use super::telemetry::CommTelemetry;
use crate::config::SiteConfig;

use crate::transport::slots::{RecvSizes, MAX_RECVS};
use crate::transport::tcp::{TcpListenComm, TcpRecvComm, TcpSendComm};
#[cfg(feature = "verbs")]
use crate::transport::verbs::{
    MemoryRegion, VerbsDomain, VerbsListenComm, VerbsRecvComm, VerbsSendComm,
};
use crate::transport::{NetError, NetResult, UserBuf};
#[cfg(feature = "verbs")]
use arrayvec::ArrayVec;

pub(super) enum ListenInner {
    Tcp(TcpListenComm),
    #[cfg(feature = "verbs")]
    Verbs(VerbsListenComm),
}

pub struct ListenComm {
    pub(super) dev: i32,
    pub(super) inner: ListenInner,
}

// Comms live in one heap box each at the ffi layer: variant sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum SendInner {
    Tcp(TcpSendComm),
    #[cfg(feature = "verbs")]
    Verbs(VerbsSendComm, Arc<VerbsDomain>),
}

pub struct SendComm {
    inner: SendInner,
    log_stats: bool,
    /// The communicator's traffic pattern (v11+ contexts), read at each isend.
    pattern: Option<PatternCell>,
    /// Engine route per pattern (see `use_patterns`).
    route_of: [u8; PATTERNS],
    /// Stats file / periodic log publisher (None: neither configured).
    tele: Option<CommTelemetry>,
}

#[allow(clippy::large_enum_variant)]
enum RecvInner {
    Tcp(TcpRecvComm),
    #[cfg(feature = "verbs")]
    Verbs(VerbsRecvComm, Arc<VerbsDomain>),
}

pub struct RecvComm {
    inner: RecvInner,
}

/// A registered region. TCP needs bookkeeping only (checked on use); on an RDMA device the region
/// is registered with the device on first use by a comm (regMr does not say which device).
#[derive(Debug)]
pub struct MemHandle {
    pub addr: usize,
    pub len: usize,
    pub kind: i32,
    #[cfg(feature = "verbs")]
    pub(super) verbs_mr: OnceLock<MemoryRegion>,
}

impl MemHandle {
    pub fn new(addr: usize, len: usize, kind: i32) -> MemHandle {
        MemHandle {
            addr,
            len,
            kind,
            #[cfg(feature = "verbs")]
            verbs_mr: OnceLock::new(),
        }
    }

    fn covers(&self, buf: &UserBuf) -> bool {
        buf.is_empty()
            || (buf.addr() >= self.addr && buf.addr() + buf.len() <= self.addr + self.len)
    }

    /// The device registration of this region on `domain`, made on first use.
    #[cfg(feature = "verbs")]
    fn verbs_mr(&self, domain: &VerbsDomain) -> NetResult<Option<&MemoryRegion>> {
        if self.len == 0 {
            return Ok(None);
        }
        if let Some(mr) = self.verbs_mr.get() {
            if !std::ptr::eq(mr.pd().as_ref(), domain.pd().as_ref()) {
                return Err(NetError::invalid_usage(format!(
                    "memory handle {:#x}+{} registered on {} used on {}",
                    self.addr,
                    self.len,
                    mr.pd().context().name(),
                    domain.name()
                )));
            }
            return Ok(Some(mr));
        }
        // SAFETY: NCCL's regMr contract: [addr, addr+len) stays valid until deregMr, which drops
        // this handle (and the registration with it) after the requests using it completed.
        let mr = unsafe { MemoryRegion::register_raw(domain.pd(), self.addr as *mut u8, self.len) }
            .map_err(|e| NetError::system(format!("regMr on {}: {e}", domain.name())))?;
        // A concurrent first use may have won the race: its registration is kept, ours dropped.
        let _ = self.verbs_mr.set(mr);
        Ok(self.verbs_mr.get())
    }
}

fn check_mr(buf: &UserBuf, mh: Option<&MemHandle>, what: &str) -> NetResult<()> {
    match mh {
        Some(m) if !m.covers(buf) => Err(NetError::invalid_argument(format!(
            "{what} buffer {:#x}+{} lies outside its registration {:#x}+{}",
            buf.addr(),
            buf.len(),
            m.addr,
            m.len
        ))),
        _ => Ok(()),
    }
}

impl ListenComm {
    pub fn accept(&mut self) -> NetResult<Option<RecvComm>> {
        match &mut self.inner {
            ListenInner::Tcp(l) => Ok(l.accept()?.map(|tcp| {
                let p = tcp.params();
                tracing::info!(target: "dqplb::net", "dev {} accepted a connection: {} data QPs, {} outstanding, {} B segments, policy {}",
                    self.dev, p.qps, p.outstanding, p.segment_bytes, p.policy);
                RecvComm {
                    inner: RecvInner::Tcp(tcp),
                }
            })),
            #[cfg(feature = "verbs")]
            ListenInner::Verbs(l) => Ok(l.accept()?.map(|v| RecvComm {
                inner: RecvInner::Verbs(v, Arc::clone(l.domain())),
            })),
        }
    }
}

impl SendComm {
    pub(super) fn new(tcp: TcpSendComm, log_stats: bool) -> SendComm {
        SendComm {
            inner: SendInner::Tcp(tcp),
            log_stats,
            pattern: None,
            route_of: [0; PATTERNS],
            tele: None,
        }
    }

    #[cfg(feature = "verbs")]
    pub(super) fn new_verbs(
        v: VerbsSendComm,
        domain: Arc<VerbsDomain>,
        log_stats: bool,
    ) -> SendComm {
        SendComm {
            inner: SendInner::Verbs(v, domain),
            log_stats,
            pattern: None,
            route_of: [0; PATTERNS],
            tele: None,
        }
    }

    pub fn max_requests(&self) -> usize {
        match &self.inner {
            SendInner::Tcp(t) => t.max_requests(),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(v, _) => v.max_requests(),
        }
    }

    /// Gives this comm one engine route per traffic pattern of `[patterns]` and follows `cell`
    /// (its context's pattern) from the next isend on.
    pub fn use_patterns(&mut self, cell: PatternCell, cfg: &SiteConfig, dev: i32) -> NetResult<()> {
        let qps = self.qp_stats().len();
        let plan = pattern::plan_routes(&cfg.patterns, cfg.engine.policy, qps, super::policy_kind);
        for &(kind, n) in &plan.extra {
            match &mut self.inner {
                SendInner::Tcp(t) => t.add_route(kind, n)?,
                #[cfg(feature = "verbs")]
                SendInner::Verbs(v, _) => v.add_route(kind, n)?,
            };
        }
        let shown: Vec<String> = Pattern::ALL
            .iter()
            .map(|&p| {
                let r = plan.route_of[p as usize];
                let (kind, n) = match r {
                    0 => (super::policy_kind(cfg.engine.policy), qps),
                    _ => plan.extra[r as usize - 1],
                };
                format!("{} -> {kind} over {n}", p.as_str())
            })
            .collect();
        tracing::info!(target: "dqplb::net", "dev {dev} send comm: traffic patterns: {} of {qps} data QPs", shown.join(", "));
        self.route_of = plan.route_of;
        self.pattern = Some(cell);
        Ok(())
    }

    /// A data stream with a segment unacknowledged for `ms` ms is a failed path (TCP; 0: off).
    pub fn set_stall_timeout_ms(&mut self, ms: u64) {
        if let SendInner::Tcp(t) = &mut self.inner {
            t.set_stall_timeout_ms(ms);
        }
    }

    /// Installs the straggler re-hash rule; only the TCP transport carries re-hashes out (a
    /// verbs comm logs that and keeps its QPs).
    pub fn set_rehash_rule(&mut self, rule: crate::engine::RehashRule) -> NetResult<()> {
        match &mut self.inner {
            SendInner::Tcp(t) => t.set_rehash_rule(rule),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(..) => {
                tracing::info!(target: "dqplb::net", "straggler re-hash is configured but the verbs transport does not replace QPs yet: off for this connection");
                Ok(())
            }
        }
    }

    /// Publishes this comm's per-QP counters to the stats file / periodic log (`[stats]`).
    pub fn set_telemetry(&mut self, t: Option<CommTelemetry>) {
        self.tele = t;
    }

    /// NCCL's profiler handle (v10+ isend `phandle`, 0: none) for the next isend's events.
    pub fn set_event_parent(&mut self, parent: usize) {
        match &mut self.inner {
            SendInner::Tcp(t) => t.set_event_parent(parent),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(_, _) => {}
        }
    }

    pub fn isend(
        &mut self,
        buf: UserBuf,
        tag: i32,
        mh: Option<&MemHandle>,
    ) -> NetResult<Option<u32>> {
        check_mr(&buf, mh, "isend")?;
        if let Some(cell) = &self.pattern {
            let r = self.route_of[cell.get() as usize];
            match &mut self.inner {
                SendInner::Tcp(t) => t.set_route(r),
                #[cfg(feature = "verbs")]
                SendInner::Verbs(v, _) => v.set_route(r),
            }
        }
        match &mut self.inner {
            SendInner::Tcp(t) => t.isend(buf, tag),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(v, domain) => {
                let mr = match mh {
                    Some(m) => m.verbs_mr(domain)?,
                    None => None,
                };
                v.isend(buf, tag, mr)
            }
        }
    }

    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        let r = match &mut self.inner {
            SendInner::Tcp(t) => t.test(slot),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(v, _) => v.test(slot),
        };
        if self.tele.is_some() {
            self.publish();
        }
        r
    }

    #[cold]
    fn publish(&mut self) {
        let stats: &[crate::engine::QpStats] = match &self.inner {
            SendInner::Tcp(t) => t.qp_stats(),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(v, _) => v.qp_stats(),
        };
        if let Some(t) = &mut self.tele {
            t.tick(stats);
        }
    }

    /// Per-QP engine statistics (segments, bytes, outstanding, completion latency in ns).
    pub fn qp_stats(&self) -> &[crate::engine::QpStats] {
        match &self.inner {
            SendInner::Tcp(t) => t.qp_stats(),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(v, _) => v.qp_stats(),
        }
    }

    /// Operation counts of a verbs comm (None on TCP).
    #[cfg(feature = "verbs")]
    pub fn verbs_op_counters(&self) -> Option<crate::transport::verbs::completion::OpCounters> {
        match &self.inner {
            SendInner::Tcp(_) => None,
            SendInner::Verbs(v, _) => Some(*v.op_counters()),
        }
    }

    /// Local/peer addresses of TCP data streams (empty on RDMA, where QPs carry the data).
    pub fn data_stream_addrs(&self) -> Vec<(std::net::SocketAddr, std::net::SocketAddr)> {
        match &self.inner {
            SendInner::Tcp(t) => t.data_stream_addrs(),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(..) => Vec::new(),
        }
    }
}

impl Drop for SendComm {
    fn drop(&mut self) {
        if !self.log_stats {
            return;
        }
        for (qp, s) in self.qp_stats().iter().enumerate() {
            tracing::info!(target: "dqplb::stats", "send comm closed: QP {qp}: {s:?}");
        }
    }
}

impl RecvComm {
    pub fn max_requests(&self) -> usize {
        match &self.inner {
            RecvInner::Tcp(t) => t.max_requests(),
            #[cfg(feature = "verbs")]
            RecvInner::Verbs(v, _) => v.max_requests(),
        }
    }

    /// NCCL's grouped receive: 1..=MAX_RECVS buffers (maxRecvs) with their tags and memory
    /// handles, one request.
    pub fn irecv(
        &mut self,
        bufs: &[(UserBuf, i32)],
        mhs: &[Option<&MemHandle>],
    ) -> NetResult<Option<u32>> {
        if bufs.is_empty() || bufs.len() > MAX_RECVS {
            return Err(NetError::invalid_argument(format!(
                "irecv with {} buffers: this plugin advertises maxRecvs = {MAX_RECVS}",
                bufs.len()
            )));
        }
        let mh = |i: usize| mhs.get(i).copied().flatten();
        for (i, (buf, _)) in bufs.iter().enumerate() {
            check_mr(buf, mh(i), "irecv")?;
        }
        match &mut self.inner {
            RecvInner::Tcp(t) => t.irecv_group(bufs),
            #[cfg(feature = "verbs")]
            RecvInner::Verbs(v, domain) => {
                let mut group: ArrayVec<(UserBuf, i32, Option<&MemoryRegion>), MAX_RECVS> =
                    ArrayVec::new();
                for (i, &(buf, tag)) in bufs.iter().enumerate() {
                    let mr = match mh(i) {
                        Some(m) => m.verbs_mr(domain)?,
                        None => None,
                    };
                    group.push((buf, tag, mr));
                }
                v.irecv_group(&group)
            }
        }
    }

    /// Operation counts of a verbs comm (None on TCP).
    #[cfg(feature = "verbs")]
    pub fn verbs_op_counters(&self) -> Option<crate::transport::verbs::completion::OpCounters> {
        match &self.inner {
            RecvInner::Tcp(_) => None,
            RecvInner::Verbs(v, _) => Some(*v.op_counters()),
        }
    }

    /// Some(total bytes received) once every buffer of the request is complete.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        Ok(self.test_sizes(slot)?.map(|s| s.iter().sum()))
    }

    /// Some(size of each buffer, in posting order) once the grouped receive is complete.
    pub fn test_sizes(&mut self, slot: u32) -> NetResult<Option<RecvSizes>> {
        match &mut self.inner {
            RecvInner::Tcp(t) => t.test_sizes(slot),
            #[cfg(feature = "verbs")]
            RecvInner::Verbs(v, _) => v.test_sizes(slot),
        }
    }
}
