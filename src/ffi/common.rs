//! The internal API every exported vtable adapts (src/ffi/v8.rs .. v12.rs): the entry points whose
//! C signature is the same in all versions, and version-neutral bodies for the others (sizes as
//! usize, optional per-connection options, optional communicator context). Each checks its
//! pointers, runs inside ffi::guard and always writes its output pointers.

use std::ffi::{c_char, c_int, c_ulong, c_void, CString};
use std::sync::{Arc, Mutex};

use super::guard::guard;
use super::sys::{
    ncclDebugLogger_t, ncclNetDeviceHandle_v8_t, ncclProfilerCallback_t, ncclResult_t,
};
use crate::plugin::{
    self, log, CommContext, ConnOptions, ListenComm, MemHandle, RecvComm, RegRequest, SendComm,
};
use dqplb_transport::events::{EventDescr, NetEvents};
use dqplb_transport::slots::MAX_RECVS;
use dqplb_transport::tcp::HANDLE_BYTES;
use dqplb_transport::{NetError, NetResult, UserBuf};

/// An exported vtable as a `Sync` static (it only holds function pointers and a static string).
#[repr(transparent)]
pub struct Vtable<T>(pub T);

// SAFETY: the struct is immutable and its pointers refer to 'static data and functions.
unsafe impl<T> Sync for Vtable<T> {}

/// The name every version exports (NCCL_NET=DQPLB matches it case-insensitively).
pub const NAME: *const c_char = c"DQPLB".as_ptr();

/// What a request cell's slot refers to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CellKind {
    Send,
    Recv,
    /// An iflush of the receive comm (test() completes it, sizes untouched).
    Flush,
}

/// Request pointers NCCL holds are addresses of these cells, owned by their comm.
#[repr(C)]
struct ReqCell {
    /// REQ_TAG while the cell's comm is open (test() checks it before anything else).
    tag: u64,
    owner: *mut c_void,
    kind: CellKind,
    slot: u32,
    /// Buffers of the receive request now in this cell (test() writes that many sizes).
    n: u32,
}

/// First field of every comm box NCCL holds (repr(C)): regMr/regMrDmaBuf get a comm without
/// saying which kind it is, and a listen comm or a foreign pointer must be refused, not misread.
const SEND_TAG: u64 = u64::from_le_bytes(*b"DQPLSEND");
const RECV_TAG: u64 = u64::from_le_bytes(*b"DQPLRECV");
const LISTEN_TAG: u64 = u64::from_le_bytes(*b"DQPLLSTN");
/// First field of every request cell.
const REQ_TAG: u64 = u64::from_le_bytes(*b"DQPLREQC");

/// What a tag says the object is, for error messages.
fn tag_kind(tag: u64) -> &'static str {
    match tag {
        SEND_TAG => "a send comm",
        RECV_TAG => "a receive comm",
        LISTEN_TAG => "a listen comm",
        REQ_TAG => "a request",
        _ => "not an object of this plugin (or one already closed)",
    }
}

/// `p` as the box its tag must say it is (`want`), or ncclInvalidArgument naming what it is:
/// every entry point checks before it uses a comm or request NCCL hands it.
///
/// # Safety
/// `p` is non-NULL and points at readable memory of at least 8 bytes (a pointer to unmapped
/// memory is undefined behaviour no check can catch); when its first 8 bytes are `want`, it is
/// a live box of type T that this plugin made.
unsafe fn tagged<'a, T>(entry: &str, p: *mut c_void, want: u64) -> NetResult<&'a mut T> {
    // SAFETY: per the contract; read_unaligned: a foreign pointer need not be aligned.
    let tag = unsafe { std::ptr::read_unaligned(p as *const u64) };
    if tag != want || !(p as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(NetError::invalid_argument(format!(
            "{entry}: {p:p} is {}, expected {}",
            tag_kind(tag),
            tag_kind(want)
        )));
    }
    // SAFETY: the tag says this is a live T of ours (contract).
    Ok(unsafe { &mut *(p as *mut T) })
}

/// A listen comm as NCCL holds it.
#[repr(C)]
struct FfiListen {
    tag: u64,
    comm: ListenComm,
}

/// A comm as NCCL holds it: the plugin's comm plus the request cells that point back at it.
#[repr(C)]
struct FfiComm<C> {
    tag: u64,
    comm: C,
    cells: Box<[ReqCell]>,
    /// iflush requests (receive comms with a flush QP; empty otherwise).
    flush_cells: Box<[ReqCell]>,
}

type FfiSend = FfiComm<SendComm>;
type FfiRecv = FfiComm<RecvComm>;

impl<C> FfiComm<C> {
    /// Boxes `comm` with `n` request cells (and `n_flush` iflush cells) and returns the pointer
    /// NCCL will hold.
    fn into_raw(comm: C, n: usize, is_send: bool, n_flush: usize) -> *mut c_void {
        let kind = if is_send {
            CellKind::Send
        } else {
            CellKind::Recv
        };
        let raw = Box::into_raw(Box::new(FfiComm {
            tag: if is_send { SEND_TAG } else { RECV_TAG },
            comm,
            cells: cells(n, kind),
            flush_cells: cells(n_flush, CellKind::Flush),
        }));
        // SAFETY: raw is the live box just created; each cell records its owner for test().
        unsafe {
            let c = &mut *raw;
            c.cells
                .iter_mut()
                .chain(c.flush_cells.iter_mut())
                .for_each(|c| c.owner = raw as *mut c_void)
        };
        raw as *mut c_void
    }
}

