//! TCP transport: one control stream plus one data stream per engine QP, segments framed with their
//! immediate and acknowledged per stream (the sender's CQE), all on non-blocking sockets.

pub mod connect;
pub mod handle;
pub mod iface;
pub mod io;
pub mod listen;
pub mod recv;
pub mod send;
pub mod wire;

pub use connect::TcpConnector;
pub use handle::{ListenHandle, HANDLE_BYTES};
pub use listen::TcpListenComm;
pub use recv::TcpRecvComm;
pub use send::TcpSendComm;
pub use wire::ConnParams;

use std::time::Duration;

use socket2::{Socket, TcpKeepalive};

use crate::transport::{NetError, NetResult};

/// TCP_KEEPIDLE of every stream: idle time before the first keepalive probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(20);
/// TCP_KEEPINTVL: time between unanswered probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// TCP_KEEPCNT: unanswered probes before the connection is reset (ETIMEDOUT).
pub const KEEPALIVE_COUNT: u32 = 6;

/// Socket options for every stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpOptions {
    /// SO_SNDBUF/SO_RCVBUF in bytes; 0 leaves the kernel's autotuning alone.
    pub socket_buffer_bytes: usize,
    pub nodelay: bool,
    /// When set, the connecting side binds stream i (0 = control) to source port base + i.
    pub src_port_base: Option<u16>,
}

impl TcpOptions {
    pub fn apply_socket(&self, s: &Socket) -> NetResult<()> {
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
#[cfg(test)]
mod tests;
