//! One bench trial: a sender and a receiver thread stream large messages over a fresh TCP
//! connection for a fixed time while the sender samples per-QP completed bytes every few ms.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dqplb_engine::{PolicyKind, QpStats, RehashRule};
use dqplb_transport::tcp::{
    ConnParams, TcpConnector, TcpListenComm, TcpOptions, TcpRecvComm, TcpSendComm,
};
use dqplb_transport::UserBuf;

/// What one trial runs.
#[derive(Debug, Clone)]
pub(crate) struct TrialSpec {
    pub policy: PolicyKind,
    pub qps: u16,
    pub outstanding: u32,
    pub segment_bytes: u32,
    pub message_bytes: usize,
    pub inflight_messages: usize,
    pub duration: Duration,
    pub sample_every: Duration,
    /// Sleep when a loop pass moved nothing (keeps two busy threads off a 2-core machine).
    pub idle_sleep: Duration,
    pub port_base: u16,
    /// Data stream i uses source port `port_base + (1 + i) x port_stride` (0 or 1: consecutive).
    pub port_stride: u16,
    pub socket_buffer_bytes: usize,
    /// The straggler re-hash rule installed on the send comm (None: off, as TCP comms start).
    pub rehash: Option<RehashRule>,
    /// Path-failure isolation's stall timeout (0: off, a stalled stream stalls the comm).
    pub stall_timeout_ms: u64,
    /// Sender writes a per-message pattern, the receiver checks every byte of every message.
    pub verify: bool,
    /// Data stream i binds this port instead of the stride's (path pinning, or a NIC's ports).
    pub pinned_ports: Option<Vec<u16>>,
}

/// Ports of a connection once it is up, for shaping plans that need them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Connected {
    pub ctrl_sport: u16,
    /// Destination ports of data segments: the listener's, then the re-path listener's.
    pub data_dports: Vec<u16>,
    pub data_sports: Vec<u16>,
}

/// What the receiver saw of the data (with `verify`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Received {
    pub messages: u64,
    /// Messages with at least one byte different from what the sender wrote.
    pub corrupt: u64,
}

/// Counters at one instant, `t_ns` after the start of streaming.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub t_ns: u64,
    /// Bytes of messages whose send completed (every segment acknowledged).
    pub msg_bytes: u64,
    /// Per QP: payload bytes whose segments were acknowledged.
    pub qp_bytes: Vec<u64>,
}

/// Samples of a trial plus when each scheduled action actually ran.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrialOutput {
    pub samples: Vec<Sample>,
    /// (ns after start when the action began, ns it took).
    pub actions: Vec<(u64, u64)>,
    pub peak_outstanding: Vec<u32>,
    /// Scheduling hiccups: loop passes of the sender / receiver thread that started more than
    /// `GAP_NS` after the previous one (the threads only sleep 50 us, so these are CPU stalls).
    pub gaps: [LoopGaps; 2],
    /// The send comm's per-QP counters at the end (resent, re-hashes, failures).
    pub final_stats: Vec<QpStats>,
    /// (ns after start, QP, new source port) each time a data stream was replaced.
    pub port_changes: Vec<(u64, usize, u16)>,
    pub repaths: u64,
    pub received: Received,
    /// Messages whose send completed.
    pub sent_messages: u64,
}

/// A pass of a bench loop later than this after the previous one counts as a stall.
pub(crate) const GAP_NS: u64 = 5_000_000;

/// Stalls of one bench thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LoopGaps {
    pub count: u32,
    pub max_ns: u64,
    pub total_ns: u64,
}

impl LoopGaps {
    fn note(&mut self, prev: &mut Instant, now: Instant) {
        let d = now.duration_since(*prev).as_nanos() as u64;
        *prev = now;
        if d > GAP_NS {
            self.count += 1;
            self.total_ns += d;
            self.max_ns = self.max_ns.max(d);
        }
    }
}

/// Acknowledged bytes of a QP: posted bytes scaled by completed/posted segments (exact when all
/// segments of the QP have one size, which the scenarios guarantee by dividing message sizes).
pub(crate) fn completed_bytes(s: &QpStats) -> u64 {
    if s.segments == 0 {
        return 0;
    }
    (u128::from(s.bytes) * u128::from(s.completed) / u128::from(s.segments)) as u64
}

