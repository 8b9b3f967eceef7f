//! RDMA devices offered to NCCL (feature `verbs`): every usable active port of each verbs device
//! that NCCL_IB_HCA selects, with its fabricId; used instead of TCP interfaces when any exists.

use std::net::IpAddr;

use super::devices::{intern, Device, DeviceKind, Properties};
use dqplb_config::{HcaList, SiteConfig, TransportKind};
use dqplb_transport::verbs::{
    discover_report, ib_disabled_from_env, DeviceLimits, Discovery, QpTuning, Sysfs, VerbsDomain,
};
use dqplb_transport::{NetError, NetResult};

/// maxComms of an RDMA device from its limits. Every comm NCCL opens on the device (either side
/// of a connection) holds one control QP plus the data QPs of its class plan, and two CQs (send
/// and receive). So the device carries at most `max_qp / (1 + largest data-QP count)` comms, and
/// at most `max_cq / 2`; the smaller of the two, never under 1 and never above i32::MAX.
pub fn max_comms(limits: DeviceLimits, largest_data_qps: u32) -> i32 {
    let by_qp = limits.max_qp / largest_data_qps.saturating_add(1);
    let by_cq = limits.max_cq / 2;
    by_qp.min(by_cq).clamp(1, i32::MAX as u32) as i32
}

/// What the RDMA scan found: usable ports; no RDMA at all (why: TCP is then the visible
/// choice); or RDMA devices (present, or named by NCCL_IB_HCA) of which none is usable, with each
/// device and why.
enum Scan {
    Devices(Vec<Device>),
    NoRdma(String),
    Unusable(Vec<String>),
}

/// RDMA device names the kernel lists (/sys/class/infiniband), sorted; empty without any.
fn kernel_rdma_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The NCCL_IB_HCA entries that name devices to use and match no TCP interface of this host
/// (`=lo::3:1` only sets lo's rail): these name RDMA devices.
fn hca_rdma_entries<'a>(hca: Option<&'a HcaList>, tcp_names: &[String]) -> Vec<&'a str> {
    let Some(list) = hca.filter(|l| !l.exclude) else {
        return Vec::new();
    };
    list.entries
        .iter()
        .filter(|e| {
            !tcp_names.iter().any(|t| {
                if list.exact {
                    *t == e.name
                } else {
                    t.starts_with(e.name.as_str())
                }
            })
        })
        .map(|e| e.name.as_str())
        .collect()
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

