//! The NCCL net-plugin ABI v8-v12 as NCCL declares it, written from nccl-headers/ apart from the
//! plugin's bindgen types (the .so is checked as NCCL sees it); results are raw `c_int`.

mod v10;
mod v11;
mod v12;
mod v8;
mod v9;

pub use v10::{CommConfigV10, ConnectV10, IrecvV10, IsendV10, NetV10, PropertiesV10};
pub use v11::{
    CommAttrV11, ConnectV11, Finalize, InitV11, ListenV11, NetAttrV11, NetV11, PropertiesV11,
    SetNetAttr,
};
pub use v12::{NetV12, PropertiesV12, VDevicePropsV12, MAX_DEVS_PER_NIC_V12};
pub use v8::{DeviceHandleV8, IrecvV8, NetV8, PropertiesV8};
pub use v9::{IrecvV9, NetV9, PropertiesV9, VDevicePropsV9, MAX_DEVS_PER_NIC_V9};

use std::os::raw::{c_char, c_int, c_ulong, c_void};

/// `void *`: comms, handles, requests, memory handles.
pub type Ptr = *mut c_void;

// ncclResult_t: the values a plugin returns.
pub const SUCCESS: c_int = 0;
pub const SYSTEM_ERROR: c_int = 2;
pub const INTERNAL_ERROR: c_int = 3;
pub const INVALID_ARGUMENT: c_int = 4;
pub const INVALID_USAGE: c_int = 5;
pub const REMOTE_ERROR: c_int = 6;

// ncclDebugLogLevel: the first argument of the logger.
pub const LOG_WARN: c_int = 2;
pub const LOG_INFO: c_int = 3;

/// NCCL_NET_HANDLE_MAXSIZE: bytes of the handle listen() writes and connect() reads.
pub const HANDLE_BYTES: usize = 128;
/// NCCL_PTR_HOST / NCCL_PTR_CUDA / NCCL_PTR_DMABUF: ptrSupport bits and regMr types.
pub const PTR_HOST: c_int = 1;
pub const PTR_CUDA: c_int = 2;
pub const PTR_DMABUF: c_int = 4;
/// NCCL_NET_MAX_REQUESTS: requests in flight per comm.
pub const MAX_REQUESTS: usize = 32;
/// ncclNetDeviceType: NCCL_NET_DEVICE_HOST and NCCL_NET_DEVICE_UNPACK.
pub const NET_DEVICE_HOST: c_int = 0;
pub const NET_DEVICE_UNPACK: c_int = 1;
/// NCCL_NET_OPTIONAL_RECV_COMPLETION (v9+): the value NCCL may pre-set `*request` to before irecv.
pub const OPTIONAL_RECV_COMPLETION: usize = 0x1;
/// NCCL_MAX_NET_SIZE_BYTES (v9+): the largest maxP2pBytes / maxCollBytes (1 TiB).
pub const MAX_NET_SIZE_BYTES: usize = 1 << 40;
/// NCCL_NET_TRAFFIC_CLASS_UNDEF (v10+).
pub const TRAFFIC_CLASS_UNDEF: c_int = -1;
/// NCCL_NET_ID_UNDEF (v12): railId / planeId when unknown.
pub const NET_ID_UNDEF: i16 = -1;

/// ncclDebugLogger_t: the printf-style logger NCCL passes to init().
pub type Logger = unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, ...);
/// ncclProfilerCallback_t (v10+): (eHandle, type, phandle, pluginId, extData).
pub type ProfilerCallback = unsafe extern "C" fn(*mut Ptr, c_int, Ptr, i64, Ptr) -> c_int;

// The entry points whose signature is the same in every version, v8 through v12.
/// devices(ndev).
pub type Devices = unsafe extern "C" fn(*mut c_int) -> c_int;
/// accept(listenComm, recvComm, recvDevComm).
pub type Accept = unsafe extern "C" fn(Ptr, *mut Ptr, *mut *mut DeviceHandleV8) -> c_int;
/// regMr(comm, data, size, type, mhandle).
pub type RegMr = unsafe extern "C" fn(Ptr, Ptr, usize, c_int, *mut Ptr) -> c_int;
/// regMrDmaBuf(comm, data, size, type, offset, fd, mhandle).
pub type RegMrDmaBuf = unsafe extern "C" fn(Ptr, Ptr, usize, c_int, u64, c_int, *mut Ptr) -> c_int;
/// deregMr(comm, mhandle).
pub type DeregMr = unsafe extern "C" fn(Ptr, Ptr) -> c_int;
/// iflush(recvComm, n, data, sizes, mhandles, request).
pub type Iflush =
    unsafe extern "C" fn(Ptr, c_int, *mut Ptr, *mut c_int, *mut Ptr, *mut Ptr) -> c_int;
/// test(request, done, sizes).
pub type Test = unsafe extern "C" fn(Ptr, *mut c_int, *mut c_int) -> c_int;
/// closeSend / closeRecv / closeListen(comm).
pub type Close = unsafe extern "C" fn(Ptr) -> c_int;
/// getDeviceMr(comm, mhandle, dptr_mhandle).
pub type GetDeviceMr = unsafe extern "C" fn(Ptr, Ptr, *mut Ptr) -> c_int;
/// irecvConsumed(recvComm, n, request).
pub type IrecvConsumed = unsafe extern "C" fn(Ptr, c_int, Ptr) -> c_int;