fn cells(n: usize, kind: CellKind) -> Box<[ReqCell]> {
    (0..n)
        .map(|i| ReqCell {
            tag: REQ_TAG,
            owner: std::ptr::null_mut(),
            kind,
            slot: i as u32,
            n: 1,
        })
        .collect()
}

/// A send or receive comm NCCL passes to regMr/regMrDmaBuf/deregMr.
enum AnyComm<'a> {
    Send(&'a FfiSend),
    Recv(&'a FfiRecv),
}

/// The send or receive comm behind `comm`, told apart by its tag.
///
/// # Safety
/// `comm` is NULL or a live comm from our listen, connect or accept.
unsafe fn any_comm<'a>(entry: &str, comm: *mut c_void) -> NetResult<AnyComm<'a>> {
    if comm.is_null() {
        return Err(null(&format!("{entry}: comm")));
    }
    // SAFETY: every comm box we hand out is repr(C) with a u64 tag first.
    let tag = unsafe { *(comm as *const u64) };
    // SAFETY: the tag says which box this is.
    unsafe {
        match tag {
            SEND_TAG => Ok(AnyComm::Send(&*(comm as *const FfiSend))),
            RECV_TAG => Ok(AnyComm::Recv(&*(comm as *const FfiRecv))),
            LISTEN_TAG => Err(NetError::invalid_argument(format!(
                "{entry}: comm {comm:p} is a listen comm; memory is registered on send and receive comms"
            ))),
            _ => Err(NetError::invalid_argument(format!(
                "{entry}: comm {comm:p} is not a comm of this plugin"
            ))),
        }
    }
}

/// regMr and regMrDmaBuf: registered at once on the comm's device (RDMA: its cache).
fn reg_impl(
    entry: &'static str,
    comm: *mut c_void,
    req: RegRequest,
    mhandle: *mut *mut c_void,
) -> ncclResult_t {
    let out = |p: *mut c_void| put(mhandle, p);
    guard(
        entry,
        || {
            maybe_panic(entry);
            out(std::ptr::null_mut());
            if mhandle.is_null() {
                return Err(null(&format!("{entry}: mhandle")));
            }
            // SAFETY: NCCL passes a comm from our connect/accept.
            let mh = match unsafe { any_comm(entry, comm)? } {
                AnyComm::Send(s) => s.comm.reg_mr(req)?,
                AnyComm::Recv(r) => r.comm.reg_mr(req)?,
            };
            out(Box::into_raw(Box::new(mh)) as *mut c_void);
            Ok(())
        },
        || out(std::ptr::null_mut()),
    )
}

pub(super) fn null(what: &str) -> NetError {
    NetError::invalid_argument(format!("{what} is NULL"))
}

/// Debug hook: NCCL_DQPLB_DEBUG_PANIC=<entry> makes that entry point panic (tests the guard).
pub(super) fn maybe_panic(entry: &str) {
    if let Some(target) = plugin::debug_panic_entry() {
        if target == entry {
            panic!("NCCL_DQPLB_DEBUG_PANIC={entry}");
        }
    }
}

/// NCCL's logger as the plugin's sink: each line with "%s", its text, and the Rust file and line
/// of the call site (NCCL prints them with WARN and TRACE lines, as for its own `WARN(...)`).
fn sink_from(logger: ncclDebugLogger_t) -> Option<log::Sink> {
    let f = logger?;
    Some(Arc::new(move |l: &log::Line<'_>| {
        let Ok(text) = CString::new(l.msg.replace('\0', " ")) else {
            return;
        };
        let file = CString::new(l.file).unwrap_or_else(|_| c"dqplb".to_owned());
        // SAFETY: NCCL's logger takes a printf format; we pass "%s" and one NUL-terminated string.
        unsafe {
            f(
                l.level as _,
                l.flags as c_ulong,
                file.as_ptr(),
                c_int::try_from(l.line).unwrap_or(0),
                c"%s".as_ptr(),
                text.as_ptr(),
            );
        }
    }))
}

/// The profiler callback NCCL v10 passes to init (v11+ per context: the latest one). Comms created
/// while it is set report per-segment events through it (`NcclProfiler`).
static PROFILER: Mutex<ncclProfilerCallback_t> = Mutex::new(None);

pub(super) fn store_profiler(p: ncclProfilerCallback_t) {
    match PROFILER.lock() {
        Ok(mut g) => *g = p,
        Err(e) => *e.into_inner() = p,
    }
    let sink = p.map(|f| Arc::new(NcclProfiler(f)) as Arc<dyn NetEvents>);
    dqplb_transport::events::set_sink(sink);
}

/// ncclProfilerNetEventStart / Stop (src/include/nccl_common.h 2.26-2.30).
const NET_EVENT_START: c_int = 0;
const NET_EVENT_STOP: c_int = 1;
/// pluginId = NCCL_PROFILER_NET_TYPE_{IB,SOCK} (1 << 16, 2 << 16) | descriptor version 1
/// (plugins/profiler/example/nccl/profiler_net.h, net_ib_v1.h, net_socket_v1.h).
const PLUGIN_ID_IB: i64 = (1 << 16) | 1;
const PLUGIN_ID_SOCK: i64 = (2 << 16) | 1;
/// type = ncclProfileQp / ncclProfileSocket (1 << 0).
const PROFILE_QP: u8 = 1;
const PROFILE_SOCKET: u8 = 1;

