//! The re-pin rule through the plugin over RDMA (run in the Soft-RoCE VM): in a pinned class, a
//! data QP that stays the slowest is moved onto another QP's source port, and bytes stay exact.
#![cfg(feature = "verbs")]

mod verbs_support;

use dqplb_engine::RepinRule;
use nccl_net_dqplb::plugin;
use verbs_support::{
    byte_checked_rounds, host_mr, pattern, plugin_pair, require_device, use_verbs_on_loopback,
};

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn a_data_qp_that_stays_slowest_is_moved_onto_another_qps_port() {
    require_device("a_data_qp_that_stays_slowest_is_moved_onto_another_qps_port");
    use_verbs_on_loopback();
    // No NCCL_IB_HCA fabric ids: every connection is same-rail, pinned here, so the depth rule
    // and its re-pin rule are on at their defaults (raised 3, persist 6, settle 16, budget 16).
    std::env::set_var("NCCL_DQPLB_CLASS_SAME_RAIL_PATH_PINNING", "relative");
    std::env::set_var("NCCL_DQPLB_CLASS_SAME_RAIL_QPS", "8");
    plugin::init(None).expect("init");
    let (mut send, mut recv) = plugin_pair(0);
    assert_eq!(send.repins(), Some(0));
    let state = send.depth_state();
    assert_eq!(
        state.repin,
        Some(RepinRule {
            ratio: 1.3,
            persist: 6,
            settle: 16,
            budget: 16
        }),
        "{state:?}"
    );
    let ports: Vec<Option<u16>> = send
        .pinned_flow_labels()
        .expect("flow labels")
        .iter()
        .map(|&(p, _)| p)
        .collect();
    assert!(ports.iter().all(Option::is_some), "{ports:x?}");
    // Data QP 2's completions reach the engine 20 ms late (rxe's own completion latency here is
    // a few ms, so a smaller lag leaves it near the rule's 1.3 x the median): it stays the
    // slowest until the rule moves it (the lag ends with the QP it was set on).
    assert!(send.debug_slow_data_qp(2, 20_000_000));

    let len = (4 << 20) + 5;
    let mut src = pattern(13, len);
    let mut dst = vec![0u8; len];
    let smh = send.reg_mr(host_mr(&mut src)).expect("regMr src");
    let rmh = recv.reg_mr(host_mr(&mut dst)).expect("regMr dst");
    byte_checked_rounds(&mut send, &mut recv, (&mut src, &smh), (&mut dst, &rmh), 40);
    let moves = send.repins().expect("verbs send comm");
    let after: Vec<Option<u16>> = send
        .pinned_flow_labels()
        .expect("flow labels")
        .iter()
        .map(|&(p, _)| p)
        .collect();
    let ewma: Vec<u64> = send
        .qp_stats()
        .iter()
        .map(|q| q.latency_ewma as u64)
        .collect();
    eprintln!(
        "verbs_repin_plugin: {moves} move(s); {:?}; latency EWMA per QP (ns) {ewma:?}; ports before {ports:x?}, after {after:x?}",
        send.depth_state()
    );
    assert!(moves >= 1, "the slow data QP was never moved");
    // Every data QP ends on a port the connection had: a move takes another QP's, a move back
    // the QP's own.
    for (i, p) in after.iter().enumerate() {
        assert!(
            ports.contains(p),
            "data QP {i} on port {p:x?}, not one of {ports:x?}"
        );
    }
    drop(send);
    drop(recv);
    drop(smh);
    drop(rmh);
}
