//! The depth rule through the plugin over RDMA (run in the Soft-RoCE VM): with one data QP made
//! slow, the send comm's per-QP window rises above the plan's depth, and messages stay byte-exact.
#![cfg(feature = "verbs")]

mod verbs_support;

use dqplb_engine::DepthRule;
use nccl_net_dqplb::plugin;
use verbs_support::{
    byte_checked_rounds, host_mr, pattern, plugin_pair, require_device, use_verbs_on_loopback,
};

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn a_slow_data_qp_raises_the_depth_of_a_class_with_the_rule() {
    require_device("a_slow_data_qp_raises_the_depth_of_a_class_with_the_rule");
    use_verbs_on_loopback();
    // No NCCL_IB_HCA fabric ids: every connection is same-rail (4 QPs, 2 outstanding).
    std::env::set_var("NCCL_DQPLB_CLASS_SAME_RAIL_DEPTH_RAISED", "3");
    // A long hold keeps the raised depth once reached (checked at the end).
    std::env::set_var("NCCL_DQPLB_CLASS_SAME_RAIL_DEPTH_HOLD", "65536");
    plugin::init(None).expect("init");
    let (mut send, mut recv) = plugin_pair(0);
    let before = send.depth_state();
    assert_eq!(
        before.rule,
        Some(DepthRule {
            ratio: 1.25,
            raised: 3,
            hold: 65536
        })
    );
    assert_eq!((before.bound, before.depth, before.raises), (3, 2, 0));
    // Data QP 2's completions reach the engine 2 ms late: its latency EWMA leaves the median.
    assert!(send.debug_slow_data_qp(2, 2_000_000));

    let len = (4 << 20) + 5;
    let mut src = pattern(11, len);
    let mut dst = vec![0u8; len];
    let smh = send.reg_mr(host_mr(&mut src)).expect("regMr src");
    let rmh = recv.reg_mr(host_mr(&mut dst)).expect("regMr dst");
    byte_checked_rounds(&mut send, &mut recv, (&mut src, &smh), (&mut dst, &rmh), 4);
    let after = send.depth_state();
    let stats = send.qp_stats().to_vec();
    eprintln!(
        "verbs_depth_plugin: {after:?}; per QP peak in flight {:?}",
        stats.iter().map(|q| q.peak_outstanding).collect::<Vec<_>>()
    );
    assert!(after.raises >= 1, "{after:?}");
    assert_eq!((after.bound, after.depth), (3, 3), "{after:?}");
    // Some QP ran 3 segments deep (above the plan's 2), none deeper than the raised depth.
    assert_eq!(
        stats.iter().map(|q| q.peak_outstanding).max(),
        Some(3),
        "{stats:?}"
    );
    drop(send);
    drop(recv);
    drop(smh);
    drop(rmh);
}
