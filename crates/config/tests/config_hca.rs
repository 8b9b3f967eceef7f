//! Unit-level checks of the NCCL_IB_HCA parser through its public API: exact error messages per
//! bad field, error kinds, prefix/exact matching, ports and exclusion.

use dqplb_config::hca::{FabricId, HcaError, HcaErrorKind, HcaList, Selected};
use dqplb_config::HcaThirdField;

use HcaThirdField::{FabricId as Fid, RailPlane};

fn parse(s: &str) -> Result<HcaList, HcaError> {
    HcaList::parse(s, Fid, 8)
}

fn msg(s: &str, mode: HcaThirdField) -> String {
    match HcaList::parse(s, mode, 8) {
        Ok(l) => format!("unexpectedly parsed: {l:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn parses_fabric_ids() {
    let l = parse("=mlx5_0:1:0,mlx5_1:1:9").expect("valid");
    assert!(l.exact && !l.exclude);
    assert_eq!(l.entries.len(), 2);
    assert_eq!(l.entries[1].name, "mlx5_1");
    assert_eq!(l.entries[1].port, Some(1));
    assert_eq!(
        l.entries[1].fabric,
        Some(FabricId {
            id: 9,
            dc: 1,
            rail: 1,
            plane: None
        })
    );
    assert_eq!(l.to_string(), "=mlx5_0:1:0,mlx5_1:1:9");
}

#[test]
fn parses_rail_plane() {
    let l = HcaList::parse("mlx5_0:1:3:1,mlx5_1:2:7", RailPlane, 8).expect("valid");
    assert_eq!(
        l.entries[0].fabric,
        Some(FabricId {
            id: 3,
            dc: 0,
            rail: 3,
            plane: Some(1)
        })
    );
    assert_eq!(
        l.entries[1].fabric,
        Some(FabricId {
            id: 7,
            dc: 0,
            rail: 7,
            plane: None
        })
    );
}

#[test]
fn error_messages_name_entry_and_field() {
    assert_eq!(
        msg("mlx5_0:x", Fid),
        "NCCL_IB_HCA entry 'mlx5_0:x': port 'x' is not a number (expected 1..=255); \
         this entry matches no port"
    );
    assert_eq!(
        msg("mlx5_0:0", Fid),
        "NCCL_IB_HCA entry 'mlx5_0:0': port '0' is out of range (expected 1..=255); \
         this entry matches no port"
    );
    assert_eq!(
        msg("mlx5_0:1:abc", Fid),
        "NCCL_IB_HCA entry 'mlx5_0:1:abc': fabric id 'abc' is not a number (expected 0..=65535); \
         the site's default fabric id is used"
    );
    assert_eq!(
        msg("mlx5_0:1:65536", Fid),
        "NCCL_IB_HCA entry 'mlx5_0:1:65536': fabric id '65536' is out of range \
         (expected 0..=65535); the site's default fabric id is used"
    );
    assert_eq!(
        msg("mlx5_0:1:8", RailPlane),
        "NCCL_IB_HCA entry 'mlx5_0:1:8': rail '8' is out of range (expected 0..=7); \
         the site's default fabric id is used"
    );
    assert!(msg("a:1:2:3:4", RailPlane).contains("5 fields; expected dev[:port"));
    assert_eq!(
        msg("", Fid),
        "NCCL_IB_HCA: no devices listed in ''; every device is used (as NCCL does)"
    );
    assert!(msg("^=", Fid).starts_with("NCCL_IB_HCA: no devices listed in '^='"));
    assert_eq!(
        msg("mlx5_0,,mlx5_1", Fid),
        "NCCL_IB_HCA: entry 2 is empty (stray comma?); skipped"
    );
    assert!(msg(":1", Fid).contains("device name is empty"));
    assert!(msg("mlx5_0,^mlx5_1", Fid).contains("'^' is only accepted once"));
    assert!(msg("mlx5 0", Fid).contains("device name contains ' '"));
    assert_eq!(
        msg("mlx5_0:1,mlx5_0:1:3", Fid),
        "NCCL_IB_HCA entry 'mlx5_0:1:3': duplicate of entry 1 (same device and port); \
         the first one wins"
    );
    assert!(msg("^mlx5_0:1:3", Fid).contains("exclude"));
}

#[test]
fn error_kinds() {
    let kind = |s: &str| HcaList::parse(s, Fid, 8).map_err(|e| e.kind).err();
    assert_eq!(kind("a:1:2:3:4"), Some(HcaErrorKind::TooManyFields));
    assert_eq!(kind("a,a"), Some(HcaErrorKind::Duplicate));
    assert_eq!(kind("a:99999999999"), Some(HcaErrorKind::BadPort));
    let many: Vec<String> = (0..33).map(|i| format!("mlx5_{i}")).collect();
    assert_eq!(kind(&many.join(",")), Some(HcaErrorKind::TooManyEntries));
    assert!(HcaList::parse(&many[..32].join(","), Fid, 8).is_ok());
    assert_eq!(
        HcaList::parse("a", Fid, 0).map_err(|e| e.kind).err(),
        Some(HcaErrorKind::BadMaxRails)
    );
}

/// Forms NCCL accepts (src/misc/utils.cc parseStringList, 2.30.7) parse without a diagnostic.
#[test]
fn nccl_2_30_forms_are_clean() {
    // `dev::rail:plane`: empty port = any port.
    let l = HcaList::parse("=mlx5_0::0:0", RailPlane, 8).expect("2.30 form");
    assert_eq!(l.entries[0].port, None);
    assert_eq!(
        l.entries[0].fabric,
        Some(FabricId {
            id: 0,
            dc: 0,
            rail: 0,
            plane: Some(0)
        })
    );
    assert!(l.select("mlx5_0", 2).is_some());
    assert_eq!(l.to_string(), "=mlx5_0::0:0");
    // Four fields in fabric-id mode: the fourth is the plane.
    let l = parse("mlx5_0:1:9:1").expect("four fields");
    assert_eq!(
        l.entries[0].fabric,
        Some(FabricId {
            id: 9,
            dc: 1,
            rail: 1,
            plane: Some(1)
        })
    );
    assert_eq!(l.to_string(), "mlx5_0:1:9:1");
}

/// The plugin's reading: never fails on what NCCL accepts, says what it ignored, and selects the
/// same devices NCCL would.
#[test]
fn lenient_reading_matches_nccl() {
    let lenient = |s: &str| HcaList::parse_lenient(s, Fid, 8).expect("lenient never fails");
    // Trailing comma and an empty entry: skipped, one diagnostic each.
    let (l, d) = lenient("mlx5_0:1:0,,mlx5_1:1:1,");
    assert_eq!(l.entries.len(), 2);
    assert_eq!(d.len(), 2, "{d:?}");
    assert!(d.iter().all(|e| e.kind == HcaErrorKind::EmptyEntry));
    // Duplicates: the first wins.
    let (l, d) = lenient("mlx5_0:1:0,mlx5_0:1:5");
    assert_eq!(l.entries.len(), 1);
    assert_eq!(l.select("mlx5_0", 1).unwrap().fabric.unwrap().id, 0);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].kind, HcaErrorKind::Duplicate);
    // A non-numeric port matches no port (NCCL's atoi gives 0); "1x" is port 1, "-1" any port.
    let (l, d) = lenient("mlx5_0:x,mlx5_1:1x,mlx5_2:-1");
    assert_eq!(d.len(), 3);
    assert!(l.select("mlx5_0", 1).is_none());
    assert!(l.select("mlx5_1", 1).is_some() && l.select("mlx5_1", 2).is_none());
    assert!(l.select("mlx5_2", 7).is_some());
    // A bad fabric id keeps the device with the site's default fabric id.
    let (l, d) = lenient("mlx5_0:1:zz");
    let sel = l.select("mlx5_0", 1).expect("kept");
    assert_eq!(sel.fabric, None);
    assert_eq!(d[0].kind, HcaErrorKind::BadFabricId);
    // Past 32 entries the rest are ignored.
    let many: Vec<String> = (0..40).map(|i| format!("=mlx5_{i}")).collect();
    let (l, d) = lenient(&many.join(",").replace(",=", ","));
    assert_eq!(l.entries.len(), 32);
    assert_eq!(d.len(), 1);
    assert!(l.select("mlx5_31", 1).is_some() && l.select("mlx5_35", 1).is_none());
    // An empty list selects every device, as NCCL's matchIfList does.
    for s in ["", "^", "=", ",,"] {
        let (l, _) = lenient(s);
        assert!(l.select("anything", 1).is_some(), "{s:?}");
        assert!(l.selects_device("anything"), "{s:?}");
    }
    // More than four fields: the rest is ignored.
    let (l, d) = lenient("mlx5_0:1:2:3:4:5");
    assert_eq!(l.entries[0].fabric.unwrap().plane, Some(3));
    assert_eq!(d[0].kind, HcaErrorKind::TooManyFields);
}

