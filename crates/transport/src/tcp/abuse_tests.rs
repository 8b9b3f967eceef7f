//! Tests of the TCP transport under abuse: a silent service, a refused hello, slow and churning
//! strangers on the listeners (bounded work, aggregated WARNs), and a close under fork.

use super::tests::{connect, params};
use super::*;
use crate::{ErrorCode, UserBuf};
use dqplb_engine::PolicyKind;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counts the WARN events logged on the thread it is installed on.
struct CountWarns(Arc<AtomicUsize>);

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

/// Runs `f` with WARNs counted; returns what `f` returned and the count.
fn counting_warns<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let n = Arc::new(AtomicUsize::new(0));
    let out = tracing::subscriber::with_default(CountWarns(n.clone()), f);
    (out, n.load(Ordering::Relaxed))
}

fn opts() -> TcpOptions {
    TcpOptions {
        nodelay: true,
        ..Default::default()
    }
}

fn pair() -> (TcpSendComm, TcpRecvComm) {
    let mut l = TcpListenComm::bind("127.0.0.1".parse().unwrap(), 0, opts()).unwrap();
    let mut c =
        TcpConnector::start(l.handle(), params(PolicyKind::Dqplb, 2), None, &opts()).unwrap();
    connect(&mut l, &mut c)
}

/// One message of `n` bytes both ways through the pair, byte-exact.
fn one_message(s: &mut TcpSendComm, r: &mut TcpRecvComm, n: usize) {
    let mut src: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; n];
    let deadline = Instant::now() + Duration::from_secs(10);
    let rq = loop {
        if let Some(q) = r.irecv(UserBuf::from_slice(&mut dst), 1).unwrap() {
            break q;
        }
    };
    let sq = loop {
        assert!(Instant::now() < deadline, "isend never matched");
        if let Some(q) = s.isend(UserBuf::from_slice(&mut src), 1).unwrap() {
            break q;
        }
        r.progress().unwrap();
    };
    let (mut sd, mut rd) = (false, false);
    while !(sd && rd) {
        assert!(Instant::now() < deadline, "message of {n} bytes stalled");
        sd = sd || s.test(sq).unwrap().is_some();
        rd = rd || r.test(rq).unwrap().is_some();
    }
    assert!(dst == src, "message of {n} bytes arrived changed");
}

#[test]
fn the_handshake_timeout_is_nccls_connect_retry_budget() {
    // 34 retries sleeping 100 ms x n: 59.5 s (NCCL 2.24+ socketConnectCheck).
    let nccl_ms: u64 = (1..=34).map(|n| n * 100).sum();
    assert_eq!(nccl_ms, 59_500);
    assert_eq!(HANDSHAKE_TIMEOUT, Duration::from_secs(60));
}

/// A service that accepts and never says anything: connect still returns a send comm without
/// blocking, and isend then fails within the handshake timeout with the address in the error.
#[test]
fn a_silent_service_fails_isend_after_the_handshake_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let handle = handle::ListenHandle {
        addr,
        fabric_id: 0,
        secret: [3; 16],
    };
    let t0 = Instant::now();
    let mut c = TcpConnector::start(&handle, params(PolicyKind::Dqplb, 2), None, &opts()).unwrap();
    c.set_handshake_timeout_ms(300);
    let mut held = Vec::new();
    silent.set_nonblocking(true).unwrap();
    let mut s = loop {
        let t = Instant::now();
        let got = c.progress().unwrap();
        assert!(t.elapsed() < Duration::from_millis(50), "connect blocked");
        if let Ok((sock, _)) = silent.accept() {
            held.push(sock);
        }
        if let Some(s) = got {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "connect never completed"
        );
    };
    let mut src = vec![1u8; 100];
    let e = loop {
        match s.isend(UserBuf::from_slice(&mut src), 1) {
            Ok(None) => assert!(
                t0.elapsed() < Duration::from_secs(5),
                "isend spins for ever"
            ),
            Ok(Some(_)) => panic!("a silent service matched a send"),
            Err(e) => break e,
        }
    };
    let took = t0.elapsed();
    assert_eq!(e.code, ErrorCode::RemoteError);
    assert!(e.msg.contains(&addr.to_string()), "{}", e.msg);
    assert!(e.msg.contains("sent nothing in 300 ms"), "{}", e.msg);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

