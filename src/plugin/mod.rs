//! The plugin proper in safe Rust: init, devices, listen/connect/accept and memory registration
//! behind the NCCL net API; the ffi layer translates C calls into these functions.

pub mod comm;
pub mod devices;
pub mod log;
pub mod pattern;
pub mod pinning;
pub mod prometheus;
#[cfg(feature = "verbs")]
pub mod rdma;
pub mod state;
pub mod telemetry;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

pub use comm::{ListenComm, MemHandle, RecvComm, RegRequest, SendComm};
pub use devices::Properties;
pub use pattern::{Pattern, PatternCell};
pub use state::{CommAttr, CommContext, NetAttr};

use dqplb_config::{ConnClass, SiteConfig};
use dqplb_engine::PolicyKind;
use dqplb_transport::tcp::{
    ConnParams, ListenHandle, TcpConnector, TcpListenComm, TcpOptions, HANDLE_BYTES,
};
use dqplb_transport::{NetError, NetResult};

pub const NAME: &str = "DQPLB";

/// Handle bytes 112..120 carry the id of an in-progress connect across NCCL's repeated calls.
const STAGE_RANGE: std::ops::Range<usize> = 112..120;

/// Largest message one isend or one irecv buffer carries: test() reports sizes as C int, so
/// NCCL v9+ is told maxP2pBytes = maxCollBytes = this, and larger sizes are rejected.
pub(crate) const MAX_TRANSFER_BYTES: usize = i32::MAX as usize;

/// Per-connection options NCCL v10+ passes (connect's config, or the communicator's config).
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnOptions {
    /// IP TOS / IPV6 traffic class on TCP streams, GRH traffic class on verbs data QPs
    /// (overrides NCCL_IB_TC); None keeps the defaults.
    pub traffic_class: Option<u8>,
    /// Serial of the communicator context the connect belongs to (dropped with it).
    pub owner: Option<u64>,
    /// The context's current traffic pattern (v11+ setNetAttr): picks each message's route.
    pub pattern: Option<PatternCell>,
}

/// v11+ setNetAttr: records NCCL's hints in the context and its traffic pattern, which the send
/// comms of the context read at each isend. NCCL calls it before every connect/accept retry
/// (sendProxyConnect/recvProxyConnect, src/transport/net.cc 2.28.3-2.30.7) and per transfer when
/// the hints change (setXferNetAttrs): hints equal to the last ones are one compare under the
/// context's lock, allocation-free and silent.
pub fn set_net_attr(ctx: &CommContext, na: NetAttr) {
    if !ctx.replace_net_attr(na) {
        return;
    }
    let min_peers = match state::get() {
        Ok(g) => g.config.patterns.alltoall_min_peers,
        Err(_) => dqplb_config::PatternsSection::default().alltoall_min_peers,
    };
    let p = pattern::classify(&na, min_peers);
    if ctx.pattern.set(p) {
        tracing::info!(target: "dqplb::net", "communicator {:#x}: traffic pattern {} (setNetAttr op {:#x}, send peers {}, recv peers {})",
            ctx.comm_id, p.as_str(), na.op, na.send.max_concurrent_peers, na.recv.max_concurrent_peers);
    }
    tracing::trace!(target: "dqplb::net", "communicator {:#x}: setNetAttr op {:#x} algo {:#x} proto {:#x}, send peers {}-{} flows {}-{}, recv peers {}-{} flows {}-{}",
        ctx.comm_id, na.op, na.algo, na.proto,
        na.send.min_concurrent_peers, na.send.max_concurrent_peers, na.send.min_flows_per_peer, na.send.max_flows_per_peer,
        na.recv.min_concurrent_peers, na.recv.max_concurrent_peers, na.recv.min_flows_per_peer, na.recv.max_flows_per_peer);
}

/// NCCL's trafficClass int: -1 (NCCL_NET_TRAFFIC_CLASS_UNDEF) or any other value outside 0..=255
/// means "undefined" (the latter with a WARN).
pub(crate) fn traffic_class_from_nccl(tc: i32) -> Option<u8> {
    match u8::try_from(tc) {
        Ok(v) => Some(v),
        Err(_) => {
            if tc != -1 {
                tracing::warn!(target: "dqplb::net", "trafficClass {tc} is outside 0..=255: ignored");
            }
            None
        }
    }
}

