//! Listen, send and receive comms as NCCL sees them, over whichever transport carries them (TCP
//! streams, or RDMA verbs with feature `verbs`); memory registrations; per-QP statistics on close.

#[cfg(feature = "verbs")]
use std::sync::Arc;

use super::pattern::{self, Pattern, PatternCell, PATTERNS};
use super::telemetry::CommTelemetry;
use dqplb_config::SiteConfig;

#[cfg(feature = "verbs")]
use arrayvec::ArrayVec;
use dqplb_transport::slots::{RecvSizes, MAX_RECVS};
use dqplb_transport::tcp::{TcpListenComm, TcpRecvComm, TcpSendComm};
#[cfg(feature = "verbs")]
use dqplb_transport::verbs::{
    mrcache, CachedMr, Flusher, MemSource, MemoryRegion, RemoteSlice, VerbsDomain, VerbsListenComm,
    VerbsRecvComm, VerbsSendComm,
};
use dqplb_transport::{NetError, NetResult, UserBuf};

/// `$body` with `$c` bound to the transport's comm in `$inner`, a `SendInner` or `RecvInner`
/// (`$kind`), for the calls both transports answer alike.
macro_rules! on_transport {
    ($kind:ident, $inner:expr, $c:ident => $body:expr) => {
        match $inner {
            $kind::Tcp($c) => $body,
            #[cfg(feature = "verbs")]
            $kind::Verbs($c, _) => $body,
        }
    };
}

pub(super) enum ListenInner {
    /// Boxed: the TCP listener (its pending-socket tables) is much larger than the verbs one.
    Tcp(Box<TcpListenComm>),
    #[cfg(feature = "verbs")]
    Verbs(VerbsListenComm),
}

pub struct ListenComm {
    pub(super) dev: i32,
    /// The device's ptrSupport, handed to the comms it accepts.
    pub(super) ptr_support: i32,
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
    ptr_support: i32,
    /// The communicator's traffic pattern (v11+ contexts), read at each isend.
    pattern: Option<PatternCell>,
    /// Engine route per pattern (see `use_patterns`).
    route_of: [u8; PATTERNS],
    /// Stats file / periodic log publisher (None: neither configured).
    tele: Option<CommTelemetry>,
    /// How the statistics line at close names the comm ("send comm dev 0 (tcp) to 10.0.0.2:4000").
    label: String,
}

#[allow(clippy::large_enum_variant)]
enum RecvInner {
    Tcp(TcpRecvComm),
    #[cfg(feature = "verbs")]
    Verbs(VerbsRecvComm, Arc<VerbsDomain>),
}

pub struct RecvComm {
    inner: RecvInner,
    ptr_support: i32,
    /// The loopback READ of iflush, on RDMA devices with GPUDirect (or the test switch).
    #[cfg(feature = "verbs")]
    flush: Option<Flusher>,
}

/// A registered region. TCP needs bookkeeping only (checked on use); on an RDMA device regMr
/// registers it at once through the device's registration cache (shared by all its comms).
#[derive(Debug)]
pub struct MemHandle {
    pub addr: usize,
    pub len: usize,
    pub kind: i32,
    #[cfg(feature = "verbs")]
    pub(super) reg: Option<CachedMr>,
}

/// What a regMr or regMrDmaBuf call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegRequest {
    pub addr: usize,
    pub len: usize,
    pub kind: i32,
    /// regMrDmaBuf's (fd, offset); None for regMr or fd -1 (net_ib registers the pointer then).
    pub dmabuf: Option<(i32, u64)>,
}

fn kind_name(kind: i32) -> &'static str {
    match kind {
        super::devices::PTR_HOST => "NCCL_PTR_HOST",
        super::devices::PTR_CUDA => "NCCL_PTR_CUDA",
        super::devices::PTR_DMABUF => "NCCL_PTR_DMABUF",
        _ => "unknown",
    }
}

