//! Shared helpers of the verbs integration tests: pick the RDMA device (fail on hosts without
//! one: the tests needing it are ignored there), build loopback-connected QP sets, wait for CQEs.

use dqplb_engine::PolicyKind;
use dqplb_transport::tcp::ConnParams;
use dqplb_transport::verbs::{
    discover_system, Context, DeviceInfo, MemoryRegion, PortPinner, ProtectionDomain, QpSet,
    QpSetConfig, QpTuning, VerbsConnector, VerbsDomain, VerbsListenComm, VerbsRecvComm,
    VerbsSendComm, WorkCompletion,
};
use dqplb_transport::UserBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Generous: the VM runs under TCG emulation, where one 1 MiB write takes milliseconds.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The device the tests run on: $SOFTROCE_DEV, else rxe0, else the first one found. Panics on a
/// host without an RDMA device: the tests that call this are `#[ignore]`d ("needs an RDMA
/// device") and run with `--include-ignored` in the Soft-RoCE VM (scripts/verbs-tests.sh), so a
/// pass there proves they ran; run explicitly here, they fail instead of passing vacuously.
pub fn require_device(test: &str) -> DeviceInfo {
    let devices = discover_system().expect("device discovery must not fail");
    let want = std::env::var("SOFTROCE_DEV").unwrap_or_else(|_| "rxe0".to_string());
    let pick = devices
        .iter()
        .find(|d| d.name == want)
        .or_else(|| devices.first())
        .cloned();
    pick.unwrap_or_else(|| {
        panic!(
            "{test}: needs an RDMA device and this host has none (scripts/verbs-tests.sh runs it \
             in the Soft-RoCE VM)"
        )
    })
}

/// QP knobs for the tests: NCCL's defaults except an ACK timeout of 14 (4.096 us * 2^14 = 67 ms,
/// perftest's default) instead of 20 (4.3 s): rxe under emulation occasionally drops a packet, and
/// each drop costs one timeout before the retransmission.
pub fn vm_tuning() -> QpTuning {
    QpTuning {
        timeout: 14,
        ..QpTuning::default()
    }
}

/// Two QP sets on the same device and port, connected to each other (loopback through the NIC).
pub struct Loopback {
    pub pd: Arc<ProtectionDomain>,
    pub a: QpSet,
    pub b: QpSet,
}

pub fn loopback(dev: &DeviceInfo, cfg: QpSetConfig) -> Loopback {
    loopback_pinned(dev, cfg, None)
}

/// As `loopback`, with set a's data QPs pinned by `pinner` (path pinning on the sending side).
pub fn loopback_pinned(
    dev: &DeviceInfo,
    cfg: QpSetConfig,
    pinner: Option<Arc<dyn PortPinner>>,
) -> Loopback {
    let ctx = Context::open(&dev.name).expect("open device");
    let pd = ProtectionDomain::new(&ctx).expect("alloc pd");
    let port = &dev.ports[0];
    let tuning = vm_tuning();
    let mut a = QpSet::new(&pd, port, tuning, cfg).expect("qp set a");
    let mut b = QpSet::new(&pd, port, tuning, cfg).expect("qp set b");
    if let Some(p) = pinner {
        a.set_port_pinner(p);
    }
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

// ---- transport-level helpers (send/recv comms over a bootstrap on 127.0.0.1) ----

pub fn conn_params(max_messages: u32) -> ConnParams {
    ConnParams {
        qps: 4,
        outstanding: 4,
        segment_bytes: 128 << 10,
        max_messages,
        policy: PolicyKind::Dqplb,
        fabric_id: 0,
    }
}

pub fn comm_pair(test: &str, p: ConnParams) -> (Arc<VerbsDomain>, VerbsSendComm, VerbsRecvComm) {
    let dev = require_device(test);
    let domain = VerbsDomain::open(&dev, dev.ports[0].port, vm_tuning()).expect("domain");
    let ip = "127.0.0.1".parse().expect("ip");
    let mut listener = VerbsListenComm::bind(ip, 0, Arc::clone(&domain)).expect("listen");
    let mut connector = VerbsConnector::start(listener.handle(), p, &domain).expect("connect");
    let (mut send, mut recv) = (None, None);
    let start = Instant::now();
    while send.is_none() || recv.is_none() {
        if send.is_none() {
            send = connector.progress().expect("connector progress");
        }
        if recv.is_none() {
            recv = listener.accept().expect("accept");
        }
        assert!(start.elapsed() < DEADLINE, "handshake timed out");
    }
    (domain, send.expect("send comm"), recv.expect("recv comm"))
}

/// A registered host buffer (kept alive by the test while requests use it).
pub struct Buf {
    pub mem: Vec<u8>,
    pub mr: Arc<MemoryRegion>,
}

pub fn buf(domain: &VerbsDomain, mem: Vec<u8>) -> Buf {
    let mut mem = mem;
    mem.reserve(1); // an empty Vec has a dangling pointer: give it a real allocation to register
                    // SAFETY: `mem` lives in the returned Buf next to its registration, is never reallocated,
                    // and the tests only read it after the requests using it completed.
    let mr = unsafe { domain.register(mem.as_mut_ptr(), mem.len().max(1)) }.expect("regMr");
    Buf { mem, mr }
}

/// Posts a send of `b[..len]` until the transport accepts it.
pub fn isend(
    s: &mut VerbsSendComm,
    r: &mut VerbsRecvComm,
    b: &mut Buf,
    len: usize,
    tag: i32,
) -> u32 {
    let start = Instant::now();
    loop {
        let ub = UserBuf::from_slice(&mut b.mem[..len]);
        if let Some(req) = s.isend(ub, tag, Some(&b.mr)).expect("isend") {
            return req;
        }
        r.progress().expect("receiver progress");
        assert!(start.elapsed() < DEADLINE, "isend never accepted");
    }
}

pub fn wait_both(
    s: &mut VerbsSendComm,
    sreq: u32,
    r: &mut VerbsRecvComm,
    rreq: u32,
) -> (usize, usize) {
    let (mut sd, mut rd) = (None, None);
    let start = Instant::now();
    while sd.is_none() || rd.is_none() {
        if sd.is_none() {
            sd = s.test(sreq).expect("send test");
        }
        if rd.is_none() {
            rd = r.test(rreq).expect("recv test");
        }
        assert!(
            start.elapsed() < DEADLINE,
            "request never completed: {} / {} / {:?}",
            s.debug_state(),
            r.debug_state(),
            s.qp_stats()
        );
    }
    (sd.unwrap_or(0), rd.unwrap_or(0))
}