/// The qp member of ncclProfilerNetIbDescr_v1_t's union.
#[repr(C)]
struct IbQpV1 {
    device: c_int,
    wr_id: u64,
    opcode: c_int,
    qp_num: c_int,
    length: usize,
}

/// ncclProfilerNetIbDescr_v1_t: type, then the union (8-byte aligned by its u64/size_t members).
#[repr(C)]
struct IbDescrV1 {
    kind: u8,
    qp: IbQpV1,
}
const _: () = assert!(std::mem::size_of::<IbDescrV1>() == 40);
const _: () = assert!(std::mem::offset_of!(IbDescrV1, qp) == 8);
const _: () = assert!(std::mem::offset_of!(IbQpV1, length) == 24);

/// The sock member of ncclProfilerNetSockDescr_v1_t's union.
#[repr(C)]
struct SockV1 {
    fd: c_int,
    op: c_int,
    length: usize,
}

/// ncclProfilerNetSockDescr_v1_t: type, then the union.
#[repr(C)]
struct SockDescrV1 {
    kind: u8,
    sock: SockV1,
}
const _: () = assert!(std::mem::size_of::<SockDescrV1>() == 24);
const _: () = assert!(std::mem::offset_of!(SockDescrV1, sock) == 8);

/// NCCL's profiler callback as the transports' event sink, called as net_ib (p2p.cc) and
/// net_socket call theirs: Start(&eHandle, parent phandle, pluginId, &descriptor) with eHandle
/// NULL beforehand (NCCL leaves it NULL when the profiler does not record net-plugin events),
/// Stop(&eHandle). The descriptor lives on the stack for the call (NCCL's profilers copy it).
struct NcclProfiler(
    unsafe extern "C" fn(*mut *mut c_void, c_int, *mut c_void, i64, *mut c_void) -> ncclResult_t,
);

impl NetEvents for NcclProfiler {
    fn start(&self, parent: usize, d: &EventDescr) -> usize {
        let mut h: *mut c_void = std::ptr::null_mut();
        let parent = parent as *mut c_void;
        // SAFETY: NCCL's callback with its documented arguments; the descriptor outlives the call.
        unsafe {
            match *d {
                EventDescr::Qp {
                    device,
                    wr_id,
                    opcode,
                    qp_num,
                    length,
                } => {
                    let mut x = IbDescrV1 {
                        kind: PROFILE_QP,
                        qp: IbQpV1 {
                            device,
                            wr_id,
                            opcode,
                            qp_num: qp_num as c_int,
                            length,
                        },
                    };
                    let p = &mut x as *mut IbDescrV1 as *mut c_void;
                    (self.0)(&mut h, NET_EVENT_START, parent, PLUGIN_ID_IB, p);
                }
                EventDescr::Socket { fd, op, length } => {
                    let mut x = SockDescrV1 {
                        kind: PROFILE_SOCKET,
                        sock: SockV1 { fd, op, length },
                    };
                    let p = &mut x as *mut SockDescrV1 as *mut c_void;
                    (self.0)(&mut h, NET_EVENT_START, parent, PLUGIN_ID_SOCK, p);
                }
            }
        }
        h as usize
    }

    fn stop(&self, event: usize) {
        let mut h = event as *mut c_void;
        let null = std::ptr::null_mut();
        // SAFETY: as in start; `h` is the handle NCCL's start wrote.
        unsafe { (self.0)(&mut h, NET_EVENT_STOP, null, 0, null) };
    }
}

/// Whether the latest init handed a profiler callback (tests, logs).
pub fn profiler_registered() -> bool {
    match PROFILER.lock() {
        Ok(g) => g.is_some(),
        Err(e) => e.into_inner().is_some(),
    }
}

/// Global init shared by every version: debug knobs, logger, config, devices.
pub(super) fn init_plugin(logger: ncclDebugLogger_t) -> NetResult<()> {
    plugin::read_debug_knobs();
    maybe_panic("init");
    plugin::init(sink_from(logger))
}

/// v8/v9 init(logger).
pub(super) unsafe extern "C" fn init(logger: ncclDebugLogger_t) -> ncclResult_t {
    guard("init", || init_plugin(logger), || {})
}

/// v10 init(logger, profiler).
pub(super) unsafe extern "C" fn init_v10(
    logger: ncclDebugLogger_t,
    profiler: ncclProfilerCallback_t,
) -> ncclResult_t {
    guard(
        "init",
        || {
            init_plugin(logger)?;
            store_profiler(profiler);
            Ok(())
        },
        || {},
    )
}

pub(super) unsafe extern "C" fn devices(ndev: *mut c_int) -> ncclResult_t {
    guard(
        "devices",
        || {
            maybe_panic("devices");
            if ndev.is_null() {
                return Err(null("devices: ndev"));
            }
            let n = plugin::device_count()?;
            // SAFETY: non-null, points to NCCL's int.
            unsafe { *ndev = n };
            Ok(())
        },
        || {
            if !ndev.is_null() {
                // SAFETY: as above.
                unsafe { *ndev = 0 };
            }
        },
    )
}

