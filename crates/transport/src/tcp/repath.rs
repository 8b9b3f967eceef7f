//! Replacing one data stream of a TCP send comm without blocking: a new connection from a new
//! source port (a new ECMP hash) to the receiver's re-path listener, greeted with the stream's hello.

use std::io::IoSlice;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::Socket;

use super::connect::{connect_done, start_stream};
use super::handle::PROTOCOL_VERSION;
use super::hello::{Heard, PendingHello, Waiting};
use super::io::{write_some, StreamName};
use super::warns::WarnBudget;
use super::wire::{ConnParams, Hello, HELLO_BYTES};
use super::TcpOptions;
use crate::{NetError, NetResult};

/// Why a stream is being replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// The engine drained it as a straggler.
    Straggler,
    /// It failed.
    Failure,
}

impl Why {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Why::Straggler => "straggler",
            Why::Failure => "failure",
        }
    }
}

enum Stage {
    Connecting(Socket),
    Hello(TcpStream, usize),
}

/// A replacement not connected and greeted within this long is abandoned: its SYN took a dead
/// path (the kernel would retry it on the same port, so on the same ECMP hash). A failed stream
/// then tries again from another port, within its budget of re-creations.
pub(crate) const CONNECT_WITHIN_NS: u64 = 1_000_000_000;

/// One replacement in progress.
pub(crate) struct Repath {
    pub why: Why,
    /// The stream's socket number this replacement becomes (its hello says so).
    pub gen: u16,
    pub to: SocketAddr,
    stage: Option<Stage>,
    hello: [u8; HELLO_BYTES],
    /// The sender's clock (ns) past which the attempt is abandoned.
    deadline: u64,
}

/// What identifies the connection to the receiver, and how its streams are set up.
#[derive(Clone)]
pub(crate) struct StreamSetup {
    pub conn_id: u64,
    pub secret: [u8; 16],
    pub params: ConnParams,
    pub opts: TcpOptions,
    pub traffic_class: Option<u8>,
}

impl Repath {
    /// Starts connecting data stream `qp` (0-based) to `to` at `now` (the sender's clock, ns),
    /// as that stream's socket number `gen` (see `Hello::gen`).
    pub(crate) fn start(
        qp: usize,
        gen: u16,
        to: SocketAddr,
        why: Why,
        setup: &StreamSetup,
        now: u64,
    ) -> NetResult<Repath> {
        // Port 0: the kernel picks a fresh ephemeral source port, so the 5-tuple (and its ECMP
        // hash) changes even with a fixed source-port base for the original streams.
        let mut opts = setup.opts.clone();
        opts.src_port_base = None;
        let sock = start_stream(to, None, &opts)?;
        if let Some(tc) = setup.traffic_class {
            super::set_traffic_class(sock.as_raw_fd(), to.is_ipv6(), tc)?;
        }
        let hello = Hello {
            version: PROTOCOL_VERSION,
            stream: qp as u16 + 1,
            gen,
            conn_id: setup.conn_id,
            secret: setup.secret,
            params: setup.params,
        };
        Ok(Repath {
            why,
            gen,
            to,
            stage: Some(Stage::Connecting(sock)),
            hello: hello.encode(),
            deadline: now.saturating_add(CONNECT_WITHIN_NS),
        })
    }

    /// Advances the replacement; Some(stream) once connected and greeted, Err past the deadline.
    pub(crate) fn progress(&mut self, name: &StreamName, now: u64) -> NetResult<Option<TcpStream>> {
        if now > self.deadline {
            return Err(NetError::remote(format!(
                "{name}: replacement stream to {} not connected and greeted within {} ms",
                self.to,
                CONNECT_WITHIN_NS / 1_000_000
            )));
        }
        if let Some(Stage::Connecting(sock)) = &self.stage {
            if !connect_done(sock, self.to)? {
                return Ok(None);
            }
            let Some(Stage::Connecting(sock)) = self.stage.take() else {
                return Ok(None);
            };
            self.stage = Some(Stage::Hello(sock.into(), 0));
        }
        if let Some(Stage::Hello(sock, sent)) = &mut self.stage {
            while *sent < HELLO_BYTES {
                let n = write_some(sock, &[IoSlice::new(&self.hello[*sent..])], name)?;
                if n == 0 {
                    return Ok(None);
                }
                *sent += n;
            }
            if let Some(Stage::Hello(sock, _)) = self.stage.take() {
                return Ok(Some(sock));
            }
        }
        Ok(None)
    }
}

