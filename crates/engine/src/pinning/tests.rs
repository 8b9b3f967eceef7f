//! Tests of path pinning: the hashes against the `crc` crate, relative ports on distinct buckets
//! for random seeds and fields (plain and E-ECMP), absolute search, re-pin and the edge cases.

use super::*;
use crc::{Crc, CRC_16_IBM_3740, CRC_32_ISO_HDLC};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

static REF32: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);
static REF16: Crc<u16> = Crc::<u16>::new(&CRC_16_IBM_3740);

/// The reference CRC-32 with a seed: the crate bit-reverses a custom initial value (the
/// algorithm is reflected), so hand it the value whose reverse is `!seed`.
fn ref_crc32(seed: u32, bytes: &[u8]) -> u32 {
    let mut d = REF32.digest_with_initial((!seed).reverse_bits());
    d.update(bytes);
    d.finalize()
}

/// The reference CRC-16/CCITT (CRC-16/IBM-3740 is 0x1021, not reflected, no final XOR).
fn ref_crc16(seed: u16, bytes: &[u8]) -> u16 {
    let mut d = REF16.digest_with_initial(seed);
    d.update(bytes);
    d.finalize()
}

/// The real bucket of `port` on a switch, computed with the reference CRCs.
fn real_bucket(
    family: HashFamily,
    seed: u32,
    layout: FieldLayout,
    flow: FlowFields,
    group: u32,
) -> u32 {
    let (b, n) = layout.bytes(&flow);
    let h = match family {
        HashFamily::Crc32 => ref_crc32(seed, &b[..n]),
        HashFamily::Crc16Ccitt => u32::from(ref_crc16(seed as u16, &b[..n])),
        HashFamily::XorFold => u32::from(xor_fold(seed as u16, &b[..n])),
    };
    h & (group - 1)
}

const FAMILIES: [HashFamily; 3] = [
    HashFamily::Crc32,
    HashFamily::Crc16Ccitt,
    HashFamily::XorFold,
];

#[test]
fn hashes_match_the_reference_crcs() {
    assert_eq!(crc32(0, b"123456789"), 0xCBF4_3926);
    assert_eq!(crc16_ccitt(0xFFFF, b"123456789"), 0x29B1);
    let bytes: Vec<u8> = (0u8..40).map(|i| i.wrapping_mul(37) ^ 0x5A).collect();
    for seed in [0, 1, 9, 0x5eed_0000, 0x8000_0000, u32::MAX] {
        for len in [0, 1, 13, 16, 40] {
            assert_eq!(crc32(seed, &bytes[..len]), ref_crc32(seed, &bytes[..len]));
            assert_eq!(
                crc16_ccitt(seed as u16, &bytes[..len]),
                ref_crc16(seed as u16, &bytes[..len])
            );
        }
    }
    assert_eq!(xor_fold(0, &[0x12, 0x34, 0x56]), 0x1234 ^ 0x5600);
    assert_eq!(xor_fold(0xFFFF, &[]), 0xFFFF);
}

#[test]
fn layout_bytes_and_port_position() {
    let l = FieldLayout::five_tuple();
    let (b, n) = l.bytes(&FlowFields::roce(
        0x0A00_0001,
        0x0A00_0002,
        0xC123,
        0xABCDEF,
    ));
    assert_eq!(n, 13);
    assert_eq!(
        &b[..n],
        &[10, 0, 0, 1, 10, 0, 0, 2, 17, 0xC1, 0x23, 0x12, 0xB7]
    );
    assert_eq!(l.bytes_after_port(), 2);
    let e = FieldLayout::five_tuple_qpn();
    let (b, n) = e.bytes(&FlowFields::roce(1, 2, 3, 0x12AB_CDEF));
    assert_eq!(n, 16);
    assert_eq!(&b[13..16], &[0xAB, 0xCD, 0xEF]);
    assert_eq!(e.bytes_after_port(), 5);
    let p = FieldLayout::new(&[Field::SrcPort, Field::DstIp]).unwrap();
    assert_eq!(p.bytes_after_port(), 4);
    assert_eq!(p.len_bytes(), 6);
    assert_eq!(
        FieldLayout::new(&[Field::SrcIp, Field::DstIp]),
        Err(PinError::NoSourcePort)
    );
    assert_eq!(
        FieldLayout::new(&[Field::SrcPort, Field::SrcIp, Field::SrcPort]),
        Err(PinError::DuplicateField {
            field: Field::SrcPort
        })
    );
}

