//! The stats file and the node exporter textfile at v11+ finalize: when the process's last
//! communicator is finalized with send comms still open, both files are removed and not rewritten.

use std::ffi::c_void;
use std::ptr::null_mut;

use nccl_net_dqplb::ffi::sys::ncclResult_t;
use nccl_net_dqplb::ffi::vtable::ncclNetPlugin_v11;
use nccl_net_dqplb::plugin::telemetry;

#[path = "../crates/cli/tests/common/plugin_pair.rs"]
mod plugin_pair;
use plugin_pair::{one_message, pair};

fn init_ctx(comm_id: u64) -> *mut c_void {
    let init = ncclNetPlugin_v11.0.init.unwrap();
    let mut ctx: *mut c_void = null_mut();
    // SAFETY: our own vtable, called as NCCL calls it (no config, logger or profiler).
    let rc = unsafe { init(&mut ctx, comm_id, null_mut(), None, None) };
    assert_eq!(rc, ncclResult_t::ncclSuccess, "init");
    assert!(!ctx.is_null());
    ctx
}

fn finalize(ctx: *mut c_void) {
    let finalize = ncclNetPlugin_v11.0.finalize.unwrap();
    // SAFETY: ctx came from init and is finalized once.
    let rc = unsafe { finalize(ctx) };
    assert_eq!(rc, ncclResult_t::ncclSuccess, "finalize");
}

/// One test function: init and the environment are process-wide.
#[test]
fn the_last_finalize_removes_the_files_of_comms_left_open() {
    let dir = std::env::temp_dir().join(format!("dqplb-stats-fin-{}", std::process::id()));
    let prom_dir = dir.join("textfile");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let template = dir.join("s.%p.toml");
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    std::env::set_var("NCCL_DQPLB_STATS_FILE", template.to_str().unwrap());
    std::env::set_var("NCCL_DQPLB_STATS_TEXTFILE_DIR", prom_dir.to_str().unwrap());
    std::env::set_var("NCCL_DQPLB_QPS", "2");
    let first = init_ctx(0xa1);
    let second = init_ctx(0xa2);
    let (mut send, mut recv) = pair(0);
    one_message(&mut send, &mut recv, 1 << 16);
    let path = telemetry::expand_path(template.to_str().unwrap());
    let prom = prom_dir.join(format!("dqplb_{}.prom", std::process::id()));
    let f = telemetry::read_file(&path).expect("stats file after the first message");
    assert_eq!(f.comms.len(), 1, "{f:?}");
    assert!(prom.exists(), "textfile after the first message");
    // Another communicator still lives: the files stay.
    finalize(first);
    assert!(
        path.exists(),
        "a finalize before the last removed the stats file"
    );
    assert!(
        prom.exists(),
        "a finalize before the last removed the textfile"
    );
    // The last one goes with the comm still open: both files go.
    finalize(second);
    assert!(!path.exists(), "the last finalize left the stats file");
    assert!(!prom.exists(), "the last finalize left the textfile");
    // The comm left open still works and writes no file again, not even at its close.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    one_message(&mut send, &mut recv, 5000);
    drop(send);
    drop(recv);
    assert!(!path.exists(), "a comm left open rewrote the stats file");
    assert!(!prom.exists(), "a comm left open rewrote the textfile");
    let left: Vec<_> = std::fs::read_dir(&prom_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