/// In-progress connects by random id: the listen handle each was started for, the connector
/// and the communicator context that started it.
type Connects = HashMap<u64, (ListenHandle, Connector, Option<u64>)>;
static CONNECTS: Mutex<Option<Connects>> = Mutex::new(None);

/// Loads the site config, installs logging and discovers devices; logs one INFO line with the
/// version, config source, transport (and why) and devices.
pub fn init(sink: Option<log::Sink>) -> NetResult<()> {
    let level = log::level_from_nccl_debug(std::env::var("NCCL_DEBUG").ok().as_deref());
    log::install_nccl_bridge(sink, level);
    let loaded = dqplb_config::load_from_process_env()
        .map_err(|e| NetError::invalid_argument(format!("site configuration: {e}")))?;
    if let Some(l) = loaded.config.log.level {
        log::set_level(match l {
            dqplb_config::LogLevel::Warn => log::LevelFilter::WARN,
            dqplb_config::LogLevel::Info => log::LevelFilter::INFO,
            dqplb_config::LogLevel::Trace => log::LevelFilter::TRACE,
        });
    }
    for w in &loaded.warnings {
        tracing::warn!(target: "dqplb::config", "{w}");
    }
    let hca = hca_from_env(&loaded.config)?;
    dcqcn_preflight(&loaded.config)?;
    let ifname = std::env::var("NCCL_SOCKET_IFNAME").ok();
    let devices = devices::tcp_devices(ifname.as_deref(), loaded.config.tcp.fabric_id)?;
    // checked before any device opens (the RDMA detection reads them again)
    let force_gdr = gdr_switches()?;
    #[cfg(feature = "verbs")]
    let (devices, transport) = rdma::choose_devices(&loaded.config, hca.as_ref(), devices)?;
    #[cfg(not(feature = "verbs"))]
    let transport = "TCP (built without the verbs transport)".to_string();
    let devices = force_gdr_on_tcp(devices, force_gdr);
    let names: Vec<String> = devices
        .iter()
        .enumerate()
        .map(|(i, d)| format!("[{i}]{}", d.props.name.to_string_lossy()))
        .collect();
    tracing::info!(target: "dqplb::init", "dqplb-net {}; config {}; policy {}; transport {}; devices {}",
        crate::VERSION, loaded.source, loaded.config.engine.policy.as_str(), transport, names.join(" "));
    let rail_plane = rail_planes(hca.as_ref(), &devices);
    state::set(loaded, devices, rail_plane);
    Ok(())
}

/// The test-only switch (DQPLB_TEST_FORCE_GDR=1) on TCP devices: they advertise NCCL_PTR_CUDA
/// too, so NCCL's GDR probe and CUDA-typed regMr run over TCP with host memory (RDMA devices
/// apply the switch in their own detection, crates/transport/src/verbs/caps.rs).
fn force_gdr_on_tcp(mut devices: Vec<devices::Device>, force: bool) -> Vec<devices::Device> {
    for d in devices.iter_mut() {
        if matches!(d.kind, devices::DeviceKind::Tcp { .. }) {
            if force {
                d.props.ptr_support |= devices::PTR_CUDA;
            }
            if force {
                tracing::info!(target: "dqplb::init", "{}: GPUDirect NCCL_PTR_CUDA on, FORCED by DQPLB_TEST_FORCE_GDR=1 (test only: host memory stands in); NCCL_PTR_DMABUF off (TCP device); iflush returns NULL",
                    d.props.name.to_string_lossy());
            } else {
                tracing::trace!(target: "dqplb::init", "{}: GPUDirect NCCL_PTR_CUDA off (TCP device); NCCL_PTR_DMABUF off; iflush returns NULL",
                    d.props.name.to_string_lossy());
            }
        }
    }
    devices
}

