//! `ncclNetPlugin_v9` (looked for first by NCCL 2.24/2.25): size_t sizes for isend/irecv,
//! properties gain forceFlush, vProps and maxP2pBytes/maxCollBytes, irecv may get the
//! NCCL_NET_OPTIONAL_RECV_COMPLETION hint (ignored: *request is always overwritten),
//! makeVDevice is NULL (no virtual NICs).

use std::ffi::c_int;

use super::common::*;
use super::sys::{ncclNetProperties_v9_t, ncclNetVDeviceProps_v9_t, ncclNet_v9_t, ncclResult_t};

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v9: Vtable<ncclNet_v9_t> = Vtable(ncclNet_v9_t {
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
    isend: Some(isend_v9),
    irecv: Some(irecv_v9),
    iflush: Some(iflush),
    test: Some(test),
    closeSend: Some(close_send),
    closeRecv: Some(close_recv),
    closeListen: Some(close_listen),
    getDeviceMr: None,
    irecvConsumed: None,
    makeVDevice: None,
});

/// v9 and v10 share this struct (ncclNetProperties_v10_t is the same type).
pub(super) unsafe extern "C" fn get_properties(
    dev: c_int,
    props: *mut ncclNetProperties_v9_t,
) -> ncclResult_t {
    get_properties_as(dev, props, |dev, d| ncclNetProperties_v9_t {
        name: d.name(),
        pciPath: d.pci_path(),
        guid: d.p.guid,
        ptrSupport: d.p.ptr_support,
        regIsGlobal: d.p.reg_is_global,
        forceFlush: 0,
        speed: d.p.speed_mbps,
        port: d.p.port,
        latency: d.p.latency_us,
        maxComms: d.p.max_comms,
        maxRecvs: d.p.max_recvs,
        netDeviceType: 0,
        netDeviceVersion: 0,
        vProps: ncclNetVDeviceProps_v9_t {
            ndevs: 1,
            devs: [dev, 0, 0, 0],
        },
        maxP2pBytes: d.max_bytes,
        maxCollBytes: d.max_bytes,
    })
}
