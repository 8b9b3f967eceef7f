//! Throughput probe of the verbs layer (run on purpose with --ignored, e.g. by verbs-tests.sh):
//! 64 MiB messages as 1 MiB RDMA_WRITE_WITH_IMM segments round-robin over 4 data QPs.
#![cfg(feature = "verbs")]

use dqplb_test_support::verbs::{loopback, pattern, require_device, wait_for, Loopback, DEADLINE};
use dqplb_transport::verbs::{QpRole, QpSetConfig, RegisteredBuffer, WorkCompletion};
use std::time::Instant;

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

/// What the layer probes share: a loopback pair of QPS-data-QP sets, a registered source holding
/// `message()` and a registered destination of `regions` x MSG bytes.
struct Rig {
    lb: Loopback,
    src: RegisteredBuffer,
    dst: RegisteredBuffer,
    data: Vec<u8>,
}

impl Rig {
    fn new(test: &str, recv_depth: u32, regions: usize) -> Rig {
        let dev = require_device(test);
        let cfg = QpSetConfig {
            n_data: QPS,
            send_depth: 32,
            recv_depth,
            srq_depth: 0,
        };
        let lb = loopback(&dev, cfg);
        let mut src = RegisteredBuffer::new(&lb.pd, MSG).expect("src");
        let dst = RegisteredBuffer::new(&lb.pd, MSG * regions).expect("dst");
        let data = message();
        src.write(0, &data).expect("fill");
        Rig { lb, src, dst, data }
    }

    /// Panics unless destination region `r` holds the message byte for byte.
    fn check_region(&self, r: usize, what: &str) {
        let mut back = vec![0u8; MSG];
        self.dst.read(r * MSG, &mut back).expect("read");
        assert!(back == self.data, "{what}: region {r} differs");
    }
}

/// Gigabits per second.
fn gbps(bytes: f64, secs: f64) -> f64 {
    bytes * 8.0 / secs / 1e9
}

#[test]
#[ignore = "throughput probe: run explicitly (scripts/verbs-tests.sh does)"]
fn probe_write_imm_64mib_over_4qps() {
    layer_probe("probe_write_imm_64mib_over_4qps", SEG, true);
}

/// The same 64 MiB with plain RDMA_WRITEs and one WRITE_WITH_IMM per QP at the end (the receiver
/// learns of the data once per QP, as perftest's ib_write_bw never does): what the immediate on
/// every segment costs rxe.
#[test]
#[ignore = "throughput probe: run explicitly (scripts/verbs-tests.sh does)"]
fn probe_plain_write_64mib_over_4qps() {
    layer_probe("probe_plain_write_64mib_over_4qps", SEG, false);
}

/// The same 64 MiB as 16 MiB WRITE_WITH_IMMs (one per QP): what the work-request size costs rxe.
#[test]
#[ignore = "throughput probe: run explicitly (scripts/verbs-tests.sh does)"]
fn probe_write_imm_64mib_in_16mib_writes() {
    layer_probe("probe_write_imm_64mib_in_16mib_writes", 16 << 20, true);
}

