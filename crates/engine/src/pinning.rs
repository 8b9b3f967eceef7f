//! Path pinning: RoCEv2 UDP source ports that put a connection's QPs on distinct ECMP next hops,
//! from the GF(2)-linearity of switch hashes (relative mode) or a fully described hash (absolute).

// # The algebra
//
// A switch hashes the bytes `M` of the packet fields its layout names (in the layout's order)
// with a seed `s`. For the CRC families and the XOR fold, `H_s` is affine over GF(2): for
// messages of one length, `H_s(M ^ D) = H_s(M) ^ L(D)` with `L(D) = H_0(D) ^ H_0(0)` linear and
// independent of the seed and of `M` (for a CRC, the register's initial value and the final
// inversion cancel in the XOR of two runs of equal length). Our freedom is the UDP source port:
// `D` is a 14-bit `x` at the port's place and zero elsewhere, so `L_p(x) = L(x at port)` is a
// fixed linear map `GF(2)^14 -> GF(2)^w` that depends on the family and on where the port sits
// (for a CRC, on how many bytes follow it; for the XOR fold, on its byte alignment) but on no
// seed, address or port value. Ports stay in 0xC000..=0xFFFF because mlx5 derives the source port
// from a flow label as `0xC000 | (fl & 0x3FFF) ^ ((fl >> 14) & 0x3F)` (Linux
// include/rdma/ib_verbs.h `rdma_flow_label_to_udp_sport`, called by drivers/infiniband/hw/mlx5/
// qp.c `mlx5_set_path_udp_sport` at RTR when the address handle's flow label is non-zero).
//
// An ECMP group of `S = 2^m` members takes the hash's low `m` bits (or `h mod S`, the same thing).
// Let `B = mask_m . L_p`, an m x 14 matrix. If `rank B = m`, pick for each unit target `e_j`
// a preimage `u_j` (`B u_j = e_j`); then the port `base ^ XOR_{j in T} u_j` lands on bucket
// `b0 ^ T`, where `b0` is the base port's (unknown) bucket. The S targets `T = 0..S-1` are S
// distinct buckets for every seed and every value of the other fields. The kernel of `B`
// (dimension `14 - m`) gives `2^(14-m)` distinct ports per bucket: port `i >= S` takes target
// `i mod S` and kernel element `i / S`, so any count is balanced over the group.
//
// With E-ECMP (the BTH destination QPN hashed too) the QPN adds `L_q(qpn ^ qpn_ref)`; solving
// `B x = T ^ mask_m L_q(qpn ^ qpn_ref)` cancels it, so the QP keeps its target bucket.
//
// When the hash is known in full (family, seed, fields, group of any size with `mod`) the absolute
// mode computes buckets directly and searches the 2^14 ports for a balanced assignment.

use std::fmt;

/// Lowest source port reachable through the verbs flow label (mlx5: `fl -> 0xC000 | ...`).
pub const PIN_PORT_MIN: u16 = 0xC000;
/// Free bits of a pinned source port (0xC000..=0xFFFF).
pub const PIN_PORT_BITS: u32 = 14;
/// Largest ECMP group relative mode can spread over: one bucket per port bit pattern.
pub const MAX_RELATIVE_GROUP: u32 = 1 << PIN_PORT_BITS;
/// IP protocol number of UDP, RoCEv2's carrier.
pub const PROTO_UDP: u8 = 17;
/// UDP destination port of RoCEv2.
pub const ROCE_UDP_DPORT: u16 = 4791;

const PORT_MASK: u16 = (1 << PIN_PORT_BITS) - 1;
const QPN_BITS: usize = 24;

/// A switch hash family. All three are affine over GF(2), which relative mode needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashFamily {
    /// CRC-32 (IEEE 802.3, reflected, polynomial 0x04C11DB7); the register starts at `!seed`
    /// and the result is inverted, so seed 0 is the plain CRC-32. 32-bit result.
    Crc32,
    /// CRC-16-CCITT (polynomial 0x1021, not reflected, no final XOR); the register starts at the
    /// seed's low 16 bits (0xFFFF gives CRC-16/CCITT-FALSE). 16-bit result.
    Crc16Ccitt,
    /// XOR of the big-endian 16-bit words of the hashed bytes (an odd tail padded with a zero
    /// byte), XORed with the seed's low 16 bits. 16-bit result.
    XorFold,
}

