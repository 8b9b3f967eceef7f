//! ECMP as switches do it: a CRC-32 over the RoCEv2 5-tuple (optionally the BTH destination QPN),
//! with the UDP source port derived from the QP numbers the way Linux/mlx5 derive it, or pinned.

// Source port (Linux `include/rdma/ib_verbs.h`, used by mlx5 when the address handle's flow
// label is 0, i.e. always for NCCL's RC QPs): `flow_label = fold(lqpn * rqpn)` with
// `v ^= v >> 20; v ^= v >> 40; v & 0xFFFFF` (`rdma_calc_flow_label`), then
// `sport = 0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14))` (`rdma_flow_label_to_udp_sport`).

use dqplb_engine::pinning::{self, FieldLayout, FlowFields, HashFamily, HashSpec, PIN_PORT_MIN};

/// Base port of pinned QPs (relative bucket 0): the lowest port a verbs flow label reaches.
pub(crate) const PIN_BASE: u16 = PIN_PORT_MIN;

/// How a QP's UDP source port is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcePort {
    /// From the local and remote QPN, as mlx5 does (see module docs).
    FromQpn,
    /// One port for every QP (NICs or configs that pin it): all QPs of a host pair hash alike.
    Fixed(u16),
    /// Pinned, relative mode (pin.rs): the QPs of a NIC pair (every channel's) on distinct
    /// buckets of a power-of-two group of `--spines`, knowing the hash family and field layout
    /// but not the seed.
    Pinned,
    /// Pinned, absolute mode (pin.rs): the switch's hash known in full (seed, live group),
    /// ports searched for distinct or balanced members.
    PinnedAbsolute,
}

impl SourcePort {
    /// The mode's name on the command line (`qpn`, `fixed:P`, `pinned`, `pinned-absolute`).
    pub fn name(self) -> String {
        match self {
            SourcePort::FromQpn => "qpn".into(),
            SourcePort::Fixed(p) => format!("fixed:{p}"),
            SourcePort::Pinned => "pinned".into(),
            SourcePort::PinnedAbsolute => "pinned-absolute".into(),
        }
    }

    /// A pinning mode (ports chosen by the pinning module).
    pub fn pinned(self) -> bool {
        matches!(self, SourcePort::Pinned | SourcePort::PinnedAbsolute)
    }
}

/// What the switches feed their hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashFields {
    pub source_port: SourcePort,
    /// E-ECMP: the BTH destination QPN is hashed too (switches that parse past UDP).
    pub dest_qpn: bool,
}

impl Default for HashFields {
    fn default() -> Self {
        HashFields {
            source_port: SourcePort::FromQpn,
            dest_qpn: false,
        }
    }
}

impl HashFields {
    /// The fields the switches hash, in order: the 5-tuple, then the destination QPN if hashed.
    pub(crate) fn layout(self) -> FieldLayout {
        if self.dest_qpn {
            FieldLayout::five_tuple_qpn()
        } else {
            FieldLayout::five_tuple()
        }
    }
}

/// `rdma_calc_flow_label(lqpn, rqpn)`: a 20-bit flow label from the QP pair.
pub fn flow_label(lqpn: u32, rqpn: u32) -> u32 {
    pinning::qpn_flow_label(lqpn, rqpn)
}

/// `rdma_flow_label_to_udp_sport(fl)`: 0xC000..=0xFFFF.
pub(crate) fn flow_label_to_sport(fl: u32) -> u16 {
    pinning::port_for_flow_label(fl)
}

/// The UDP source port a QP `lqpn` connected to `rqpn` sends from, where the port does not come
/// from pinning (the pinned modes' ports come from pin.rs; here they fall back to the QPNs).
pub(crate) fn udp_sport(src: SourcePort, lqpn: u32, rqpn: u32) -> u16 {
    match src {
        SourcePort::Fixed(p) => p,
        _ => flow_label_to_sport(flow_label(lqpn, rqpn)),
    }
}

/// CRC-32 (IEEE 802.3, reflected) of `bytes` from initial value `seed` (a switch's hash seed):
/// the register starts at `!seed` and the result is inverted, so seed 0 is the plain CRC-32.
/// The pinning module's, so that the simulator's switches and the plugin's pinning agree.
#[cfg(test)]
pub(crate) fn crc32(seed: u32, bytes: &[u8]) -> u32 {
    pinning::crc32(seed, bytes)
}

/// The hash a switch with `seed` computes for one RoCEv2 packet from UDP source port `sport` to
/// QP `rqpn` between IPv4 addresses `sip` -> `dip`.
pub(crate) fn ecmp_hash(
    seed: u32,
    fields: HashFields,
    sip: u32,
    dip: u32,
    sport: u16,
    rqpn: u32,
) -> u32 {
    HashSpec {
        family: HashFamily::Crc32,
        seed,
        layout: fields.layout(),
    }
    .hash(&FlowFields::roce(sip, dip, sport, rqpn))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC bit by bit, register from `!seed`: the definition the seeded hash must keep.
    fn crc32_bitwise(seed: u32, bytes: &[u8]) -> u32 {
        let mut c = !seed;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32(0, b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_bitwise(0, b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn crc32_seeds_as_the_bitwise_definition() {
        // Seeds as topology.rs and tier3.rs build them, and the edges; every length ecmp_hash
        // feeds (13 and 16 bytes) and a few more.
        let bytes: Vec<u8> = (0u8..40).map(|i| i.wrapping_mul(37) ^ 0x5A).collect();
        for seed in [
            0,
            1,
            9,
            0x5eed_0000,
            0x5eed_0003 ^ (5 << 16),
            0x8000_0000,
            u32::MAX,
        ] {
            for len in [0, 1, 4, 13, 16, 17, 40] {
                assert_eq!(
                    crc32(seed, &bytes[..len]),
                    crc32_bitwise(seed, &bytes[..len]),
                    "seed {seed:#x} len {len}"
                );
            }
        }
    }

    #[test]
    fn sport_in_roce_range_and_qpn_dependent() {
        let a = udp_sport(SourcePort::FromQpn, 0x1234, 0x5678);
        let b = udp_sport(SourcePort::FromQpn, 0x1235, 0x5678);
        assert!(a >= 0xC000 && b >= 0xC000);
        assert_ne!(a, b);
        assert_eq!(udp_sport(SourcePort::Fixed(49152), 1, 2), 49152);
        // Worked example: 0x100 * 0x200 = 0x20000 -> fl 0x20000 -> low 0 ^ (0x20000 >> 14 = 8).
        assert_eq!(flow_label(0x100, 0x200), 0x20000);
        assert_eq!(flow_label_to_sport(0x20000), 0xC008);
    }

    #[test]
    fn fixed_port_collides_unless_dest_qpn_hashed() {
        let f = HashFields {
            source_port: SourcePort::Fixed(0xC000),
            dest_qpn: false,
        };
        let p = |l, r| udp_sport(f.source_port, l, r);
        assert_eq!(
            ecmp_hash(9, f, 1, 2, p(10, 20), 20),
            ecmp_hash(9, f, 1, 2, p(11, 21), 21)
        );
        let e = HashFields {
            dest_qpn: true,
            ..f
        };
        assert_ne!(
            ecmp_hash(9, e, 1, 2, p(10, 20), 20),
            ecmp_hash(9, e, 1, 2, p(11, 21), 21)
        );
    }
}
