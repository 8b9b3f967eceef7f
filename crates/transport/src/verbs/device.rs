//! RDMA device discovery and the device context: lists verbs devices (none = an empty list, not an
//! error), describes their active ports (link layer, speed, MTU, chosen GID) and opens contexts.

use super::error::{Result, VerbsError};
use super::sys::{self as ib, LoadError, Verbs};
use super::sysfs::{select_gid_with, GidEntry, GidKind, LinkLayer, Sysfs};
use super::tuning::QpTuning;
use std::ffi::CStr;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Arc;

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
    /// Device-wide resource limits (`ibv_device_attr`), for the plugin's maxComms.
    pub limits: DeviceLimits,
}

/// The `ibv_device_attr` limits the plugin sizes itself by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceLimits {
    /// `max_qp` (negative values reported as 0).
    pub max_qp: u32,
    /// `max_cq` (negative values reported as 0).
    pub max_cq: u32,
}

/// A device or port discovery left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub device: String,
    /// None when the whole device failed (open or query).
    pub port: Option<u8>,
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(p) => write!(
                f,
                "RDMA device {} port {p} skipped: {}",
                self.device, self.reason
            ),
            None => write!(f, "RDMA device {} skipped: {}", self.device, self.reason),
        }
    }
}

/// What discovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovery {
    /// libibverbs.so.1 could not be loaded (the text says why): no RDMA at all.
    NoLibrary(String),
    /// Usable devices (possibly none) and what was left out.
    Found {
        devices: Vec<DeviceInfo>,
        skipped: Vec<Skipped>,
    },
}

impl Discovery {
    /// The usable devices (empty unless `Found`).
    pub fn devices(&self) -> &[DeviceInfo] {
        match self {
            Discovery::Found { devices, .. } => devices,
            _ => &[],
        }
    }

    /// Consumes the result into its usable devices.
    pub(crate) fn into_devices(self) -> Vec<DeviceInfo> {
        match self {
            Discovery::Found { devices, .. } => devices,
            _ => Vec::new(),
        }
    }
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

/// The loaded function table, or the error every verbs call reports without it.
pub(crate) fn lib() -> Result<&'static Verbs> {
    ib::verbs().map_err(VerbsError::Library)
}

/// The `ibv_get_device_list` result, freed on drop.
struct DeviceList {
    v: &'static Verbs,
    list: NonNull<*mut ib::ibv_device>,
    len: usize,
}

