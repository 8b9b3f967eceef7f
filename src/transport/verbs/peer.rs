//! Peer liveness for verbs comms: the bootstrap TCP socket stays open for the comm's life; EOF or
//! a reset on it means the peer process closed its comm or died, which RDMA alone would only show
//! once a later write timed out (and never to a side that is merely waiting).

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How often an idle comm looks at the socket (one non-blocking read).
const CHECK_EVERY: Duration = Duration::from_millis(5);

/// How long after the peer left a comm still waits for completions already on their way.
pub const GRACE: Duration = Duration::from_millis(100);

pub struct PeerWatch {
    sock: TcpStream,
    last_check: Option<Instant>,
    gone_at: Option<Instant>,
    why: String,
}

impl PeerWatch {
    pub fn new(sock: TcpStream) -> PeerWatch {
        PeerWatch {
            sock,
            last_check: None,
            gone_at: None,
            why: String::new(),
        }
    }

    /// Looks at the socket (rate-limited); true once the peer has been gone for `GRACE`.
    pub fn gone(&mut self) -> bool {
        if self.gone_at.is_none() && self.last_check.is_none_or(|t| t.elapsed() >= CHECK_EVERY) {
            self.last_check = Some(Instant::now());
            let mut b = [0u8; 1];
            let verdict = match self.sock.read(&mut b) {
                Ok(0) => Some("closed the connection".to_string()),
                Ok(_) => Some("sent unexpected bytes on the bootstrap socket".to_string()),
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    None
                }
                Err(e) => Some(format!("is unreachable ({e})")),
            };
            if let Some(why) = verdict {
                self.gone_at = Some(Instant::now());
                self.why = why;
            }
        }
        self.gone_at.is_some_and(|t| t.elapsed() >= GRACE)
    }

    /// Why the peer is considered gone ("closed the connection", ...).
    pub fn why(&self) -> &str {
        &self.why
    }
}
