//! Path pinning on a real RDMA device (run in the Soft-RoCE VM): the flow label set at RTR from a
//! pinned port reads back through ibv_query_qp for every data QP, unpinned QPs keep label 0.
#![cfg(feature = "verbs")]

use std::sync::Arc;

use dqplb_engine::pinning::{flow_label_for_port, port_for_flow_label};
use dqplb_test_support::verbs::{loopback_pinned, require_device};
use dqplb_transport::verbs::{ConnInfo, PortPinner, QpSetConfig, QpState};

/// Fixed ports, including both ends of the flow-label range (0xC000 needs a high label part).
const PORTS: [u16; 4] = [0xC000, 0xC123, 0xD789, 0xFFFF];

struct Fixed;

impl PortPinner for Fixed {
    fn ports(&self, local: &ConnInfo, remote: &ConnInfo) -> Result<Vec<u16>, String> {
        assert_eq!(local.data.len(), remote.data.len());
        Ok(PORTS[..local.data.len()].to_vec())
    }

    fn repin(&self, _qp: usize, port: u16, _l: u32, _r: u32) -> Option<u16> {
        Some(port ^ 1)
    }
}

#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn pinned_flow_labels_read_back_from_every_data_qp() {
    let dev = require_device("pinned_flow_labels_read_back_from_every_data_qp");
    let cfg = QpSetConfig {
        n_data: PORTS.len(),
        ..QpSetConfig::default()
    };
    let lb = loopback_pinned(&dev, cfg, Some(Arc::new(Fixed)));
    let mut seen = Vec::new();
    for (i, &port) in PORTS.iter().enumerate() {
        let qp = lb.a.data(i).expect("data QP");
        assert_eq!(qp.state().expect("state"), QpState::Rts);
        let fl = qp.flow_label().expect("ibv_query_qp");
        let want = flow_label_for_port(port).expect("port in range");
        assert_eq!(fl, want, "data QP {i}: flow label");
        // What mlx5 derives from that label is the pinned port (rxe keeps its QPN-derived one).
        assert_eq!(port_for_flow_label(fl), port, "data QP {i}");
        assert_eq!(lb.a.pinned_port(i), Some(port));
        seen.push((qp.qpn(), fl));
        // The receiving side pins nothing: label 0, the driver's own port.
        let peer = lb.b.data(i).expect("peer data QP");
        assert_eq!(peer.flow_label().expect("ibv_query_qp"), 0, "peer QP {i}");
        assert_eq!(lb.b.pinned_port(i), None);
    }
    // 0xC000 -> 0x4001, 0xC123 -> 0x0123, 0xD789 -> 0x1789, 0xFFFF -> 0x3FFF.
    let labels: Vec<u32> = seen.iter().map(|s| s.1).collect();
    assert_eq!(labels, [0x4001, 0x0123, 0x1789, 0x3FFF]);
    eprintln!(
        "verbs_pinning: {} data QPs (QPN, flow label read back): {:x?}",
        seen.len(),
        seen
    );
    // The control QP is not pinned.
    assert_eq!(lb.a.control().flow_label().expect("ibv_query_qp"), 0);
}
