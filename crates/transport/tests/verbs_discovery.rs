//! Device discovery on real verbs: rxe0 in the Soft-RoCE VM must show an active Ethernet port with
//! speed, MTU, PCI path and the IPv4-mapped RoCE v2 GID; a fake sysfs root changes what is read.
#![cfg(feature = "verbs")]

use dqplb_test_support::verbs::require_device;
use dqplb_transport::verbs::{
    discover, discover_report, discover_system, Discovery, GidKind, LinkLayer, QpTuning, Sysfs,
};

#[test]
fn discovery_never_errors() {
    // hosts without RDMA must get an empty list, not an error
    let devices = discover_system().expect("discovery must succeed with or without RDMA");
    for d in &devices {
        assert!(
            !d.ports.is_empty(),
            "{} listed without an active port",
            d.name
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn rxe_device_has_sane_properties() {
    let dev = require_device("rxe_device_has_sane_properties");
    eprintln!("discovered: {dev:#?}");
    let port = &dev.ports[0];
    assert_eq!(port.port, 1);
    assert_eq!(port.link_layer, LinkLayer::Ethernet);
    assert!(port.speed_mbps >= 1_000, "speed {} Mbps", port.speed_mbps);
    assert_eq!(port.lid, 0, "RoCE ports have no LID");
    if dev.name.starts_with("rxe") {
        // rxe is a virtual device: /sys/class/infiniband/rxe0/device does not exist
        assert_eq!(dev.pci_path, None);
        // the VM puts rxe0 on dummy0 with MTU 9000 and 10.77.0.1
        assert_eq!(port.active_mtu, 4096);
        let gid = port.gid.expect("rxe0 has a GID");
        assert_eq!(gid.kind, GidKind::RoceV2);
        assert_eq!(&gid.gid[10..], &[0xff, 0xff, 10, 77, 0, 1]);
    } else {
        let pci = dev
            .pci_path
            .as_ref()
            .expect("a NIC has a PCI parent in sysfs");
        assert!(pci.is_absolute());
    }
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn forced_gid_index_is_honoured() {
    let dev = require_device("forced_gid_index_is_honoured");
    let tuning = QpTuning {
        gid_index: Some(0),
        ..QpTuning::default()
    };
    let devices = discover(&Sysfs::default(), &tuning).expect("discover");
    let again = devices
        .iter()
        .find(|d| d.name == dev.name)
        .expect("same device");
    let gid = again.ports[0].gid.expect("GID 0 exists");
    assert_eq!(gid.index, 0);
    assert_ne!(gid.gid, [0u8; 16]);

    let bad = QpTuning {
        gid_index: Some(4000),
        ..QpTuning::default()
    };
    // a port without the forced GID index is skipped (one WARN in the plugin), not fatal
    let report = discover_report(&Sysfs::default(), &bad).expect("discover");
    let Discovery::Found { devices, skipped } = report else {
        panic!("libibverbs loaded above, so discovery must find devices: {report:?}");
    };
    assert!(
        devices.iter().all(|d| d.name != dev.name),
        "{} listed without a usable port",
        dev.name
    );
    let s = skipped
        .iter()
        .find(|s| s.device == dev.name)
        .expect("the port is reported as skipped");
    assert_eq!(s.port, Some(dev.ports[0].port));
    let text = s.to_string();
    assert!(
        text.contains("NCCL_IB_GID_INDEX") && text.contains(&dev.name),
        "{text}"
    );
    assert!(discover(&Sysfs::default(), &bad)
        .expect("discover")
        .iter()
        .all(|d| d.name != dev.name));
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn sysfs_root_is_used() {
    let dev = require_device("sysfs_root_is_used");
    // an empty fake root: rate falls back to the verbs width/speed codes, no PCI path, no GID table
    let root = std::env::temp_dir().join(format!("dqplb-empty-sysfs-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("mkdir");
    let devices = discover(&Sysfs::new(&root), &QpTuning::default()).expect("discover");
    let fake = devices
        .iter()
        .find(|d| d.name == dev.name)
        .expect("same device");
    assert_eq!(fake.pci_path, None);
    assert_eq!(fake.ports[0].gid, None);
    assert!(fake.ports[0].speed_mbps > 0);
    std::fs::remove_dir_all(&root).expect("cleanup");
}
