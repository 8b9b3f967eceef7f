//! ncclNet_v9_t (nccl_net_v9.h, looked for first by NCCL 2.24/2.25): virtual devices, size_t
//! message sizes, and properties that gain forceFlush, vProps, maxP2pBytes and maxCollBytes.

use super::{
    Accept, Close, DeregMr, DeviceHandleV8, Devices, GetDeviceMr, Iflush, IrecvConsumed, Logger,
    Ptr, RegMr, RegMrDmaBuf, Test,
};
use std::os::raw::{c_char, c_int};

/// NCCL_NET_MAX_DEVS_PER_NIC_V9 (v9-v11).
pub const MAX_DEVS_PER_NIC_V9: usize = 4;

/// ncclNetVDeviceProps_v9_t (v10 and v11 alias it): a virtual device of `ndevs` devices.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct VDevicePropsV9 {
    pub ndevs: c_int,
    pub devs: [c_int; MAX_DEVS_PER_NIC_V9],
}

/// ncclNetProperties_v9_t (v10 aliases it).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropertiesV9 {
    pub name: *const c_char,
    pub pci_path: *const c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    /// 1: NCCL flushes every receive.
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub vprops: VDevicePropsV9,
    /// 0 < x <= MAX_NET_SIZE_BYTES.
    pub max_p2p_bytes: usize,
    /// 0 < x <= MAX_NET_SIZE_BYTES.
    pub max_coll_bytes: usize,
}

/// irecv(recvComm, n, data, sizes, tags, mhandles, request), v9.
pub type IrecvV9 =
    unsafe extern "C" fn(Ptr, c_int, *mut Ptr, *mut usize, *mut c_int, *mut Ptr, *mut Ptr) -> c_int;

/// ncclNet_v9_t: v8's members with size_t sizes in isend/irecv, then makeVDevice.
#[repr(C)]
pub struct NetV9 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(Option<Logger>) -> c_int>,
    pub devices: Option<Devices>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropertiesV9) -> c_int>,
    pub listen: Option<unsafe extern "C" fn(c_int, Ptr, *mut Ptr) -> c_int>,
    pub connect:
        Option<unsafe extern "C" fn(c_int, Ptr, *mut Ptr, *mut *mut DeviceHandleV8) -> c_int>,
    pub accept: Option<Accept>,
    pub reg_mr: Option<RegMr>,
    pub reg_mr_dma_buf: Option<RegMrDmaBuf>,
    pub dereg_mr: Option<DeregMr>,
    pub isend: Option<unsafe extern "C" fn(Ptr, Ptr, usize, c_int, Ptr, *mut Ptr) -> c_int>,
    pub irecv: Option<IrecvV9>,
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
unsafe impl Sync for NetV9 {}

const _: () = assert!(std::mem::size_of::<NetV9>() == 20 * std::mem::size_of::<usize>());
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<PropertiesV9>() == 104);
