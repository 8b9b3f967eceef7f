//! The connecting side: opens the control and data streams without blocking, sends each its hello,
//! and yields a send comm once all are established; called again until then, as NCCL does.

use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::handle::{ListenHandle, PROTOCOL_VERSION};
use super::io::{write_some, StreamName};
use super::send::TcpSendComm;
use super::wire::{ConnParams, Hello, HELLO_BYTES};
use super::TcpOptions;
use crate::{NetError, NetResult};

/// How long a connection may take from connect() to the receiver's answer to the hello (its first
/// control frame) before it fails with an error naming the address: 60 s, NCCL's own budget for
/// a connect that is refused or times out. NCCL 2.24 and later (src/misc/socket.cc
/// socketConnectCheck; src/os/linux.cc from 2.30) retry NCCL_SOCKET_RETRY_CNT = 34 times,
/// sleeping retry x NCCL_SOCKET_RETRY_SLEEP_MSEC = 100 ms before retry n, 59.5 s in all.
/// Split in two: the streams must be connected and greeted within it ([`TcpConnector::progress`]),
/// and the send comm fails if the answer has not come within it of the comm being made.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

enum Stage {
    Connecting(Socket),
    Hello(TcpStream, [u8; HELLO_BYTES], usize),
    Ready(TcpStream),
    Taken,
}

pub struct TcpConnector {
    peer: SocketAddr,
    params: ConnParams,
    conn_id: u64,
    secret: [u8; 16],
    streams: Vec<Stage>,
    opts: TcpOptions,
    traffic_class: Option<u8>,
    started: std::time::Instant,
    /// HANDSHAKE_TIMEOUT unless a test or the operator set another (0: never).
    handshake_timeout_ms: u64,
}

/// Opens a non-blocking TCP connect to `peer` (optionally from `local`); shared with the verbs
/// bootstrap.
pub(crate) fn start_stream(
    peer: SocketAddr,
    local: Option<SocketAddr>,
    opts: &TcpOptions,
) -> NetResult<Socket> {
    let ctx = |what: &str| format!("connect to {peer}: {what}");
    let sock = Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| NetError::io(&ctx("socket"), &e))?;
    sock.set_nonblocking(true)
        .map_err(|e| NetError::io(&ctx("non-blocking"), &e))?;
    if let Some(local) = local {
        sock.set_reuse_address(true)
            .map_err(|e| NetError::io(&ctx("SO_REUSEADDR"), &e))?;
        sock.bind(&SockAddr::from(local))
            .map_err(|e| NetError::io(&ctx(&format!("bind {local}")), &e))?;
    }
    opts.apply_socket(&sock)?;
    match sock.connect(&SockAddr::from(peer)) {
        Ok(()) => {}
        Err(e)
            if e.raw_os_error() == Some(libc::EINPROGRESS)
                || e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(NetError::io(&ctx("connect"), &e)),
    }
    Ok(sock)
}

/// Opens a non-blocking data stream to `peer` bound to `ip` and the first port of `ports` that is
/// free: bind's EADDRINUSE, or connect's EADDRNOTAVAIL when that 4-tuple is taken, moves on to
/// the next candidate (the pinner gives ports of the same bucket). Returns the port used.
pub(crate) fn start_pinned_stream(
    peer: SocketAddr,
    ip: IpAddr,
    ports: &[u16],
    opts: &TcpOptions,
) -> NetResult<(Socket, u16)> {
    let ctx = |what: &str| format!("connect to {peer}: {what}");
    let mut busy = Vec::new();
    for &port in ports {
        let local = SocketAddr::new(ip, port);
        let sock = Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| NetError::io(&ctx("socket"), &e))?;
        sock.set_nonblocking(true)
            .map_err(|e| NetError::io(&ctx("non-blocking"), &e))?;
        sock.set_reuse_address(true)
            .map_err(|e| NetError::io(&ctx("SO_REUSEADDR"), &e))?;
        match sock.bind(&SockAddr::from(local)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
                busy.push(port);
                continue;
            }
            Err(e) => return Err(NetError::io(&ctx(&format!("bind {local}")), &e)),
        }
        opts.apply_socket(&sock)?;
        match sock.connect(&SockAddr::from(peer)) {
            Ok(()) => return Ok((sock, port)),
            Err(e)
                if e.raw_os_error() == Some(libc::EINPROGRESS)
                    || e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                return Ok((sock, port))
            }
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => busy.push(port),
            Err(e) => return Err(NetError::io(&ctx("connect"), &e)),
        }
    }
    Err(NetError::system(format!(
        "connect to {peer}: every pinned source port is in use ({busy:?})"
    )))
}