/// DQPLB_TEST_FORCE_GDR and NCCL_IB_GDR_FLUSH_DISABLE: 0 or 1, anything else fails init naming
/// the variable; returns the first.
fn gdr_switches() -> NetResult<bool> {
    use dqplb_transport::gdr::{switch_from, FORCE_GDR_ENV};
    let env = |k: &str| std::env::var(k).ok();
    switch_from(env, "NCCL_IB_GDR_FLUSH_DISABLE")?;
    switch_from(env, FORCE_GDR_ENV)
}

/// NCCL v12 railId/planeId per device from NCCL_IB_HCA (`dev[:port[:rail[:plane]]]`, or the
/// fabricId third field, rail = id % max-rails): -1 when the device has no such entry. TCP
/// devices match by interface name with port 0 (so `=lo::3:1` gives lo rail 3, plane 1).
fn rail_planes(
    list: Option<&dqplb_config::HcaList>,
    devices: &[devices::Device],
) -> Vec<(i16, i16)> {
    let id = |v: u32| i16::try_from(v).unwrap_or(-1);
    devices
        .iter()
        .map(|d| {
            let name = d.props.name.to_string_lossy();
            let port = u32::try_from(d.props.port).unwrap_or(0);
            match list
                .and_then(|l| l.select(&name, port))
                .and_then(|s| s.fabric)
            {
                Some(f) => (id(f.rail), f.plane.map_or(-1, id)),
                None => (-1, -1),
            }
        })
        .collect()
}

/// v12 railId/planeId of `dev` (-1 when unknown).
pub fn rail_plane(dev: i32) -> NetResult<(i16, i16)> {
    let g = state::get()?;
    g.device(dev)?;
    Ok(g.rail_plane.get(dev as usize).copied().unwrap_or((-1, -1)))
}

/// Connects started and not finished yet (all contexts).
pub fn pending_connects() -> usize {
    connects().as_ref().map_or(0, |m| m.len())
}

/// Drops the connects a finalized communicator context left unfinished (their sockets close).
pub(crate) fn drop_connects_of(owner: u64) -> usize {
    let mut map = connects();
    let Some(map) = map.as_mut() else { return 0 };
    let before = map.len();
    map.retain(|_, (_, _, o)| *o != Some(owner));
    before - map.len()
}

/// Problems of NCCL_IB_HCA listed in its WARN before "and N more".
const HCA_PROBLEMS_SHOWN: usize = 8;

/// Parses NCCL_IB_HCA once, as NCCL does (linear in its length, at most MAX_IB_DEVS entries), and
/// logs what NCCL would ignore or reinterpret as ONE WARN, the value and each entry cut to a
/// readable length. A name with a character no device has, or a site config with max-rails 0,
/// fails init. None when unset or blank.
fn hca_from_env(cfg: &SiteConfig) -> NetResult<Option<dqplb_config::HcaList>> {
    let Some(v) = std::env::var("NCCL_IB_HCA")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return Ok(None);
    };
    let (list, diags) = dqplb_config::HcaList::parse_lenient(
        v.trim(),
        cfg.fabric.hca_third_field,
        cfg.fabric.max_rails,
    )
    .map_err(|e| NetError::invalid_argument(e.to_string()))?;
    if !diags.is_empty() {
        // Repeats in a row (the same duplicate entry N times) are one item "(N times)".
        let mut items: Vec<(String, usize)> = Vec::new();
        for d in &diags {
            let text = match &d.entry {
                Some(e) => format!("entry '{}': {}", dqplb_config::clip(e), d.message),
                None => d.message.clone(),
            };
            let full = items.len() > HCA_PROBLEMS_SHOWN;
            match items.last_mut() {
                Some((last, n)) if *last == text => *n += 1,
                _ if full => {}
                _ => items.push((text, 1)),
            }
        }
        let mut shown: Vec<String> = items
            .iter()
            .take(HCA_PROBLEMS_SHOWN)
            .map(|(t, n)| {
                if *n > 1 {
                    format!("{t} ({n} times)")
                } else {
                    t.clone()
                }
            })
            .collect();
        let listed: usize = items.iter().take(HCA_PROBLEMS_SHOWN).map(|(_, n)| n).sum();
        if diags.len() > listed {
            shown.push(format!("and {} more", diags.len() - listed));
        }
        tracing::warn!(target: "dqplb::init", "NCCL_IB_HCA='{}': {} {}: {}",
            dqplb_config::clip(&v), diags.len(), if diags.len() == 1 { "problem" } else { "problems" }, shown.join("; "));
    }
    Ok(Some(list))
}

