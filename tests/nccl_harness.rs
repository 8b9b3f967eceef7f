//! End-to-end harness: loads the built libnccl_net_dqplb.so with dlopen and drives it through
//! the v8 vtable as NCCL's proxy does, in two processes per test, for every load-balancing policy.
//!
//! The .so is `target/<profile>/deps/libnccl_net_dqplb.so`, built by `cargo test` as part of the
//! package next to this test executable (`cargo test` does not refresh the copy in
//! `target/<profile>/`); override with DQPLB_PLUGIN_SO. The NCCL logger handed to init() is a real C
//! variadic function: crates/test-support/src/logger.c, compiled with the system `cc` on first use.

mod harness;

use dqplb_test_support::dl::{plugin_path, Plugin};
use dqplb_test_support::nccl::REMOTE_ERROR;
use dqplb_test_support::spawn::child_role;
use harness::spawn::{self, Event, Peer};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(300);

/// Child-process entry point: does nothing unless a test spawned this binary with a role.
#[test]
#[ignore = "entry point for child processes spawned by the other tests"]
fn harness_child_role() {
    child_role("DQPLB_HARNESS_ROLE", harness::roles::run_from_env);
}

/// The cdylib the other tests dlopen is where they look for it, and exports the v8 symbol.
#[test]
fn plugin_library_is_built_and_exports_the_v8_vtable() {
    let p = Plugin::load(&plugin_path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.name(), "DQPLB");
    assert!(p.net.init.is_some() && p.net.test.is_some());
    // NULL, as in NCCL's net_ib and net_socket: recvProxyProgress in NCCL's src/transport/net.cc
    // (v2.20.3 through v2.30.7) calls irecvConsumed after every consumed receive whenever the
    // pointer is non-NULL; getDeviceMr is only for device-offload plugins.
    assert!(p.net.irecv_consumed.is_none() && p.net.get_device_mr.is_none());
    p.lib.close().unwrap_or_else(|e| panic!("{e}"));
}

fn policy_env(policy: &str) -> Vec<(&'static str, String)> {
    vec![("NCCL_DQPLB_POLICY", policy.to_string())]
}

/// Three dlopen/init/transfer/close/dlclose cycles of the full size plan for one policy.
fn transfer_all_sizes(policy: &str) {
    let mut envs = policy_env(policy);
    if policy == "round-robin-message" {
        envs.push(("DQPLB_HARNESS_NULLS", "1".into()));
    }
    let log =
        spawn::run_pair(&envs, LIMIT, |_| {}).unwrap_or_else(|e| panic!("policy {policy}: {e}"));
    for (side, lines) in [("receiver", &log.receiver), ("sender", &log.sender)] {
        let cycles = lines.iter().filter(|l| l.starts_with("CYCLE ")).count();
        assert_eq!(
            cycles, 3,
            "policy {policy}: {side} completed {cycles} of 3 cycles: {lines:?}"
        );
    }
    for l in log.receiver.iter().filter(|l| l.starts_with("HANDLE-INFO")) {
        assert!(
            l.contains("family=2 addr=127."),
            "policy {policy}: handle not on loopback (NCCL_SOCKET_IFNAME=lo): {l}"
        );
    }
    // a WARN per cycle for the deliberate probe of a missing device, at most the close races
    assert_warns(
        &format!("policy {policy}: receiver"),
        &log.receiver,
        &[(DEVICE_PROBE, 3)],
        &words().sender_gone(3 * 3),
    );
    assert_warns(
        &format!("policy {policy}: sender"),
        &log.sender,
        &[(DEVICE_PROBE, 3)],
        &words().receiver_gone(2 * 3),
    );
    // every cycle's receiver line names all messages of the plan as verified
    let want = harness::pattern::plan(0x5eed, 24, true).len();
    assert!(
        log.receiver
            .iter()
            .filter(|l| l.starts_with("CYCLE "))
            .all(|l| l.contains(&format!("received {want} messages"))),
        "policy {policy}: {:?}",
        log.receiver
    );
}

