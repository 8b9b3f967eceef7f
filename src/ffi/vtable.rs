//! The exported `ncclNetPlugin_v8` vtable and its extern "C" entry points: each checks its pointers,
//! converts C arguments into safe calls on crate::plugin, and always writes its output pointers.

use std::ffi::{c_char, c_int, c_ulong, c_void, CString};
use std::sync::Arc;

use super::guard::guard;
use super::sys::{
    ncclDebugLogger_t, ncclNetDeviceHandle_v8_t, ncclNetProperties_v8_t, ncclNet_v8_t, ncclResult_t,
};
use crate::plugin::{self, log, ListenComm, MemHandle, RecvComm, SendComm};
use crate::transport::slots::MAX_RECVS;
use crate::transport::tcp::HANDLE_BYTES;
use crate::transport::{NetError, NetResult, UserBuf};

/// The vtable as a `Sync` static (it only holds function pointers and a static string).
#[repr(transparent)]
pub struct PluginVtable(pub ncclNet_v8_t);

// SAFETY: the struct is immutable and its pointers refer to 'static data and functions.
unsafe impl Sync for PluginVtable {}

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v8: PluginVtable = PluginVtable(ncclNet_v8_t {
    name: c"DQPLB".as_ptr(),
    init: Some(init),
    devices: Some(devices),
    getProperties: Some(get_properties),
    listen: Some(listen),
    connect: Some(connect),
    accept: Some(accept),
    regMr: Some(reg_mr),
    regMrDmaBuf: Some(reg_mr_dma_buf),
    deregMr: Some(dereg_mr),
    isend: Some(isend),
    irecv: Some(irecv),
    iflush: Some(iflush),
    test: Some(test),
    closeSend: Some(close_send),
    closeRecv: Some(close_recv),
    closeListen: Some(close_listen),
    // NULL as in NCCL's own net_ib and net_socket: net.cc's recvProxyProgress calls
    // irecvConsumed after every consumed receive whenever the pointer is set (v2.20.3 through
    // v2.30.7), and getDeviceMr is only for device-offload (non-HOST) plugins.
    getDeviceMr: None,
    irecvConsumed: None,
});

/// Request pointers NCCL holds are addresses of these cells, owned by their comm.
#[repr(C)]
struct ReqCell {
    owner: *mut c_void,
    is_send: bool,
    slot: u32,
    /// Buffers of the receive request now in this cell (test() writes that many sizes).
    n: u32,
}

/// A comm as NCCL holds it: the plugin's comm plus the request cells that point back at it.
struct FfiComm<C> {
    comm: C,
    cells: Box<[ReqCell]>,
}

type FfiSend = FfiComm<SendComm>;
type FfiRecv = FfiComm<RecvComm>;

impl<C> FfiComm<C> {
    /// Boxes `comm` with `n` request cells and returns the pointer NCCL will hold.
    fn into_raw(comm: C, n: usize, is_send: bool) -> *mut c_void {
        let raw = Box::into_raw(Box::new(FfiComm {
            comm,
            cells: cells(n, is_send),
        }));
        // SAFETY: raw is the live box just created; each cell records its owner for test().
        unsafe {
            (*raw)
                .cells
                .iter_mut()
                .for_each(|c| c.owner = raw as *mut c_void)
        };
        raw as *mut c_void
    }
}

fn cells(n: usize, is_send: bool) -> Box<[ReqCell]> {
    (0..n)
        .map(|i| ReqCell {
            owner: std::ptr::null_mut(),
            is_send,
            slot: i as u32,
            n: 1,
        })
        .collect()
}

fn null(what: &str) -> NetError {
    NetError::invalid_argument(format!("{what} is NULL"))
}

/// Debug hook: NCCL_DQPLB_DEBUG_PANIC=<entry> makes that entry point panic (tests the guard).
fn maybe_panic(entry: &str) {
    if let Some(target) = plugin::debug_panic_entry() {
        if target == entry {
            panic!("NCCL_DQPLB_DEBUG_PANIC={entry}");
        }
    }
}

fn sink_from(logger: ncclDebugLogger_t) -> Option<log::Sink> {
    let f = logger?;
    Some(Arc::new(
        move |level: log::NcclLevel, flags: u64, msg: &str| {
            let Ok(text) = CString::new(msg.replace('\0', " ")) else {
                return;
            };
            // SAFETY: NCCL's logger takes a printf format; we pass "%s" and one NUL-terminated string.
            unsafe {
                f(
                    level as _,
                    flags as c_ulong,
                    c"dqplb".as_ptr(),
                    0 as c_int,
                    c"%s".as_ptr(),
                    text.as_ptr(),
                );
            }
        },
    ))
}

