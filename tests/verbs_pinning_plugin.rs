//! The plugin with `path-pinning = "relative"` over RDMA (run in the Soft-RoCE VM): every data QP
//! of a send comm gets its pinned port's flow label (ibv_query_qp), on distinct relative buckets,
//! and messages still arrive byte-exact.
#![cfg(feature = "verbs")]

mod verbs_support;

use dqplb_engine::pinning::{
    flow_label_for_port, BucketSelect, FieldLayout, HashFamily, RelativePins,
};
use nccl_net_dqplb::plugin;
use verbs_support::{
    byte_checked_rounds, host_mr, pattern, plugin_pair, require_device, use_verbs_on_loopback,
};

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn relative_pinning_sets_every_data_qps_flow_label_and_moves_bytes_exactly() {
    require_device("relative_pinning_sets_every_data_qps_flow_label_and_moves_bytes_exactly");
    use_verbs_on_loopback();
    // No NCCL_IB_HCA fabric ids: every connection is same-rail.
    std::env::set_var("NCCL_DQPLB_CLASS_SAME_RAIL_PATH_PINNING", "relative");
    std::env::set_var("NCCL_DQPLB_CLASS_SAME_RAIL_QPS", "8");
    plugin::init(None).expect("init");
    let (mut send, mut recv) = plugin_pair(0);

    let pins = send.pinned_flow_labels().expect("flow labels");
    assert_eq!(pins.len(), 8);
    // The plugin's choice: relative pins of the default [paths] (CRC-32 5-tuple, low bits),
    // group 8 = qps, from base port 49152; the first connection to this peer takes 0..8.
    let want = RelativePins::new(
        HashFamily::Crc32,
        BucketSelect::LowBits,
        FieldLayout::five_tuple(),
        8,
        0xC000,
    )
    .expect("pins");
    let mut buckets = Vec::new();
    for (i, (port, fl)) in pins.iter().enumerate() {
        let port = port.unwrap_or_else(|| panic!("data QP {i} not pinned"));
        assert_eq!(port, want.port(i as u32).expect("port"), "data QP {i}");
        assert_eq!(
            *fl,
            flow_label_for_port(port).expect("label"),
            "data QP {i}"
        );
        buckets.push(want.relative_bucket(port, None));
    }
    buckets.sort_unstable();
    assert_eq!(buckets, (0..8).collect::<Vec<_>>());
    eprintln!("verbs_pinning_plugin: (pinned port, flow label read back) per data QP: {pins:x?}");

    let len = (1 << 20) + 5;
    let mut src = pattern(7, len);
    let mut dst = vec![0u8; len];
    let smh = send.reg_mr(host_mr(&mut src)).expect("regMr src");
    let rmh = recv.reg_mr(host_mr(&mut dst)).expect("regMr dst");
    byte_checked_rounds(&mut send, &mut recv, (&mut src, &smh), (&mut dst, &rmh), 2);
    // Every pinned QP carried segments (dqplb over 8 QPs, 64 KiB segments).
    let per_qp: Vec<u64> = send.qp_stats().iter().map(|q| q.segments).collect();
    assert!(per_qp.iter().all(|n| *n > 0), "{per_qp:?}");
    drop(send);
    drop(recv);
    drop(smh);
    drop(rmh);
}
