//! Plugin init against NCCL-style environments: forms of NCCL_IB_HCA that NCCL accepts never fail
//! a TCP init, what NCCL would ignore is named in exactly one WARN line, and in auto mode names
//! of RDMA devices this host lacks fail init instead of running over TCP unnoticed.

use std::sync::{Arc, Mutex};

use nccl_net_dqplb::plugin::{self, log};

/// One test function: init and the environment are process-wide.
#[test]
fn init_accepts_what_nccl_accepts_and_warns_once_per_oddity() {
    let lines: Arc<Mutex<Vec<(log::NcclLevel, String)>>> = Arc::default();
    let sink_lines = Arc::clone(&lines);
    let sink: log::Sink = Arc::new(move |l: &log::Line<'_>| {
        sink_lines
            .lock()
            .unwrap()
            .push((l.level, l.msg.to_string()));
    });
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    std::env::set_var("NCCL_DEBUG", "INFO");
    std::env::remove_var("NCCL_DQPLB_CONF");
    // NCCL 2.30's `dev::rail:plane`, a four-field entry in fabric-id mode, a duplicate, an empty
    // entry and a trailing comma: NCCL's parseStringList takes all of these.
    let hca = "mlx5_0::0:0,mlx5_1:1:9:1,,mlx5_1:1:3,";
    std::env::set_var("NCCL_IB_HCA", hca);
    // NCCL_IB_TIMEOUT=0 (verbs: no ACK timeout) is a value NCCL passes through: accepted.
    std::env::set_var("NCCL_IB_TIMEOUT", "0");
    // Over TCP (fabric.transport = tcp) the RDMA names are only read: init succeeds.
    lines.lock().unwrap().clear();
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    plugin::init(Some(Arc::clone(&sink)))
        .unwrap_or_else(|e| panic!("init with NCCL_IB_HCA={hca} (tcp): {e}"));
    assert_eq!(plugin::device_count().unwrap(), 1, "tcp: lo");
    let got = lines.lock().unwrap().clone();
    let hca_warns: Vec<&String> = got
        .iter()
        .filter(|(l, m)| *l == log::NcclLevel::Warn && m.contains("NCCL_IB_HCA="))
        .map(|(_, m)| m)
        .collect();
    // Three oddities, in ONE WARN: the empty entry, the trailing comma, the duplicate. The 2.30
    // form and the four-field entry are clean.
    assert_eq!(
        hca_warns,
        [&format!(
            "NET/DQPLB : NCCL_IB_HCA='{hca}': 3 problems: entry 3 is empty (stray comma?); skipped; \
             entry 'mlx5_1:1:3': duplicate of entry 2 (same device and port); the first one wins; \
             entry 5 is empty (stray comma?); skipped"
        )],
        "{got:#?}"
    );
    // auto on a host without RDMA: NCCL_IB_HCA names RDMA devices that do not exist, so init
    // fails naming each (no silent fall-back to TCP).
    if std::path::Path::new("/sys/class/infiniband").exists() {
        eprintln!("SKIPPED the auto case: this host has RDMA devices");
    } else {
        std::env::set_var("NCCL_DQPLB_TRANSPORT", "auto");
        let e = plugin::init(Some(Arc::clone(&sink))).unwrap_err();
        assert_eq!(e.code, dqplb_transport::ErrorCode::SystemError);
        assert!(
            e.msg.starts_with("no usable RDMA device (2 reasons): mlx5_0: named by NCCL_IB_HCA, no such RDMA device; mlx5_1: named by NCCL_IB_HCA, no such RDMA device; init fails"),
            "{}",
            e.msg
        );
    }
    many_duplicates_are_one_short_warn(&lines, &sink);
    gdr_switches_on_tcp(&lines, &sink);
}

/// TCP devices: host memory only and no cache (regIsGlobal 0), unless the test-only switch forces
/// NCCL_PTR_CUDA on; a value other than 0/1 fails init naming the variable.
fn gdr_switches_on_tcp(lines: &Arc<Mutex<Vec<(log::NcclLevel, String)>>>, sink: &log::Sink) {
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    std::env::remove_var("NCCL_IB_HCA");
    plugin::init(Some(Arc::clone(sink))).unwrap();
    let p = plugin::properties(0).unwrap();
    assert_eq!((p.ptr_support, p.reg_is_global), (1, 0));
    std::env::set_var("DQPLB_TEST_FORCE_GDR", "1");
    lines.lock().unwrap().clear();
    plugin::init(Some(Arc::clone(sink))).unwrap();
    let p = plugin::properties(0).unwrap();
    assert_eq!((p.ptr_support, p.reg_is_global), (3, 0));
    let got = lines.lock().unwrap().clone();
    assert!(
        got.iter().any(|(l, m)| *l == log::NcclLevel::Info
            && m.contains("lo: GPUDirect NCCL_PTR_CUDA on, FORCED by DQPLB_TEST_FORCE_GDR=1")),
        "{got:#?}"
    );
    for (var, value) in [
        ("DQPLB_TEST_FORCE_GDR", "yes"),
        ("NCCL_IB_GDR_FLUSH_DISABLE", "2"),
    ] {
        std::env::set_var(var, value);
        let e = plugin::init(Some(Arc::clone(sink))).unwrap_err();
        assert_eq!(e.code, dqplb_transport::ErrorCode::InvalidArgument);
        assert_eq!(e.msg, format!("{var}={value:?}: must be 0 or 1"));
        std::env::set_var(var, "0");
    }
    std::env::remove_var("DQPLB_TEST_FORCE_GDR");
    std::env::remove_var("NCCL_IB_GDR_FLUSH_DISABLE");
}

/// 11,900 duplicate NCCL_IB_HCA entries: NCCL reads 32 of them (MAX_IB_DEVS); init logs ONE WARN
/// of bounded length (the value cut to 64 characters, repeats counted) instead of one per entry
/// quoting the whole value.
fn many_duplicates_are_one_short_warn(
    lines: &Arc<Mutex<Vec<(log::NcclLevel, String)>>>,
    sink: &log::Sink,
) {
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    std::env::set_var("NCCL_IB_HCA", vec!["mlx5_0:1"; 11_900].join(","));
    lines.lock().unwrap().clear();
    plugin::init(Some(Arc::clone(sink))).unwrap();
    let got = lines.lock().unwrap().clone();
    let warns: Vec<&String> = got
        .iter()
        .filter(|(l, _)| *l == log::NcclLevel::Warn)
        .map(|(_, m)| m)
        .collect();
    assert_eq!(
        warns,
        [&format!(
            "NET/DQPLB : NCCL_IB_HCA='{}... (107099 bytes)': 32 problems: entry 'mlx5_0:1': \
             duplicate of entry 1 (same device and port); the first one wins (31 times); more than \
             32 entries listed; the 11868 after the first 32 are ignored (as NCCL does: MAX_IB_DEVS)",
            &["mlx5_0:1"; 8].join(",")[..64]
        )]
    );
    std::env::remove_var("NCCL_IB_HCA");
}
