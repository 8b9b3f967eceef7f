//! Pins the bindgen-generated NCCL v8 types to NCCL's ABI: sizes, field offsets and constants,
//! and checks the exported vtable's name and that every entry point is present.

use std::mem::{offset_of, size_of};

use nccl_net_dqplb::ffi::sys::*;
use nccl_net_dqplb::ffi::vtable::ncclNetPlugin_v8;

#[test]
fn properties_v8_layout() {
    assert_eq!(size_of::<ncclNetProperties_v8_t>(), 64);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, name), 0);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, pciPath), 8);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, guid), 16);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, ptrSupport), 24);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, regIsGlobal), 28);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, speed), 32);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, port), 36);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, latency), 40);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, maxComms), 44);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, maxRecvs), 48);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, netDeviceType), 52);
    assert_eq!(offset_of!(ncclNetProperties_v8_t, netDeviceVersion), 56);
}

#[test]
fn vtable_v8_layout() {
    assert_eq!(size_of::<ncclNet_v8_t>(), 152);
    let p = size_of::<usize>();
    let order = [
        offset_of!(ncclNet_v8_t, name),
        offset_of!(ncclNet_v8_t, init),
        offset_of!(ncclNet_v8_t, devices),
        offset_of!(ncclNet_v8_t, getProperties),
        offset_of!(ncclNet_v8_t, listen),
        offset_of!(ncclNet_v8_t, connect),
        offset_of!(ncclNet_v8_t, accept),
        offset_of!(ncclNet_v8_t, regMr),
        offset_of!(ncclNet_v8_t, regMrDmaBuf),
        offset_of!(ncclNet_v8_t, deregMr),
        offset_of!(ncclNet_v8_t, isend),
        offset_of!(ncclNet_v8_t, irecv),
        offset_of!(ncclNet_v8_t, iflush),
        offset_of!(ncclNet_v8_t, test),
        offset_of!(ncclNet_v8_t, closeSend),
        offset_of!(ncclNet_v8_t, closeRecv),
        offset_of!(ncclNet_v8_t, closeListen),
        offset_of!(ncclNet_v8_t, getDeviceMr),
        offset_of!(ncclNet_v8_t, irecvConsumed),
    ];
    for (i, off) in order.iter().enumerate() {
        assert_eq!(*off, i * p, "field {i} of ncclNet_v8_t");
    }
}

#[test]
fn device_handle_and_constants() {
    assert_eq!(size_of::<ncclNetDeviceHandle_v8_t>(), 32);
    assert_eq!(NCCL_NET_HANDLE_MAXSIZE, 128);
    assert_eq!((NCCL_PTR_HOST, NCCL_PTR_CUDA, NCCL_PTR_DMABUF), (1, 2, 4));
    assert_eq!(ncclResult_t::ncclSystemError as u32, 2);
    assert_eq!(ncclResult_t::ncclInternalError as u32, 3);
    assert_eq!(ncclResult_t::ncclInvalidArgument as u32, 4);
    assert_eq!(ncclResult_t::ncclInvalidUsage as u32, 5);
    assert_eq!(ncclResult_t::ncclRemoteError as u32, 6);
}

#[test]
fn exported_vtable_is_complete() {
    let v = &ncclNetPlugin_v8.0;
    // SAFETY: name points at a static NUL-terminated string.
    let name = unsafe { std::ffi::CStr::from_ptr(v.name) };
    assert_eq!(name.to_str().unwrap(), "DQPLB");
    assert!(v.init.is_some() && v.devices.is_some() && v.getProperties.is_some());
    assert!(v.listen.is_some() && v.connect.is_some() && v.accept.is_some());
    assert!(v.regMr.is_some() && v.regMrDmaBuf.is_some() && v.deregMr.is_some());
    assert!(v.isend.is_some() && v.irecv.is_some() && v.iflush.is_some() && v.test.is_some());
    assert!(v.closeSend.is_some() && v.closeRecv.is_some() && v.closeListen.is_some());
    // NULL, as in NCCL's net_ib and net_socket: recvProxyProgress in NCCL's src/transport/net.cc
    // (v2.20.3 through v2.30.7) calls irecvConsumed after every consumed receive whenever the
    // pointer is non-NULL, and getDeviceMr only serves device-offload plugins.
    assert!(v.getDeviceMr.is_none() && v.irecvConsumed.is_none());
}
