//! The listening side of a verbs connection: a non-blocking bootstrap listener that reads each
//! sender's OPEN, builds and connects a matching QP set, replies with its endpoints and yields a
//! receive comm; never blocks (NCCL calls accept again until it gets one).

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;

use super::bootstrap::{decode_open_tail, keepalive, open_len, pull, push, qp_config};
use super::domain::VerbsDomain;
use super::qpset::QpSet;
use super::recv::VerbsRecvComm;
use super::resources::RemoteSlice;
use super::send::verr;
use crate::tcp::handle::{random_secret, ListenHandle, PROTOCOL_VERSION};
use crate::tcp::wire::{Hello, HELLO_BYTES};
use crate::tcp::ConnParams;
use crate::{NetError, NetResult};

enum Stage {
    Hello {
        buf: [u8; HELLO_BYTES],
        got: usize,
    },
    Open {
        params: ConnParams,
        buf: Vec<u8>,
        got: usize,
    },
    Reply {
        // boxed: a QP set dwarfs the other stages
        qps: Box<QpSet>,
        params: ConnParams,
        fifo: RemoteSlice,
        out: Vec<u8>,
        sent: usize,
    },
}

struct Pending {
    sock: TcpStream,
    peer: SocketAddr,
    stage: Stage,
}

pub struct VerbsListenComm {
    listener: TcpListener,
    handle: ListenHandle,
    domain: Arc<VerbsDomain>,
    /// GRH traffic class of accepted connections' data QPs (None: NCCL_IB_TC).
    traffic_class: Option<u8>,
    pending: Vec<Pending>,
}

impl VerbsListenComm {
    /// Binds an ephemeral bootstrap port on `ip`; the handle carries it, `fabric_id` and a secret.
    pub fn bind(ip: IpAddr, fabric_id: u32, domain: Arc<VerbsDomain>) -> NetResult<Self> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .map_err(|e| NetError::io(&format!("verbs bootstrap listen on {ip}"), &e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| NetError::io("verbs bootstrap listener non-blocking", &e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| NetError::io("verbs bootstrap listener address", &e))?;
        Ok(VerbsListenComm {
            listener,
            handle: ListenHandle {
                addr,
                fabric_id,
                secret: random_secret()?,
            },
            domain,
            traffic_class: None,
            pending: Vec::new(),
        })
    }

    /// Sets the data QPs' traffic class of connections accepted from now on (NCCL v11+
    /// per-communicator trafficClass; None: NCCL_IB_TC).
    pub fn set_traffic_class(&mut self, tc: Option<u8>) {
        self.traffic_class = tc;
    }

    pub fn handle(&self) -> &ListenHandle {
        &self.handle
    }

    pub fn domain(&self) -> &Arc<VerbsDomain> {
        &self.domain
    }

    /// A receive comm once some sender completed the handshake; None until then.
    pub fn accept(&mut self) -> NetResult<Option<VerbsRecvComm>> {
        loop {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    if let Err(e) = sock.set_nonblocking(true) {
                        tracing::warn!(target: "dqplb::net", "verbs listener: dropping {peer}: {e}");
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    if let Err(e) = keepalive(socket2::SockRef::from(&sock), "verbs listener") {
                        tracing::warn!(target: "dqplb::net", "verbs listener: dropping {peer}: {}", e.msg);
                        continue;
                    }
                    self.pending.push(Pending {
                        sock,
                        peer,
                        stage: Stage::Hello {
                            buf: [0; HELLO_BYTES],
                            got: 0,
                        },
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(NetError::io(&format!("accept on {}", self.handle.addr), &e)),
            }
        }
        let mut i = 0;
        while i < self.pending.len() {
            match self.advance(i) {
                Ok(None) => i += 1,
                Ok(Some(comm)) => return Ok(Some(comm)),
                Err(e) => {
                    let p = self.pending.swap_remove(i);
                    tracing::warn!(target: "dqplb::net", "verbs listener {}: dropped connection from {}: {}", self.handle.addr, p.peer, e.msg);
                }
            }
        }
        Ok(None)
    }

    fn advance(&mut self, i: usize) -> NetResult<Option<VerbsRecvComm>> {
        let who = format!("verbs bootstrap from {}", self.pending[i].peer);
        loop {
            let p = &mut self.pending[i];
            match &mut p.stage {
                Stage::Hello { buf, got } => {
                    if !pull(&mut p.sock, buf, got, &who)? {
                        return Ok(None);
                    }
                    let h = Hello::decode(buf)
                        .map_err(|e| NetError::remote(format!("{who}: {}", e.msg)))?;
                    check_hello(&h, &self.handle.secret, &who)?;
                    let rest = open_len(h.params.qps) - HELLO_BYTES;
                    p.stage = Stage::Open {
                        params: h.params,
                        buf: vec![0; rest],
                        got: 0,
                    };
                }
                Stage::Open { params, buf, got } => {
                    if !pull(&mut p.sock, buf, got, &who)? {
                        return Ok(None);
                    }
                    let params = *params;
                    let (fifo, remote) = decode_open_tail(buf)?;
                    if remote.data.len() != params.qps as usize {
                        return Err(NetError::remote(format!(
                            "{who}: {} data QP endpoints for {} QPs",
                            remote.data.len(),
                            params.qps
                        )));
                    }
                    let d = &self.domain;
                    let mut tuning = *d.tuning();
                    if let Some(tc) = self.traffic_class {
                        tuning.traffic_class = tc;
                    }
                    let mut qps = QpSet::new(d.pd(), d.port(), tuning, qp_config(&params, true))
                        .map_err(verr)?;
                    qps.connect(&remote).map_err(verr)?;
                    // the SRQ is filled before the reply: the sender's credit starts at its depth
                    if let Some(srq) = qps.srq() {
                        srq.post_zero_len(srq.depth()).map_err(verr)?;
                    }
                    let out = qps.local_info().encode();
                    p.stage = Stage::Reply {
                        qps: Box::new(qps),
                        params,
                        fifo,
                        out,
                        sent: 0,
                    };
                }
                Stage::Reply { out, sent, .. } => {
                    if !push(&mut p.sock, out, sent, &who)? {
                        return Ok(None);
                    }
                    let p = self.pending.swap_remove(i);
                    let Stage::Reply {
                        qps, params, fifo, ..
                    } = p.stage
                    else {
                        return Err(NetError::internal("verbs listener stage vanished"));
                    };
                    tracing::info!(target: "dqplb::net", "verbs: accepted {} on {} with {} data QPs, {} outstanding, {} B segments",
                        p.peer, self.domain.name(), params.qps, params.outstanding, params.segment_bytes);
                    return VerbsRecvComm::new(*qps, p.sock, fifo, params, p.peer.to_string())
                        .map(Some);
                }
            }
        }
    }
}

fn check_hello(h: &Hello, secret: &[u8; 16], who: &str) -> NetResult<()> {
    if h.version != PROTOCOL_VERSION {
        return Err(NetError::remote(format!(
            "{who}: protocol version {} (this plugin speaks {PROTOCOL_VERSION})",
            h.version
        )));
    }
    if &h.secret != secret {
        return Err(NetError::remote(format!("{who}: wrong connection secret")));
    }
    h.params
        .validate()
        .map_err(|e| NetError::remote(format!("{who}: {}", e.msg)))
}