/// DCQCN pre-flight over the RDMA devices NCCL_IB_HCA selects: logs per device, fails init
/// (ncclSystemError) only with `dcqcn.strict`. No RDMA devices (or no sysfs) is logged, not fatal.
fn dcqcn_preflight(cfg: &SiteConfig) -> NetResult<()> {
    use dqplb_dcqcn::reader::{list_devices, Roots};
    let roots = Roots::from_section(&cfg.dcqcn);
    let all = match list_devices(&roots) {
        Ok(all) => all,
        Err(e) => {
            // The init line says which transport runs and why.
            tracing::trace!(target: "dqplb::dcqcn", "dcqcn: no RDMA devices to check ({e})");
            return Ok(());
        }
    };
    let hca = std::env::var("NCCL_IB_HCA").ok();
    let devices = dqplb_dcqcn::select::select_devices(all, hca.as_deref(), &cfg.fabric)
        .map_err(|e| NetError::invalid_argument(format!("NCCL_IB_HCA: {e}")))?;
    dqplb_dcqcn::preflight::preflight(&cfg.dcqcn, &devices, &roots)
        .map(|_| ())
        .map_err(|e| NetError::system(e.to_string()))
}

pub fn device_count() -> NetResult<i32> {
    Ok(state::get()?.devices.len() as i32)
}

pub fn properties(dev: i32) -> NetResult<Properties> {
    Ok(state::get()?.device(dev)?.props)
}

fn tcp_options(cfg: &SiteConfig) -> TcpOptions {
    TcpOptions {
        socket_buffer_bytes: cfg.tcp.socket_buffer_bytes as usize,
        nodelay: cfg.tcp.nodelay,
        src_port_base: (cfg.tcp.src_port_base != 0).then_some(cfg.tcp.src_port_base),
        src_port_stride: 1,
        pinned_ports: Vec::new(),
    }
}

pub(crate) fn policy_kind(p: dqplb_config::PolicyName) -> PolicyKind {
    match p {
        dqplb_config::PolicyName::Dqplb => PolicyKind::Dqplb,
        dqplb_config::PolicyName::DqplbLed => PolicyKind::DqplbLed,
        dqplb_config::PolicyName::StaticSplit => PolicyKind::StaticSplit,
        dqplb_config::PolicyName::RoundRobinMessage => PolicyKind::RoundRobinMessage,
        dqplb_config::PolicyName::SingleQp => PolicyKind::SingleQp,
    }
}

/// Engine parameters for a connection from `local` to `remote` fabricIds, from the class plan
/// (over TCP, the plan at the TCP segment: `SiteConfig::tcp_plan`).
pub fn conn_params(
    cfg: &SiteConfig,
    local: u32,
    remote: u32,
    tcp: bool,
) -> NetResult<(ConnClass, ConnParams)> {
    let rails = cfg.fabric.max_rails;
    let class = dqplb_config::classify(
        &dqplb_config::FabricId::from_id(local, rails),
        &dqplb_config::FabricId::from_id(remote, rails),
    );
    let plan = if tcp {
        cfg.tcp_plan(class)
    } else {
        cfg.plan(class)
    };
    let params = ConnParams {
        qps: u16::try_from(plan.qps)
            .map_err(|_| NetError::invalid_argument(format!("{} QPs do not fit", plan.qps)))?,
        outstanding: plan.outstanding,
        segment_bytes: u32::try_from(plan.segment_bytes).map_err(|_| {
            NetError::invalid_argument(format!(
                "segment of {} bytes is too large",
                plan.segment_bytes
            ))
        })?,
        max_messages: cfg.engine.max_messages,
        policy: policy_kind(cfg.engine.policy),
        fabric_id: local,
    };
    Ok((class, params))
}

