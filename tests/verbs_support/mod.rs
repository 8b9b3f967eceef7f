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