/// Whether a non-blocking connect finished: Ok(true) connected, Ok(false) still in progress.
pub(crate) fn connect_done(sock: &Socket, peer: SocketAddr) -> NetResult<bool> {
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout: never blocks.
    let r = unsafe { libc::poll(&mut pfd, 1, 0) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(NetError::io(&format!("connect to {peer}: poll"), &e));
    }
    if r == 0 {
        return Ok(false);
    }
    match sock.take_error() {
        Ok(None) => Ok(true),
        Ok(Some(e)) | Err(e) => Err(NetError::io(&format!("connect to {peer}"), &e)),
    }
}

impl TcpConnector {
    /// Starts connecting `params.qps + 1` streams to the listener in `handle`. With a source port
    /// base, stream i binds local port base+i (predictable ports for per-path shaping).
    pub fn start(
        handle: &ListenHandle,
        params: ConnParams,
        local_ip: Option<IpAddr>,
        opts: &TcpOptions,
    ) -> NetResult<TcpConnector> {
        Self::start_with_traffic_class(handle, params, local_ip, opts, None)
    }

    /// As `start`, with every stream's IP_TOS / IPV6_TCLASS set to `traffic_class` (NCCL v10+
    /// connection config; None leaves the kernel default).
    pub fn start_with_traffic_class(
        handle: &ListenHandle,
        params: ConnParams,
        local_ip: Option<IpAddr>,
        opts: &TcpOptions,
        traffic_class: Option<u8>,
    ) -> NetResult<TcpConnector> {
        let id = super::handle::random_secret()?;
        let mut conn_id = [0u8; 8];
        conn_id.copy_from_slice(&id[..8]);
        let mut streams = Vec::with_capacity(params.qps as usize + 1);
        let any = if handle.addr.is_ipv4() {
            IpAddr::from([0u8; 4])
        } else {
            IpAddr::from([0u16; 8])
        };
        for i in 0..=params.qps {
            // Data stream i binds a pinned port when path pinning gave it candidates.
            if let Some(ports) = (i > 0)
                .then(|| opts.pinned_ports.get(usize::from(i) - 1))
                .flatten()
                .filter(|p| !p.is_empty())
            {
                let (sock, _) =
                    start_pinned_stream(handle.addr, local_ip.unwrap_or(any), ports, opts)?;
                if let Some(tc) = traffic_class {
                    super::set_traffic_class(sock.as_raw_fd(), handle.addr.is_ipv6(), tc)?;
                }
                streams.push(Stage::Connecting(sock));
                continue;
            }
            let local = match opts.src_port_base {
                Some(base) => {
                    let stride = opts.src_port_stride.max(1);
                    let port = i
                        .checked_mul(stride)
                        .and_then(|off| base.checked_add(off))
                        .ok_or_else(|| {
                            NetError::invalid_argument(format!(
                                "source port base {base} + stream {i} x {stride} exceeds 65535"
                            ))
                        })?;
                    Some(SocketAddr::new(local_ip.unwrap_or(any), port))
                }
                None => None,
            };
            let sock = start_stream(handle.addr, local, opts)?;
            if let Some(tc) = traffic_class {
                super::set_traffic_class(sock.as_raw_fd(), handle.addr.is_ipv6(), tc)?;
            }
            streams.push(Stage::Connecting(sock));
        }
        Ok(TcpConnector {
            peer: handle.addr,
            params,
            conn_id: u64::from_le_bytes(conn_id),
            secret: handle.secret,
            streams,
            opts: opts.clone(),
            traffic_class,
            started: std::time::Instant::now(),
            handshake_timeout_ms: HANDSHAKE_TIMEOUT.as_millis() as u64,
        })
    }