/// Checks `req` against the device's ptrSupport: HOST always, CUDA when advertised, a dma-buf fd
/// only with NCCL_PTR_DMABUF; a NULL address with bytes is refused.
fn check_request(req: &RegRequest, ptr_support: i32) -> NetResult<()> {
    use super::devices::{PTR_CUDA, PTR_DMABUF, PTR_HOST};
    let entry = if req.dmabuf.is_some() {
        "regMrDmaBuf"
    } else {
        "regMr"
    };
    if req.addr == 0 && req.len > 0 {
        return Err(NetError::invalid_argument(format!(
            "{entry}: data is NULL with {} bytes",
            req.len
        )));
    }
    let allowed = match req.dmabuf {
        Some((fd, _)) if fd < -1 => {
            return Err(NetError::invalid_argument(format!(
                "regMrDmaBuf: fd {fd} is not a file descriptor"
            )))
        }
        // a dma-buf: NCCL passes NCCL_PTR_CUDA with the fd (src/transport/net.cc 2.28.3)
        Some((fd, _)) if fd >= 0 => {
            ptr_support & PTR_DMABUF != 0 && [PTR_CUDA, PTR_DMABUF].contains(&req.kind)
        }
        _ => req.kind == PTR_HOST || (req.kind == PTR_CUDA && ptr_support & PTR_CUDA != 0),
    };
    if !allowed {
        return Err(NetError::invalid_argument(format!(
            "{entry} of memory type {} ({}){}: this device advertises ptrSupport = {ptr_support:#x} (HOST 1, CUDA 2, DMABUF 4); see the device's GPUDirect INFO line at init",
            req.kind,
            kind_name(req.kind),
            req.dmabuf.map_or(String::new(), |(fd, off)| format!(" with dma-buf fd {fd} offset {off}"))
        )));
    }
    Ok(())
}

/// Registers `req` on `domain` (an RDMA device), or records it (TCP: None).
#[cfg(feature = "verbs")]
fn register(
    req: RegRequest,
    ptr_support: i32,
    domain: Option<&Arc<VerbsDomain>>,
) -> NetResult<MemHandle> {
    check_request(&req, ptr_support)?;
    let mut mh = MemHandle::new(req.addr, req.len, req.kind);
    let Some(domain) = domain else {
        return Ok(mh);
    };
    if req.len == 0 {
        return Ok(mh);
    }
    let src = match req.dmabuf {
        Some((fd, offset)) if fd >= 0 => MemSource::DmaBuf { fd, offset },
        _ => MemSource::Pointer,
    };
    // SAFETY: NCCL's regMr contract: [addr, addr+len) stays valid until deregMr, which drops
    // this handle (and its cache reference) after the requests using it completed.
    let reg = unsafe { mrcache::register(domain, req.addr, req.len, src) }.map_err(|e| {
        NetError::system(format!("{} on {}: {e}", kind_name(req.kind), domain.name()))
    })?;
    tracing::debug!(target: "dqplb::net", "{}: registered {:#x}+{} ({})", domain.name(), req.addr, req.len, kind_name(req.kind));
    mh.reg = Some(reg);
    Ok(mh)
}

#[cfg(not(feature = "verbs"))]
fn register(req: RegRequest, ptr_support: i32, _domain: Option<&()>) -> NetResult<MemHandle> {
    check_request(&req, ptr_support)?;
    Ok(MemHandle::new(req.addr, req.len, req.kind))
}

impl MemHandle {
    pub fn new(addr: usize, len: usize, kind: i32) -> MemHandle {
        MemHandle {
            addr,
            len,
            kind,
            #[cfg(feature = "verbs")]
            reg: None,
        }
    }

    /// The device registration behind this handle (None on TCP).
    #[cfg(feature = "verbs")]
    pub fn cached(&self) -> Option<&CachedMr> {
        self.reg.as_ref()
    }

    fn covers(&self, buf: &UserBuf) -> bool {
        buf.is_empty()
            || (buf.addr() >= self.addr && buf.addr() + buf.len() <= self.addr + self.len)
    }

    /// The registration regMr made of this region on `domain` (regIsGlobal: any comm of the
    /// same device may use it).
    #[cfg(feature = "verbs")]
    fn verbs_mr(&self, domain: &Arc<VerbsDomain>) -> NetResult<Option<&MemoryRegion>> {
        if self.len == 0 {
            return Ok(None);
        }
        match &self.reg {
            Some(r) if Arc::ptr_eq(r.domain(), domain) => Ok(Some(r.mr())),
            Some(r) => Err(NetError::invalid_usage(format!(
                "memory handle {:#x}+{} registered on {} used on {}",
                self.addr,
                self.len,
                r.domain().name(),
                domain.name()
            ))),
            None => Err(NetError::invalid_usage(format!(
                "memory handle {:#x}+{} has no registration on {} (registered through another transport's comm)",
                self.addr,
                self.len,
                domain.name()
            ))),
        }
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
                    ptr_support: self.ptr_support,
                    #[cfg(feature = "verbs")]
                    flush: None,
                }
            })),
            #[cfg(feature = "verbs")]
            ListenInner::Verbs(l) => {
                let Some(v) = l.accept()? else {
                    return Ok(None);
                };
                let domain = Arc::clone(l.domain());
                // net_ib's ncclIbAccept: the flush QP exists when flushEnabled
                let flush = if domain.caps().flush {
                    let f = Flusher::new(&domain, v.max_requests()).map_err(|e| {
                        NetError::system(format!("{}: iflush QP: {e}", domain.name()))
                    })?;
                    Some(f)
                } else {
                    None
                };
                Ok(Some(RecvComm {
                    inner: RecvInner::Verbs(v, domain),
                    ptr_support: self.ptr_support,
                    flush,
                }))
            }
        }
    }
}

