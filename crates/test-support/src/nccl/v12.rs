//! ncclNet_v12_t (nccl_net_v12.h, looked for first by NCCL 2.30): up to 8 devices per virtual
//! NIC, and properties that gain railId and planeId.

use super::{
    Accept, Close, ConnectV11, DeregMr, Devices, Finalize, GetDeviceMr, Iflush, InitV11,
    IrecvConsumed, IrecvV10, IsendV10, ListenV11, RegMr, RegMrDmaBuf, SetNetAttr, Test,
};
use std::os::raw::{c_char, c_int};

/// NCCL_NET_MAX_DEVS_PER_NIC_V12.
pub const MAX_DEVS_PER_NIC_V12: usize = 8;

/// ncclNetVDeviceProps_v12_t.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct VDevicePropsV12 {
    pub ndevs: c_int,
    pub devs: [c_int; MAX_DEVS_PER_NIC_V12],
}

/// ncclNetProperties_v12_t.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropertiesV12 {
    pub name: *const c_char,
    pub pci_path: *const c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub vprops: VDevicePropsV12,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request_size: c_int,
    /// NET_ID_UNDEF when unknown.
    pub rail_id: i16,
    /// NET_ID_UNDEF when unknown.
    pub plane_id: i16,
}

/// ncclNet_v12_t: v11's members with v12 properties and virtual devices.
#[repr(C)]
pub struct NetV12 {
    pub name: *const c_char,
    pub init: Option<InitV11>,
    pub devices: Option<Devices>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropertiesV12) -> c_int>,
    pub listen: Option<ListenV11>,
    pub connect: Option<ConnectV11>,
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
    pub make_vdevice: Option<unsafe extern "C" fn(*mut c_int, *mut VDevicePropsV12) -> c_int>,
    pub finalize: Option<Finalize>,
    pub set_net_attr: Option<SetNetAttr>,
}

// SAFETY: immutable plugin data, as for NetV8.
unsafe impl Sync for NetV12 {}

const _: () = assert!(std::mem::size_of::<NetV12>() == 22 * std::mem::size_of::<usize>());
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<PropertiesV12>() == 128);
