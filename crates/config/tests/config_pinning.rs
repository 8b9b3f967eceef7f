//! Path pinning settings: `path-pinning` and `ecmp-width` per class, the `[paths]` hash description,
//! their validation errors (key, line, accepted values) and the pinned class's derived segment.

use dqplb_config::{
    parse_str, BucketSelectName, ConfigErrorKind, ConnClass, HashFamilyName, HashField,
    PathPinning, SiteConfig,
};

#[test]
fn defaults_pin_nothing_and_describe_a_crc32_five_tuple() {
    let c = SiteConfig::default();
    for class in ConnClass::ALL {
        assert_eq!(c.class.get(class).path_pinning, PathPinning::Off);
        assert_eq!(c.class.get(class).ecmp_width, None);
    }
    assert_eq!(c.paths.hash, HashFamilyName::Crc32);
    assert_eq!(c.paths.select, BucketSelectName::LowBits);
    assert_eq!(
        c.paths.fields,
        [
            HashField::SrcIp,
            HashField::DstIp,
            HashField::Protocol,
            HashField::SrcPort,
            HashField::DstPort
        ]
    );
    assert!(!c.paths.hash_dest_qpn);
    assert_eq!((c.paths.seed, c.paths.base_port), (0, 49152));
}

#[test]
fn a_pinned_class_spreads_each_nccl_step_over_its_qps() {
    let text = "[class.cross-rail]\nqps = 32\npath-pinning = \"relative\"\necmp-width = 32\n\
                [paths]\nhash = \"crc16-ccitt\"\nhash-dest-qpn = true\n";
    let c = parse_str(text, "site.toml").expect("valid");
    assert_eq!(c.class.cross_rail.path_pinning, PathPinning::Relative);
    assert_eq!(c.class.cross_rail.ecmp_width(), 32);
    // 512 KiB / 32 = 16 KiB, and 32 QPs x 2 x 16 KiB = 1 MiB in flight.
    let p = c.plan(ConnClass::CrossRail);
    assert_eq!((p.qps, p.segment_bytes, p.outstanding), (32, 16_384, 2));
    assert_eq!(p.inflight_bytes, 1 << 20);
    // An explicit segment still wins; unpinned classes keep the engine's.
    let c = parse_str(
        "[class.cross-rail]\npath-pinning = \"absolute\"\nsegment-bytes = 32768\n",
        "site.toml",
    )
    .expect("valid");
    assert_eq!(c.plan(ConnClass::CrossRail).segment_bytes, 32_768);
    assert_eq!(c.plan(ConnClass::SameRail).segment_bytes, 65_536);
    // ecmp-width unset: the class's qps (8).
    assert_eq!(c.class.cross_rail.ecmp_width(), 8);
    // 16 QPs per connection over 32 members (NCCL's 2 channels to a peer cover them): the step
    // is cut over the 32 paths, 16 KiB, and a connection's window is 16 x 2 x 16 KiB = 512 KiB.
    let c = parse_str(
        "[class.cross-rail]\nqps = 16\npath-pinning = \"relative\"\necmp-width = 32\n",
        "site.toml",
    )
    .expect("valid");
    let p = c.plan(ConnClass::CrossRail);
    assert_eq!(
        (p.qps, p.segment_bytes, p.inflight_bytes),
        (16, 16_384, 524_288)
    );
}

