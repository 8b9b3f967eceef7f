//! Pins the bindgen-generated NCCL v8-v12 types to NCCL's ABI: sizes, field offsets and constants
//! (v9-v12 values cross-checked with offsetof() over NCCL's plugins/net/example headers), and
//! checks each exported vtable's name and which entry points are present.

use std::mem::{offset_of, size_of};

use nccl_net_dqplb::ffi::sys::*;
use nccl_net_dqplb::ffi::vtable::{
    ncclNetPlugin_v10, ncclNetPlugin_v11, ncclNetPlugin_v12, ncclNetPlugin_v8, ncclNetPlugin_v9,
};

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

/// Checks the properties fields every version from v9 on shares (same offsets through vProps).
macro_rules! props_v9_prefix {
    ($t:ty) => {
        assert_eq!(offset_of!($t, name), 0);
        assert_eq!(offset_of!($t, pciPath), 8);
        assert_eq!(offset_of!($t, guid), 16);
        assert_eq!(offset_of!($t, ptrSupport), 24);
        assert_eq!(offset_of!($t, regIsGlobal), 28);
        assert_eq!(offset_of!($t, forceFlush), 32);
        assert_eq!(offset_of!($t, speed), 36);
        assert_eq!(offset_of!($t, port), 40);
        assert_eq!(offset_of!($t, latency), 44);
        assert_eq!(offset_of!($t, maxComms), 48);
        assert_eq!(offset_of!($t, maxRecvs), 52);
        assert_eq!(offset_of!($t, netDeviceType), 56);
        assert_eq!(offset_of!($t, netDeviceVersion), 60);
        assert_eq!(offset_of!($t, vProps), 64);
    };
}

#[test]
fn properties_v9_v10_layout() {
    props_v9_prefix!(ncclNetProperties_v9_t);
    assert_eq!(size_of::<ncclNetProperties_v9_t>(), 104);
    assert_eq!(offset_of!(ncclNetProperties_v9_t, maxP2pBytes), 88);
    assert_eq!(offset_of!(ncclNetProperties_v9_t, maxCollBytes), 96);
    assert_eq!(size_of::<ncclNetVDeviceProps_v9_t>(), 20);
    assert_eq!(offset_of!(ncclNetVDeviceProps_v9_t, ndevs), 0);
    assert_eq!(offset_of!(ncclNetVDeviceProps_v9_t, devs), 4);
    assert_eq!(NCCL_NET_MAX_DEVS_PER_NIC_V9, 4);
    // v10 reuses v9's properties and vProps unchanged.
    assert_eq!(size_of::<ncclNetProperties_v10_t>(), 104);
    assert_eq!(size_of::<ncclNetVDeviceProps_v10_t>(), 20);
}

#[test]
fn properties_v11_layout() {
    props_v9_prefix!(ncclNetProperties_v11_t);
    assert_eq!(size_of::<ncclNetProperties_v11_t>(), 112);
    assert_eq!(offset_of!(ncclNetProperties_v11_t, maxP2pBytes), 88);
    assert_eq!(offset_of!(ncclNetProperties_v11_t, maxCollBytes), 96);
    assert_eq!(
        offset_of!(ncclNetProperties_v11_t, maxMultiRequestSize),
        104
    );
    assert_eq!(size_of::<ncclNetVDeviceProps_v11_t>(), 20);
    assert_eq!(NCCL_NET_MAX_DEVS_PER_NIC_V11, 4);
}

#[test]
fn properties_v12_layout() {
    props_v9_prefix!(ncclNetProperties_v12_t);
    assert_eq!(size_of::<ncclNetProperties_v12_t>(), 128);
    assert_eq!(offset_of!(ncclNetProperties_v12_t, maxP2pBytes), 104);
    assert_eq!(offset_of!(ncclNetProperties_v12_t, maxCollBytes), 112);
    assert_eq!(
        offset_of!(ncclNetProperties_v12_t, maxMultiRequestSize),
        120
    );
    assert_eq!(offset_of!(ncclNetProperties_v12_t, railId), 124);
    assert_eq!(offset_of!(ncclNetProperties_v12_t, planeId), 126);
    assert_eq!(size_of::<ncclNetVDeviceProps_v12_t>(), 36);
    assert_eq!(offset_of!(ncclNetVDeviceProps_v12_t, devs), 4);
    assert_eq!(NCCL_NET_MAX_DEVS_PER_NIC_V12, 8);
    assert_eq!(NCCL_NET_ID_UNDEF, -1);
}

