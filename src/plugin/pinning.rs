//! Path pinning in the plugin: a class's `path-pinning` and the site's `[paths]` turned into the
//! engine's port chooser, for the verbs connector (flow labels at RTR) and the TCP data streams.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use dqplb_config::{
    BucketSelectName, ConnClass, HashFamilyName, HashField, PathPinning, PathsSection, SiteConfig,
};
use dqplb_engine::pinning::{
    channel_qp_index, AbsoluteSpec, BucketSelect, Field, FieldLayout, FlowFields, HashFamily,
    HashSpec, RelativePins, PIN_PORT_MIN, ROCE_UDP_DPORT,
};
use dqplb_transport::{NetError, NetResult};

/// IP protocol number of TCP (the TCP transport's 5-tuples).
const PROTO_TCP: u8 = 6;
/// Candidate ports per TCP data stream (the first free one is bound).
const TCP_CANDIDATES: u32 = 4;

/// How one class's ports are chosen.
#[derive(Debug, Clone)]
pub enum PortChooser {
    /// Distinct buckets relative to the (unknown) bucket of `base-port`.
    Relative {
        pins: RelativePins,
        /// E-ECMP: the destination QPN is hashed too, and cancelled by the ports.
        qpn: bool,
    },
    /// The hash in full: buckets computed for the connection's real addresses and QPNs.
    Absolute { spec: AbsoluteSpec, base: u16 },
}

fn family(h: HashFamilyName) -> HashFamily {
    match h {
        HashFamilyName::Crc32 => HashFamily::Crc32,
        HashFamilyName::Crc16Ccitt => HashFamily::Crc16Ccitt,
        HashFamilyName::XorFold => HashFamily::XorFold,
    }
}

fn layout(paths: &PathsSection) -> NetResult<FieldLayout> {
    let mut fields: Vec<Field> = paths
        .fields
        .iter()
        .map(|f| match f {
            HashField::SrcIp => Field::SrcIp,
            HashField::DstIp => Field::DstIp,
            HashField::Protocol => Field::Protocol,
            HashField::SrcPort => Field::SrcPort,
            HashField::DstPort => Field::DstPort,
        })
        .collect();
    if paths.hash_dest_qpn {
        fields.push(Field::DstQpn);
    }
    FieldLayout::new(&fields).map_err(|e| NetError::invalid_argument(format!("[paths]: {e}")))
}

/// The chooser of `class` under `cfg`, None when the class does not pin.
pub fn chooser(cfg: &SiteConfig, class: ConnClass) -> NetResult<Option<PortChooser>> {
    let spec = cfg.class.get(class);
    let paths = &cfg.paths;
    let group = spec.ecmp_width();
    let select = match paths.select {
        BucketSelectName::LowBits => BucketSelect::LowBits,
        BucketSelectName::Mod => BucketSelect::Mod,
    };
    let name = class.as_str();
    let err = |e: dqplb_engine::pinning::PinError| {
        NetError::invalid_argument(format!("class {name}: {e}"))
    };
    Ok(match spec.path_pinning {
        PathPinning::Off => None,
        PathPinning::Relative => Some(PortChooser::Relative {
            pins: RelativePins::new(
                family(paths.hash),
                select,
                layout(paths)?,
                group,
                paths.base_port,
            )
            .map_err(err)?,
            qpn: paths.hash_dest_qpn,
        }),
        PathPinning::Absolute => {
            let spec = AbsoluteSpec {
                hash: HashSpec {
                    family: family(paths.hash),
                    seed: paths.seed,
                    layout: layout(paths)?,
                },
                select,
                group,
            };
            // Refuses a group of 0 or low bits over a group that is not a power of two.
            spec.ports(paths.base_port, &[]).map_err(err)?;
            Some(PortChooser::Absolute {
                spec,
                base: paths.base_port,
            })
        }
    })
}

/// An IPv4 address as the hash reads it; IPv6 (or a GID that is not IPv4-mapped) is refused by
/// absolute mode, whose layouts model IPv4 5-tuples, and is irrelevant to relative mode.
fn ipv4(ip: IpAddr) -> Option<u32> {
    match ip {
        IpAddr::V4(a) => Some(u32::from(a)),
        IpAddr::V6(a) => a.to_ipv4_mapped().map(u32::from),
    }
}

impl PortChooser {
    /// The group size (S).
    pub fn group(&self) -> u32 {
        match self {
            PortChooser::Relative { pins, .. } => pins.group(),
            PortChooser::Absolute { spec, .. } => spec.group,
        }
    }