impl DeviceList {
    /// None when the host has no RDMA support at all (NULL list with ENOSYS).
    fn get(v: &'static Verbs) -> Result<Option<DeviceList>> {
        let mut n: i32 = 0;
        // SAFETY: `n` is a valid out-pointer; the returned array is freed in Drop.
        let raw = unsafe { (v.get_device_list)(&mut n) };
        match NonNull::new(raw) {
            Some(list) => Ok(Some(DeviceList {
                v,
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
        let name = unsafe { (self.v.get_device_name)(dev) };
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
            Some(dev) => u64::from_be(unsafe { (self.v.get_device_guid)(dev) }),
            None => 0,
        }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed exactly once; opened
        // contexts stay valid after the list is freed (libibverbs contract).
        unsafe { (self.v.free_device_list)(self.list.as_ptr()) }
    }
}

/// An open device (`ibv_context`), closed when the last Arc drops.
pub struct Context {
    v: &'static Verbs,
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
        let v = lib()?;
        let list = DeviceList::get(v)?
            .ok_or_else(|| VerbsError::invalid(format!("RDMA device {name}: no RDMA support")))?;
        let index = (0..list.len)
            .find(|&i| list.name(i).as_deref() == Some(name))
            .ok_or_else(|| VerbsError::invalid(format!("no RDMA device named {name}")))?;
        let dev = list
            .device(index)
            .ok_or_else(|| VerbsError::invalid(format!("RDMA device {name} vanished")))?;
        // SAFETY: `dev` is a live entry of `list`, which outlives this call.
        let raw = unsafe { (v.open_device)(dev) };
        let raw = NonNull::new(raw).ok_or_else(|| VerbsError::last_os("ibv_open_device", name))?;
        Ok(Arc::new(Context {
            v,
            raw,
            name: name.to_string(),
        }))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The function table this context was opened through.
    pub(crate) fn verbs(&self) -> &'static Verbs {
        self.v
    }

    pub(crate) fn as_ptr(&self) -> *mut ib::ibv_context {
        self.raw.as_ptr()
    }

    pub(crate) fn query_device(&self) -> Result<ib::ibv_device_attr> {
        // SAFETY: ibv_device_attr is plain old data; all-zero is a valid value.
        let mut attr: ib::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context and a valid out-pointer.
        let rc = unsafe { (self.v.query_device)(self.as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(VerbsError::from_rc("ibv_query_device", &self.name, rc));
        }
        Ok(attr)
    }

    pub(crate) fn query_port(&self, port: u8) -> Result<ib::ibv_port_attr> {
        // Zeroed in full: the exported ibv_query_port fills only the compat prefix (as verbs.h's
        // inline fallback and NCCL's wrapper also zero it first).
        let mut attr = ib::ibv_port_attr::default();
        // SAFETY: live context and a valid out-pointer at least as large as the compat struct.
        let rc = unsafe { (self.v.query_port)(self.as_ptr(), port, &mut attr) };
        if rc != 0 {
            return Err(VerbsError::from_rc("ibv_query_port", &self.name, rc));
        }
        Ok(attr)
    }

    /// Reads GID `index` of `port` through verbs.
    pub(crate) fn query_gid(&self, port: u8, index: u32) -> Result<[u8; 16]> {
        let mut gid = ib::ibv_gid { raw: [0; 16] };
        let idx = i32::try_from(index).map_err(|_| VerbsError::invalid("GID index too large"))?;
        // SAFETY: live context and a valid out-pointer.
        let rc = unsafe { (self.v.query_gid)(self.as_ptr(), port, idx, &mut gid) };
        if rc != 0 {
            return Err(VerbsError::from_rc("ibv_query_gid", &self.name, rc));
        }
        // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
        Ok(unsafe { gid.raw })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child object (PD, CQ, QP, MR) holds an Arc to this context, so none is
        // alive here; the context is closed exactly once.
        unsafe {
            (self.v.close_device)(self.raw.as_ptr());
        }
    }
}

/// Port facts discovery reads through verbs (`ibv_port_attr`, reduced).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RawPort {
    pub active: bool,
    pub link_layer: u8,
    /// `ibv_mtu` code.
    pub active_mtu: u32,
    pub lid: u16,
    pub active_width: u8,
    pub active_speed: u8,
}

/// What discovery asks of one opened device (real verbs, or a fake in tests).
pub(crate) trait OpenedDevice {
    fn limits_and_ports(&self) -> Result<(DeviceLimits, u8)>;
    fn port(&self, port: u8) -> Result<RawPort>;
    fn gid(&self, port: u8, index: u32) -> Result<[u8; 16]>;
}

/// The devices discovery walks (real verbs, or a fake in tests).
pub(crate) trait DeviceSource {
    /// (name, node GUID) of every device; None when the host has no RDMA support.
    fn list(&self) -> Result<Option<Vec<(String, u64)>>>;
    fn open(&self, name: &str) -> Result<Box<dyn OpenedDevice>>;
}

impl OpenedDevice for Context {
    fn limits_and_ports(&self) -> Result<(DeviceLimits, u8)> {
        let a = self.query_device()?;
        let limits = DeviceLimits {
            max_qp: u32::try_from(a.max_qp).unwrap_or(0),
            max_cq: u32::try_from(a.max_cq).unwrap_or(0),
        };
        Ok((limits, a.phys_port_cnt))
    }

    fn port(&self, port: u8) -> Result<RawPort> {
        let pa = self.query_port(port)?;
        Ok(RawPort {
            active: pa.state == ib::IBV_PORT_ACTIVE,
            link_layer: pa.link_layer,
            active_mtu: pa.active_mtu,
            lid: pa.lid,
            active_width: pa.active_width,
            active_speed: pa.active_speed,
        })
    }

    fn gid(&self, port: u8, index: u32) -> Result<[u8; 16]> {
        self.query_gid(port, index)
    }
}

/// A context opened for discovery (closed when dropped).
struct Opened(Arc<Context>);

impl OpenedDevice for Opened {
    fn limits_and_ports(&self) -> Result<(DeviceLimits, u8)> {
        self.0.limits_and_ports()
    }

    fn port(&self, port: u8) -> Result<RawPort> {
        OpenedDevice::port(&*self.0, port)
    }

    fn gid(&self, port: u8, index: u32) -> Result<[u8; 16]> {
        self.0.query_gid(port, index)
    }
}

/// The host's devices through the loaded libibverbs.
struct SystemDevices(&'static Verbs);

impl DeviceSource for SystemDevices {
    fn list(&self) -> Result<Option<Vec<(String, u64)>>> {
        let Some(list) = DeviceList::get(self.0)? else {
            return Ok(None);
        };
        Ok(Some(
            (0..list.len)
                .filter_map(|i| list.name(i).map(|n| (n, list.guid(i))))
                .collect(),
        ))
    }

    fn open(&self, name: &str) -> Result<Box<dyn OpenedDevice>> {
        Ok(Box::new(Opened(Context::open(name)?)))
    }
}

/// One port's facts; None when it is not active. Errors name what failed on this port.
fn port_info(
    dev: &dyn OpenedDevice,
    name: &str,
    port: u8,
    sysfs: &Sysfs,
    tuning: &QpTuning,
) -> Result<Option<PortInfo>> {
    let pa = dev.port(port)?;
    if !pa.active {
        return Ok(None);
    }
    let link_layer = match pa.link_layer {
        ib::IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
        ib::IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
        _ => sysfs
            .link_layer(name, port)
            .unwrap_or(LinkLayer::Unspecified),
    };
    let speed_mbps = sysfs
        .port_rate_mbps(name, port)
        .unwrap_or_else(|| speed_from_attr(pa.active_width, pa.active_speed));
    let table = sysfs.gid_table(name, port).unwrap_or_default();
    let forced = if link_layer == LinkLayer::InfiniBand {
        None // as NCCL: NCCL_IB_GID_INDEX applies to RoCE ports only
    } else {
        tuning.gid_index
    };
    let gid = match forced {
        // sysfs unreadable: trust the forced index and ask verbs for its value
        Some(index) if table.is_empty() => Some(GidEntry {
            index,
            gid: dev.gid(port, index)?,
            kind: GidKind::Unknown,
        }),
        _ => select_gid_with(&table, link_layer, forced, &tuning.gid_policy)?,
    };
    Ok(Some(PortInfo {
        port,
        link_layer,
        speed_mbps,
        active_mtu: mtu_bytes(pa.active_mtu),
        lid: pa.lid,
        gid,
    }))
}

/// Walks `source`: a device that fails to open or query, or a port that fails (e.g. lacks the
/// forced GID index), is recorded in `skipped` and the walk goes on.
pub(crate) fn discover_from(
    source: &dyn DeviceSource,
    sysfs: &Sysfs,
    tuning: &QpTuning,
) -> Result<Discovery> {
    let Some(list) = source.list()? else {
        return Ok(Discovery::Found {
            devices: Vec::new(),
            skipped: Vec::new(),
        });
    };
    let mut devices = Vec::new();
    let mut skipped = Vec::new();
    let mut skip = |device: &str, port: Option<u8>, e: VerbsError| {
        skipped.push(Skipped {
            device: device.to_string(),
            port,
            reason: e.to_string(),
        })
    };
    for (name, guid) in list {
        let dev = match source.open(&name) {
            Ok(d) => d,
            Err(e) => {
                skip(&name, None, e);
                continue;
            }
        };
        let (limits, n_ports) = match dev.limits_and_ports() {
            Ok(x) => x,
            Err(e) => {
                skip(&name, None, e);
                continue;
            }
        };
        let mut ports = Vec::new();
        for port in 1..=n_ports {
            match port_info(dev.as_ref(), &name, port, sysfs, tuning) {
                Ok(Some(p)) => ports.push(p),
                Ok(None) => {}
                Err(e) => skip(&name, Some(port), e),
            }
        }
        if ports.is_empty() {
            continue;
        }
        devices.push(DeviceInfo {
            pci_path: sysfs.pci_path(&name),
            guid,
            name,
            ports,
            limits,
        });
    }
    Ok(Discovery::Found { devices, skipped })
}

/// Full discovery: NoLibrary when libibverbs.so.1 cannot be loaded, an error when it lacks a
/// symbol we need, else what `discover_from` finds on the host. Logs nothing.
pub fn discover_report(sysfs: &Sysfs, tuning: &QpTuning) -> Result<Discovery> {
    match ib::verbs() {
        Ok(v) => discover_from(&SystemDevices(v), sysfs, tuning),
        Err(LoadError::NotLoadable(why)) => Ok(Discovery::NoLibrary(why)),
        Err(e) => Err(VerbsError::Library(e)),
    }
}

/// Lists RDMA devices with at least one active port. No RDMA support (no libibverbs, no devices)
/// is `Ok(vec![])`; skipped devices and ports are logged as warnings. `sysfs` supplies rate, PCI
/// path and GID types; `tuning` the GID choice.
pub fn discover(sysfs: &Sysfs, tuning: &QpTuning) -> Result<Vec<DeviceInfo>> {
    let found = discover_report(sysfs, tuning)?;
    if let Discovery::Found { skipped, .. } = &found {
        for s in skipped {
            tracing::warn!(target: "dqplb::init", "{s}");
        }
    }
    Ok(found.into_devices())
}

/// `discover` with the real /sys and the NCCL_IB_* environment (nothing when NCCL_IB_DISABLE=1).
pub fn discover_system() -> Result<Vec<DeviceInfo>> {
    if super::tuning::ib_disabled_from_env()? {
        return Ok(Vec::new());
    }
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

    /// (port number, active) of a fake device.
    type FakePorts = Vec<(u8, bool)>;

    /// Fake devices by name: `None` = fails to open.
    struct FakeSource {
        devices: Vec<(&'static str, Option<FakePorts>)>,
    }

    struct FakeDevice {
        ports: FakePorts,
    }

    impl OpenedDevice for FakeDevice {
        fn limits_and_ports(&self) -> Result<(DeviceLimits, u8)> {
            let limits = DeviceLimits {
                max_qp: 1000,
                max_cq: 2000,
            };
            Ok((limits, self.ports.iter().map(|p| p.0).max().unwrap_or(0)))
        }

        fn port(&self, port: u8) -> Result<RawPort> {
            let active = self.ports.iter().any(|&(p, a)| p == port && a);
            Ok(RawPort {
                active,
                link_layer: ib::IBV_LINK_LAYER_ETHERNET,
                active_mtu: 5,
                lid: 0,
                active_width: 2,
                active_speed: 32,
            })
        }

        fn gid(&self, _port: u8, index: u32) -> Result<[u8; 16]> {
            Err(VerbsError::invalid(format!("fake has no GID {index}")))
        }
    }

    impl DeviceSource for FakeSource {
        fn list(&self) -> Result<Option<Vec<(String, u64)>>> {
            Ok(Some(
                self.devices
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (d.0.to_string(), i as u64 + 1))
                    .collect(),
            ))
        }

        fn open(&self, name: &str) -> Result<Box<dyn OpenedDevice>> {
            let (_, ports) = self
                .devices
                .iter()
                .find(|d| d.0 == name)
                .ok_or_else(|| VerbsError::invalid("unknown fake"))?;
            match ports {
                Some(p) => Ok(Box::new(FakeDevice { ports: p.clone() })),
                None => Err(VerbsError::Call {
                    op: "ibv_open_device",
                    device: name.to_string(),
                    errno: libc::EACCES,
                }),
            }
        }
    }

    /// A fake /sys with `(device, port, number of GID entries)`; entry i is ::ffff:10.0.port.i.
    fn fake_sysfs(tag: &str, ports: &[(&str, u8, u32)]) -> std::path::PathBuf {
        let root =
            std::env::temp_dir().join(format!("dqplb-discover-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for &(dev, port, n) in ports {
            let dir = root.join(format!("class/infiniband/{dev}/ports/{port}"));
            std::fs::create_dir_all(dir.join("gids")).expect("mkdir");
            std::fs::create_dir_all(dir.join("gid_attrs/types")).expect("mkdir");
            std::fs::write(dir.join("rate"), "100 Gb/sec (4X EDR)\n").expect("write");
            for i in 0..n {
                let gid = format!("0000:0000:0000:0000:0000:ffff:0a00:{port:02x}{i:02x}\n");
                std::fs::write(dir.join("gids").join(i.to_string()), gid).expect("write");
                std::fs::write(dir.join("gid_attrs/types").join(i.to_string()), "RoCE v2\n")
                    .expect("write");
            }
        }
        root
    }

    #[test]
    fn failing_devices_and_ports_are_skipped_not_fatal() {
        let root = fake_sysfs(
            "skip",
            &[
                ("mlx5_0", 1, 4),
                ("mlx5_1", 1, 2),
                ("mlx5_1", 2, 4),
                ("mlx5_3", 1, 4),
            ],
        );
        let source = FakeSource {
            devices: vec![
                ("mlx5_0", Some(vec![(1, true)])),
                ("mlx5_1", Some(vec![(1, true), (2, true)])),
                ("mlx5_2", None),                   // cannot be opened
                ("mlx5_3", Some(vec![(1, false)])), // no active port: silently left out
            ],
        };
        let tuning = QpTuning {
            gid_index: Some(3),
            ..QpTuning::default()
        };
        let found = discover_from(&source, &Sysfs::new(&root), &tuning).expect("discovery");
        let Discovery::Found { devices, skipped } = found else {
            panic!("expected devices, got {found:?}");
        };
        let names: Vec<(&str, Vec<u8>)> = devices
            .iter()
            .map(|d| (d.name.as_str(), d.ports.iter().map(|p| p.port).collect()))
            .collect();
        assert_eq!(names, vec![("mlx5_0", vec![1]), ("mlx5_1", vec![2])]);
        assert_eq!(devices[0].limits.max_qp, 1000);
        assert_eq!(devices[1].ports[0].gid.map(|g| g.index), Some(3));
        assert_eq!(devices[0].ports[0].speed_mbps, 100_000);
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert_eq!(
            (skipped[0].device.as_str(), skipped[0].port),
            ("mlx5_1", Some(1))
        );
        assert!(
            skipped[0].reason.contains("NCCL_IB_GID_INDEX"),
            "{}",
            skipped[0]
        );
        assert_eq!(
            (skipped[1].device.as_str(), skipped[1].port),
            ("mlx5_2", None)
        );
        let text = skipped[1].to_string();
        assert!(
            text.contains("mlx5_2") && text.contains("ibv_open_device"),
            "{text}"
        );
        let text = skipped[0].to_string();
        assert!(text.contains("mlx5_1 port 1"), "{text}");

        // with automatic GID choice every active port is usable
        let found =
            discover_from(&source, &Sysfs::new(&root), &QpTuning::default()).expect("discovery");
        let Discovery::Found { devices, skipped } = found else {
            panic!("expected devices");
        };
        assert_eq!(devices.iter().map(|d| d.ports.len()).sum::<usize>(), 3);
        assert_eq!(skipped.len(), 1, "only the device that cannot open");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn missing_library_is_no_rdma_not_an_error() {
        // whatever this host has, discover_report never fails for a missing library
        match discover_report(&Sysfs::default(), &QpTuning::default()) {
            Ok(Discovery::NoLibrary(why)) => assert!(!why.is_empty()),
            Ok(Discovery::Found { .. }) => {}
            Err(e) => panic!("discovery failed: {e}"),
        }
    }

    #[test]
    fn attr_speed_fallback() {
        assert_eq!(speed_from_attr(2, 32), 100_000); // 4X EDR
        assert_eq!(speed_from_attr(1, 4), 10_000); // 1X QDR
        assert_eq!(speed_from_attr(2, 64), 200_000); // 4X HDR
    }
}
