//! The NCCL v8 net-plugin ABI as the harness sees it: declared here independently of the crate's
//! bindgen types, with raw `c_int` results so an out-of-range return value is caught, not UB.

use std::os::raw::{c_char, c_int, c_ulong, c_void};

pub(crate) const HANDLE_BYTES: usize = 128;
pub(crate) const PTR_HOST: c_int = 1;
pub(crate) const MAX_REQUESTS: usize = 32;

pub(crate) const SUCCESS: c_int = 0;
pub(crate) const INVALID_ARGUMENT: c_int = 4;
pub(crate) const INVALID_USAGE: c_int = 5;
pub(crate) const REMOTE_ERROR: c_int = 6;
/// maxRecvs the plugin reports (net_ib's NCCL_NET_IB_MAX_RECVS).
pub(crate) const MAX_RECVS: usize = 8;

/// `ncclDebugLogger_t`; the harness passes a C-compiled variadic function of this type.
pub(crate) type Logger =
    unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, ...);

/// `ncclNetProperties_v8_t` (64 bytes on x86_64).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Properties {
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

impl Properties {
    /// A properties block with every field set to a recognisable junk value, so that a field
    /// the plugin forgets to write is caught by the sanity checks.
    pub(crate) fn poisoned() -> Self {
        Properties {
            name: std::ptr::null(),
            pci_path: std::ptr::without_provenance(1),
            guid: 0xdead_beef_dead_beef,
            ptr_support: -1,
            reg_is_global: -1,
            speed: -1,
            port: -1,
            latency: f32::NAN,
            max_comms: -1,
            max_recvs: -1,
            net_device_type: -1,
            net_device_version: -1,
        }
    }
}

/// `ncclNetDeviceHandle_v8_t` (unused; only its pointer type travels).
#[repr(C)]
pub(crate) struct DevHandle {
    _private: [u8; 32],
}

type Ptr = *mut c_void;

/// `ncclNet_v8_t`: 19 pointer-sized fields in ABI order.
#[repr(C)]
pub(crate) struct NetV8 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(Option<Logger>) -> c_int>,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> c_int>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut Properties) -> c_int>,
    pub listen: Option<unsafe extern "C" fn(c_int, Ptr, *mut Ptr) -> c_int>,
    pub connect: Option<unsafe extern "C" fn(c_int, Ptr, *mut Ptr, *mut *mut DevHandle) -> c_int>,
    pub accept: Option<unsafe extern "C" fn(Ptr, *mut Ptr, *mut *mut DevHandle) -> c_int>,
    pub reg_mr: Option<unsafe extern "C" fn(Ptr, Ptr, usize, c_int, *mut Ptr) -> c_int>,
    pub reg_mr_dmabuf:
        Option<unsafe extern "C" fn(Ptr, Ptr, usize, c_int, u64, c_int, *mut Ptr) -> c_int>,
    pub dereg_mr: Option<unsafe extern "C" fn(Ptr, Ptr) -> c_int>,
    pub isend: Option<unsafe extern "C" fn(Ptr, Ptr, c_int, c_int, Ptr, *mut Ptr) -> c_int>,
    pub irecv: Option<
        unsafe extern "C" fn(
            Ptr,
            c_int,
            *mut Ptr,
            *mut c_int,
            *mut c_int,
            *mut Ptr,
            *mut Ptr,
        ) -> c_int,
    >,
    pub iflush:
        Option<unsafe extern "C" fn(Ptr, c_int, *mut Ptr, *mut c_int, *mut Ptr, *mut Ptr) -> c_int>,
    pub test: Option<unsafe extern "C" fn(Ptr, *mut c_int, *mut c_int) -> c_int>,
    pub close_send: Option<unsafe extern "C" fn(Ptr) -> c_int>,
    pub close_recv: Option<unsafe extern "C" fn(Ptr) -> c_int>,
    pub close_listen: Option<unsafe extern "C" fn(Ptr) -> c_int>,
    pub get_device_mr: Option<unsafe extern "C" fn(Ptr, Ptr, *mut Ptr) -> c_int>,
    pub irecv_consumed: Option<unsafe extern "C" fn(Ptr, c_int, Ptr) -> c_int>,
}

// SAFETY: the vtable is immutable plugin data (a static string and function pointers); NCCL
// calls it from several threads at once, and so do the multi-communicator tests.
unsafe impl Sync for NetV8 {}

/// Parsed fields of the plugin's 128-byte listen handle (layout in the plugin's contract).
#[derive(Debug, Clone)]
pub(crate) struct HandleInfo {
    pub version: u16,
    pub family: u16,
    pub port: u16,
    pub addr: std::net::IpAddr,
    pub fabric_id: u32,
}

/// Decodes a listen handle; `Err` names the first field that is wrong.
pub(crate) fn parse_handle(h: &[u8; HANDLE_BYTES]) -> Result<HandleInfo, String> {
    if &h[0..4] != b"DQPL" {
        return Err(format!(
            "handle magic is {:02x?}, expected b\"DQPL\"",
            &h[0..4]
        ));
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    let family = u16::from_le_bytes([h[6], h[7]]);
    let port = u16::from_be_bytes([h[8], h[9]]);
    let addr = match family {
        2 => std::net::IpAddr::from([h[10], h[11], h[12], h[13]]),
        10 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&h[10..26]);
            std::net::IpAddr::from(a)
        }
        f => {
            return Err(format!(
                "handle address family {f} is neither 2 (IPv4) nor 10 (IPv6)"
            ))
        }
    };
    if port == 0 {
        return Err("handle TCP port is 0".into());
    }
    let fabric_id = u32::from_le_bytes([h[26], h[27], h[28], h[29]]);
    Ok(HandleInfo {
        version,
        family,
        port,
        addr,
        fabric_id,
    })
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn from_hex(s: &str) -> Result<[u8; HANDLE_BYTES], String> {
    let s = s.trim();
    if s.len() != 2 * HANDLE_BYTES {
        return Err(format!(
            "handle hex has {} chars, expected {}",
            s.len(),
            2 * HANDLE_BYTES
        ));
    }
    let mut out = [0u8; HANDLE_BYTES];
    for (i, o) in out.iter_mut().enumerate() {
        *o =
            u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| format!("handle hex: {e}"))?;
    }
    Ok(out)
}
