//! Read-only access to one RDMA device's DCQCN state: PCI function and netdev, mlx5 cc_params
//! (debugfs), ECN enables and congestion counters (sysfs), under configurable roots.

use super::names::{CC_PARAM_NAMES, COUNTER_NAMES};
use dqplb_config::dcqcn::DcqcnSection;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Where /sys and /sys/kernel/debug are; tests point both at fake trees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub sysfs: PathBuf,
    pub debugfs: PathBuf,
}

impl Roots {
    /// The real system: /sys and /sys/kernel/debug.
    pub fn system() -> Self {
        Roots {
            sysfs: PathBuf::from("/sys"),
            debugfs: PathBuf::from("/sys/kernel/debug"),
        }
    }

    pub fn new(sysfs: impl Into<PathBuf>, debugfs: impl Into<PathBuf>) -> Self {
        Roots {
            sysfs: sysfs.into(),
            debugfs: debugfs.into(),
        }
    }

    /// The section's `sysfs-root` / `debugfs-root`, each defaulting to the system path.
    pub fn from_section(section: &DcqcnSection) -> Self {
        let sys = Roots::system();
        Roots {
            sysfs: section.sysfs_root.clone().unwrap_or(sys.sysfs),
            debugfs: section.debugfs_root.clone().unwrap_or(sys.debugfs),
        }
    }

    /// /sys/class/infiniband
    pub fn infiniband(&self) -> PathBuf {
        self.sysfs.join("class/infiniband")
    }
}

/// One file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    Value(u64),
    /// Could not be read (missing, permission, no debugfs, not mlx5); never a failure.
    Unknown(String),
    /// Read, but not an unsigned decimal in range: says what was wrong.
    Garbage(String),
}

impl Reading {
    pub fn value(&self) -> Option<u64> {
        match self {
            Reading::Value(v) => Some(*v),
            _ => None,
        }
    }
}

/// Largest value of a 32-bit firmware field (cc_params, ECN enables).
pub(crate) const FIELD_MAX: u64 = u32::MAX as u64;
const READ_LIMIT: u64 = 64;

/// Parses sysfs/debugfs text: an unsigned decimal, optional surrounding whitespace, at most `max`.
pub(crate) fn parse_value(bytes: &[u8], max: u64) -> Reading {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(_) => return Reading::Garbage(format!("not text: {}", shown(bytes))),
    };
    let t = text.trim();
    if t.is_empty() {
        return Reading::Garbage("empty".to_string());
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return Reading::Garbage(format!("not a number: {}", shown(bytes)));
    }
    match t.parse::<u64>() {
        Ok(v) if v <= max => Reading::Value(v),
        _ => Reading::Garbage(format!("out of range (max {max}): {}", shown(bytes))),
    }
}

fn shown(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let t: String = s.trim().chars().take(24).collect();
    if s.trim().chars().count() > 24 {
        format!("{t:?}...")
    } else {
        format!("{t:?}")
    }
}

fn io_reason(e: &io::Error, what: &str) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => format!("{what} missing"),
        io::ErrorKind::PermissionDenied => format!("{what}: permission denied (needs root)"),
        _ => format!("{what}: {e}"),
    }
}

/// Reads one value file, at most a few bytes (debugfs reads query firmware; never write).
pub(crate) fn read_value(path: &Path, max: u64) -> Reading {
    let mut buf = Vec::with_capacity(READ_LIMIT as usize);
    let res = fs::File::open(path).and_then(|f| f.take(READ_LIMIT + 1).read_to_end(&mut buf));
    match res {
        Ok(_) if buf.len() as u64 > READ_LIMIT => {
            Reading::Garbage(format!("more than {READ_LIMIT} bytes: {}", shown(&buf)))
        }
        Ok(_) => parse_value(&buf, max),
        Err(e) => Reading::Unknown(io_reason(&e, "file")),
    }
}

