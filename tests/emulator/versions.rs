//! NCCL's native loading of a v9-v12 plugin: the symbol search of src/plugin/net.cc (newest
//! first: `ncclNetPlugin_v12` .. `_v8` in 2.30; 2.28 starts at v11, 2.26 at v10, 2.24 at v9), and
//! the per-version call conventions NCCL's core uses once its own ncclNet_t points at the
//! plugin's entry points (src/plugin/net/net_v9.cc .. net_v12.cc):
//! - v9+: isend/irecv take size_t sizes; recvProxyProgress (src/transport/net.cc) may pre-set
//!   `*request = NCCL_NET_OPTIONAL_RECV_COMPLETION` (0x1) before irecv (LL/LL128, one sub); the
//!   emulator does it before every irecv and requires the plugin to overwrite it.
//! - v9+: getProperties also fills forceFlush, vProps, maxP2pBytes, maxCollBytes (checked here:
//!   vProps = {1, {dev}}, 0 < maxP2pBytes/maxCollBytes <= NCCL_MAX_NET_SIZE_BYTES), v11
//!   maxMultiRequestSize, v12 railId/planeId (recorded for the test).
//! - v10: init(logger, profiler), connect(dev, &commConfig{trafficClass}, ...), phandles.
//! - v11/v12: init(&ctx, commHash, &commConfig, logger, profiler) per communicator
//!   (ncclNetPluginInit), listen/connect(ctx, ...), finalize(ctx) in ncclNetFinalize.
//!
//! The emulator's proxy code speaks ncclNet_v8_t; for v9+ it gets a v8-shaped table whose
//! entries forward to the plugin's vN entry points with those conventions (a test-side adapter:
//! NCCL itself adapts the other way, old plugins to its newest internal API).

use dqplb_test_support::dl::Library;
use dqplb_test_support::nccl::{
    CommAttrV11, CommConfigV10, DeviceHandleV8, Finalize, Logger, NetAttrV11, NetV10, NetV11,
    NetV12, NetV8, NetV9, PropertiesV8, SetNetAttr, INTERNAL_ERROR, MAX_NET_SIZE_BYTES,
    OPTIONAL_RECV_COMPLETION,
};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

type P = *mut c_void;

static VTABLE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static VERSION: AtomicU32 = AtomicU32::new(8);
static CTX: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static TC: AtomicI32 = AtomicI32::new(-1);
/// irecv calls that carried the 0x1 hint, and those that left it in *request (a plugin bug).
pub(crate) static HINTS: AtomicU64 = AtomicU64::new(0);
pub(crate) static HINTS_LEFT: AtomicU64 = AtomicU64::new(0);
/// Bit 32: recorded; bits 16..32 railId, 0..16 planeId.
static RAIL_PLANE: AtomicU64 = AtomicU64::new(0);

