//! A stream accepted and not identified yet, its hello arriving over non-blocking reads: the
//! listener's new streams and the receiver's replacement data streams both wait this way.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::io::{fill, Fill, StreamName};
use super::wire::HELLO_BYTES;
use crate::{NetError, NetResult};

pub(crate) struct PendingHello {
    pub(crate) sock: TcpStream,
    pub(crate) peer: SocketAddr,
    /// The hello so far: `buf[..got]`.
    pub(crate) buf: [u8; HELLO_BYTES],
    pub(crate) got: usize,
    /// When the stream was accepted.
    pub(crate) since: Instant,
}

impl PendingHello {
    pub(crate) fn new(sock: TcpStream, peer: SocketAddr) -> PendingHello {
        PendingHello {
            sock,
            peer,
            buf: [0; HELLO_BYTES],
            got: 0,
            since: Instant::now(),
        }
    }

    /// Reads what has arrived of the hello: Full once all of it is in.
    pub(crate) fn read(&mut self) -> NetResult<Fill> {
        let name = StreamName {
            peer: self.peer,
            index: 0,
        };
        fill(&mut self.sock, &mut self.buf, &mut self.got, &name)
    }
}

/// What became of a waiting stream that had something to read.
pub(crate) enum Heard {
    /// Its whole hello arrived.
    Hello(PendingHello),
    /// It closed or failed before its hello was complete.
    Gone(PendingHello, Option<NetError>),
}

/// Unauthenticated streams waiting for their hello, at most `cap` of them: a stranger can open
/// any number, so each listener call does bounded work (one poll over the waiting streams, reads
/// only of those that have bytes or closed) and the one waiting longest makes room for a new one.
pub(crate) struct Waiting {
    list: Vec<PendingHello>,
    cap: usize,
    pfds: Vec<libc::pollfd>,
}

impl Waiting {
    pub(crate) fn new(cap: usize) -> Waiting {
        Waiting {
            list: Vec::new(),
            cap: cap.max(1),
            pfds: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Adds a stream; when the set is full, the one waiting longest is taken out and returned.
    pub(crate) fn push(&mut self, p: PendingHello) -> Option<PendingHello> {
        let evicted = if self.list.len() >= self.cap {
            self.oldest(|_| true).map(|i| self.list.swap_remove(i))
        } else {
            None
        };
        self.list.push(p);
        evicted
    }

    fn oldest(&self, pick: impl Fn(&PendingHello) -> bool) -> Option<usize> {
        self.list
            .iter()
            .enumerate()
            .filter(|(_, p)| pick(p))
            .min_by_key(|(_, p)| p.since)
            .map(|(i, _)| i)
    }

    /// Takes out the stream waiting longest that has sent nothing for at least `idle`.
    pub(crate) fn evict_idle(&mut self, idle: Duration) -> Option<PendingHello> {
        let i = self.oldest(|p| p.got == 0 && p.since.elapsed() >= idle)?;
        Some(self.list.swap_remove(i))
    }

    /// One zero-timeout poll over every waiting stream, then reads from those with bytes or a
    /// close; complete hellos and gone streams are appended to `out` and leave the set.
    pub(crate) fn read_ready(&mut self, out: &mut Vec<Heard>) {
        if self.list.is_empty() {
            return;
        }
        self.pfds.clear();
        self.pfds.extend(self.list.iter().map(|p| libc::pollfd {
            fd: p.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        // SAFETY: pfds holds one valid pollfd per waiting socket; zero timeout: never blocks.
        let r = unsafe { libc::poll(self.pfds.as_mut_ptr(), self.pfds.len() as libc::nfds_t, 0) };
        if r <= 0 {
            // Nothing ready, or EINTR/ENOMEM: the next call polls again.
            return;
        }
        // From the end: swap_remove(i) moves an element already looked at into i.
        for i in (0..self.list.len()).rev() {
            if self.pfds[i].revents == 0 {
                continue;
            }
            match self.list[i].read() {
                Ok(Fill::Partial) => {}
                Ok(Fill::Full) => out.push(Heard::Hello(self.list.swap_remove(i))),
                Ok(Fill::Eof) => out.push(Heard::Gone(self.list.swap_remove(i), None)),
                Err(e) => out.push(Heard::Gone(self.list.swap_remove(i), Some(e))),
            }
        }
    }

    /// Takes out every stream that has waited `after` or longer, into `out`.
    pub(crate) fn expire(&mut self, after: Duration, out: &mut Vec<PendingHello>) {
        let mut i = 0;
        while i < self.list.len() {
            if self.list[i].since.elapsed() >= after {
                out.push(self.list.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn accepted(l: &std::net::TcpListener) -> (TcpStream, PendingHello) {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        (c, PendingHello::new(s, peer))
    }

    #[test]
    fn a_full_set_drops_the_stream_waiting_longest() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut w = Waiting::new(2);
        let (_c0, p0) = accepted(&l);
        let first = p0.peer;
        assert!(w.push(p0).is_none());
        std::thread::sleep(Duration::from_millis(2));
        let (_c1, p1) = accepted(&l);
        assert!(w.push(p1).is_none());
        let (_c2, p2) = accepted(&l);
        let out = w.push(p2).expect("one dropped");
        assert_eq!(out.peer, first);
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn only_streams_with_bytes_or_a_close_are_read() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut w = Waiting::new(16);
        let (mut full, p) = accepted(&l);
        w.push(p);
        let (quiet, p) = accepted(&l);
        w.push(p);
        let (closed, p) = accepted(&l);
        w.push(p);
        full.write_all(&[7; HELLO_BYTES]).unwrap();
        drop(closed);
        let mut out = Vec::new();
        for _ in 0..1000 {
            w.read_ready(&mut out);
            if out.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(out.len(), 2);
        assert!(out
            .iter()
            .any(|h| matches!(h, Heard::Hello(p) if p.buf == [7; HELLO_BYTES])));
        assert!(out
            .iter()
            .any(|h| matches!(h, Heard::Gone(p, None) if p.got == 0)));
        assert_eq!(w.len(), 1);
        drop(quiet);
    }
}