/// Counters and line rate of one port.
#[derive(Debug, Clone, PartialEq)]
pub struct PortSnapshot {
    pub port: u32,
    /// From ports/<p>/rate ("100 Gb/sec (4X EDR)"), Mb/s.
    pub rate_mbps: Option<u64>,
    /// [`COUNTER_NAMES`] order.
    pub counters: Vec<(&'static str, Reading)>,
}

/// Everything read for one device.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceSnapshot {
    pub device: String,
    /// PCI function (basename of the device link), when it resolves.
    pub bdf: Option<String>,
    pub netdev: Option<String>,
    /// Kernel driver of the PCI function (basename of device/driver), when it resolves.
    pub driver: Option<String>,
    /// The cc_params directory read (for messages and fix commands).
    pub cc_dir: Option<PathBuf>,
    /// All 22 names in kernel order.
    pub cc_params: Vec<(&'static str, Reading)>,
    /// /sys/class/net/<netdev>/ecn, when the netdev is known.
    pub ecn_dir: Option<PathBuf>,
    /// ecn/roce_rp/enable/<0..7> and ecn/roce_np/enable/<0..7>.
    pub ecn_rp: Vec<Reading>,
    pub ecn_np: Vec<Reading>,
    pub ports: Vec<PortSnapshot>,
}

impl DeviceSnapshot {
    pub fn cc(&self, name: &str) -> Option<&Reading> {
        self.cc_params
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, r)| r)
    }
    /// Line rate of the first port that reports one, Mb/s.
    pub fn line_rate_mbps(&self) -> Option<u64> {
        self.ports.iter().find_map(|p| p.rate_mbps)
    }
}

/// RDMA device names under /sys/class/infiniband, sorted.
pub fn list_devices(roots: &Roots) -> Result<Vec<String>, String> {
    let dir = roots.infiniband();
    let entries = fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut out: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    out.sort();
    Ok(out)
}

fn link_basename(path: &Path) -> Option<String> {
    let real = fs::canonicalize(path).ok()?;
    real.file_name()?.to_str().map(str::to_string)
}

