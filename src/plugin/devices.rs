//! The devices this plugin offers NCCL and their properties: RDMA devices when usable, otherwise
//! the TCP interfaces chosen by NCCL_SOCKET_IFNAME; strings are interned for NCCL's lifetime.

use std::ffi::{CStr, CString};
use std::net::IpAddr;
use std::sync::Mutex;

use dqplb_transport::tcp::iface;
use dqplb_transport::NetResult;

pub use dqplb_transport::gdr::{PTR_CUDA, PTR_DMABUF, PTR_HOST};

/// What the ffi layer copies into ncclNetProperties_v8_t.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Properties {
    pub name: &'static CStr,
    pub pci_path: Option<&'static CStr>,
    pub guid: u64,
    pub ptr_support: i32,
    pub reg_is_global: i32,
    pub speed_mbps: i32,
    pub port: i32,
    pub latency_us: f32,
    pub max_comms: i32,
    pub max_recvs: i32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DeviceKind {
    Tcp {
        ip: IpAddr,
    },
    /// An RDMA port; `ip` is the bootstrap address (from NCCL_SOCKET_IFNAME) for QP exchange.
    #[cfg(feature = "verbs")]
    Verbs {
        ip: IpAddr,
        domain: std::sync::Arc<dqplb_transport::verbs::VerbsDomain>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub kind: DeviceKind,
    pub fabric_id: u32,
    pub props: Properties,
}

/// Interns a string for the process lifetime (NCCL keeps the pointers it is given).
pub(crate) fn intern(s: &str) -> &'static CStr {
    static TABLE: Mutex<Vec<&'static CStr>> = Mutex::new(Vec::new());
    let clean: String = s.chars().filter(|c| *c != '\0').collect();
    let mut t = match TABLE.lock() {
        Ok(t) => t,
        Err(p) => p.into_inner(),
    };
    if let Some(found) = t.iter().find(|c| c.to_bytes() == clean.as_bytes()) {
        return found;
    }
    let leaked: &'static CStr =
        Box::leak(CString::new(clean).unwrap_or_default().into_boxed_c_str());
    t.push(leaked);
    leaked
}

/// FNV-1a of the name: a stable guid for devices without hardware identity.
fn name_guid(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn pci_path_of_netdev(name: &str) -> Option<&'static CStr> {
    let p = std::fs::canonicalize(format!("/sys/class/net/{name}/device")).ok()?;
    Some(intern(&p.to_string_lossy()))
}

/// TCP devices: one per selected interface.
pub(crate) fn tcp_devices(ifname_filter: Option<&str>, fabric_id: u32) -> NetResult<Vec<Device>> {
    Ok(iface::find(ifname_filter)?
        .into_iter()
        .map(|i| Device {
            kind: DeviceKind::Tcp { ip: i.addr },
            fabric_id,
            props: Properties {
                name: intern(&i.name),
                pci_path: pci_path_of_netdev(&i.name),
                guid: name_guid(&i.name),
                ptr_support: PTR_HOST,
                reg_is_global: 0,
                speed_mbps: i.speed_mbps.min(i32::MAX as u32) as i32,
                port: 0,
                latency_us: 0.0,
                max_comms: 65536,
                max_recvs: dqplb_transport::slots::MAX_RECVS as i32,
            },
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_reuses_pointers() {
        let a = intern("eth0");
        let b = intern("eth0");
        assert_eq!(a.as_ptr(), b.as_ptr());
        assert_eq!(intern("a\0b").to_bytes(), b"ab");
    }

    #[test]
    fn loopback_device_properties() {
        let d = tcp_devices(Some("=lo"), 5).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].props.name.to_bytes(), b"lo");
        assert_eq!(d[0].props.ptr_support, PTR_HOST);
        assert_eq!(d[0].props.max_recvs, 8);
        assert_eq!(d[0].fabric_id, 5);
        assert!(d[0].props.speed_mbps > 0);
    }
}