unsafe extern "C" fn init(logger: ncclDebugLogger_t) -> ncclResult_t {
    guard(
        "init",
        || {
            plugin::read_debug_knobs();
            maybe_panic("init");
            plugin::init(sink_from(logger))
        },
        || {},
    )
}

unsafe extern "C" fn devices(ndev: *mut c_int) -> ncclResult_t {
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

unsafe extern "C" fn get_properties(
    dev: c_int,
    props: *mut ncclNetProperties_v8_t,
) -> ncclResult_t {
    guard(
        "getProperties",
        || {
            maybe_panic("getProperties");
            if props.is_null() {
                return Err(null("getProperties: props"));
            }
            let p = plugin::properties(dev)?;
            let out = ncclNetProperties_v8_t {
                name: p.name.as_ptr() as *mut c_char,
                pciPath: p
                    .pci_path
                    .map_or(std::ptr::null_mut(), |s| s.as_ptr() as *mut c_char),
                guid: p.guid,
                ptrSupport: p.ptr_support,
                regIsGlobal: p.reg_is_global,
                speed: p.speed_mbps,
                port: p.port,
                latency: p.latency_us,
                maxComms: p.max_comms,
                maxRecvs: p.max_recvs,
                netDeviceType: 0,
                netDeviceVersion: 0,
            };
            // SAFETY: non-null, NCCL's properties struct.
            unsafe { props.write(out) };
            Ok(())
        },
        || {},
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

unsafe extern "C" fn listen(
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> ncclResult_t {
    let out = |p: *mut c_void| put(listen_comm, p);
    guard(
        "listen",
        || {
            maybe_panic("listen");
            if listen_comm.is_null() {
                return Err(null("listen: listenComm"));
            }
            // SAFETY: see handle_mut.
            let h = unsafe { handle_mut(handle)? };
            let comm = plugin::listen(dev, h)?;
            out(Box::into_raw(Box::new(comm)) as *mut c_void);
            Ok(())
        },
        || out(std::ptr::null_mut()),
    )
}

/// We never offload to the device, so the device handle output is always NULL.
fn clear_dev_handle(p: *mut *mut ncclNetDeviceHandle_v8_t) {
    put(p, std::ptr::null_mut());
}

unsafe extern "C" fn connect(
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
            if let Some(comm) = plugin::connect(dev, h)? {
                let n = comm.max_requests();
                out(FfiSend::into_raw(comm, n, true));
            }
            Ok(())
        },
        || out(std::ptr::null_mut()),
    )
}

unsafe extern "C" fn accept(
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
            // SAFETY: listen_comm came from our listen() and is not closed (NCCL contract).
            let l = unsafe { &mut *(listen_comm as *mut ListenComm) };
            if let Some(comm) = l.accept()? {
                let n = comm.max_requests();
                out(FfiRecv::into_raw(comm, n, false));
            }
            Ok(())
        },
        || out(std::ptr::null_mut()),
    )
}

