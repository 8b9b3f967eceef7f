//! RDMA device discovery and the device context: lists verbs devices (none = an empty list, not an
//! error), describes their active ports (link layer, speed, MTU, chosen GID) and opens contexts.

use super::error::{Result, VerbsError};
use super::sysfs::{select_gid, GidEntry, LinkLayer, Sysfs};
use super::tuning::QpTuning;
use rdma_sys as ib;
use std::ffi::CStr;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Arc;

// Values of the anonymous `IBV_LINK_LAYER_*` enum in verbs.h (bindgen does not name it).
const LINK_LAYER_INFINIBAND: u8 = 1;
const LINK_LAYER_ETHERNET: u8 = 2;

/// One active port of a device, as a connection needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (1-based).
    pub port: u8,
    pub link_layer: LinkLayer,
    /// Link speed in Mbps (sysfs `rate`, else derived from the verbs width/speed codes).
    pub speed_mbps: u32,
    /// Active path MTU in bytes (256..=4096).
    pub active_mtu: u32,
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// GID a connection on this port uses (None if the port has no usable GID).
    pub gid: Option<GidEntry>,
}

/// A verbs device and its active ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub name: String,
    /// Node GUID in host byte order.
    pub guid: u64,
    /// Real path of the device's parent in sysfs (PCI function on real NICs).
    pub pci_path: Option<PathBuf>,
    pub ports: Vec<PortInfo>,
}

/// Converts a verbs `ibv_mtu` code to bytes (0 for an unknown code).
pub fn mtu_bytes(code: u32) -> u32 {
    match code {
        1..=5 => 128 << code,
        _ => 0,
    }
}

/// Converts an MTU in bytes to its `ibv_mtu` code (None unless a power of two in 256..=4096).
pub fn mtu_code(bytes: u32) -> Option<u32> {
    (1..=5).find(|&c| 128u32 << c == bytes)
}

/// Speed from the verbs width/speed codes, for ports whose sysfs `rate` is unreadable.
fn speed_from_attr(width: u8, speed: u8) -> u32 {
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 1,
    };
    let per_lane = match speed {
        1 => 2_500,
        2 => 5_000,
        4 | 8 => 10_000,
        16 => 14_000,
        32 => 25_000,
        64 => 50_000,
        128 => 100_000,
        _ => 0,
    };
    lanes * per_lane
}

/// The `ibv_get_device_list` result, freed on drop.
struct DeviceList {
    list: NonNull<*mut ib::ibv_device>,
    len: usize,
}

impl DeviceList {
    /// None when the host has no RDMA support at all (NULL list with ENOSYS).
    fn get() -> Result<Option<DeviceList>> {
        let mut n: i32 = 0;
        // SAFETY: `n` is a valid out-pointer; the returned array is freed in Drop.
        let raw = unsafe { ib::ibv_get_device_list(&mut n) };
        match NonNull::new(raw) {
            Some(list) => Ok(Some(DeviceList {
                list,
                len: usize::try_from(n).unwrap_or(0),
            })),
            None => {
                let err = VerbsError::last_os("ibv_get_device_list", "(any)");
                match err {
                    VerbsError::Call { errno, .. } if errno == libc::ENOSYS || errno == 0 => {
                        Ok(None)
                    }
                    other => Err(other),
                }
            }
        }
    }

    fn device(&self, i: usize) -> Option<*mut ib::ibv_device> {
        if i >= self.len {
            return None;
        }
        // SAFETY: libibverbs returns an array of `len` valid device pointers (NULL-terminated).
        let dev = unsafe { *self.list.as_ptr().add(i) };
        (!dev.is_null()).then_some(dev)
    }

    fn name(&self, i: usize) -> Option<String> {
        let dev = self.device(i)?;
        // SAFETY: `dev` is a live list entry; the name is a NUL-terminated string owned by it.
        let name = unsafe { ib::ibv_get_device_name(dev) };
        if name.is_null() {
            return None;
        }
        // SAFETY: non-NULL, NUL-terminated, valid while the list lives; we copy it out.
        Some(
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned(),
        )
    }

    fn guid(&self, i: usize) -> u64 {
        match self.device(i) {
            // SAFETY: `dev` is a live list entry.
            Some(dev) => u64::from_be(unsafe { ib::ibv_get_device_guid(dev) }),
            None => 0,
        }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed exactly once; opened
        // contexts stay valid after the list is freed (libibverbs contract).
        unsafe { ib::ibv_free_device_list(self.list.as_ptr()) }
    }
}

/// An open device (`ibv_context`), closed when the last Arc drops.
pub struct Context {
    raw: NonNull<ib::ibv_context>,
    name: String,
}

// SAFETY: libibverbs contexts are thread-safe (all verbs on a context may be called concurrently).
unsafe impl Send for Context {}
// SAFETY: as above; `Context` has no interior state of its own besides the immutable name.
unsafe impl Sync for Context {}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context({})", self.name)
    }
}

