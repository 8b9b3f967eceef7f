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

use super::abi::{Logger, NetV8, Props};
use super::dl::Lib;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

type P = *mut c_void;

/// NCCL_NET_OPTIONAL_RECV_COMPLETION (src/include/plugin/nccl_net.h, 2.24-2.30).
pub(crate) const OPTIONAL_RECV_COMPLETION: usize = 0x1;
/// NCCL_MAX_NET_SIZE_BYTES (1 TiB).
pub(crate) const MAX_NET_SIZE_BYTES: usize = 1 << 40;

/// ncclNetVDeviceProps_v9_t..v11 (4 devices) and v12 (8 devices).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct VProps<const N: usize> {
    pub ndevs: c_int,
    pub devs: [c_int; N],
}

/// ncclNetProperties_v9_t/v10 (104 bytes), v11 (+maxMultiRequestSize), v12 (+railId/planeId).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PropsV12<const N: usize, T: Copy> {
    pub name: *const c_char,
    pub pci_path: *const c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub vprops: VProps<N>,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    /// () for v9/v10, V11Tail for v11, V12Tail for v12.
    pub tail: T,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct V11Tail {
    pub max_multi_request_size: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct V12Tail {
    pub max_multi_request_size: c_int,
    pub rail_id: i16,
    pub plane_id: i16,
}

pub(crate) type PropsV9 = PropsV12<4, ()>;
pub(crate) type PropsV11 = PropsV12<4, V11Tail>;
pub(crate) type PropsV12Full = PropsV12<8, V12Tail>;
const _: () = assert!(std::mem::size_of::<PropsV9>() == 104);
const _: () = assert!(std::mem::size_of::<PropsV11>() == 112);
const _: () = assert!(std::mem::size_of::<PropsV12Full>() == 128);

/// ncclNetCommConfig_v10_t..v12.
#[repr(C)]
pub(crate) struct CommConfig {
    pub traffic_class: c_int,
}

/// ncclNetAttr_v11_t / v12.
#[repr(C)]
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct NetAttr {
    pub send: [i32; 4],
    pub recv: [i32; 4],
    pub op: u32,
    pub algo: u32,
    pub proto: u32,
}

/// Slots of a v9+ vtable by index (0 is the name) (every version keeps v8's order for the first 19 members;
/// v9 appends makeVDevice, v11 finalize and setNetAttr).
mod slot {
    pub(super) const INIT: usize = 1;
    pub(super) const GET_PROPERTIES: usize = 3;
    pub(super) const LISTEN: usize = 4;
    pub(super) const CONNECT: usize = 5;
    pub(super) const ISEND: usize = 10;
    pub(super) const IRECV: usize = 11;
    pub(super) const MAKE_VDEVICE: usize = 19;
    pub(super) const FINALIZE: usize = 20;
    pub(super) const SET_NET_ATTR: usize = 21;
}

static VTABLE: AtomicPtr<usize> = AtomicPtr::new(std::ptr::null_mut());
static VERSION: AtomicU32 = AtomicU32::new(8);
static CTX: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static TC: AtomicI32 = AtomicI32::new(-1);
/// irecv calls that carried the 0x1 hint, and those that left it in *request (a plugin bug).
pub(crate) static HINTS: AtomicU64 = AtomicU64::new(0);
pub(crate) static HINTS_LEFT: AtomicU64 = AtomicU64::new(0);
/// Bit 32: recorded; bits 16..32 railId, 0..16 planeId.
static RAIL_PLANE: AtomicU64 = AtomicU64::new(0);

fn slot_ptr(i: usize) -> usize {
    let t = VTABLE.load(Ordering::Acquire);
    // SAFETY: t is the plugin's vtable of VERSION, which has at least i + 1 members.
    unsafe { *t.add(i) }
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
pub(crate) fn find(lib: &Lib, first: u32) -> Result<(u32, *mut usize), String> {
    for v in (8..=first).rev() {
        if let Some(p) = lib.sym(&format!("ncclNetPlugin_v{v}")) {
            return Ok((v, p as *mut usize));
        }
    }
    Err(format!("no ncclNetPlugin_v{first}..v8 symbol"))
}

/// The table the emulator's proxy code uses for the plugin loaded as `version`: the plugin's own
/// for v8, forwarding entries for v9+.
pub(crate) fn adopt(version: u32, table: *mut usize) -> &'static NetV8 {
    VERSION.store(version, Ordering::Release);
    VTABLE.store(table, Ordering::Release);
    if version == 8 {
        // SAFETY: the symbol is the plugin's ncclNet_v8_t.
        return unsafe { &*(table as *const NetV8) };
    }
    // SAFETY: the other members have v8's signatures in every version: copy them as they are.
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
    let v = version();
    match which {
        "makeVDevice" => v >= 9 && slot_ptr(slot::MAKE_VDEVICE) != 0,
        "finalize" => v >= 11 && slot_ptr(slot::FINALIZE) != 0,
        "setNetAttr" => v >= 11 && slot_ptr(slot::SET_NET_ATTR) != 0,
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

type InitV8 = unsafe extern "C" fn(Option<Logger>) -> c_int;
type InitV10 = unsafe extern "C" fn(Option<Logger>, P) -> c_int;
type InitV11 = unsafe extern "C" fn(*mut P, u64, *mut CommConfig, Option<Logger>, P) -> c_int;
type Finalize = unsafe extern "C" fn(P) -> c_int;
type SetNetAttr = unsafe extern "C" fn(P, *mut NetAttr) -> c_int;

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
    let f = slot_ptr(slot::INIT);
    if f == 0 {
        return Err("init is NULL".into());
    }
    let tc = traffic_class();
    TC.store(tc, Ordering::Release);
    // SAFETY: the slot holds the version's init; arguments as NCCL passes them.
    let rc = unsafe {
        match version() {
            8 | 9 => std::mem::transmute::<usize, InitV8>(f)(Some(logger)),
            10 => std::mem::transmute::<usize, InitV10>(f)(Some(logger), profiler as *mut c_void),
            _ => {
                let mut ctx: P = 0x5a5a as P;
                let mut cfg = CommConfig { traffic_class: tc };
                let rc = std::mem::transmute::<usize, InitV11>(f)(
                    &mut ctx,
                    comm_hash,
                    &mut cfg,
                    Some(logger),
                    profiler as *mut c_void,
                );
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
static LAST_ATTR: std::sync::Mutex<Option<NetAttr>> = std::sync::Mutex::new(None);
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
fn set_net_attrs(a: NetAttr) -> Result<(), String> {
    let ctx = CTX.load(Ordering::Acquire);
    let f = slot_ptr(slot::SET_NET_ATTR);
    if version() < 11 || f == 0 || ctx.is_null() {
        return Ok(());
    }
    let mut a2 = a;
    NET_ATTR_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: v11+ setNetAttr with the context init returned and a live attribute struct.
    let r = unsafe { std::mem::transmute::<usize, SetNetAttr>(f)(ctx, &mut a2) };
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
    let side = [peers, 1, flows, 1];
    set_net_attrs(NetAttr {
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
    if version() < 11 || slot_ptr(slot::SET_NET_ATTR) == 0 {
        return Ok(());
    }
    let last = *LAST_ATTR.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut a) = last else {
        return Ok(());
    };
    let side = [npeers, npeers, nchannels, nchannels];
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
    let f = slot_ptr(slot::FINALIZE);
    if f == 0 {
        return Err("finalize is NULL".into());
    }
    // SAFETY: the version's finalize with the context its init returned.
    super::nccl::ok("finalize", unsafe {
        std::mem::transmute::<usize, Finalize>(f)(ctx)
    })?;
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
        Props {
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

/// getProperties of v9-v12 into a garbage-filled struct of that version, checked, as v8 Props.
unsafe extern "C" fn get_properties(dev: c_int, out: *mut Props) -> c_int {
    unsafe {
        let f = slot_ptr(slot::GET_PROPERTIES);
        match version() {
            9 | 10 => {
                let mut p: PropsV9 = std::mem::transmute([0x5au8; 104]);
                let rc = std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(c_int, *mut PropsV9) -> c_int,
                >(f)(dev, &mut p);
                if rc != 0 {
                    return rc;
                }
                let ok = check_v9(
                    dev,
                    p.vprops.ndevs,
                    p.vprops.devs[0],
                    p.max_p2p_bytes,
                    p.max_coll_bytes,
                    p.force_flush,
                );
                *out = to_v8!(p);
                if ok {
                    0
                } else {
                    3
                }
            }
            11 => {
                let mut p: PropsV11 = std::mem::transmute([0x5au8; 112]);
                let rc = std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(c_int, *mut PropsV11) -> c_int,
                >(f)(dev, &mut p);
                if rc != 0 {
                    return rc;
                }
                let ok = check_v9(
                    dev,
                    p.vprops.ndevs,
                    p.vprops.devs[0],
                    p.max_p2p_bytes,
                    p.max_coll_bytes,
                    p.force_flush,
                ) && p.tail.max_multi_request_size >= 1;
                *out = to_v8!(p);
                if ok {
                    0
                } else {
                    3
                }
            }
            _ => {
                let mut p: PropsV12Full = std::mem::transmute([0x5au8; 128]);
                let rc = std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(c_int, *mut PropsV12Full) -> c_int,
                >(f)(dev, &mut p);
                if rc != 0 {
                    return rc;
                }
                let ok = check_v9(
                    dev,
                    p.vprops.ndevs,
                    p.vprops.devs[0],
                    p.max_p2p_bytes,
                    p.max_coll_bytes,
                    p.force_flush,
                ) && p.tail.max_multi_request_size >= 1
                    && p.tail.rail_id != 0x5a5a
                    && p.tail.plane_id != 0x5a5a;
                if dev == 0 {
                    let v = (1u64 << 32)
                        | ((p.tail.rail_id as u16 as u64) << 16)
                        | p.tail.plane_id as u16 as u64;
                    RAIL_PLANE.store(v, Ordering::Release);
                }
                *out = to_v8!(p);
                if ok {
                    0
                } else {
                    3
                }
            }
        }
    }
}

unsafe extern "C" fn listen(dev: c_int, handle: P, comm: *mut P) -> c_int {
    unsafe {
        let f = slot_ptr(slot::LISTEN);
        if version() >= 11 {
            let ctx = CTX.load(Ordering::Acquire);
            std::mem::transmute::<usize, unsafe extern "C" fn(P, c_int, P, *mut P) -> c_int>(f)(
                ctx, dev, handle, comm,
            )
        } else {
            std::mem::transmute::<usize, unsafe extern "C" fn(c_int, P, *mut P) -> c_int>(f)(
                dev, handle, comm,
            )
        }
    }
}

unsafe extern "C" fn connect(dev: c_int, handle: P, comm: *mut P, dev_comm: *mut P) -> c_int {
    unsafe {
        let f = slot_ptr(slot::CONNECT);
        match version() {
            9 => std::mem::transmute::<
                usize,
                unsafe extern "C" fn(c_int, P, *mut P, *mut P) -> c_int,
            >(f)(dev, handle, comm, dev_comm),
            10 => {
                // sendProxyConnect passes the communicator's config (trafficClass) on every call.
                let mut cfg = CommConfig {
                    traffic_class: TC.load(Ordering::Acquire),
                };
                std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(c_int, *mut CommConfig, P, *mut P, *mut P) -> c_int,
                >(f)(dev, &mut cfg, handle, comm, dev_comm)
            }
            _ => {
                let ctx = CTX.load(Ordering::Acquire);
                std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(P, c_int, P, *mut P, *mut P) -> c_int,
                >(f)(ctx, dev, handle, comm, dev_comm)
            }
        }
    }
}

unsafe extern "C" fn isend(comm: P, data: P, size: c_int, tag: c_int, mh: P, req: *mut P) -> c_int {
    unsafe {
        let f = slot_ptr(slot::ISEND);
        let size = size as usize;
        if version() == 9 {
            std::mem::transmute::<usize, unsafe extern "C" fn(P, P, usize, c_int, P, *mut P) -> c_int>(
                f,
            )(comm, data, size, tag, mh, req)
        } else {
            // phandle: NCCL passes &sub->pHandles[...] (NEXT_PHANDLE), never NULL.
            std::mem::transmute::<
                usize,
                unsafe extern "C" fn(P, P, usize, c_int, P, P, *mut P) -> c_int,
            >(f)(
                comm,
                data,
                size,
                tag,
                mh,
                NEXT_PHANDLE.load(Ordering::Relaxed) as P,
                req,
            )
        }
    }
}

#[allow(clippy::type_complexity)]
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
        let f = slot_ptr(slot::IRECV);
        let mut wide = [0usize; 64];
        for (i, w) in wide.iter_mut().enumerate().take(n.clamp(0, 64) as usize) {
            *w = *sizes.add(i) as usize;
        }
        // The optional-completion hint: NCCL pre-sets *request to 0x1 (src/transport/net.cc).
        *req = OPTIONAL_RECV_COMPLETION as P;
        HINTS.fetch_add(1, Ordering::Relaxed);
        let rc = if version() == 9 {
            std::mem::transmute::<
                usize,
                unsafe extern "C" fn(
                    P,
                    c_int,
                    *mut P,
                    *mut usize,
                    *mut c_int,
                    *mut P,
                    *mut P,
                ) -> c_int,
            >(f)(comm, n, data, wide.as_mut_ptr(), tags, mhs, req)
        } else {
            let mut ph = [std::ptr::null_mut::<c_void>(); 64];
            std::mem::transmute::<
                usize,
                unsafe extern "C" fn(
                    P,
                    c_int,
                    *mut P,
                    *mut usize,
                    *mut c_int,
                    *mut P,
                    *mut P,
                    *mut P,
                ) -> c_int,
            >(f)(
                comm,
                n,
                data,
                wide.as_mut_ptr(),
                tags,
                mhs,
                ph.as_mut_ptr(),
                req,
            )
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
