//! Reads RDMA port facts from sysfs under a configurable root (tests use a fake tree): link rate,
//! PCI path, link layer and the GID table, and picks the RoCE v2 GID a connection should use.

use super::error::{Result, VerbsError};
use std::fs;
use std::path::{Path, PathBuf};

/// GID type as sysfs names it in `ports/<p>/gid_attrs/types/<i>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidKind {
    /// "RoCE v2" (UDP/IP encapsulated, routable).
    RoceV2,
    /// "IB/RoCE v1" (InfiniBand GID, or RoCE v1 on Ethernet).
    IbRoceV1,
    /// Anything else, or no type file (e.g. plain InfiniBand ports on old kernels).
    Unknown,
}

impl GidKind {
    fn parse(text: &str) -> GidKind {
        match text.trim() {
            "RoCE v2" => GidKind::RoceV2,
            "IB/RoCE v1" => GidKind::IbRoceV1,
            _ => GidKind::Unknown,
        }
    }
}

/// One populated entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub gid: [u8; 16],
    pub kind: GidKind,
}

impl GidEntry {
    /// True for `::ffff:a.b.c.d`, the GID a RoCE port derives from an IPv4 address.
    pub(crate) fn is_ipv4_mapped(&self) -> bool {
        self.gid[..10].iter().all(|&b| b == 0) && self.gid[10] == 0xff && self.gid[11] == 0xff
    }

    /// True for fe80::/10 (derived from a link-local IPv6 address or the MAC).
    pub(crate) fn is_link_local(&self) -> bool {
        self.gid[0] == 0xfe && (self.gid[1] & 0xc0) == 0x80
    }
}

/// Link layer of a port as verbs reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
    Unspecified,
}

/// Parses sysfs `rate` text ("10 Gb/sec (1X QDR)", "2.5 Gb/sec (1X SDR)", "400 Gb/sec (4X NDR)",
/// "100 Mb/sec") into Mbps. None when the text carries no number and unit.
pub(crate) fn parse_rate_mbps(text: &str) -> Option<u32> {
    let mut words = text.split_whitespace();
    let value: f64 = words.next()?.parse().ok()?;
    let scale = match words.next()? {
        "Gb/sec" | "Gb/s" => 1000.0,
        "Mb/sec" | "Mb/s" => 1.0,
        _ => return None,
    };
    let mbps = value * scale;
    if !mbps.is_finite() || mbps <= 0.0 || mbps > u32::MAX as f64 {
        return None;
    }
    Some(mbps.round() as u32)
}

/// Parses a sysfs GID ("fe80:0000:0000:0000:0211:22ff:fe33:4455": eight groups of four hex digits).
pub(crate) fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let mut gid = [0u8; 16];
    let mut groups = 0;
    for (i, group) in text.trim().split(':').enumerate() {
        if i >= 8 || group.len() != 4 {
            return None;
        }
        let v = u16::from_str_radix(group, 16).ok()?;
        gid[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
        groups += 1;
    }
    (groups == 8).then_some(gid)
}

#[cfg(test)]
/// Formats a GID the way sysfs prints it.
pub(crate) fn format_gid(gid: &[u8; 16]) -> String {
    let groups: Vec<String> = gid
        .chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect();
    groups.join(":")
}

/// Address family the automatic GID choice prefers (NCCL_IB_ADDR_FAMILY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddrFamily {
    /// AF_INET (default): IPv4-mapped GIDs (`::ffff:a.b.c.d`).
    #[default]
    Inet,
    /// AF_INET6: every other GID.
    Inet6,
}

/// NCCL_IB_ADDR_RANGE: a prefix GIDs must fall in to be preferred. IPv4 ranges are stored as
/// their IPv4-mapped GID (prefix length counted on the IPv4 part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrRange {
    pub family: AddrFamily,
    pub addr: [u8; 16],
    pub prefix_len: u8,
}

impl AddrRange {
    /// True when `gid` is inside the range.
    pub fn contains(&self, gid: &[u8; 16]) -> bool {
        let (base, cand, bits) = match self.family {
            AddrFamily::Inet => (&self.addr[12..], &gid[12..], self.prefix_len.min(32)),
            AddrFamily::Inet6 => (&self.addr[..], &gid[..], self.prefix_len.min(128)),
        };
        let full = usize::from(bits / 8);
        if base[..full] != cand[..full] {
            return false;
        }
        let rest = bits % 8;
        if rest == 0 {
            return true;
        }
        let mask = 0xffu8 << (8 - rest);
        (base[full] & mask) == (cand[full] & mask)
    }
}