/// Properties every version reports, plus what v9+ adds: the version adapters copy these.
pub(super) struct DeviceProps {
    pub p: plugin::Properties,
    pub max_bytes: usize,
    pub rail_plane: (i16, i16),
}

impl DeviceProps {
    pub(super) fn name(&self) -> *mut c_char {
        self.p.name.as_ptr() as *mut c_char
    }

    pub(super) fn pci_path(&self) -> *mut c_char {
        self.p
            .pci_path
            .map_or(std::ptr::null_mut(), |s| s.as_ptr() as *mut c_char)
    }
}

/// getProperties for any version: `write` builds that version's struct from the common values;
/// on failure the struct is zeroed (`T::default()`), so NCCL never reads stale memory.
pub(super) fn get_properties_as<T: Default>(
    dev: c_int,
    props: *mut T,
    write: impl FnOnce(c_int, &DeviceProps) -> T,
) -> ncclResult_t {
    guard(
        "getProperties",
        || {
            maybe_panic("getProperties");
            if props.is_null() {
                return Err(null("getProperties: props"));
            }
            let d = DeviceProps {
                p: plugin::properties(dev)?,
                max_bytes: plugin::MAX_TRANSFER_BYTES,
                rail_plane: plugin::rail_plane(dev)?,
            };
            let out = write(dev, &d);
            // SAFETY: non-null, NCCL's properties struct of this version.
            unsafe { props.write(out) };
            Ok(())
        },
        || {
            if !props.is_null() {
                // SAFETY: as above.
                unsafe { props.write(T::default()) };
            }
        },
    )
}

/// The 128-byte handle NCCL passes to listen/connect.
unsafe fn handle_mut<'a>(handle: *mut c_void) -> NetResult<&'a mut [u8; HANDLE_BYTES]> {
    if handle.is_null() {
        return Err(null("handle"));
    }
    // SAFETY: NCCL hands us NCCL_NET_HANDLE_MAXSIZE (128) writable bytes.
    Ok(unsafe { &mut *(handle as *mut [u8; HANDLE_BYTES]) })
}

