//! Registered memory across fork() (run in the Soft-RoCE VM): a child is forked while transfers
//! into registered buffers run and writes its copies; the parent's bytes must stay exact.
#![cfg(feature = "verbs")]

mod verbs_support;

use std::time::Instant;

use dqplb_transport::verbs::fork::{self, ForkSafety};
use dqplb_transport::UserBuf;
use nccl_net_dqplb::plugin::{self, RecvComm, RegRequest, SendComm};
use verbs_support::{pattern, plugin_pair, require_device, use_verbs_on_loopback, DEADLINE};

fn reg(b: &mut [u8]) -> RegRequest {
    RegRequest {
        addr: b.as_mut_ptr() as usize,
        len: b.len(),
        kind: 1,
        dmabuf: None,
    }
}

/// Forks a child that overwrites its copy of the `n` bytes at `p` with 0xAA and exits at once (no destructors,
/// nothing but memory writes and _exit after fork); returns its pid.
fn fork_scribbler(p: *mut u8, n: usize) -> libc::pid_t {
    // SAFETY: the child only writes its own copy of the buffer and calls _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: the child's copy of a live allocation of n bytes.
        unsafe {
            std::ptr::write_bytes(p, 0xAA, n);
            libc::_exit(0);
        }
    }
    pid
}

fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
}

/// One transfer src -> dst; `during` runs once after both requests are posted (the transfer is
/// in flight: 64 segments of 64 KiB).
fn transfer(
    send: &mut SendComm,
    recv: &mut RecvComm,
    bufs: (&mut [u8], &mut [u8]),
    mhs: (&plugin::MemHandle, &plugin::MemHandle),
    during: &mut dyn FnMut(),
) {
    let (src, dst) = bufs;
    let len = src.len();
    let start = Instant::now();
    let rreq = recv
        .irecv(&[(UserBuf::from_slice(dst), 5)], &[Some(mhs.1)])
        .unwrap()
        .unwrap();
    let mut rd = None;
    let sreq = loop {
        if let Some(r) = send
            .isend(UserBuf::from_slice(src), 5, Some(mhs.0))
            .unwrap()
        {
            break r;
        }
        if rd.is_none() {
            rd = recv.test(rreq).unwrap();
        }
        assert!(start.elapsed() < DEADLINE);
    };
    during();
    let mut sd = None;
    while sd.is_none() || rd.is_none() {
        if sd.is_none() {
            sd = send.test(sreq).unwrap();
        }
        if rd.is_none() {
            rd = recv.test(rreq).unwrap();
        }
        assert!(start.elapsed() < DEADLINE, "transfer timed out");
    }
    assert_eq!((sd, rd), (Some(len), Some(len)));
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn registered_buffers_survive_fork() {
    let dev = require_device("registered_buffers_survive_fork");
    use_verbs_on_loopback();
    std::env::set_var("NCCL_DQPLB_SEGMENT_BYTES", "65536");
    plugin::init(None).expect("init");
    let safety = fork::prepare();
    println!("FORK {}: {safety:?}: {}", dev.name, safety.describe());
    assert!(
        matches!(safety, ForkSafety::KernelCopyOnFork | ForkSafety::ForkInit),
        "{safety:?}"
    );
    let (mut send, mut recv) = plugin_pair(0);
    let len = 4 << 20;
    for round in 0..3u32 {
        let mut src = pattern(round + 1, len);
        let mut dst = vec![0u8; len];
        let smh = send.reg_mr(reg(&mut src)).unwrap();
        let rmh = recv.reg_mr(reg(&mut dst)).unwrap();
        // fork while the transfer into dst runs; the child scribbles over its copy
        let mut child = 0;
        let dst_ptr = dst.as_mut_ptr();
        transfer(
            &mut send,
            &mut recv,
            (&mut src, &mut dst),
            (&smh, &rmh),
            &mut || child = fork_scribbler(dst_ptr, len),
        );
        reap(child);
        assert!(
            dst == src,
            "round {round}: bytes received while a child forked differ"
        );
        // after the fork the parent writes the registered pages first (the write that broke
        // copy-on-write sharing before Linux 5.13 / without ibv_fork_init), then receives again
        dst.iter_mut().for_each(|b| *b = 0);
        let child = fork_scribbler(dst_ptr, len);
        reap(child);
        transfer(
            &mut send,
            &mut recv,
            (&mut src, &mut dst),
            (&smh, &rmh),
            &mut || {},
        );
        assert!(
            dst == src,
            "round {round}: bytes received after the fork differ"
        );
        drop(smh);
        drop(rmh);
        println!("FORK round {round}: {len} bytes exact during and after fork");
    }
}
