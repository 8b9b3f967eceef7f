//! `dqplb devices`: every RDMA device and port from sysfs (state, rate, link layer, MTU, GIDs),
//! the NCCL_IB_HCA fabric id, and whether the plugin would use the port and why not.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use dqplb_config::load::{load_from_process_env, load_path, process_env_vars};
use dqplb_config::{HcaList, SiteConfig, TransportKind};
use dqplb_transport::verbs::{select_gid_with, GidKind, GidPolicy, LinkLayer, Sysfs};

/// The exit status line under `dqplb devices --help`.
pub(crate) const EXIT: &str =
    "exit status: 0 listed (also with no RDMA device), 2 bad config or NCCL_IB_HCA";

/// Options of `dqplb devices`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub(crate) struct DevicesArgs {
    /// Read FILE instead of NCCL_DQPLB_CONF / /etc/nccl-dqplb.toml / the built-in default
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// An NCCL_IB_HCA value (default: the NCCL_IB_HCA environment variable)
    #[arg(long, value_name = "STRING")]
    hca: Option<String>,
    /// Stands for /sys (a test tree mirrors the real paths below it)
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// One JSON document instead of the table
    #[arg(long)]
    json: bool,
}

/// One populated GID entry.
#[derive(Debug, Serialize)]
struct Gid {
    index: u32,
    /// "RoCE v2", "IB/RoCE v1" or "unknown".
    kind: &'static str,
    gid: String,
    /// The IPv4 or IPv6 address the GID carries.
    address: String,
    /// The network device the entry belongs to (RoCE), from gid_attrs/ndevs.
    netdev: Option<String>,
}

/// One port and the plugin's verdict on it.
#[derive(Debug, Serialize)]
struct Port {
    device: String,
    port: u8,
    state: String,
    phys_state: String,
    link_layer: &'static str,
    rate_gbps: Option<f64>,
    /// The network device's MTU (RoCE); sysfs has no IB MTU (ibv_devinfo shows it).
    netdev_mtu: Option<u32>,
    gids: Vec<Gid>,
    /// The GID index the plugin would pick (NCCL's rules: IPv4 RoCE v2 first).
    selected_gid: Option<u32>,
    fabric_id: Option<u32>,
    dc: Option<u32>,
    rail: Option<u32>,
    used: bool,
    /// Why not, when not used.
    reason: Option<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    sysfs: String,
    nccl_ib_hca: Option<String>,
    transport: &'static str,
    ports: Vec<Port>,
    /// Without a usable RDMA port: the interfaces the TCP transport would use.
    tcp_interfaces: Vec<String>,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// `4: ACTIVE` -> `ACTIVE`.
fn state_word(s: Option<String>) -> String {
    s.map(|s| {
        s.split_once(':')
            .map_or(s.clone(), |(_, w)| w.trim().to_string())
    })
    .unwrap_or_else(|| "unknown".into())
}

fn sorted_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn address(gid: &[u8; 16]) -> String {
    let a = Ipv6Addr::from(*gid);
    a.to_ipv4_mapped()
        .map_or_else(|| a.to_string(), |v4| v4.to_string())
}

/// The config, the NCCL_IB_HCA list and the sysfs tree, as the plugin would read them.
fn ports(root: &Path, cfg: &SiteConfig, hca: Option<&HcaList>, ib_disabled: bool) -> Vec<Port> {
    let sysfs = Sysfs::new(root);
    let ib = root.join("class/infiniband");
    let mut out = Vec::new();
    for dev in sorted_names(&ib) {
        let mut port_nums: Vec<u8> = sorted_names(&ib.join(&dev).join("ports"))
            .iter()
            .filter_map(|p| p.parse().ok())
            .collect();
        port_nums.sort_unstable();
        for p in port_nums {
            let pdir = ib.join(&dev).join("ports").join(p.to_string());
            let state = state_word(read(&pdir.join("state")));
            let phys_state = state_word(read(&pdir.join("phys_state")));
            let link = sysfs.link_layer(&dev, p).unwrap_or(LinkLayer::Unspecified);
            let table = sysfs.gid_table(&dev, p).unwrap_or_default();
            let gids: Vec<Gid> = table
                .iter()
                .map(|e| Gid {
                    index: e.index,
                    kind: match e.kind {
                        GidKind::RoceV2 => "RoCE v2",
                        GidKind::IbRoceV1 => "IB/RoCE v1",
                        GidKind::Unknown => "unknown",
                    },
                    gid: Ipv6Addr::from(e.gid).to_string(),
                    address: address(&e.gid),
                    netdev: read(&pdir.join("gid_attrs/ndevs").join(e.index.to_string())),
                })
                .collect();
            let netdev_mtu = gids
                .iter()
                .find_map(|g| g.netdev.as_ref())
                .and_then(|n| read(&root.join("class/net").join(n).join("mtu")))
                .and_then(|m| m.parse().ok());
            let selected_gid = select_gid_with(&table, link, None, &GidPolicy::default())
                .ok()
                .flatten()
                .map(|e| e.index);
            let selected = match hca {
                Some(list) => list.select(&dev, u32::from(p)),
                None => Some(dqplb_config::Selected {
                    port: u32::from(p),
                    entry: None,
                    fabric: None,
                }),
            };
            let fabric = selected.and_then(|s| s.fabric);
            let reason = if ib_disabled {
                Some("NCCL_IB_DISABLE is set: the plugin uses TCP".to_string())
            } else if cfg.fabric.transport == TransportKind::Tcp {
                Some("fabric.transport = \"tcp\" in the site config".to_string())
            } else if selected.is_none() {
                Some(match hca {
                    Some(l) if l.exclude => "excluded by NCCL_IB_HCA".to_string(),
                    _ => "not in NCCL_IB_HCA".to_string(),
                })
            } else if state != "ACTIVE" {
                Some(format!("port state {state}, not ACTIVE"))
            } else if link == LinkLayer::Ethernet && selected_gid.is_none() {
                Some("RoCE port without a populated GID".to_string())
            } else {
                None
            };
            out.push(Port {
                device: dev.clone(),
                port: p,
                state,
                phys_state,
                link_layer: match link {
                    LinkLayer::InfiniBand => "InfiniBand",
                    LinkLayer::Ethernet => "Ethernet",
                    LinkLayer::Unspecified => "unspecified",
                },
                rate_gbps: sysfs.port_rate_mbps(&dev, p).map(|m| f64::from(m) / 1000.0),
                netdev_mtu,
                gids,
                selected_gid,
                fabric_id: fabric.map(|f| f.id),
                dc: fabric.map(|f| f.dc),
                rail: fabric.map(|f| f.rail),
                used: reason.is_none(),
                reason,
            });
        }
    }
    out
}

/// The interfaces the TCP transport would take (NCCL_SOCKET_IFNAME rules), as "name addr".
fn tcp_interfaces() -> Vec<String> {
    let spec = std::env::var("NCCL_SOCKET_IFNAME").ok();
    match dqplb_transport::tcp::iface::find(spec.as_deref()) {
        Ok(v) => v
            .iter()
            .map(|i| format!("{} {} ({} Mb/s)", i.name, i.addr, i.speed_mbps))
            .collect(),
        Err(e) => vec![format!("none: {e}")],
    }
}

fn table(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# RDMA devices under {}/class/infiniband; NCCL_IB_HCA {}; fabric.transport {}",
        r.sysfs,
        r.nccl_ib_hca
            .as_deref()
            .map_or("unset (every device)".to_string(), |v| format!("'{v}'")),
        r.transport
    );
    if r.ports.is_empty() {
        let _ = writeln!(
            o,
            "no RDMA devices: the plugin will use its TCP transport over {}",
            if r.tcp_interfaces.is_empty() {
                "no interface".to_string()
            } else {
                r.tcp_interfaces.join(", ")
            }
        );
        return o;
    }
    let _ = writeln!(
        o,
        "{:<12} {:>4} {:<8} {:<8} {:<11} {:>8} {:>6} {:>6} {:>4} {:>4}  used",
        "device", "port", "state", "phys", "link", "rate", "mtu", "fabric", "dc", "rail"
    );
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |x| x.to_string());
    for p in &r.ports {
        let _ = writeln!(
            o,
            "{:<12} {:>4} {:<8} {:<8} {:<11} {:>8} {:>6} {:>6} {:>4} {:>4}  {}",
            p.device,
            p.port,
            p.state,
            p.phys_state,
            p.link_layer,
            p.rate_gbps.map_or("-".to_string(), |g| format!("{g}G")),
            opt(p.netdev_mtu),
            opt(p.fabric_id),
            opt(p.dc),
            opt(p.rail),
            match &p.reason {
                None => "yes".to_string(),
                Some(why) => format!("no: {why}"),
            }
        );
        for g in &p.gids {
            let _ = writeln!(
                o,
                "    gid {:>3} {:<10} {:<40} {}{}{}",
                g.index,
                g.kind,
                g.gid,
                g.address,
                g.netdev
                    .as_deref()
                    .map_or(String::new(), |n| format!(" on {n}")),
                if p.selected_gid == Some(g.index) {
                    "  <- selected"
                } else {
                    ""
                }
            );
        }
    }
    if !r.ports.iter().any(|p| p.used) {
        let _ = writeln!(
            o,
            "no usable RDMA port: the plugin will use its TCP transport over {}",
            r.tcp_interfaces.join(", ")
        );
    }
    o
}

