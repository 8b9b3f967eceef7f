//! Child processes playing a role: spawned by re-executing this test binary on its ignored
//! `harness_child_role` test, talking "@@" lines on stdin/stdout; handles relayed by the parent.

use super::listen_handle;
use dqplb_test_support::nccl::HANDLE_BYTES;
use dqplb_test_support::spawn::{protocol_line, role_command};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// A line from child `who`; `None` is end of its stdout.
pub(crate) type Event = (usize, Option<String>);

pub(crate) struct Peer {
    pub child: Child,
    stdin: Option<ChildStdin>,
}

impl Peer {
    /// Spawns role `role` with extra environment `envs`; its "@@" lines go to `events` as `who`.
    pub(crate) fn spawn(
        role: &str,
        who: usize,
        envs: &[(&str, String)],
        events: Sender<Event>,
    ) -> Peer {
        let mut cmd = role_command("harness_child_role", "DQPLB_HARNESS_ROLE", role);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn harness child");
        let out = child.stdout.take().expect("child stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(l) = protocol_line(&line) {
                    eprintln!("[child {who}] {l}");
                    let _ = events.send((who, Some(l.to_string())));
                }
            }
            let _ = events.send((who, None));
        });
        let stdin = child.stdin.take();
        Peer { child, stdin }
    }

    pub(crate) fn send_line(&mut self, line: &str) -> Result<(), String> {
        let s = self.stdin.as_mut().ok_or("child stdin closed")?;
        writeln!(s, "{line}")
            .and_then(|_| s.flush())
            .map_err(|e| format!("writing to child: {e}"))
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
    }

    pub(crate) fn wait(&mut self, limit: Duration) -> Result<ExitStatus, String> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Ok(s);
            }
            if start.elapsed() > limit {
                self.kill();
                return Err(format!("child did not exit within {limit:?}; killed"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Outcome of a receiver/sender pair: every "@@" line of each, in order.
pub(crate) struct PairLog {
    pub receiver: Vec<String>,
    pub sender: Vec<String>,
}

/// Runs roles `receiver` and `sender` to completion, relaying each HANDLE line from the
/// receiver to the sender after calling `on_handle` with it. Fails on a child failure or timeout.
pub(crate) fn run_pair(
    envs: &[(&str, String)],
    limit: Duration,
    on_handle: impl FnMut(&[u8; HANDLE_BYTES]),
) -> Result<PairLog, String> {
    run_roles(("receiver", "sender"), envs, limit, on_handle)
}

/// `run_pair` with other roles: `roles.0` listens and prints HANDLE, `roles.1` connects.
pub(crate) fn run_roles(
    roles: (&str, &str),
    envs: &[(&str, String)],
    limit: Duration,
    mut on_handle: impl FnMut(&[u8; HANDLE_BYTES]),
) -> Result<PairLog, String> {
    let (tx, rx): (Sender<Event>, Receiver<Event>) = channel();
    let mut recv = Peer::spawn(roles.0, 0, envs, tx.clone());
    let mut send = Peer::spawn(roles.1, 1, envs, tx);
    let mut log = PairLog {
        receiver: vec![],
        sender: vec![],
    };
    let mut open = 2;
    let start = Instant::now();
    while open > 0 {
        let left = limit
            .checked_sub(start.elapsed())
            .ok_or_else(|| format!("pair timed out after {limit:?}"))?;
        match rx.recv_timeout(left) {
            Ok((who, Some(line))) => {
                if line.starts_with("FAIL") {
                    let side = if who == 0 { "receiver" } else { "sender" };
                    return Err(format!(
                        "{side}: {line}; receiver log {:?}, sender log {:?}",
                        log.receiver, log.sender
                    ));
                }
                if who == 0 {
                    if let Some(hex) = line.strip_prefix("HANDLE ") {
                        on_handle(&listen_handle::from_hex(hex)?);
                        send.send_line(&line)?;
                    } else if line.starts_with("VERIFIED ") {
                        // the sender may already be gone (strict-close mode): ignore a broken pipe
                        let _ = send.send_line(&line);
                    }
                    log.receiver.push(line);
                } else {
                    if line.starts_with("SENT ") {
                        let _ = recv.send_line(&line);
                    }
                    log.sender.push(line);
                }
            }
            Ok((_, None)) => open -= 1,
            Err(RecvTimeoutError::Timeout) => {
                return Err(format!("pair timed out after {limit:?}"))
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let left = limit
        .saturating_sub(start.elapsed())
        .max(Duration::from_secs(5));
    let rs = recv.wait(left)?;
    let ss = send.wait(left)?;
    let fails: Vec<&String> = log
        .receiver
        .iter()
        .chain(&log.sender)
        .filter(|l| l.starts_with("FAIL"))
        .collect();
    if !rs.success() || !ss.success() || !fails.is_empty() {
        return Err(format!(
            "receiver exit {rs}, sender exit {ss}, failures: {fails:?}"
        ));
    }
    Ok(log)
}
