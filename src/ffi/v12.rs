//! `ncclNetPlugin_v12` (looked for first by NCCL 2.30): v11 plus railId/planeId in the
//! properties (from NCCL_IB_HCA; -1 when unknown) and up to 8 devices per virtual NIC (we report
//! one: makeVDevice is NULL).

use std::ffi::c_int;

use super::common::*;
use super::sys::{ncclNetProperties_v12_t, ncclNetVDeviceProps_v12_t, ncclNet_v12_t, ncclResult_t};

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v12: Vtable<ncclNet_v12_t> = Vtable(ncclNet_v12_t {
    name: NAME,
    init: Some(init_ctx),
    devices: Some(devices),
    getProperties: Some(get_properties),
    listen: Some(listen_ctx),
    connect: Some(connect_ctx),
    accept: Some(accept),
    regMr: Some(reg_mr),
    regMrDmaBuf: Some(reg_mr_dma_buf),
    deregMr: Some(dereg_mr),
    isend: Some(isend_v10),
    irecv: Some(irecv_v10),
    iflush: Some(iflush),
    test: Some(test),
    closeSend: Some(close_send),
    closeRecv: Some(close_recv),
    closeListen: Some(close_listen),
    getDeviceMr: None,
    irecvConsumed: None,
    makeVDevice: None,
    finalize: Some(finalize),
    setNetAttr: Some(set_net_attr),
});

unsafe extern "C" fn get_properties(
    dev: c_int,
    props: *mut ncclNetProperties_v12_t,
) -> ncclResult_t {
    get_properties_as(dev, props, |dev, d| ncclNetProperties_v12_t {
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
        vProps: ncclNetVDeviceProps_v12_t {
            ndevs: 1,
            devs: [dev, 0, 0, 0, 0, 0, 0, 0],
        },
        maxP2pBytes: d.max_bytes,
        maxCollBytes: d.max_bytes,
        maxMultiRequestSize: 1,
        railId: d.rail_plane.0,
        planeId: d.rail_plane.1,
    })
}
