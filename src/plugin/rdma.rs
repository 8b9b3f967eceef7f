//! RDMA devices offered to NCCL (feature `verbs`): every usable active port of each verbs device
//! that NCCL_IB_HCA selects, with its fabricId; used instead of TCP interfaces when any exists.

use std::net::IpAddr;

use super::devices::{intern, Device, DeviceKind, Properties};
use dqplb_config::{HcaList, SiteConfig, TransportKind};
use dqplb_transport::verbs::{
    discover_report, ib_disabled_from_env, DeviceLimits, Discovery, QpTuning, Sysfs, VerbsDomain,
};
use dqplb_transport::{ErrorCode, NetError, NetResult};

/// maxComms of an RDMA device from its limits. Every comm NCCL opens on the device (either side
/// of a connection) holds one control QP plus the data QPs of its class plan, and two CQs (send
/// and receive). So the device carries at most `max_qp / (1 + largest data-QP count)` comms, and
/// at most `max_cq / 2`; the smaller of the two, never under 1 and never above i32::MAX.
pub fn max_comms(limits: DeviceLimits, largest_data_qps: u32) -> i32 {
    let by_qp = limits.max_qp / largest_data_qps.saturating_add(1);
    let by_cq = limits.max_cq / 2;
    by_qp.min(by_cq).clamp(1, i32::MAX as u32) as i32
}

/// Why auto mode offers no RDMA device (logged once at INFO), or the usable RDMA ports.
enum Scan {
    Devices(Vec<Device>),
    Nothing(String),
}

/// The control QP's traffic class from the site key `fabric.control-traffic-class` (`site`, -1 =
/// unset), unless the job's NCCL_IB_FIFO_TC (`fifo_env`) names one itself (0..=255), which wins.
fn site_control_tc(fifo_env: Option<&str>, site: i32) -> Option<u8> {
    let job_sets_it = fifo_env
        .and_then(|v| v.trim().parse::<i32>().ok())
        .is_some_and(|v| (0..=255).contains(&v));
    if job_sets_it {
        return None;
    }
    u8::try_from(site).ok()
}

/// RDMA ports as plugin devices; their bootstrap sockets use `boot_ip`. A device or port that
/// fails is skipped with one WARN naming it; `Nothing` says why there is no RDMA at all.
fn scan(cfg: &SiteConfig, boot_ip: IpAddr) -> NetResult<Scan> {
    if ib_disabled_from_env().map_err(|e| NetError::invalid_argument(e.to_string()))? {
        return Ok(Scan::Nothing(
            "NCCL_IB_DISABLE=1: no RDMA devices, TCP only".to_string(),
        ));
    }
    let mut tuning = QpTuning::from_env().map_err(|e| NetError::invalid_argument(e.to_string()))?;
    if let Some(tc) = site_control_tc(
        std::env::var("NCCL_IB_FIFO_TC").ok().as_deref(),
        cfg.fabric.control_traffic_class,
    ) {
        tuning.fifo_traffic_class = tc;
    }
    let hca = match std::env::var("NCCL_IB_HCA")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        // Lenient, as NCCL reads it; plugin::init already logged what NCCL would ignore.
        Some(v) => Some(
            HcaList::parse_lenient(v.trim(), cfg.fabric.hca_third_field, cfg.fabric.max_rails)
                .map_err(|e| NetError::invalid_argument(format!("NCCL_IB_HCA: {e}")))?
                .0,
        ),
        None => None,
    };
    // before any device is opened: ibv_fork_init must precede every registration
    dqplb_transport::verbs::fork::prepare();
    let (found, skipped) = match discover_report(&Sysfs::default(), &tuning) {
        Ok(Discovery::Found { devices, skipped }) => (devices, skipped),
        Ok(Discovery::NoLibrary(why)) => {
            return Ok(Scan::Nothing(format!(
                "libibverbs.so.1 not loadable ({why}): no RDMA devices, TCP only"
            )))
        }
        Err(e) => return Err(NetError::system(format!("RDMA device discovery: {e}"))),
    };
    for s in &skipped {
        tracing::warn!(target: "dqplb::init", "{s}");
    }
    let largest_qps = cfg.plans().iter().map(|p| p.qps).max().unwrap_or(1);
    let mut out = Vec::new();
    for dev in &found {
        let comms = max_comms(dev.limits, largest_qps);
        for port in &dev.ports {
            let fabric = match &hca {
                Some(list) => match list.select(&dev.name, u32::from(port.port)) {
                    Some(sel) => sel.fabric.map(|f| f.id),
                    None => continue,
                },
                None => None,
            };
            if port.gid.is_none() && port.lid == 0 {
                tracing::warn!(target: "dqplb::init", "RDMA device {} port {} skipped: no usable GID and no LID", dev.name, port.port);
                continue;
            }
            let domain = match VerbsDomain::open(dev, port.port, tuning) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(target: "dqplb::init", "RDMA device {} port {} skipped: {e}", dev.name, port.port);
                    continue;
                }
            };
            let caps = domain.caps();
            // one INFO line per device: what GPUDirect it offers and why not (net_ib decides the
            // same in ncclIbGetPhysProperties, NCCL 2.28.3 src/transport/net_ib.cc)
            tracing::info!(target: "dqplb::init", "{} port {}: pciPath {}; {}; registration cache shared by all comms (regIsGlobal 1), relaxed ordering {}",
                dev.name, port.port,
                dev.pci_path.as_ref().map_or("none (virtual device)".to_string(), |p| p.display().to_string()),
                caps.describe(&dev.name),
                if domain.pd().relaxed_ordering() { "on" } else { "off" });
            let ptr_support = caps.ptr_support();
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
                    ptr_support,
                    reg_is_global: 1,
                    speed_mbps: port.speed_mbps.min(i32::MAX as u32) as i32,
                    port: i32::from(port.port),
                    latency_us: 0.0,
                    max_comms: comms,
                    max_recvs: dqplb_transport::slots::MAX_RECVS as i32,
                },
            });
        }
    }
    if out.is_empty() {
        return Ok(Scan::Nothing("no RDMA devices: using TCP".to_string()));
    }
    Ok(Scan::Devices(out))
}

