//! The verbs helpers of the plugin-level verbs tests: the device helpers of
//! `dqplb_test_support::verbs`, plus a send/receive comm pair made through the plugin's own calls.
#![allow(dead_code, unused_imports)]

pub(crate) use dqplb_test_support::verbs::{pattern, require_device, vm_tuning, DEADLINE};
use std::time::Instant;

/// A send/receive comm pair over plugin device `dev` through listen, connect and accept (the
/// 128-byte handle carried in memory), polled until both ends are up.
pub(crate) fn plugin_pair(
    dev: i32,
) -> (
    nccl_net_dqplb::plugin::SendComm,
    nccl_net_dqplb::plugin::RecvComm,
) {
    use nccl_net_dqplb::plugin;
    let mut handle = [0u8; 128];
    let mut listen = plugin::listen(dev, &mut handle).expect("listen");
    let (mut send, mut recv) = (None, None);
    let start = Instant::now();
    while send.is_none() || recv.is_none() {
        if send.is_none() {
            send = plugin::connect(dev, &mut handle).expect("connect");
        }
        if recv.is_none() {
            recv = listen.accept().expect("accept");
        }
        assert!(start.elapsed() < DEADLINE, "plugin handshake timed out");
    }
    (send.expect("send"), recv.expect("recv"))
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