impl HashFamily {
    /// Bits of the hash value.
    pub fn width(self) -> u32 {
        match self {
            HashFamily::Crc32 => 32,
            HashFamily::Crc16Ccitt | HashFamily::XorFold => 16,
        }
    }

    /// The hash of `bytes` with `seed`.
    pub fn hash(self, seed: u32, bytes: &[u8]) -> u32 {
        match self {
            HashFamily::Crc32 => crc32(seed, bytes),
            HashFamily::Crc16Ccitt => u32::from(crc16_ccitt(seed as u16, bytes)),
            HashFamily::XorFold => u32::from(xor_fold(seed as u16, bytes)),
        }
    }
}

/// How a switch picks the ECMP member from the hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BucketSelect {
    /// The hash's low `log2(group)` bits; the group must be a power of two.
    LowBits,
    /// `hash mod group`; any group size.
    Mod,
}

impl BucketSelect {
    /// The member `hash` selects in a group of `group`; `None` for a group of 0, or for
    /// `LowBits` with a group that is not a power of two.
    pub fn bucket(self, hash: u32, group: u32) -> Option<u32> {
        match self {
            BucketSelect::LowBits if group.is_power_of_two() => Some(hash & (group - 1)),
            BucketSelect::LowBits => None,
            BucketSelect::Mod => hash.checked_rem(group),
        }
    }
}

/// A packet field a switch may hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// IPv4 source address, 4 bytes.
    SrcIp,
    /// IPv4 destination address, 4 bytes.
    DstIp,
    /// IP protocol, 1 byte.
    Protocol,
    /// UDP source port, 2 bytes: the field we choose.
    SrcPort,
    /// UDP destination port, 2 bytes.
    DstPort,
    /// BTH destination QPN, 3 bytes (E-ECMP, switches that parse past UDP).
    DstQpn,
}

impl Field {
    /// Bytes the field takes in the hashed input.
    pub fn width(self) -> usize {
        match self {
            Field::SrcIp | Field::DstIp => 4,
            Field::Protocol => 1,
            Field::SrcPort | Field::DstPort => 2,
            Field::DstQpn => 3,
        }
    }
}

/// Most fields a layout holds (each at most once).
pub const MAX_FIELDS: usize = 6;
/// Longest hashed input: every field once.
pub const MAX_HASH_BYTES: usize = 16;

/// Which fields a switch hashes, in which order: the port's position (bytes before and after it)
/// decides its image under the hash's linear map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldLayout {
    fields: [Option<Field>; MAX_FIELDS],
}

impl FieldLayout {
    /// `fields` in hashing order; each at most once and `SrcPort` among them.
    pub fn new(fields: &[Field]) -> Result<Self, PinError> {
        let mut out = [None; MAX_FIELDS];
        for (i, &f) in fields.iter().enumerate() {
            if fields[..i].contains(&f) {
                return Err(PinError::DuplicateField { field: f });
            }
            out[i] = Some(f);
        }
        if !fields.contains(&Field::SrcPort) {
            return Err(PinError::NoSourcePort);
        }
        Ok(FieldLayout { fields: out })
    }

    /// The RoCEv2 5-tuple: source IP, destination IP, protocol, source port, destination port.
    pub fn five_tuple() -> Self {
        Self::new(&[
            Field::SrcIp,
            Field::DstIp,
            Field::Protocol,
            Field::SrcPort,
            Field::DstPort,
        ])
        .expect("static layout")
    }

    /// The 5-tuple followed by the BTH destination QPN (E-ECMP).
    pub fn five_tuple_qpn() -> Self {
        Self::new(&[
            Field::SrcIp,
            Field::DstIp,
            Field::Protocol,
            Field::SrcPort,
            Field::DstPort,
            Field::DstQpn,
        ])
        .expect("static layout")
    }