/// `dqplb devices`; returns the exit code.
pub(crate) fn run(a: &DevicesArgs) -> i32 {
    let loaded = match &a.config {
        Some(p) => load_path(p, &process_env_vars()),
        None => load_from_process_env(),
    };
    let cfg = match loaded {
        Ok(l) => l.config,
        Err(e) => {
            eprintln!("dqplb devices: {e}");
            return 2;
        }
    };
    let hca_text = a
        .hca
        .clone()
        .or_else(|| std::env::var("NCCL_IB_HCA").ok())
        .filter(|s| !s.trim().is_empty());
    let hca = match &hca_text {
        Some(t) => match HcaList::parse(t, cfg.fabric.hca_third_field, cfg.fabric.max_rails) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("dqplb devices: {e}");
                return 2;
            }
        },
        None => None,
    };
    let ib_disabled = std::env::var("NCCL_IB_DISABLE").is_ok_and(|v| v.trim() == "1");
    let ports = ports(&a.sysfs_root, &cfg, hca.as_ref(), ib_disabled);
    let tcp = if ports.iter().any(|p| p.used) {
        Vec::new()
    } else {
        tcp_interfaces()
    };
    let report = Report {
        sysfs: a.sysfs_root.display().to_string(),
        nccl_ib_hca: hca_text,
        transport: cfg.fabric.transport.as_str(),
        ports,
        tcp_interfaces: tcp,
    };
    if a.json {
        match serde_json::to_string_pretty(&report) {
            // A closed pipe (`| head`) is not an error worth a panic.
            Ok(s) => {
                let _ = writeln!(std::io::stdout(), "{s}");
            }
            Err(e) => {
                eprintln!("dqplb devices: {e}");
                return 2;
            }
        }
    } else {
        let _ = write!(std::io::stdout(), "{}", table(&report));
    }
    0
}