impl SendComm {
    pub(super) fn new(tcp: TcpSendComm, log_stats: bool, ptr_support: i32) -> SendComm {
        SendComm {
            inner: SendInner::Tcp(tcp),
            log_stats,
            ptr_support,
            pattern: None,
            route_of: [0; PATTERNS],
            tele: None,
            label: "send comm".to_string(),
        }
    }

    #[cfg(feature = "verbs")]
    pub(super) fn new_verbs(
        v: VerbsSendComm,
        domain: Arc<VerbsDomain>,
        log_stats: bool,
        ptr_support: i32,
    ) -> SendComm {
        SendComm {
            inner: SendInner::Verbs(v, domain),
            log_stats,
            ptr_support,
            pattern: None,
            route_of: [0; PATTERNS],
            tele: None,
            label: "send comm".to_string(),
        }
    }

    /// regMr / regMrDmaBuf on this comm's device: registered now (RDMA: through the device's
    /// cache), not at first use.
    pub fn reg_mr(&self, req: RegRequest) -> NetResult<MemHandle> {
        match &self.inner {
            SendInner::Tcp(_) => register(req, self.ptr_support, None),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(_, domain) => register(req, self.ptr_support, Some(domain)),
        }
    }

    pub fn max_requests(&self) -> usize {
        on_transport!(SendInner, &self.inner, c => c.max_requests())
    }