    /// The fields in hashing order.
    pub fn fields(&self) -> impl Iterator<Item = Field> + '_ {
        self.fields.iter().map_while(|f| *f)
    }

    /// Whether the switch hashes `field`.
    pub fn hashes(&self, field: Field) -> bool {
        self.fields().any(|f| f == field)
    }

    /// Bytes of hashed input.
    pub fn len_bytes(&self) -> usize {
        self.fields().map(Field::width).sum()
    }

    /// Bytes hashed after the source port (a CRC's port image depends on this).
    pub fn bytes_after_port(&self) -> usize {
        let mut after = 0;
        for f in self.fields() {
            if f == Field::SrcPort {
                after = 0;
            } else {
                after += f.width();
            }
        }
        after
    }

    /// Serializes `flow` as the switch would feed it; returns the buffer and the length used.
    pub fn bytes(&self, flow: &FlowFields) -> ([u8; MAX_HASH_BYTES], usize) {
        let mut b = [0u8; MAX_HASH_BYTES];
        let mut n = 0;
        for f in self.fields() {
            let w = f.width();
            let src: [u8; 4] = match f {
                Field::SrcIp => flow.src_ip.to_be_bytes(),
                Field::DstIp => flow.dst_ip.to_be_bytes(),
                Field::Protocol => u32::from(flow.protocol).to_be_bytes(),
                Field::SrcPort => u32::from(flow.src_port).to_be_bytes(),
                Field::DstPort => u32::from(flow.dst_port).to_be_bytes(),
                Field::DstQpn => (flow.dst_qpn & 0xFF_FFFF).to_be_bytes(),
            };
            b[n..n + w].copy_from_slice(&src[4 - w..]);
            n += w;
        }
        (b, n)
    }
}

/// The values of the fields of one QP's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowFields {
    pub src_ip: u32,
    pub dst_ip: u32,
    pub protocol: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// 24 bits used.
    pub dst_qpn: u32,
}

impl FlowFields {
    /// A RoCEv2 flow (UDP to port 4791).
    pub fn roce(src_ip: u32, dst_ip: u32, src_port: u16, dst_qpn: u32) -> Self {
        FlowFields {
            src_ip,
            dst_ip,
            protocol: PROTO_UDP,
            src_port,
            dst_port: ROCE_UDP_DPORT,
            dst_qpn,
        }
    }
}

/// A switch's hash in full: family, seed and the fields it hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashSpec {
    pub family: HashFamily,
    pub seed: u32,
    pub layout: FieldLayout,
}

impl HashSpec {
    /// The hash of one QP's packets.
    pub fn hash(&self, flow: &FlowFields) -> u32 {
        let (b, n) = self.layout.bytes(flow);
        self.family.hash(self.seed, &b[..n])
    }
}

/// Why ports cannot be pinned as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinError {
    /// An ECMP group of 0 members.
    EmptyGroup,
    /// Relative mode, or `LowBits` selection, with a group that is not a power of two.
    NotPowerOfTwo { group: u32 },
    /// Relative mode over more members than 2^14 ports can tell apart, or than the hash has bits.
    GroupTooLarge { group: u32, max: u32 },
    /// The hash's bucket bits see fewer independent port bits than the group needs.
    RankDeficient { rank: u32, needed: u32 },
    /// A base port outside 0xC000..=0xFFFF.
    PortOutOfRange { port: u16 },
    /// A layout that names a field twice.
    DuplicateField { field: Field },
    /// A layout without the UDP source port: nothing to choose.
    NoSourcePort,
    /// More ports than the group's buckets x ports per bucket.
    IndexTooLarge { index: u32, capacity: u32 },
    /// A relative target bucket at or above the group size.
    NoSuchBucket { bucket: u32, group: u32 },
    /// Re-pin asked to land on the bucket the port already has.
    SameBucket { bucket: u32 },
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PinError::EmptyGroup => write!(f, "path pinning: the ECMP group has no members"),
            PinError::NotPowerOfTwo { group } => write!(
                f,
                "path pinning: relative mode (and low-bits selection) needs a power-of-two ECMP \
                 group, got {group}; describe the site's hash in full for absolute mode"
            ),
            PinError::GroupTooLarge { group, max } => write!(
                f,
                "path pinning: an ECMP group of {group} exceeds the {max} buckets the 14 free \
                 source-port bits and the hash width can tell apart"
            ),
            PinError::RankDeficient { rank, needed } => write!(
                f,
                "path pinning: this hash's bucket bits depend on only {rank} independent \
                 source-port bits, {needed} needed for the group"
            ),
            PinError::PortOutOfRange { port } => write!(
                f,
                "path pinning: base port {port} is outside 49152..=65535 (0xC000..=0xFFFF), \
                 the ports a verbs flow label can reach"
            ),
            PinError::DuplicateField { field } => {
                write!(f, "path pinning: the hash layout names {field:?} twice")
            }
            PinError::NoSourcePort => write!(
                f,
                "path pinning: the hash layout does not hash the UDP source port, so no port \
                 choice moves a QP"
            ),
            PinError::IndexTooLarge { index, capacity } => write!(
                f,
                "path pinning: port index {index} exceeds the {capacity} distinct ports available"
            ),
            PinError::NoSuchBucket { bucket, group } => write!(
                f,
                "path pinning: relative bucket {bucket} is outside the group of {group}"
            ),
            PinError::SameBucket { bucket } => write!(
                f,
                "path pinning: re-pin target {bucket} is the port's current bucket"
            ),
        }
    }
}