/// The parameters a connection is made with: with the class's depth rule it is sized (and its
/// peer told) for max(raised, the plan's depth) segments per QP (verbs send and shared receive
/// queues, TCP per-stream rings, the receiver's checks); the engine starts at the plan's depth and
/// rises only while its QPs' latencies diverge.
pub(crate) fn sized_for_depth_rule(
    cfg: &SiteConfig,
    class: ConnClass,
    base: ConnParams,
) -> ConnParams {
    ConnParams {
        outstanding: cfg.class.get(class).depth_bound(base.outstanding),
        ..base
    }
}

/// Starts listening on `dev`; writes the 128-byte handle NCCL sends to the peer. Never blocks.
pub fn listen(dev: i32, handle: &mut [u8; HANDLE_BYTES]) -> NetResult<ListenComm> {
    listen_with(dev, handle, ConnOptions::default())
}

/// `listen` with per-communicator options: accepted streams get `opts.traffic_class`.
pub(crate) fn listen_with(
    dev: i32,
    handle: &mut [u8; HANDLE_BYTES],
    opts: ConnOptions,
) -> NetResult<ListenComm> {
    let g = state::get()?;
    let d = g.device(dev)?;
    handle.fill(0);
    let inner = match &d.kind {
        devices::DeviceKind::Tcp { ip } => {
            let mut tcp = TcpListenComm::bind(*ip, d.fabric_id, tcp_options(&g.config))?;
            tcp.set_traffic_class(opts.traffic_class);
            tcp.handle().encode(handle);
            tracing::info!(target: "dqplb::net", "dev {dev} listening on {}", tcp.handle().addr);
            comm::ListenInner::Tcp(Box::new(tcp))
        }
        #[cfg(feature = "verbs")]
        devices::DeviceKind::Verbs { ip, domain } => {
            let mut v = dqplb_transport::verbs::VerbsListenComm::bind(
                *ip,
                d.fabric_id,
                std::sync::Arc::clone(domain),
            )?;
            v.set_traffic_class(opts.traffic_class);
            v.handle().encode(handle);
            tracing::info!(target: "dqplb::net", "dev {dev} ({}) listening, bootstrap on {}", domain.name(), v.handle().addr);
            comm::ListenInner::Verbs(v)
        }
    };
    Ok(ListenComm {
        dev,
        ptr_support: d.props.ptr_support,
        inner,
    })
}

/// A connect in progress, over either transport.
enum Connector {
    Tcp(TcpConnector),
    #[cfg(feature = "verbs")]
    Verbs(
        Box<dqplb_transport::verbs::VerbsConnector>,
        std::sync::Arc<dqplb_transport::verbs::VerbsDomain>,
    ),
}

fn connects() -> std::sync::MutexGuard<'static, Option<Connects>> {
    match CONNECTS.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// One step of a non-blocking connect: Ok(None) until every stream is up (NCCL calls again with
/// the same handle buffer, whose bytes 112..120 remember the attempt).
pub fn connect(dev: i32, handle: &mut [u8; HANDLE_BYTES]) -> NetResult<Option<SendComm>> {
    connect_with(dev, handle, ConnOptions::default())
}