#[test]
fn prefix_exact_and_ports() {
    let prefix = parse("mlx5").expect("valid");
    assert!(prefix.selects_device("mlx5_0"));
    assert!(prefix.select("mlx5_11", 2).is_some());
    assert!(!prefix.selects_device("bnxt_re0"));
    let exact = parse("=mlx5_1:1:3").expect("valid");
    assert!(exact.select("mlx5_11", 1).is_none());
    assert!(exact.select("mlx5_1", 2).is_none());
    let sel = exact.select("mlx5_1", 1).expect("selected");
    assert_eq!(sel.entry, Some(0));
    assert_eq!(sel.fabric.map(|f| (f.dc, f.rail)), Some((0, 3)));
}

#[test]
fn exclusion() {
    let l = parse("^mlx5_0:1,mlx5_2").expect("valid");
    assert!(l.select("mlx5_0", 1).is_none());
    assert_eq!(
        l.select("mlx5_0", 2),
        Some(Selected {
            port: 2,
            entry: None,
            fabric: None
        })
    );
    assert!(l.selects_device("mlx5_0"));
    assert!(!l.selects_device("mlx5_2"));
    assert!(l.select("mlx5_20", 1).is_none(), "prefix exclusion");
    assert!(l.select("mlx5_1", 1).is_some());
}