    /// The bucket a port of `flow` lands on: relative to `base-port`'s (relative mode, with
    /// the QPN of the connection's first data QP as reference), or absolute.
    pub fn bucket(&self, flow: &FlowFields, ref_qpn: u32) -> u32 {
        match self {
            PortChooser::Relative { pins, qpn } => {
                pins.relative_bucket(flow.src_port, qpn.then_some((ref_qpn, flow.dst_qpn)))
            }
            PortChooser::Absolute { spec, .. } => spec.bucket(flow).unwrap_or(0),
        }
    }

    /// Ports for QPs `first..first + flows.len()` of the connections to one peer (`first`: the
    /// index of this connection's first QP among them, so connections to one peer take
    /// successive buckets). `flows` give each QP's addresses and destination QPN.
    pub fn ports(&self, first: u32, flows: &[FlowFields]) -> Result<Vec<u16>, String> {
        match self {
            PortChooser::Relative { pins, qpn } => {
                let ref_qpn = flows.first().map_or(0, |f| f.dst_qpn);
                flows
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        // Wraps after every port of the group was given (2^14 ports).
                        let k = (first + i as u32) % pins.capacity();
                        if *qpn {
                            pins.port_qpn(k, ref_qpn, f.dst_qpn)
                        } else {
                            pins.port(k)
                        }
                        .map_err(|e| e.to_string())
                    })
                    .collect()
            }
            PortChooser::Absolute { spec, base } => {
                let offset = (first % u32::from(0x4000u16)) as u16;
                let start = PIN_PORT_MIN | (base.wrapping_add(offset) & 0x3FFF);
                spec.ports(start, flows).map_err(|e| e.to_string())
            }
        }
    }

    /// A port on another bucket for a QP of `flow` (its `src_port` the current one).
    pub fn repin(&self, flow: &FlowFields, ref_qpn: u32) -> Option<u16> {
        match self {
            PortChooser::Relative { pins, qpn } => pins
                .repin(flow.src_port, qpn.then_some((ref_qpn, flow.dst_qpn)), None)
                .ok(),
            PortChooser::Absolute { spec, .. } => spec.repin(flow, None).ok().flatten(),
        }
    }

    /// Candidate ports for `n` TCP data streams from `src` to the listener `dst`: stream i's
    /// first candidate takes bucket i (relative) or a least-loaded one (absolute); the others
    /// are further ports of the same bucket for when one is in use.
    pub fn tcp_candidates(
        &self,
        n: usize,
        src: IpAddr,
        dst: std::net::SocketAddr,
    ) -> Vec<Vec<u16>> {
        let flow = |port: u16| FlowFields {
            src_ip: ipv4(src).unwrap_or(0),
            dst_ip: ipv4(dst.ip()).unwrap_or(0),
            protocol: PROTO_TCP,
            src_port: port,
            dst_port: dst.port(),
            dst_qpn: 0,
        };
        match self {
            PortChooser::Relative { pins, .. } => {
                let g = pins.group();
                let rounds = (n as u32).div_ceil(g).max(1);
                (0..n as u32)
                    .map(|i| {
                        (0..TCP_CANDIDATES)
                            .filter_map(|k| pins.port_for(i % g, i / g + k * rounds, None).ok())
                            .collect()
                    })
                    .collect()
            }
            PortChooser::Absolute { spec, base } => {
                let flows: Vec<FlowFields> = (0..n).map(|_| flow(0)).collect();
                let Ok(first) = spec.ports(*base, &flows) else {
                    return Vec::new();
                };
                first
                    .iter()
                    .map(|&p| {
                        let b = spec.bucket(&flow(p)).unwrap_or(0);
                        let mut c = vec![p];
                        let mut q = p;
                        while c.len() < TCP_CANDIDATES as usize {
                            q = PIN_PORT_MIN | (q.wrapping_add(1) & 0x3FFF);
                            if q == p {
                                break;
                            }
                            if !first.contains(&q) && spec.bucket(&flow(q)).ok() == Some(b) {
                                c.push(q);
                            }
                        }
                        c
                    })
                    .collect()
            }
        }
    }
}

/// Connections pinned so far towards each peer address, so the next one's QPs take the next
/// buckets (NCCL opens several channels, each a connection, to one peer NIC).
fn next_first(peer: IpAddr, qps: u32) -> u32 {
    static SEEN: Mutex<Option<HashMap<IpAddr, u32>>> = Mutex::new(None);
    let mut g = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    let n = map.entry(peer).or_insert(0);
    let first = channel_qp_index(*n, 0, qps);
    *n = n.wrapping_add(1);
    first
}