/// 64 MiB in `seg`-byte writes round-robin over the QPs, up to OUTSTANDING_PER_QP per QP, each
/// refilled on its send completion; `imm_each`: every write carries an immediate (else only each
/// QP's last one). Checks the bytes and prints the rate.
fn layer_probe(test: &str, seg: usize, imm_each: bool) {
    let reps: usize = std::env::var("PROBE_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    const RECV_DEPTH: u32 = 32;
    let rig = Rig::new(test, RECV_DEPTH, 1);
    let (lb, src, dst) = (&rig.lb, &rig.src, &rig.dst);
    for q in 0..QPS {
        for k in 0..u64::from(RECV_DEPTH) {
            lb.b.data(q).expect("qp").post_recv(k).expect("recv");
        }
    }
    let segs = MSG / seg;
    // the receive completions one message draws: every segment's, or each QP's last one
    let recvs = if imm_each { segs } else { QPS.min(segs) };
    let mut wcs = [WorkCompletion::default(); 32];
    let start = Instant::now();
    for _ in 0..reps {
        let mut posted = 0usize;
        let mut sent_done = 0usize;
        let mut recv_done = 0usize;
        let mut inflight = [0usize; QPS];
        while recv_done < recvs || sent_done < segs {
            // refill every QP up to its outstanding budget, in segment order round-robin
            while posted < segs && inflight[posted % QPS] < OUTSTANDING_PER_QP {
                let q = posted % QPS;
                let last_of_qp = posted + QPS >= segs;
                let imm = (imm_each || last_of_qp)
                    .then_some(posted as u32 | if posted == segs - 1 { 1 << 31 } else { 0 });
                lb.a.data(q)
                    .expect("qp")
                    .post_write(
                        posted as u64,
                        src.mr().local(posted * seg, seg).expect("local"),
                        dst.mr().remote(posted * seg).expect("remote"),
                        imm,
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
                assert_eq!(wc.byte_len as usize, seg);
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
    rig.check_region(0, "probe payload");
    let kind = if imm_each {
        "WRITE_WITH_IMM"
    } else {
        "RDMA_WRITE (+ 1 WRITE_WITH_IMM per QP)"
    };
    println!(
        "probe: dqplb verbs layer, {} x {} MiB in {} KiB {kind} over {QPS} QPs ({OUTSTANDING_PER_QP} outstanding each): {:.3} s, {:.3} Gb/s, {:.1} MiB/s",
        reps,
        MSG >> 20,
        seg >> 10,
        secs,
        gbps(bytes, secs),
        bytes / secs / (1 << 20) as f64
    );
}

#[test]
#[ignore = "throughput probe: run explicitly (scripts/verbs-tests.sh does)"]
fn probe_transport_64mib_messages() {
    use dqplb_engine::PolicyKind;
    use dqplb_test_support::verbs::{buf, comm_pair, isend, wait_both};
    use dqplb_transport::tcp::ConnParams;
    use dqplb_transport::UserBuf;

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
        gbps(bytes, secs),
        bytes / secs / (1 << 20) as f64
    );
}

/// Round trips in this probe (after `RTT_WARMUP` untimed ones).
const RTT_ITERS: usize = 2000;
const RTT_WARMUP: usize = 200;
const RTT_BYTES: usize = 8;
/// The probe's spin loops read the deadline clock on every this many polls only (a clock read
/// costs about 1 us in the VM, whose clock source is the emulated HPET).
const CLOCK_EVERY: u32 = 1024;

/// Median and 99th percentile of round-trip samples, in microseconds.
fn median_p99(mut us: Vec<f64>) -> (f64, f64) {
    us.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Spins until `set`'s receive CQ yields one successful completion; returns its wr_id.
fn one_recv(set: &dqplb_transport::verbs::QpSet) -> u64 {
    let mut wc = [WorkCompletion::default(); 1];
    let start = Instant::now();
    for polls in 1u32.. {
        if set.poll_recv(&mut wc).expect("poll recv") == 1 {
            set.check(&wc[0]).expect("recv ok");
            return wc[0].wr_id;
        }
        assert!(
            !polls.is_multiple_of(CLOCK_EVERY) || start.elapsed() < DEADLINE,
            "round-trip probe: receive never came"
        );
    }
    unreachable!("u32 polls ran out")
}

/// Writes clear-to-send word `value` from `from` (staged at offset 2048) into `to`'s CTS zone
/// (offset 64) over `set`'s control QP, inline when the device allows.
fn post_cts(
    set: &dqplb_transport::verbs::QpSet,
    from: &mut RegisteredBuffer,
    to: &RegisteredBuffer,
    value: u32,
    signaled: bool,
) {
    from.write(2048, &value.to_le_bytes()).expect("stage");
    set.control()
        .post_write(
            9,
            from.mr().local(2048, 4).expect("l"),
            to.mr().remote(64).expect("r"),
            None,
            signaled,
        )
        .expect("clear-to-send");
}

/// Reaps send completions when the write just posted was signaled (every 16th), so the send
/// queue never fills.
fn reap_if(set: &dqplb_transport::verbs::QpSet, signaled: bool) {
    if signaled {
        let _ = wait_for(set, dqplb_test_support::verbs::Side::Send, 1);
    }
}

/// Where the round trip of `dqplb perf --latency` goes, in one process and one thread (no
/// scheduling between processes): an 8-byte ping-pong over the verbs layer with 2 writes per
/// round trip (WRITE_WITH_IMM each way, as ib_write_lat's 2 writes but with a receive completion),
/// the same with a clear-to-send before each (4 writes: the plugin's protocol, net_ib's too), and
/// the transport's isend/irecv/test over two comm pairs. Also the cost of one clock read here.
#[test]
#[ignore = "latency probe: run explicitly (scripts/verbs-tests.sh does)"]
fn probe_round_trip_8b() {
    use dqplb_test_support::verbs::{buf, comm_pair, conn_params};
    use dqplb_transport::UserBuf;
    let dev = require_device("probe_round_trip_8b");

    // the clock the transport reads once per progress pass
    let n_clock = 100_000u32;
    let t = Instant::now();
    let mut sink = 0u128;
    for _ in 0..n_clock {
        sink = sink.wrapping_add(Instant::now().duration_since(t).as_nanos());
    }
    let clock_ns = t.elapsed().as_nanos() as f64 / n_clock as f64;
    assert!(sink > 0);

    let cfg = QpSetConfig {
        n_data: 1,
        send_depth: 32,
        recv_depth: 32,
        srq_depth: 0,
    };
    let mut layer = [(0.0, 0.0); 2];
    for (with_cts, out) in [(false, 0usize), (true, 1)] {
        let lb = loopback(&dev, cfg);
        // per side: [0..8) data landing zone, [64..72) clear-to-send landing zone
        let mut abuf = RegisteredBuffer::new(&lb.pd, 4096).expect("a buf");
        let mut bbuf = RegisteredBuffer::new(&lb.pd, 4096).expect("b buf");
        abuf.write(1024, &[0xa5; RTT_BYTES]).expect("fill a");
        bbuf.write(1024, &[0x5a; RTT_BYTES]).expect("fill b");
        for k in 0..cfg.recv_depth as u64 {
            lb.a.data(0).expect("qp").post_recv(k).expect("recv a");
            lb.b.data(0).expect("qp").post_recv(k).expect("recv b");
        }
        let (qa, qb) = (lb.a.data(0).expect("qp"), lb.b.data(0).expect("qp"));
        // the clear-to-send word is the iteration number + 1, written by the receiver-to-be
        let wait_cts = |buf: &RegisteredBuffer, want: u32| {
            let start = Instant::now();
            let mut polls = 0u32;
            while buf.read_u32_volatile(64).expect("cts") != want {
                polls += 1;
                assert!(
                    !polls.is_multiple_of(CLOCK_EVERY) || start.elapsed() < DEADLINE,
                    "clear-to-send never came"
                );
            }
        };
        let mut samples = Vec::with_capacity(RTT_ITERS);
        for i in 0..RTT_WARMUP + RTT_ITERS {
            let sig = i % 16 == 15;
            let t = Instant::now();
            if with_cts && i == 0 {
                // B announces its first receive before anything is sent
                post_cts(&lb.b, &mut bbuf, &abuf, 1, false);
            }
            if with_cts {
                wait_cts(&abuf, i as u32 + 1);
            }
            qa.post_write(
                1,
                abuf.mr().local(1024, RTT_BYTES).expect("l"),
                bbuf.mr().remote(0).expect("r"),
                Some(i as u32),
                sig,
            )
            .expect("ping");
            let k = one_recv(&lb.b);
            qb.post_recv(k).expect("repost b");
            if with_cts {
                // B announces its next receive, then A's pong may go (A announced it last round)
                post_cts(&lb.b, &mut bbuf, &abuf, i as u32 + 2, sig);
                if i == 0 {
                    post_cts(&lb.a, &mut abuf, &bbuf, 1, false);
                }
                wait_cts(&bbuf, i as u32 + 1);
            }
            qb.post_write(
                2,
                bbuf.mr().local(1024, RTT_BYTES).expect("l"),
                abuf.mr().remote(0).expect("r"),
                Some(i as u32),
                sig,
            )
            .expect("pong");
            let k = one_recv(&lb.a);
            qa.post_recv(k).expect("repost a");
            let rtt = t.elapsed();
            if with_cts {
                post_cts(&lb.a, &mut abuf, &bbuf, i as u32 + 2, sig);
                reap_if(&lb.a, sig); // A's control write
                reap_if(&lb.b, sig); // B's control write
            }
            reap_if(&lb.a, sig);
            reap_if(&lb.b, sig);
            if i >= RTT_WARMUP {
                samples.push(rtt.as_nanos() as f64 / 1e3);
            }
        }
        let mut got = [0u8; RTT_BYTES];
        bbuf.read(0, &mut got).expect("read b");
        assert_eq!(got, [0xa5; RTT_BYTES], "ping payload");
        abuf.read(0, &mut got).expect("read a");
        assert_eq!(got, [0x5a; RTT_BYTES], "pong payload");
        layer[out] = median_p99(samples);
    }

    // the transport: A->B and B->A comm pairs, the next receive always posted ahead (as NCCL's
    // proxy and dqplb perf --latency keep it)
    let p = conn_params(8);
    let (da, mut s_ab, mut r_ab) = comm_pair("probe_round_trip_8b", p);
    let (db, mut s_ba, mut r_ba) = comm_pair("probe_round_trip_8b", p);
    let mut ping = buf(&da, vec![0xa5; RTT_BYTES]);
    let mut pong = buf(&db, vec![0x5a; RTT_BYTES]);
    let mut at_b = buf(&da, vec![0; RTT_BYTES]);
    let mut at_a = buf(&db, vec![0; RTT_BYTES]);
    let post_recv = |r: &mut dqplb_transport::verbs::VerbsRecvComm,
                     b: &mut dqplb_test_support::verbs::Buf| {
        r.irecv(UserBuf::from_slice(&mut b.mem), 1, Some(&b.mr))
            .expect("irecv")
            .expect("slot")
    };
    let until = |f: &mut dyn FnMut() -> Option<usize>| {
        let start = Instant::now();
        for polls in 1u32.. {
            if let Some(n) = f() {
                return n;
            }
            assert!(
                !polls.is_multiple_of(CLOCK_EVERY) || start.elapsed() < DEADLINE,
                "transport round trip stalled"
            );
        }
        unreachable!("u32 polls ran out")
    };
    let mut rb = post_recv(&mut r_ab, &mut at_b);
    let mut ra = post_recv(&mut r_ba, &mut at_a);
    let mut samples = Vec::with_capacity(RTT_ITERS);
    for i in 0..RTT_WARMUP + RTT_ITERS {
        let t = Instant::now();
        let ub = UserBuf::from_slice(&mut ping.mem);
        let sa = until(&mut || {
            s_ab.isend(ub, 1, Some(&ping.mr))
                .expect("isend")
                .map(|s| s as usize)
        });
        assert_eq!(until(&mut || r_ab.test(rb).expect("test")), RTT_BYTES);
        rb = post_recv(&mut r_ab, &mut at_b);
        let ub = UserBuf::from_slice(&mut pong.mem);
        let sb = until(&mut || {
            s_ba.isend(ub, 1, Some(&pong.mr))
                .expect("isend")
                .map(|s| s as usize)
        });
        assert_eq!(until(&mut || r_ba.test(ra).expect("test")), RTT_BYTES);
        let rtt = t.elapsed();
        ra = post_recv(&mut r_ba, &mut at_a);
        until(&mut || s_ab.test(sa as u32).expect("test"));
        until(&mut || s_ba.test(sb as u32).expect("test"));
        if i >= RTT_WARMUP {
            samples.push(rtt.as_nanos() as f64 / 1e3);
        }
    }
    assert_eq!(at_b.mem, vec![0xa5; RTT_BYTES], "transport ping payload");
    assert_eq!(at_a.mem, vec![0x5a; RTT_BYTES], "transport pong payload");
    let transport = median_p99(samples);
    println!("probe: clock read (Instant::now) {clock_ns:.0} ns");
    println!(
        "probe: 8 B round trip, one thread: layer 2 writes (WRITE_WITH_IMM each way) median {:.1} / p99 {:.1} us; layer 4 writes (+ clear-to-send each way) {:.1} / {:.1} us; transport isend/irecv/test {:.1} / {:.1} us",
        layer[0].0, layer[0].1, layer[1].0, layer[1].1, transport.0, transport.1
    );
}

/// perftest's `ib_write_bw -q 4 -s SIZE` layout at the verbs layer, in one process: every QP
/// writes the whole 64 MiB source in `wr`-byte plain RDMA_WRITEs, up to 5 outstanding (perftest's
/// tx depth at -n 5), to the same destination address as every other QP (`shared`, perftest's
/// single buffer) or to its own 64 MiB region. Which of perftest's choices rxe rewards.
fn perftest_layout_probe(wr: usize, shared: bool) {
    const DEPTH: usize = 5;
    let regions = if shared { 1 } else { QPS };
    let rig = Rig::new("probe_perftest_layout", 1, regions);
    let (lb, src, dst) = (&rig.lb, &rig.src, &rig.dst);
    let per_qp = MSG / wr;
    let (mut posted, mut done) = ([0usize; QPS], 0usize);
    let mut inflight = [0usize; QPS];
    let mut wcs = [WorkCompletion::default(); 32];
    let start = Instant::now();
    while done < per_qp * QPS {
        for q in 0..QPS {
            while posted[q] < per_qp && inflight[q] < DEPTH {
                let k = posted[q];
                let base = if shared { 0 } else { q * MSG };
                lb.a.data(q)
                    .expect("qp")
                    .post_write(
                        q as u64,
                        src.mr().local(k * wr, wr).expect("local"),
                        dst.mr().remote(base + k * wr).expect("remote"),
                        None,
                        true,
                    )
                    .expect("post");
                posted[q] += 1;
                inflight[q] += 1;
            }
        }
        let n = lb.a.poll_send(&mut wcs).expect("poll send");
        for wc in &wcs[..n] {
            lb.a.check(wc).expect("send ok");
            inflight[wc.wr_id as usize] -= 1;
            done += 1;
        }
        assert!(
            start.elapsed() < DEADLINE * 4,
            "perftest-layout probe stalled"
        );
    }
    let secs = start.elapsed().as_secs_f64();
    for r in 0..regions {
        rig.check_region(r, "perftest-layout probe");
    }
    let bytes = (MSG * QPS) as f64;
    println!(
        "probe: perftest layout, {QPS} QPs x {} MiB in {} KiB RDMA_WRITEs ({DEPTH} deep), {} destination: {:.3} s, {:.3} Gb/s",
        MSG >> 20,
        wr >> 10,
        if shared { "one shared" } else { "a separate" },
        secs,
        gbps(bytes, secs)
    );
}

#[test]
#[ignore = "throughput probe: run explicitly (scripts/verbs-tests.sh does)"]
fn probe_perftest_layout_64mib_writes_shared() {
    perftest_layout_probe(MSG, true);
}

#[test]
#[ignore = "throughput probe: run explicitly (scripts/verbs-tests.sh does)"]
fn probe_perftest_layout_1mib_writes_shared() {
    perftest_layout_probe(SEG, true);
}

#[test]
#[ignore = "throughput probe: run explicitly (scripts/verbs-tests.sh does)"]
fn probe_perftest_layout_64mib_writes_separate() {
    perftest_layout_probe(MSG, false);
}