#[test]
fn transfer_policy_dqplb() {
    transfer_all_sizes("dqplb");
}

#[test]
fn transfer_policy_dqplb_led() {
    transfer_all_sizes("dqplb-led");
}

#[test]
fn transfer_policy_static_split() {
    transfer_all_sizes("static-split");
}

/// Also passes NULL device-handle pointers to connect/accept and NULL sizes to every other
/// send-side test(), both allowed by the ABI.
#[test]
fn transfer_policy_round_robin_message() {
    transfer_all_sizes("round-robin-message");
}

#[test]
fn transfer_policy_single_qp() {
    transfer_all_sizes("single-qp");
}

/// One side closes its comm the moment its last operation completes, without waiting for the
/// peer (ncclCommDestroy right after a send or receive): every message must still complete intact
/// on the other side.
fn early_close(side: &str) {
    let mut envs = policy_env("dqplb");
    envs.push(("DQPLB_HARNESS_CYCLES", "1".into()));
    envs.push(("DQPLB_HARNESS_BIG", "0".into()));
    envs.push(("DQPLB_HARNESS_STRICT_CLOSE", side.into()));
    let log = spawn::run_pair(&envs, LIMIT, |_| {})
        .unwrap_or_else(|e| panic!("early close by {side}: {e}"));
    assert_eq!(
        log.receiver
            .iter()
            .filter(|l| l.starts_with("CYCLE 0 received"))
            .count(),
        1,
        "{:?}",
        log.receiver
    );
    assert_eq!(
        log.sender
            .iter()
            .filter(|l| l.starts_with("CYCLE 0 sent"))
            .count(),
        1,
        "{:?}",
        log.sender
    );
    // only the extra operations posted at close may fail, with the close named
    assert_warns(
        &format!("early close by {side}: receiver"),
        &log.receiver,
        &[(DEVICE_PROBE, 1)],
        &words().sender_gone(3),
    );
    assert_warns(
        &format!("early close by {side}: sender"),
        &log.sender,
        &[(DEVICE_PROBE, 1)],
        &words().receiver_gone(2),
    );
}

#[test]
fn sender_closing_right_after_its_last_send_loses_nothing() {
    early_close("send");
}

#[test]
fn receiver_closing_right_after_its_last_receive_fails_no_send() {
    early_close("recv");
}

/// One thread: listen, alternate connect/accept until both finish, send the plan to itself.
#[test]
fn self_connect_in_one_thread() {
    for policy in ["dqplb", "single-qp"] {
        let (tx, rx) = channel::<Event>();
        let mut envs = policy_env(policy);
        envs.push(("DQPLB_HARNESS_CYCLES", "2".into()));
        // single-qp also passes NULL device handles and NULL test sizes (allowed by the ABI)
        if policy == "single-qp" {
            envs.push(("DQPLB_HARNESS_NULLS", "1".into()));
        }
        let mut p = Peer::spawn("self", 0, &envs, tx);
        let status = p.wait(LIMIT).unwrap_or_else(|e| panic!("{policy}: {e}"));
        let lines = all_lines(&rx);
        assert!(
            status.success(),
            "{policy}: self-connect child failed: {lines:?}"
        );
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("CYCLE ")).count(),
            2,
            "{policy}: {lines:?}"
        );
        assert_warns(policy, &lines, &[(DEVICE_PROBE, 2)], &[]);
    }
}