/// How the automatic GID choice ranks a RoCE port's entries (NCCL's ncclIbGetGidIndex rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidPolicy {
    /// Preferred address family (NCCL_IB_ADDR_FAMILY, default AF_INET).
    pub family: AddrFamily,
    /// Preferred RoCE version (NCCL_IB_ROCE_VERSION_NUM, default 2).
    pub roce_version: u8,
    /// Preferred address range (NCCL_IB_ADDR_RANGE, default none).
    pub range: Option<AddrRange>,
}

impl Default for GidPolicy {
    fn default() -> Self {
        GidPolicy {
            family: AddrFamily::Inet,
            roce_version: 2,
            range: None,
        }
    }
}

impl GidPolicy {
    /// Rank of an entry, highest wins: (family and range match, RoCE version matches, the GID is
    /// configured and not link-local) compared in that order, as NCCL weighs them.
    fn rank(&self, e: &GidEntry) -> (bool, bool, bool) {
        let family = if e.is_ipv4_mapped() {
            AddrFamily::Inet
        } else {
            AddrFamily::Inet6
        };
        let in_range = self.range.is_none_or(|r| r.contains(&e.gid));
        let version = match e.kind {
            GidKind::RoceV2 => 2,
            GidKind::IbRoceV1 => 1,
            GidKind::Unknown => 0,
        };
        let configured = e.gid.iter().any(|&b| b != 0);
        (
            family == self.family && in_range,
            version == self.roce_version,
            configured && !e.is_link_local(),
        )
    }
}

/// Picks the GID for a port with the default policy (AF_INET, RoCE v2, no range); see
/// `select_gid_with`.
pub fn select_gid(
    table: &[GidEntry],
    link_layer: LinkLayer,
    forced: Option<u32>,
) -> Result<Option<GidEntry>> {
    select_gid_with(table, link_layer, forced, &GidPolicy::default())
}

/// Picks the GID for a port. `forced` (NCCL_IB_GID_INDEX) wins and must name a populated entry.
/// On InfiniBand: entry 0. Otherwise the entry `policy` ranks highest (lowest index on ties): by
/// default an IPv4-mapped RoCE v2 GID, then RoCE v2 ones, then routable ones, then the first.
/// None when the table holds nothing usable.
pub fn select_gid_with(
    table: &[GidEntry],
    link_layer: LinkLayer,
    forced: Option<u32>,
    policy: &GidPolicy,
) -> Result<Option<GidEntry>> {
    if let Some(index) = forced {
        return match table.iter().find(|e| e.index == index) {
            Some(e) => Ok(Some(*e)),
            None => Err(VerbsError::Config {
                var: "NCCL_IB_GID_INDEX",
                value: index.to_string(),
                reason: "no populated GID at this index on the port",
            }),
        };
    }
    if link_layer == LinkLayer::InfiniBand {
        return Ok(table.iter().find(|e| e.index == 0).copied());
    }
    let mut best: Option<(&GidEntry, (bool, bool, bool))> = None;
    for e in table {
        let r = policy.rank(e);
        if best.is_none_or(|(_, b)| r > b) {
            best = Some((e, r));
        }
    }
    Ok(best.map(|(e, _)| *e))
}

/// sysfs reader rooted at `root` (normally "/sys").
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs::new("/sys")
    }
}

impl Sysfs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs { root: root.into() }
    }

    fn device_dir(&self, dev: &str) -> PathBuf {
        self.root.join("class/infiniband").join(dev)
    }

    fn port_dir(&self, dev: &str, port: u8) -> PathBuf {
        self.device_dir(dev).join("ports").join(port.to_string())
    }

    /// Link rate of a port in Mbps from `ports/<p>/rate`; None if absent or unparsable.
    pub fn port_rate_mbps(&self, dev: &str, port: u8) -> Option<u32> {
        let text = fs::read_to_string(self.port_dir(dev, port).join("rate")).ok()?;
        parse_rate_mbps(&text)
    }

    /// Link layer from `ports/<p>/link_layer` ("InfiniBand" / "Ethernet").
    pub fn link_layer(&self, dev: &str, port: u8) -> Option<LinkLayer> {
        let text = fs::read_to_string(self.port_dir(dev, port).join("link_layer")).ok()?;
        Some(match text.trim() {
            "InfiniBand" => LinkLayer::InfiniBand,
            "Ethernet" => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        })
    }

    /// Real path of the device's parent (the PCI function for a NIC, a virtual device for rxe).
    pub fn pci_path(&self, dev: &str) -> Option<PathBuf> {
        fs::canonicalize(self.device_dir(dev).join("device")).ok()
    }

    /// Populated GID entries of a port in index order (all-zero entries and unreadable ones skipped).
    pub fn gid_table(&self, dev: &str, port: u8) -> Result<Vec<GidEntry>> {
        let dir = self.port_dir(dev, port);
        let gids = dir.join("gids");
        let listing = fs::read_dir(&gids).map_err(|e| VerbsError::Sysfs {
            path: gids.clone(),
            reason: format!("cannot list GID table: {e}"),
        })?;
        let mut table = Vec::new();
        for entry in listing.flatten() {
            let Some(index) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(gid) = read_gid(&entry.path()) else {
                continue;
            };
            if gid.iter().all(|&b| b == 0) {
                continue;
            }
            let kind = fs::read_to_string(dir.join("gid_attrs/types").join(index.to_string()))
                .map(|t| GidKind::parse(&t))
                .unwrap_or(GidKind::Unknown);
            table.push(GidEntry { index, gid, kind });
        }
        table.sort_by_key(|e| e.index);
        Ok(table)
    }
}