/// The verbs side: ports from the two sides' endpoints (RoCEv2 5-tuples, GIDs as IPs).
#[cfg(feature = "verbs")]
pub(crate) struct VerbsPinner {
    pub chooser: PortChooser,
    pub class: ConnClass,
}

#[cfg(feature = "verbs")]
fn gid_ip(gid: [u8; 16]) -> IpAddr {
    IpAddr::from(gid)
}

#[cfg(feature = "verbs")]
impl VerbsPinner {
    fn flows(
        &self,
        local: &dqplb_transport::verbs::ConnInfo,
        remote: &dqplb_transport::verbs::ConnInfo,
    ) -> Result<Vec<FlowFields>, String> {
        let (src, dst) = (gid_ip(local.control.gid), gid_ip(remote.control.gid));
        let (s4, d4) = (ipv4(src), ipv4(dst));
        if matches!(self.chooser, PortChooser::Absolute { .. }) && (s4.is_none() || d4.is_none()) {
            return Err(format!(
                "class {}: absolute pinning models IPv4 5-tuples; the GIDs {src} -> {dst} are not IPv4",
                self.class.as_str()
            ));
        }
        Ok(remote
            .data
            .iter()
            .map(|ep| FlowFields::roce(s4.unwrap_or(0), d4.unwrap_or(0), 0, ep.qpn))
            .collect())
    }
}

#[cfg(feature = "verbs")]
impl dqplb_transport::verbs::PortPinner for VerbsPinner {
    fn ports(
        &self,
        local: &dqplb_transport::verbs::ConnInfo,
        remote: &dqplb_transport::verbs::ConnInfo,
    ) -> Result<Vec<u16>, String> {
        let flows = self.flows(local, remote)?;
        let first = next_first(gid_ip(remote.control.gid), flows.len() as u32);
        self.chooser.ports(first, &flows)
    }

    fn repin(&self, _qp: usize, port: u16, _local_qpn: u32, remote_qpn: u32) -> Option<u16> {
        // The reference QPN of relative E-ECMP pins is the first data QP's; a replacement's own
        // destination QPN stands in for it (its offset is then 0 and the port alone moves it).
        let flow = FlowFields {
            dst_port: ROCE_UDP_DPORT,
            ..FlowFields::roce(0, 0, port, remote_qpn)
        };
        self.chooser.repin(&flow, remote_qpn)
    }
}

/// Shared form for the connector.
#[cfg(feature = "verbs")]
pub(crate) fn verbs_pinner(
    cfg: &SiteConfig,
    class: ConnClass,
) -> NetResult<Option<Arc<dyn dqplb_transport::verbs::PortPinner>>> {
    Ok(chooser(cfg, class)?.map(|chooser| {
        Arc::new(VerbsPinner { chooser, class }) as Arc<dyn dqplb_transport::verbs::PortPinner>
    }))
}

