//! Shared helpers of the verbs integration tests: pick the RDMA device (skip loudly on hosts
//! without one, fail when DQPLB_REQUIRE_RDMA=1), build loopback-connected QP sets, wait for CQEs.
#![allow(dead_code)]

use nccl_net_dqplb::transport::verbs::{
    discover_system, Context, DeviceInfo, ProtectionDomain, QpSet, QpSetConfig, QpTuning,
    WorkCompletion,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Generous: the VM runs under TCG emulation, where one 1 MiB write takes milliseconds.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The device the tests run on: $SOFTROCE_DEV, else rxe0, else the first one found. None (after a
/// loud message) when the host has no RDMA device and DQPLB_REQUIRE_RDMA is not 1.
pub fn device_or_skip(test: &str) -> Option<DeviceInfo> {
    let devices = discover_system().expect("device discovery must not fail");
    let want = std::env::var("SOFTROCE_DEV").unwrap_or_else(|_| "rxe0".to_string());
    let pick = devices
        .iter()
        .find(|d| d.name == want)
        .or_else(|| devices.first())
        .cloned();
    if pick.is_none() {
        if std::env::var("DQPLB_REQUIRE_RDMA").as_deref() == Ok("1") {
            panic!(
                "{test}: no RDMA device found but DQPLB_REQUIRE_RDMA=1 (the VM must provide rxe0)"
            );
        }
        eprintln!("!!!! {test}: SKIPPED: no RDMA device on this host (run scripts/verbs-tests.sh for the Soft-RoCE VM)");
    }
    pick
}

/// Two QP sets on the same device and port, connected to each other (loopback through the NIC).
pub struct Loopback {
    pub pd: Arc<ProtectionDomain>,
    pub a: QpSet,
    pub b: QpSet,
}

pub fn loopback(dev: &DeviceInfo, cfg: QpSetConfig) -> Loopback {
    let ctx = Context::open(&dev.name).expect("open device");
    let pd = ProtectionDomain::new(&ctx).expect("alloc pd");
    let port = &dev.ports[0];
    let tuning = QpTuning::default();
    let a = QpSet::new(&pd, port, tuning, cfg).expect("qp set a");
    let b = QpSet::new(&pd, port, tuning, cfg).expect("qp set b");
    let (ia, ib) = (a.local_info().clone(), b.local_info().clone());
    a.connect(&ib).expect("connect a->b");
    b.connect(&ia).expect("connect b->a");
    Loopback { pd, a, b }
}

/// Which CQ of a set to poll.
#[derive(Clone, Copy, Debug)]
pub enum Side {
    Send,
    Recv,
}

/// Polls `set`'s `side` CQ until `n` completions arrived (any status) or DEADLINE passes (panic).
pub fn wait_for(set: &QpSet, side: Side, n: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::with_capacity(n);
    let mut batch = [WorkCompletion::default(); 16];
    let start = Instant::now();
    while got.len() < n {
        let room = (n - got.len()).min(batch.len());
        let k = match side {
            Side::Send => set.poll_send(&mut batch[..room]),
            Side::Recv => set.poll_recv(&mut batch[..room]),
        }
        .expect("poll");
        got.extend_from_slice(&batch[..k]);
        if k == 0 {
            assert!(
                start.elapsed() < DEADLINE,
                "timed out waiting for {n} {side:?} completions on {}, got {}: {got:?}",
                set.device(),
                got.len()
            );
            std::thread::yield_now();
        }
    }
    got
}

/// Asserts no further completion shows up on `side` within a short grace period.
pub fn assert_quiet(set: &QpSet, side: Side) {
    let mut batch = [WorkCompletion::default(); 4];
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(200) {
        let k = match side {
            Side::Send => set.poll_send(&mut batch),
            Side::Recv => set.poll_recv(&mut batch),
        }
        .expect("poll");
        assert_eq!(
            k,
            0,
            "unexpected extra {side:?} completions: {:?}",
            &batch[..k]
        );
        std::thread::yield_now();
    }
}

/// Deterministic test pattern: byte i of message `seed`.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as u8
        })
        .collect()
}