impl std::error::Error for PinError {}

/// Relative pinning: ports whose buckets differ by known offsets for any seed and any values of the
/// other fields. Bucket numbers here are offsets (XOR) from the base port's unknown bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelativePins {
    base: u16,
    group: u32,
    /// Port deltas whose masked image is the unit target `1 << j`, `j < log2(group)`.
    unit: [u16; PIN_PORT_BITS as usize],
    /// Port deltas with masked image 0: independent, `kernel_len` of them.
    kernel: [u16; PIN_PORT_BITS as usize],
    kernel_len: u32,
    /// Masked images of the 14 port bits and of the 24 QPN bits (all 0 when the QPN is not
    /// hashed).
    port_img: [u32; PIN_PORT_BITS as usize],
    qpn_img: [u32; QPN_BITS],
}

impl RelativePins {
    /// Prepares relative pinning for a switch of `family` selecting by `select` over `group`
    /// members, hashing `layout`, from `base_port` (0xC000..=0xFFFF).
    pub fn new(
        family: HashFamily,
        select: BucketSelect,
        layout: FieldLayout,
        group: u32,
        base_port: u16,
    ) -> Result<Self, PinError> {
        if group == 0 {
            return Err(PinError::EmptyGroup);
        }
        // Low bits and mod agree on a power-of-two group (so `select` changes nothing there);
        // `mod` over any other size is not linear, so relative mode refuses it.
        if !group.is_power_of_two() {
            return Err(PinError::NotPowerOfTwo { group });
        }
        debug_assert_eq!(select.bucket(u32::MAX, group), Some(group - 1));
        let max = MAX_RELATIVE_GROUP.min(1u32.checked_shl(family.width()).unwrap_or(u32::MAX));
        if group > max {
            return Err(PinError::GroupTooLarge { group, max });
        }
        if base_port < PIN_PORT_MIN {
            return Err(PinError::PortOutOfRange { port: base_port });
        }
        let m = group.trailing_zeros();
        let mask = group - 1;
        let spec = HashSpec {
            family,
            seed: 0,
            layout,
        };
        let zero = FlowFields {
            src_ip: 0,
            dst_ip: 0,
            protocol: 0,
            src_port: 0,
            dst_port: 0,
            dst_qpn: 0,
        };
        let h0 = spec.hash(&zero);
        let linear = |flow: &FlowFields| (spec.hash(flow) ^ h0) & mask;
        let mut port_img = [0u32; PIN_PORT_BITS as usize];
        for (k, img) in port_img.iter_mut().enumerate() {
            *img = linear(&FlowFields {
                src_port: 1 << k,
                ..zero
            });
        }
        let mut qpn_img = [0u32; QPN_BITS];
        if layout.hashes(Field::DstQpn) {
            for (k, img) in qpn_img.iter_mut().enumerate() {
                *img = linear(&FlowFields {
                    dst_qpn: 1 << k,
                    ..zero
                });
            }
        }
        // Gaussian elimination: pivots (image, port delta) with distinct leading bits; vectors
        // that reduce to 0 are the kernel.
        let mut pivots: [(u32, u16); PIN_PORT_BITS as usize] = [(0, 0); PIN_PORT_BITS as usize];
        let mut npiv = 0usize;
        let mut kernel = [0u16; PIN_PORT_BITS as usize];
        let mut kernel_len = 0u32;
        for (k, &img) in port_img.iter().enumerate() {
            let (mut v, mut d) = (img, 1u16 << k);
            for &(pv, pd) in &pivots[..npiv] {
                if v & (1 << (31 - pv.leading_zeros())) != 0 {
                    v ^= pv;
                    d ^= pd;
                }
            }
            if v == 0 {
                kernel[kernel_len as usize] = d;
                kernel_len += 1;
            } else {
                // Keep pivots sorted by leading bit, highest first, so one pass reduces.
                let pos = pivots[..npiv]
                    .iter()
                    .position(|&(pv, _)| pv.leading_zeros() > v.leading_zeros())
                    .unwrap_or(npiv);
                pivots.copy_within(pos..npiv, pos + 1);
                pivots[pos] = (v, d);
                npiv += 1;
            }
        }
        if (npiv as u32) < m {
            return Err(PinError::RankDeficient {
                rank: npiv as u32,
                needed: m,
            });
        }
        let mut unit = [0u16; PIN_PORT_BITS as usize];
        for (j, u) in unit.iter_mut().enumerate().take(m as usize) {
            let (mut t, mut d) = (1u32 << j, 0u16);
            for &(pv, pd) in &pivots[..npiv] {
                if t & (1 << (31 - pv.leading_zeros())) != 0 {
                    t ^= pv;
                    d ^= pd;
                }
            }
            debug_assert_eq!(t, 0, "full rank reduces every target");
            *u = d;
        }
        Ok(RelativePins {
            base: base_port,
            group,
            unit,
            kernel,
            kernel_len,
            port_img,
            qpn_img,
        })
    }