#[test]
fn relative_pinning_refuses_a_group_that_is_not_a_power_of_two() {
    let text = "[class.same-rail]\npath-pinning = \"relative\"\necmp-width = 12\n";
    let e = parse_str(text, "site.toml").unwrap_err();
    assert_eq!(e.kind, ConfigErrorKind::Inconsistent);
    assert_eq!(e.key.as_deref(), Some("class.same-rail.ecmp-width"));
    assert_eq!(e.line, Some(3));
    assert!(
        e.detail.contains(
            "class same-rail pins relative paths over an ECMP group of 12, not a power of two"
        ),
        "{e}"
    );
    assert!(e.detail.contains("path-pinning = \"absolute\""), "{e}");
    assert_eq!(
        e.accepted.as_deref(),
        Some("a power of two: 1, 2, 4, ..., 16384")
    );
    // Without ecmp-width the group is qps, and the error names qps.
    let e = parse_str(
        "[class.same-rail]\nqps = 6\npath-pinning = \"relative\"\n",
        "site.toml",
    )
    .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("class.same-rail.qps"));
    // Absolute with mod takes any group; with low bits it needs a power of two.
    let text = "[class.same-rail]\npath-pinning = \"absolute\"\necmp-width = 12\n[paths]\nselect = \"mod\"\n";
    assert!(parse_str(text, "site.toml").is_ok());
    let text = "[class.same-rail]\npath-pinning = \"absolute\"\necmp-width = 12\n";
    let e = parse_str(text, "site.toml").unwrap_err();
    assert!(e.detail.contains("select = \"low-bits\""), "{e}");
    // Unpinned classes are not checked: 12 is fine with pinning off.
    assert!(parse_str("[class.same-rail]\necmp-width = 12\n", "site.toml").is_ok());
}

#[test]
fn bad_values_name_the_key_and_the_accepted_ones() {
    let e = parse_str("[class.cross-dc]\npath-pinning = \"on\"\n", "site.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("class.cross-dc.path-pinning"));
    assert_eq!(
        e.accepted.as_deref(),
        Some("one of \"off\", \"relative\", \"absolute\"")
    );
    let e = parse_str("[class.cross-dc]\necmp-width = 0\n", "site.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("class.cross-dc.ecmp-width"));
    assert_eq!(e.accepted.as_deref(), Some("an integer in 1..=16384"));
    let e = parse_str("[paths]\nhash = \"toeplitz\"\n", "site.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("paths.hash"));
    let e = parse_str("[paths]\nbase-port = 1000\n", "site.toml").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("paths.base-port"));
    assert_eq!(e.accepted.as_deref(), Some("an integer in 49152..=65535"));
    let e = parse_str(
        "[paths]\nfields = [\"src-ip\", \"src-ip\", \"src-port\"]\n",
        "site.toml",
    )
    .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("paths.fields"));
    assert!(e.detail.contains("entry \"src-ip\" is listed twice"), "{e}");
}

#[test]
fn pinning_needs_the_source_port_among_the_hashed_fields() {
    // Fine while nothing pins.
    let only_ips = "[paths]\nfields = [\"src-ip\", \"dst-ip\"]\n";
    assert!(parse_str(only_ips, "site.toml").is_ok());
    let text = format!("[class.cross-rail]\npath-pinning = \"relative\"\n{only_ips}");
    let e = parse_str(&text, "site.toml").unwrap_err();
    assert_eq!(e.kind, ConfigErrorKind::Inconsistent);
    assert_eq!(e.key.as_deref(), Some("paths.fields"));
    assert!(e.detail.contains("do not include \"src-port\""), "{e}");
}

#[test]
fn a_polynomial_must_be_the_familys() {
    assert!(parse_str("[paths]\npolynomial = 0x04C11DB7\n", "site.toml").is_ok());
    let e = parse_str(
        "[paths]\nhash = \"crc16-ccitt\"\npolynomial = 0x8005\n",
        "site.toml",
    )
    .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("paths.polynomial"));
    assert_eq!(e.line, Some(3));
    assert!(
        e.detail.contains("polynomial 0x8005 is not the generator"),
        "{e}"
    );
    assert_eq!(
        e.accepted.as_deref(),
        Some("0x1021 (4129) for hash = \"crc16-ccitt\"")
    );
    let e = parse_str(
        "[paths]\nhash = \"xor-fold\"\npolynomial = 7\n",
        "site.toml",
    )
    .unwrap_err();
    assert!(
        e.accepted
            .as_deref()
            .is_some_and(|a| a.contains("remove the key")),
        "{e}"
    );
}
