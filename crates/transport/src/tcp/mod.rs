//! TCP transport: one control stream plus one data stream per engine QP, segments framed with their
//! immediate and acknowledged per stream (the sender's CQE), all on non-blocking sockets.

pub mod connect;
pub mod handle;
mod hello;
pub mod iface;
pub mod io;
pub mod listen;
pub mod recv;
pub(crate) mod repath;
pub mod send;
mod warns;
pub mod wire;
pub mod workers;

pub use connect::{TcpConnector, HANDSHAKE_TIMEOUT};
pub use handle::{ListenHandle, HANDLE_BYTES};
pub use listen::TcpListenComm;
pub use recv::TcpRecvComm;
pub use send::TcpSendComm;
pub use wire::ConnParams;

use std::time::Duration;

use socket2::{Socket, TcpKeepalive};

use crate::{NetError, NetResult};

/// TCP_KEEPIDLE of every stream: idle time before the first keepalive probe.
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(20);
/// TCP_KEEPINTVL: time between unanswered probes.
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// TCP_KEEPCNT: unanswered probes before the connection is reset (ETIMEDOUT).
pub(crate) const KEEPALIVE_COUNT: u32 = 6;

/// Socket options for every stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpOptions {
    /// SO_SNDBUF/SO_RCVBUF in bytes; 0 leaves the kernel's autotuning alone.
    pub socket_buffer_bytes: usize,
    pub nodelay: bool,
    /// When set, the connecting side binds stream i (0 = control) to source port
    /// base + i x stride.
    pub src_port_base: Option<u16>,
    /// Spacing of those ports (0 or 1: consecutive). The shaped-path bench spaces them by 2 so
    /// that a hash of the port's bits 1..4 puts each stream on its own path, as it does for the
    /// even ephemeral ports Linux gives connect().
    pub src_port_stride: u16,
    /// Path pinning: data stream i binds the first free port of `pinned_ports[i]` (candidates on
    /// one hash bucket, e.g. `engine::pinning`'s ports of one bucket); empty: not pinned.
    pub pinned_ports: Vec<Vec<u16>>,
}

impl TcpOptions {
    pub(crate) fn apply_socket(&self, s: &Socket) -> NetResult<()> {
        let ctx =
            |what: &str, e: std::io::Error| NetError::io(&format!("socket option {what}"), &e);
        if self.nodelay {
            s.set_nodelay(true).map_err(|e| ctx("TCP_NODELAY", e))?;
        }
        if self.socket_buffer_bytes > 0 {
            s.set_send_buffer_size(self.socket_buffer_bytes)
                .map_err(|e| ctx("SO_SNDBUF", e))?;
            s.set_recv_buffer_size(self.socket_buffer_bytes)
                .map_err(|e| ctx("SO_RCVBUF", e))?;
        }
        // A peer host that vanishes without a reset (power loss, cable) surfaces within about
        // KEEPALIVE_IDLE + KEEPALIVE_COUNT * KEEPALIVE_INTERVAL = 50 s, not the kernel's
        // default retransmission timeout of 12-15 minutes.
        let ka = TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_COUNT);
        s.set_tcp_keepalive(&ka)
            .map_err(|e| ctx("SO_KEEPALIVE/TCP_KEEPIDLE/TCP_KEEPINTVL/TCP_KEEPCNT", e))?;
        Ok(())
    }

    /// Applies the options to an accepted stream and makes it non-blocking.
    pub fn apply(&self, s: &std::net::TcpStream) -> NetResult<()> {
        s.set_nonblocking(true)
            .map_err(|e| NetError::io("set non-blocking", &e))?;
        self.apply_socket(&socket2::SockRef::from(s))
    }
}
/// Sets the IP traffic class of a stream: IP_TOS on IPv4, IPV6_TCLASS on IPv6 (NCCL's v10+
/// per-connection trafficClass; overrides nothing else).
pub fn set_traffic_class(fd: std::os::fd::RawFd, ipv6: bool, tc: u8) -> NetResult<()> {
    let (level, name, what) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, "IPV6_TCLASS")
    } else {
        (libc::IPPROTO_IP, libc::IP_TOS, "IP_TOS")
    };
    let v: libc::c_int = tc.into();
    // SAFETY: fd is an open socket owned by the caller; the option value is one int.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(NetError::io(&format!("socket option {what}={tc}"), &e));
    }
    Ok(())
}