fn connect(spec: &TrialSpec) -> Result<(TcpSendComm, TcpRecvComm), String> {
    let opts = TcpOptions {
        socket_buffer_bytes: spec.socket_buffer_bytes,
        nodelay: true,
        src_port_base: Some(spec.port_base),
        src_port_stride: spec.port_stride,
        pinned_ports: spec
            .pinned_ports
            .iter()
            .flatten()
            .map(|p| vec![*p])
            .collect(),
    };
    let ip: IpAddr = IpAddr::from([127, 0, 0, 1]);
    let mut l = TcpListenComm::bind(ip, 0, opts.clone()).map_err(|e| format!("listen: {e}"))?;
    let params = ConnParams {
        qps: spec.qps,
        outstanding: spec.outstanding,
        segment_bytes: spec.segment_bytes,
        max_messages: spec.inflight_messages.max(32) as u32,
        policy: spec.policy,
        fabric_id: 0,
    };
    let mut c = TcpConnector::start(l.handle(), params, Some(ip), &opts)
        .map_err(|e| format!("connect: {e}"))?;
    let (mut s, mut r) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.is_none() || r.is_none() {
        if Instant::now() > deadline {
            return Err("connection did not come up within 10 s".into());
        }
        if s.is_none() {
            s = c.progress().map_err(|e| format!("connect: {e}"))?;
        }
        if r.is_none() {
            r = l.accept().map_err(|e| format!("accept: {e}"))?;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    match (s, r) {
        (Some(mut s), Some(r)) => {
            if let Some(rule) = spec.rehash {
                s.set_rehash_rule(rule)
                    .map_err(|e| format!("re-hash rule: {e}"))?;
            }
            s.set_stall_timeout_ms(spec.stall_timeout_ms);
            Ok((s, r))
        }
        _ => Err("connection setup finished without both ends".into()),
    }
}

/// The source port of each data stream.
fn sports(s: &TcpSendComm) -> Vec<u16> {
    s.data_stream_addrs()
        .iter()
        .map(|(l, _)| l.port())
        .collect()
}

/// Fills message `n`'s bytes: 8-byte words `n << 32 | word index` (a misplaced or stale
/// segment shows), the tail with the low byte of `n`.
fn fill_pattern(buf: &mut [u8], n: u64) {
    let mut words = buf.chunks_exact_mut(8);
    for (j, w) in (&mut words).enumerate() {
        w.copy_from_slice(&((n << 32) | j as u64).to_le_bytes());
    }
    words.into_remainder().fill(n as u8);
}

fn pattern_ok(buf: &[u8], n: u64) -> bool {
    let mut words = buf.chunks_exact(8);
    for (j, w) in (&mut words).enumerate() {
        if w != ((n << 32) | j as u64).to_le_bytes() {
            return false;
        }
    }
    words.remainder().iter().all(|b| *b == n as u8)
}

/// Checks that data stream i really uses source port base+(1+i)*stride (what the tc filters match).
fn check_ports(s: &TcpSendComm, base: u16, stride: u16) -> Result<(), String> {
    for (i, (local, _)) in s.data_stream_addrs().iter().enumerate() {
        let want = u32::from(base) + (1 + i as u32) * u32::from(stride.max(1));
        if u32::from(local.port()) != want {
            return Err(format!(
                "data stream {i} has source port {}, the shaper matches {want}",
                local.port()
            ));
        }
    }
    Ok(())
}

fn check_pinned(s: &TcpSendComm, ports: &[u16]) -> Result<(), String> {
    let got: Vec<u16> = s
        .data_stream_addrs()
        .iter()
        .map(|(l, _)| l.port())
        .collect();
    if got != ports {
        return Err(format!(
            "data streams have source ports {got:?}, the pinned plan {ports:?}"
        ));
    }
    Ok(())
}

struct SendResult {
    samples: Vec<Sample>,
    gaps: LoopGaps,
    stats: Vec<QpStats>,
    port_changes: Vec<(u64, usize, u16)>,
    repaths: u64,
    messages: u64,
}

fn send_loop(mut s: TcpSendComm, spec: &TrialSpec, epoch: Instant) -> Result<SendResult, String> {
    let k = spec.inflight_messages;
    let mut bufs: Vec<Vec<u8>> = (0..k).map(|i| vec![i as u8; spec.message_bytes]).collect();
    let mut reqs: VecDeque<u32> = VecDeque::with_capacity(k);
    let mut next = 0usize;
    let mut done: u64 = 0;
    let n_samples = (spec.duration.as_nanos() / spec.sample_every.as_nanos().max(1)) as usize + 2;
    let mut samples = Vec::with_capacity(n_samples);
    let end = epoch + spec.duration;
    let mut next_sample = epoch;
    let mut last_completed = 0u64;
    let (mut gaps, mut prev) = (LoopGaps::default(), Instant::now());
    let mut ports = sports(&s);
    let mut port_changes = Vec::new();
    let mut messages = 0u64;
    loop {
        let now = Instant::now();
        gaps.note(&mut prev, now);
        if now >= next_sample || now >= end {
            let t_ns = now.duration_since(epoch).as_nanos() as u64;
            samples.push(Sample {
                t_ns,
                msg_bytes: done,
                qp_bytes: s.qp_stats().iter().map(completed_bytes).collect(),
            });
            next_sample += spec.sample_every;
            if s.repaths() as usize > port_changes.len() {
                for (q, p) in sports(&s).into_iter().enumerate() {
                    if ports.get(q) != Some(&p) {
                        port_changes.push((t_ns, q, p));
                        ports[q] = p;
                    }
                }
            }
        }
        if now >= end {
            break;
        }
        let mut moved = false;
        while reqs.len() < k {
            let buf = &mut bufs[next % k];
            if spec.verify {
                fill_pattern(buf, next as u64);
            }
            let b = UserBuf::from_slice(buf);
            match s.isend(b, 0).map_err(|e| format!("isend: {e}"))? {
                Some(r) => {
                    reqs.push_back(r);
                    next += 1;
                    moved = true;
                }
                None => break,
            }
        }
        while let Some(&r) = reqs.front() {
            match s.test(r).map_err(|e| format!("send test: {e}"))? {
                Some(n) => {
                    done += n as u64;
                    messages += 1;
                    reqs.pop_front();
                    moved = true;
                }
                None => break,
            }
        }
        let completed: u64 = s.qp_stats().iter().map(|q| q.completed).sum();
        if completed != last_completed {
            last_completed = completed;
            moved = true;
        }
        if !moved {
            std::thread::sleep(spec.idle_sleep);
        }
    }
    Ok(SendResult {
        samples,
        gaps,
        stats: s.qp_stats().to_vec(),
        port_changes,
        repaths: s.repaths(),
        messages,
    })
}

fn recv_loop(
    mut r: TcpRecvComm,
    spec: &TrialSpec,
    stop: &AtomicBool,
) -> (LoopGaps, Received, Result<(), String>) {
    let mut gaps = LoopGaps::default();
    let mut got = Received::default();
    let res = recv_passes(&mut r, spec, stop, &mut gaps, &mut got);
    (gaps, got, res)
}

fn recv_passes(
    r: &mut TcpRecvComm,
    spec: &TrialSpec,
    stop: &AtomicBool,
    gaps: &mut LoopGaps,
    got: &mut Received,
) -> Result<(), String> {
    let k = spec.inflight_messages;
    let mut bufs: Vec<Vec<u8>> = (0..k).map(|_| vec![0u8; spec.message_bytes]).collect();
    let mut reqs: VecDeque<u32> = VecDeque::with_capacity(k);
    let mut next = 0usize;
    let mut prev = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        gaps.note(&mut prev, Instant::now());
        let mut moved = false;
        while reqs.len() < k {
            let b = UserBuf::from_slice(&mut bufs[next % k]);
            match r.irecv(b, 0).map_err(|e| format!("irecv: {e}"))? {
                Some(q) => {
                    reqs.push_back(q);
                    next += 1;
                    moved = true;
                }
                None => break,
            }
        }
        while let Some(&q) = reqs.front() {
            match r.test(q).map_err(|e| format!("receive test: {e}"))? {
                Some(n) => {
                    reqs.pop_front();
                    let m = got.messages;
                    if spec.verify {
                        let buf = &bufs[m as usize % k];
                        if n != buf.len() || !pattern_ok(buf, m) {
                            got.corrupt += 1;
                        }
                    }
                    got.messages += 1;
                    moved = true;
                }
                None => break,
            }
        }
        if !moved {
            r.progress().map_err(|e| format!("receive progress: {e}"))?;
            std::thread::sleep(spec.idle_sleep);
        }
    }
    Ok(())
}

/// Runs one trial; `action(i)` runs scheduled action i at `at_ms[i]` on the calling thread.
pub(crate) fn run(
    spec: &TrialSpec,
    at_ms: &[u64],
    action: &mut dyn FnMut(usize) -> Result<(), String>,
) -> Result<TrialOutput, String> {
    run_connected(spec, &mut |_| Ok(()), at_ms, action)
}

/// As `run`, calling `on_connected` with the connection's ports before any data moves.
pub(crate) fn run_connected(
    spec: &TrialSpec,
    on_connected: &mut dyn FnMut(&Connected) -> Result<(), String>,
    at_ms: &[u64],
    action: &mut dyn FnMut(usize) -> Result<(), String>,
) -> Result<TrialOutput, String> {
    let (s, r) = connect(spec)?;
    match &spec.pinned_ports {
        Some(ports) => check_pinned(&s, ports)?,
        None => check_ports(&s, spec.port_base, spec.port_stride)?,
    }
    let addrs = s.data_stream_addrs();
    let mut data_dports: Vec<u16> = addrs.iter().map(|(_, p)| p.port()).collect();
    data_dports.dedup();
    data_dports.extend(r.repath_port());
    on_connected(&Connected {
        ctrl_sport: spec.port_base,
        data_dports,
        data_sports: addrs.iter().map(|(l, _)| l.port()).collect(),
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let rx = {
        let (spec, stop) = (spec.clone(), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("paths-recv".into())
            .spawn(move || recv_loop(r, &spec, &stop))
            .map_err(|e| format!("spawn receiver: {e}"))?
    };
    let tx = {
        let spec = spec.clone();
        std::thread::Builder::new()
            .name("paths-send".into())
            .spawn(move || send_loop(s, &spec, epoch))
            .map_err(|e| format!("spawn sender: {e}"))?
    };
    let mut actions = Vec::with_capacity(at_ms.len());
    let mut action_err = None;
    for (i, t) in at_ms.iter().enumerate() {
        let due = epoch + Duration::from_millis(*t);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let t0 = Instant::now();
        if let Err(e) = action(i) {
            action_err = Some(e);
            break;
        }
        actions.push((
            t0.duration_since(epoch).as_nanos() as u64,
            t0.elapsed().as_nanos() as u64,
        ));
    }
    let sent = tx
        .join()
        .map_err(|_| "sender thread panicked".to_string())?;
    stop.store(true, Ordering::Relaxed);
    let (rx_gaps, got, received) = rx
        .join()
        .map_err(|_| "receiver thread panicked".to_string())?;
    let sent = sent?;
    if let Err(e) = received {
        // The sender closing first surfaces as "peer closed" after stop; anything else is real.
        if !e.contains("closed") && !e.contains("reset") {
            return Err(e);
        }
    }
    if let Some(e) = action_err {
        return Err(e);
    }
    Ok(TrialOutput {
        samples: sent.samples,
        actions,
        peak_outstanding: sent.stats.iter().map(|q| q.peak_outstanding).collect(),
        gaps: [sent.gaps, rx_gaps],
        final_stats: sent.stats,
        port_changes: sent.port_changes,
        repaths: sent.repaths,
        received: got,
        sent_messages: sent.messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_catches_stale_and_misplaced_bytes() {
        let mut a = vec![0u8; 8 * 1000 + 5];
        fill_pattern(&mut a, 7);
        assert!(pattern_ok(&a, 7));
        // The same buffer one message earlier or later (a stale copy) fails.
        assert!(!pattern_ok(&a, 6) && !pattern_ok(&a, 8));
        // Two words swapped (a segment at the wrong offset) fails.
        let mut b = a.clone();
        b.swap(0, 8);
        assert!(!pattern_ok(&b, 7));
        let mut c = a.clone();
        c[8 * 1000 + 4] ^= 1;
        assert!(!pattern_ok(&c, 7));
    }
}