    /// Gives this comm one engine route per traffic pattern of `[patterns]` and follows `cell`
    /// (its context's pattern) from the next isend on.
    pub(crate) fn use_patterns(
        &mut self,
        cell: PatternCell,
        cfg: &SiteConfig,
        dev: i32,
    ) -> NetResult<()> {
        let qps = self.qp_stats().len();
        let plan = pattern::plan_routes(&cfg.patterns, cfg.engine.policy, qps, super::policy_kind);
        for &(kind, n) in &plan.extra {
            on_transport!(SendInner, &mut self.inner, c => c.add_route(kind, n)?);
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
        match &mut self.inner {
            SendInner::Tcp(t) => t.set_stall_timeout_ms(ms),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(..) => {}
        }
    }

    /// Installs the engine's depth rule over `base` segments per QP (the comm was connected for
    /// `rule.raised`); before patterns, the re-hash rule and any message.
    pub fn set_depth_rule(&mut self, base: u32, rule: dqplb_engine::DepthRule) -> NetResult<()> {
        use dqplb_transport::DepthControl;
        on_transport!(SendInner, &mut self.inner, c => c.set_depth_rule(base, rule))
    }

    /// Installs the engine's re-pin rule on the depth rule (verbs, pinned QPs: the moves take
    /// another data QP's UDP source port); a TCP comm runs without it (a stream cannot share
    /// another's source port). Ok(true) when installed.
    pub fn set_repin_rule(&mut self, rule: dqplb_engine::RepinRule) -> NetResult<bool> {
        match &mut self.inner {
            SendInner::Tcp(_) => Ok(false),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(v, ..) => v.set_repin_rule(rule).map(|()| true),
        }
    }

    /// Moves the re-pin rule made so far, not counting moves back (verbs; None on TCP, which
    /// does not run the rule).
    pub fn repins(&self) -> Option<u32> {
        match &self.inner {
            SendInner::Tcp(_) => None,
            #[cfg(feature = "verbs")]
            SendInner::Verbs(v, ..) => Some(v.repins()),
        }
    }

    /// The depth rule's state: the per-QP depth now, the raises so far, the rule.
    pub fn depth_state(&mut self) -> dqplb_transport::DepthState {
        use dqplb_transport::DepthControl;
        on_transport!(SendInner, &mut self.inner, c => c.depth_state())
    }

    /// Fault injection for tests (verbs): completions of data QP `q` reach the engine `lag_ns`
    /// late, a slow path; false on TCP, which has no such hook.
    #[doc(hidden)]
    pub fn debug_slow_data_qp(&mut self, q: usize, lag_ns: u64) -> bool {
        match &mut self.inner {
            SendInner::Tcp(_) => false,
            #[cfg(feature = "verbs")]
            SendInner::Verbs(v, _) => {
                v.debug_slow_data_qp(q, lag_ns);
                true
            }
        }
    }

    /// Installs the straggler re-hash rule: TCP replaces a drained straggler by a stream from a
    /// new source port, verbs by a new QP pair (new QPNs).
    pub fn set_rehash_rule(&mut self, rule: dqplb_engine::RehashRule) -> NetResult<()> {
        on_transport!(SendInner, &mut self.inner, c => c.set_rehash_rule(rule))
    }

    /// Publishes this comm's per-QP counters to the stats file / periodic log (`[stats]`).
    /// Names the comm in its statistics line at close.
    pub(crate) fn set_label(&mut self, label: String) {
        self.label = label;
    }

    pub(crate) fn set_telemetry(&mut self, t: Option<CommTelemetry>) {
        self.tele = t;
    }

    /// The device number the profiler events of this comm name (verbs descriptors).
    pub fn set_event_device(&mut self, dev: i32) {
        #[cfg(feature = "verbs")]
        if let SendInner::Verbs(v, _) = &mut self.inner {
            v.set_event_device(dev);
        }
        let _ = dev;
    }

    /// NCCL's profiler handle (v10+ isend `phandle`, 0: none) for the next isend's events.
    pub fn set_event_parent(&mut self, parent: usize) {
        on_transport!(SendInner, &mut self.inner, c => c.set_event_parent(parent))
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
            on_transport!(SendInner, &mut self.inner, c => c.set_route(r));
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
        let r = on_transport!(SendInner, &mut self.inner, c => c.test(slot));
        if self.tele.is_some() {
            self.publish();
        }
        r
    }

    #[cold]
    fn publish(&mut self) {
        let stats = on_transport!(SendInner, &self.inner, c => c.qp_stats());
        if let Some(t) = &mut self.tele {
            t.tick(stats);
        }
    }

    /// Per-QP engine statistics (segments, bytes, outstanding, completion latency in ns).
    pub fn qp_stats(&self) -> &[dqplb_engine::QpStats] {
        on_transport!(SendInner, &self.inner, c => c.qp_stats())
    }

    /// Local/peer addresses of TCP data streams (empty on RDMA, where QPs carry the data).
    pub fn data_stream_addrs(&self) -> Vec<(std::net::SocketAddr, std::net::SocketAddr)> {
        match &self.inner {
            SendInner::Tcp(t) => t.data_stream_addrs(),
            #[cfg(feature = "verbs")]
            SendInner::Verbs(..) => Vec::new(),
        }
    }

    /// Each data QP's pinned UDP source port and the GRH flow label the device reports for it
    /// (ibv_query_qp), on RDMA; empty on TCP (its pinned ports show in `data_stream_addrs`).
    #[cfg(feature = "verbs")]
    pub fn pinned_flow_labels(&self) -> NetResult<Vec<(Option<u16>, u32)>> {
        match &self.inner {
            SendInner::Tcp(_) => Ok(Vec::new()),
            SendInner::Verbs(v, _) => {
                let set = v.qp_set();
                (0..set.n_data())
                    .map(|i| {
                        let fl = set
                            .data(i)
                            .and_then(|q| q.flow_label())
                            .map_err(|e| NetError::system(e.to_string()))?;
                        Ok((set.pinned_port(i), fl))
                    })
                    .collect()
            }
        }
    }
}

impl Drop for SendComm {
    fn drop(&mut self) {
        if let Some(t) = self.tele.take() {
            t.close(self.qp_stats());
        }
        if !self.log_stats {
            return;
        }
        let stats = self.qp_stats();
        tracing::info!(target: "dqplb::stats", "{} closed: {}", self.label, close_summary(stats));
        if super::log::trace_on() {
            for (qp, s) in stats.iter().enumerate() {
                tracing::trace!(target: "dqplb::stats", "{} QP {qp}: {}", self.label, qp_detail(s));
            }
        }
    }
}

/// The one-line statistics of a send comm at close: totals over its QPs and how the segments
/// spread over them.
pub(crate) fn close_summary(stats: &[dqplb_engine::QpStats]) -> String {
    let total = |f: fn(&dqplb_engine::QpStats) -> u64| stats.iter().map(f).sum::<u64>();
    let per_qp: Vec<u64> = stats.iter().map(|s| s.segments).collect();
    // Each QP's count up to 16 QPs ("12/0/3/9"), the range beyond.
    let spread = if per_qp.len() <= 16 {
        per_qp
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("/")
    } else {
        format!(
            "{}..{}",
            per_qp.iter().min().unwrap_or(&0),
            per_qp.iter().max().unwrap_or(&0)
        )
    };
    format!(
        "{} QPs, {} segments, {} bytes, segments per QP {spread}, peak outstanding {}, resent {}, rehashes {}, path failures {}",
        stats.len(),
        total(|s| s.segments),
        total(|s| s.bytes),
        stats.iter().map(|s| s.peak_outstanding).max().unwrap_or(0),
        total(|s| s.resent),
        total(|s| s.rehashes),
        total(|s| s.failures),
    )
}

/// One QP's statistics for the TRACE lines at close: counters, latency average and the
/// non-empty buckets of its log2 latency histogram as `2^k:count`.
pub(crate) fn qp_detail(s: &dqplb_engine::QpStats) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "segments {}, bytes {}, completed {}, outstanding {} (peak {}), latency ewma {:.0}, resent {}, rehashes {}, path failures {}, latency log2 buckets",
        s.segments, s.bytes, s.completed, s.outstanding, s.peak_outstanding, s.latency_ewma,
        s.resent, s.rehashes, s.failures
    );
    let mut any = false;
    for (k, n) in s.latency_log2.iter().enumerate().filter(|(_, n)| **n > 0) {
        let _ = write!(out, " 2^{k}:{n}");
        any = true;
    }
    if !any {
        out.push_str(" none");
    }
    out
}

