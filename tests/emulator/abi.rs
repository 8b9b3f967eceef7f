//! The ncclNet_v8_t ABI as NCCL's core declares it (src/include/nccl_net.h up to 2.23,
//! src/include/plugin/net/net_v8.h from 2.24): vtable, properties and constants the emulator uses.

use std::os::raw::{c_char, c_int, c_ulong, c_void};

/// NCCL_NET_HANDLE_MAXSIZE (net.h, all versions 2.20-2.30).
pub(crate) const HANDLE_BYTES: usize = 128;
/// NCCL_PTR_HOST / NCCL_PTR_CUDA / NCCL_PTR_DMABUF (net.h, 2.20-2.30).
pub(crate) const PTR_HOST: c_int = 1;
pub(crate) const PTR_CUDA: c_int = 2;
pub(crate) const PTR_DMABUF: c_int = 4;
/// NCCL_NET_MAX_REQUESTS (net.h): 32 requests in flight per comm (2.20-2.30); net.cc asserts
/// NCCL_STEPS <= NCCL_NET_MAX_REQUESTS, which the emulator's depth limits also respect.
pub(crate) const MAX_REQUESTS: usize = 32;
const _: () = assert!(super::plan::NCCL_STEPS as usize <= MAX_REQUESTS);
/// NCCL_PROXY_MAX_SUBS = MAXCHANNELS (src/include/proxy.h): the `sizes` array recvProxyProgress
/// hands to test() has this many entries, zeroed first. MAXCHANNELS (src/include/device.h) is 32
/// in 2.20-2.27 and 64 in 2.28-2.30: the larger array is used (test() must only write `n` of them).
pub(crate) const PROXY_MAX_SUBS: usize = 64;
/// NCCL_NET_DEVICE_HOST (src/include/net_device.h, 2.19+).
pub(crate) const NET_DEVICE_HOST: c_int = 0;

pub(crate) const NCCL_SUCCESS: c_int = 0;

/// ncclDebugLogger_t.
pub(crate) type Logger =
    unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, ...);

type P = *mut c_void;

/// ncclNetProperties_v8_t.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Props {
    pub name: *const c_char,
    pub pci_path: *const c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
}

impl Props {
    /// NCCL declares `ncclNetProperties_t props;` on the stack without initialising it
    /// (sendProxySetup/recvProxySetup in src/transport/net.cc): stack garbage, emulated here.
    pub(crate) fn uninit() -> Props {
        Props {
            name: std::ptr::null(),
            pci_path: std::ptr::null(),
            guid: 0x5a5a_5a5a_5a5a_5a5a,
            ptr_support: 0x5a5a_5a5a,
            reg_is_global: 0x5a5a_5a5a,
            speed: -0x5a5a,
            port: -0x5a5a,
            latency: f32::NAN,
            max_comms: -0x5a5a,
            max_recvs: -0x5a5a,
            net_device_type: 0x5a5a,
            net_device_version: 0x5a5a,
        }
    }
}

/// ncclNet_v8_t: 19 pointer-sized members in declaration order.
#[repr(C)]
pub(crate) struct NetV8 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(Option<Logger>) -> c_int>,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> c_int>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut Props) -> c_int>,
    pub listen: Option<unsafe extern "C" fn(c_int, P, *mut P) -> c_int>,
    pub connect: Option<unsafe extern "C" fn(c_int, P, *mut P, *mut P) -> c_int>,
    pub accept: Option<unsafe extern "C" fn(P, *mut P, *mut P) -> c_int>,
    pub reg_mr: Option<unsafe extern "C" fn(P, P, usize, c_int, *mut P) -> c_int>,
    pub reg_mr_dma_buf:
        Option<unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, *mut P) -> c_int>,
    pub dereg_mr: Option<unsafe extern "C" fn(P, P) -> c_int>,
    pub isend: Option<unsafe extern "C" fn(P, P, c_int, c_int, P, *mut P) -> c_int>,
    #[allow(clippy::type_complexity)]
    pub irecv: Option<
        unsafe extern "C" fn(P, c_int, *mut P, *mut c_int, *mut c_int, *mut P, *mut P) -> c_int,
    >,
    #[allow(clippy::type_complexity)]
    pub iflush: Option<unsafe extern "C" fn(P, c_int, *mut P, *mut c_int, *mut P, *mut P) -> c_int>,
    pub test: Option<unsafe extern "C" fn(P, *mut c_int, *mut c_int) -> c_int>,
    pub close_send: Option<unsafe extern "C" fn(P) -> c_int>,
    pub close_recv: Option<unsafe extern "C" fn(P) -> c_int>,
    pub close_listen: Option<unsafe extern "C" fn(P) -> c_int>,
    pub get_device_mr: Option<unsafe extern "C" fn(P, P, *mut P) -> c_int>,
    pub irecv_consumed: Option<unsafe extern "C" fn(P, c_int, P) -> c_int>,
}

// SAFETY: immutable plugin data (a static string and function pointers).
unsafe impl Sync for NetV8 {}

const _: () = assert!(std::mem::size_of::<Props>() == 64);
const _: () = assert!(std::mem::size_of::<NetV8>() == 19 * 8);