/// RDMA ports as plugin devices; their bootstrap sockets use `boot_ip`. With some usable, each
/// device or port left out gets one WARN; with none, `Unusable` names every device (those the
/// kernel lists and those NCCL_IB_HCA names) and why, unless there is no RDMA at all.
fn scan(
    cfg: &SiteConfig,
    hca: Option<&HcaList>,
    tcp_names: &[String],
    boot_ip: IpAddr,
) -> NetResult<Scan> {
    if ib_disabled_from_env().map_err(|e| NetError::invalid_argument(e.to_string()))? {
        return Ok(Scan::NoRdma("NCCL_IB_DISABLE=1".to_string()));
    }
    let mut tuning = QpTuning::from_env().map_err(|e| NetError::invalid_argument(e.to_string()))?;
    if let Some(tc) = site_control_tc(
        std::env::var("NCCL_IB_FIFO_TC").ok().as_deref(),
        cfg.fabric.control_traffic_class,
    ) {
        tuning.fifo_traffic_class = tc;
    }
    let named = hca_rdma_entries(hca, tcp_names);
    let kernel = kernel_rdma_names();
    if kernel.is_empty() && named.is_empty() {
        // libibverbs finds its devices through the same sysfs class: nothing to open (dlopen
        // only, to say why when the library is missing too; no verbs call before fork::prepare).
        let why = match dqplb_transport::verbs::sys::verbs() {
            Err(e @ dqplb_transport::verbs::sys::LoadError::NotLoadable(_)) => {
                format!("no RDMA device found; {e}")
            }
            _ => "no RDMA device found".to_string(),
        };
        return Ok(Scan::NoRdma(why));
    }
    // Each device left out, and why ("mlx5_0 port 1: no usable GID and no LID").
    let mut why: Vec<String> = Vec::new();
    // before any device is opened: ibv_fork_init must precede every registration
    dqplb_transport::verbs::fork::prepare();
    let (found, skipped) = match discover_report(&Sysfs::default(), &tuning) {
        Ok(Discovery::Found { devices, skipped }) => (devices, skipped),
        Ok(Discovery::NoLibrary(e)) => {
            let e = format!("libibverbs.so.1 is not loadable ({e})");
            if kernel.is_empty() && named.is_empty() {
                return Ok(Scan::NoRdma(e));
            }
            why.extend(kernel.iter().map(|d| format!("{d}: {e}")));
            why.extend(
                named
                    .iter()
                    .filter(|n| !kernel.iter().any(|k| k == *n))
                    .map(|n| format!("{n} (NCCL_IB_HCA): {e}")),
            );
            return Ok(Scan::Unusable(why));
        }
        Err(e) if kernel.is_empty() && named.is_empty() => {
            return Ok(Scan::NoRdma(format!("RDMA device discovery: {e}")))
        }
        Err(e) => return Err(NetError::system(format!("RDMA device discovery: {e}"))),
    };
    for s in &skipped {
        why.push(s.to_string());
    }
    let largest_qps = cfg.plans().iter().map(|p| p.qps).max().unwrap_or(1);
    let mut out = Vec::new();
    for dev in &found {
        let comms = max_comms(dev.limits, largest_qps);
        for port in &dev.ports {
            let fabric = match hca {
                Some(list) => match list.select(&dev.name, u32::from(port.port)) {
                    Some(sel) => sel.fabric.map(|f| f.id),
                    None => {
                        why.push(format!(
                            "RDMA device {} port {}: not selected by NCCL_IB_HCA",
                            dev.name, port.port
                        ));
                        continue;
                    }
                },
                None => None,
            };
            if port.gid.is_none() && port.lid == 0 {
                why.push(format!(
                    "RDMA device {} port {} skipped: no usable GID and no LID",
                    dev.name, port.port
                ));
                continue;
            }
            let domain = match VerbsDomain::open(dev, port.port, tuning) {
                Ok(d) => d,
                Err(e) => {
                    why.push(format!(
                        "RDMA device {} port {} skipped: {e}",
                        dev.name, port.port
                    ));
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
    if !out.is_empty() {
        for w in &why {
            tracing::warn!(target: "dqplb::init", "{w}");
        }
        return Ok(Scan::Devices(out));
    }
    // Devices the kernel lists that discovery left out without a word: no active port.
    for k in &kernel {
        if !found.iter().any(|d| d.name == *k) && !skipped.iter().any(|s| s.device == *k) {
            why.push(format!("RDMA device {k}: no active port"));
        }
    }
    // NCCL_IB_HCA entries that match no device at all.
    for n in &named {
        let exists = |d: &str| match hca {
            Some(l) if l.exact => d == *n,
            _ => d.starts_with(n),
        };
        if !kernel.iter().any(|k| exists(k)) && !found.iter().any(|d| exists(&d.name)) {
            why.push(format!("{n}: named by NCCL_IB_HCA, no such RDMA device"));
        }
    }
    if why.is_empty() {
        return Ok(Scan::NoRdma("no RDMA device found".to_string()));
    }
    Ok(Scan::Unusable(why))
}

/// The device list init publishes and how the transport was chosen (for the init line).
/// `fabric.transport = tcp`, or no RDMA at all: the TCP devices. RDMA present (or named by
/// NCCL_IB_HCA) but none usable: init fails with the reason for each device, in every mode, so
/// that NCCL_NET=DQPLB fails the job and otherwise NCCL visibly falls back to its own
/// transports; nothing is downgraded to TCP silently. `fabric.transport = verbs` without RDMA
/// fails too, saying so.
pub(crate) fn choose_devices(
    cfg: &SiteConfig,
    hca: Option<&HcaList>,
    tcp: Vec<Device>,
) -> NetResult<(Vec<Device>, String)> {
    let mode = cfg.fabric.transport;
    if mode == TransportKind::Tcp {
        return Ok((tcp, "TCP (fabric.transport = tcp)".to_string()));
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
        return Ok((tcp, "TCP (no interface for an RDMA bootstrap)".to_string()));
    };
    let tcp_names: Vec<String> = tcp
        .iter()
        .map(|d| d.props.name.to_string_lossy().into_owned())
        .collect();
    match scan(cfg, hca, &tcp_names, boot)? {
        Scan::Devices(verbs) => Ok((verbs, "verbs (RDMA)".to_string())),
        Scan::NoRdma(why) if mode == TransportKind::Verbs => Err(NetError::system(format!(
            "fabric.transport = verbs (NCCL_DQPLB_TRANSPORT) but this host has no RDMA: {why}; init fails rather than run over TCP (set transport = tcp or auto for TCP)"
        ))),
        Scan::NoRdma(why) => Ok((tcp, format!("TCP ({why})"))),
        Scan::Unusable(why) => Err(NetError::system(format!(
            "no usable RDMA device ({} {}): {}; init fails rather than fall back to TCP (set NCCL_DQPLB_TRANSPORT=tcp to use TCP)",
            why.len(),
            if why.len() == 1 { "reason" } else { "reasons" },
            why.join("; ")
        ))),
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
        let (chosen, how) = choose_devices(&cfg, None, tcp.clone()).unwrap();
        assert_eq!(chosen, tcp);
        assert!(how.starts_with("TCP (no RDMA device found"), "{how}");
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