unsafe extern "C" fn reg_mr(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    kind: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t {
    let out = |p: *mut c_void| put(mhandle, p);
    guard(
        "regMr",
        || {
            maybe_panic("regMr");
            if comm.is_null() || mhandle.is_null() {
                return Err(null("regMr: comm or mhandle"));
            }
            let mh = plugin::reg_mr(data as usize, size, kind)?;
            out(Box::into_raw(Box::new(mh)) as *mut c_void);
            Ok(())
        },
        || out(std::ptr::null_mut()),
    )
}

unsafe extern "C" fn reg_mr_dma_buf(
    comm: *mut c_void,
    _data: *mut c_void,
    _size: usize,
    kind: c_int,
    _offset: u64,
    fd: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t {
    let _ = comm;
    guard(
        "regMrDmaBuf",
        || {
            Err(NetError::invalid_argument(format!(
                "regMrDmaBuf(type {kind}, fd {fd}): DMA-BUF registration needs an RDMA device with GPUDirect; these devices advertise host memory only"
            )))
        },
        || {
            if !mhandle.is_null() {
                // SAFETY: non-null output pointer from NCCL.
                unsafe { *mhandle = std::ptr::null_mut() };
            }
        },
    )
}

unsafe extern "C" fn dereg_mr(_comm: *mut c_void, mhandle: *mut c_void) -> ncclResult_t {
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

fn put<T>(out: *mut *mut T, value: *mut T) {
    if !out.is_null() {
        // SAFETY: non-null output pointer from NCCL.
        unsafe { *out = value };
    }
}

/// NCCL's (data, int size) as a buffer: a negative size, or NULL data with bytes, is an error.
///
/// # Safety
/// `data` must stay valid for `size` bytes until the request using it completes.
unsafe fn user_buf(entry: &str, data: *mut c_void, size: c_int) -> NetResult<UserBuf> {
    let len = usize::try_from(size)
        .map_err(|_| NetError::invalid_argument(format!("{entry}: negative size {size}")))?;
    if data.is_null() && len > 0 {
        return Err(null(&format!("{entry}: data of {len} bytes")));
    }
    // SAFETY: per this function's contract.
    Ok(unsafe { UserBuf::new(data as *mut u8, len) })
}

/// The request pointer NCCL receives for `slot`: the address of its cell.
fn cell_ptr(cells: &mut [ReqCell], slot: u32) -> *mut c_void {
    &mut cells[slot as usize] as *mut ReqCell as *mut c_void
}

unsafe extern "C" fn isend(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    tag: c_int,
    mhandle: *mut c_void,
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
            let buf = unsafe { user_buf("isend", data, size)? };
            // SAFETY: send_comm came from our connect.
            let s = unsafe { &mut *(send_comm as *mut FfiSend) };
            // SAFETY: see mem_handle.
            let mh = unsafe { mem_handle(mhandle) };
            if let Some(slot) = s.comm.isend(buf, tag, mh)? {
                put(request, cell_ptr(&mut s.cells, slot));
            }
            Ok(())
        },
        || put(request, std::ptr::null_mut()),
    )
}

unsafe extern "C" fn irecv(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
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
                let (ptr, size, tag) = unsafe { (*data.add(i), *sizes.add(i), *tags.add(i)) };
                // SAFETY: NCCL keeps the receive buffers valid until test() says done.
                bufs[i] = (unsafe { user_buf("irecv", ptr, size)? }, tag);
                if !mhandles.is_null() {
                    // SAFETY: as above; see mem_handle.
                    mhs[i] = unsafe { mem_handle(*mhandles.add(i)) };
                }
            }
            // SAFETY: recv_comm came from our accept.
            let r = unsafe { &mut *(recv_comm as *mut FfiRecv) };
            if let Some(slot) = r.comm.irecv(&bufs[..count], &mhs[..count])? {
                r.cells[slot as usize].n = count as u32;
                put(request, cell_ptr(&mut r.cells, slot));
            }
            Ok(())
        },
        || put(request, std::ptr::null_mut()),
    )
}

unsafe extern "C" fn iflush(
    recv_comm: *mut c_void,
    _n: c_int,
    _data: *mut *mut c_void,
    _sizes: *mut c_int,
    _mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    guard(
        "iflush",
        || {
            // Host memory needs no flush: a NULL request tells NCCL there is nothing to wait for.
            put(request, std::ptr::null_mut());
            if recv_comm.is_null() || request.is_null() {
                return Err(null("iflush: recvComm or request"));
            }
            Ok(())
        },
        || put(request, std::ptr::null_mut()),
    )
}

unsafe extern "C" fn test(
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
            // SAFETY: request is a cell of a live comm (NCCL never tests after done or close).
            let cell = unsafe { &*(request as *const ReqCell) };
            let clamp = |size: usize| size.min(c_int::MAX as usize) as c_int;
            if cell.is_send {
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

/// Frees a comm box NCCL hands back to a close entry point (NULL is a no-op).
fn close_box<T>(entry: &str, comm: *mut c_void) -> ncclResult_t {
    guard(
        entry,
        || {
            if !comm.is_null() {
                // SAFETY: `comm` came from the matching listen/connect/accept as a Box<T>, and NCCL
                // closes each comm once.
                drop(unsafe { Box::from_raw(comm as *mut T) });
            }
            Ok(())
        },
        || {},
    )
}

unsafe extern "C" fn close_send(send_comm: *mut c_void) -> ncclResult_t {
    close_box::<FfiSend>("closeSend", send_comm)
}

unsafe extern "C" fn close_recv(recv_comm: *mut c_void) -> ncclResult_t {
    close_box::<FfiRecv>("closeRecv", recv_comm)
}

unsafe extern "C" fn close_listen(listen_comm: *mut c_void) -> ncclResult_t {
    close_box::<ListenComm>("closeListen", listen_comm)
}