fn sorted_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|it| {
            it.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Reads the counters and line rate of every port of `dev`.
pub(crate) fn read_ports(roots: &Roots, dev: &str) -> Vec<PortSnapshot> {
    let ports_dir = roots.infiniband().join(dev).join("ports");
    let mut ports: Vec<u32> = sorted_names(&ports_dir)
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    ports.sort_unstable();
    ports
        .into_iter()
        .map(|port| {
            let pdir = ports_dir.join(port.to_string());
            let counters = COUNTER_NAMES
                .iter()
                .map(|c| (*c, read_value(&pdir.join("hw_counters").join(c), u64::MAX)))
                .collect();
            let rate_mbps = fs::read_to_string(pdir.join("rate"))
                .ok()
                .and_then(|s| parse_rate(&s));
            PortSnapshot {
                port,
                rate_mbps,
                counters,
            }
        })
        .collect()
}

/// "100 Gb/sec (4X EDR)" -> 100000 Mb/s.
pub(crate) fn parse_rate(text: &str) -> Option<u64> {
    let mut it = text.split_whitespace();
    let num: f64 = it.next()?.parse().ok()?;
    let unit = it.next().unwrap_or("Gb/sec");
    let mult = match unit {
        u if u.starts_with("Gb") => 1000.0,
        u if u.starts_with("Mb") => 1.0,
        _ => return None,
    };
    let v = num * mult;
    (v.is_finite() && v > 0.0).then_some(v.round() as u64)
}

/// Reads everything about `dev`. Never fails: what cannot be read is [`Reading::Unknown`].
pub fn read_device(roots: &Roots, dev: &str) -> DeviceSnapshot {
    let ib = roots.infiniband().join(dev);
    let bdf = link_basename(&ib.join("device"));
    let driver = link_basename(&ib.join("device/driver"));
    let netdev = sorted_names(&ib.join("device/net")).into_iter().next();

    let (cc_dir, cc_params) = read_cc_params(roots, dev, bdf.as_deref(), driver.as_deref());
    let ecn_dir = netdev
        .as_ref()
        .map(|nd| roots.sysfs.join("class/net").join(nd).join("ecn"));
    let (ecn_rp, ecn_np) = match &ecn_dir {
        Some(ecn) if !ecn.is_dir() => {
            let why = format!(
                "no {} (needs NVIDIA's out-of-tree mlx5 driver)",
                ecn.display()
            );
            (
                vec![Reading::Unknown(why.clone()); 8],
                vec![Reading::Unknown(why); 8],
            )
        }
        Some(ecn) => (
            read_enables(&ecn.join("roce_rp")),
            read_enables(&ecn.join("roce_np")),
        ),
        None => {
            let r = Reading::Unknown(format!(
                "no netdev under {}",
                ib.join("device/net").display()
            ));
            (vec![r.clone(); 8], vec![r; 8])
        }
    };
    DeviceSnapshot {
        device: dev.to_string(),
        bdf,
        netdev,
        driver,
        cc_dir,
        cc_params,
        ecn_dir,
        ecn_rp,
        ecn_np,
        ports: read_ports(roots, dev),
    }
}

fn read_cc_params(
    roots: &Roots,
    dev: &str,
    bdf: Option<&str>,
    driver: Option<&str>,
) -> (Option<PathBuf>, Vec<(&'static str, Reading)>) {
    let all = |why: String| {
        CC_PARAM_NAMES
            .iter()
            .map(|n| (*n, Reading::Unknown(why.clone())))
            .collect()
    };
    if let Some(d) = driver {
        if d != "mlx5_core" {
            return (None, all(format!("not an mlx5 device (driver {d})")));
        }
    }
    let Some(bdf) = bdf else {
        return (None, all(format!("{dev}: no PCI device link")));
    };
    let mlx5 = roots.debugfs.join("mlx5");
    if let Err(e) = fs::metadata(&mlx5) {
        let why = match e.kind() {
            io::ErrorKind::PermissionDenied => {
                format!(
                    "debugfs {}: permission denied (needs root)",
                    roots.debugfs.display()
                )
            }
            _ => format!(
                "no mlx5 debugfs at {} (debugfs not mounted?)",
                mlx5.display()
            ),
        };
        return (None, all(why));
    }
    let dir = mlx5.join(bdf).join("cc_params");
    match fs::read_dir(&dir) {
        Ok(_) => {}
        Err(e) => {
            let why = match e.kind() {
                io::ErrorKind::NotFound => format!(
                    "no {} (not mlx5 or firmware hides cc_params)",
                    dir.display()
                ),
                _ => io_reason(&e, &dir.display().to_string()),
            };
            return (Some(dir), all(why));
        }
    }
    let params = CC_PARAM_NAMES
        .iter()
        .map(|n| {
            let r = match read_value(&dir.join(n), FIELD_MAX) {
                Reading::Unknown(why) if why == "file missing" => {
                    Reading::Unknown("file missing (older kernel or firmware)".to_string())
                }
                other => other,
            };
            (*n, r)
        })
        .collect();
    (Some(dir), params)
}

fn read_enables(dir: &Path) -> Vec<Reading> {
    if !dir.join("enable").is_dir() {
        let why = format!("no {}", dir.join("enable").display());
        return vec![Reading::Unknown(why); 8];
    }
    (0..8)
        .map(|p| read_value(&dir.join("enable").join(p.to_string()), 1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_value_classifies() {
        assert_eq!(parse_value(b"300\n", FIELD_MAX), Reading::Value(300));
        assert_eq!(
            parse_value(b"", FIELD_MAX),
            Reading::Garbage("empty".into())
        );
        assert_eq!(
            parse_value(b"\n", FIELD_MAX),
            Reading::Garbage("empty".into())
        );
        assert!(
            matches!(parse_value(b"abc\n", FIELD_MAX), Reading::Garbage(m) if m.starts_with("not a number"))
        );
        assert!(
            matches!(parse_value(b"-1\n", FIELD_MAX), Reading::Garbage(m) if m.starts_with("not a number"))
        );
        assert!(
            matches!(parse_value(b"4294967296\n", FIELD_MAX), Reading::Garbage(m) if m.starts_with("out of range"))
        );
        assert!(
            matches!(parse_value(b"99999999999999999999999\n", u64::MAX), Reading::Garbage(m) if m.starts_with("out of range"))
        );
        assert!(
            matches!(parse_value(&[0xff, 0xfe], FIELD_MAX), Reading::Garbage(m) if m.starts_with("not text"))
        );
        assert!(matches!(parse_value(b"2\n", 1), Reading::Garbage(_)));
    }

    #[test]
    fn parse_rate_reads_sysfs_rate() {
        assert_eq!(parse_rate("100 Gb/sec (4X EDR)\n"), Some(100_000));
        assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)"), Some(2_500));
        assert_eq!(parse_rate("garbage"), None);
    }
}
