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
    /// Starts connecting data stream `qp` (0-based) to `to` at `now` (the sender's clock, ns).
    pub(crate) fn start(
        qp: usize,
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
            conn_id: setup.conn_id,
            secret: setup.secret,
            params: setup.params,
        };
        Ok(Repath {
            why,
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
        let mut r = Repath::start(1, to, Why::Failure, &setup, 5_000).unwrap();
        // Within the deadline the attempt goes on (connected and greeted, or still pending).
        assert!(r.progress(&name, 5_000 + CONNECT_WITHIN_NS).is_ok());
        let mut late = Repath::start(1, to, Why::Failure, &setup, 5_000).unwrap();
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
