//! Non-blocking socket primitives for the TCP transport: at most one zero-timeout poll per step,
//! reads that report data / would-block / EOF, writes that never raise SIGPIPE, EINTR retried.

use std::io::{ErrorKind, IoSlice, IoSliceMut, Read as _};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;

use socket2::SockRef;

use crate::{NetError, NetResult};

/// Human name of a stream for error messages: "data stream 2 (QP 1) with 127.0.0.1:4000".
#[derive(Debug, Clone)]
pub struct StreamName {
    pub peer: SocketAddr,
    pub index: u16,
}

impl std::fmt::Display for StreamName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.index == 0 {
            write!(f, "control stream with {}", self.peer)
        } else {
            write!(
                f,
                "data stream {} (QP {}) with {}",
                self.index,
                self.index - 1,
                self.peer
            )
        }
    }
}

/// A connection's data streams in QP order, each made into a `T` with its name (stream i + 1).
pub(crate) fn data_streams<T>(
    peer: SocketAddr,
    socks: Vec<TcpStream>,
    mut make: impl FnMut(TcpStream, StreamName) -> T,
) -> Vec<T> {
    socks
        .into_iter()
        .enumerate()
        .map(|(i, sock)| {
            let index = i as u16 + 1;
            make(sock, StreamName { peer, index })
        })
        .collect()
}

/// What one read brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    Data(usize),
    WouldBlock,
    /// The peer closed its side (orderly); every byte it sent before was read.
    Eof,
}

/// Reads what is available into `buf` (which must not be empty).
pub(crate) fn read_some(
    sock: &mut TcpStream,
    buf: &mut [u8],
    name: &StreamName,
) -> NetResult<Read> {
    loop {
        match sock.read(buf) {
            Ok(0) => return Ok(Read::Eof),
            Ok(n) => return Ok(Read::Data(n)),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Read::WouldBlock),
            Err(e) => return Err(NetError::io(&format!("{name}: read"), &e)),
        }
    }
}

/// Reads what is available into `bufs` in order (one readv(2); the first must not be empty).
pub(crate) fn read_some_vectored(
    sock: &mut TcpStream,
    bufs: &mut [IoSliceMut<'_>],
    name: &StreamName,
) -> NetResult<Read> {
    loop {
        match sock.read_vectored(bufs) {
            Ok(0) => return Ok(Read::Eof),
            Ok(n) => return Ok(Read::Data(n)),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Read::WouldBlock),
            Err(e) => return Err(NetError::io(&format!("{name}: read"), &e)),
        }
    }
}

/// How far `fill` got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    Full,
    Partial,
    Eof,
}

/// Fills `buf[*got..]` from the socket.
pub fn fill(
    sock: &mut TcpStream,
    buf: &mut [u8],
    got: &mut usize,
    name: &StreamName,
) -> NetResult<Fill> {
    while *got < buf.len() {
        match read_some(sock, &mut buf[*got..], name)? {
            Read::Data(n) => *got += n,
            Read::WouldBlock => return Ok(Fill::Partial),
            Read::Eof => return Ok(Fill::Eof),
        }
    }
    Ok(Fill::Full)
}

/// Writes what the socket takes (MSG_NOSIGNAL: a dead peer is an error, never a SIGPIPE that
/// would kill the NCCL process); Ok(0) means "would block".
pub(crate) fn write_some(
    sock: &TcpStream,
    bufs: &[IoSlice<'_>],
    name: &StreamName,
) -> NetResult<usize> {
    let s = SockRef::from(sock);
    loop {
        match s.send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(NetError::io(&format!("{name}: write"), &e)),
        }
    }
}

/// Writes `out[*pos..]`; resets both to empty once everything went out. True when drained.
pub fn drain(
    sock: &TcpStream,
    out: &mut Vec<u8>,
    pos: &mut usize,
    name: &StreamName,
) -> NetResult<bool> {
    while *pos < out.len() {
        let n = write_some(sock, &[IoSlice::new(&out[*pos..])], name)?;
        if n == 0 {
            return Ok(false);
        }
        *pos += n;
    }
    out.clear();
    *pos = 0;
    Ok(true)
}

/// Readiness of a fixed set of sockets from one zero-timeout poll(2): a progress step reads only
/// the streams that have something (data, EOF or an error), instead of one empty read per stream.
pub(crate) struct Readiness {
    fds: Vec<libc::pollfd>,
    /// What the next `poll` does.
    next: NextPoll,
}

/// What `Readiness::poll` does on its next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NextPoll {
    /// poll(2).
    Poll,
    /// No syscall; nothing readable (`skip_next`).
    Skip,
    /// No syscall; the last poll's answers stand (`reuse_next`).
    Reuse,
}

impl Readiness {
    pub(crate) fn new<'a>(socks: impl IntoIterator<Item = &'a TcpStream>) -> Readiness {
        let fds = socks
            .into_iter()
            .map(|s| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        Readiness {
            fds,
            next: NextPoll::Poll,
        }
    }

    /// Also watches `fd` (a listener: readable when a connection waits); returns its index.
    pub(crate) fn watch(&mut self, fd: std::os::fd::RawFd) -> usize {
        self.fds.push(libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        self.fds.len() - 1
    }

    /// The next `poll` reports no socket readable and makes no syscall: for a pass that only
    /// writes what the caller just queued, right after a pass that polled and read everything.
    pub(crate) fn skip_next(&mut self) {
        self.next = NextPoll::Skip;
    }

    /// The next `poll` makes no syscall and keeps the last poll's answers: for a pass right
    /// after a poll whose readable sockets were not read yet (those still have their bytes;
    /// one that became readable since is seen at the following poll).
    pub(crate) fn reuse_next(&mut self) {
        self.next = NextPoll::Reuse;
    }

    /// Socket `i` was read until it had nothing more: a reused answer no longer counts it.
    pub(crate) fn consumed(&mut self, i: usize) {
        if let Some(p) = self.fds.get_mut(i) {
            p.revents = 0;
        }
    }

    /// Refreshes readiness without blocking (after `skip_next` or `reuse_next`: no syscall).
    pub(crate) fn poll(&mut self) -> NetResult<()> {
        match std::mem::replace(&mut self.next, NextPoll::Poll) {
            NextPoll::Poll => {}
            NextPoll::Reuse => return Ok(()),
            NextPoll::Skip => {
                for p in &mut self.fds {
                    p.revents = 0;
                }
                return Ok(());
            }
        }
        loop {
            // SAFETY: `fds` is a valid array of pollfd for its length; timeout 0 never blocks.
            let r = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, 0) };
            if r >= 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                return Err(NetError::io("poll on the connection's streams", &e));
            }
        }
    }

    /// Watches `sock` in place of socket `i` (a replaced stream).
    pub(crate) fn replace(&mut self, i: usize, sock: &TcpStream) {
        if let Some(p) = self.fds.get_mut(i) {
            p.fd = sock.as_raw_fd();
            p.revents = 0;
        }
    }

    /// Stops watching socket `i` (a failed stream: poll skips negative descriptors).
    pub(crate) fn ignore(&mut self, i: usize) {
        if let Some(p) = self.fds.get_mut(i) {
            p.fd = -1;
            p.revents = 0;
        }
    }

    /// Whether socket `i` (in construction order) has data, EOF or an error to read.
    pub(crate) fn readable(&self, i: usize) -> bool {
        self.fds
            .get(i)
            .is_some_and(|p| p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
    }
}
