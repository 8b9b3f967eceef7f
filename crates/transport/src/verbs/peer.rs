//! Peer liveness and the comm's own control frames for verbs comms: the bootstrap TCP socket
//! stays open for the comm's life; EOF or a reset on it means the peer process closed its comm or
//! died, which RDMA alone would only show once a later write timed out (and never to a side that
//! is merely waiting). Since protocol 6 it also carries the path-failure fence (fence.rs): rare,
//! small frames, read without blocking into an inbox and written through an outbox.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::fence::split_frame;
use crate::{NetError, NetResult};

/// How often an idle comm looks at the socket (one non-blocking read).
const CHECK_EVERY: Duration = Duration::from_millis(5);

/// How long after the peer left a comm still waits for completions already on their way.
pub(crate) const GRACE: Duration = Duration::from_millis(100);

/// An idle comm reads the clock for CHECK_EVERY only on every this many calls: progress passes
/// come every few hundred nanoseconds, and a clock read is not free everywhere (about 1.1 us in
/// the Soft-RoCE VM, whose clock is the emulated HPET).
const CALLS_PER_CLOCK_READ: u32 = 16;

pub(crate) struct PeerWatch {
    sock: TcpStream,
    owner: crate::tcp::Owner,
    last_check: Option<Instant>,
    /// Calls since the clock was last read for CHECK_EVERY.
    calls: u32,
    gone_at: Option<Instant>,
    why: String,
    /// Bytes read and not yet split into frames.
    inbox: Vec<u8>,
    /// Frame bytes the socket has not taken yet.
    outbox: Vec<u8>,
}

impl Drop for PeerWatch {
    /// The bootstrap socket is shut down before it closes: the peer learns of the close at once
    /// even if a forked child still holds the descriptor.
    fn drop(&mut self) {
        self.owner.shutdown(&self.sock);
    }
}

impl PeerWatch {
    pub(crate) fn new(sock: TcpStream) -> PeerWatch {
        PeerWatch {
            sock,
            owner: crate::tcp::Owner::this_process(),
            last_check: None,
            calls: 0,
            gone_at: None,
            why: String::new(),
            inbox: Vec::new(),
            outbox: Vec::new(),
        }
    }

    /// Reads what the socket holds into the inbox and writes what the outbox holds; EOF or an
    /// error marks the peer gone.
    fn pump(&mut self) {
        self.last_check = Some(Instant::now());
        if self.gone_at.is_some() {
            return;
        }
        let mut b = [0u8; 512];
        let verdict = loop {
            match self.sock.read(&mut b) {
                Ok(0) => break Some("closed the connection".to_string()),
                Ok(n) => self.inbox.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => break Some(format!("is unreachable ({e})")),
            }
        };
        let verdict = verdict.or_else(|| {
            while !self.outbox.is_empty() {
                match self.sock.write(&self.outbox) {
                    Ok(0) => return Some("closed the connection".to_string()),
                    Ok(n) => {
                        self.outbox.drain(..n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Some(format!("is unreachable ({e})")),
                }
            }
            None
        });
        if let Some(why) = verdict {
            self.gone_at = Some(Instant::now());
            self.why = why;
        }
    }

    /// True when the socket is due for a look: never looked at, or CHECK_EVERY since the last
    /// look (the clock is read on every CALLS_PER_CLOCK_READ-th call only).
    fn check_due(&mut self) -> bool {
        let Some(t) = self.last_check else {
            return true;
        };
        self.calls += 1;
        if self.calls < CALLS_PER_CLOCK_READ {
            return false;
        }
        self.calls = 0;
        t.elapsed() >= CHECK_EVERY
    }

    /// Looks at the socket (rate-limited); true once the peer has been gone for `GRACE`.
    pub(crate) fn gone(&mut self) -> bool {
        if self.gone_at.is_none() && self.check_due() {
            self.pump();
        }
        self.gone_at.is_some_and(|t| t.elapsed() >= GRACE)
    }

    /// Why the peer is considered gone ("closed the connection", ...).
    pub(crate) fn why(&self) -> &str {
        &self.why
    }

    /// Queues a frame and writes what the socket takes now.
    pub(crate) fn send(&mut self, frame: &[u8]) {
        self.outbox.extend_from_slice(frame);
        self.pump();
    }

    /// The next complete frame from the peer: (kind, body). `now` reads the socket first;
    /// otherwise it is read at most every CHECK_EVERY.
    pub(crate) fn next_frame(&mut self, now: bool, who: &str) -> NetResult<Option<(u32, Vec<u8>)>> {
        if now || self.check_due() {
            self.pump();
        }
        match split_frame(&self.inbox, who)? {
            Some((kind, body, used)) => {
                self.inbox.drain(..used);
                Ok(Some((kind, body)))
            }
            None => Ok(None),
        }
    }
}

/// An error for a frame that arrived where none was expected.
pub fn unexpected(who: &str, kind: u32) -> NetError {
    NetError::remote(format!(
        "{who}: unexpected bootstrap frame {:?}",
        String::from_utf8_lossy(&kind.to_le_bytes())
    ))
}
