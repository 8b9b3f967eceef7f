//! The connecting (sending) side of a verbs connection: non-blocking bootstrap connect, OPEN with
//! its QP endpoints and FIFO, the listener's REPLY, QP connection, READY; then a send comm.

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use socket2::Socket;

use super::bootstrap::{encode_open, hello, keepalive, pull, push, qp_config};
use super::domain::VerbsDomain;
use super::fifo::region_bytes;
use super::qpset::{ConnInfo, PortPinner, QpSet};
use super::recv::READY;
use super::resources::RegisteredBuffer;
use super::send::{verr, VerbsSendComm};
use crate::tcp::connect::{connect_done, start_stream};
use crate::tcp::{ConnParams, ListenHandle, TcpOptions};
use crate::{NetError, NetResult};

enum Stage {
    Connecting(Socket),
    Open {
        sock: TcpStream,
        out: Vec<u8>,
        sent: usize,
    },
    Reply {
        sock: TcpStream,
        buf: Vec<u8>,
        got: usize,
    },
    Ready {
        sock: TcpStream,
        sent: usize,
    },
    Taken,
}

pub struct VerbsConnector {
    peer: SocketAddr,
    params: ConnParams,
    stage: Stage,
    open: Vec<u8>,
    qps: Option<QpSet>,
    fifo: Option<RegisteredBuffer>,
}

impl VerbsConnector {
    /// Creates the QP set and FIFO on `domain` and starts the bootstrap connect to `handle`.
    pub fn start(
        handle: &ListenHandle,
        params: ConnParams,
        domain: &Arc<VerbsDomain>,
    ) -> NetResult<Self> {
        Self::start_with_traffic_class(handle, params, domain, None)
    }

    /// As `start`, with the data QPs' GRH traffic class set to `traffic_class` (NCCL v10+
    /// connection config, overriding NCCL_IB_TC; the FIFO QP keeps NCCL_IB_FIFO_TC).
    pub fn start_with_traffic_class(
        handle: &ListenHandle,
        params: ConnParams,
        domain: &Arc<VerbsDomain>,
        traffic_class: Option<u8>,
    ) -> NetResult<Self> {
        params.validate()?;
        let peer = handle.addr;
        let mut tuning = *domain.tuning();
        if let Some(tc) = traffic_class {
            tuning.traffic_class = tc;
        }
        let qps = QpSet::new(
            domain.pd(),
            domain.port(),
            tuning,
            qp_config(&params, false),
        )
        .map_err(verr)?;
        let fifo =
            RegisteredBuffer::new(domain.pd(), region_bytes(params.max_messages)).map_err(verr)?;
        let opts = TcpOptions {
            nodelay: true,
            ..TcpOptions::default()
        };
        let sock = start_stream(peer, None, &opts)
            .map_err(|e| NetError::new(e.code, format!("verbs bootstrap: {}", e.msg)))?;
        let h = hello(params, handle.secret)?;
        let open = encode_open(&h, fifo.mr().remote(0).map_err(verr)?, qps.local_info());
        Ok(VerbsConnector {
            peer,
            params,
            stage: Stage::Connecting(sock),
            open,
            qps: Some(qps),
            fifo: Some(fifo),
        })
    }

    /// Pins the data QPs' UDP source ports with `pinner` when they connect (path pinning).
    pub fn set_port_pinner(&mut self, pinner: Arc<dyn PortPinner>) {
        if let Some(q) = self.qps.as_mut() {
            q.set_port_pinner(pinner);
        }
    }

    /// Advances the handshake without blocking; the send comm once the peer is connected.
    pub fn progress(&mut self) -> NetResult<Option<VerbsSendComm>> {
        let who = format!("verbs bootstrap to {}", self.peer);
        loop {
            match std::mem::replace(&mut self.stage, Stage::Taken) {
                Stage::Connecting(sock) => {
                    if !connect_done(&sock, self.peer)? {
                        self.stage = Stage::Connecting(sock);
                        return Ok(None);
                    }
                    keepalive(socket2::SockRef::from(&sock), &who)?;
                    let out = std::mem::take(&mut self.open);
                    self.stage = Stage::Open {
                        sock: sock.into(),
                        out,
                        sent: 0,
                    };
                }
                Stage::Open {
                    mut sock,
                    out,
                    mut sent,
                } => {
                    if !push(&mut sock, &out, &mut sent, &who)? {
                        self.stage = Stage::Open { sock, out, sent };
                        return Ok(None);
                    }
                    let len = ConnInfo::wire_len(self.params.qps as usize);
                    self.stage = Stage::Reply {
                        sock,
                        buf: vec![0; len],
                        got: 0,
                    };
                }
                Stage::Reply {
                    mut sock,
                    mut buf,
                    mut got,
                } => {
                    if !pull(&mut sock, &mut buf, &mut got, &who)? {
                        self.stage = Stage::Reply { sock, buf, got };
                        return Ok(None);
                    }
                    let remote = ConnInfo::decode(&buf)
                        .map_err(|e| NetError::remote(format!("{who}: reply: {e}")))?;
                    let qps = self
                        .qps
                        .as_mut()
                        .ok_or_else(|| NetError::internal("verbs connector lost its QP set"))?;
                    qps.connect(&remote).map_err(verr)?;
                    self.stage = Stage::Ready { sock, sent: 0 };
                }
                Stage::Ready { mut sock, mut sent } => {
                    if !push(&mut sock, &[READY], &mut sent, &who)? {
                        self.stage = Stage::Ready { sock, sent };
                        return Ok(None);
                    }
                    let (Some(qps), Some(fifo)) = (self.qps.take(), self.fifo.take()) else {
                        return Err(NetError::internal("verbs connector finished twice"));
                    };
                    tracing::info!(target: "dqplb::net", "verbs: connected to {} on {} with {} data QPs",
                        self.peer, qps.device(), self.params.qps);
                    return VerbsSendComm::new(qps, fifo, self.params, self.peer.to_string(), sock)
                        .map(Some);
                }
                Stage::Taken => {
                    return Err(NetError::internal(format!(
                        "{who}: connector used after it finished or failed"
                    )))
                }
            }
        }
    }
}