    /// The ECMP group size.
    pub fn group(&self) -> u32 {
        self.group
    }

    /// The base port (relative bucket 0 with the reference QPN).
    pub fn base_port(&self) -> u16 {
        self.base
    }

    /// Distinct ports available: group x ports per bucket.
    pub fn capacity(&self) -> u32 {
        self.group << self.kernel_len
    }

    /// The port of the `index`-th QP towards one peer NIC (see [`channel_qp_index`] for several
    /// connections): indices `0..group` land on distinct buckets, later ones balance over them.
    pub fn port(&self, index: u32) -> Result<u16, PinError> {
        self.port_for(index % self.group, index / self.group, None)
    }

    /// As [`RelativePins::port`] for a switch that also hashes the destination QPN: the QP with
    /// destination `qpn` keeps its target relative to the hash of (base port, `ref_qpn`).
    pub fn port_qpn(&self, index: u32, ref_qpn: u32, qpn: u32) -> Result<u16, PinError> {
        self.port_for(index % self.group, index / self.group, Some((ref_qpn, qpn)))
    }

    /// The `variant`-th port landing on relative bucket `bucket` (`qpn`: `(ref_qpn, qpn)` where
    /// the site hashes the destination QPN).
    pub fn port_for(
        &self,
        bucket: u32,
        variant: u32,
        qpn: Option<(u32, u32)>,
    ) -> Result<u16, PinError> {
        if bucket >= self.group {
            return Err(PinError::NoSuchBucket {
                bucket,
                group: self.group,
            });
        }
        if variant >> self.kernel_len != 0 {
            return Err(PinError::IndexTooLarge {
                index: variant.saturating_mul(self.group).saturating_add(bucket),
                capacity: self.capacity(),
            });
        }
        let target = bucket ^ self.qpn_offset(qpn);
        let mut x = 0u16;
        for (j, &u) in self.unit.iter().enumerate() {
            if target >> j & 1 != 0 {
                x ^= u;
            }
        }
        for (i, &k) in self.kernel[..self.kernel_len as usize].iter().enumerate() {
            if variant >> i & 1 != 0 {
                x ^= k;
            }
        }
        Ok(self.base ^ x)
    }

