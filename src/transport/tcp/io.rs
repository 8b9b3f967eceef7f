//! Non-blocking socket primitives for the TCP transport: reads and writes that retry EINTR, treat
//! EAGAIN as "no progress", and turn EOF/resets into errors naming the stream and peer.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::transport::{NetError, NetResult};

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

/// Reads what is available into `buf`; Ok(0) means "would block". EOF is an error.
pub fn read_some(sock: &mut TcpStream, buf: &mut [u8], name: &StreamName) -> NetResult<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    loop {
        match sock.read(buf) {
            Ok(0) => {
                return Err(NetError::remote(format!(
                    "{name}: peer closed the connection"
                )))
            }
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(NetError::io(&format!("{name}: read"), &e)),
        }
    }
}

/// Writes what the socket takes; Ok(0) means "would block".
pub fn write_some(
    sock: &mut TcpStream,
    bufs: &[IoSlice<'_>],
    name: &StreamName,
) -> NetResult<usize> {
    loop {
        match sock.write_vectored(bufs) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(NetError::io(&format!("{name}: write"), &e)),
        }
    }
}

/// Fills `buf[*got..]` from the socket; true once full.
pub fn fill(
    sock: &mut TcpStream,
    buf: &mut [u8],
    got: &mut usize,
    name: &StreamName,
) -> NetResult<bool> {
    while *got < buf.len() {
        let n = read_some(sock, &mut buf[*got..], name)?;
        if n == 0 {
            return Ok(false);
        }
        *got += n;
    }
    Ok(true)
}

/// Writes `out[*pos..]`; resets both to empty once everything went out. True when drained.
pub fn drain(
    sock: &mut TcpStream,
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