impl Context {
    /// Opens the device called `name`.
    pub fn open(name: &str) -> Result<Arc<Context>> {
        let list = DeviceList::get()?
            .ok_or_else(|| VerbsError::invalid(format!("RDMA device {name}: no RDMA support")))?;
        let index = (0..list.len)
            .find(|&i| list.name(i).as_deref() == Some(name))
            .ok_or_else(|| VerbsError::invalid(format!("no RDMA device named {name}")))?;
        let dev = list
            .device(index)
            .ok_or_else(|| VerbsError::invalid(format!("RDMA device {name} vanished")))?;
        // SAFETY: `dev` is a live entry of `list`, which outlives this call.
        let raw = unsafe { ib::ibv_open_device(dev) };
        let raw = NonNull::new(raw).ok_or_else(|| VerbsError::last_os("ibv_open_device", name))?;
        Ok(Arc::new(Context {
            raw,
            name: name.to_string(),
        }))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn as_ptr(&self) -> *mut ib::ibv_context {
        self.raw.as_ptr()
    }

    fn query_device(&self) -> Result<ib::ibv_device_attr> {
        // SAFETY: ibv_device_attr is plain old data; all-zero is a valid value.
        let mut attr: ib::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context and a valid out-pointer.
        let rc = unsafe { ib::ibv_query_device(self.as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(VerbsError::from_rc("ibv_query_device", &self.name, rc));
        }
        Ok(attr)
    }

    pub(crate) fn query_port(&self, port: u8) -> Result<ib::ibv_port_attr> {
        // SAFETY: ibv_port_attr is plain old data; all-zero is a valid value.
        let mut attr: ib::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context and a valid, correctly sized out-pointer.
        let rc = unsafe { ib::___ibv_query_port(self.as_ptr(), port, &mut attr) };
        if rc != 0 {
            return Err(VerbsError::from_rc("ibv_query_port", &self.name, rc));
        }
        Ok(attr)
    }

    /// Reads GID `index` of `port` through verbs.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<[u8; 16]> {
        // SAFETY: ibv_gid is a 16-byte union; zero is valid.
        let mut gid: ib::ibv_gid = unsafe { std::mem::zeroed() };
        let idx = i32::try_from(index).map_err(|_| VerbsError::invalid("GID index too large"))?;
        // SAFETY: live context and a valid out-pointer.
        let rc = unsafe { ib::ibv_query_gid(self.as_ptr(), port, idx, &mut gid) };
        if rc != 0 {
            return Err(VerbsError::from_rc("ibv_query_gid", &self.name, rc));
        }
        // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
        Ok(unsafe { gid.raw })
    }

    /// Describes the active ports of this device.
    pub fn active_ports(&self, sysfs: &Sysfs, tuning: &QpTuning) -> Result<Vec<PortInfo>> {
        let attr = self.query_device()?;
        let mut ports = Vec::new();
        for port in 1..=attr.phys_port_cnt {
            let pa = self.query_port(port)?;
            if pa.state != ib::ibv_port_state::IBV_PORT_ACTIVE {
                continue;
            }
            let link_layer = match pa.link_layer {
                LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
                LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
                _ => sysfs
                    .link_layer(&self.name, port)
                    .unwrap_or(LinkLayer::Unspecified),
            };
            let speed_mbps = sysfs
                .port_rate_mbps(&self.name, port)
                .unwrap_or_else(|| speed_from_attr(pa.active_width, pa.active_speed));
            let table = sysfs.gid_table(&self.name, port).unwrap_or_default();
            let mut gid = select_gid(&table, link_layer, tuning.gid_index)?;
            if gid.is_none() {
                if let Some(index) = tuning.gid_index {
                    // sysfs unreadable: trust the forced index and ask verbs for its value
                    let value = self.query_gid(port, index)?;
                    gid = Some(GidEntry {
                        index,
                        gid: value,
                        kind: super::sysfs::GidKind::Unknown,
                    });
                }
            }
            ports.push(PortInfo {
                port,
                link_layer,
                speed_mbps,
                active_mtu: mtu_bytes(pa.active_mtu),
                lid: pa.lid,
                gid,
            });
        }
        Ok(ports)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child object (PD, CQ, QP, MR) holds an Arc to this context, so none is
        // alive here; the context is closed exactly once.
        unsafe {
            ib::ibv_close_device(self.raw.as_ptr());
        }
    }
}

/// Lists RDMA devices with at least one active port. No RDMA support or no devices is
/// `Ok(vec![])`. `sysfs` supplies rate, PCI path and GID types; `tuning` the forced GID index.
pub fn discover(sysfs: &Sysfs, tuning: &QpTuning) -> Result<Vec<DeviceInfo>> {
    let Some(list) = DeviceList::get()? else {
        return Ok(Vec::new());
    };
    let mut devices = Vec::new();
    for i in 0..list.len {
        let Some(name) = list.name(i) else { continue };
        let ctx = Context::open(&name)?;
        let ports = ctx.active_ports(sysfs, tuning)?;
        if ports.is_empty() {
            continue;
        }
        devices.push(DeviceInfo {
            pci_path: sysfs.pci_path(&name),
            guid: list.guid(i),
            name,
            ports,
        });
    }
    Ok(devices)
}

/// `discover` with the real /sys and the NCCL_IB_* environment.
pub fn discover_system() -> Result<Vec<DeviceInfo>> {
    discover(&Sysfs::default(), &QpTuning::from_env()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_codes_convert_both_ways() {
        assert_eq!(mtu_bytes(1), 256);
        assert_eq!(mtu_bytes(5), 4096);
        assert_eq!(mtu_bytes(0), 0);
        assert_eq!(mtu_bytes(6), 0);
        assert_eq!(mtu_code(1024), Some(3));
        assert_eq!(mtu_code(4096), Some(5));
        assert_eq!(mtu_code(1500), None);
    }

    #[test]
    fn attr_speed_fallback() {
        assert_eq!(speed_from_attr(2, 32), 100_000); // 4X EDR
        assert_eq!(speed_from_attr(1, 4), 10_000); // 1X QDR
        assert_eq!(speed_from_attr(2, 64), 200_000); // 4X HDR
    }
}