    /// The relative bucket `port` lands on (with `(ref_qpn, qpn)` where the QPN is hashed).
    pub fn relative_bucket(&self, port: u16, qpn: Option<(u32, u32)>) -> u32 {
        let x = (port ^ self.base) & PORT_MASK;
        let mut b = 0;
        for (k, &img) in self.port_img.iter().enumerate() {
            if x >> k & 1 != 0 {
                b ^= img;
            }
        }
        b ^ self.qpn_offset(qpn)
    }

    /// Re-pins a QP now on `port`: a port on relative bucket `target`, or, for `None`, on the
    /// next bucket after its current one (the slow-QP rule's move off a congested path).
    pub fn repin(
        &self,
        port: u16,
        qpn: Option<(u32, u32)>,
        target: Option<u32>,
    ) -> Result<u16, PinError> {
        let current = self.relative_bucket(port, qpn);
        let target = target.unwrap_or((current + 1) % self.group);
        if target == current {
            return Err(PinError::SameBucket { bucket: current });
        }
        self.port_for(target, 0, qpn)
    }

    fn qpn_offset(&self, qpn: Option<(u32, u32)>) -> u32 {
        let Some((r, q)) = qpn else { return 0 };
        let d = (r ^ q) & 0xFF_FFFF;
        let mut b = 0;
        for (k, &img) in self.qpn_img.iter().enumerate() {
            if d >> k & 1 != 0 {
                b ^= img;
            }
        }
        b
    }
}

/// Global index of QP `qp` of connection (NCCL channel) `channel` when every connection to one
/// peer NIC has `qps_per_channel` QPs: channel `c` takes the next `qps_per_channel` buckets, so
/// channels are disjoint while they fit in the group and all of them together balance over it.
pub fn channel_qp_index(channel: u32, qp: u32, qps_per_channel: u32) -> u32 {
    channel * qps_per_channel + qp
}

/// A switch's hash and ECMP group in full, for absolute pinning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AbsoluteSpec {
    pub hash: HashSpec,
    pub select: BucketSelect,
    pub group: u32,
}

impl AbsoluteSpec {
    /// The member `flow` lands on.
    pub fn bucket(&self, flow: &FlowFields) -> Result<u32, PinError> {
        self.check()?;
        Ok(self.bucket_unchecked(flow))
    }

    fn bucket_unchecked(&self, flow: &FlowFields) -> u32 {
        self.select
            .bucket(self.hash.hash(flow), self.group)
            .unwrap_or(0)
    }

    fn check(&self) -> Result<(), PinError> {
        if self.group == 0 {
            return Err(PinError::EmptyGroup);
        }
        if self.select == BucketSelect::LowBits && !self.group.is_power_of_two() {
            return Err(PinError::NotPowerOfTwo { group: self.group });
        }
        Ok(())
    }

    /// Source ports for `flows` (their `src_port` ignored) from `base_port` on: each flow takes
    /// the first port, scanning 0xC000..=0xFFFF from the base and skipping ports already given,
    /// that lands on a least-loaded member; distinct members while `flows.len() <= group`,
    /// balanced beyond. Where no port reaches a least-loaded member the best port found is kept.
    pub fn ports(&self, base_port: u16, flows: &[FlowFields]) -> Result<Vec<u16>, PinError> {
        self.check()?;
        if base_port < PIN_PORT_MIN {
            return Err(PinError::PortOutOfRange { port: base_port });
        }
        let mut load = vec![0u32; self.group.min(1 << 20) as usize];
        let mut out: Vec<u16> = Vec::with_capacity(flows.len());
        for flow in flows {
            let least = load.iter().copied().min().unwrap_or(0);
            let mut best: Option<(u32, u16)> = None;
            for k in 0..=PORT_MASK {
                let port = PIN_PORT_MIN | ((base_port.wrapping_add(k)) & PORT_MASK);
                if out.contains(&port) {
                    continue;
                }
                let b = self.bucket_unchecked(&FlowFields {
                    src_port: port,
                    ..*flow
                });
                let l = load.get(b as usize).copied().unwrap_or(0);
                if best.is_none_or(|(bl, _)| l < bl) {
                    best = Some((l, port));
                }
                if l == least {
                    break;
                }
            }
            let Some((_, port)) = best else {
                return Err(PinError::IndexTooLarge {
                    index: out.len() as u32,
                    capacity: MAX_RELATIVE_GROUP,
                });
            };
            let b = self.bucket_unchecked(&FlowFields {
                src_port: port,
                ..*flow
            });
            if let Some(l) = load.get_mut(b as usize) {
                *l += 1;
            }
            out.push(port);
        }
        Ok(out)
    }

