//! ncclNet_v8_t (nccl_net_v8.h): the device handle, the 64-byte properties and the 19-member
//! vtable; NCCL 2.20-2.23 load it natively, 2.24-2.30 through their v8 compat shim.

use super::{
    Accept, Close, DeregMr, Devices, GetDeviceMr, Iflush, IrecvConsumed, Logger, Ptr, RegMr,
    RegMrDmaBuf, Test,
};
use std::os::raw::{c_char, c_int};

/// ncclNetDeviceHandle_v8_t (v9-v12 alias it); the plugin never requests device offload.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceHandleV8 {
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub handle: Ptr,
    pub size: usize,
    pub needs_proxy_progress: c_int,
}

/// ncclNetProperties_v8_t.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropertiesV8 {
    pub name: *const c_char,
    pub pci_path: *const c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    /// Mbps.
    pub speed: c_int,
    pub port: c_int,
    /// Microseconds.
    pub latency: f32,
    pub max_comms: c_int,
    /// Grouped receives per irecv.
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
}

/// irecv(recvComm, n, data, sizes, tags, mhandles, request), v8.
pub type IrecvV8 =
    unsafe extern "C" fn(Ptr, c_int, *mut Ptr, *mut c_int, *mut c_int, *mut Ptr, *mut Ptr) -> c_int;

/// ncclNet_v8_t.
#[repr(C)]
pub struct NetV8 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(Option<Logger>) -> c_int>,
    pub devices: Option<Devices>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropertiesV8) -> c_int>,
    pub listen: Option<unsafe extern "C" fn(c_int, Ptr, *mut Ptr) -> c_int>,
    pub connect:
        Option<unsafe extern "C" fn(c_int, Ptr, *mut Ptr, *mut *mut DeviceHandleV8) -> c_int>,
    pub accept: Option<Accept>,
    pub reg_mr: Option<RegMr>,
    pub reg_mr_dma_buf: Option<RegMrDmaBuf>,
    pub dereg_mr: Option<DeregMr>,
    pub isend: Option<unsafe extern "C" fn(Ptr, Ptr, c_int, c_int, Ptr, *mut Ptr) -> c_int>,
    pub irecv: Option<IrecvV8>,
    pub iflush: Option<Iflush>,
    pub test: Option<Test>,
    pub close_send: Option<Close>,
    pub close_recv: Option<Close>,
    pub close_listen: Option<Close>,
    pub get_device_mr: Option<GetDeviceMr>,
    pub irecv_consumed: Option<IrecvConsumed>,
}

// SAFETY: a vtable is immutable plugin data (a static string and function pointers); NCCL calls
// it from several threads at once, and so do the tests.
unsafe impl Sync for NetV8 {}

const P: usize = std::mem::size_of::<usize>();
const _: () = assert!(std::mem::size_of::<NetV8>() == 19 * P);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<PropertiesV8>() == 64);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<DeviceHandleV8>() == 32);