fn largest_group(family: HashFamily) -> u32 {
    // The XOR fold of the 5-tuple sees the port's high byte in its low byte (the port starts at
    // an odd offset): 6 free bits there.
    match family {
        HashFamily::XorFold => 64,
        _ => MAX_RELATIVE_GROUP,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn relative_ports_hit_distinct_buckets(
        seed in any::<u32>(),
        sip in any::<u32>(),
        dip in any::<u32>(),
        base in PIN_PORT_MIN..=u16::MAX,
        fam in 0usize..3,
        log2 in 0u32..=8,
    ) {
        let family = FAMILIES[fam];
        let group = (1u32 << log2).min(largest_group(family));
        let layout = FieldLayout::five_tuple();
        for select in [BucketSelect::LowBits, BucketSelect::Mod] {
            let pins = RelativePins::new(family, select, layout, group, base).unwrap();
            let mut buckets = BTreeSet::new();
            let mut ports = BTreeSet::new();
            for i in 0..group {
                let port = pins.port(i).unwrap();
                prop_assert!(port >= PIN_PORT_MIN);
                ports.insert(port);
                let flow = FlowFields::roce(sip, dip, port, 0);
                let b = real_bucket(family, seed, layout, flow, group);
                prop_assert_eq!(select.bucket(HashSpec { family, seed, layout }.hash(&flow), group), Some(b));
                buckets.insert(b);
                // The relative bucket is the XOR offset from the base port's.
                let b0 = real_bucket(family, seed, layout, FlowFields::roce(sip, dip, base, 0), group);
                prop_assert_eq!(b0 ^ pins.relative_bucket(port, None), b);
            }
            prop_assert_eq!(buckets.len() as u32, group);
            prop_assert_eq!(ports.len() as u32, group);
        }
    }

    #[test]
    fn eecmp_ports_cancel_the_destination_qpn(
        seed in any::<u32>(),
        sip in any::<u32>(),
        dip in any::<u32>(),
        base in PIN_PORT_MIN..=u16::MAX,
        qpns in proptest::collection::vec(0u32..(1 << 24), 32),
        fam in 0usize..2,
        log2 in 0u32..=5,
    ) {
        let family = FAMILIES[fam];
        let group = 1u32 << log2;
        let layout = FieldLayout::five_tuple_qpn();
        let pins = RelativePins::new(family, BucketSelect::LowBits, layout, group, base).unwrap();
        let reference = qpns[0];
        let mut buckets = BTreeSet::new();
        for (i, &q) in qpns.iter().enumerate().take(group as usize) {
            let port = pins.port_qpn(i as u32, reference, q).unwrap();
            buckets.insert(real_bucket(family, seed, layout, FlowFields::roce(sip, dip, port, q), group));
        }
        prop_assert_eq!(buckets.len() as u32, group);
    }

    #[test]
    fn channels_together_balance_over_the_group(
        seed in any::<u32>(),
        sip in any::<u32>(),
        base in PIN_PORT_MIN..=u16::MAX,
        channels in 1u32..=4,
        qps in 1u32..=8,
    ) {
        let group = 8;
        let layout = FieldLayout::five_tuple();
        let pins = RelativePins::new(HashFamily::Crc32, BucketSelect::LowBits, layout, group, base).unwrap();
        let mut load = BTreeMap::new();
        let mut ports = BTreeSet::new();
        for c in 0..channels {
            let mut own = BTreeSet::new();
            for q in 0..qps {
                let port = pins.port(channel_qp_index(c, q, qps)).unwrap();
                prop_assert!(ports.insert(port), "ports are distinct");
                let b = real_bucket(HashFamily::Crc32, seed, layout, FlowFields::roce(sip, 7, port, 0), group);
                own.insert(b);
                *load.entry(b).or_insert(0u32) += 1;
            }
            // Each channel alone is spread as far as the group allows.
            prop_assert_eq!(own.len() as u32, qps.min(group));
        }
        let total = channels * qps;
        let (lo, hi) = (total / group, total.div_ceil(group));
        prop_assert!(load.values().all(|&l| l == lo || l == hi), "balanced: {load:?}");
        prop_assert_eq!(load.len() as u32, total.min(group));
    }

    #[test]
    fn absolute_ports_are_distinct_or_balanced(
        seed in any::<u32>(),
        sip in any::<u32>(),
        dip in any::<u32>(),
        base in PIN_PORT_MIN..=u16::MAX,
        group in 1u32..=40,
        count in 1usize..=80,
        qpn_hashed in any::<bool>(),
    ) {
        let layout = if qpn_hashed { FieldLayout::five_tuple_qpn() } else { FieldLayout::five_tuple() };
        let spec = AbsoluteSpec {
            hash: HashSpec { family: HashFamily::Crc32, seed, layout },
            select: BucketSelect::Mod,
            group,
        };
        let flows: Vec<FlowFields> = (0..count as u32)
            .map(|i| FlowFields::roce(sip, dip, 0, 0x100 + i * 3))
            .collect();
        let ports = spec.ports(base, &flows).unwrap();
        let mut load = vec![0u32; group as usize];
        for (f, &p) in flows.iter().zip(&ports) {
            let flow = FlowFields { src_port: p, ..*f };
            let (b, n) = layout.bytes(&flow);
            let h = ref_crc32(seed, &b[..n]);
            load[(h % group) as usize] += 1;
        }
        let (lo, hi) = (count as u32 / group, (count as u32).div_ceil(group));
        prop_assert!(load.iter().all(|&l| l == lo || l == hi), "balanced: {load:?}");
    }
}

#[test]
fn more_ports_than_buckets_balance_with_distinct_ports() {
    let pins = RelativePins::new(
        HashFamily::Crc16Ccitt,
        BucketSelect::LowBits,
        FieldLayout::five_tuple(),
        32,
        0xC000,
    )
    .unwrap();
    assert_eq!(pins.capacity(), 1 << 14);
    let mut per_bucket = BTreeMap::new();
    let mut ports = BTreeSet::new();
    for i in 0..96 {
        let p = pins.port(i).unwrap();
        assert!(ports.insert(p));
        *per_bucket.entry(pins.relative_bucket(p, None)).or_insert(0) += 1;
    }
    assert_eq!(per_bucket.len(), 32);
    assert!(per_bucket.values().all(|&n| n == 3));
    assert_eq!(
        pins.port(1 << 14),
        Err(PinError::IndexTooLarge {
            index: 1 << 14,
            capacity: 1 << 14
        })
    );
}

#[test]
fn every_port_of_the_largest_group_on_its_own_bucket() {
    let layout = FieldLayout::five_tuple();
    // CRC-16-CCITT of the 5-tuple sees all 14 port bits in its low 14 bits.
    let family = HashFamily::Crc16Ccitt;
    let group = MAX_RELATIVE_GROUP;
    let pins = RelativePins::new(family, BucketSelect::Mod, layout, group, 0xD00D).unwrap();
    let mut seen = vec![false; group as usize];
    for i in 0..group {
        let port = pins.port(i).unwrap();
        let b = real_bucket(family, 77, layout, FlowFields::roce(5, 6, port, 0), group);
        assert!(!seen[b as usize], "bucket {b} twice");
        seen[b as usize] = true;
    }
}

#[test]
fn group_of_one_gives_distinct_ports() {
    let pins = RelativePins::new(
        HashFamily::Crc32,
        BucketSelect::LowBits,
        FieldLayout::five_tuple(),
        1,
        0xC000,
    )
    .unwrap();
    let ports: BTreeSet<u16> = (0..100).map(|i| pins.port(i).unwrap()).collect();
    assert_eq!(ports.len(), 100);
    assert_eq!(
        pins.repin(0xC000, None, None),
        Err(PinError::SameBucket { bucket: 0 })
    );
}

#[test]
fn relative_refusals_name_the_problem() {
    let l = FieldLayout::five_tuple();
    let e = RelativePins::new(HashFamily::Crc32, BucketSelect::Mod, l, 24, 0xC000).unwrap_err();
    assert_eq!(e, PinError::NotPowerOfTwo { group: 24 });
    assert!(e.to_string().contains("power-of-two ECMP group, got 24"));
    assert!(e.to_string().contains("absolute mode"));
    assert_eq!(
        RelativePins::new(HashFamily::Crc32, BucketSelect::Mod, l, 0, 0xC000),
        Err(PinError::EmptyGroup)
    );
    assert_eq!(
        RelativePins::new(HashFamily::Crc32, BucketSelect::LowBits, l, 1 << 15, 0xC000),
        Err(PinError::GroupTooLarge {
            group: 1 << 15,
            max: 1 << 14
        })
    );
    assert_eq!(
        RelativePins::new(HashFamily::Crc32, BucketSelect::LowBits, l, 4, 0x1234),
        Err(PinError::PortOutOfRange { port: 0x1234 })
    );
    assert_eq!(
        RelativePins::new(HashFamily::XorFold, BucketSelect::LowBits, l, 128, 0xC000),
        Err(PinError::RankDeficient { rank: 6, needed: 7 })
    );
    // At an even offset the fold sees all 14 bits.
    let even = FieldLayout::new(&[Field::SrcIp, Field::SrcPort, Field::DstPort]).unwrap();
    assert!(RelativePins::new(
        HashFamily::XorFold,
        BucketSelect::LowBits,
        even,
        1 << 14,
        0xC000
    )
    .is_ok());
}

#[test]
fn relative_repin_moves_to_the_target_bucket() {
    let layout = FieldLayout::five_tuple_qpn();
    let pins =
        RelativePins::new(HashFamily::Crc32, BucketSelect::LowBits, layout, 16, 0xC100).unwrap();
    let (r, q) = (0x1111, 0x2345);
    let port = pins.port_qpn(3, r, q).unwrap();
    assert_eq!(pins.relative_bucket(port, Some((r, q))), 3);
    let next = pins.repin(port, Some((r, q)), None).unwrap();
    assert_eq!(pins.relative_bucket(next, Some((r, q))), 4);
    let to9 = pins.repin(port, Some((r, q)), Some(9)).unwrap();
    assert_eq!(pins.relative_bucket(to9, Some((r, q))), 9);
    assert_eq!(
        pins.repin(port, Some((r, q)), Some(3)),
        Err(PinError::SameBucket { bucket: 3 })
    );
    assert_eq!(
        pins.repin(port, Some((r, q)), Some(16)),
        Err(PinError::NoSuchBucket {
            bucket: 16,
            group: 16
        })
    );
    // Against the real hash: the re-pinned port lands 9 ^ 3 away from the old one.
    let real = |p| {
        real_bucket(
            HashFamily::Crc32,
            4242,
            layout,
            FlowFields::roce(1, 2, p, q),
            16,
        )
    };
    assert_eq!(real(port) ^ real(to9), 3 ^ 9);
}

#[test]
fn absolute_repin_and_refusals() {
    let spec = AbsoluteSpec {
        hash: HashSpec {
            family: HashFamily::Crc32,
            seed: 99,
            layout: FieldLayout::five_tuple(),
        },
        select: BucketSelect::Mod,
        group: 31,
    };
    let flow = FlowFields::roce(10, 20, 0xC000, 0);
    let cur = spec.bucket(&flow).unwrap();
    let moved = spec.repin(&flow, None).unwrap().unwrap();
    assert_ne!(
        spec.bucket(&FlowFields {
            src_port: moved,
            ..flow
        })
        .unwrap(),
        cur
    );
    let t = (cur + 5) % 31;
    let to = spec.repin(&flow, Some(t)).unwrap().unwrap();
    assert_eq!(
        spec.bucket(&FlowFields {
            src_port: to,
            ..flow
        })
        .unwrap(),
        t
    );
    assert_eq!(
        spec.repin(&flow, Some(cur)),
        Err(PinError::SameBucket { bucket: cur })
    );
    let one = AbsoluteSpec { group: 1, ..spec };
    assert_eq!(one.repin(&flow, None), Ok(None));
    let low = AbsoluteSpec {
        select: BucketSelect::LowBits,
        ..spec
    };
    assert_eq!(
        low.ports(0xC000, &[flow]),
        Err(PinError::NotPowerOfTwo { group: 31 })
    );
    assert_eq!(
        AbsoluteSpec { group: 0, ..spec }.bucket(&flow),
        Err(PinError::EmptyGroup)
    );
    assert_eq!(
        spec.ports(0x8000, &[flow]),
        Err(PinError::PortOutOfRange { port: 0x8000 })
    );
}

#[test]
fn flow_labels_round_trip_every_pinnable_port() {
    for port in PIN_PORT_MIN..=u16::MAX {
        let fl = flow_label_for_port(port).unwrap();
        assert!(fl != 0 && fl < 1 << 20, "port {port:#x} label {fl:#x}");
        assert_eq!(port_for_flow_label(fl), port);
    }
    assert_eq!(
        flow_label_for_port(4791),
        Err(PinError::PortOutOfRange { port: 4791 })
    );
    // Worked example: 0x100 * 0x200 = 0x20000 -> fl 0x20000 -> low 0 ^ (0x20000 >> 14 = 8).
    assert_eq!(qpn_flow_label(0x100, 0x200), 0x20000);
    assert_eq!(qpn_port(0x100, 0x200), 0xC008);
}

#[test]
fn largest_relative_group_per_family_and_layout() {
    // log2 of the largest group relative mode serves: the rank of the port's image in the
    // hash's low bits (rank 14 would need every port bit to reach every bucket bit).
    let cases = [
        (HashFamily::Crc32, FieldLayout::five_tuple(), 12),
        (HashFamily::Crc32, FieldLayout::five_tuple_qpn(), 11),
        (HashFamily::Crc16Ccitt, FieldLayout::five_tuple(), 14),
        (HashFamily::Crc16Ccitt, FieldLayout::five_tuple_qpn(), 12),
        (HashFamily::XorFold, FieldLayout::five_tuple(), 6),
        (HashFamily::XorFold, FieldLayout::five_tuple_qpn(), 6),
    ];
    for (family, layout, max_log2) in cases {
        for m in 0..=14u32 {
            let r = RelativePins::new(family, BucketSelect::LowBits, layout, 1 << m, 0xC000);
            if m <= max_log2 {
                assert!(r.is_ok(), "{family:?} {m}: {r:?}");
            } else {
                assert!(
                    matches!(r, Err(PinError::RankDeficient { needed, .. }) if needed == m),
                    "{family:?} {m}: {r:?}"
                );
            }
        }
    }
}