/// `connect` with per-connection options (NCCL v10+ trafficClass, v11+ owning context); the
/// options of the first call of an attempt apply.
pub(crate) fn connect_with(
    dev: i32,
    handle: &mut [u8; HANDLE_BYTES],
    opts: ConnOptions,
) -> NetResult<Option<SendComm>> {
    let g = state::get()?;
    let d = g.device(dev)?;
    let mut id_bytes = [0u8; 8];
    id_bytes.copy_from_slice(&handle[STAGE_RANGE]);
    let mut id = u64::from_le_bytes(id_bytes);
    let h = ListenHandle::decode(handle)?;
    let mut map = connects();
    let map = map.get_or_insert_with(HashMap::new);
    // Resume only the attempt started for this very listen handle: a stale or foreign id in the
    // handle bytes never picks up another connection's connector.
    if !map
        .get(&id)
        .is_some_and(|(started_for, _, _)| *started_for == h)
    {
        let tcp = matches!(d.kind, devices::DeviceKind::Tcp { .. });
        let (class, base) = conn_params(&g.config, d.fabric_id, h.fabric_id, tcp)?;
        let params = sized_for_depth_rule(&g.config, class, base);
        let c = match &d.kind {
            devices::DeviceKind::Tcp { ip } => {
                let local_ip = if ip.is_ipv4() == h.addr.is_ipv4() {
                    Some(*ip)
                } else {
                    None
                };
                let mut tcp_opts = tcp_options(&g.config);
                tcp_opts.pinned_ports = pinning::tcp_pinned_ports(
                    &g.config,
                    class,
                    usize::from(params.qps),
                    *ip,
                    h.addr,
                )?;
                Connector::Tcp(TcpConnector::start_with_traffic_class(
                    &h,
                    params,
                    local_ip,
                    &tcp_opts,
                    opts.traffic_class,
                )?)
            }
            #[cfg(feature = "verbs")]
            devices::DeviceKind::Verbs { domain, .. } => {
                let mut v = dqplb_transport::verbs::VerbsConnector::start_with_traffic_class(
                    &h,
                    params,
                    domain,
                    opts.traffic_class,
                )?;
                if let Some(p) = pinning::verbs_pinner(&g.config, class)? {
                    v.set_port_pinner(p);
                }
                Connector::Verbs(Box::new(v), std::sync::Arc::clone(domain))
            }
        };
        tracing::info!(target: "dqplb::net", "dev {dev} connecting to {} (fabricId {} -> {}, class {}): {} data QPs, {} outstanding{}, {} B segments, policy {}",
            h.addr, d.fabric_id, h.fabric_id, class.as_str(), params.qps, base.outstanding,
            match g.config.class.get(class).depth_rule() {
                Some(r) => format!(" (depth rule: {} while latencies diverge {}x, back after {} calm checks)", r.raised, r.ratio, r.hold),
                None => String::new(),
            },
            params.segment_bytes, params.policy);
        id = loop {
            let r = dqplb_transport::tcp::handle::random_secret()?;
            let candidate = u64::from_le_bytes([r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]]);
            if candidate != 0 && !map.contains_key(&candidate) {
                break candidate;
            }
        };
        if let Some(tc) = opts.traffic_class {
            tracing::info!(target: "dqplb::net", "dev {dev} connection to {}: traffic class {tc}", h.addr);
        }
        map.insert(id, (h, c, opts.owner));
        handle[STAGE_RANGE].copy_from_slice(&id.to_le_bytes());
    }
    let Some((_, c, _)) = map.get_mut(&id) else {
        return Err(NetError::internal("connect state vanished"));
    };
    let log_stats = g.config.stats.log_on_close;
    let ptrs = d.props.ptr_support;
    let step = match c {
        Connector::Tcp(t) => t
            .progress()
            .map(|o| o.map(|tcp| SendComm::new(tcp, log_stats, ptrs))),
        #[cfg(feature = "verbs")]
        Connector::Verbs(v, domain) => {
            let domain = std::sync::Arc::clone(domain);
            v.progress()
                .map(|o| o.map(|s| SendComm::new_verbs(s, domain, log_stats, ptrs)))
        }
    };
    match step {
        Ok(None) => Ok(None),
        Ok(Some(mut comm)) => {
            map.remove(&id);
            handle[STAGE_RANGE].fill(0);
            let tcp = matches!(d.kind, devices::DeviceKind::Tcp { .. });
            let (class, base) = conn_params(&g.config, d.fabric_id, h.fabric_id, tcp)?;
            let spec = g.config.class.get(class);
            // First: installing the rule rebuilds the engine (routes and rules come after).
            if let Some(r) = spec.depth_rule() {
                comm.set_depth_rule(
                    base.outstanding,
                    dqplb_engine::DepthRule {
                        ratio: r.ratio,
                        raised: r.raised,
                        hold: r.hold,
                    },
                )?;
                if let Some(p) = g.config.repin_rule(class) {
                    comm.set_repin_rule(dqplb_engine::RepinRule {
                        ratio: p.ratio,
                        persist: p.persist,
                        settle: p.settle,
                        budget: p.budget,
                    })?;
                }
            }
            if let Some(cell) = opts.pattern {
                comm.use_patterns(cell, &g.config, dev)?;
            }
            comm.set_stall_timeout_ms(spec.stall_timeout_ms);
            comm.set_event_device(dev);
            if spec.rehash_max_per_minute > 0 {
                comm.set_rehash_rule(dqplb_engine::RehashRule {
                    ratio: spec.rehash_ratio,
                    window: spec.rehash_window,
                    // TCP's engine clock is nanoseconds.
                    cooldown: spec.rehash_cooldown_ms * 1_000_000,
                    budget: spec.rehash_max_per_minute,
                    budget_period: 60_000_000_000,
                })?;
            }
            let transport = match &d.kind {
                devices::DeviceKind::Tcp { .. } => "tcp",
                #[cfg(feature = "verbs")]
                devices::DeviceKind::Verbs { .. } => "verbs",
            };
            comm.set_label(format!("send comm dev {dev} ({transport}) to {}", h.addr));
            let qps = comm.qp_stats().len();
            comm.set_telemetry(telemetry::CommTelemetry::new(
                &g.config.stats,
                dev,
                transport,
                h.addr.to_string(),
                class.as_str(),
                qps,
            ));
            Ok(Some(comm))
        }
        Err(e) => {
            map.remove(&id);
            handle[STAGE_RANGE].fill(0);
            Err(e)
        }
    }
}

