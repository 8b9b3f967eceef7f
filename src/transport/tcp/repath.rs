//! Replacing one data stream of a TCP send comm without blocking: a new connection from a new
//! source port (a new ECMP hash) to the receiver's re-path listener, greeted with the stream's hello.

use std::io::IoSlice;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;

use socket2::Socket;

use super::connect::{connect_done, start_stream};
use super::handle::PROTOCOL_VERSION;
use super::io::{write_some, StreamName};
use super::wire::{ConnParams, Hello, HELLO_BYTES};
use super::TcpOptions;
use crate::transport::NetResult;

/// Why a stream is being replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The engine drained it as a straggler.
    Straggler,
    /// It failed.
    Failure,
}

impl Why {
    pub fn as_str(self) -> &'static str {
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

/// One replacement in progress.
pub struct Repath {
    pub why: Why,
    pub to: SocketAddr,
    stage: Option<Stage>,
    hello: [u8; HELLO_BYTES],
}

/// What identifies the connection to the receiver, and how its streams are set up.
#[derive(Clone)]
pub struct StreamSetup {
    pub conn_id: u64,
    pub secret: [u8; 16],
    pub params: ConnParams,
    pub opts: TcpOptions,
    pub traffic_class: Option<u8>,
}

impl Repath {
    /// Starts connecting data stream `qp` (0-based) to `to`.
    pub fn start(qp: usize, to: SocketAddr, why: Why, setup: &StreamSetup) -> NetResult<Repath> {
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
            conn_id: setup.conn_id,
            secret: setup.secret,
            params: setup.params,
        };
        Ok(Repath {
            why,
            to,
            stage: Some(Stage::Connecting(sock)),
            hello: hello.encode(),
        })
    }

    /// Advances the replacement; Some(stream) once connected and greeted.
    pub fn progress(&mut self, name: &StreamName) -> NetResult<Option<TcpStream>> {
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