fn read_gid(path: &Path) -> Option<[u8; 16]> {
    parse_gid(&fs::read_to_string(path).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_to_mbps() {
        assert_eq!(parse_rate_mbps("10 Gb/sec (1X QDR)\n"), Some(10_000));
        assert_eq!(parse_rate_mbps("2.5 Gb/sec (1X SDR)"), Some(2_500));
        assert_eq!(parse_rate_mbps("400 Gb/sec (4X NDR)"), Some(400_000));
        assert_eq!(parse_rate_mbps("100 Mb/sec"), Some(100));
        assert_eq!(parse_rate_mbps("fast"), None);
        assert_eq!(parse_rate_mbps("10 furlongs"), None);
        assert_eq!(parse_rate_mbps("0 Gb/sec"), None);
        assert_eq!(parse_rate_mbps(""), None);
    }

    #[test]
    fn gids_round_trip() {
        let text = "0000:0000:0000:0000:0000:ffff:0a4d:0001";
        let gid = parse_gid(text).expect("valid gid");
        assert_eq!(&gid[10..], &[0xff, 0xff, 10, 77, 0, 1]);
        assert_eq!(format_gid(&gid), text);
        assert_eq!(parse_gid("0000:0000"), None);
        assert_eq!(parse_gid("zzzz:0000:0000:0000:0000:ffff:0a4d:0001"), None);
        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:0a4d:0001:0000"),
            None
        );
    }

    fn entry(index: u32, text: &str, kind: GidKind) -> GidEntry {
        GidEntry {
            index,
            gid: parse_gid(text).expect("test gid"),
            kind,
        }
    }

    fn roce_table() -> Vec<GidEntry> {
        vec![
            entry(
                0,
                "fe80:0000:0000:0000:0211:22ff:fe33:4455",
                GidKind::IbRoceV1,
            ),
            entry(
                1,
                "fe80:0000:0000:0000:0211:22ff:fe33:4455",
                GidKind::RoceV2,
            ),
            entry(
                2,
                "0000:0000:0000:0000:0000:ffff:0a4d:0001",
                GidKind::IbRoceV1,
            ),
            entry(
                3,
                "0000:0000:0000:0000:0000:ffff:0a4d:0001",
                GidKind::RoceV2,
            ),
        ]
    }

    #[test]
    fn roce_v2_ipv4_gid_preferred() {
        let got = select_gid(&roce_table(), LinkLayer::Ethernet, None).expect("ok");
        assert_eq!(got.map(|e| e.index), Some(3));
    }

    #[test]
    fn forced_index_honoured_and_checked() {
        let got = select_gid(&roce_table(), LinkLayer::Ethernet, Some(0)).expect("ok");
        assert_eq!(got.map(|e| e.index), Some(0));
        let err = select_gid(&roce_table(), LinkLayer::Ethernet, Some(9)).unwrap_err();
        assert!(err.to_string().contains("NCCL_IB_GID_INDEX"), "{err}");
    }

    #[test]
    fn fallbacks_when_no_ipv4_roce_v2() {
        let only_ll = vec![roce_table()[0], roce_table()[1]];
        let got = select_gid(&only_ll, LinkLayer::Ethernet, None).expect("ok");
        assert_eq!(got.map(|e| e.index), Some(1));
        let v1_only = vec![roce_table()[0]];
        let got = select_gid(&v1_only, LinkLayer::Ethernet, None).expect("ok");
        assert_eq!(got.map(|e| e.index), Some(0));
        assert_eq!(
            select_gid(&[], LinkLayer::Ethernet, None).expect("ok"),
            None
        );
        let got = select_gid(&roce_table(), LinkLayer::InfiniBand, None).expect("ok");
        assert_eq!(got.map(|e| e.index), Some(0));
    }

    #[test]
    fn policy_family_version_and_range() {
        let mut table = roce_table();
        table.push(entry(
            4,
            "fd00:0000:0000:0000:0000:0000:0000:0007",
            GidKind::RoceV2,
        ));
        table.push(entry(
            5,
            "0000:0000:0000:0000:0000:ffff:c0a8:0107",
            GidKind::RoceV2,
        ));
        let pick = |p: GidPolicy| {
            select_gid_with(&table, LinkLayer::Ethernet, None, &p)
                .expect("ok")
                .map(|e| e.index)
        };
        assert_eq!(pick(GidPolicy::default()), Some(3));
        let v6 = GidPolicy {
            family: AddrFamily::Inet6,
            ..GidPolicy::default()
        };
        assert_eq!(pick(v6), Some(4), "global IPv6 beats link-local");
        let v1 = GidPolicy {
            roce_version: 1,
            ..GidPolicy::default()
        };
        assert_eq!(pick(v1), Some(2));
        let ranged = GidPolicy {
            range: Some(AddrRange {
                family: AddrFamily::Inet,
                addr: parse_gid("0000:0000:0000:0000:0000:ffff:c0a8:0000").expect("gid"),
                prefix_len: 16,
            }),
            ..GidPolicy::default()
        };
        assert_eq!(pick(ranged), Some(5), "192.168/16 wins over 10.77.0.1");
        let r = ranged.range.expect("range");
        assert!(r.contains(&table[5].gid) && !r.contains(&table[3].gid));
        let odd = AddrRange {
            family: AddrFamily::Inet,
            addr: parse_gid("0000:0000:0000:0000:0000:ffff:0a40:0000").expect("gid"),
            prefix_len: 10,
        };
        assert!(odd.contains(&table[3].gid), "10.77 is inside 10.64/10");
    }

    /// Builds a fake /sys tree for one device with the given GID files.
    fn fake_tree(tag: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("dqplb-sysfs-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let port = root.join("class/infiniband/mlx5_0/ports/1");
        fs::create_dir_all(port.join("gids")).expect("mkdir");
        fs::create_dir_all(port.join("gid_attrs/types")).expect("mkdir");
        let pci = root.join("devices/pci0000:00/0000:00:02.0/0000:3b:00.0");
        fs::create_dir_all(&pci).expect("mkdir");
        std::os::unix::fs::symlink(&pci, root.join("class/infiniband/mlx5_0/device"))
            .expect("symlink");
        fs::write(port.join("rate"), "200 Gb/sec (4X HDR)\n").expect("write");
        fs::write(port.join("link_layer"), "Ethernet\n").expect("write");
        let gids = [
            (
                0,
                "fe80:0000:0000:0000:0211:22ff:fe33:4455\n",
                Some("IB/RoCE v1\n"),
            ),
            (
                1,
                "fe80:0000:0000:0000:0211:22ff:fe33:4455\n",
                Some("RoCE v2\n"),
            ),
            (
                2,
                "0000:0000:0000:0000:0000:ffff:c0a8:0107\n",
                Some("IB/RoCE v1\n"),
            ),
            (
                3,
                "0000:0000:0000:0000:0000:ffff:c0a8:0107\n",
                Some("RoCE v2\n"),
            ),
            (4, "0000:0000:0000:0000:0000:0000:0000:0000\n", None),
        ];
        for (i, gid, kind) in gids {
            fs::write(port.join("gids").join(i.to_string()), gid).expect("write");
            if let Some(k) = kind {
                fs::write(port.join("gid_attrs/types").join(i.to_string()), k).expect("write");
            }
        }
        root
    }

    #[test]
    fn fake_tree_is_read() {
        let root = fake_tree("read");
        let sys = Sysfs::new(&root);
        assert_eq!(sys.port_rate_mbps("mlx5_0", 1), Some(200_000));
        assert_eq!(sys.port_rate_mbps("mlx5_0", 2), None);
        assert_eq!(sys.link_layer("mlx5_0", 1), Some(LinkLayer::Ethernet));
        let pci = sys.pci_path("mlx5_0").expect("pci path");
        assert!(pci.ends_with("0000:3b:00.0"), "{}", pci.display());
        let table = sys.gid_table("mlx5_0", 1).expect("table");
        assert_eq!(
            table.iter().map(|e| e.index).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        assert_eq!(table[3].kind, GidKind::RoceV2);
        let pick = select_gid(&table, LinkLayer::Ethernet, None).expect("ok");
        assert_eq!(pick.map(|e| e.index), Some(3));
        assert!(sys.gid_table("mlx5_0", 7).is_err());
        fs::remove_dir_all(&root).expect("cleanup");
    }
}