/// The loaded plugin's vtable, typed by the version it was found as.
#[derive(Clone, Copy)]
enum Table {
    V8(&'static NetV8),
    V9(&'static NetV9),
    V10(&'static NetV10),
    V11(&'static NetV11),
    V12(&'static NetV12),
}

impl Table {
    /// The loaded table (valid between `adopt` and the dlclose after the last communicator).
    fn get() -> Table {
        let t = VTABLE.load(Ordering::Acquire);
        assert!(!t.is_null(), "no plugin vtable adopted yet");
        // SAFETY: t is the plugin's ncclNetPlugin_vN static for N = VERSION (`adopt`).
        unsafe {
            match version() {
                8 => Table::V8(&*(t as *const NetV8)),
                9 => Table::V9(&*(t as *const NetV9)),
                10 => Table::V10(&*(t as *const NetV10)),
                11 => Table::V11(&*(t as *const NetV11)),
                _ => Table::V12(&*(t as *const NetV12)),
            }
        }
    }

    fn has_make_vdevice(self) -> bool {
        match self {
            Table::V8(_) => false,
            Table::V9(t) => t.make_vdevice.is_some(),
            Table::V10(t) => t.make_vdevice.is_some(),
            Table::V11(t) => t.make_vdevice.is_some(),
            Table::V12(t) => t.make_vdevice.is_some(),
        }
    }

    fn finalize(self) -> Option<Finalize> {
        match self {
            Table::V11(t) => t.finalize,
            Table::V12(t) => t.finalize,
            _ => None,
        }
    }

    fn set_net_attr(self) -> Option<SetNetAttr> {
        match self {
            Table::V11(t) => t.set_net_attr,
            Table::V12(t) => t.set_net_attr,
            _ => None,
        }
    }
}

/// The newest version the emulated NCCL looks for first (`DQPLB_EMU_PLUGIN_VERSION` caps it,
/// e.g. 8 for a v8-only plugin).
pub(crate) fn first_version(nccl: u32) -> u32 {
    let native = match nccl {
        230.. => 12,
        228.. => 11,
        226.. => 10,
        224.. => 9,
        _ => 8,
    };
    let cap = std::env::var("DQPLB_EMU_PLUGIN_VERSION")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    native.min(cap)
}

/// dlsym from `first` down to v8; the first found wins (getNcclNet[] in src/plugin/net.cc).
pub(crate) fn find(lib: &Library, first: u32) -> Result<(u32, P), String> {
    for v in (8..=first).rev() {
        if let Ok(p) = lib.symbol(&format!("ncclNetPlugin_v{v}")) {
            return Ok((v, p));
        }
    }
    Err(format!("no ncclNetPlugin_v{first}..v8 symbol"))
}

/// The table the emulator's proxy code uses for the plugin loaded as `version`: the plugin's own
/// for v8, forwarding entries for v9+.
pub(crate) fn adopt(version: u32, table: P) -> &'static NetV8 {
    VERSION.store(version, Ordering::Release);
    VTABLE.store(table, Ordering::Release);
    if version == 8 {
        // SAFETY: the symbol is the plugin's ncclNet_v8_t.
        return unsafe { &*(table as *const NetV8) };
    }
    // SAFETY: every version keeps v8's order for its first 19 members, and the ones not replaced
    // below have v8's signatures in every version: copy them as they are.
    let mut t: NetV8 = unsafe { std::ptr::read(table as *const NetV8) };
    t.get_properties = Some(get_properties);
    t.listen = Some(listen);
    t.connect = Some(connect);
    t.isend = Some(isend);
    t.irecv = Some(irecv);
    Box::leak(Box::new(t))
}

pub(crate) fn version() -> u32 {
    VERSION.load(Ordering::Acquire)
}

/// makeVDevice/finalize/setNetAttr presence, for the OK line.
pub(crate) fn has(which: &str) -> bool {
    let t = Table::get();
    match which {
        "makeVDevice" => t.has_make_vdevice(),
        "finalize" => t.finalize().is_some(),
        "setNetAttr" => t.set_net_attr().is_some(),
        _ => false,
    }
}

/// The profiler handle the next isend passes (&sub->pHandles[step % NCCL_STEPS] in
/// sendProxyProgress, net.cc 2.26-2.30; never NULL there).
pub(crate) static NEXT_PHANDLE: AtomicUsize = AtomicUsize::new(0);
/// Profiler events: started, stopped, payload bytes started, and malformed calls.
pub(crate) static PROF_STARTS: AtomicU64 = AtomicU64::new(0);
pub(crate) static PROF_STOPS: AtomicU64 = AtomicU64::new(0);
pub(crate) static PROF_BYTES: AtomicU64 = AtomicU64::new(0);
pub(crate) static PROF_BAD: AtomicU64 = AtomicU64::new(0);
static PROF_NEXT: AtomicUsize = AtomicUsize::new(0x1000);
static PROF_LIVE: std::sync::Mutex<Option<std::collections::HashSet<usize>>> =
    std::sync::Mutex::new(None);

/// ncclProfilerCallback (src/plugin/profiler.cc 2.26-2.30) with a profiler that records every
/// net-plugin event: Start(&eHandle, 0, pHandle, pluginId, descriptor) must come with the parent
/// handle of an isend, pluginId NCCL_PROFILER_NET_TYPE_{IB,SOCK} | 1 and a version-1 descriptor
/// whose type is 1 (ncclProfileQp / ncclProfileSocket); Stop(&eHandle, 1, ...) must name a live
/// event. Anything else counts as bad.
unsafe extern "C" fn profiler(e: *mut P, t: c_int, p: P, id: i64, x: P) -> c_int {
    unsafe {
        let mut live = PROF_LIVE.lock().unwrap_or_else(|q| q.into_inner());
        let live = live.get_or_insert_with(Default::default);
        match t {
            0 => {
                let ok_parent = !p.is_null();
                // The descriptors (plugins/profiler/example/nccl/net_ib_v1.h, net_socket_v1.h):
                // type at 0, the union at 8; length at 8 + 24 (qp) or 8 + 8 (sock).
                let len_at = match id {
                    0x10001 => Some(32),
                    0x20001 => Some(16),
                    _ => None,
                };
                match (ok_parent, len_at, x.is_null(), e.is_null()) {
                    (true, Some(off), false, false) if *(x as *const u8) == 1 => {
                        let len = *((x as *const u8).add(off) as *const usize);
                        PROF_BYTES.fetch_add(len as u64, Ordering::Relaxed);
                        PROF_STARTS.fetch_add(1, Ordering::Relaxed);
                        let h = PROF_NEXT.fetch_add(1, Ordering::Relaxed);
                        live.insert(h);
                        *e = h as P;
                    }
                    _ => {
                        PROF_BAD.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            1 if !e.is_null() && live.remove(&(*e as usize)) => {
                PROF_STOPS.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                PROF_BAD.fetch_add(1, Ordering::Relaxed);
            }
        }
        0
    }
}

/// The traffic class the emulated communicator asks for (`DQPLB_EMU_TC`, default undefined).
pub(crate) fn traffic_class() -> c_int {
    std::env::var("DQPLB_EMU_TC")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

/// One init as the loaded version's NCCL calls it: v8/v9 init(logger), v10 init(logger,
/// profiler), v11+ init(&ctx, commHash, &config, logger, profiler). setNetAttr comes later, at
/// connect (`connect_net_attr`) and per transfer (`xfer_net_attr`).
pub(crate) fn init(logger: Logger, comm_hash: u64) -> Result<(), String> {
    const NULL: &str = "init is NULL";
    let tc = traffic_class();
    TC.store(tc, Ordering::Release);
    // SAFETY: the version's init; arguments as NCCL passes them.
    let rc = unsafe {
        match Table::get() {
            Table::V8(t) => t.init.ok_or(NULL)?(Some(logger)),
            Table::V9(t) => t.init.ok_or(NULL)?(Some(logger)),
            Table::V10(t) => t.init.ok_or(NULL)?(Some(logger), Some(profiler)),
            Table::V11(&NetV11 { init, .. }) | Table::V12(&NetV12 { init, .. }) => {
                let init = init.ok_or(NULL)?;
                let mut ctx: P = 0x5a5a as P;
                let mut cfg = CommConfigV10 { traffic_class: tc };
                let rc = init(&mut ctx, comm_hash, &mut cfg, Some(logger), Some(profiler));
                if rc == 0 {
                    if ctx.is_null() || ctx == 0x5a5a as P {
                        return Err(format!("v{} init left ctx {ctx:?}", version()));
                    }
                    CTX.store(ctx, Ordering::Release);
                }
                rc
            }
        }
    };
    super::nccl::ok("init", rc)
}

/// proxyState->netAttr: the hints last given to setNetAttr (src/include/proxy.h, 2.28-2.30).
static LAST_ATTR: std::sync::Mutex<Option<NetAttrV11>> = std::sync::Mutex::new(None);
/// setNetAttr calls made.
pub(crate) static NET_ATTR_CALLS: AtomicU64 = AtomicU64::new(0);

const NCCL_NET_ATTR_UNDEF: i32 = -1;
// ncclFunc_t (src/include/nccl_common.h 2.28-2.30).
pub(crate) const FUNC_ALLREDUCE: u32 = 4;
pub(crate) const FUNC_SEND: u32 = 6;
pub(crate) const FUNC_RECV: u32 = 7;
pub(crate) const FUNC_ALLTOALL: u32 = 8;
const FUNC_SCATTER: u32 = 9;
const FUNC_GATHER: u32 = 10;
/// NCCL_MAX_TREE_ARITY (src/include/device.h) and NCCL_MAX_DEV_WORK_P2P_PER_BATCH (2.24-2.30).
const MAX_TREE_ARITY: i32 = 3;
const MAX_DEV_WORK_P2P_PER_BATCH: i32 = 8;

/// setNetAttrs (src/transport/net.cc 2.28-2.30): calls the plugin and remembers the hints.
fn set_net_attrs(a: NetAttrV11) -> Result<(), String> {
    let ctx = CTX.load(Ordering::Acquire);
    let Some(f) = Table::get().set_net_attr() else {
        return Ok(());
    };
    if ctx.is_null() {
        return Ok(());
    }
    let mut a2 = a;
    NET_ATTR_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: v11+ setNetAttr with the context init returned and a live attribute struct.
    let r = unsafe { f(ctx, &mut a2) };
    // NCCL ignores setNetAttr's result (setNetAttrs returns void); a failure is still a bug.
    super::nccl::ok("setNetAttr", r)?;
    *LAST_ATTR.lock().unwrap_or_else(|p| p.into_inner()) = Some(a);
    Ok(())
}

/// populateCommNetAttrs + setNetAttrs at the top of sendProxyConnect/recvProxyConnect
/// (src/transport/net.cc 2.28-2.30), on every call of the connect retry loop: p2p connections
/// (`p2p_only`) hint Send|Recv|AlltoAll|Scatter|Gather with up to min(nRanks, p2pnChannels *
/// NCCL_MAX_DEV_WORK_P2P_PER_BATCH) peers and p2pnChannelsPerPeer flows; collective ones leave
/// op undefined with min(nRanks, (NCCL_MAX_TREE_ARITY - 1) * 2) peers and nChannels flows.
pub(crate) fn connect_net_attr(p2p_only: bool, nranks: i32, nchannels: i32) -> Result<(), String> {
    let u = NCCL_NET_ATTR_UNDEF;
    let (peers, flows, op) = if p2p_only {
        let ops = [
            FUNC_SEND,
            FUNC_RECV,
            FUNC_ALLTOALL,
            FUNC_SCATTER,
            FUNC_GATHER,
        ]
        .iter()
        .fold(0u32, |m, f| m | (1 << f));
        (
            nranks.min(nchannels * MAX_DEV_WORK_P2P_PER_BATCH),
            nchannels,
            ops,
        )
    } else {
        (nranks.min((MAX_TREE_ARITY - 1) * 2), nchannels, u as u32)
    };
    let side = CommAttrV11 {
        max_concurrent_peers: peers,
        min_concurrent_peers: 1,
        max_flows_per_peer: flows,
        min_flows_per_peer: 1,
    };
    set_net_attrs(NetAttrV11 {
        send: side,
        recv: side,
        op,
        algo: u as u32,
        proto: u as u32,
    })
}

/// setXferNetAttrs (src/transport/net.cc 2.28-2.30), called before the first isend/irecv of
/// each ncclProxyArgs: the last hints with this side's peers and flows set to the transfer's
/// nPeers/nChannels, op = BIT(collAPI), algo/proto for collectives only (collAPI <
/// NCCL_NUM_FUNCTIONS = 5); setNetAttr only when that differs from the last hints.
pub(crate) fn xfer_net_attr(
    send: bool,
    coll_api: u32,
    npeers: i32,
    nchannels: i32,
    algo: u32,
    proto: u32,
) -> Result<(), String> {
    if Table::get().set_net_attr().is_none() {
        return Ok(());
    }
    let last = *LAST_ATTR.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut a) = last else {
        return Ok(());
    };
    let side = CommAttrV11 {
        max_concurrent_peers: npeers,
        min_concurrent_peers: npeers,
        max_flows_per_peer: nchannels,
        min_flows_per_peer: nchannels,
    };
    if send {
        a.send = side;
    } else {
        a.recv = side;
    }
    a.op = 1 << coll_api;
    if coll_api < 5 {
        a.algo = 1 << algo;
        a.proto = 1 << proto;
    }
    if Some(a) != last {
        set_net_attrs(a)?;
    }
    Ok(())
}

/// ncclNetFinalize's plugin call for v11+: finalize(ctx). Ok(true) when called.
pub(crate) fn finalize() -> Result<bool, String> {
    if version() < 11 {
        return Ok(false);
    }
    let ctx = CTX.swap(std::ptr::null_mut(), Ordering::AcqRel);
    *LAST_ATTR.lock().unwrap_or_else(|p| p.into_inner()) = None;
    let f = Table::get().finalize().ok_or("finalize is NULL")?;
    // SAFETY: the version's finalize with the context its init returned.
    super::nccl::ok("finalize", unsafe { f(ctx) })?;
    Ok(true)
}

/// railId/planeId of the last v12 getProperties (None before v12).
pub(crate) fn rail_plane() -> Option<(i16, i16)> {
    let v = RAIL_PLANE.load(Ordering::Acquire);
    (v >> 32 != 0).then_some(((v >> 16) as u16 as i16, v as u16 as i16))
}

fn check_v9(dev: c_int, ndevs: c_int, dev0: c_int, p2p: usize, coll: usize, ff: c_int) -> bool {
    let ok = ndevs == 1
        && dev0 == dev
        && (1..=MAX_NET_SIZE_BYTES).contains(&p2p)
        && (1..=MAX_NET_SIZE_BYTES).contains(&coll)
        && (ff == 0 || ff == 1);
    if !ok {
        eprintln!(
            "getProperties({dev}) v{}: vProps {{{ndevs}, {dev0}}}, maxP2pBytes {p2p}, maxCollBytes {coll}, forceFlush {ff}",
            version()
        );
    }
    ok
}

macro_rules! to_v8 {
    ($p:expr) => {
        PropertiesV8 {
            name: $p.name,
            pci_path: $p.pci_path,
            guid: $p.guid,
            ptr_support: $p.ptr_support,
            reg_is_global: $p.reg_is_global,
            speed: $p.speed,
            port: $p.port,
            latency: $p.latency,
            max_comms: $p.max_comms,
            max_recvs: $p.max_recvs,
            net_device_type: $p.net_device_type,
            net_device_version: $p.net_device_version,
        }
    };
}

/// getProperties into a struct of type `T` filled with garbage first (NCCL's is uninitialised
/// stack memory); Err is the call's result when not ncclSuccess, or ncclInternalError for NULL.
unsafe fn props_of<T>(
    f: Option<unsafe extern "C" fn(c_int, *mut T) -> c_int>,
    dev: c_int,
) -> Result<T, c_int> {
    let f = f.ok_or(INTERNAL_ERROR)?;
    let mut p = std::mem::MaybeUninit::<T>::uninit();
    // SAFETY: (whole fn) p is written byte by byte, then by the plugin, before it is read; every
    // field of NCCL's properties structs accepts any bit pattern.
    unsafe {
        std::ptr::write_bytes(p.as_mut_ptr(), 0x5a, 1);
        match f(dev, p.as_mut_ptr()) {
            0 => Ok(p.assume_init()),
            rc => Err(rc),
        }
    }
}

/// getProperties of v9-v12 into a garbage-filled struct of that version, checked, as v8 Props.
unsafe extern "C" fn get_properties(dev: c_int, out: *mut PropertiesV8) -> c_int {
    macro_rules! check {
        ($p:expr) => {
            check_v9(
                dev,
                $p.vprops.ndevs,
                $p.vprops.devs[0],
                $p.max_p2p_bytes,
                $p.max_coll_bytes,
                $p.force_flush,
            )
        };
    }
    // SAFETY: the version's getProperties; out is the caller's v8 struct.
    let (p8, ok) = match unsafe {
        match Table::get() {
            Table::V9(t) => props_of(t.get_properties, dev).map(|p| (to_v8!(p), check!(p))),
            Table::V10(t) => props_of(t.get_properties, dev).map(|p| (to_v8!(p), check!(p))),
            Table::V11(t) => props_of(t.get_properties, dev)
                .map(|p| (to_v8!(p), check!(p) && p.max_multi_request_size >= 1)),
            Table::V12(t) => props_of(t.get_properties, dev).map(|p| {
                if dev == 0 {
                    let v =
                        (1u64 << 32) | ((p.rail_id as u16 as u64) << 16) | p.plane_id as u16 as u64;
                    RAIL_PLANE.store(v, Ordering::Release);
                }
                let ok = check!(p)
                    && p.max_multi_request_size >= 1
                    && p.rail_id != 0x5a5a
                    && p.plane_id != 0x5a5a;
                (to_v8!(p), ok)
            }),
            Table::V8(_) => Err(INTERNAL_ERROR),
        }
    } {
        Ok(r) => r,
        Err(rc) => return rc,
    };
    // SAFETY: out is a valid v8 properties struct of the caller.
    unsafe { *out = p8 };
    if ok {
        0
    } else {
        3
    }
}

unsafe extern "C" fn listen(dev: c_int, handle: P, comm: *mut P) -> c_int {
    let ctx = CTX.load(Ordering::Acquire);
    // SAFETY: the version's listen, with the context of v11+.
    unsafe {
        match Table::get() {
            Table::V9(&NetV9 {
                listen: Some(f), ..
            })
            | Table::V10(&NetV10 {
                listen: Some(f), ..
            }) => f(dev, handle, comm),
            Table::V11(&NetV11 {
                listen: Some(f), ..
            })
            | Table::V12(&NetV12 {
                listen: Some(f), ..
            }) => f(ctx, dev, handle, comm),
            _ => INTERNAL_ERROR,
        }
    }
}

unsafe extern "C" fn connect(
    dev: c_int,
    handle: P,
    comm: *mut P,
    dev_comm: *mut *mut DeviceHandleV8,
) -> c_int {
    let ctx = CTX.load(Ordering::Acquire);
    // sendProxyConnect passes the communicator's config (trafficClass) on every call (v10).
    let mut cfg = CommConfigV10 {
        traffic_class: TC.load(Ordering::Acquire),
    };
    // SAFETY: the version's connect, with the config of v10 or the context of v11+.
    unsafe {
        match Table::get() {
            Table::V9(&NetV9 {
                connect: Some(f), ..
            }) => f(dev, handle, comm, dev_comm),
            Table::V10(&NetV10 {
                connect: Some(f), ..
            }) => f(dev, &mut cfg, handle, comm, dev_comm),
            Table::V11(&NetV11 {
                connect: Some(f), ..
            })
            | Table::V12(&NetV12 {
                connect: Some(f), ..
            }) => f(ctx, dev, handle, comm, dev_comm),
            _ => INTERNAL_ERROR,
        }
    }
}

unsafe extern "C" fn isend(comm: P, data: P, size: c_int, tag: c_int, mh: P, req: *mut P) -> c_int {
    let size = size as usize;
    // phandle: NCCL passes &sub->pHandles[...] (NEXT_PHANDLE), never NULL (v10+).
    let ph = NEXT_PHANDLE.load(Ordering::Relaxed) as P;
    // SAFETY: the version's isend with size_t sizes.
    unsafe {
        match Table::get() {
            Table::V9(&NetV9 { isend: Some(f), .. }) => f(comm, data, size, tag, mh, req),
            Table::V10(&NetV10 { isend: Some(f), .. })
            | Table::V11(&NetV11 { isend: Some(f), .. })
            | Table::V12(&NetV12 { isend: Some(f), .. }) => f(comm, data, size, tag, mh, ph, req),
            _ => INTERNAL_ERROR,
        }
    }
}

unsafe extern "C" fn irecv(
    comm: P,
    n: c_int,
    data: *mut P,
    sizes: *mut c_int,
    tags: *mut c_int,
    mhs: *mut P,
    req: *mut P,
) -> c_int {
    unsafe {
        let mut wide = [0usize; 64];
        for (i, w) in wide.iter_mut().enumerate().take(n.clamp(0, 64) as usize) {
            *w = *sizes.add(i) as usize;
        }
        // The optional-completion hint: NCCL pre-sets *request to 0x1 (src/transport/net.cc).
        *req = OPTIONAL_RECV_COMPLETION as P;
        HINTS.fetch_add(1, Ordering::Relaxed);
        let mut ph = [std::ptr::null_mut::<c_void>(); 64];
        let (w, ph) = (wide.as_mut_ptr(), ph.as_mut_ptr());
        let rc = match Table::get() {
            Table::V9(&NetV9 { irecv: Some(f), .. }) => f(comm, n, data, w, tags, mhs, req),
            Table::V10(&NetV10 { irecv: Some(f), .. })
            | Table::V11(&NetV11 { irecv: Some(f), .. })
            | Table::V12(&NetV12 { irecv: Some(f), .. }) => f(comm, n, data, w, tags, mhs, ph, req),
            _ => INTERNAL_ERROR,
        };
        if *req == OPTIONAL_RECV_COMPLETION as P {
            HINTS_LEFT.fetch_add(1, Ordering::Relaxed);
            // NCCL would test() the 0x1 "request": fail the call instead.
            *req = std::ptr::null_mut();
            return 3;
        }
        rc
    }
}

/// Sockets seen by `record_tos` (summed over communicators) and how many carried DQPLB_EMU_TC.
pub(crate) static TOS_SOCKS: AtomicU64 = AtomicU64::new(0);
pub(crate) static TOS_MARKED: AtomicU64 = AtomicU64::new(0);
static HAS: AtomicU32 = AtomicU32::new(0);

/// After the connections of a communicator are up: counts the TCP sockets and those marked with
/// the requested traffic class; remembers which optional entries the loaded table has.
pub(crate) fn record_tos() {
    let (s, m) = tcp_tos(traffic_class());
    TOS_SOCKS.fetch_add(s as u64, Ordering::Relaxed);
    TOS_MARKED.fetch_add(m as u64, Ordering::Relaxed);
    let bits = u32::from(has("setNetAttr")) | (u32::from(has("makeVDevice")) << 1);
    HAS.store(bits, Ordering::Relaxed);
}

/// Whether the last communicator's table had `which` (valid after the library is closed).
pub(crate) fn has_after_close(which: &str) -> u32 {
    let b = HAS.load(Ordering::Relaxed);
    match which {
        "setNetAttr" => b & 1,
        "makeVDevice" => (b >> 1) & 1,
        _ => 0,
    }
}

/// Open descriptors and threads of this process (/proc/self/fd, /proc/self/task).
pub(crate) fn fds_and_threads() -> (usize, usize) {
    let n = |d: &str| std::fs::read_dir(d).map_or(0, |r| r.count());
    (n("/proc/self/fd"), n("/proc/self/task"))
}

/// Connected TCP sockets of this process and how many carry IP TOS `tc` (getsockopt IP_TOS /
/// IPV6_TCLASS on every socket in /proc/self/fd: the plugin's streams are in this process).
pub(crate) fn tcp_tos(tc: c_int) -> (usize, usize) {
    let (mut socks, mut marked) = (0, 0);
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return (0, 0);
    };
    for e in dir.flatten() {
        let Ok(fd) = e.file_name().to_string_lossy().parse::<c_int>() else {
            continue;
        };
        // SAFETY: plain getsockopt/getpeername on a descriptor number; failures are skipped.
        unsafe {
            let mut ss: libc::sockaddr_storage = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            if libc::getpeername(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) != 0 {
                continue;
            }
            let v6 = ss.ss_family as c_int == libc::AF_INET6;
            if !v6 && ss.ss_family as c_int != libc::AF_INET {
                continue;
            }
            let (level, name) = if v6 {
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
            } else {
                (libc::IPPROTO_IP, libc::IP_TOS)
            };
            let mut v: c_int = 0;
            let mut l = std::mem::size_of::<c_int>() as libc::socklen_t;
            if libc::getsockopt(fd, level, name, &mut v as *mut c_int as *mut c_void, &mut l) != 0 {
                continue;
            }
            socks += 1;
            if v == tc {
                marked += 1;
            }
        }
    }
    (socks, marked)
}
