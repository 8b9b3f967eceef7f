//! The depth rule through the plugin over TCP: a class configured with it connects sized for the
//! raised depth, and its send comm's engine runs the plan's depth while the paths agree.

#[path = "../crates/cli/tests/common/plugin_pair.rs"]
mod plugin_pair;

use dqplb_engine::DepthRule;
use nccl_net_dqplb::plugin;
use plugin_pair::{one_message, pair};

/// One test function: init and the environment are process-wide.
#[test]
fn a_class_with_the_depth_rule_is_sized_for_it_and_stays_at_its_plan_on_equal_paths() {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    // No NCCL_IB_HCA fabric ids: every connection is same-rail (4 QPs, 2 outstanding); over TCP
    // its segment is [tcp] segment-bytes capped at a 2 MiB window for 4 QPs x 3: 172,032 bytes.
    std::env::set_var("NCCL_DQPLB_CLASS_SAME_RAIL_DEPTH_RAISED", "3");
    plugin::init(None).expect("init");
    let (mut send, mut recv) = pair(0);
    let before = send.depth_state();
    assert_eq!(
        before.rule,
        Some(DepthRule {
            ratio: 1.25,
            raised: 3,
            hold: 4
        })
    );
    // Sized (and the receiver told) for 3 per QP; the engine starts at the plan's 2.
    assert_eq!((before.bound, before.depth, before.raises), (3, 2, 0));
    // 4 MiB = 25 segments per message (24 x 172,032 B and one of 65,536 B): every QP's window
    // fills while the queue lasts.
    for _ in 0..8 {
        one_message(&mut send, &mut recv, 4 << 20);
    }
    // Loopback streams complete in step: the latencies never diverge, the depth never rises.
    let after = send.depth_state();
    assert_eq!((after.bound, after.depth, after.raises), (3, 2, 0));
    let stats = send.qp_stats();
    assert_eq!(stats.len(), 4);
    assert!(stats.iter().all(|s| s.peak_outstanding == 2), "{stats:?}");
    assert_eq!(stats.iter().map(|s| s.segments).sum::<u64>(), 8 * 25);
}
