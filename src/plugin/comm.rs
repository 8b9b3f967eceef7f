//! Listen, send and receive comms as NCCL sees them, over whichever transport carries them; memory
//! registrations; per-QP statistics logged when a comm closes.

use crate::transport::tcp::{TcpListenComm, TcpRecvComm, TcpSendComm};
use crate::transport::{NetError, NetResult, UserBuf};

pub struct ListenComm {
    pub(super) dev: i32,
    pub(super) tcp: TcpListenComm,
}

pub struct SendComm {
    tcp: TcpSendComm,
    log_stats: bool,
}

pub struct RecvComm {
    tcp: TcpRecvComm,
}

/// A registered region (host memory for TCP: bookkeeping only, checked on use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemHandle {
    pub addr: usize,
    pub len: usize,
    pub kind: i32,
}

impl MemHandle {
    fn covers(&self, buf: &UserBuf) -> bool {
        buf.is_empty()
            || (buf.addr() >= self.addr && buf.addr() + buf.len() <= self.addr + self.len)
    }
}

fn check_mr(buf: &UserBuf, mh: Option<&MemHandle>, what: &str) -> NetResult<()> {
    match mh {
        Some(m) if !m.covers(buf) => Err(NetError::invalid_argument(format!(
            "{what} buffer {:#x}+{} lies outside its registration {:#x}+{}",
            buf.addr(),
            buf.len(),
            m.addr,
            m.len
        ))),
        _ => Ok(()),
    }
}

impl ListenComm {
    pub fn accept(&mut self) -> NetResult<Option<RecvComm>> {
        Ok(self.tcp.accept()?.map(|tcp| {
            let p = tcp.params();
            tracing::info!(target: "dqplb::net", "dev {} accepted a connection: {} data QPs, {} outstanding, {} B segments, policy {}",
                self.dev, p.qps, p.outstanding, p.segment_bytes, p.policy);
            RecvComm { tcp }
        }))
    }
}

impl SendComm {
    pub(super) fn new(tcp: TcpSendComm, log_stats: bool) -> SendComm {
        SendComm { tcp, log_stats }
    }
    pub fn max_requests(&self) -> usize {
        self.tcp.max_requests()
    }
    pub fn isend(
        &mut self,
        buf: UserBuf,
        tag: i32,
        mh: Option<&MemHandle>,
    ) -> NetResult<Option<u32>> {
        check_mr(&buf, mh, "isend")?;
        self.tcp.isend(buf, tag)
    }
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        self.tcp.test(slot)
    }
    /// Per-QP engine statistics (segments, bytes, outstanding, completion latency in ns).
    pub fn qp_stats(&self) -> &[crate::engine::QpStats] {
        self.tcp.qp_stats()
    }
    pub fn data_stream_addrs(&self) -> Vec<(std::net::SocketAddr, std::net::SocketAddr)> {
        self.tcp.data_stream_addrs()
    }
}

impl Drop for SendComm {
    fn drop(&mut self) {
        if !self.log_stats {
            return;
        }
        for (qp, s) in self.tcp.qp_stats().iter().enumerate() {
            tracing::info!(target: "dqplb::stats", "send comm closed: QP {qp}: {s:?}");
        }
    }
}

impl RecvComm {
    pub fn max_requests(&self) -> usize {
        self.tcp.max_requests()
    }
    /// NCCL's grouped receive; this plugin advertises maxRecvs = 1.
    pub fn irecv(
        &mut self,
        bufs: &[(UserBuf, i32)],
        mhs: &[Option<&MemHandle>],
    ) -> NetResult<Option<u32>> {
        let [(buf, tag)] = bufs else {
            return Err(NetError::invalid_argument(format!(
                "irecv with {} buffers: this plugin advertises maxRecvs = 1",
                bufs.len()
            )));
        };
        check_mr(buf, mhs.first().copied().flatten(), "irecv")?;
        self.tcp.irecv(*buf, *tag)
    }
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        self.tcp.test(slot)
    }
}
