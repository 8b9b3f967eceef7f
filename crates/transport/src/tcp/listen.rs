//! The listening side: a non-blocking listener that collects a connection's control and data
//! streams by their hello (checking magic, version and secret) and hands out receive comms.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long a half-open connection may wait for its hello or its other streams.
const STALE_AFTER: Duration = Duration::from_secs(60);

use super::handle::{random_secret, ListenHandle, PROTOCOL_VERSION};
use super::hello::PendingHello;
use super::io::Fill;
use super::recv::TcpRecvComm;
use super::wire::{ConnParams, Hello, HELLO_BYTES};
use super::TcpOptions;
use crate::{NetError, NetResult};

/// Streams of one connection gathered so far.
struct Group {
    conn_id: u64,
    params: ConnParams,
    streams: Vec<Option<TcpStream>>,
    since: Instant,
}

pub struct TcpListenComm {
    listener: TcpListener,
    handle: ListenHandle,
    opts: TcpOptions,
    /// IP_TOS / IPV6_TCLASS for accepted streams (NCCL v11+ per-communicator trafficClass).
    traffic_class: Option<u8>,
    /// Sockets that connected but have not finished their hello yet.
    pending: Vec<PendingHello>,
    groups: Vec<Group>,
}

impl TcpListenComm {
    /// Binds an ephemeral port on `ip` and returns at once.
    pub fn bind(ip: IpAddr, fabric_id: u32, opts: TcpOptions) -> NetResult<TcpListenComm> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .map_err(|e| NetError::io(&format!("listen on {ip}"), &e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| NetError::io(&format!("listen on {ip}: set non-blocking"), &e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| NetError::io("listener address", &e))?;
        let handle = ListenHandle {
            addr,
            fabric_id,
            secret: random_secret()?,
        };
        Ok(TcpListenComm {
            listener,
            handle,
            opts,
            traffic_class: None,
            pending: Vec::new(),
            groups: Vec::new(),
        })
    }

    /// Sets the traffic class of streams accepted from now on (None: kernel default).
    pub fn set_traffic_class(&mut self, tc: Option<u8>) {
        self.traffic_class = tc;
    }

    pub fn handle(&self) -> &ListenHandle {
        &self.handle
    }

    /// A receive comm once every stream of some connection arrived; None until then.
    pub fn accept(&mut self) -> NetResult<Option<TcpRecvComm>> {
        self.accept_new()?;
        self.read_hellos();
        self.expire();
        let ready = self
            .groups
            .iter()
            .position(|g| g.streams.iter().all(Option::is_some));
        let Some(i) = ready else { return Ok(None) };
        let g = self.groups.swap_remove(i);
        let mut streams = g.streams.into_iter().flatten();
        let Some(ctrl) = streams.next() else {
            return Err(NetError::internal(
                "accepted connection without a control stream",
            ));
        };
        let auth = super::recv::Auth {
            conn_id: g.conn_id,
            secret: self.handle.secret,
        };
        TcpRecvComm::new(ctrl, streams.collect(), g.params, auth, self.opts.clone()).map(Some)
    }

    fn accept_new(&mut self) -> NetResult<()> {
        loop {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    let tc = self.traffic_class.map(|tc| {
                        use std::os::fd::AsRawFd;
                        super::set_traffic_class(sock.as_raw_fd(), peer.is_ipv6(), tc)
                    });
                    if let Err(e) = self.opts.apply(&sock).and(tc.unwrap_or(Ok(()))) {
                        tracing::warn!(target: "dqplb::net", "dropping connection from {peer}: {}", e.msg);
                        continue;
                    }
                    self.pending.push(PendingHello::new(sock, peer));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // A connection that died in the backlog is not our listener's failure.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(NetError::io(&format!("accept on {}", self.handle.addr), &e)),
            }
        }
    }

    /// Advances every pending hello; bad or dead ones are dropped and logged, never fatal.
    /// Drops sockets that never finished their hello and connections whose streams never all
    /// arrived within STALE_AFTER, so a port scanner or a crashed peer cannot pin resources.
    fn expire(&mut self) {
        let addr = self.handle.addr;
        self.pending.retain(|p| {
            let keep = p.since.elapsed() < STALE_AFTER;
            if !keep {
                tracing::warn!(target: "dqplb::net", "listener {addr}: dropped a connection from {} that sent {} of {HELLO_BYTES} hello bytes in {} s", p.peer, p.got, STALE_AFTER.as_secs());
            }
            keep
        });
        self.groups.retain(|g| {
            let keep = g.since.elapsed() < STALE_AFTER;
            if !keep {
                let have = g.streams.iter().filter(|s| s.is_some()).count();
                tracing::warn!(target: "dqplb::net", "listener {addr}: dropped connection {:#x}: {have} of {} streams arrived in {} s", g.conn_id, g.streams.len(), STALE_AFTER.as_secs());
            }
            keep
        });
    }

    fn read_hellos(&mut self) {
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            match p.read() {
                Ok(Fill::Partial) => i += 1,
                Ok(Fill::Full) => {
                    let p = self.pending.swap_remove(i);
                    if let Err(e) = self.admit(p) {
                        tracing::warn!(target: "dqplb::net", "listener {}: dropped a connection: {}", self.handle.addr, e.msg);
                    }
                }
                Ok(Fill::Eof) => {
                    tracing::warn!(target: "dqplb::net", "listener {}: dropped a connection from {} that closed before its hello ({} of {HELLO_BYTES} bytes)", self.handle.addr, p.peer, p.got);
                    self.pending.swap_remove(i);
                }
                Err(e) => {
                    tracing::warn!(target: "dqplb::net", "listener {}: dropped a connection before its hello: {}", self.handle.addr, e.msg);
                    self.pending.swap_remove(i);
                }
            }
        }
    }

    fn admit(&mut self, p: PendingHello) -> NetResult<()> {
        let h = Hello::decode(&p.buf)
            .map_err(|e| NetError::remote(format!("from {}: {}", p.peer, e.msg)))?;
        if h.version != PROTOCOL_VERSION {
            return Err(NetError::remote(format!(
                "from {}: protocol version {} (this plugin speaks {PROTOCOL_VERSION})",
                p.peer, h.version
            )));
        }
        if h.secret != self.handle.secret {
            return Err(NetError::remote(format!(
                "from {}: wrong connection secret",
                p.peer
            )));
        }
        h.params
            .validate()
            .map_err(|e| NetError::remote(format!("from {}: {}", p.peer, e.msg)))?;
        let n = h.params.qps as usize + 1;
        if h.stream as usize >= n {
            return Err(NetError::remote(format!(
                "from {}: stream index {} of a {n}-stream connection",
                p.peer, h.stream
            )));
        }
        let gi = match self.groups.iter().position(|g| g.conn_id == h.conn_id) {
            Some(gi) => gi,
            None => {
                self.groups.push(Group {
                    conn_id: h.conn_id,
                    params: h.params,
                    streams: (0..n).map(|_| None).collect(),
                    since: Instant::now(),
                });
                self.groups.len() - 1
            }
        };
        let g = &mut self.groups[gi];
        if g.params != h.params || g.streams[h.stream as usize].is_some() {
            let why = if g.params != h.params {
                "parameters differ between streams"
            } else {
                "duplicate stream"
            };
            self.groups.swap_remove(gi);
            return Err(NetError::remote(format!(
                "from {}: connection {:#x}: {why}; connection dropped",
                p.peer, h.conn_id
            )));
        }
        g.streams[h.stream as usize] = Some(p.sock);
        Ok(())
    }
}