    /// Sets the handshake timeout (see [`HANDSHAKE_TIMEOUT`]) of this connection, the send comm
    /// included; 0 waits for ever.
    pub fn set_handshake_timeout_ms(&mut self, ms: u64) {
        self.handshake_timeout_ms = ms;
    }

    /// The traffic class of each stream still held here (tests).
    #[cfg(test)]
    pub(crate) fn traffic_classes(&self) -> NetResult<Vec<u8>> {
        let v6 = self.peer.is_ipv6();
        self.streams
            .iter()
            .filter_map(|st| match st {
                Stage::Connecting(s) => Some(s.as_raw_fd()),
                Stage::Hello(s, ..) | Stage::Ready(s) => Some(s.as_raw_fd()),
                Stage::Taken => None,
            })
            .map(|fd| super::traffic_class_of(fd, v6))
            .collect()
    }

    /// Advances every stream; the send comm once all are connected and greeted.
    pub fn progress(&mut self) -> NetResult<Option<TcpSendComm>> {
        let limit = self.handshake_timeout_ms;
        if limit > 0 && self.started.elapsed().as_millis() > u128::from(limit) {
            let done = self
                .streams
                .iter()
                .filter(|s| matches!(s, Stage::Ready(_)))
                .count();
            return Err(NetError::remote(format!(
                "connect to {}: {done} of {} streams connected and greeted in {limit} ms: the listener does not accept (full backlog, filtered or unreachable)",
                self.peer,
                self.streams.len()
            )));
        }
        for (i, st) in self.streams.iter_mut().enumerate() {
            let name = StreamName {
                peer: self.peer,
                index: i as u16,
            };
            if let Stage::Connecting(sock) = st {
                if !connect_done(sock, self.peer)? {
                    continue;
                }
                let Stage::Connecting(sock) = std::mem::replace(st, Stage::Taken) else {
                    continue;
                };
                let hello = Hello {
                    version: PROTOCOL_VERSION,
                    stream: i as u16,
                    gen: 0,
                    conn_id: self.conn_id,
                    secret: self.secret,
                    params: self.params,
                };
                *st = Stage::Hello(sock.into(), hello.encode(), 0);
            }
            if let Stage::Hello(sock, buf, sent) = st {
                while *sent < HELLO_BYTES {
                    let n = write_some(sock, &[IoSlice::new(&buf[*sent..])], &name)?;
                    if n == 0 {
                        break;
                    }
                    *sent += n;
                }
                if *sent == HELLO_BYTES {
                    let Stage::Hello(sock, ..) = std::mem::replace(st, Stage::Taken) else {
                        continue;
                    };
                    *st = Stage::Ready(sock);
                }
            }
        }
        if !self.streams.iter().all(|s| matches!(s, Stage::Ready(_))) {
            return Ok(None);
        }
        let mut socks = std::mem::take(&mut self.streams)
            .into_iter()
            .filter_map(|s| match s {
                Stage::Ready(sock) => Some(sock),
                _ => None,
            });
        let Some(ctrl) = socks.next() else {
            return Err(NetError::internal(
                "connector finished without a control stream",
            ));
        };
        let data: Vec<TcpStream> = socks.collect();
        let setup = super::repath::StreamSetup {
            conn_id: self.conn_id,
            secret: self.secret,
            params: self.params,
            opts: self.opts.clone(),
            traffic_class: self.traffic_class,
        };
        let mut comm = TcpSendComm::new(ctrl, data, setup)?;
        comm.set_handshake_timeout_ms(self.handshake_timeout_ms);
        for (local, peer) in comm.data_stream_addrs() {
            tracing::debug!(target: "dqplb::net", "data stream {local} -> {peer}");
        }
        Ok(Some(comm))
    }
}
