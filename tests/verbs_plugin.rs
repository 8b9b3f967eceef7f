//! The plugin API over RDMA (run in the Soft-RoCE VM): init lists rxe0 instead of TCP interfaces,
//! listen/connect/accept handshake through the 128-byte handle, regMr'd host buffers, isend/irecv
//! of byte-exact messages, and properties NCCL reads (name, port, speed, maxRecvs).
#![cfg(feature = "verbs")]

mod verbs_support;

use dqplb_transport::regcache::Lookup;
use nccl_net_dqplb::plugin::{self, RegRequest};
use verbs_support::{
    byte_checked_rounds, host_mr, pattern, plugin_pair, require_device, use_verbs_on_loopback,
};

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn plugin_carries_messages_over_rdma() {
    let dev = require_device("plugin_carries_messages_over_rdma");
    use_verbs_on_loopback();
    plugin::init(None).expect("init");
    let n = plugin::device_count().expect("devices");
    assert!(n >= 1, "no device listed");
    let props = plugin::properties(0).expect("properties");
    assert_eq!(props.name.to_str().expect("utf8"), dev.name);
    assert_eq!(props.port, i32::from(dev.ports[0].port));
    assert_eq!(props.speed_mbps as u32, dev.ports[0].speed_mbps);
    assert_eq!(props.max_recvs, 8, "grouped receives, as net_ib");

    let (mut send, mut recv) = plugin_pair(0);

    let len = (2 << 20) + 3;
    let mut src = pattern(42, len);
    let mut dst = vec![0u8; len + 64];
    // registered at regMr time, through the device's cache (regIsGlobal = 1)
    assert_eq!(props.reg_is_global, 1);
    let smh = send.reg_mr(host_mr(&mut src)).expect("regMr src");
    let rmh = recv.reg_mr(host_mr(&mut dst)).expect("regMr dst");
    let (sc, rc) = (
        smh.cached().expect("src registered"),
        rmh.cached().expect("dst registered"),
    );
    assert_eq!(
        (sc.lookup(), rc.lookup()),
        (Lookup::Registered, Lookup::Registered)
    );
    assert!(
        std::sync::Arc::ptr_eq(sc.domain(), rc.domain()),
        "one cache per device"
    );
    let cache = sc.domain().reg_cache();
    assert_eq!((cache.stats().registrations, cache.stats().entries), (2, 2));
    // a sub-range regMr through the other comm hits the cache (ncclCommRegister's pattern)
    let piece = recv
        .reg_mr(RegRequest {
            addr: src.as_mut_ptr() as usize + 4096,
            len: 8192,
            kind: 1,
            dmabuf: None,
        })
        .expect("sub-range regMr");
    assert_eq!(piece.cached().map(|c| c.lookup()), Some(Lookup::Hit));
    assert_eq!(piece.cached().unwrap().mr().rkey(), sc.mr().rkey());
    drop(piece);
    assert_eq!((cache.stats().hits, cache.stats().entries), (1, 2));
    byte_checked_rounds(&mut send, &mut recv, (&mut src, &smh), (&mut dst, &rmh), 3);
    let segs: u64 = send.qp_stats().iter().map(|q| q.segments).sum();
    assert!(segs >= 3, "QP statistics count segments: {segs}");
    drop(send);
    drop(recv);
    let cache = std::sync::Arc::clone(smh.cached().unwrap().domain());
    drop(smh);
    drop(rmh);
    assert_eq!(
        cache.reg_cache().stats().entries,
        0,
        "deregMr emptied the cache"
    );
    assert_eq!(cache.reg_cache().stats().removals, 2);
}