static DEBUG_PANIC: Mutex<Option<String>> = Mutex::new(None);
static DEBUG_PANIC_SET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Reads NCCL_DQPLB_DEBUG_PANIC (an entry-point name that will panic, to test the ffi guard).
pub(crate) fn read_debug_knobs() {
    let v = std::env::var("NCCL_DQPLB_DEBUG_PANIC")
        .ok()
        .filter(|s| !s.is_empty());
    DEBUG_PANIC_SET.store(v.is_some(), Ordering::Relaxed);
    if let Ok(mut g) = DEBUG_PANIC.lock() {
        *g = v;
    }
}

/// The entry point chosen by NCCL_DQPLB_DEBUG_PANIC, if any (one relaxed load when unset).
pub(crate) fn debug_panic_entry() -> Option<String> {
    if !DEBUG_PANIC_SET.load(Ordering::Relaxed) {
        return None;
    }
    DEBUG_PANIC.lock().ok().and_then(|g| g.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The depth rule sizes the connection for max(raised, the plan's depth); without it the
    /// plan's depth stands.
    #[test]
    fn connections_are_sized_for_the_raised_depth() {
        let pinned = "[class.cross-rail]\nqps = 16\nmax-outstanding = 2\n\
                      path-pinning = \"relative\"\necmp-width = 32\n\
                      [class.cross-dc]\nmax-outstanding = 3\ndepth-raised = 8\n";
        let cfg = dqplb_config::parse_str(pinned, "site.toml").expect("config");
        let (_, base) = conn_params(&cfg, 0, 1, false).expect("params");
        assert_eq!(base.outstanding, 2);
        let at = |class, outstanding| {
            sized_for_depth_rule(
                &cfg,
                class,
                ConnParams {
                    outstanding,
                    ..base
                },
            )
        };
        // Pinned cross-rail: max-outstanding + 1 = 3.
        assert_eq!(at(ConnClass::CrossRail, 2).outstanding, 3);
        assert_eq!(at(ConnClass::CrossRail, 1).outstanding, 3);
        // Cross-dc: the configured 8 over any plan depth up to max-outstanding 3.
        assert_eq!(at(ConnClass::CrossDc, 3).outstanding, 8);
        // Same-rail runs no rule: the plan's depth, everything else unchanged.
        assert_eq!(
            at(ConnClass::SameRail, 2),
            ConnParams {
                outstanding: 2,
                ..base
            }
        );
    }
}
