//! RDMA devices offered to NCCL (feature `verbs`): every active port of each verbs device that
//! NCCL_IB_HCA selects, with its fabricId; used instead of TCP interfaces when any exists.

use std::net::IpAddr;

use super::devices::{intern, Device, DeviceKind, Properties, PTR_HOST};
use crate::config::{HcaList, SiteConfig, TransportKind};
use crate::transport::verbs::{discover, QpTuning, Sysfs, VerbsDomain};
use crate::transport::{NetError, NetResult};

/// RDMA ports as plugin devices; their bootstrap sockets use `boot_ip`.
pub fn verbs_devices(cfg: &SiteConfig, boot_ip: IpAddr) -> NetResult<Vec<Device>> {
    let tuning = QpTuning::from_env().map_err(|e| NetError::invalid_argument(e.to_string()))?;
    let found = discover(&Sysfs::default(), &tuning)
        .map_err(|e| NetError::system(format!("RDMA device discovery: {e}")))?;
    let hca = match std::env::var("NCCL_IB_HCA")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        Some(v) => Some(
            HcaList::parse(&v, cfg.fabric.hca_third_field, cfg.fabric.max_rails)
                .map_err(|e| NetError::invalid_argument(format!("NCCL_IB_HCA: {e}")))?,
        ),
        None => None,
    };
    let mut out = Vec::new();
    for dev in &found {
        for port in &dev.ports {
            let fabric = match &hca {
                Some(list) => match list.select(&dev.name, u32::from(port.port)) {
                    Some(sel) => sel.fabric.map(|f| f.id),
                    None => continue,
                },
                None => None,
            };
            if port.gid.is_none() && port.lid == 0 {
                tracing::warn!(target: "dqplb::init", "{} port {}: no usable GID, skipped", dev.name, port.port);
                continue;
            }
            let domain = VerbsDomain::open(dev, port.port, tuning)
                .map_err(|e| NetError::system(format!("opening {}: {e}", dev.name)))?;
            out.push(Device {
                kind: DeviceKind::Verbs {
                    ip: boot_ip,
                    domain,
                },
                fabric_id: fabric.unwrap_or(cfg.tcp.fabric_id),
                props: Properties {
                    name: intern(&dev.name),
                    pci_path: dev.pci_path.as_ref().map(|p| intern(&p.to_string_lossy())),
                    guid: dev.guid,
                    ptr_support: PTR_HOST,
                    reg_is_global: 0,
                    speed_mbps: port.speed_mbps.min(i32::MAX as u32) as i32,
                    port: i32::from(port.port),
                    latency_us: 0.0,
                    max_comms: 65536,
                    max_recvs: crate::transport::slots::MAX_RECVS as i32,
                },
            });
        }
    }
    Ok(out)
}

/// The device list init publishes: RDMA ports when the mode allows and any exist, else `tcp`.
pub fn choose_devices(cfg: &SiteConfig, tcp: Vec<Device>) -> NetResult<Vec<Device>> {
    let mode = cfg.fabric.transport;
    if mode == TransportKind::Tcp {
        return Ok(tcp);
    }
    let boot = tcp.iter().find_map(|d| match d.kind {
        DeviceKind::Tcp { ip } => Some(ip),
        _ => None,
    });
    let Some(boot) = boot else {
        if mode == TransportKind::Verbs {
            return Err(NetError::invalid_argument(
                "fabric.transport = verbs: no TCP interface for the QP bootstrap (NCCL_SOCKET_IFNAME)",
            ));
        }
        return Ok(tcp);
    };
    let verbs = verbs_devices(cfg, boot)?;
    if verbs.is_empty() {
        if mode == TransportKind::Verbs {
            return Err(NetError::system(
                "fabric.transport = verbs (NCCL_DQPLB_TRANSPORT) but no active RDMA port was found (or NCCL_IB_HCA selects none)",
            ));
        }
        tracing::info!(target: "dqplb::init", "no RDMA devices: using TCP");
        return Ok(tcp);
    }
    Ok(verbs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_rdma_tcp_devices_stay() {
        // on hosts without RDMA (CI) auto mode keeps the TCP list unchanged
        let cfg = SiteConfig::default();
        let tcp = super::super::devices::tcp_devices(Some("=lo"), 0).unwrap();
        let has_rdma = !discover(&Sysfs::default(), &QpTuning::default())
            .unwrap()
            .is_empty();
        if has_rdma {
            eprintln!("SKIPPED: this host has RDMA devices");
            return;
        }
        let chosen = choose_devices(&cfg, tcp.clone()).unwrap();
        assert_eq!(chosen, tcp);
    }
}