/// Characters no device name has are refused even by the lenient reading, with a message that
/// says why ("mlx5_0;mlx5_1" used to pass as one device name that matched nothing).
#[test]
fn names_with_foreign_characters_are_refused() {
    let e = HcaList::parse_lenient("mlx5_0;mlx5_1", Fid, 8).unwrap_err();
    assert_eq!(e.kind, HcaErrorKind::BadName);
    assert_eq!(
        e.to_string(),
        "NCCL_IB_HCA entry 'mlx5_0;mlx5_1': device name contains ';', which no RDMA device or \
         interface name has (letters, digits, '_', '-', '.'); separate devices with ','"
    );
    for bad in ["mlx5 0", "mlx5_0,^mlx5_1", "=a=b", "mlx5/0", "mlx5\u{e9}"] {
        let e = HcaList::parse_lenient(bad, Fid, 8).unwrap_err();
        assert_eq!(e.kind, HcaErrorKind::BadName, "{bad}");
    }
    for good in ["mlx5_0", "bnxt_re0", "irdma-0", "bond0.100", "=rxe0:1"] {
        assert!(HcaList::parse(good, Fid, 8).is_ok(), "{good}");
    }
}

/// NCCL reads at most MAX_IB_DEVS (32) non-empty entries, duplicates included; the rest is
/// skipped unread with one diagnostic, and no diagnostic echoes the whole value.
#[test]
fn thousands_of_duplicates_stop_at_nccls_limit() {
    let n = 11_900;
    let v = vec!["mlx5_0:1"; n].join(",");
    let (l, d) = HcaList::parse_lenient(&v, Fid, 8).unwrap();
    assert_eq!(l.entries.len(), 1);
    let dup = d
        .iter()
        .filter(|e| e.kind == HcaErrorKind::Duplicate)
        .count();
    let over: Vec<&HcaError> = d
        .iter()
        .filter(|e| e.kind == HcaErrorKind::TooManyEntries)
        .collect();
    assert_eq!((dup, over.len(), d.len()), (31, 1, 32));
    assert_eq!(
        over[0].to_string(),
        format!(
            "NCCL_IB_HCA: more than 32 entries listed; the {} after the first 32 are ignored (as NCCL does: MAX_IB_DEVS)",
            n - 32
        )
    );
    assert!(d.iter().all(|e| e.to_string().len() < 200), "{d:?}");
    // An entry too long to echo is cut to 64 characters and its length.
    let long = format!("{}:x", "m".repeat(100));
    let e = HcaList::parse(&long, Fid, 8).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "NCCL_IB_HCA entry '{}... (102 bytes)': ",
            "m".repeat(64)
        )),
        "{e}"
    );
}
