//! Which transport init chooses and how it says so: one INFO line in NCCL's manner (version, git
//! hash, config, transport and why, devices), never a silent fall-back to TCP, WARNs with the
//! Rust file and line of their call site.

use std::sync::{Arc, Mutex};

use dqplb_test_support::logger::CLogger;
use dqplb_test_support::nccl::LOG_WARN;
use nccl_net_dqplb::ffi::sys::{ncclDebugLogger_t, ncclResult_t};
use nccl_net_dqplb::ffi::vtable::ncclNetPlugin_v8;
use nccl_net_dqplb::plugin::{self, log};

type Seen = Arc<Mutex<Vec<(log::NcclLevel, String, u32, String)>>>;

/// The tests of this file change the process environment: one at a time.
static ENV: Mutex<()> = Mutex::new(());

fn sink(seen: &Seen) -> log::Sink {
    let seen = Arc::clone(seen);
    Arc::new(move |l: &log::Line<'_>| {
        seen.lock()
            .unwrap()
            .push((l.level, l.file.to_string(), l.line, l.msg.to_string()))
    })
}

fn take(seen: &Seen) -> Vec<(log::NcclLevel, String, u32, String)> {
    std::mem::take(&mut *seen.lock().unwrap())
}

/// Init, the logger and the environment are process-wide: the tests take ENV.
#[test]
fn init_says_which_transport_and_never_falls_back_silently() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    if std::path::Path::new("/sys/class/infiniband").exists() {
        eprintln!("SKIPPED: this host has RDMA devices (the cases assume none)");
        return;
    }
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    std::env::set_var("NCCL_DEBUG", "INFO");
    for v in ["NCCL_DQPLB_CONF", "NCCL_IB_HCA", "NCCL_DQPLB_TRANSPORT"] {
        std::env::remove_var(v);
    }
    let seen: Seen = Arc::default();

    // No RDMA at all, nothing named: TCP, said once at INFO with the reason.
    plugin::init(Some(sink(&seen))).expect("init over TCP");
    let lines = take(&seen);
    let infos: Vec<_> = lines
        .iter()
        .filter(|l| l.0 == log::NcclLevel::Info)
        .collect();
    assert_eq!(infos.len(), 1, "{lines:#?}");
    let (_, file, _, msg) = infos[0];
    assert_eq!(file, "src/plugin/mod.rs");
    // (where libibverbs is missing too, the reason adds "; libibverbs.so.1 not loadable (...)")
    let want = format!(
        "NET/DQPLB : dqplb-net {}; config <embedded default>; policy dqplb-led; transport TCP (no RDMA device found",
        nccl_net_dqplb::VERSION
    );
    assert!(
        msg.starts_with(&want) && msg.ends_with("); devices [0]lo"),
        "{msg}"
    );
    eprintln!("INFO {msg}");

    // fabric.transport = tcp: TCP, saying why; RDMA names in NCCL_IB_HCA are only read.
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    std::env::set_var("NCCL_IB_HCA", "=mlx5_0:1:0");
    plugin::init(Some(sink(&seen))).expect("init with transport = tcp");
    let lines = take(&seen);
    assert!(
        lines.iter().any(|l| l
            .3
            .contains("; transport TCP (fabric.transport = tcp); devices [0]lo")),
        "{lines:#?}"
    );

    // fabric.transport = verbs without RDMA: fails, saying what happened (not "...using TCP").
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "verbs");
    std::env::remove_var("NCCL_IB_HCA");
    let e = plugin::init(Some(sink(&seen))).unwrap_err();
    assert!(
        e.msg.starts_with(
            "fabric.transport = verbs (NCCL_DQPLB_TRANSPORT) but this host has no RDMA: no RDMA \
             device found"
        ) && e.msg.ends_with(
            "; init fails rather than run over TCP (set transport = tcp or auto for TCP)"
        ),
        "{}",
        e.msg
    );

    // auto, NCCL_IB_HCA naming a device this host lacks: init fails through the C entry point
    // with ONE WARN naming the device and why, at a real file and line.
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "auto");
    std::env::set_var("NCCL_IB_HCA", "=mlx5_0:1:0");
    let log = CLogger::load().expect("test logger");
    // SAFETY: both are `unsafe extern "C" fn(int, unsigned long, const char*, int, const char*, ...)`.
    let logger: ncclDebugLogger_t = unsafe { std::mem::transmute(Some(log.logger)) };
    let warns = log.count(LOG_WARN);
    // SAFETY: our own vtable, called as NCCL calls it.
    let rc = unsafe { ncclNetPlugin_v8.0.init.unwrap()(logger) };
    assert_eq!(rc, ncclResult_t::ncclSystemError);
    assert_eq!(log.count(LOG_WARN) - warns, 1);
    let w = log.warnings().pop().unwrap();
    assert_eq!(
        w,
        "NET/DQPLB : init: no usable RDMA device (1 reason): mlx5_0: named by NCCL_IB_HCA, no such \
         RDMA device; init fails rather than fall back to TCP (set NCCL_DQPLB_TRANSPORT=tcp to use TCP)"
    );
    eprintln!("WARN {w}");

    // WARNs carry the file and line of their call site (NCCL prints "file:line NCCL WARN").
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    std::env::set_var("NCCL_IB_HCA", "=lo,,");
    plugin::init(Some(sink(&seen))).expect("init");
    let lines = take(&seen);
    let warn = lines
        .iter()
        .find(|l| l.0 == log::NcclLevel::Warn)
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(
        (warn.1.as_str(), warn.2 > 0),
        ("src/plugin/mod.rs", true),
        "{warn:?}"
    );
    assert!(
        lines.iter().all(|l| l.3.starts_with("NET/DQPLB : ")),
        "{lines:#?}"
    );
    std::env::remove_var("NCCL_IB_HCA");
}

/// Environment as NCCL treats it, through the C entry point: a typo'd NCCL_DQPLB_* variable is
/// ONE WARN naming the nearest accepted name (init succeeds), and an empty value is unset.
#[test]
fn unknown_variable_is_one_warning_and_empty_is_unset() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    std::env::remove_var("NCCL_IB_HCA");
    std::env::set_var("NCCL_DQPLB_QPSS", "4");
    std::env::set_var("NCCL_DQPLB_CONF", "");
    std::env::set_var("NCCL_DQPLB_POLICY", "");
    let log = CLogger::load().expect("test logger");
    // SAFETY: both are `unsafe extern "C" fn(int, unsigned long, const char*, int, const char*, ...)`.
    let logger: ncclDebugLogger_t = unsafe { std::mem::transmute(Some(log.logger)) };
    let warns = log.count(LOG_WARN);
    // SAFETY: our own vtable, called as NCCL calls it.
    let rc = unsafe { ncclNetPlugin_v8.0.init.unwrap()(logger) };
    assert_eq!(rc, ncclResult_t::ncclSuccess);
    assert_eq!(log.count(LOG_WARN) - warns, 1);
    let w = log.warnings().pop().unwrap();
    assert_eq!(
        w,
        "NET/DQPLB : NCCL_DQPLB_QPSS=4: unknown variable, ignored; did you mean NCCL_DQPLB_QPS?"
    );
    eprintln!("WARN {w}");
    for v in [
        "NCCL_DQPLB_QPSS",
        "NCCL_DQPLB_CONF",
        "NCCL_DQPLB_POLICY",
        "NCCL_DQPLB_TRANSPORT",
    ] {
        std::env::remove_var(v);
    }
}