/// The device list init publishes: RDMA ports when the mode allows and any is usable, else `tcp`.
/// Only `fabric.transport = verbs` turns "no usable RDMA port" (or a failed discovery) into an
/// init error; auto mode logs why and keeps the TCP devices.
pub(crate) fn choose_devices(cfg: &SiteConfig, tcp: Vec<Device>) -> NetResult<Vec<Device>> {
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
    match scan(cfg, boot) {
        Ok(Scan::Devices(verbs)) => Ok(verbs),
        Ok(Scan::Nothing(why)) if mode == TransportKind::Verbs => Err(NetError::system(format!(
            "fabric.transport = verbs (NCCL_DQPLB_TRANSPORT) but no usable RDMA port (or NCCL_IB_HCA selects none): {why}"
        ))),
        Ok(Scan::Nothing(why)) => {
            tracing::info!(target: "dqplb::init", "{why}");
            Ok(tcp)
        }
        Err(e) if mode == TransportKind::Auto && e.code != ErrorCode::InvalidArgument => {
            tracing::warn!(target: "dqplb::init", "{}; using TCP", e.msg);
            Ok(tcp)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dqplb_transport::verbs::discover;

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

    #[test]
    fn max_comms_follows_device_limits() {
        let l = |max_qp, max_cq| DeviceLimits { max_qp, max_cq };
        // mlx5-like: 262144 QPs, 16M CQs, 16 data QPs per comm -> 262144 / 17
        assert_eq!(max_comms(l(262_144, 16_777_216), 16), 15_420);
        // CQs are the tighter bound
        assert_eq!(max_comms(l(262_144, 1000), 4), 500);
        // never zero, never above i32::MAX
        assert_eq!(max_comms(l(3, 100), 4), 1);
        assert_eq!(max_comms(l(0, 0), 1), 1);
        assert_eq!(max_comms(l(u32::MAX, u32::MAX), 0), i32::MAX);
        // rxe: 1048576 QPs and 1048576 CQs with the default 4 data QPs
        assert_eq!(max_comms(l(1_048_576, 1_048_576), 4), 209_715);
    }
}

#[cfg(test)]
mod control_tc_tests {
    use super::site_control_tc;

    #[test]
    fn the_jobs_fifo_tc_wins_then_the_site_key() {
        assert_eq!(site_control_tc(None, 224), Some(224));
        assert_eq!(site_control_tc(None, -1), None);
        assert_eq!(site_control_tc(Some("96"), 224), None);
        // NCCL's -1 means "not set": the site key applies.
        assert_eq!(site_control_tc(Some("-1"), 224), Some(224));
        assert_eq!(site_control_tc(Some(" 0 "), 224), None);
    }
}