#[test]
fn config_and_attr_layout() {
    assert_eq!(size_of::<ncclNetCommConfig_v10_t>(), 4);
    assert_eq!(offset_of!(ncclNetCommConfig_v10_t, trafficClass), 0);
    assert_eq!(size_of::<ncclNetCommConfig_v11_t>(), 4);
    assert_eq!(size_of::<ncclNetCommConfig_v12_t>(), 4);
    assert_eq!(NCCL_NET_TRAFFIC_CLASS_UNDEF, -1);
    assert_eq!(size_of::<ncclNetCommAttr_v11_t>(), 16);
    assert_eq!(offset_of!(ncclNetCommAttr_v11_t, maxConcurrentPeers), 0);
    assert_eq!(offset_of!(ncclNetCommAttr_v11_t, minConcurrentPeers), 4);
    assert_eq!(offset_of!(ncclNetCommAttr_v11_t, maxFlowsPerPeer), 8);
    assert_eq!(offset_of!(ncclNetCommAttr_v11_t, minFlowsPerPeer), 12);
    assert_eq!(size_of::<ncclNetAttr_v11_t>(), 44);
    assert_eq!(offset_of!(ncclNetAttr_v11_t, sendCommAttr), 0);
    assert_eq!(offset_of!(ncclNetAttr_v11_t, recvCommAttr), 16);
    assert_eq!(offset_of!(ncclNetAttr_v11_t, op), 32);
    assert_eq!(offset_of!(ncclNetAttr_v11_t, algo), 36);
    assert_eq!(offset_of!(ncclNetAttr_v11_t, proto), 40);
    assert_eq!(size_of::<ncclNetAttr_v12_t>(), 44);
    assert_eq!(size_of::<ncclNetDeviceHandle_v12_t>(), 32);
    assert_eq!(NCCL_NET_OPTIONAL_RECV_COMPLETION, 1);
    assert_eq!(NCCL_MAX_NET_SIZE_BYTES, 1 << 40);
}

/// Field offsets of a vtable, in declaration order: each is the next pointer slot.
macro_rules! vtable_order {
    ($t:ty, $size:expr, [$($f:ident),*]) => {{
        assert_eq!(size_of::<$t>(), $size, stringify!($t));
        let p = size_of::<usize>();
        let order = [$(offset_of!($t, $f)),*];
        assert_eq!(order.len() * p, $size);
        for (i, off) in order.iter().enumerate() {
            assert_eq!(*off, i * p, "field {i} of {}", stringify!($t));
        }
    }};
}

#[test]
fn vtable_v9_to_v12_layout() {
    vtable_order!(
        ncclNet_v9_t,
        160,
        [
            name,
            init,
            devices,
            getProperties,
            listen,
            connect,
            accept,
            regMr,
            regMrDmaBuf,
            deregMr,
            isend,
            irecv,
            iflush,
            test,
            closeSend,
            closeRecv,
            closeListen,
            getDeviceMr,
            irecvConsumed,
            makeVDevice
        ]
    );
    vtable_order!(
        ncclNet_v10_t,
        160,
        [
            name,
            init,
            devices,
            getProperties,
            listen,
            connect,
            accept,
            regMr,
            regMrDmaBuf,
            deregMr,
            isend,
            irecv,
            iflush,
            test,
            closeSend,
            closeRecv,
            closeListen,
            getDeviceMr,
            irecvConsumed,
            makeVDevice
        ]
    );
    vtable_order!(
        ncclNet_v11_t,
        176,
        [
            name,
            init,
            devices,
            getProperties,
            listen,
            connect,
            accept,
            regMr,
            regMrDmaBuf,
            deregMr,
            isend,
            irecv,
            iflush,
            test,
            closeSend,
            closeRecv,
            closeListen,
            getDeviceMr,
            irecvConsumed,
            makeVDevice,
            finalize,
            setNetAttr
        ]
    );
    vtable_order!(
        ncclNet_v12_t,
        176,
        [
            name,
            init,
            devices,
            getProperties,
            listen,
            connect,
            accept,
            regMr,
            regMrDmaBuf,
            deregMr,
            isend,
            irecv,
            iflush,
            test,
            closeSend,
            closeRecv,
            closeListen,
            getDeviceMr,
            irecvConsumed,
            makeVDevice,
            finalize,
            setNetAttr
        ]
    );
}

/// The entries every version has; getDeviceMr/irecvConsumed NULL (host plugin), makeVDevice NULL.
macro_rules! common_entries {
    ($v:expr) => {{
        let v = $v;
        // SAFETY: name points at a static NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr(v.name) };
        assert_eq!(name.to_str().unwrap(), "DQPLB");
        assert!(v.init.is_some() && v.devices.is_some() && v.getProperties.is_some());
        assert!(v.listen.is_some() && v.connect.is_some() && v.accept.is_some());
        assert!(v.regMr.is_some() && v.regMrDmaBuf.is_some() && v.deregMr.is_some());
        assert!(v.isend.is_some() && v.irecv.is_some() && v.iflush.is_some() && v.test.is_some());
        assert!(v.closeSend.is_some() && v.closeRecv.is_some() && v.closeListen.is_some());
        assert!(v.getDeviceMr.is_none() && v.irecvConsumed.is_none());
        v
    }};
}

#[test]
fn exported_vtables_v9_to_v12_are_complete() {
    assert!(common_entries!(&ncclNetPlugin_v9.0).makeVDevice.is_none());
    assert!(common_entries!(&ncclNetPlugin_v10.0).makeVDevice.is_none());
    let v11 = common_entries!(&ncclNetPlugin_v11.0);
    assert!(v11.makeVDevice.is_none() && v11.finalize.is_some() && v11.setNetAttr.is_some());
    let v12 = common_entries!(&ncclNetPlugin_v12.0);
    assert!(v12.makeVDevice.is_none() && v12.finalize.is_some() && v12.setNetAttr.is_some());
    // The shared entry points are literally the same functions in every version.
    assert_eq!(
        ncclNetPlugin_v8.0.test.map(|f| f as usize),
        ncclNetPlugin_v12.0.test.map(|f| f as usize)
    );
}