/// A wrong secret is named at the sender, not reported as an ordinary close.
#[test]
fn a_wrong_secret_is_named_at_the_sender() {
    let mut l = TcpListenComm::bind("127.0.0.1".parse().unwrap(), 0, opts()).unwrap();
    let mut bad = *l.handle();
    bad.secret = [0x55; 16];
    let mut c = TcpConnector::start(&bad, params(PolicyKind::Dqplb, 2), None, &opts()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut s = loop {
        assert!(l.accept().unwrap().is_none());
        if let Some(s) = c.progress().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline);
    };
    let mut src = vec![1u8; 100];
    let e = loop {
        assert!(l.accept().unwrap().is_none());
        match s.isend(UserBuf::from_slice(&mut src), 1) {
            Ok(None) => assert!(Instant::now() < deadline, "isend never failed"),
            Ok(Some(_)) => panic!("matched a send on a refused connection"),
            Err(e) => break e,
        }
    };
    assert_eq!(e.code, ErrorCode::RemoteError);
    assert!(
        e.msg
            .contains("the receiver refused the hello: secret mismatch"),
        "{}",
        e.msg
    );
    // Sticky: the next call says the same.
    let e2 = s.isend(UserBuf::from_slice(&mut src), 1).unwrap_err();
    assert!(e2.msg.contains("secret mismatch"), "{}", e2.msg);
}

/// Strangers on a live receive comm's re-path listener, each trickling a byte of hello: at most
/// MAX_REPLACEMENTS_WAITING (32) are held, their drops make at most 5 WARN lines,
/// and the comm still carries messages byte-exact.
#[test]
fn slow_hellos_on_the_repath_listener_are_capped_and_aggregated() {
    let (mut s, mut r) = pair();
    let port = r.repath_port().expect("re-path listener");
    let ((), warns) = counting_warns(|| {
        let mut slow = Vec::new();
        for _ in 0..200 {
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.write_all(b"D").unwrap();
            slow.push(c);
            for _ in 0..20 {
                r.progress().unwrap();
            }
            assert!(r.debug_replacements_waiting() <= repath::MAX_REPLACEMENTS_WAITING);
        }
        assert_eq!(r.debug_replacements_waiting(), 32);
        one_message(&mut s, &mut r, 1 << 20);
    });
    assert!(
        warns <= 5,
        "{warns} WARN lines for 168 dropped strangers (5 per 10 s are logged one by one)"
    );
}

/// 2,000 connect/close cycles on the main listener: every socket is reaped (none left waiting),
/// at most 5 WARN lines, and a real connection is accepted afterwards.
#[test]
fn connect_close_cycles_on_the_listener_make_a_bounded_number_of_warns() {
    let mut l = TcpListenComm::bind("127.0.0.1".parse().unwrap(), 0, opts()).unwrap();
    let addr = l.handle().addr;
    let (comms, warns) = counting_warns(|| {
        for i in 0..2000 {
            drop(TcpStream::connect(addr).unwrap());
            if i % 16 == 0 {
                assert!(l.accept().unwrap().is_none());
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while l.waiting() > 0 || Instant::now() < deadline - Duration::from_secs(4) {
            assert!(l.accept().unwrap().is_none());
            assert!(
                Instant::now() < deadline,
                "{} sockets never reaped",
                l.waiting()
            );
        }
        let mut c =
            TcpConnector::start(l.handle(), params(PolicyKind::Dqplb, 1), None, &opts()).unwrap();
        connect(&mut l, &mut c)
    });
    let (mut s, mut r) = comms;
    one_message(&mut s, &mut r, 4096);
    assert!(
        warns <= 5,
        "{warns} WARN lines for 2000 dropped connections (5 per 10 s are logged one by one)"
    );
}

/// Closing a comm while a forked child still holds its sockets: the peer learns at once.
#[test]
fn a_close_under_fork_reaches_the_peer_at_once() {
    let (s, mut r) = pair();
    // SAFETY: the child only sleeps and exits (async-signal-safe calls only).
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork");
    if child == 0 {
        // SAFETY: plain libc calls in the forked child.
        unsafe {
            libc::sleep(30);
            libc::_exit(0);
        }
    }
    let t0 = Instant::now();
    drop(s);
    let mut dst = vec![0u8; 64];
    let e = loop {
        match r.irecv(UserBuf::from_slice(&mut dst), 1) {
            Err(e) => break Some(e),
            Ok(_) if t0.elapsed() > Duration::from_secs(3) => break None,
            Ok(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    let took = t0.elapsed();
    // SAFETY: our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    let e = e.expect("the receiver never learned of the sender's close");
    assert!(
        e.msg.contains("the sender closed the connection"),
        "{}",
        e.msg
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
}