    /// Re-pins `flow`: the first port after its own (wrapping in 0xC000..=0xFFFF) that lands on
    /// member `target`, or, for `None`, on any member but its current one. `None` when no port
    /// does (a group of one, or a target the hash cannot reach).
    pub fn repin(&self, flow: &FlowFields, target: Option<u32>) -> Result<Option<u16>, PinError> {
        self.check()?;
        let current = self.bucket_unchecked(flow);
        if target == Some(current) {
            return Err(PinError::SameBucket { bucket: current });
        }
        for k in 1..=PORT_MASK {
            let port = PIN_PORT_MIN | (flow.src_port.wrapping_add(k) & PORT_MASK);
            let b = self.bucket_unchecked(&FlowFields {
                src_port: port,
                ..*flow
            });
            if target.map_or(b != current, |t| b == t) {
                return Ok(Some(port));
            }
        }
        Ok(None)
    }
}

/// `rdma_calc_flow_label(lqpn, rqpn)` (Linux include/rdma/ib_verbs.h): the 20-bit flow label a
/// QP pair gets when the address handle's is 0, the source of today's QPN-derived ports.
pub fn qpn_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// `rdma_flow_label_to_udp_sport(fl)` (Linux include/rdma/ib_verbs.h): the source port of a
/// flow label, in 0xC000..=0xFFFF.
pub fn port_for_flow_label(fl: u32) -> u16 {
    let low = fl & 0x3FFF;
    let high = fl & 0xF_C000;
    ((low ^ (high >> 14)) | u32::from(PIN_PORT_MIN)) as u16
}

/// The UDP source port mlx5 gives QP `lqpn` connected to `rqpn` with flow label 0.
pub fn qpn_port(lqpn: u32, rqpn: u32) -> u16 {
    port_for_flow_label(qpn_flow_label(lqpn, rqpn))
}

/// A non-zero 20-bit flow label whose source port is `port` (the verbs transport sets it as
/// `ah_attr.grh.flow_label` at RTR; a label of 0 would fall back to the QPN-derived port).
pub fn flow_label_for_port(port: u16) -> Result<u32, PinError> {
    if port < PIN_PORT_MIN {
        return Err(PinError::PortOutOfRange { port });
    }
    let low = u32::from(port & PORT_MASK);
    // Port 0xC000 needs a high part: fl = 0x4001 -> low 1 ^ (0x4000 >> 14 = 1) = 0.
    Ok(if low == 0 { 0x4001 } else { low })
}

const fn crc32_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

const fn crc16_table() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC32_TABLE: [u32; 256] = crc32_table();
static CRC16_TABLE: [u16; 256] = crc16_table();

/// CRC-32 (IEEE 802.3, reflected) of `bytes`, register from `!seed`, output inverted.
pub fn crc32(seed: u32, bytes: &[u8]) -> u32 {
    let mut c = !seed;
    for &b in bytes {
        c = CRC32_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

/// CRC-16-CCITT (0x1021, not reflected, no final XOR) of `bytes`, register from `seed`.
pub fn crc16_ccitt(seed: u16, bytes: &[u8]) -> u16 {
    let mut c = seed;
    for &b in bytes {
        c = (c << 8) ^ CRC16_TABLE[usize::from((c >> 8) as u8 ^ b)];
    }
    c
}

/// XOR of the big-endian 16-bit words of `bytes` (odd tail padded with 0), XOR `seed`.
pub fn xor_fold(seed: u16, bytes: &[u8]) -> u16 {
    let mut h = seed;
    for w in bytes.chunks(2) {
        h ^= u16::from(w[0]) << 8 | u16::from(w.get(1).copied().unwrap_or(0));
    }
    h
}

#[cfg(test)]
mod tests;
