//! `ncclNetPlugin_v8` (NCCL 2.20-2.23 look for it first; every later NCCL still loads it through
//! its compat shim): int sizes, init(logger), no per-communicator context.

use std::ffi::{c_int, c_void};

use super::common::*;
use super::sys::{ncclNetProperties_v8_t, ncclNet_v8_t, ncclResult_t};

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v8: Vtable<ncclNet_v8_t> = Vtable(ncclNet_v8_t {
    name: NAME,
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

unsafe extern "C" fn get_properties(
    dev: c_int,
    props: *mut ncclNetProperties_v8_t,
) -> ncclResult_t {
    get_properties_as(dev, props, |_, d| ncclNetProperties_v8_t {
        name: d.name(),
        pciPath: d.pci_path(),
        guid: d.p.guid,
        ptrSupport: d.p.ptr_support,
        regIsGlobal: d.p.reg_is_global,
        speed: d.p.speed_mbps,
        port: d.p.port,
        latency: d.p.latency_us,
        maxComms: d.p.max_comms,
        maxRecvs: d.p.max_recvs,
        netDeviceType: 0,
        netDeviceVersion: 0,
    })
}

unsafe extern "C" fn isend(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    isend_impl(
        send_comm,
        data,
        || int_size("isend", size),
        tag,
        mhandle,
        std::ptr::null_mut(),
        request,
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
    let sizes = RecvSizesIn::Int(sizes);
    irecv_impl(recv_comm, n, data, sizes, tags, mhandles, request)
}