/// Grouped receives (n = 1..=8, zero-byte buffers, permuted send tags) through the C ABI with
/// one size per buffer from test(); n = 0 and 9 are ncclInvalidArgument, a tag absent from the
/// group waits (NULL request, as net_ib); then aws-ofi-nccl's inflight_close: 32 receives posted and the
/// recvComm closed: all 32 isends accepted, their test() ncclRemoteError, a 33rd isend too.
#[test]
fn grouped_receives_and_inflight_close_through_the_abi() {
    let (tx, rx) = channel::<Event>();
    let mut p = Peer::spawn("self-grouped", 0, &policy_env("dqplb"), tx);
    let status = p.wait(LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let lines = all_lines(&rx);
    assert!(status.success(), "grouped child failed: {lines:?}");
    for want in [
        "GROUPED moved 108 buffers",
        "GROUPED n=0 and n=9 rejected with ncclInvalidArgument",
        "GROUPED a tag absent from the group waits (NULL request)",
        "INFLIGHT-CLOSE 32 sends accepted after the receiver closed, test gave ncclRemoteError",
    ] {
        assert!(
            lines.iter().any(|l| l == want),
            "missing {want:?}: {lines:?}"
        );
    }
    // one WARN per refused call, and for inflight_close the comm's failure plus one per failed
    // request: 32 tests and the 33rd isend
    assert_warns(
        "grouped",
        &lines,
        &[
            (DEVICE_PROBE, 1),
            ("irecv with n = 0: accepted 1..=8", 1),
            ("irecv with n = 9: accepted 1..=8", 1),
            ("send comm to 127.0.0.1:", 1),
            (words().test_of_send, 32),
            (words().isend_of_send, 1),
            (words().inflight_gone, 34),
        ],
        &[],
    );
}

/// Four communicators in one process at once, each on its own thread (NCCL runs one proxy thread
/// per communicator): setup and transfers must not interfere.
#[test]
fn four_threads_with_their_own_comms() {
    let (tx, rx) = channel::<Event>();
    let envs = policy_env("dqplb");
    let mut p = Peer::spawn("self-threads", 0, &envs, tx);
    let status = p.wait(LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let lines = all_lines(&rx);
    assert!(status.success(), "multi-thread child failed: {lines:?}");
    let want = harness::pattern::plan(0, 24, false).len();
    for t in 0..4 {
        let line = format!("THREAD {t} moved {want} messages");
        assert!(lines.contains(&line), "missing {line:?}: {lines:?}");
    }
    assert_warns("four threads", &lines, &[(DEVICE_PROBE, 1)], &[]);
}

/// kill -9 one side in the middle of a stream of 64 MiB messages: the survivor's test() must
/// return ncclRemoteError or ncclSystemError within seconds, not hang.
fn peer_kill(victim: usize) {
    let (tx, rx) = channel::<Event>();
    let envs = policy_env("dqplb");
    let mut peers = [
        Peer::spawn("stream-receiver", 0, &envs, tx.clone()),
        Peer::spawn("stream-sender", 1, &envs, tx),
    ];
    let survivor = 1 - victim;
    let deadline = Instant::now() + Duration::from_secs(120);
    let next = |what: &str| -> (usize, String) {
        loop {
            let left = deadline
                .checked_duration_since(Instant::now())
                .unwrap_or_else(|| panic!("timed out waiting for {what}"));
            match rx.recv_timeout(left) {
                Ok((who, Some(l))) => return (who, l),
                // the killed child's stdout closing is expected; the survivor's is not
                Ok((who, None)) if who == victim => continue,
                Ok((who, None)) => panic!("child {who} exited while waiting for {what}"),
                Err(e) => panic!("waiting for {what}: {e}"),
            }
        }
    };
    let (_, first) = next("receiver handle");
    let hex = first
        .strip_prefix("HANDLE ")
        .unwrap_or_else(|| panic!("expected HANDLE, got {first}"));
    peers[1]
        .send_line(&format!("HANDLE {hex}"))
        .expect("relay handle");
    // wait until a full message went through intact (GOT on the receiver, SENT on the sender)
    let progress = if survivor == 0 { "GOT " } else { "SENT " };
    loop {
        let (who, l) = next("first completed message");
        assert!(!l.starts_with("FAIL"), "child {who}: {l}");
        if who == survivor && l.starts_with(progress) {
            break;
        }
    }
    peers[victim].kill();
    let killed = Instant::now();
    let _ = peers[victim].wait(Duration::from_secs(10));
    let report = loop {
        let (who, l) = next("the survivor's error after the kill");
        assert!(!l.starts_with("FAIL") && l != "HANG", "child {who}: {l}");
        if who == survivor && l.starts_with("ERROR ") {
            break l;
        }
    };
    let took = killed.elapsed();
    let rc: i32 = report
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1);
    // docs/records/abi.md: a request that can no longer complete because the peer died is
    // ncclRemoteError, never ncclSystemError
    assert_eq!(
        rc, REMOTE_ERROR,
        "a dead peer must be ncclRemoteError: {report}"
    );
    assert!(
        took < Duration::from_secs(10),
        "took {took:?} to notice the dead peer"
    );
    let status = peers[survivor]
        .wait(Duration::from_secs(30))
        .expect("survivor exit");
    assert!(
        status.success(),
        "survivor failed after the error: {status}"
    );
    // the survivor's remaining lines: CLOSED (close after the error succeeds) and its WARNs
    let mut rest = vec![report];
    while let Ok((who, l)) = rx.recv_timeout(Duration::from_secs(10)) {
        match l {
            Some(l) if who == survivor => rest.push(l),
            Some(_) => {}
            None if who == survivor => break,
            None => {}
        }
    }
    assert!(rest.iter().any(|l| l == "CLOSED 0"), "{rest:?}");
    // exactly two WARNs, both naming the dead peer's stream: the comm's failure and the failed call
    assert_warns(
        "peer kill survivor",
        &rest,
        &[(DEVICE_PROBE, 1), (words().peer, 2), (" failed: ", 1)],
        &[],
    );
}

#[test]
fn killing_the_sender_gives_the_receiver_an_error() {
    peer_kill(1);
}

#[test]
fn killing_the_receiver_gives_the_sender_an_error() {
    peer_kill(0);
}

/// Junk on the listen port, a wrong secret, idle half-open sockets: the real peer still connects
/// and its transfer is verified.
#[test]
fn garbage_connections_do_not_block_the_real_one() {
    let mut envs = policy_env("dqplb");
    envs.push(("DQPLB_HARNESS_CYCLES", "1".into()));
    envs.push(("DQPLB_HARNESS_BIG", "0".into()));
    let mut idle = Vec::new();
    let log = spawn::run_pair(&envs, LIMIT, |h| {
        idle = harness::garbage::attack(h).unwrap_or_else(|e| panic!("attack: {e}"));
        std::thread::sleep(Duration::from_millis(200));
    })
    .unwrap_or_else(|e| panic!("{e}"));
    drop(idle);
    assert_eq!(
        log.receiver
            .iter()
            .filter(|l| l.starts_with("CYCLE 0 received"))
            .count(),
        1,
        "{:?}",
        log.receiver
    );
    // Each hostile connection is dropped with exactly one WARN that says why; the two
    // wrong-secret streams (well-formed hellos, wrong secret only) for the secret.
    let streams = harness::garbage::WRONG_SECRET_STREAMS as usize;
    assert_warns(
        "garbage receiver",
        &log.receiver,
        &[
            (DEVICE_PROBE, 1),
            ("wrong connection secret", streams),
            ("not the DQPLB hello magic \"DQPS\"", 2),
            (words().hello_eof, 1),
        ],
        &words().sender_gone(3),
    );
    // Only the listener's drops: the receive comm's own failure (the sender-gone race above)
    // names its peer with "from 127.0.0.1:" too.
    let dropped_naming_peer = log
        .receiver
        .iter()
        .filter(|l| {
            l.strip_prefix("WARN ")
                .is_some_and(|w| w.contains("dropped") && w.contains("from 127.0.0.1:"))
        })
        .count();
    assert_eq!(
        dropped_naming_peer,
        streams + 3,
        "every dropped connection names its peer: {:?}",
        log.receiver
    );
    assert_warns(
        "garbage sender",
        &log.sender,
        &[(DEVICE_PROBE, 1)],
        &words().receiver_gone(2),
    );
}

/// A receive buffer smaller than the message: as net_ib's isend (ncclIbIsend, 2.20.3-2.30.7:
/// `if (size > slots[r].size) size = slots[r].size;`), the send is cut to the posted 1 KiB; both
/// test()s report 1024 bytes, nothing is written past the receive buffer, nothing is logged.
#[test]
fn receive_smaller_than_send_gets_the_send_cut_to_it() {
    let log = spawn::run_roles(
        ("short-receiver", "long-sender"),
        &policy_env("dqplb"),
        LIMIT,
        |_| {},
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let s = log
        .sender
        .iter()
        .find(|l| l.starts_with("SENDER"))
        .unwrap_or_else(|| panic!("{:?}", log.sender));
    assert_eq!(s, "SENDER done 1024", "{:?}", log.sender);
    let r = log
        .receiver
        .iter()
        .find(|l| l.starts_with("OVERSIZE"))
        .unwrap_or_else(|| panic!("{:?}", log.receiver));
    assert_eq!(r, "OVERSIZE test done 1024", "{:?}", log.receiver);
    assert_warns("long sender", &log.sender, &[(DEVICE_PROBE, 1)], &[]);
    assert_warns("short receiver", &log.receiver, &[(DEVICE_PROBE, 1)], &[]);
}

/// A bad setting makes init() fail with ncclInvalidArgument and a WARN through NCCL's logger,
/// instead of crashing the host process or silently using a default.
#[test]
fn bad_configuration_fails_init_with_a_warning() {
    let (tx, rx) = channel::<Event>();
    let envs = policy_env("fastest-please");
    let mut p = Peer::spawn("bad-init", 0, &envs, tx);
    let status = p.wait(LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let lines = all_lines(&rx);
    assert!(status.success(), "bad-init child failed: {lines:?}");
    let line = lines
        .iter()
        .find(|l| l.starts_with("INIT "))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(line, "INIT rc=4 warns=1", "{lines:?}");
    assert_warns(
        "bad init",
        &lines,
        &[(
            "NCCL_DQPLB_POLICY: key 'engine.policy': 'fastest-please' is not accepted",
            1,
        )],
        &[],
    );
}

/// How many of a child's "WARN <text>" lines (every WARN the plugin logged) contain `needle`.
fn warns(lines: &[String], needle: &str) -> usize {
    lines
        .iter()
        .filter(|l| l.strip_prefix("WARN ").is_some_and(|w| w.contains(needle)))
        .count()
}

/// What the WARNs say, per transport: the harness runs on TCP here and on verbs (rxe0) in the
/// Soft-RoCE VM (scripts/softroce/guest-suite.sh sets NCCL_DQPLB_TRANSPORT=verbs).
struct Words {
    /// The receiver's two extra irecvs before its close (roles::receiver) may fail when the
    /// sender has already closed (its close races them): the comm's failure and one WARN per
    /// failed call.
    sender_gone: &'static [&'static str],
    /// The sender's extra isend before its close (roles::sender), when the receiver closed
    /// first (verbs: or its write hit the receiver's deregistered buffer).
    receiver_gone: &'static [&'static str],
    /// A hostile connection closed before sending anything.
    hello_eof: &'static str,
    /// How the comm's WARNs name the peer.
    peer: &'static str,
    /// inflight_close: test() and isend() of sends to a closed receiver, and what they say.
    test_of_send: &'static str,
    isend_of_send: &'static str,
    inflight_gone: &'static str,
}

impl Words {
    fn sender_gone(&self, n: usize) -> Vec<(&'static str, usize)> {
        self.sender_gone.iter().map(|&w| (w, n)).collect()
    }
    fn receiver_gone(&self, n: usize) -> Vec<(&'static str, usize)> {
        self.receiver_gone.iter().map(|&w| (w, n)).collect()
    }
}

fn words() -> Words {
    if std::env::var("NCCL_DQPLB_TRANSPORT").as_deref() == Ok("verbs") {
        Words {
            sender_gone: &[" closed the connection"],
            receiver_gone: &[
                " closed the connection",
                ": remote access error (status 10,",
            ],
            hello_eof: "bootstrap socket closed by the peer",
            peer: "127.0.0.1:",
            test_of_send: "test: 127.0.0.1:",
            isend_of_send: "isend: 127.0.0.1:",
            inflight_gone: "closed the connection while send 0 was still pending",
        }
    } else {
        Words {
            // "the sender closed the connection; nothing more will arrive" or "the sender
            // closed every stream with 1 receive(s) incomplete", depending on how far it got; a
            // peer that closes with announcements still unread in its socket sends a reset
            // instead of a FIN (Linux), so the same close can also read as a reset.
            sender_gone: &[
                ": the sender closed ",
                "Connection reset by peer (os error 104)",
            ],
            receiver_gone: &[
                "the receiver closed this stream",
                "Connection reset by peer (os error 104)",
            ],
            hello_eof: "that closed before its hello (0 of 64 bytes)",
            peer: " with 127.0.0.1:",
            test_of_send: "test: data stream 1 (QP 0) with 127.0.0.1:",
            isend_of_send: "isend: data stream 1 (QP 0) with 127.0.0.1:",
            inflight_gone: "the receiver closed this stream",
        }
    }
}

/// The WARN of init_and_check's deliberate getProperties() of a device that does not exist.
const DEVICE_PROBE: &str = "getProperties: device 1 does not exist";

/// Checks a child's WARN lines: each needle of `exact` appears exactly that many times, each of
/// `racy` (a warning whose appearance depends on the timing of the peer's close) at most that
/// many, and no WARN matches none of them. Also checks that the last line that reports the
/// logger's own WARN count ("... plugin logged N WARN ...") agrees with the WARN lines.
fn assert_warns(what: &str, lines: &[String], exact: &[(&str, usize)], racy: &[(&str, usize)]) {
    for &(needle, n) in exact {
        assert_eq!(
            warns(lines, needle),
            n,
            "{what}: WARNs containing {needle:?}: {lines:?}"
        );
    }
    for &(needle, n) in racy {
        assert!(
            warns(lines, needle) <= n,
            "{what}: more than {n} WARNs containing {needle:?}: {lines:?}"
        );
    }
    let unexpected: Vec<&String> = lines
        .iter()
        .filter(|l| {
            l.strip_prefix("WARN ").is_some_and(|w| {
                !exact
                    .iter()
                    .chain(racy)
                    .any(|&(needle, _)| w.contains(needle))
            })
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "{what}: unexpected WARNs {unexpected:?}"
    );
    let total = lines.iter().filter(|l| l.starts_with("WARN ")).count();
    if let Some(n) = lines.iter().rev().find_map(|l| {
        let (_, rest) = l.split_once("plugin logged ")?;
        rest.split_whitespace().next()?.parse::<usize>().ok()
    }) {
        assert_eq!(
            n, total,
            "{what}: the logger counted {n} WARNs, {total} WARN lines"
        );
    }
}

/// Every line of a single child, up to the end of its stdout: the reader thread may still be
/// forwarding lines after the child exited, so `try_iter` after `wait` could miss the last ones.
fn all_lines(rx: &Receiver<Event>) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok((_, Some(l))) => lines.push(l),
            Ok((_, None)) => return lines,
            Err(e) => panic!("reading the child's lines: {e}; so far {lines:?}"),
        }
    }
}
