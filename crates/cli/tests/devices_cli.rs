//! `dqplb devices` against a fake sysfs tree: ports, states, GIDs with RoCE version, address and
//! netdev, NCCL_IB_HCA fabric ids and the reason a port is not used; and a tree with no device.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// mlx5_0 port 1: RoCE, active, 400G, GIDs 0 (v1 link-local), 1 (v2 link-local), 2 (v1 IPv4),
/// 3 (v2 IPv4) on eth2 (MTU 4200); mlx5_1 port 1: RoCE, DOWN; ib0 port 1: InfiniBand, active.
fn tree(tag: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("dqplb-devices-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let ib = "class/infiniband";
    let port = |dev: &str, state: &str, phys: &str, link: &str, rate: &str| {
        let d = format!("{ib}/{dev}/ports/1");
        put(&root, &format!("{d}/state"), state);
        put(&root, &format!("{d}/phys_state"), phys);
        put(&root, &format!("{d}/link_layer"), link);
        put(&root, &format!("{d}/rate"), rate);
    };
    port(
        "mlx5_0",
        "4: ACTIVE\n",
        "5: LinkUp\n",
        "Ethernet\n",
        "400 Gb/sec (4X NDR)\n",
    );
    port(
        "mlx5_1",
        "1: DOWN\n",
        "3: Disabled\n",
        "Ethernet\n",
        "100 Gb/sec (4X EDR)\n",
    );
    port(
        "ib0",
        "4: ACTIVE\n",
        "5: LinkUp\n",
        "InfiniBand\n",
        "200 Gb/sec (4X HDR)\n",
    );
    let gids = [
        ("0", "fe80:0000:0000:0000:0200:00ff:fe00:0001", "IB/RoCE v1"),
        ("1", "fe80:0000:0000:0000:0200:00ff:fe00:0001", "RoCE v2"),
        ("2", "0000:0000:0000:0000:0000:ffff:0a00:0102", "IB/RoCE v1"),
        ("3", "0000:0000:0000:0000:0000:ffff:0a00:0102", "RoCE v2"),
        ("4", "0000:0000:0000:0000:0000:0000:0000:0000", ""),
    ];
    for (i, gid, kind) in gids {
        let d = format!("{ib}/mlx5_0/ports/1");
        put(&root, &format!("{d}/gids/{i}"), gid);
        if !kind.is_empty() {
            put(&root, &format!("{d}/gid_attrs/types/{i}"), kind);
            put(&root, &format!("{d}/gid_attrs/ndevs/{i}"), "eth2\n");
        }
    }
    put(
        &root,
        &format!("{ib}/mlx5_1/ports/1/gids/0"),
        "fe80:0000:0000:0000:0200:00ff:fe00:0002",
    );
    put(
        &root,
        &format!("{ib}/ib0/ports/1/gids/0"),
        "fe80:0000:0000:0000:0002:c903:0000:0001",
    );
    put(&root, "class/net/eth2/mtu", "4200\n");
    root
}

fn devices(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .arg("devices")
        .arg("--sysfs-root")
        .arg(root)
        .args(args)
        .env_remove("NCCL_IB_HCA")
        .env_remove("NCCL_IB_DISABLE")
        .env_remove("NCCL_DQPLB_CONF")
        .env_remove("NCCL_DQPLB_TRANSPORT")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn ports_gids_fabric_ids_and_reasons() {
    let root = tree("table");
    let out = stdout(&devices(&root, &["--hca", "=mlx5_0:1:3,mlx5_1:1:4"]));
    let line = |dev: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{dev} ")))
            .unwrap_or_else(|| panic!("no {dev} row: {out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        line("mlx5_0"),
        "mlx5_0 1 ACTIVE LinkUp Ethernet 400G 4200 3 0 3 yes"
    );
    assert_eq!(
        line("mlx5_1"),
        "mlx5_1 1 DOWN Disabled Ethernet 100G - 4 0 4 no: port state DOWN, not ACTIVE"
    );
    assert_eq!(
        line("ib0"),
        "ib0 1 ACTIVE LinkUp InfiniBand 200G - - - - no: not in NCCL_IB_HCA"
    );
    assert!(
        out.contains("gid   3 RoCE v2    ::ffff:10.0.1.2                          10.0.1.2 on eth2  <- selected"),
        "{out}"
    );
    assert!(out.contains("gid   2 IB/RoCE v1"), "{out}");
    assert!(
        !out.contains("gid   4"),
        "all-zero GIDs are not listed: {out}"
    );
    assert!(
        out.contains("NCCL_IB_HCA '=mlx5_0:1:3,mlx5_1:1:4'"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn json_and_exclusion() {
    let root = tree("json");
    let out = stdout(&devices(&root, &["--json", "--hca", "^mlx5_0"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ports = v["ports"].as_array().unwrap();
    let names: Vec<&str> = ports
        .iter()
        .map(|p| p["device"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ib0", "mlx5_0", "mlx5_1"]);
    assert_eq!(ports[0]["used"], true);
    assert_eq!(ports[0]["selected_gid"], 0);
    assert_eq!(ports[0]["rate_gbps"], 200.0);
    assert_eq!(ports[1]["used"], false);
    assert_eq!(ports[1]["reason"], "excluded by NCCL_IB_HCA");
    assert_eq!(ports[1]["gids"][3]["kind"], "RoCE v2");
    assert_eq!(ports[1]["gids"][3]["address"], "10.0.1.2");
    assert_eq!(ports[1]["netdev_mtu"], 4200);
    assert_eq!(ports[2]["reason"], "port state DOWN, not ACTIVE");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn no_rdma_device_is_said_plainly() {
    let root = std::env::temp_dir().join(format!("dqplb-devices-empty-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let out = stdout(&devices(&root, &[]));
    assert!(
        out.contains("no RDMA devices: the plugin will use its TCP transport over"),
        "{out}"
    );
    let o = devices(&root, &["--hca", "mlx5_0:1:x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("NCCL_IB_HCA entry 'mlx5_0:1:x'"));
    let _ = std::fs::remove_dir_all(&root);
}
