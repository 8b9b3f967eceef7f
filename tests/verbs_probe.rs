//! Throughput probe of the verbs layer (run on purpose with --ignored, e.g. by verbs-tests.sh):
//! 64 MiB messages as 1 MiB RDMA_WRITE_WITH_IMM segments round-robin over 4 data QPs.
#![cfg(feature = "verbs")]

mod verbs_support;

use nccl_net_dqplb::transport::verbs::{QpRole, QpSetConfig, RegisteredBuffer, WorkCompletion};
use std::time::Instant;
use verbs_support::{loopback, pattern, require_device, DEADLINE};

/// The message: one 1 MiB pattern block repeated, each segment stamped with its index so a
/// misplaced segment shows (cheap to build even in a debug build under emulation).
fn message() -> Vec<u8> {
    let block = pattern(5, SEG);
    let mut msg = Vec::with_capacity(MSG);
    for i in 0..MSG / SEG {
        msg.extend_from_slice(&block);
        msg[i * SEG..i * SEG + 8].copy_from_slice(&(i as u64).to_le_bytes());
    }
    msg
}

const MSG: usize = 64 << 20;
const SEG: usize = 1 << 20;
const QPS: usize = 4;
const OUTSTANDING_PER_QP: usize = 4;

#[test]
#[ignore = "throughput probe: run explicitly (scripts/verbs-tests.sh does)"]
fn probe_write_imm_64mib_over_4qps() {
    let dev = require_device("probe_write_imm_64mib_over_4qps");
    let reps: usize = std::env::var("PROBE_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let cfg = QpSetConfig {
        n_data: QPS,
        send_depth: 32,
        recv_depth: 32,
        srq_depth: 0,
    };
    let lb = loopback(&dev, cfg);
    let mut src = RegisteredBuffer::new(&lb.pd, MSG).expect("src");
    let dst = RegisteredBuffer::new(&lb.pd, MSG).expect("dst");
    let data = message();
    src.write(0, &data).expect("fill");
    for q in 0..QPS {
        for k in 0..cfg.recv_depth as u64 {
            lb.b.data(q).expect("qp").post_recv(k).expect("recv");
        }
    }
    let segs = MSG / SEG;
    let mut wcs = [WorkCompletion::default(); 32];
    let start = Instant::now();
    for _ in 0..reps {
        let mut posted = 0usize;
        let mut sent_done = 0usize;
        let mut recv_done = 0usize;
        let mut inflight = [0usize; QPS];
        while recv_done < segs || sent_done < segs {
            // refill every QP up to its outstanding budget, in segment order round-robin
            while posted < segs && inflight[posted % QPS] < OUTSTANDING_PER_QP {
                let q = posted % QPS;
                let imm = posted as u32 | if posted == segs - 1 { 1 << 31 } else { 0 };
                lb.a.data(q)
                    .expect("qp")
                    .post_write(
                        posted as u64,
                        src.mr().local(posted * SEG, SEG).expect("local"),
                        dst.mr().remote(posted * SEG).expect("remote"),
                        Some(imm),
                        true,
                    )
                    .expect("post");
                inflight[q] += 1;
                posted += 1;
            }
            let n = lb.a.poll_send(&mut wcs).expect("poll send");
            for wc in &wcs[..n] {
                lb.a.check(wc).expect("send ok");
                inflight[wc.wr_id as usize % QPS] -= 1;
                sent_done += 1;
            }
            let n = lb.b.poll_recv(&mut wcs).expect("poll recv");
            for wc in &wcs[..n] {
                lb.b.check(wc).expect("recv ok");
                assert_eq!(wc.byte_len as usize, SEG);
                let Some(QpRole::Data(q)) = lb.b.role_of(wc.qp_num) else {
                    panic!("receive completion on a non-data QP: {wc:?}");
                };
                lb.b.data(q)
                    .expect("qp")
                    .post_recv(wc.wr_id)
                    .expect("replenish");
                recv_done += 1;
            }
            assert!(start.elapsed() < DEADLINE * 4, "probe stalled");
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = (MSG * reps) as f64;
    let mut back = vec![0u8; MSG];
    dst.read(0, &mut back).expect("read");
    assert!(back == data, "probe payload differs");
    println!(
        "probe: dqplb verbs layer, {} x {} MiB in {} KiB WRITE_WITH_IMM over {QPS} QPs ({OUTSTANDING_PER_QP} outstanding each): {:.3} s, {:.3} Gb/s, {:.1} MiB/s",
        reps,
        MSG >> 20,
        SEG >> 10,
        secs,
        bytes * 8.0 / secs / 1e9,
        bytes / secs / (1 << 20) as f64
    );
}

#[test]
#[ignore = "throughput probe: run explicitly (scripts/verbs-tests.sh does)"]
fn probe_transport_64mib_messages() {
    use nccl_net_dqplb::engine::PolicyKind;
    use nccl_net_dqplb::transport::tcp::ConnParams;
    use nccl_net_dqplb::transport::UserBuf;
    use verbs_support::{buf, comm_pair, isend, wait_both};

    let p = ConnParams {
        qps: QPS as u16,
        outstanding: OUTSTANDING_PER_QP as u32,
        segment_bytes: SEG as u32,
        max_messages: 4,
        policy: PolicyKind::Dqplb,
        fabric_id: 0,
    };
    let (domain, mut s, mut r) = comm_pair("probe_transport_64mib_messages", p);
    let reps: usize = std::env::var("PROBE_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let mut src = buf(&domain, message());
    let mut dst = buf(&domain, vec![0; MSG]);
    let start = Instant::now();
    for _ in 0..reps {
        let rreq = r
            .irecv(UserBuf::from_slice(&mut dst.mem), 1, Some(&dst.mr))
            .expect("irecv")
            .expect("slot");
        let sreq = isend(&mut s, &mut r, &mut src, MSG, 1);
        assert_eq!(wait_both(&mut s, sreq, &mut r, rreq), (MSG, MSG));
    }
    let secs = start.elapsed().as_secs_f64();
    assert!(dst.mem == src.mem, "probe payload differs");
    let bytes = (MSG * reps) as f64;
    println!(
        "probe: dqplb verbs transport (engine {:?}, isend/irecv/test), {} x {} MiB messages, {} KiB segments over {QPS} QPs x {OUTSTANDING_PER_QP}: {:.3} s, {:.3} Gb/s, {:.1} MiB/s",
        p.policy,
        reps,
        MSG >> 20,
        SEG >> 10,
        secs,
        bytes * 8.0 / secs / 1e9,
        bytes / secs / (1 << 20) as f64
    );
}