/// A replacement that has not sent its hello within this long is dropped.
pub(crate) const REPLACEMENT_HELLO_WITHIN: Duration = Duration::from_secs(10);
/// Replacement streams waiting for their hello at once; beyond that the one waiting longest is
/// dropped. A sender replaces at most a few streams at a time and greets each at once.
pub(crate) const MAX_REPLACEMENTS_WAITING: usize = 32;
/// New streams taken from the re-path listener per progress pass.
const ACCEPTS_PER_PASS: usize = 4;
/// The waiting streams are polled on every this many progress passes (and on a pass that
/// accepted one): the re-path listener is open to anyone for the receive comm's whole life,
/// and its strangers must not slow the transfer the comm is carrying.
const READ_EVERY_PASSES: u32 = 16;

/// The receive comm's side of replacements: streams accepted on its re-path listener, their
/// hello arriving; bounded work per progress pass and aggregated WARNs for what is dropped.
pub(crate) struct Inbox {
    waiting: Waiting,
    warns: WarnBudget,
    heard: Vec<Heard>,
    hellos: Vec<PendingHello>,
    stale: Vec<PendingHello>,
}

impl Inbox {
    pub(crate) fn new() -> Inbox {
        Inbox {
            waiting: Waiting::new(MAX_REPLACEMENTS_WAITING),
            warns: WarnBudget::new(),
            heard: Vec::new(),
            hellos: Vec::new(),
            stale: Vec::new(),
        }
    }

    /// One progress pass (`pass` counts them): accepts a few new streams and, now and then,
    /// reads the waiting ones that have bytes. Complete hellos come out of `next_hello`.
    pub(crate) fn poll(
        &mut self,
        l: &TcpListener,
        opts: &TcpOptions,
        pass: u32,
        who: &dyn std::fmt::Display,
    ) {
        let mut accepted = false;
        for _ in 0..ACCEPTS_PER_PASS {
            match l.accept() {
                Ok((sock, peer)) => {
                    if sock.set_nonblocking(true).is_err() || opts.apply(&sock).is_err() {
                        continue;
                    }
                    accepted = true;
                    if let Some(old) = self.waiting.push(PendingHello::new(sock, peer)) {
                        self.warns.warn(who, || format!("dropped a replacement data stream from {} that sent {} of {HELLO_BYTES} hello bytes in {} ms: {MAX_REPLACEMENTS_WAITING} were waiting", old.peer, old.got, old.since.elapsed().as_millis()));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        if self.waiting.is_empty() || !(accepted || pass.is_multiple_of(READ_EVERY_PASSES)) {
            return;
        }
        self.waiting.read_ready(&mut self.heard);
        for h in self.heard.drain(..) {
            match h {
                Heard::Hello(p) => self.hellos.push(p),
                Heard::Gone(r, _) => self.warns.warn(who, || format!("dropped a replacement data stream from {} that sent {} of {HELLO_BYTES} hello bytes", r.peer, r.got)),
            }
        }
        self.waiting
            .expire(REPLACEMENT_HELLO_WITHIN, &mut self.stale);
        for r in self.stale.drain(..) {
            self.warns.warn(who, || format!("dropped a replacement data stream from {} that sent {} of {HELLO_BYTES} hello bytes in {} s", r.peer, r.got, REPLACEMENT_HELLO_WITHIN.as_secs()));
        }
        self.warns.roll(who);
    }

    /// A replacement whose whole hello arrived.
    pub(crate) fn next_hello(&mut self) -> Option<PendingHello> {
        self.hellos.pop()
    }

    /// Logs (or counts, past the interval's budget) a dropped replacement.
    pub(crate) fn warn(&mut self, who: &dyn std::fmt::Display, line: impl FnOnce() -> String) {
        self.warns.warn(who, line);
    }

    /// No stream is waiting for its hello and no complete hello is queued: a pass needs to look
    /// at the listener only when poll(2) finds it readable.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.hellos.is_empty()
    }

    /// Streams waiting for their hello (tests).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dqplb_engine::PolicyKind;

    #[test]
    fn an_attempt_past_its_deadline_is_abandoned() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let setup = StreamSetup {
            conn_id: 7,
            secret: [1; 16],
            params: ConnParams {
                qps: 2,
                outstanding: 4,
                segment_bytes: 65536,
                max_messages: 32,
                policy: PolicyKind::Dqplb,
                fabric_id: 0,
            },
            opts: TcpOptions::default(),
            traffic_class: None,
        };
        let name = StreamName { peer: to, index: 2 };
        let mut r = Repath::start(1, 1, to, Why::Failure, &setup, 5_000).unwrap();
        // Within the deadline the attempt goes on (connected and greeted, or still pending).
        assert!(r.progress(&name, 5_000 + CONNECT_WITHIN_NS).is_ok());
        let mut late = Repath::start(1, 1, to, Why::Failure, &setup, 5_000).unwrap();
        let e = late
            .progress(&name, 5_001 + CONNECT_WITHIN_NS)
            .expect_err("past the deadline");
        assert!(
            e.msg.contains("not connected and greeted within 1000 ms"),
            "{}",
            e.msg
        );
    }
}