/// TCP candidates for a connection of `class` with `n` data streams, empty when not pinned.
pub(crate) fn tcp_pinned_ports(
    cfg: &SiteConfig,
    class: ConnClass,
    n: usize,
    src: IpAddr,
    dst: std::net::SocketAddr,
) -> NetResult<Vec<Vec<u16>>> {
    Ok(chooser(cfg, class)?
        .map(|c| c.tcp_candidates(n, src, dst))
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pinned(text: &str) -> SiteConfig {
        dqplb_config::parse_str(text, "t.toml").expect("valid")
    }

    #[test]
    fn relative_ports_take_distinct_buckets_and_tcp_candidates_share_them() {
        let cfg = pinned("[class.cross-rail]\nqps = 8\npath-pinning = \"relative\"\n");
        let c = chooser(&cfg, ConnClass::CrossRail)
            .unwrap()
            .expect("pinned");
        assert_eq!(c.group(), 8);
        let flows: Vec<FlowFields> = (0..8)
            .map(|q| FlowFields::roce(0x0a00_0001, 0x0a00_0102, 0, 0x100 + q))
            .collect();
        let ports = c.ports(0, &flows).unwrap();
        let mut buckets: Vec<u32> = ports
            .iter()
            .zip(&flows)
            .map(|(p, f)| c.bucket(&FlowFields { src_port: *p, ..*f }, 0x100))
            .collect();
        buckets.sort_unstable();
        assert_eq!(buckets, (0..8).collect::<Vec<_>>());
        assert!(ports.iter().all(|p| *p >= 0xC000));
        let dst: std::net::SocketAddr = "10.0.1.2:40000".parse().unwrap();
        let cand = c.tcp_candidates(8, "10.0.0.1".parse().unwrap(), dst);
        assert_eq!(cand.len(), 8);
        for (i, list) in cand.iter().enumerate() {
            assert_eq!(list.len(), TCP_CANDIDATES as usize);
            for p in list {
                let f = FlowFields {
                    src_port: *p,
                    ..flows[0]
                };
                assert_eq!(c.bucket(&f, 0x100), i as u32, "stream {i} port {p}");
            }
        }
        // No port is a candidate of two streams.
        let mut all: Vec<u16> = cand.concat();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 8 * TCP_CANDIDATES as usize);
    }

    #[test]
    fn two_channels_of_the_shipped_example_cover_its_32_spines() {
        let cfg = dqplb_config::parse_str(
            include_str!("../../plugin-conf/pinned-ecmp.toml"),
            "pinned-ecmp.toml",
        )
        .expect("valid");
        let c = chooser(&cfg, ConnClass::CrossRail)
            .unwrap()
            .expect("pinned");
        let flows: Vec<FlowFields> = (0..16)
            .map(|q| FlowFields::roce(0x0a00_0001, 0x0a00_0201, 0, 0x300 + q))
            .collect();
        let mut buckets = Vec::new();
        // Channel 0 takes QP indices 0..16, channel 1 16..32 (next_first's numbering).
        for first in [0, 16] {
            let ports = c.ports(first, &flows).unwrap();
            buckets.extend(
                ports
                    .iter()
                    .zip(&flows)
                    .map(|(p, f)| c.bucket(&FlowFields { src_port: *p, ..*f }, 0x300)),
            );
        }
        buckets.sort_unstable();
        assert_eq!(buckets, (0..32).collect::<Vec<_>>());
        // The absolute buckets under a concrete seed are distinct too: relative mode never needed
        // the seed.
        let spec = AbsoluteSpec {
            hash: HashSpec {
                family: HashFamily::Crc32,
                seed: 0x1234_5678,
                layout: FieldLayout::five_tuple(),
            },
            select: BucketSelect::Mod,
            group: 32,
        };
        let mut real: Vec<u32> = Vec::new();
        for first in [0, 16] {
            let ports = c.ports(first, &flows).unwrap();
            real.extend(
                ports
                    .iter()
                    .zip(&flows)
                    .map(|(p, f)| spec.bucket(&FlowFields { src_port: *p, ..*f }).unwrap()),
            );
        }
        real.sort_unstable();
        real.dedup();
        assert_eq!(real.len(), 32);
    }

    #[test]
    fn off_pins_nothing_and_a_rank_deficient_layout_is_named() {
        let cfg = SiteConfig::default();
        assert!(chooser(&cfg, ConnClass::SameRail).unwrap().is_none());
        // XOR fold of (protocol, source port): the port's low byte lands in hash bits 8..15 and
        // its high 6 free bits in bits 0..5, so bits 6 and 7 are out of reach: a group of 128
        // (7 low bits) cannot be spread, and the error says so.
        let cfg = pinned(
            "[class.same-rail]\npath-pinning = \"relative\"\necmp-width = 128\n\
             [paths]\nhash = \"xor-fold\"\nfields = [\"protocol\", \"src-port\"]\n",
        );
        let e = chooser(&cfg, ConnClass::SameRail).unwrap_err();
        assert_eq!(
            e.msg,
            "class same-rail: path pinning: this hash's bucket bits depend on only 6 independent \
             source-port bits, 7 needed for the group"
        );
    }

    #[test]
    fn absolute_ports_land_on_distinct_members_of_a_mod_group() {
        let cfg = pinned(
            "[class.cross-dc]\nqps = 12\npath-pinning = \"absolute\"\n\
             [paths]\nselect = \"mod\"\nseed = 7\n",
        );
        let c = chooser(&cfg, ConnClass::CrossDc).unwrap().expect("pinned");
        let flows: Vec<FlowFields> = (0..12)
            .map(|q| FlowFields::roce(0x0a00_0001, 0x0a01_0001, 0, 0x200 + q))
            .collect();
        let ports = c.ports(0, &flows).unwrap();
        let mut b: Vec<u32> = ports
            .iter()
            .zip(&flows)
            .map(|(p, f)| c.bucket(&FlowFields { src_port: *p, ..*f }, 0))
            .collect();
        b.sort_unstable();
        assert_eq!(b, (0..12).collect::<Vec<_>>());
    }
}
