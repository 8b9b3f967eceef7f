//! ncclNet_v10_t (nccl_net_v10.h, looked for first by NCCL 2.26/2.27): init takes a profiler
//! callback, connect a per-connection config (traffic class), isend/irecv profiler handles.

use super::{
    Accept, Close, DeregMr, DeviceHandleV8, Devices, GetDeviceMr, Iflush, IrecvConsumed, Logger,
    ProfilerCallback, Ptr, RegMr, RegMrDmaBuf, Test, VDevicePropsV9,
};
use std::os::raw::{c_char, c_int};

/// ncclNetProperties_v10_t.
pub type PropertiesV10 = super::PropertiesV9;

/// ncclNetCommConfig_v10_t (v11 and v12 alias it).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CommConfigV10 {
    /// TRAFFIC_CLASS_UNDEF, or an IP TOS / IB traffic class.
    pub traffic_class: c_int,
}

/// isend(sendComm, data, size, tag, mhandle, phandle, request), v10-v12.
pub type IsendV10 = unsafe extern "C" fn(Ptr, Ptr, usize, c_int, Ptr, Ptr, *mut Ptr) -> c_int;
/// irecv(recvComm, n, data, sizes, tags, mhandles, phandles, request), v10-v12.
pub type IrecvV10 = unsafe extern "C" fn(
    Ptr,
    c_int,
    *mut Ptr,
    *mut usize,
    *mut c_int,
    *mut Ptr,
    *mut Ptr,
    *mut Ptr,
) -> c_int;

/// connect(dev, config, handle, sendComm, sendDevComm), v10.
pub type ConnectV10 = unsafe extern "C" fn(
    c_int,
    *mut CommConfigV10,
    Ptr,
    *mut Ptr,
    *mut *mut DeviceHandleV8,
) -> c_int;

/// ncclNet_v10_t.
#[repr(C)]
pub struct NetV10 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(Option<Logger>, Option<ProfilerCallback>) -> c_int>,
    pub devices: Option<Devices>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropertiesV10) -> c_int>,
    pub listen: Option<unsafe extern "C" fn(c_int, Ptr, *mut Ptr) -> c_int>,
    pub connect: Option<ConnectV10>,
    pub accept: Option<Accept>,
    pub reg_mr: Option<RegMr>,
    pub reg_mr_dma_buf: Option<RegMrDmaBuf>,
    pub dereg_mr: Option<DeregMr>,
    pub isend: Option<IsendV10>,
    pub irecv: Option<IrecvV10>,
    pub iflush: Option<Iflush>,
    pub test: Option<Test>,
    pub close_send: Option<Close>,
    pub close_recv: Option<Close>,
    pub close_listen: Option<Close>,
    pub get_device_mr: Option<GetDeviceMr>,
    pub irecv_consumed: Option<IrecvConsumed>,
    pub make_vdevice: Option<unsafe extern "C" fn(*mut c_int, *mut VDevicePropsV9) -> c_int>,
}

// SAFETY: immutable plugin data, as for NetV8.
unsafe impl Sync for NetV10 {}

const _: () = assert!(std::mem::size_of::<NetV10>() == 20 * std::mem::size_of::<usize>());
