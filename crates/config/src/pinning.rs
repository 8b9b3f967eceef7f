//! Path pinning settings: the per-class mode and the site's `[paths]` description of the switches'
//! ECMP hash (family, selection, hashed fields, seed), from which source ports are chosen.

use serde::{Deserialize, Serialize};

use super::schema::NCCL_STEP_BYTES;

/// How a class's data QPs get their source ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathPinning {
    /// The NIC's or kernel's port (mlx5: derived from the QPNs; TCP: ephemeral): hashed paths.
    #[default]
    Off,
    /// Ports on distinct buckets relative to an unknown seed and unknown other fields: needs the
    /// hash family, the hashed fields' order and a power-of-two `ecmp-width`.
    Relative,
    /// Ports on chosen buckets of a hash described in full (`[paths]` seed too); any group size
    /// with `select = "mod"`.
    Absolute,
}

impl PathPinning {
    /// The spelling used in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            PathPinning::Off => "off",
            PathPinning::Relative => "relative",
            PathPinning::Absolute => "absolute",
        }
    }
}

/// A switch hash family; all are linear over GF(2), which relative pinning relies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HashFamilyName {
    /// CRC-32 (IEEE 802.3, polynomial 0x04C11DB7).
    #[default]
    Crc32,
    /// CRC-16-CCITT (polynomial 0x1021).
    Crc16Ccitt,
    /// XOR fold of the hashed bytes' 16-bit words.
    XorFold,
}

impl HashFamilyName {
    pub fn as_str(self) -> &'static str {
        match self {
            HashFamilyName::Crc32 => "crc32",
            HashFamilyName::Crc16Ccitt => "crc16-ccitt",
            HashFamilyName::XorFold => "xor-fold",
        }
    }

    /// The generator polynomial of a CRC family (normal form), None for the XOR fold.
    pub fn polynomial(self) -> Option<u32> {
        match self {
            HashFamilyName::Crc32 => Some(0x04C1_1DB7),
            HashFamilyName::Crc16Ccitt => Some(0x1021),
            HashFamilyName::XorFold => None,
        }
    }

    /// Bits of the hash value.
    pub fn width(self) -> u32 {
        match self {
            HashFamilyName::Crc32 => 32,
            HashFamilyName::Crc16Ccitt | HashFamilyName::XorFold => 16,
        }
    }
}

/// How a switch picks the ECMP member from the hash value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BucketSelectName {
    /// The low log2(group) bits (power-of-two groups).
    #[default]
    LowBits,
    /// hash mod group (any group size).
    Mod,
}

impl BucketSelectName {
    pub fn as_str(self) -> &'static str {
        match self {
            BucketSelectName::LowBits => "low-bits",
            BucketSelectName::Mod => "mod",
        }
    }
}

/// A header field the switches hash, in `[paths] fields` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HashField {
    SrcIp,
    DstIp,
    Protocol,
    SrcPort,
    DstPort,
}

/// Accepted `[paths] fields` entries.
pub(crate) const FIELD_NAMES: &[&str] = &["src-ip", "dst-ip", "protocol", "src-port", "dst-port"];

impl HashField {
    pub fn as_str(self) -> &'static str {
        match self {
            HashField::SrcIp => "src-ip",
            HashField::DstIp => "dst-ip",
            HashField::Protocol => "protocol",
            HashField::SrcPort => "src-port",
            HashField::DstPort => "dst-port",
        }
    }
}

/// Lowest pinned port: mlx5 turns a flow label into a port in 0xC000..=0xFFFF.
pub const PIN_PORT_MIN: u16 = 0xC000;

/// `[paths]`: what the site's switches hash and how they pick a member, for `path-pinning`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct PathsSection {
    /// The hash family of the switches on the pinned classes' paths.
    pub hash: HashFamilyName,
    /// How the member is taken from the hash.
    pub select: BucketSelectName,
    /// The hashed fields in the order the switch feeds them (the source port's place decides its
    /// image under the hash); must contain `src-port`.
    pub fields: Vec<HashField>,
    /// E-ECMP: the switches also hash the BTH destination QPN (after the fields).
    pub hash_dest_qpn: bool,
    /// The hash seed (absolute mode only; relative mode works whatever it is).
    pub seed: u32,
    /// Optional check: the family's generator polynomial as the switch documents it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub polynomial: Option<u32>,
    /// The first pinned source port (relative bucket 0): 49152..=65535.
    pub base_port: u16,
}

impl Default for PathsSection {
    fn default() -> Self {
        PathsSection {
            hash: HashFamilyName::Crc32,
            select: BucketSelectName::LowBits,
            fields: vec![
                HashField::SrcIp,
                HashField::DstIp,
                HashField::Protocol,
                HashField::SrcPort,
                HashField::DstPort,
            ],
            hash_dest_qpn: false,
            seed: 0,
            polynomial: None,
            base_port: PIN_PORT_MIN,
        }
    }
}

/// The segment of a pinned class without its own `segment-bytes`: NCCL's 512 KiB step spread
/// over the S = `ecmp-width` pinned paths (a multiple of 128, at least 4 KiB), so every step uses
/// every path of a NIC pair (its connections' QPs together cover the S buckets).
pub fn pinned_segment_bytes(ecmp_width: u32) -> u64 {
    let per_qp = NCCL_STEP_BYTES / u64::from(ecmp_width.max(1));
    (per_qp / 128 * 128).max(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_segment_is_the_step_over_the_qps() {
        assert_eq!(pinned_segment_bytes(32), 16_384);
        assert_eq!(pinned_segment_bytes(8), 65_536);
        assert_eq!(pinned_segment_bytes(1), 524_288);
        // 512 KiB / 12 = 43690.67 -> 43648 (a multiple of 128).
        assert_eq!(pinned_segment_bytes(12), 43_648);
        // 512 KiB / 128 = 4096, the smallest segment.
        assert_eq!(pinned_segment_bytes(128), 4096);
    }

    #[test]
    fn family_facts() {
        assert_eq!(HashFamilyName::Crc32.polynomial(), Some(0x04C1_1DB7));
        assert_eq!(HashFamilyName::Crc16Ccitt.polynomial(), Some(0x1021));
        assert_eq!(HashFamilyName::XorFold.polynomial(), None);
        let names: Vec<&str> = [
            HashField::SrcIp,
            HashField::DstIp,
            HashField::Protocol,
            HashField::SrcPort,
            HashField::DstPort,
        ]
        .iter()
        .map(|f| f.as_str())
        .collect();
        assert_eq!(names, FIELD_NAMES);
    }
}
