//! ncclNet_v11_t (nccl_net_v11.h, NCCL 2.28/2.29): per-communicator init/finalize with a context
//! that listen/connect take, setNetAttr hints, and properties with maxMultiRequestSize.

use super::{
    Accept, Close, CommConfigV10, DeregMr, DeviceHandleV8, Devices, GetDeviceMr, Iflush,
    IrecvConsumed, IrecvV10, IsendV10, Logger, ProfilerCallback, Ptr, RegMr, RegMrDmaBuf, Test,
    VDevicePropsV9,
};
use std::os::raw::{c_char, c_int};

/// ncclNetProperties_v11_t.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropertiesV11 {
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
    pub vprops: VDevicePropsV9,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    /// Requests in one multi-request (1: none).
    pub max_multi_request_size: c_int,
}

/// ncclNetCommAttr_v11_t (v12 aliases it): one direction's communication pattern.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CommAttrV11 {
    pub max_concurrent_peers: i32,
    pub min_concurrent_peers: i32,
    pub max_flows_per_peer: i32,
    pub min_flows_per_peer: i32,
}

/// ncclNetAttr_v11_t (v12 aliases it): the hints NCCL gives a context through setNetAttr.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NetAttrV11 {
    pub send: CommAttrV11,
    pub recv: CommAttrV11,
    pub op: u32,
    pub algo: u32,
    pub proto: u32,
}

/// init(ctx, commId, config, logger, profiler), v11-v12.
pub type InitV11 = unsafe extern "C" fn(
    *mut Ptr,
    u64,
    *mut CommConfigV10,
    Option<Logger>,
    Option<ProfilerCallback>,
) -> c_int;
/// listen(ctx, dev, handle, listenComm), v11-v12.
pub type ListenV11 = unsafe extern "C" fn(Ptr, c_int, Ptr, *mut Ptr) -> c_int;
/// connect(ctx, dev, handle, sendComm, sendDevComm), v11-v12.
pub type ConnectV11 =
    unsafe extern "C" fn(Ptr, c_int, Ptr, *mut Ptr, *mut *mut DeviceHandleV8) -> c_int;
/// finalize(ctx), v11-v12.
pub type Finalize = unsafe extern "C" fn(Ptr) -> c_int;
/// setNetAttr(ctx, netAttr), v11-v12.
pub type SetNetAttr = unsafe extern "C" fn(Ptr, *mut NetAttrV11) -> c_int;

/// ncclNet_v11_t: v10's members with a context, then finalize and setNetAttr.
#[repr(C)]
pub struct NetV11 {
    pub name: *const c_char,
    pub init: Option<InitV11>,
    pub devices: Option<Devices>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropertiesV11) -> c_int>,
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
    pub make_vdevice: Option<unsafe extern "C" fn(*mut c_int, *mut VDevicePropsV9) -> c_int>,
    pub finalize: Option<Finalize>,
    pub set_net_attr: Option<SetNetAttr>,
}

// SAFETY: immutable plugin data, as for NetV8.
unsafe impl Sync for NetV11 {}

const _: () = assert!(std::mem::size_of::<NetV11>() == 22 * std::mem::size_of::<usize>());
const _: () = assert!(std::mem::size_of::<NetAttrV11>() == 44);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<PropertiesV11>() == 112);
