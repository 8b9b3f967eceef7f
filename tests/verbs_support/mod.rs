//! The verbs helpers of the plugin-level verbs tests: the device helpers of
//! `dqplb_test_support::verbs`, plus a send/receive comm pair made through the plugin's own calls.
#![allow(dead_code, unused_imports)]

pub(crate) use dqplb_test_support::verbs::{pattern, require_device, vm_tuning, DEADLINE};
use std::time::Instant;

#[path = "../../crates/cli/tests/common/plugin_pair.rs"]
mod common_pair;

/// A send/receive comm pair over plugin device `dev` through listen, connect and accept (the
/// 128-byte handle carried in memory), polled until both ends are up.
pub(crate) use common_pair::pair as plugin_pair;

/// Registers host buffer `b` with a comm of the plugin (`NCCL_PTR_HOST`, no dma-buf).
pub(crate) fn host_mr(b: &mut [u8]) -> nccl_net_dqplb::plugin::RegRequest {
    nccl_net_dqplb::plugin::RegRequest {
        addr: b.as_mut_ptr() as usize,
        len: b.len(),
        kind: 1,
        dmabuf: None,
    }
}

/// The plugin on this process's verbs devices over the VM's loopback bootstrap: the environment
/// is process-wide, so one test per binary. NCCL_IB_TIMEOUT 14 as `vm_tuning` explains.
pub(crate) fn use_verbs_on_loopback() {
    std::env::set_var("NCCL_SOCKET_IFNAME", "=lo");
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "verbs");
    std::env::set_var("NCCL_IB_TIMEOUT", "14");
}

/// `rounds` messages of `src` into `dst` (registered as `smh` / `rmh`) through the comm pair, tag
/// 4, each byte-checked: both sides complete with `src.len()` bytes, `dst` starts with `src`
/// and any bytes of `dst` beyond it stay 0. Every wait is bounded by `DEADLINE`.
pub(crate) fn byte_checked_rounds(
    send: &mut nccl_net_dqplb::plugin::SendComm,
    recv: &mut nccl_net_dqplb::plugin::RecvComm,
    (src, smh): (&mut [u8], &nccl_net_dqplb::plugin::MemHandle),
    (dst, rmh): (&mut [u8], &nccl_net_dqplb::plugin::MemHandle),
    rounds: usize,
) {
    use dqplb_transport::UserBuf;
    let len = src.len();
    for round in 0..rounds {
        dst.iter_mut().for_each(|b| *b = 0);
        let rreq = recv
            .irecv(&[(UserBuf::from_slice(dst), 4)], &[Some(rmh)])
            .expect("irecv")
            .expect("slot");
        let start = Instant::now();
        let sreq = loop {
            if let Some(r) = send
                .isend(UserBuf::from_slice(src), 4, Some(smh))
                .expect("isend")
            {
                break r;
            }
            recv.test(rreq).expect("recv progress");
            assert!(start.elapsed() < DEADLINE, "isend never accepted");
        };
        let (mut sd, mut rd) = (None, None);
        while sd.is_none() || rd.is_none() {
            if sd.is_none() {
                sd = send.test(sreq).expect("send test");
            }
            if rd.is_none() {
                rd = recv.test(rreq).expect("recv test");
            }
            assert!(start.elapsed() < DEADLINE, "round {round} never completed");
        }
        assert_eq!((sd, rd), (Some(len), Some(len)));
        assert!(dst[..len] == src[..], "round {round}: payload differs");
        assert!(dst[len..].iter().all(|&b| b == 0), "round {round}: overrun");
    }
}
