//! A stream accepted and not identified yet, its hello arriving over non-blocking reads: the
//! listener's new streams and the receiver's replacement data streams both wait this way.

use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use super::io::{fill, Fill, StreamName};
use super::wire::HELLO_BYTES;
use crate::NetResult;

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