/// The process that made a comm: only it shuts the comm's sockets down at close.
///
/// close() only drops a process's reference, so a forked child that inherited the descriptors
/// would keep the connection open (the peer learning of the close only when the child exits).
/// shutdown() acts on the connection itself, so the peer sees EOF at once (on a listening socket
/// it stops the listening). A forked child that closes its inherited copy of a comm must not do
/// that to the parent's live connection: there the close stays a plain close().
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner(u32);

impl Owner {
    pub(crate) fn this_process() -> Owner {
        Owner(std::process::id())
    }

    /// Shuts `fd` down in both directions if this is the owning process (call just before the
    /// descriptor closes). Errors (a socket already reset or never connected) are of no interest.
    pub(crate) fn shutdown(self, fd: &impl std::os::fd::AsRawFd) {
        if std::process::id() == self.0 {
            // SAFETY: fd is an open socket owned by the caller; shutdown takes no pointers.
            unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) };
        }
    }
}

#[cfg(test)]
/// The traffic class a stream carries (IP_TOS or IPV6_TCLASS), for tests and diagnostics.
pub(crate) fn traffic_class_of(fd: std::os::fd::RawFd, ipv6: bool) -> NetResult<u8> {
    let (level, name) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TOS)
    };
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: fd is an open socket; v and len are valid for the kernel to write one int.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(NetError::io("getsockopt traffic class", &e));
    }
    Ok(v as u8)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pin_tests;

#[cfg(test)]
mod abuse_tests;

#[cfg(test)]
mod stage_tests;

#[cfg(test)]
mod ack_tests;

#[cfg(test)]
mod traffic_class_tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn connector_and_listener_set_traffic_class() {
        let opts = TcpOptions::default();
        let mut l = TcpListenComm::bind("127.0.0.1".parse().unwrap(), 0, opts.clone()).unwrap();
        l.set_traffic_class(Some(0x48));
        let p = tests::params(dqplb_engine::PolicyKind::Dqplb, 2);
        let mut c =
            TcpConnector::start_with_traffic_class(l.handle(), p, None, &opts, Some(0x48)).unwrap();
        assert_eq!(c.traffic_classes().unwrap(), vec![0x48; 3]);
        let _comms = tests::connect(&mut l, &mut c);
        // The accepted streams: sockets of this process whose local address is the listener's.
        let addr = l.handle().addr;
        let mut accepted = Vec::new();
        for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
            let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            // SAFETY: borrowed only for the getsockname/getpeername calls below; the fd may be any
            // open descriptor, and a non-socket simply fails them.
            let s = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            let s = socket2::SockRef::from(&s);
            let local = s.local_addr().ok().and_then(|a| a.as_socket());
            if local == Some(addr) && s.peer_addr().is_ok() {
                accepted.push(traffic_class_of(fd, false).unwrap());
            }
        }
        assert_eq!(accepted, vec![0x48; 3]);
    }

    /// Only the process that made a comm shuts its sockets down: a forked child closing its
    /// inherited copy leaves the parent's connection alone.
    #[test]
    fn only_the_owning_process_shuts_a_socket_down() {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut one = [0u8; 1];
        Owner(std::process::id() ^ 1).shutdown(&a);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let e = b
            .read(&mut one)
            .expect_err("another process's close must not end the connection");
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        Owner::this_process().shutdown(&a);
        let mut got = None;
        for _ in 0..1000 {
            match b.read(&mut one) {
                Ok(n) => {
                    got = Some(n);
                    break;
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        assert_eq!(got, Some(0), "the owner's shutdown reaches the peer as EOF");
    }

    #[test]
    fn traffic_class_round_trips_on_a_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert_eq!(traffic_class_of(s.as_raw_fd(), false).unwrap(), 0);
        set_traffic_class(s.as_raw_fd(), false, 0x60).unwrap();
        assert_eq!(traffic_class_of(s.as_raw_fd(), false).unwrap(), 0x60);
    }
}
