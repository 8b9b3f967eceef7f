//! Shared pieces of the fault suite (faults_*.rs): comm pairs over loopback, byte-exact messages,
//! a WARN counter, child processes in a role, and /proc figures (descriptors, RSS).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dqplb_engine::PolicyKind;
use dqplb_test_support::spawn;
use dqplb_transport::tcp::{
    ConnParams, ListenHandle, TcpConnector, TcpListenComm, TcpOptions, TcpRecvComm, TcpSendComm,
    HANDLE_BYTES,
};
use dqplb_transport::UserBuf;

pub(crate) const ROLE: &str = "DQPLB_FAULT_ROLE";

pub(crate) fn params(qps: u16) -> ConnParams {
    ConnParams {
        qps,
        outstanding: 4,
        segment_bytes: 64 << 10,
        max_messages: 16,
        policy: PolicyKind::Dqplb,
        fabric_id: 0,
    }
}

pub(crate) fn opts() -> TcpOptions {
    TcpOptions {
        nodelay: true,
        ..Default::default()
    }
}

pub(crate) fn listener() -> TcpListenComm {
    TcpListenComm::bind("127.0.0.1".parse().unwrap(), 0, opts()).unwrap()
}

/// Drives connector and listener until both have their comm, or fails after `within`.
pub(crate) fn connect_within(
    l: &mut TcpListenComm,
    c: &mut TcpConnector,
    within: Duration,
) -> Result<(TcpSendComm, TcpRecvComm), String> {
    let t0 = Instant::now();
    let (mut s, mut r) = (None, None);
    loop {
        if s.is_none() {
            s = c.progress().map_err(|e| e.msg)?;
        }
        if r.is_none() {
            r = l.accept().map_err(|e| e.msg)?;
        }
        if let (Some(_), Some(_)) = (&s, &r) {
            return Ok((s.unwrap(), r.unwrap()));
        }
        if t0.elapsed() > within {
            return Err(format!("connect/accept not done in {within:?}"));
        }
        std::thread::yield_now();
    }
}

pub(crate) fn pair(qps: u16) -> (TcpListenComm, TcpSendComm, TcpRecvComm) {
    let mut l = listener();
    let mut c = TcpConnector::start(l.handle(), params(qps), None, &opts()).unwrap();
    let (s, r) = connect_within(&mut l, &mut c, Duration::from_secs(10)).unwrap();
    (l, s, r)
}

/// Byte `i` of message `m`.
pub(crate) fn byte(m: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ m.wrapping_mul(0x9E37) ^ (i >> 8)) as u8
}

/// Moves `count` messages of `size` bytes through the pair, both ends driven from this thread,
/// each checked byte for byte; `tick` runs on every pass. Err if it fails or passes `within`.
pub(crate) fn transfer(
    s: &mut TcpSendComm,
    r: &mut TcpRecvComm,
    count: usize,
    size: usize,
    within: Duration,
    mut tick: impl FnMut(),
) -> Result<(), String> {
    let t0 = Instant::now();
    let mut src = vec![0u8; size];
    let mut dst = vec![0u8; size];
    for m in 0..count {
        src.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = byte(m, i));
        dst.fill(0);
        let mut rq = None;
        let mut sq = None;
        let (mut rd, mut sd) = (false, false);
        while !(rd && sd) {
            if t0.elapsed() > within {
                return Err(format!("message {m} of {count} not done in {within:?}"));
            }
            tick();
            if rq.is_none() {
                rq = r
                    .irecv(UserBuf::from_slice(&mut dst), 1)
                    .map_err(|e| e.msg)?;
            }
            if sq.is_none() {
                sq = s
                    .isend(UserBuf::from_slice(&mut src), 1)
                    .map_err(|e| e.msg)?;
            }
            if let (Some(q), false) = (sq, sd) {
                sd = s.test(q).map_err(|e| e.msg)?.is_some();
            }
            if let (Some(q), false) = (rq, rd) {
                rd = r.test(q).map_err(|e| e.msg)?.is_some();
            }
        }
        if let Some(i) = (0..size).find(|&i| dst[i] != src[i]) {
            return Err(format!("message {m}: byte {i} differs"));
        }
    }
    Ok(())
}

/// Messages of `size` bytes moved (byte-exact) in `secs` seconds.
pub(crate) fn rate(s: &mut TcpSendComm, r: &mut TcpRecvComm, size: usize, secs: f64) -> usize {
    let t0 = Instant::now();
    let mut n = 0;
    while t0.elapsed().as_secs_f64() < secs {
        transfer(s, r, 1, size, Duration::from_secs(30), || {}).unwrap();
        n += 1;
    }
    n
}

/// Counts WARN events logged on the thread it is installed on.
pub(crate) struct CountWarns(pub(crate) Arc<AtomicUsize>);

impl tracing::Subscriber for CountWarns {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        if *e.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs `f` with this thread's WARNs counted.
pub(crate) fn counting_warns<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let n = Arc::new(AtomicUsize::new(0));
    let out = tracing::subscriber::with_default(CountWarns(n.clone()), f);
    (out, n.load(Ordering::Relaxed))
}

pub(crate) fn handle_hex(h: &ListenHandle) -> String {
    let mut b = [0u8; HANDLE_BYTES];
    h.encode(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn handle_from_hex(s: &str) -> ListenHandle {
    let mut b = [0u8; HANDLE_BYTES];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    ListenHandle::decode(&b).unwrap()
}

/// A child process running this binary's ignored test `entry` in `role`.
pub(crate) struct Peer {
    pub(crate) child: Child,
    lines: BufReader<ChildStdout>,
}

impl Peer {
    pub(crate) fn spawn(entry: &str, role: &str, env: &[(&str, &str)]) -> Peer {
        let mut cmd = spawn::role_command(entry, ROLE, role);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn child");
        let lines = BufReader::new(child.stdout.take().unwrap());
        Peer { child, lines }
    }

    /// The child's next protocol line (panics on EOF or a FAIL line).
    pub(crate) fn next(&mut self) -> String {
        loop {
            let mut line = String::new();
            let n = self.lines.read_line(&mut line).expect("child stdout");
            assert!(n > 0, "child ended without a protocol line");
            if let Some(p) = spawn::protocol_line(line.trim_end()) {
                assert!(!p.starts_with("FAIL"), "child: {p}");
                return p.to_string();
            }
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An attacker's connection: None if not established within 200 ms (a full backlog drops SYNs,
/// and a blocking connect would then retry for minutes).
pub(crate) fn dial(to: std::net::SocketAddr) -> Option<std::net::TcpStream> {
    std::net::TcpStream::connect_timeout(&to, Duration::from_millis(200)).ok()
}

/// Open descriptors of this process.
pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Resident set size of this process in KiB.
pub(crate) fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Prints one row of the suite's table: attack, criterion, measured figure.
pub(crate) fn report(attack: &str, criterion: &str, measured: &str) {
    println!("FAULT | {attack} | {criterion} | {measured}");
}
