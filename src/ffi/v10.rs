//! `ncclNetPlugin_v10` (looked for first by NCCL 2.26/2.27): init(logger, profiler) — the
//! callback is stored, no events are emitted; connect(dev, config, ...) with the connection's
//! trafficClass (TCP IP_TOS/IPV6_TCLASS, verbs data-QP GRH traffic class; -1 = defaults);
//! isend/irecv gain profiler handles (ignored). Properties are v9's.

use std::ffi::{c_int, c_void};

use super::common::*;
use super::sys::{ncclNetCommConfig_v10_t, ncclNetDeviceHandle_v10_t, ncclNet_v10_t, ncclResult_t};
use crate::plugin::{self, ConnOptions};

#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v10: Vtable<ncclNet_v10_t> = Vtable(ncclNet_v10_t {
    name: NAME,
    init: Some(init_v10),
    devices: Some(devices),
    getProperties: Some(super::v9::get_properties),
    listen: Some(listen),
    connect: Some(connect_v10),
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
});

unsafe extern "C" fn connect_v10(
    dev: c_int,
    config: *mut ncclNetCommConfig_v10_t,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    dev_comm: *mut *mut ncclNetDeviceHandle_v10_t,
) -> ncclResult_t {
    // SAFETY: NULL or NCCL's config for this connection (read once, before the guard: a plain
    // int load).
    let tc = (!config.is_null()).then(|| unsafe { (*config).trafficClass });
    let opts = ConnOptions {
        traffic_class: tc.and_then(plugin::traffic_class_from_nccl),
        owner: None,
        pattern: None,
    };
    connect_impl(opts, dev, handle, send_comm, dev_comm)
}