/// listen for any version (`ctx`: the v11+ communicator context, if any).
pub(super) fn listen_impl(
    ctx: Option<&CommContext>,
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> ncclResult_t {
    let out = |p: *mut c_void| put(listen_comm, p);
    guard(
        "listen",
        || {
            maybe_panic("listen");
            out(std::ptr::null_mut());
            if listen_comm.is_null() {
                return Err(null("listen: listenComm"));
            }
            // SAFETY: see handle_mut.
            let h = unsafe { handle_mut(handle)? };
            let opts = ConnOptions {
                traffic_class: ctx.and_then(|c| c.traffic_class),
                owner: ctx.map(|c| c.serial),
                pattern: None,
            };
            let comm = plugin::listen_with(dev, h, opts)?;
            let boxed = Box::new(FfiListen {
                tag: LISTEN_TAG,
                comm,
            });
            out(Box::into_raw(boxed) as *mut c_void);
            Ok(())
        },
        || out(std::ptr::null_mut()),
    )
}

/// v8-v10 listen(dev, handle, listenComm).
pub(super) unsafe extern "C" fn listen(
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> ncclResult_t {
    listen_impl(None, dev, handle, listen_comm)
}

/// We never offload to the device, so the device handle output is always NULL.
pub(super) fn clear_dev_handle(p: *mut *mut ncclNetDeviceHandle_v8_t) {
    put(p, std::ptr::null_mut());
}

/// connect for any version: `opts` carries the v10 connect config or the v11+ context's.
pub(super) fn connect_impl(
    opts: ConnOptions,
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    dev_comm: *mut *mut ncclNetDeviceHandle_v8_t,
) -> ncclResult_t {
    let out = |p: *mut c_void| put(send_comm, p);
    guard(
        "connect",
        || {
            maybe_panic("connect");
            clear_dev_handle(dev_comm);
            out(std::ptr::null_mut());
            if send_comm.is_null() {
                return Err(null("connect: sendComm"));
            }
            // SAFETY: see handle_mut.
            let h = unsafe { handle_mut(handle)? };
            if let Some(comm) = plugin::connect_with(dev, h, opts)? {
                let n = comm.max_requests();
                out(FfiSend::into_raw(comm, n, true, 0));
            }
            Ok(())
        },
        || {
            clear_dev_handle(dev_comm);
            out(std::ptr::null_mut())
        },
    )
}

/// v8/v9 connect(dev, handle, sendComm, sendDevComm).
pub(super) unsafe extern "C" fn connect(
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    dev_comm: *mut *mut ncclNetDeviceHandle_v8_t,
) -> ncclResult_t {
    connect_impl(ConnOptions::default(), dev, handle, send_comm, dev_comm)
}

pub(super) unsafe extern "C" fn accept(
    listen_comm: *mut c_void,
    recv_comm: *mut *mut c_void,
    dev_comm: *mut *mut ncclNetDeviceHandle_v8_t,
) -> ncclResult_t {
    let out = |p: *mut c_void| put(recv_comm, p);
    guard(
        "accept",
        || {
            maybe_panic("accept");
            clear_dev_handle(dev_comm);
            out(std::ptr::null_mut());
            if listen_comm.is_null() || recv_comm.is_null() {
                return Err(null("accept: listenComm or recvComm"));
            }
            // SAFETY: non-NULL; a listen comm from our listen() that is not closed (NCCL
            // contract), else refused by its tag.
            let l = &mut unsafe { tagged::<FfiListen>("accept", listen_comm, LISTEN_TAG)? }.comm;
            if let Some(comm) = l.accept()? {
                let n = comm.max_requests();
                let n_flush = if comm.flush_enabled() { n } else { 0 };
                out(FfiRecv::into_raw(comm, n, false, n_flush));
            }
            Ok(())
        },
        || {
            clear_dev_handle(dev_comm);
            out(std::ptr::null_mut())
        },
    )
}

pub(super) unsafe extern "C" fn reg_mr(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    kind: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t {
    let req = RegRequest {
        addr: data as usize,
        len: size,
        kind,
        dmabuf: None,
    };
    reg_impl("regMr", comm, req, mhandle)
}

/// regMrDmaBuf: fd -1 registers the pointer as regMr does (net_ib's ncclIbRegMr is
/// regMrDmaBuf(fd -1), NCCL 2.28.3 src/transport/net_ib.cc).
pub(super) unsafe extern "C" fn reg_mr_dma_buf(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    kind: c_int,
    offset: u64,
    fd: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t {
    let req = RegRequest {
        addr: data as usize,
        len: size,
        kind,
        dmabuf: Some((fd, offset)),
    };
    reg_impl("regMrDmaBuf", comm, req, mhandle)
}

pub(super) unsafe extern "C" fn dereg_mr(_comm: *mut c_void, mhandle: *mut c_void) -> ncclResult_t {
    guard(
        "deregMr",
        || {
            maybe_panic("deregMr");
            if mhandle.is_null() {
                return Err(null("deregMr: mhandle"));
            }
            // SAFETY: mhandle came from our regMr and NCCL deregisters it once.
            drop(unsafe { Box::from_raw(mhandle as *mut MemHandle) });
            Ok(())
        },
        || {},
    )
}

unsafe fn mem_handle<'a>(mh: *mut c_void) -> Option<&'a MemHandle> {
    // SAFETY: non-null mhandles come from our regMr and live until deregMr.
    (!mh.is_null()).then(|| unsafe { &*(mh as *const MemHandle) })
}

pub(super) fn put<T>(out: *mut *mut T, value: *mut T) {
    if !out.is_null() {
        // SAFETY: non-null output pointer from NCCL.
        unsafe { *out = value };
    }
}

/// NCCL's (data, size) as a buffer: NULL data with bytes, or more than MAX_TRANSFER_BYTES (test()
/// reports sizes as C int), is an error.
///
/// # Safety
/// `data` must stay valid for `len` bytes until the request using it completes.
unsafe fn user_buf(entry: &str, data: *mut c_void, len: usize) -> NetResult<UserBuf> {
    if len > plugin::MAX_TRANSFER_BYTES {
        return Err(NetError::invalid_argument(format!(
            "{entry}: size {len} exceeds this plugin's maxP2pBytes/maxCollBytes ({})",
            plugin::MAX_TRANSFER_BYTES
        )));
    }
    if data.is_null() && len > 0 {
        return Err(null(&format!("{entry}: data of {len} bytes")));
    }
    // SAFETY: per this function's contract.
    Ok(unsafe { UserBuf::new(data as *mut u8, len) })
}

/// A C int size (v8): negative is an error.
pub(super) fn int_size(entry: &str, size: c_int) -> NetResult<usize> {
    usize::try_from(size)
        .map_err(|_| NetError::invalid_argument(format!("{entry}: negative size {size}")))
}

/// The request pointer NCCL receives for `slot`: the address of its cell.
fn cell_ptr(cells: &mut [ReqCell], slot: u32) -> *mut c_void {
    &mut cells[slot as usize] as *mut ReqCell as *mut c_void
}

/// isend for any version, size already widened (v8's int) or as given (v9+ size_t).
pub(super) fn isend_impl(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: impl FnOnce() -> NetResult<usize>,
    tag: c_int,
    mhandle: *mut c_void,
    phandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    guard(
        "isend",
        || {
            maybe_panic("isend");
            put(request, std::ptr::null_mut());
            if send_comm.is_null() || request.is_null() {
                return Err(null("isend: sendComm or request"));
            }
            // SAFETY: NCCL keeps `data` valid until test() says done.
            let buf = unsafe { user_buf("isend", data, size()?)? };
            // SAFETY: non-NULL; a send comm from our connect, else refused by its tag.
            let s = unsafe { tagged::<FfiSend>("isend", send_comm, SEND_TAG)? };
            // SAFETY: see mem_handle.
            let mh = unsafe { mem_handle(mhandle) };
            // NCCL's profiler handle (v10+): an opaque address the events of this send hang under.
            s.comm.set_event_parent(phandle as usize);
            if let Some(slot) = s.comm.isend(buf, tag, mh)? {
                put(request, cell_ptr(&mut s.cells, slot));
            }
            Ok(())
        },
        || put(request, std::ptr::null_mut()),
    )
}

/// The sizes array of an irecv: C int in v8, size_t in v9+.
#[derive(Clone, Copy)]
pub(super) enum RecvSizesIn {
    Int(*const c_int),
    Size(*const usize),
}

impl RecvSizesIn {
    fn is_null(self) -> bool {
        match self {
            RecvSizesIn::Int(p) => p.is_null(),
            RecvSizesIn::Size(p) => p.is_null(),
        }
    }

    /// # Safety
    /// The array has more than `i` entries.
    unsafe fn get(self, i: usize) -> NetResult<usize> {
        // SAFETY: per this function's contract.
        match self {
            RecvSizesIn::Int(p) => int_size("irecv", unsafe { *p.add(i) }),
            RecvSizesIn::Size(p) => Ok(unsafe { *p.add(i) }),
        }
    }
}

/// irecv for any version. `*request` is always overwritten, so NCCL v9+'s
/// NCCL_NET_OPTIONAL_RECV_COMPLETION hint (`*request == 0x1` on entry) is accepted and ignored:
/// every receive completes through test() as usual.
pub(super) fn irecv_impl(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: RecvSizesIn,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    guard(
        "irecv",
        || {
            maybe_panic("irecv");
            put(request, std::ptr::null_mut());
            if recv_comm.is_null()
                || request.is_null()
                || data.is_null()
                || sizes.is_null()
                || tags.is_null()
            {
                return Err(null("irecv: recvComm, request, data, sizes or tags"));
            }
            let count = usize::try_from(n).unwrap_or(0);
            if count == 0 || count > MAX_RECVS {
                return Err(NetError::invalid_argument(format!(
                    "irecv with n = {n}: accepted 1..={MAX_RECVS} (this plugin advertises maxRecvs = {MAX_RECVS})"
                )));
            }
            let mut bufs = [(UserBuf::empty(), 0); MAX_RECVS];
            let mut mhs: [Option<&MemHandle>; MAX_RECVS] = [None; MAX_RECVS];
            for i in 0..count {
                // SAFETY: data, sizes and tags have n entries, and mhandles too when non-NULL
                // (NCCL contract); 0 <= i < n.
                let (ptr, size, tag) = unsafe { (*data.add(i), sizes.get(i)?, *tags.add(i)) };
                // SAFETY: NCCL keeps the receive buffers valid until test() says done.
                bufs[i] = (unsafe { user_buf("irecv", ptr, size)? }, tag);
                if !mhandles.is_null() {
                    // SAFETY: as above; see mem_handle.
                    mhs[i] = unsafe { mem_handle(*mhandles.add(i)) };
                }
            }
            // SAFETY: non-NULL; a receive comm from our accept, else refused by its tag.
            let r = unsafe { tagged::<FfiRecv>("irecv", recv_comm, RECV_TAG)? };
            if let Some(slot) = r.comm.irecv(&bufs[..count], &mhs[..count])? {
                r.cells[slot as usize].n = count as u32;
                put(request, cell_ptr(&mut r.cells, slot));
            }
            Ok(())
        },
        || put(request, std::ptr::null_mut()),
    )
}

/// iflush: NULL request (nothing to wait for) unless the comm has a flush QP and the last
/// non-empty buffer is GPU memory; then one RDMA READ that test() completes (net_ib ncclIbIflush).
pub(super) unsafe extern "C" fn iflush(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    guard(
        "iflush",
        || {
            put(request, std::ptr::null_mut());
            maybe_panic("iflush");
            if recv_comm.is_null() || request.is_null() {
                return Err(null("iflush: recvComm or request"));
            }
            // SAFETY: non-NULL; a receive comm from our accept, else refused by its tag.
            let r = unsafe { tagged::<FfiRecv>("iflush", recv_comm, RECV_TAG)? };
            if !r.comm.flush_enabled() {
                return Ok(());
            }
            let count = usize::try_from(n).unwrap_or(0);
            if count == 0 || count > MAX_RECVS {
                return Err(NetError::invalid_argument(format!(
                    "iflush with n = {n}: accepted 1..={MAX_RECVS}"
                )));
            }
            if data.is_null() || sizes.is_null() || mhandles.is_null() {
                return Err(null("iflush: data, sizes or mhandles"));
            }
            let mut bufs: [(usize, c_int, Option<&MemHandle>); MAX_RECVS] =
                [(0, 0, None); MAX_RECVS];
            for (i, b) in bufs.iter_mut().enumerate().take(count) {
                // SAFETY: the three arrays have n entries (NCCL contract); see mem_handle.
                *b = unsafe {
                    (
                        *data.add(i) as usize,
                        *sizes.add(i),
                        mem_handle(*mhandles.add(i)),
                    )
                };
            }
            if let Some(slot) = r.comm.iflush(&bufs[..count])? {
                put(request, cell_ptr(&mut r.flush_cells, slot));
            }
            Ok(())
        },
        || put(request, std::ptr::null_mut()),
    )
}

pub(super) unsafe extern "C" fn test(
    request: *mut c_void,
    done: *mut c_int,
    sizes: *mut c_int,
) -> ncclResult_t {
    guard(
        "test",
        || {
            // done is written before anything can panic or fail: NCCL reads it on every return.
            if !done.is_null() {
                // SAFETY: non-null output pointer from NCCL.
                unsafe { *done = 0 };
            }
            maybe_panic("test");
            if request.is_null() || done.is_null() {
                return Err(null("test: request or done"));
            }
            // SAFETY: non-NULL; a cell of a live comm (NCCL never tests after done or close),
            // else refused by its tag.
            let cell = &*unsafe { tagged::<ReqCell>("test", request, REQ_TAG)? };
            let owner_tag = match cell.kind {
                CellKind::Send => SEND_TAG,
                CellKind::Recv | CellKind::Flush => RECV_TAG,
            };
            // SAFETY: a live cell's owner is the live comm that made it (cleared tags at close).
            if cell.owner.is_null() || unsafe { *(cell.owner as *const u64) } != owner_tag {
                return Err(NetError::invalid_argument(format!(
                    "test: request {request:p} belongs to a comm that is closed"
                )));
            }
            let clamp = |size: usize| size.min(c_int::MAX as usize) as c_int;
            if cell.kind == CellKind::Flush {
                // SAFETY: flush cells are owned by an FfiRecv.
                let r = unsafe { &mut *(cell.owner as *mut FfiRecv) };
                if r.comm.test_flush(cell.slot)? {
                    // SAFETY: non-null output from NCCL (sizes is NULL for flushes: untouched).
                    unsafe { *done = 1 };
                }
            } else if cell.kind == CellKind::Send {
                // SAFETY: send cells are owned by an FfiSend.
                let got = unsafe { &mut *(cell.owner as *mut FfiSend) }
                    .comm
                    .test(cell.slot)?;
                if let Some(size) = got {
                    // SAFETY: non-null outputs from NCCL; sizes may be NULL, else one int.
                    unsafe {
                        *done = 1;
                        if !sizes.is_null() {
                            *sizes = clamp(size);
                        }
                    }
                }
            } else {
                // SAFETY: receive cells are owned by an FfiRecv.
                let got = unsafe { &mut *(cell.owner as *mut FfiRecv) }
                    .comm
                    .test_sizes(cell.slot)?;
                if let Some(got) = got {
                    if got.len() != cell.n as usize {
                        return Err(NetError::internal(format!(
                            "test: receive request {} of {} buffers completed with {} sizes",
                            cell.slot,
                            cell.n,
                            got.len()
                        )));
                    }
                    // SAFETY: non-null outputs from NCCL; sizes may be NULL, else it has the n
                    // entries of the irecv that made this request.
                    unsafe {
                        *done = 1;
                        if !sizes.is_null() {
                            for (i, size) in got.iter().enumerate() {
                                *sizes.add(i) = clamp(*size);
                            }
                        }
                    }
                }
            }
            Ok(())
        },
        || {},
    )
}

/// Frees a comm box NCCL hands back to a close entry point (NULL is a no-op); a pointer whose
/// tag is not `want` is refused and left alone.
fn close_box<T: Untag>(entry: &str, comm: *mut c_void, want: u64) -> ncclResult_t {
    guard(
        entry,
        || {
            if !comm.is_null() {
                // SAFETY: non-NULL; from the matching listen/connect/accept, else refused by its
                // tag. NCCL closes each comm once.
                let c = unsafe { tagged::<T>(entry, comm, want)? };
                // Tags cleared first: a request or comm pointer used after the close is then
                // refused as long as its memory has not been reused (after that: undefined).
                c.untag();
                // SAFETY: the box was made by Box::into_raw in listen/connect/accept.
                drop(unsafe { Box::from_raw(comm as *mut T) });
            }
            // After the comm is freed: a forced panic here leaks nothing.
            maybe_panic(entry);
            Ok(())
        },
        || {},
    )
}

/// Clears the tags of a box about to be freed (its own and its request cells').
trait Untag {
    fn untag(&mut self);
}

impl<C> Untag for FfiComm<C> {
    fn untag(&mut self) {
        self.tag = 0;
        for c in self.cells.iter_mut().chain(self.flush_cells.iter_mut()) {
            c.tag = 0;
        }
    }
}

impl Untag for FfiListen {
    fn untag(&mut self) {
        self.tag = 0;
    }
}

pub(super) unsafe extern "C" fn close_send(send_comm: *mut c_void) -> ncclResult_t {
    close_box::<FfiSend>("closeSend", send_comm, SEND_TAG)
}

pub(super) unsafe extern "C" fn close_recv(recv_comm: *mut c_void) -> ncclResult_t {
    close_box::<FfiRecv>("closeRecv", recv_comm, RECV_TAG)
}

pub(super) unsafe extern "C" fn close_listen(listen_comm: *mut c_void) -> ncclResult_t {
    close_box::<FfiListen>("closeListen", listen_comm, LISTEN_TAG)
}

// ---- Communicator contexts (v11+: init/finalize per communicator, listen/connect take them) ----

/// The context NCCL v11+ passes to listen/connect/setNetAttr/finalize (NULL: none).
///
/// # Safety
/// A non-NULL `ctx` came from `init_ctx` and was not finalized.
unsafe fn context<'a>(ctx: *mut c_void) -> Option<&'a CommContext> {
    // SAFETY: per this function's contract.
    (!ctx.is_null()).then(|| unsafe { &*(ctx as *const CommContext) })
}

/// v11+ init(&ctx, commId, config, logger, profiler): the first live context initializes the
/// plugin (config, logging, devices), every call makes one context for its communicator.
pub(super) unsafe extern "C" fn init_ctx(
    ctx: *mut *mut c_void,
    comm_id: u64,
    config: *mut super::sys::ncclNetCommConfig_v11_t,
    logger: ncclDebugLogger_t,
    profiler: ncclProfilerCallback_t,
) -> ncclResult_t {
    guard(
        "init",
        || {
            put(ctx, std::ptr::null_mut());
            if ctx.is_null() {
                return Err(null("init: ctx"));
            }
            if plugin::state::live_contexts() == 0 || plugin::state::get().is_err() {
                init_plugin(logger)?;
            } else {
                maybe_panic("init");
            }
            store_profiler(profiler);
            // SAFETY: NULL or NCCL's config for this communicator.
            let tc = (!config.is_null())
                .then(|| unsafe { (*config).trafficClass })
                .and_then(plugin::traffic_class_from_nccl);
            let c = CommContext::new(comm_id, tc);
            tracing::info!(target: "dqplb::init", "communicator {comm_id:#x}: context {} (traffic class {}), {} live",
                c.serial, tc.map_or("undefined".to_string(), |t| t.to_string()), plugin::state::live_contexts());
            put(ctx, Box::into_raw(Box::new(c)) as *mut c_void);
            Ok(())
        },
        || put(ctx, std::ptr::null_mut()),
    )
}

/// v11+ finalize(ctx): frees the communicator's context and the connects it left unfinished;
/// the last one also removes the process's stats files.
pub(super) unsafe extern "C" fn finalize(ctx: *mut c_void) -> ncclResult_t {
    guard(
        "finalize",
        || {
            maybe_panic("finalize");
            if ctx.is_null() {
                return Err(null("finalize: ctx"));
            }
            // SAFETY: ctx came from init_ctx; NCCL finalizes each context once.
            let c = unsafe { Box::from_raw(ctx as *mut CommContext) };
            let dropped = plugin::drop_connects_of(c.serial);
            tracing::info!(target: "dqplb::init", "communicator {:#x}: context {} finalized ({dropped} unfinished connects dropped)",
                c.comm_id, c.serial);
            drop(c);
            // The process's last communicator is gone: its stats files go too, even when NCCL
            // (or a leak) left send comms open, so a clean exit leaves none behind.
            if plugin::state::live_contexts() == 0 {
                let n = plugin::telemetry::remove_files();
                if n > 0 {
                    tracing::info!(target: "dqplb::stats", "last communicator finalized: {n} stats file(s) removed");
                }
            }
            Ok(())
        },
        || {},
    )
}

/// v11+ setNetAttr(ctx, attr): stores the communication-pattern hints in the context; the
/// pattern they describe picks the engine route of the context's next isends.
pub(super) unsafe extern "C" fn set_net_attr(
    ctx: *mut c_void,
    attr: *mut super::sys::ncclNetAttr_v11_t,
) -> ncclResult_t {
    guard(
        "setNetAttr",
        || {
            maybe_panic("setNetAttr");
            // SAFETY: see context.
            let Some(c) = (unsafe { context(ctx) }) else {
                return Err(null("setNetAttr: ctx"));
            };
            if attr.is_null() {
                return Err(null("setNetAttr: netAttr"));
            }
            // SAFETY: non-null, NCCL's attribute struct.
            let a = unsafe { *attr };
            let dir = |d: super::sys::ncclNetCommAttr_v11_t| plugin::CommAttr {
                max_concurrent_peers: d.maxConcurrentPeers,
                min_concurrent_peers: d.minConcurrentPeers,
                max_flows_per_peer: d.maxFlowsPerPeer,
                min_flows_per_peer: d.minFlowsPerPeer,
            };
            let na = plugin::NetAttr {
                send: dir(a.sendCommAttr),
                recv: dir(a.recvCommAttr),
                op: a.op,
                algo: a.algo,
                proto: a.proto,
            };
            plugin::set_net_attr(c, na);
            Ok(())
        },
        || {},
    )
}

/// v11+ listen(ctx, dev, handle, listenComm).
pub(super) unsafe extern "C" fn listen_ctx(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> ncclResult_t {
    // SAFETY: see context.
    listen_impl(unsafe { context(ctx) }, dev, handle, listen_comm)
}

/// v11+ connect(ctx, dev, handle, sendComm, sendDevComm): the context's trafficClass applies.
pub(super) unsafe extern "C" fn connect_ctx(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    dev_comm: *mut *mut ncclNetDeviceHandle_v8_t,
) -> ncclResult_t {
    // SAFETY: see context.
    let c = unsafe { context(ctx) };
    let opts = ConnOptions {
        traffic_class: c.and_then(|c| c.traffic_class),
        owner: c.map(|c| c.serial),
        pattern: c.map(|c| c.pattern.clone()),
    };
    connect_impl(opts, dev, handle, send_comm, dev_comm)
}

/// v9+ isend(size_t size).
pub(super) unsafe extern "C" fn isend_v9(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    isend_impl(
        send_comm,
        data,
        || Ok(size),
        tag,
        mhandle,
        std::ptr::null_mut(),
        request,
    )
}

/// v10+ isend(size_t size, phandle): each segment's profiler event hangs under `phandle`.
pub(super) unsafe extern "C" fn isend_v10(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    phandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    isend_impl(send_comm, data, || Ok(size), tag, mhandle, phandle, request)
}

/// v9+ irecv(size_t* sizes).
pub(super) unsafe extern "C" fn irecv_v9(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    let sizes = RecvSizesIn::Size(sizes);
    irecv_impl(recv_comm, n, data, sizes, tags, mhandles, request)
}

/// v10+ irecv(size_t* sizes, phandles): the profiler handles are ignored.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn irecv_v10(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    _phandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    let sizes = RecvSizesIn::Size(sizes);
    irecv_impl(recv_comm, n, data, sizes, tags, mhandles, request)
}