impl RecvComm {
    /// regMr / regMrDmaBuf on this comm's device (see SendComm::reg_mr).
    pub fn reg_mr(&self, req: RegRequest) -> NetResult<MemHandle> {
        match &self.inner {
            RecvInner::Tcp(_) => register(req, self.ptr_support, None),
            #[cfg(feature = "verbs")]
            RecvInner::Verbs(_, domain) => register(req, self.ptr_support, Some(domain)),
        }
    }

    /// Whether iflush can return requests (an RDMA device with GPUDirect or the test switch).
    pub fn flush_enabled(&self) -> bool {
        #[cfg(feature = "verbs")]
        return self.flush.is_some();
        #[cfg(not(feature = "verbs"))]
        false
    }

    /// net_ib's ncclIbIflush (NCCL 2.28.3 src/transport/net_ib.cc): the last buffer with a
    /// non-zero size gets one RDMA READ through the flush QP; Ok(None) (NULL request) without
    /// a flush QP, when every size is 0, or when that buffer is host memory (no GDR involved).
    /// `bufs` are (address, size received, memory handle) as NCCL passes them.
    pub fn iflush(&mut self, bufs: &[(usize, i32, Option<&MemHandle>)]) -> NetResult<Option<u32>> {
        if bufs.is_empty() || bufs.len() > MAX_RECVS {
            return Err(NetError::invalid_argument(format!(
                "iflush with {} buffers: this plugin advertises maxRecvs = {MAX_RECVS}",
                bufs.len()
            )));
        }
        if let Some((i, (_, size, _))) = bufs.iter().enumerate().find(|(_, b)| b.1 < 0) {
            return Err(NetError::invalid_argument(format!(
                "iflush: sizes[{i}] = {size} is negative"
            )));
        }
        #[cfg(feature = "verbs")]
        {
            let (Some(flush), RecvInner::Verbs(_, domain)) = (self.flush.as_mut(), &self.inner)
            else {
                return Ok(None);
            };
            let Some(last) = bufs.iter().rposition(|b| b.1 != 0) else {
                return Ok(None);
            };
            let (addr, size, mh) = bufs[last];
            let Some(mh) = mh else {
                return Err(NetError::invalid_argument(format!(
                    "iflush: buffer {last} ({addr:#x}, {size} bytes) has no memory handle"
                )));
            };
            if mh.kind == super::devices::PTR_HOST {
                return Ok(None);
            }
            let end = addr.checked_add(size as usize);
            if addr < mh.addr || end.is_none_or(|e| e > mh.addr + mh.len) {
                return Err(NetError::invalid_argument(format!(
                    "iflush buffer {last} {addr:#x}+{size} lies outside its registration {:#x}+{}",
                    mh.addr, mh.len
                )));
            }
            let Some(mr) = mh.verbs_mr(domain)? else {
                return Ok(None);
            };
            let slot = flush
                .post(RemoteSlice {
                    addr: addr as u64,
                    rkey: mr.rkey(),
                })
                .map_err(|e| NetError::system(format!("iflush on {}: {e}", domain.name())))?;
            Ok(Some(slot))
        }
        #[cfg(not(feature = "verbs"))]
        Ok(None)
    }

    /// Whether the flush `slot` returned by iflush has completed.
    pub fn test_flush(&mut self, slot: u32) -> NetResult<bool> {
        #[cfg(feature = "verbs")]
        if let Some(f) = self.flush.as_mut() {
            return f
                .test(slot)
                .map_err(|e| NetError::system(format!("iflush test: {e}")));
        }
        Err(NetError::invalid_usage(format!(
            "test of flush request {slot} on a comm without iflush"
        )))
    }

    /// The flush QP of this comm (None without GPUDirect), for counters and tests.
    #[cfg(feature = "verbs")]
    pub fn flusher(&self) -> Option<&Flusher> {
        self.flush.as_ref()
    }

    pub fn max_requests(&self) -> usize {
        on_transport!(RecvInner, &self.inner, c => c.max_requests())
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

    /// Some(total bytes received) once every buffer of the request is complete.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        Ok(self.test_sizes(slot)?.map(|s| s.iter().sum()))
    }

    /// Some(size of each buffer, in posting order) once the grouped receive is complete.
    pub fn test_sizes(&mut self, slot: u32) -> NetResult<Option<RecvSizes>> {
        on_transport!(RecvInner, &mut self.inner, c => c.test_sizes(slot))
    }
}

#[cfg(test)]
mod tests {
    use super::super::devices::{PTR_CUDA, PTR_DMABUF, PTR_HOST};
    use super::*;

    fn req(kind: i32, dmabuf: Option<(i32, u64)>) -> RegRequest {
        RegRequest {
            addr: 0x10000,
            len: 4096,
            kind,
            dmabuf,
        }
    }

    #[test]
    fn memory_types_follow_ptr_support() {
        let host = PTR_HOST;
        let cuda = PTR_HOST | PTR_CUDA;
        let all = PTR_HOST | PTR_CUDA | PTR_DMABUF;
        assert_eq!(check_request(&req(PTR_HOST, None), host), Ok(()));
        assert_eq!(check_request(&req(PTR_CUDA, None), cuda), Ok(()));
        assert_eq!(
            check_request(&req(PTR_CUDA, None), host).unwrap_err().msg,
            "regMr of memory type 2 (NCCL_PTR_CUDA): this device advertises ptrSupport = 0x1 (HOST 1, CUDA 2, DMABUF 4); see the device's GPUDirect INFO line at init"
        );
        assert!(check_request(&req(7, None), all).is_err());
        // regMrDmaBuf: fd -1 is regMr; a real fd needs NCCL_PTR_DMABUF
        assert_eq!(check_request(&req(PTR_HOST, Some((-1, 0))), host), Ok(()));
        assert_eq!(check_request(&req(PTR_CUDA, Some((9, 0))), all), Ok(()));
        assert_eq!(
            check_request(&req(PTR_CUDA, Some((9, 4096))), cuda)
                .unwrap_err()
                .msg,
            "regMrDmaBuf of memory type 2 (NCCL_PTR_CUDA) with dma-buf fd 9 offset 4096: this device advertises ptrSupport = 0x3 (HOST 1, CUDA 2, DMABUF 4); see the device's GPUDirect INFO line at init"
        );
        assert_eq!(
            check_request(&req(PTR_CUDA, Some((-5, 0))), all)
                .unwrap_err()
                .msg,
            "regMrDmaBuf: fd -5 is not a file descriptor"
        );
        let null = RegRequest {
            addr: 0,
            ..req(PTR_HOST, None)
        };
        assert_eq!(
            check_request(&null, host).unwrap_err().msg,
            "regMr: data is NULL with 4096 bytes"
        );
        // TCP: recorded, not registered
        let mh = register(req(PTR_HOST, None), host, None).unwrap();
        assert_eq!((mh.addr, mh.len, mh.kind), (0x10000, 4096, PTR_HOST));
        #[cfg(feature = "verbs")]
        assert!(mh.cached().is_none());
    }
}
